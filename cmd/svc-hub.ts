import { closeSync, openSync } from 'node:fs';
import { isatty } from 'node:tty';
import { Config, ConfigError } from '../src/config/config.js';
import { DataDirInUse } from '../src/db/embedded.js';
import { isDatabaseUnavailable } from '../src/db/unavailable.js';
import { installCrashLogging } from '../src/observability/crash.js';
import { StartRefused } from '../src/errors.js';
import { loggableMessage } from '../src/observability/database-errors.js';
import { createLogger, logger, setLogger } from '../src/observability/logger.js';
import { registerKeyTexts } from '../src/platform/secrets/master-key.js';
import { packageVersion } from '../src/package-root.js';
import { announce, startHub, type Hub } from './compose.js';
import { databaseStart } from './database-command.js';
import { startOperator } from './operator.js';
import { OUTBOX_USAGE, outboxCommand, parseOutboxArgs } from './outbox.js';
import { parseRunArgs, runCommand } from './run.js';
import { parseSecretsArgs, SECRETS_USAGE, secretsCommand } from './secrets.js';
import { DATABASE_CLOSE, type Role, startedOrInterrupted, stopLimitMs, stopped } from './stop.js';
import { ROLES, RUN_USAGE, USAGE } from './usage.js';

type RoleName = (typeof ROLES)[number];

export async function main(argv: string[]): Promise<number> {
  const [role, ...rest] = argv;
  if (role === '--help' || role === '-h' || role === 'help') {
    process.stdout.write(USAGE);
    return 0;
  }
  if (role === '--version') {
    process.stdout.write(`${packageVersion()}\n`);
    return 0;
  }
  if (!role || !(ROLES as readonly string[]).includes(role)) {
    process.stderr.write(`${role ? `svc-hub: unknown role '${role}'` : 'svc-hub: no role given'}\n\n${USAGE}`);
    return 2;
  }
  // `svc-hub serve --help`, `svc-hub run --help`: the usage, not an argument error.
  if (rest.some((arg) => arg === '--help' || arg === '-h')) {
    process.stdout.write(role === 'run' ? RUN_USAGE : role === 'secrets' ? SECRETS_USAGE : role === 'outbox' ? OUTBOX_USAGE : USAGE);
    return 0;
  }
  if (role === 'run') {
    const problem = parseRunArgs(rest);
    if (typeof problem === 'string') {
      process.stderr.write(`svc-hub run: ${problem}\n\n${RUN_USAGE}`);
      return 2;
    }
  } else if (role === 'secrets') {
    const problem = parseSecretsArgs(rest);
    if (typeof problem === 'string') {
      process.stderr.write(`svc-hub secrets: ${problem}\n\n${SECRETS_USAGE}`);
      return 2;
    }
  } else if (role === 'outbox') {
    const problem = parseOutboxArgs(rest);
    if (typeof problem === 'string') {
      process.stderr.write(`svc-hub outbox: ${problem}\n\n${OUTBOX_USAGE}`);
      return 2;
    }
  } else if (rest.length) {
    process.stderr.write(`svc-hub ${role}: unexpected arguments: ${rest.join(' ')}\n\n${USAGE}`);
    return 2;
  }

  releaseTerminalInput();
  let config: Config;
  try {
    config = Config.load();
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`svc-hub: configuration error: ${err.message}\n`);
      return 1;
    }
    throw err;
  }
  setLogger(createLogger({ level: config.string('svc.log.level'), json: config.string('svc.profile') === 'prod' }));
  registerKeyTexts(config);
  // From here an error nothing caught is logged masked before the process ends (src/observability/crash.ts).
  installCrashLogging();
  for (const warning of config.warnings) logger().warn(warning);

  // Set before anything is started: a signal that comes while the process is still starting (the
  // embedded PostgreSQL starting, the migrations) interrupts the start (cmd/stop.ts,
  // `startedOrInterrupted`), instead of killing node and leaving the embedded server running and the
  // data directory marked as taken.
  let serving = false;
  const stop = stopSignal(() =>
    role === 'run' ? 'stopping' : role === 'secrets' ? 'stopping after the batch in progress' : role === 'outbox' ? 'stopping once the command in hand has ended' : role === 'migrate' ? 'interrupting the migrations' : serving ? 'stopping (in-flight requests finish first)' : 'interrupting the start',
  );
  try {
    if (role === 'run') return await runCommand(config, rest, undefined, stop);
    if (role === 'secrets') return await secretsCommand(config, rest, undefined, stop);
    if (role === 'outbox') return await outboxCommand(config, rest, undefined, stop);
    return await run(role as RoleName, config, stop, () => (serving = true));
  } catch (err) {
    // A property that passed loading but is unusable (checked as the hub starts: svc.egress.allow,
    // svc.secret.master-key, svc.mail.from, the Lease settings …) is reported as loading reports one.
    if (err instanceof ConfigError) {
      process.stderr.write(`svc-hub: configuration error: ${err.message}\n`);
      return 1;
    }
    logStartFailure(role, err);
    return 1;
  }
}

/**
 * The hub reads nothing from standard input: when it is a terminal, it is replaced by /dev/null
 * before anything else is opened, as a daemon's is. Node 20 restores the terminal's settings at
 * exit (`tcsetattr` on each standard stream that was a terminal at start), and aborts when that
 * fails (`Assertion failed` in `node::ResetStdio`, exit status 134 instead of the hub's own) as it
 * does once the terminal has gone: closed, or its session logged out, the hub still running in the
 * background (docs/operations.md, "The hub's process: standard input and the terminal"). A stream
 * replaced by another file is left alone. Ctrl-C and SIGHUP come from the terminal as before: they
 * are the session's, not standard input's.
 */
export function releaseTerminalInput(): void {
  if (process.platform === 'win32' || !isatty(0)) return;
  closeSync(0);
  // The lowest free descriptor: 0, unless a thread of the pool took it meanwhile (nothing is under
  // way yet); either way descriptor 0 is no longer the terminal.
  const fd = openSync('/dev/null', 'r');
  if (fd !== 0) closeSync(fd);
}

/** The log line of a start that failed: one line for an expected failure, its stack with an unexpected one. */
export function logStartFailure(role: string, err: unknown): void {
  const expected = expectedFailure(err, role);
  if (expected) {
    // One line that says it all; the stack and the causes only for whoever asks (svc.log.level=debug).
    logger().debug({ err }, 'the start failure in full');
    logger().fatal(`svc-hub ${role} failed: ${expected}`);
    // The message as `err` is written: without a value a PostgreSQL error quotes.
  } else logger().fatal({ err }, `svc-hub ${role} failed: ${loggableMessage(err)}`);
}

/**
 * What to print of a start failure whose message says all there is to it (a refused start, the
 * database unreachable or refusing the hub's connection), or undefined for an unexpected one, which
 * is logged with its stack.
 */
export function expectedFailure(err: unknown, role?: string): string | undefined {
  // A one-shot command on the data directory of a hub that runs: another SVC_DATA_DIR, which the
  // refusal suggests to a second hub, would give the command another, empty database.
  if (err instanceof DataDirInUse && err.place === undefined && role !== undefined && ONE_SHOT.has(role)) {
    return `data directory ${err.dataDir} is already used by another svc-hub process (pid ${err.pid}), whose embedded PostgreSQL svc-hub ${role} would start: stop that process first, or give svc-hub ${role} the running server's URL as DATABASE_URL (docs/operations.md, "Starting and stopping")`;
  }
  if (err instanceof StartRefused) return err.message;
  if (isDatabaseUnavailable(err)) return `the database cannot be reached: ${reasonOf(err)}`;
  const code = (err as { code?: unknown } | undefined)?.code;
  // 28000/28P01: the role or its password refused; 3D000: no such database.
  if (code === '28000' || code === '28P01' || code === '3D000') return `the database refused the connection: ${reasonOf(err)}`;
  return undefined;
}

/** The commands that do their work and exit, on the database of the data directory when no URL is given. */
const ONE_SHOT = new Set(['migrate', 'run', 'secrets', 'outbox']);

/** An error's message; Node's connect to every address of a name (an AggregateError) has none of its own. */
function reasonOf(err: unknown): string {
  const { message, errors, code } = err as { message?: string; errors?: Array<{ message?: string }>; code?: string };
  return message || errors?.map((e) => e.message).join('; ') || code || String(err);
}

async function run(role: RoleName, config: Config, stop: AbortSignal, serving: () => void): Promise<number> {
  const limitMs = stopLimitMs(config);
  if (role === 'migrate') {
    return startedOrInterrupted({
      start: databaseStart(config, { migrate: true, stop }),
      run: async (setup) => {
        await setup.stop();
        logger().info('migrations are up to date');
        return 0;
      },
      stop,
      limitMs,
      pending: () => [DATABASE_CLOSE],
      interruptedCode: 1,
    });
  }
  // The roles that serve until a signal: the start, `started` (what the log says), then the bounded stop.
  const served = <H extends { stop(): Promise<void> }>(start: Role<H>['start'], hubOf: (started: H) => Hub, started: (hub: Hub) => void) =>
    startedOrInterrupted<H>({
      start,
      run: (served) => {
        serving();
        if (!stop.aborted) started(hubOf(served));
        return stopped(served, stop, { limitMs, pending: () => hubOf(served).stopPending() });
      },
      stop,
      limitMs,
      pending: (served) => hubOf(served).stopPending(),
      interruptedCode: 0,
    });
  const hubItself = (hub: Hub) => hub;
  if (role === 'dispatch') {
    // No API: only the operations routes, on svc.http.port, for liveness and readiness probes.
    return served(
      (startSteps) => startHub(config, { api: true, operationsOnly: true, background: true, stopsOnSignals: true, interrupt: stop, startSteps }),
      hubItself,
      (hub) => logger().info(`svc-hub dispatch started (health and metrics at ${hub.url}/q/health, ${hub.url}/q/metrics)`),
    );
  }
  if (role === 'operator') {
    return served(
      (startSteps) => startOperator(config, { stopsOnSignals: true, interrupt: stop, startSteps }),
      (operator) => operator.hub,
      (hub) => logger().info(`svc-hub operator started (health and metrics at ${hub.url}/q/health, ${hub.url}/q/metrics)`),
    );
  }
  return served((startSteps) => startHub(config, { api: true, background: role === 'all', stopsOnSignals: true, interrupt: stop, startSteps }), hubItself, (hub) => announce(config, hub.url!));
}

/** The signals that stop every role: Ctrl-C, a process manager's stop, and a closed terminal. */
const STOP_SIGNALS: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];

/**
 * How soon after the first signal the same signal again is taken as that one delivered twice, not
 * as a second request: `npm start` passes the SIGINT and SIGTERM it receives on to the hub, which a
 * terminal's Ctrl-C (sent to the whole foreground job) or a process manager's stop of the whole
 * group (systemd's default) has sent it already, both within milliseconds.
 */
export const REPEAT_WINDOW_MS = 1_000;

/**
 * Aborted by the first SIGINT, SIGTERM or SIGHUP (what `svc-hub run` stops on, and every role); a
 * second signal exits at once, but for SIGHUP: a closed terminal sends it twice (the shell passes it
 * on to its jobs, and the kernel sends it to the foreground job once the shell is gone), and nobody
 * is there to be in a hurry; nor for the first signal again within REPEAT_WINDOW_MS (delivered
 * twice). `what` ends the log line of the first.
 */
function stopSignal(what: () => string): AbortSignal {
  const controller = new AbortController();
  let first: { signal: NodeJS.Signals; at: number } | undefined;
  const onSignal = (signal: NodeJS.Signals) => {
    if (controller.signal.aborted) {
      if (signal === 'SIGHUP') return;
      if (signal === first?.signal && performance.now() - first.at < REPEAT_WINDOW_MS) return;
      logger().warn(`${signal} again: exiting now`);
      process.exit(130);
    }
    first = { signal, at: performance.now() };
    logger().info(`${signal}: ${what()}`);
    controller.abort();
  };
  for (const signal of STOP_SIGNALS) process.on(signal, onSignal);
  return controller.signal;
}
