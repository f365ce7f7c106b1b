import { deleteInBatches } from '../db/batches.js';
import type { Database, Tx } from '../db/database.js';
import { logger } from '../observability/logger.js';
import { lazyGauge } from '../observability/metrics.js';
import { createdMsSql, headPosition, type OutboxEvent, type OutboxRow, type Position, toEvent } from './outbox.js';

/**
 * Whether an event after cursor `c` is committed but not readable yet: its transaction is not older
 * than every transaction still running (readAfter's rule). Such events sort after every readable
 * one, so the newest of them tells: one short backward index scan, evaluated once per statement
 * (it does not depend on `c`), instead of a scan from the cursor.
 */
const HELD_BACK = `coalesce((c.txid, c.last_id) < (
  select txid, id from events.outbox
   where txid >= pg_snapshot_xmin(pg_current_snapshot())
   order by txid desc, id desc
   limit 1
), false)`;

/**
 * The cursor statements (read, skip, advance) run many times a second per consumer and their plan
 * does not depend on their values: named statements, parsed once per connection. They run as the
 * worker role, which plans every execution afresh (src/db/roles.ts): a generic plan made while the
 * outbox was nearly empty would scan it whole once it is full.
 */
const PREPARED = { prepare: true } as const;

/** PostgreSQL's SQLSTATE for a row lock that NOWAIT did not get. */
const LOCK_NOT_AVAILABLE = '55P03';

/**
 * Moves a consumer's cursor forward (never back), its consumer, txid and event id the parameters
 * numbered from `first`: also for a handler that moves the cursor in its own statement
 * (`CursorMove`), so what it records and the move commit together.
 */
export function advanceSql(first: number): string {
  const [consumer, txid, id] = [`$${first}`, `$${first + 1}`, `$${first + 2}`];
  return `update events.consumer_cursors set txid = ${txid}::xid8, last_id = ${id}::bigint, updated_at = now()
  where consumer = ${consumer} and (txid, last_id) < (${txid}::xid8, ${id}::bigint)`;
}

const ADVANCE = advanceSql(1);

/** Where a handler moves a consumer's cursor in its own statement: `advanceSql(n)` with `advanceValues(move)` as parameters n…n+2. */
export interface CursorMove {
  consumer: string;
  to: Position;
}

export const advanceValues = (move: CursorMove): [string, string, number] => [move.consumer, move.to.txid, move.to.id];

/**
 * A named outbox consumer with its own cursor in events.consumer_cursors. Reading and advancing are
 * separate short transactions, so a consumer never holds a transaction open while it works (an HTTP
 * call, a send); a consumer that dies between the two sees the same events again (at least once).
 * One instance per name should run at a time (leader election or an advisory lock).
 */
export class OutboxConsumer {
  constructor(
    private readonly db: Database,
    readonly name: string,
  ) {}

  /** Up to `limit` events after the cursor (`read` without its held-back flag): of active tenants only. */
  async next(limit: number): Promise<OutboxEvent[]> {
    return (await this.read(limit)).events;
  }

  /**
   * Up to `limit` events after the cursor, every tenant: the cursor and the events in one statement
   * (readAfter's order and visibility rule), and in the same statement whether an event after the
   * cursor is committed but not readable yet (held back by an older transaction still running:
   * the caller looks again soon). The first read of a consumer without a cursor row creates it at
   * the head (`startAtHead`).
   *
   * The events of a deactivated tenant are read but not handed over (its background work stops,
   * docs/admin.md): `events` holds the others', `read` counts them all and `to` is the position of
   * the last one read, where the cursor goes once the batch is handled.
   */
  async read(limit: number): Promise<{ events: OutboxEvent[]; heldBack: boolean; from: Position; read: number; to: Position | undefined }> {
    const { rows } = await this.db.crossTenantQuery<
      (OutboxRow | { [K in keyof OutboxRow]: null }) & { tenant_active: boolean | null; held_back: boolean; from_txid: string; from_id: number }
    >(
      `outbox:${this.name}`,
      `select o.id, o.tenant_id, o.type, o.payload, ${createdMsSql('o.created_at')} as created_at, o.txid::text as txid, o.tenant_active, h.held_back,
              c.txid::text as from_txid, c.last_id as from_id
         from events.consumer_cursors c
         cross join lateral (select ${HELD_BACK} as held_back) h
         left join lateral (
           select e.id, e.tenant_id, e.type, e.payload, e.created_at, e.txid, t.active is not false as tenant_active
             from events.outbox e
             left join core.tenants t on t.id = e.tenant_id
            where (e.txid, e.id) > (c.txid, c.last_id)
              and e.txid < pg_snapshot_xmin(pg_current_snapshot())
            order by e.txid, e.id
            limit $2
         ) o on true
        where c.consumer = $1`,
      [this.name, limit],
      PREPARED,
    );
    if (rows.length === 0) {
      // No cursor row (yet, or no longer: dropped while this consumer ran, `svc-hub outbox
      // drop-consumer` under a hub of an older version): made at the head, as a new consumer's is
      // (`startAtHead`), then read as above. Made at the start of the outbox, it handed every event
      // still kept (up to the retention's days) over again.
      await this.startAtHead();
      return this.read(limit);
    }
    const head = rows[0]!;
    const read = rows.filter((row): row is OutboxRow & { tenant_active: boolean; held_back: boolean; from_txid: string; from_id: number } => row.id !== null);
    return {
      events: read.filter((row) => row.tenant_active).map(toEvent),
      heldBack: head.held_back,
      from: { txid: head.from_txid, id: head.from_id },
      read: read.length,
      to: read.length > 0 ? toEvent(read.at(-1)!).position : undefined,
    };
  }

  /**
   * Moves the cursor past every event readable now (`next`'s visibility rule), without reading them:
   * for a consumer that can act on no event at all. With `onlyIf`, only if that SQL condition holds:
   * it is read in the same statement, so in the same snapshot as the events it lets pass. Returns
   * whether the cursor was allowed to move (`onlyIf` held, or none was given) and, as `read` does,
   * whether an event after the cursor is held back (held-back events come after every readable one,
   * so the cursor before or after the move answers alike).
   */
  async skipVisible(onlyIf?: string): Promise<{ passed: boolean; heldBack: boolean }> {
    const condition = onlyIf ? `(${onlyIf})` : 'true';
    const { rows } = await this.db.crossTenantQuery<{ passed: boolean; held_back: boolean }>(
      `outbox:${this.name}`,
      `with head as (
         select o.txid, o.id
           from events.consumer_cursors k
           cross join lateral (
             select txid, id from events.outbox
              where (txid, id) > (k.txid, k.last_id)
                and txid < pg_snapshot_xmin(pg_current_snapshot())
              order by txid desc, id desc
              limit 1
           ) o
          where k.consumer = $1
       ), moved as (
         update events.consumer_cursors c set txid = h.txid, last_id = h.id, updated_at = now()
           from head h
          where c.consumer = $1 and (c.txid, c.last_id) < (h.txid, h.id) and ${condition}
         returning 1
       )
       select ${condition} as passed, coalesce((select ${HELD_BACK} from events.consumer_cursors c where c.consumer = $1), false) as held_back`,
      [this.name],
      PREPARED,
    );
    return { passed: rows[0]?.passed === true, heldBack: rows[0]?.held_back === true };
  }

  async advance(to: Position): Promise<void> {
    await this.db.crossTenantQuery(`outbox:${this.name}`, ADVANCE, [this.name, to.txid, to.id], PREPARED);
  }

  /**
   * Locks the cursor's row in the caller's cross-tenant transaction and answers whether it is still
   * at `from` (where the batch in hand was read from). False: another process moved it meanwhile
   * (two processes each believed it led, for a moment): the batch must not be handled. The lock holds
   * until that transaction ends. A cursor locked by another transaction (another process handling a
   * batch, however long it stalls) is not waited for: false too (the transaction is then lost: the
   * caller rolls it back), and the caller reads again later.
   */
  async claimIn(tx: Tx, from: Position): Promise<boolean> {
    try {
      const { rows } = await tx.query<{ txid: string; last_id: number }>(
        'select txid::text as txid, last_id from events.consumer_cursors where consumer = $1 for update nowait',
        [this.name],
        PREPARED,
      );
      return rows[0] !== undefined && rows[0].txid === from.txid && Number(rows[0].last_id) === from.id;
    } catch (err) {
      if ((err as { code?: string }).code === LOCK_NOT_AVAILABLE) return false;
      throw err;
    }
  }

  /** Advances the cursor inside the caller's cross-tenant transaction: it moves only if that transaction commits. */
  async advanceIn(tx: Tx, to: Position): Promise<void> {
    await tx.query(ADVANCE, [this.name, to.txid, to.id]);
  }

  /**
   * Starts the cursor at the current head (`headPosition`: the newest event readable now): a new
   * consumer is not retroactive. Not the newest event committed: an event of a transaction still
   * running when the consumer starts comes before such a one in the outbox's order, and a cursor
   * set past it would skip it for ever once it commits.
   */
  async startAtHead(): Promise<void> {
    await this.db.crossTenant(`outbox:${this.name}`, async (tx) => {
      const head = await headPosition((t) => tx.query(t));
      await tx.query(
        `insert into events.consumer_cursors (consumer, txid, last_id) values ($1, $2::xid8, $3::bigint)
         on conflict (consumer) do nothing`,
        [this.name, head.txid, head.id],
      );
    });
  }
}

/**
 * The daily outbox purge: rows older than the retention, but never one that a consumer has not seen
 * yet, nor one that a condition of `keep` holds for (SQL over the outbox row `o`, from the modules
 * that still need an event their consumer has passed: the webhook consumer's batches whose
 * deliveries are not written yet), `batch` rows a transaction (`deleteInBatches`: one transaction
 * over millions of rows held every consumer back while it ran). Returns how many rows went.
 */
export async function purgeOutbox(db: Database, retentionDays: number, batch?: number, keep: readonly string[] = []): Promise<number> {
  return deleteInBatches(
    db,
    'outbox-retention',
    `delete from events.outbox where id in (
       select o.id from events.outbox o
        where o.created_at < now() - make_interval(days => $1)
          and not exists (select 1 from events.consumer_cursors c where (c.txid, c.last_id) < (o.txid, o.id))
          ${keep.map((condition) => `and not (${condition})`).join(' ')}
        order by o.id
        limit $2)`,
    [retentionDays],
    batch,
  );
}

/** How far behind a consumer may be before the daily purge names it in a warning (docs/operations.md). */
export const LAGGING_AFTER_SECONDS = 24 * 60 * 60;

/** At most this many cursors get a lag gauge, the furthest behind first: the label set stays bounded. */
export const LAG_GAUGE_CONSUMERS = 20;

/** One cursor of events.consumer_cursors, as `svc-hub outbox consumers` lists it. */
export interface ConsumerState {
  consumer: string;
  position: Position;
  /** Seconds since the oldest event it has not passed was written: 0 when it passed them all. */
  lagSeconds: number;
  /** How many events come after its cursor (only when counted: a count scans them). */
  lagEvents?: number;
  /** When its cursor last moved (or was made). */
  advancedAt: Date;
}

/**
 * Every cursor with its lag, the furthest behind first: the age of the oldest event after it (one
 * index lookup a cursor) and, with `countEvents`, how many events come after it.
 */
export async function consumerStates(db: Database, options: { countEvents?: boolean } = {}): Promise<ConsumerState[]> {
  const after = 'from events.outbox o where (o.txid, o.id) > (c.txid, c.last_id)';
  const { rows } = await db.crossTenantQuery<{ consumer: string; txid: string; last_id: string; updated_at: Date; lag_seconds: number; lag_events?: string }>(
    'outbox-consumers',
    `select c.consumer, c.txid::text as txid, c.last_id, c.updated_at,
            greatest(0, coalesce(extract(epoch from now() - (select o.created_at ${after} order by o.txid, o.id limit 1)), 0))::float8 as lag_seconds
            ${options.countEvents ? `, (select count(*) ${after}) as lag_events` : ''}
       from events.consumer_cursors c
      order by lag_seconds desc, c.consumer`,
  );
  return rows.map((r) => ({
    consumer: r.consumer,
    position: { txid: r.txid, id: Number(r.last_id) },
    lagSeconds: Math.floor(r.lag_seconds),
    ...(r.lag_events === undefined ? {} : { lagEvents: Number(r.lag_events) }),
    advancedAt: r.updated_at,
  }));
}

const consumerLag = lazyGauge({
  name: 'svc_outbox_consumer_lag_seconds',
  help: `Age of the oldest outbox event each consumer cursor has not passed (0: none); the ${LAG_GAUGE_CONSUMERS} furthest behind`,
  labelNames: ['consumer'],
});

/** Sets the lag gauge to `states` (consumerStates' order): a dropped cursor's series goes. */
export function recordConsumerLags(states: readonly ConsumerState[]): void {
  const gauge = consumerLag();
  gauge.reset();
  for (const state of states.slice(0, LAG_GAUGE_CONSUMERS)) gauge.set({ consumer: state.consumer }, state.lagSeconds);
}

/** "3 d 4 h", "5 h 2 min", "40 s": a lag for people. */
export function formatLag(seconds: number): string {
  const units: Array<[string, number]> = [['d', 86_400], ['h', 3_600], ['min', 60], ['s', 1]];
  const parts: string[] = [];
  let rest = Math.floor(seconds);
  for (const [unit, size] of units) {
    if (rest >= size || (unit === 's' && parts.length === 0)) parts.push(`${Math.floor(rest / size)} ${unit}`);
    rest %= size;
    if (parts.length === 2) break;
  }
  return parts.join(' ');
}

/**
 * The daily outbox retention: the purge, then the lag of every cursor (the gauge), and one warning
 * naming each consumer more than `laggingAfter` seconds behind (it keeps the purge from deleting
 * anything from its cursor on), saying which of them this hub does not run (`running`): those are
 * left behind by an older version and only `svc-hub outbox drop-consumer` removes them.
 */
export async function outboxRetention(
  db: Database,
  retentionDays: number,
  running: readonly string[],
  options: { batch?: number; laggingAfter?: number; keep?: readonly string[] } = {},
): Promise<{ purged: number; lagging: ConsumerState[] }> {
  const purged = await purgeOutbox(db, retentionDays, options.batch, options.keep);
  logger().info({ purged }, 'outbox retention purge');
  const states = await consumerStates(db);
  recordConsumerLags(states);
  const lagging = states.filter((s) => s.lagSeconds > (options.laggingAfter ?? LAGGING_AFTER_SECONDS));
  if (lagging.length > 0) {
    const named = lagging.map((s) => `${s.consumer} (${formatLag(s.lagSeconds)} behind${running.includes(s.consumer) ? '' : ', not run by this version of the hub'})`);
    logger().warn(
      { consumers: lagging.map((s) => ({ consumer: s.consumer, lagSeconds: s.lagSeconds, running: running.includes(s.consumer) })) },
      `outbox consumers behind by more than ${formatLag(options.laggingAfter ?? LAGGING_AFTER_SECONDS)} keep the purge from deleting the events they have not passed: ${named.join(', ')}; svc-hub outbox consumers lists them, svc-hub outbox drop-consumer NAME removes one that no longer runs`,
    );
  }
  return { purged, lagging };
}

/**
 * Removes a cursor: the purge no longer waits for it. Its state before (`position`), or undefined
 * when there was none. With `quietSeconds`, a cursor that advanced more recently is kept and its last
 * advance answered (`advancedAt`): a consumer that moves may still run somewhere (an older hub beside
 * this one), and without its cursor it would start again at the outbox's head, passing over what
 * came in between.
 */
export async function dropConsumer(db: Database, name: string, options: { quietSeconds?: number } = {}): Promise<{ position: Position } | { advancedAt: Date } | undefined> {
  const { rows } = await db.crossTenantQuery<{ updated_at: Date; txid: string | null; last_id: string | null }>(
    'outbox-consumers',
    `with c as (select consumer, updated_at from events.consumer_cursors where consumer = $1 for update),
          d as (delete from events.consumer_cursors x using c
                 where x.consumer = c.consumer and ($2::integer = 0 or c.updated_at <= now() - make_interval(secs => $2::integer))
             returning x.txid::text as txid, x.last_id)
     select c.updated_at, d.txid, d.last_id from c left join d on true`,
    [name, options.quietSeconds ?? 0],
  );
  const row = rows[0];
  if (!row) return undefined;
  return row.txid === null ? { advancedAt: row.updated_at } : { position: { txid: row.txid, id: Number(row.last_id) } };
}
