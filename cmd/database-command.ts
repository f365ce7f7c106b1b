import type { Config } from '../src/config/config.js';
import { interruptibleStart } from '../src/db/pool.js';
import { type DatabaseSetup, setupDatabase } from '../src/runtime/database-setup.js';
import { boundedCommand, DATABASE_CLOSE, DATABASE_SETUP, NO_SIGNAL, type PendingSteps, startedOrInterrupted, stopLimitMs } from './stop.js';

/**
 * The start of a command whose start is its database's setup alone (`migrate`, `secrets`, `outbox`),
 * for `startedOrInterrupted` (cmd/stop.ts): named while it runs, interrupted by `stop` as the hub's
 * start is (`interruptibleStart`: its connections cut; the embedded server's own start stopped),
 * stopped by the database's close. With `stop` (the executable's signal), the embedded PostgreSQL runs
 * in a process group of its own, as the roles': a terminal's Ctrl-C reaches the command, which stops
 * the server itself.
 */
export function databaseStart(config: Config, options: { migrate: boolean; stop?: AbortSignal }): (steps: PendingSteps) => Promise<{ setup: DatabaseSetup; stop(): Promise<void> }> {
  return (steps) =>
    steps
      .step(
        DATABASE_SETUP,
        interruptibleStart(options.stop, () => setupDatabase(config, { migrate: options.migrate, ownProcessGroup: options.stop !== undefined, interrupt: options.stop })),
      )
      .then((setup) => ({ setup, stop: () => setup.close() }));
}

/**
 * A one-shot command over the database alone (`svc-hub secrets`, `svc-hub outbox`): a signal during
 * the database's setup interrupts it (exit 1); a signal during `work` lets it end; that and the
 * database's close have the roles' time limit (cmd/stop.ts).
 */
export function databaseCommand(config: Config, stop: AbortSignal | undefined, workStep: string, work: (db: DatabaseSetup['db']) => Promise<number>): Promise<number> {
  return startedOrInterrupted({
    start: databaseStart(config, { migrate: config.bool('svc.migrate.on-start'), stop }),
    run: ({ setup }) =>
      boundedCommand({
        work: () => work(setup.db),
        workStep,
        close: () => setup.close(),
        closeStep: DATABASE_CLOSE,
        stop,
        limitMs: stopLimitMs(config),
      }),
    stop: stop ?? NO_SIGNAL,
    limitMs: stopLimitMs(config),
    pending: () => [DATABASE_CLOSE],
    interruptedCode: 1,
  });
}
