import { until } from './until.js';

/**
 * Markers for "nothing more arrives" checks: instead of sleeping for a fixed time and then asserting
 * that something did not happen, a test waits until the hub has provably gone past the point where
 * it would have happened (a later event consumed, a later delivery made), then asserts.
 */

/** The owner's client, or a pool that sees every tenant (the hub's worker pool). */
export interface Queryable {
  // biome-ignore lint/suspicious/noExplicitAny: pg's overloads; rows are read as plain records
  query(text: string, values?: unknown[]): Promise<{ rows: any[] }>;
}

/** The id of the newest outbox event (any tenant), read as the owner. */
export async function lastEventId(owner: Queryable): Promise<number> {
  const { rows } = await owner.query('select max(id) as id from events.outbox');
  return Number(rows[0]?.id ?? 0);
}

/**
 * Waits until the outbox consumer `consumer` (`webhooks`, `hooks`, `email`, …) has consumed event
 * `eventId` and everything before it: whatever that consumer does for those events (a delivery row,
 * a hook call) has been decided by then.
 */
export async function consumerPassed(owner: Queryable, consumer: string, eventId: number, timeoutMs = 10_000): Promise<void> {
  await until(
    `outbox consumer ${consumer} past event ${eventId}`,
    async () => {
      const { rows } = await owner.query('select last_id from events.consumer_cursors where consumer = $1', [consumer]);
      return rows[0] !== undefined && Number(rows[0].last_id) >= eventId;
    },
    { timeoutMs },
  );
}
