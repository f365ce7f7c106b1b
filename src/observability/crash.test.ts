import { spawnSync } from 'node:child_process';
import { describe, expect, it } from '@jest/globals';

/**
 * An unhandled rejection or an uncaught exception ends the hub's process with status 1, as Node's
 * default does, but its line goes through the logger, masked: Node's own report printed the error to
 * standard error as it was, a credential in its message included.
 */
const SECRET = 'Db-pa55word-xyz';

const script = (throwing: 'reject' | 'throw') => `
  import { createLogger, registerSecret, setLogger } from ${JSON.stringify(new URL('./logger.ts', import.meta.url).href)};
  import { installCrashLogging } from ${JSON.stringify(new URL('./crash.ts', import.meta.url).href)};
  setLogger(createLogger({ level: 'info', json: true }));
  registerSecret(${JSON.stringify(SECRET)});
  installCrashLogging();
  const failure = new Error('could not reach postgres://svc:${SECRET}@db.internal:5432/hub');
  ${throwing === 'reject' ? 'Promise.reject(failure);' : 'setTimeout(() => { throw failure; }, 0);'}
  setTimeout(() => process.exit(0), 5_000);
`;

describe('installCrashLogging', () => {
  it.each([
    ['an unhandled rejection', 'reject' as const],
    ['an uncaught exception', 'throw' as const],
  ])('%s: exit status 1, one fatal line, the credential masked on every stream', (_name, throwing) => {
    const result = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script(throwing)], {
      env: { PATH: process.env.PATH, HOME: process.env.HOME },
      encoding: 'utf8',
      timeout: 30_000,
    });
    expect(result.status).toBe(1);
    expect(`${result.stdout}${result.stderr}`).not.toContain(SECRET);
    const fatal = result.stdout
      .split('\n')
      .filter((line) => line.trim())
      .map((line) => JSON.parse(line) as { level: string; msg: string })
      .find((line) => line.level === 'fatal');
    expect(fatal?.msg).toMatch(/nothing (handled|caught) it: could not reach postgres:\/\/\*\*\*@db\.internal:5432\/hub; the process stops \(exit status 1\)$/);
  }, 60_000);
});
