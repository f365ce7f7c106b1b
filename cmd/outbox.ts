import type { Config } from '../src/config/config.js';
import type { Database } from '../src/db/database.js';
import { type ConsumerState, consumerStates, dropConsumer, formatLag } from '../src/events/consumer.js';
import { PROCESS_CONSUMER } from '../src/processes/consumer.js';
import { WEBHOOK_CONSUMER } from '../src/webhooks/services.js';
import { databaseCommand } from './database-command.js';

/** The outbox consumers this version of the hub runs (cmd/compose.ts), each with what it does. */
export const HUB_CONSUMERS = {
  hooks: 'hooks',
  email: 'email',
  processes: PROCESS_CONSUMER,
  webhooks: WEBHOOK_CONSUMER,
} as const;

const RUNNING: readonly string[] = Object.values(HUB_CONSUMERS);

/** drop-consumer keeps a cursor that advanced more recently than this, unless --force. */
export const QUIET_MINUTES = 15;

export const OUTBOX_USAGE = `usage: svc-hub outbox consumers
       svc-hub outbox drop-consumer NAME [--force]

  consumers: lists every cursor of events.consumer_cursors, the furthest behind first: its name,
  its position (transaction id / event id), how far behind it is (the events after it and the age
  of the oldest of them), when it last advanced, and whether this version of the hub runs it.
  drop-consumer: removes the cursor NAME, so the daily purge no longer keeps events for it; for a
  consumer that no hub runs any more (left by an older version). A consumer this version runs
  (${RUNNING.join(', ')}) is refused: without its cursor it would start again at
  the outbox's head, passing over the events it had not handled yet. So is one that advanced in
  the last ${QUIET_MINUTES} minutes (a hub may still run it, and would do the same), unless --force.
`;

type OutboxArgs = { command: 'consumers' } | { command: 'drop-consumer'; name: string; force: boolean };

export function parseOutboxArgs(argv: string[]): OutboxArgs | string {
  const [command, ...rest] = argv;
  if (command === 'consumers') return rest.length ? `unexpected argument '${rest[0]}'` : { command };
  if (command === 'drop-consumer') {
    const force = rest.includes('--force');
    const names = rest.filter((a) => a !== '--force');
    const flag = names.find((a) => a.startsWith('--'));
    if (flag) return `unknown option '${flag}'`;
    if (names.length === 0 || !names[0]) return 'drop-consumer needs the NAME of a consumer';
    return names.length > 1 ? `unexpected argument '${names[1]}'` : { command, name: names[0], force };
  }
  return command ? `unknown command '${command}'` : 'a command is required (consumers, drop-consumer)';
}

/** One line of `svc-hub outbox consumers`. */
export function consumerLine(state: ConsumerState): string {
  const lag = state.lagEvents === 0 ? 'up to date' : `${state.lagEvents ?? '?'} events behind, the oldest ${formatLag(state.lagSeconds)} old`;
  const run = RUNNING.includes(state.consumer) ? 'run by this hub' : 'not run by this version of the hub';
  return `${state.consumer}  at ${state.position.txid}/${state.position.id}  ${lag}  last advanced ${state.advancedAt.toISOString()}  ${run}`;
}

/**
 * `svc-hub outbox consumers | drop-consumer NAME`: the database reached as the other roles reach it.
 * Exit 0, or 1 when drop-consumer refused or found nothing.
 */
export async function outboxCommand(
  config: Config,
  argv: string[],
  out: (line: string) => void = (l) => process.stdout.write(`${l}\n`),
  /** The executable's signal (the command in hand ends first): the embedded PostgreSQL then runs in a process group of its own. */
  stop?: AbortSignal,
): Promise<number> {
  const args = parseOutboxArgs(argv);
  if (typeof args === 'string') {
    process.stderr.write(`svc-hub outbox: ${args}\n\n${OUTBOX_USAGE}`);
    return 2;
  }
  if (args.command === 'drop-consumer' && RUNNING.includes(args.name)) {
    out(`refused: '${args.name}' is a consumer this version of the hub runs (${RUNNING.join(', ')}); its cursor is not dropped`);
    return 1;
  }
  // A signal during the database's setup interrupts it (exit 1); one during the command lets it end (cmd/compose.ts).
  return databaseCommand(config, stop, `the ${args.command} command`, (db) => (args.command === 'consumers' ? listConsumers(db, out) : drop(db, args, out)));
}

async function listConsumers(db: Database, out: (line: string) => void): Promise<number> {
  const states = await consumerStates(db, { countEvents: true });
  if (states.length === 0) out('no consumer cursors');
  for (const state of states) out(consumerLine(state));
  return 0;
}

async function drop(db: Database, args: { name: string; force: boolean }, out: (line: string) => void): Promise<number> {
  const dropped = await dropConsumer(db, args.name, { quietSeconds: args.force ? 0 : QUIET_MINUTES * 60 });
  if (!dropped) {
    out(`no consumer '${args.name}' (svc-hub outbox consumers lists them): nothing dropped`);
    return 1;
  }
  if ('advancedAt' in dropped) {
    out(
      `refused: '${args.name}' advanced at ${dropped.advancedAt.toISOString()}, in the last ${QUIET_MINUTES} minutes: a hub may still run it, and without its cursor it would start again at the outbox's head; stop that hub first, or pass --force`,
    );
    return 1;
  }
  const { position } = dropped;
  out(`dropped consumer '${args.name}' (it was at ${position.txid}/${position.id}): the purge no longer keeps events for it`);
  return 0;
}
