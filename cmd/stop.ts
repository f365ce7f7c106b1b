import type { Config } from '../src/config/config.js';
import { STOP_BOUND_MS as EMBEDDED_STOP_BOUND_MS } from '../src/db/embedded.js';
import { logger } from '../src/observability/logger.js';

/**
 * The executable's bounded stop, one mechanism for every role: the long-running ones (`serve`,
 * `all`, `dispatch`, `operator`: `stopped`) and the one-shot commands (`run`, `secrets`, `outbox`:
 * `boundedCommand`). A stop that has not ended within its time limit is given up: the steps still
 * pending are logged by name (no values) and the process exits 1, instead of hanging on a database
 * that does not answer or a step that never ends.
 */

/**
 * What a stop may take beyond `svc.http.shutdown-grace` (the in-flight requests' time) before it is
 * given up: the outbox listener's close and the pools' (5 s each at most on a database that does not
 * answer) and the last trace spans (3 s), with room to spare.
 */
export const STOP_MARGIN_MS = 15_000;

/**
 * The time limit of a whole stop: the grace and STOP_MARGIN_MS, and the embedded PostgreSQL's own
 * bounded stop (a fast shutdown, then an immediate one) when the process runs one.
 */
export function stopLimitMs(config: Config): number {
  return config.duration('svc.http.shutdown-grace') + STOP_MARGIN_MS + (config.optional('svc.datasource.url') ? 0 : EMBEDDED_STOP_BOUND_MS);
}

export interface StopBound {
  limitMs: number;
  /** The steps under way (names only, no values), for the log line of a stop given up. */
  pending: () => string[];
}

/** What endsWithin gives for a stop it gave up. */
const GIVEN_UP = Symbol('given up');

/**
 * `ending` (a stop under way), or GIVEN_UP when it has not settled within `bound.limitMs`: then the
 * steps still pending are logged first, and it is not waited for any more (what it does later is
 * not seen). A rejection of `ending` within the limit is passed on.
 */
async function endsWithin<T>(ending: Promise<T>, bound: StopBound): Promise<T | typeof GIVEN_UP> {
  let timer: NodeJS.Timeout | undefined;
  const limit = new Promise<typeof GIVEN_UP>((resolve) => {
    timer = setTimeout(() => {
      const pending = bound.pending().join('; ') || 'none of its own steps';
      logger().error(`the stop did not end within ${bound.limitMs} ms; still pending: ${pending}. Exiting without waiting for them`);
      resolve(GIVEN_UP);
    }, bound.limitMs);
  });
  try {
    return await Promise.race([ending, limit]);
  } finally {
    clearTimeout(timer);
  }
}

/** The steps of a stop under way, each named while it runs, in the order begun (the hub's, cmd/compose.ts; a one-shot command's). */
export class PendingSteps {
  private readonly names = new Set<string>();

  step<T>(name: string, work: Promise<T>): Promise<T> {
    this.names.add(name);
    return work.finally(() => this.names.delete(name));
  }

  list(): string[] {
    return [...this.names];
  }
}

/**
 * Resolves once `stop` (a first signal) has stopped the hub: the exit code, 0, or 1 when the stop
 * failed (a process manager then sees that something was left behind, as the log line says). A stop
 * that has not ended within `bound.limitMs` (a step waiting on a database that does not answer: the
 * final audit flush, an outbox batch in hand) resolves 1 too, once it has logged the steps still
 * pending (their names only), so the process exits instead of hanging.
 */
export function stopped(hub: { stop(): Promise<void> }, stop: AbortSignal, bound?: StopBound): Promise<number> {
  return new Promise((resolve) => {
    const onStop = () => resolve(ended(hub.stop().then(() => 'stopped'), bound));
    if (stop.aborted) onStop();
    else stop.addEventListener('abort', onStop, { once: true });
  });
}

/** The exit code of a stop under way (`ending` resolves to its last log line), as `stopped` says. */
async function ended(ending: Promise<string>, bound?: StopBound): Promise<number> {
  const outcome = await (bound ? endsWithin(settledOf(ending), bound) : settledOf(ending));
  if (outcome === GIVEN_UP) return 1;
  if (outcome.failed) {
    logger().error({ err: outcome.err }, 'stop failed');
    return 1;
  }
  logger().info(outcome.line);
  return 0;
}

function settledOf(ending: Promise<string>): Promise<{ failed: false; line: string } | { failed: true; err: unknown }> {
  return ending.then(
    (line) => ({ failed: false as const, line }),
    (err: unknown) => ({ failed: true as const, err }),
  );
}

/** What a start interrupted by a signal logs (its error, the interruption's consequence, at debug only). */
export const START_INTERRUPTED = 'the start was interrupted by the stop; what it had acquired is released';

export interface Role<H extends { stop(): Promise<void> }> {
  /** The start (`startHub`'s): interrupted by `stop` (its `interrupt`), its steps named in `steps` while they run. */
  start: (steps: PendingSteps) => Promise<H>;
  /** What follows a start no signal came during: the exit code (a long-running role's `stopped`). */
  run: (hub: H) => Promise<number>;
  /** The executable's signal. */
  stop: AbortSignal;
  limitMs: number;
  /** The steps of the started hub's stop still pending. */
  pending: (hub: H) => string[];
  /**
   * The exit code of a start a signal came during, once all is released or stopped: 0 for the roles
   * that serve (a stop, done), 1 for the commands (`migrate`, `run`, `secrets`, `outbox`: their work
   * not done).
   */
  interruptedCode: 0 | 1;
}

/**
 * A role's start, then `run`. A signal during the start interrupts it (waits for a lock or a
 * connection cut, no further step begun, what it had acquired released: see `startHub`), and from
 * that signal what is left has `limitMs`, as a stop has: the start's end and, should it have finished
 * all the same (its last step under way was not one that can be cut), the hub's stop. Past it the
 * steps still pending are logged, the start's and the stop's, and it resolves 1. An interrupted start
 * logs START_INTERRUPTED; either way it resolves `interruptedCode` (1 when the release or the stop
 * failed). A start that fails with no signal rejects.
 */
export async function startedOrInterrupted<H extends { stop(): Promise<void> }>(role: Role<H>): Promise<number> {
  const steps = new PendingSteps();
  const starting = role.start(steps);
  const signalled = new Promise<undefined>((resolve) => {
    if (role.stop.aborted) resolve(undefined);
    else role.stop.addEventListener('abort', () => resolve(undefined), { once: true });
  });
  const first = await Promise.race([starting.then((hub) => ({ hub })), signalled]);
  if (first) return role.run(first.hub);
  let hub: H | undefined;
  const ending = starting.then(
    async (started) => {
      hub = started;
      await started.stop();
      return 'stopped';
    },
    (err: unknown) => {
      logger().debug({ err }, "the interrupted start's error");
      return START_INTERRUPTED;
    },
  );
  const code = await ended(ending, { limitMs: role.limitMs, pending: () => [...steps.list(), ...(hub ? role.pending(hub) : [])] });
  return code === 0 ? role.interruptedCode : code;
}

/** The setup of the database at a start (the embedded PostgreSQL's start, the migrations): the name of that step. */
export const DATABASE_SETUP = "the database's setup (embedded PostgreSQL, migrations)";

/** The close of a command's own database (pools, embedded PostgreSQL): the name of that step. */
export const DATABASE_CLOSE = "the database's close (pools, embedded PostgreSQL)";

export interface OneShot {
  /** The command's work: its exit code. A signal on `stop` ends it early where it can (each command says how). */
  work: () => Promise<number>;
  /** What the work is called while it is pending (`the connector run`). */
  workStep: string;
  /** The command's end, run after the work however it ended (its hub's stop, its database's close). */
  close: () => Promise<void>;
  /** The close as one step of that name; else `closeSteps` names what is pending of it. */
  closeStep?: string;
  closeSteps?: () => string[];
  /** The executable's signal. */
  stop?: AbortSignal;
  limitMs: number;
}

/** A signal that never comes: a command called without the executable's. */
export const NO_SIGNAL: AbortSignal = new AbortController().signal;

/**
 * A one-shot command (`svc-hub run`, `secrets`, `outbox`): its work, then its close, whose
 * stop is bounded as the roles' is. From the first signal, or from the work's end when no signal
 * came, what is left (the work's end, then the close) has `limitMs`; past it the steps still pending
 * are logged and the command exits 1. The work's own exit code, or its error, otherwise.
 */
export async function boundedCommand(command: OneShot): Promise<number> {
  const steps = new PendingSteps();
  let begin!: () => void;
  const stopping = new Promise<void>((resolve) => {
    begin = resolve;
  });
  const onSignal = () => begin();
  if (command.stop?.aborted) begin();
  else command.stop?.addEventListener('abort', onSignal, { once: true });
  const done = (async () => {
    try {
      return await steps.step(command.workStep, command.work());
    } finally {
      command.stop?.removeEventListener('abort', onSignal);
      begin();
      const closing = command.close();
      await (command.closeStep ? steps.step(command.closeStep, closing) : closing);
    }
  })();
  // Until the stop begins, the work takes what it takes (a run, a rekey of many values). The work's
  // end begins it too (before the close), so a failed work's error reaches endsWithin.
  await stopping;
  const code = await endsWithin(done, { limitMs: command.limitMs, pending: () => [...steps.list(), ...(command.closeSteps?.() ?? [])] });
  return code === GIVEN_UP ? 1 : code;
}
