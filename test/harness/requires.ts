import { describe, it } from '@jest/globals';

/**
 * `describe` for a suite that needs something from the machine (a real OpenSSH server, tmux):
 * `problem` says what is missing, or is undefined when nothing is. On a workstation the suite is
 * then skipped with a warning; in CI (`CI` set) it is one failing test that says what to install,
 * so a missing install step never passes silently. Kept apart from the harnesses themselves
 * (sshd.ts, tmux.ts), which benchmarks import outside jest.
 */
export function describeRequiring(problem: string | undefined, what: string, name: string, body: () => void): void {
  const inCi = Boolean(process.env.CI) && !['false', '0'].includes(process.env.CI!.toLowerCase());
  if (!problem) {
    describe(name, body);
  } else if (!inCi) {
    console.warn(`skipping ${name}: ${problem}`);
    // biome-ignore lint/suspicious/noSkippedTests: skipped only on a workstation without the tool, with a warning; CI fails instead
    describe.skip(name, body);
  } else {
    describe(name, () => {
      it(`needs ${what}`, () => {
        throw new Error(problem);
      });
    });
  }
}
