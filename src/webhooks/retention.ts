import { deleteInBatches } from '../db/batches.js';
import type { Database } from '../db/database.js';

/**
 * The daily purge of the delivery journal (04:40 UTC, by the background roles' leader;
 * docs/integrations.md, "How long the journal keeps a delivery"): deliveries made more than
 * `retentionDays` days ago that are over (succeeded, closed, or a test that was attempted) go, each
 * with its attempt log, in the same statement. A delivery still open (a retry to come) stays
 * whatever its age. 0 days keeps the journal for ever.
 *
 * The bound is found once, as the first delivery made inside the retention: deliveries are numbered
 * in the order they are recorded, so every one below it is older (a transaction that began before
 * the cutoff and committed after it can leave a few just above it, kept a day more). Each batch then
 * reads the primary key from the start, where only the open deliveries it keeps remain to be
 * passed over: no index on the time is needed, which every recorded delivery would pay for.
 */
export async function purgeJournal(db: Database, retentionDays: number, batch?: number): Promise<number> {
  if (retentionDays <= 0) return 0;
  const bound = await db.crossTenantQuery<{ id: string | null }>(
    'webhook-journal-retention',
    `select coalesce(
       (select id from hub.deliveries where created_at >= now() - make_interval(days => $1) order by id limit 1),
       (select max(id) + 1 from hub.deliveries)) as id`,
    [retentionDays],
  );
  const below = bound.rows[0]?.id;
  if (below === null || below === undefined) return 0;
  return deleteInBatches(
    db,
    'webhook-journal-retention',
    `with gone as (
       delete from hub.deliveries where id in (
         select id from hub.deliveries
          where id < $1 and (succeeded or closed_reason is not null or (kind = 'test' and attempts > 0))
          order by id limit $2)
       returning id),
     log as (delete from hub.delivery_attempts a using gone where a.delivery_id = gone.id)
     select id from gone`,
    [below],
    batch,
  );
}
