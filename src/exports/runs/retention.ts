import type { Database } from '../../db/database.js';
import { purgeEnded } from '../../db/retention.js';

/**
 * The daily purge of export runs (05:00 UTC, by the background roles' leader; docs/exports.md, "How
 * long runs are kept"): runs that ended more than `retentionDays` days ago, except
 *  - the latest run of each export (by start, as the run lists order them): the operator's
 *    `status.lastRun`, and the run that keeps a deleted export's runs listed under its name;
 *  - every run of each export's latest scheduled slot (its first claim and its retries): they are what
 *    keeps the slot from being claimed again (`runs_one_per_slot`) and a retry of it from publishing
 *    again once another attempt delivered it. A scheduler only ever claims the latest slot of a cron,
 *    and an export with a yearly cron keeps its latest slot's runs all year.
 * A Running run stays whatever its age. A purged run can no longer be read or retried, and a retry
 * made of it before keeps its `retryOf`. 0 days keeps every run (src/db/retention.ts, `purgeEnded`,
 * walking the index `runs_ended`).
 */
export function purgeExportRuns(db: Database, retentionDays: number, batch?: number): Promise<number> {
  return purgeEnded(
    db,
    {
      job: 'export-run-retention',
      table: 'exports.runs',
      goes: `exists (select 1 from exports.runs n where n.export_id = r.export_id and n.started_at > r.started_at)
         and (r.slot is null
              or exists (select 1 from exports.runs n where n.export_id = r.export_id and n.retry_of is null and n.slot > r.slot))`,
    },
    retentionDays,
    batch,
  );
}
