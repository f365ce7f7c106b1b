import { describe, expect, it } from '@jest/globals';
import { captureLogs } from '../test/harness/log-capture.js';
import { boundedCommand, type OneShot } from './stop.js';

/**
 * The one-shot commands' bounded stop (`svc-hub run`, `secrets`, `outbox`): from the first signal,
 * or from the work's end, the rest has the time limit; the work itself is not cut before that. The
 * executable's own tests (cmd/svc-hub.test.ts) stop each command on a frozen database.
 */

const never = () => new Promise<never>(() => undefined);
const resolvesAfter = <T>(ms: number, value: T) => new Promise<T>((resolve) => setTimeout(() => resolve(value), ms));

async function logged(command: OneShot): Promise<{ code: number | string; lines: string[] }> {
  const logs = captureLogs('info');
  let code: number | string;
  try {
    code = await boundedCommand(command).catch((err: Error) => `threw ${err.message}`);
  } finally {
    logs.restore();
  }
  return { code, lines: logs.lines().map((l) => `${l.level} ${l.msg}`) };
}

describe('a one-shot command', () => {
  it('whose close hangs after its work: exit 1 once the limit has passed from the work\'s end, naming the close', async () => {
    const began = performance.now();
    const { code, lines } = await logged({ work: () => resolvesAfter(300, 0), workStep: 'the work', close: never, closeStep: 'the close', limitMs: 200 });
    expect(code).toBe(1);
    // Counted from the work's end, not from the start.
    expect(performance.now() - began).toBeGreaterThanOrEqual(490);
    expect(lines).toEqual(['error the stop did not end within 200 ms; still pending: the close. Exiting without waiting for them']);
  });

  it('stopped by a signal while its work hangs: exit 1 once the limit has passed from the signal, naming the work and the close\'s own steps', async () => {
    const stop = new AbortController();
    setTimeout(() => stop.abort(), 100);
    const { code, lines } = await logged({
      work: never,
      workStep: 'the work',
      close: async () => undefined,
      closeSteps: () => ["the connector runs' end"],
      stop: stop.signal,
      limitMs: 200,
    });
    expect(code).toBe(1);
    expect(lines).toEqual(["error the stop did not end within 200 ms; still pending: the work; the connector runs' end. Exiting without waiting for them"]);
  });

  it('without a signal, its work takes what it takes (longer than the limit): its own exit code, the close run', async () => {
    let closed = false;
    const { code, lines } = await logged({
      work: () => resolvesAfter(300, 3),
      workStep: 'the work',
      close: async () => {
        closed = true;
      },
      limitMs: 100,
    });
    expect({ code, closed, lines }).toEqual({ code: 3, closed: true, lines: [] });
  });

  it('stopped by a signal (one that came before it began too), ending within the limit: its own exit code', async () => {
    const { code } = await logged({ work: () => resolvesAfter(50, 1), workStep: 'the work', close: () => resolvesAfter(50, undefined), stop: AbortSignal.abort(), limitMs: 1_000 });
    expect(code).toBe(1);
  });

  it('whose work fails: the close is run and the error passed on', async () => {
    let closed = false;
    const { code } = await logged({
      work: async () => {
        throw new Error('the database cannot be reached');
      },
      workStep: 'the work',
      close: async () => {
        closed = true;
      },
      limitMs: 1_000,
    });
    expect({ code, closed }).toEqual({ code: 'threw the database cannot be reached', closed: true });
  });
});
