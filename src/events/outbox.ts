import type pg from 'pg';
import type { Tx } from '../db/database.js';
import { type Catalog, isDecision, payloadMismatch } from './catalog.js';

/** One event as consumers see it. `position` orders events; ids alone do not (see the migration). */
export interface OutboxEvent {
  id: number;
  tenantId: number;
  type: string;
  payload: Record<string, unknown>;
  createdAt: Date;
  position: Position;
}

/** (transaction id, event id): the order in which events become visible for good. */
export interface Position {
  txid: string;
  id: number;
}

export const START: Position = { txid: '0', id: 0 };

export class EventRejected extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'EventRejected';
  }
}

/**
 * Writes events into the outbox inside the caller's transaction, so a rolled-back change leaves no
 * event. A catalogued type must match its declared payload and an uncatalogued one is refused
 * (`decision.*` excepted): a mismatch is a programming error and fails loudly.
 */
export class EventWriter {
  constructor(private readonly catalog: Catalog) {}

  async emit(tx: Tx, type: string, payload: Record<string, unknown>, tenantId: number | undefined = tx.tenantId): Promise<number> {
    return (await this.emitAll(tx, type, [payload], tenantId))[0]!;
  }

  /**
   * Several events of one type in one statement, in the caller's transaction and in the order
   * given (what the workflow sweep writes: thousands of decisions at once); `emit` is one of them.
   * Unless it is a `decision.*` (the hub's own), the type must be in the catalog and every payload
   * match its declaration. Decisions also land in the inbox.
   */
  async emitAll(tx: Tx, type: string, payloads: Record<string, unknown>[], tenantId: number | undefined = tx.tenantId): Promise<number[]> {
    if (payloads.length === 0) return [];
    if (tenantId === undefined) throw new EventRejected(`event ${type} has no tenant`);
    if (!isDecision(type)) {
      const entry = this.catalog.get(type);
      if (!entry) throw new EventRejected(`event type ${type} is not in the catalog`);
      for (const payload of payloads) {
        const problem = payloadMismatch(entry, payload);
        if (problem) throw new EventRejected(`event ${type} does not match its declaration: ${problem}`);
      }
    }
    // One event (most writes) is a plain VALUES insert, a named statement parsed once per
    // connection: the array form, parsed and planned every time, cost its backend half as much
    // CPU again per event (docs/performance.md).
    const { rows } =
      payloads.length === 1
        ? await tx.query<{ id: number }>(
            'insert into events.outbox (tenant_id, type, payload) values ($1, $2, $3::jsonb) returning id',
            [tenantId, type, JSON.stringify(payloads[0])],
            { prepare: true },
          )
        : await tx.query<{ id: number }>(
            `insert into events.outbox (tenant_id, type, payload)
             select $1, $2, p from unnest($3::jsonb[]) with ordinality as x(p, n) order by n
             returning id`,
            [tenantId, type, payloads.map((p) => JSON.stringify(p))],
          );
    const ids = rows.map((r) => r.id);
    // Every decision lands in its tenant's inbox, in this same transaction (docs/processes.md).
    if (isDecision(type)) {
      await tx.query(
        `insert into events.inbox (tenant_id, event_id, type, payload)
         select $1, e, $2, p from unnest($3::bigint[], $4::jsonb[]) as x(e, p)`,
        [tenantId, type, ids, payloads.map((p) => JSON.stringify(p))],
      );
    }
    return ids;
  }
}

/**
 * An outbox row as read (`txid` as text; `created_at` as a time, or as its milliseconds since the
 * epoch: `CREATED_MS_SQL`).
 */
export type OutboxRow = { id: number; tenant_id: number; type: string; payload: Record<string, unknown>; created_at: Date | number; txid: string };

/**
 * SQL, a `created_at` column (`col`) as the milliseconds since the epoch (a float8, whole: the Date
 * the driver would parse from the time's text, which drops the microseconds). A number reads without
 * the driver's parse of a time's text (regular expressions, a dozen strings), which showed among
 * what an outbox consumer's drain allocates per event.
 */
export const createdMsSql = (col: string) => `floor(extract(epoch from ${col}) * 1000)::float8`;
type Row = OutboxRow;

export function toEvent(row: OutboxRow): OutboxEvent {
  return {
    id: row.id,
    tenantId: row.tenant_id,
    type: row.type,
    payload: row.payload,
    createdAt: typeof row.created_at === 'number' ? new Date(row.created_at) : row.created_at,
    position: { txid: row.txid, id: row.id },
  };
}

/**
 * Events after `after`, in position order, only from transactions older than every transaction
 * still running (so nothing earlier can still appear). Optionally for one tenant.
 */
export async function readAfter(
  query: (text: string, values?: unknown[]) => Promise<pg.QueryResult<Row>>,
  after: Position,
  limit: number,
  tenantId?: number,
): Promise<OutboxEvent[]> {
  const tenantClause = tenantId === undefined ? '' : 'and o.tenant_id = $4';
  const values: unknown[] = [after.txid, after.id, limit];
  if (tenantId !== undefined) values.push(tenantId);
  const { rows } = await query(
    // Ordered by the table's xid8 column (o.txid), not the text of the same name in the select
    // list, which ORDER BY would otherwise take: as text, '992' sorts after '1685'.
    `select o.id, o.tenant_id, o.type, o.payload, o.created_at, o.txid::text as txid
       from events.outbox o
      where (o.txid, o.id) > ($1::xid8, $2::bigint) ${tenantClause}
        and o.txid < pg_snapshot_xmin(pg_current_snapshot())
      order by o.txid, o.id
      limit $3`,
    values,
  );
  return rows.map(toEvent);
}

/** The position of an event id (for resuming after it), or undefined when it is gone. */
export async function positionOf(query: (text: string, values?: unknown[]) => Promise<pg.QueryResult<{ txid: string; id: number }>>, id: number): Promise<Position | undefined> {
  const { rows } = await query('select txid::text as txid, id from events.outbox where id = $1', [id]);
  return rows[0] ? { txid: rows[0].txid, id: rows[0].id } : undefined;
}

/** The newest position every reader may start after (nothing older can still appear). */
export async function headPosition(query: (text: string) => Promise<pg.QueryResult<{ txid: string | null; id: number | null }>>): Promise<Position> {
  const { rows } = await query(
    // o.txid: the xid8 column, not the text alias (see readAfter).
    `select o.txid::text as txid, o.id from events.outbox o
      where o.txid < pg_snapshot_xmin(pg_current_snapshot())
      order by o.txid desc, o.id desc limit 1`,
  );
  return rows[0]?.txid ? { txid: rows[0].txid, id: rows[0].id! } : START;
}

export function after(a: Position, b: Position): boolean {
  const ta = BigInt(a.txid);
  const tb = BigInt(b.txid);
  return ta > tb || (ta === tb && a.id > b.id);
}
