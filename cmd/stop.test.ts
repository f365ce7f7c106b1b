import { describe, expect, it } from '@jest/globals';
import { captureLogs } from '../test/harness/log-capture.js';
import { boundedCommand, type OneShot, type PendingSteps, type Role, startedOrInterrupted } from './stop.js';

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

interface FakeHub {
  stop(): Promise<void>;
  stopped: boolean;
}

function fakeHub(): FakeHub {
  const hub = {
    stopped: false,
    async stop() {
      hub.stopped = true;
    },
  };
  return hub;
}

async function roleLogged(role: Partial<Role<FakeHub>> & Pick<Role<FakeHub>, 'start' | 'stop'>): Promise<{ code: number | string; lines: string[] }> {
  const logs = captureLogs('info');
  let code: number | string;
  try {
    code = await startedOrInterrupted<FakeHub>({ run: async () => 0, limitMs: 200, pending: () => ['the final audit flush'], interruptedCode: 0, ...role }).catch((err: Error) => `threw ${err.message}`);
  } finally {
    logs.restore();
  }
  return { code, lines: logs.lines().map((l) => `${l.level} ${l.msg}`) };
}

/**
 * A role's start and a signal during it (`startedOrInterrupted`): the start is interrupted, and from
 * the signal what is left has the stop's limit. The executable's tests (cmd/svc-hub.test.ts) interrupt
 * real starts waiting on the migrations' lock and on a database that does not answer.
 */
describe("a role's start", () => {
  it('interrupted by a signal (the start fails as its waits are cut): one line, the role\'s code for it, no run', async () => {
    const stop = new AbortController();
    let ran = false;
    const { code, lines } = await roleLogged({
      start: () =>
        new Promise((_, reject) => {
          stop.signal.addEventListener('abort', () => reject(new Error('Connection terminated unexpectedly')));
          setTimeout(() => stop.abort(), 20);
        }),
      run: async () => {
        ran = true;
        return 0;
      },
      stop: stop.signal,
      interruptedCode: 1,
    });
    expect({ code, ran, lines }).toEqual({ code: 1, ran: false, lines: ['info the start was interrupted by the stop; what it had acquired is released'] });
  });

  it('that finishes all the same after the signal: the hub is stopped within the limit, 0', async () => {
    const hub = fakeHub();
    const stop = new AbortController();
    setTimeout(() => stop.abort(), 20);
    const { code, lines } = await roleLogged({ start: () => resolvesAfter(100, hub), stop: stop.signal });
    expect({ code, stopped: hub.stopped, lines }).toEqual({ code: 0, stopped: true, lines: ['info stopped'] });
  });

  it('that does not end after the signal: given up once the limit has passed from the signal, naming the start\'s step, 1', async () => {
    const stop = new AbortController();
    setTimeout(() => stop.abort(), 100);
    const began = performance.now();
    const { code, lines } = await roleLogged({ start: (steps: PendingSteps) => steps.step("the outbox listener's start", never()), stop: stop.signal });
    expect(code).toBe(1);
    expect(performance.now() - began).toBeGreaterThanOrEqual(290);
    expect(lines).toEqual(["error the stop did not end within 200 ms; still pending: the outbox listener's start. Exiting without waiting for them"]);
  });

  it('with no signal: its run\'s code; a start that fails rejects (reported as a failed start)', async () => {
    const hub = fakeHub();
    expect(await roleLogged({ start: async () => hub, run: async () => 7, stop: new AbortController().signal })).toEqual({ code: 7, lines: [] });
    expect((await roleLogged({ start: () => Promise.reject(new Error('cannot listen')), stop: new AbortController().signal })).code).toBe('threw cannot listen');
  });
});
