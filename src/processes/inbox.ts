import type { Database, Tx } from '../db/database.js';
import { type Page, type PageRequest, pageOfRows } from '../db/keyset.js';
import { purgeRecorded } from '../db/retention.js';
import type { EventWriter } from '../events/outbox.js';
import { DORMANT } from '../events/scoped-families.js';

/**
 * The decision inbox (events.inbox, filled by the EventWriter with every `decision.*` event, in the
 * transaction of the event). Read and acknowledged in the caller's tenant transaction.
 */

export interface InboxItem {
  id: number;
  eventId: number;
  type: string;
  message: string;
  payload: Record<string, unknown>;
  createdAt: Date;
  ackedAt: Date | null;
  ackedBy: string | null;
}

interface Row {
  id: string;
  event_id: string;
  type: string;
  payload: Record<string, unknown>;
  created_at: Date;
  acked_at: Date | null;
  acked_by: string | null;
}

const COLUMNS = 'id, event_id, type, payload, created_at, acked_at, acked_by';

/** The payload's `message` when it is a string, else a sentence (dormancy: workflow, key, state, since). */
export function messageOf(type: string, payload: Record<string, unknown>): string {
  if (typeof payload.message === 'string') return payload.message;
  if (type.startsWith('decision.dormant.')) {
    const { workflow, key, state, since } = payload as Record<string, unknown>;
    return `Record ${String(key ?? '?')} of workflow ${String(workflow ?? type.slice('decision.dormant.'.length))} has been ${String(state ?? '?')} since ${String(since ?? '?')}`;
  }
  return `Decision ${type}`;
}

const itemOf = (r: Row): InboxItem => ({
  id: Number(r.id),
  eventId: Number(r.event_id),
  type: r.type,
  message: messageOf(r.type, r.payload),
  payload: r.payload,
  createdAt: r.created_at,
  ackedAt: r.acked_at,
  ackedBy: r.acked_by,
});

/**
 * A page of the inbox, newest first (a page after a key: the smaller ids); `acked`: only the
 * acknowledged items, or only the others; `workflows`: a scope-bound caller's workflows, the only ones
 * whose dormancy decisions (`decision.dormant.<workflow>`) are listed.
 */
export async function listInbox(tx: Tx, page: PageRequest, opts: { acked?: boolean; workflows?: readonly string[] }): Promise<Page<InboxItem[]>> {
  const values: unknown[] = [page.limit];
  const where: string[] = [];
  if (opts.acked !== undefined) where.push(opts.acked ? 'acked_at is not null' : 'acked_at is null');
  if (opts.workflows) {
    values.push(DORMANT, opts.workflows);
    const [prefix, held] = [`$${values.length - 1}::text`, `$${values.length}::text[]`];
    where.push(`(not starts_with(type, ${prefix}) or substr(type, length(${prefix}) + 1) = any(${held}))`);
  }
  if (page.after) {
    values.push(page.after[0]);
    where.push(`id < $${values.length}::bigint`);
  }
  const { rows } = await tx.query<Row>(`select ${COLUMNS} from events.inbox ${where.length ? `where ${where.join(' and ')}` : ''} order by id desc limit $1 + 1`, values);
  return pageOfRows(rows, page.limit, (row) => [String(row.id)], itemOf);
}

/** The type of the tenant's inbox item `id`; undefined when there is none. */
export async function inboxItemType(tx: Tx, id: number): Promise<string | undefined> {
  const { rows } = await tx.query<{ type: string }>('select type from events.inbox where id = $1', [id]);
  return rows[0]?.type;
}

/**
 * Acknowledges an item: the first ack records who and when and emits `annotation.decision.acked`
 * in the same transaction; a later one changes nothing and emits nothing. Undefined when the
 * tenant has no such item.
 */
export async function ackInbox(tx: Tx, events: EventWriter, id: number, by: string): Promise<InboxItem | undefined> {
  const { rows } = await tx.query<Row>(
    `update events.inbox set acked_at = now(), acked_by = $2 where id = $1 and acked_at is null returning ${COLUMNS}`,
    [id, by],
  );
  if (rows[0]) {
    await events.emit(tx, 'annotation.decision.acked', { decision_id: id, by });
    return itemOf(rows[0]);
  }
  const existing = await tx.query<Row>(`select ${COLUMNS} from events.inbox where id = $1`, [id]);
  return existing.rows[0] && itemOf(existing.rows[0]);
}

/**
 * The daily purge of the inbox (05:05 UTC, by the background roles' leader; docs/processes.md, "How
 * long the inbox keeps an item"): items acknowledged more than `retentionDays` days ago. An item no
 * one has acknowledged stays whatever its age. 0 days keeps the inbox for ever. Nothing is
 * deduplicated against the inbox (a decision is emitted once by the cursor of the consumer that
 * makes it, and each event id is new), so a purged item can never come back. Items are numbered in
 * the order they land, and an acknowledgement comes after: the walk stops at the first item landed
 * inside the retention (src/db/retention.ts, `purgeRecorded`).
 */
export function purgeInbox(db: Database, retentionDays: number, batch?: number): Promise<number> {
  return purgeRecorded(db, { job: 'inbox-retention', table: 'events.inbox', recordedAt: 'created_at', over: 'acked_at < $1' }, retentionDays, batch);
}
