import type { Database } from '../db/database.js';
import { purgeRecorded } from '../db/retention.js';

/**
 * The daily purge of the delivery journal (04:40 UTC, by the background roles' leader;
 * docs/integrations.md, "How long the journal keeps a delivery"): deliveries made more than
 * `retentionDays` days ago that are over (succeeded, closed, or a test that was attempted) go, each
 * with its attempt log, in the same statement. A delivery still open (a retry to come) stays
 * whatever its age. 0 days keeps the journal for ever.
 *
 * Deliveries are numbered in the order they are recorded: the purge deletes below the first one made
 * inside the retention, walking the primary key (src/db/retention.ts, `purgeRecorded`), so no index
 * on the time is needed, which every recorded delivery would pay for.
 */
export function purgeJournal(db: Database, retentionDays: number, batch?: number): Promise<number> {
  return purgeRecorded(
    db,
    {
      job: 'webhook-journal-retention',
      table: 'hub.deliveries',
      recordedAt: 'created_at',
      over: `succeeded or closed_reason is not null or (kind = 'test' and attempts > 0)`,
      dependents: ['delete from hub.delivery_attempts a using gone where a.delivery_id = gone.id'],
    },
    retentionDays,
    batch,
  );
}
