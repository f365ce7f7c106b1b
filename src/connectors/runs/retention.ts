import type { Database } from '../../db/database.js';
import { purgeEnded, purgeRecorded, type RunHistory } from '../../db/retention.js';

/**
 * The daily purge of resolved dead letters (04:50 UTC, by the background roles' leader;
 * docs/connector-runs.md, "How long runs and dead letters are kept"): entries replayed or discarded,
 * or erased, more than `retentionDays` days ago. An entry still pending stays whatever its age. 0
 * days keeps them all. Entries are numbered in the order they are captured, and a resolution comes
 * after the capture: the walk stops at the first entry captured inside the retention
 * (src/db/retention.ts, `purgeRecorded`).
 */
export function purgeDeadLetters(db: Database, retentionDays: number, batch?: number): Promise<number> {
  return purgeRecorded(
    db,
    {
      job: 'connector-dead-letter-retention',
      table: 'connectors.dead_letters',
      recordedAt: 'captured_at',
      over: '(resolution is not null and resolved_at < $1) or erased_at < $1',
    },
    retentionDays,
    batch,
  );
}

/**
 * The daily purge of connector runs (04:55 UTC, after the dead letters', by the background roles'
 * leader; docs/connector-runs.md): runs that ended more than `retentionDays` days ago, except
 *  - the latest run of each connector (by start, as the run lists order them): the operator's
 *    `status.lastRun`, and the run that keeps a CSV source or a deleted connector known by its name;
 *  - the latest Completed run of each connector: an analytic answer's `dataAsOf` is the end of the
 *    newest one of the scope's connectors;
 *  - a run any dead letter still names (`svc dlq ls --run`, the entry's `runId`): it goes once its
 *    entries have (`purgeDeadLetters`).
 * A Running run stays whatever its age. 0 days keeps every run (src/db/retention.ts, `purgeEnded`).
 */
export function purgeConnectorRuns(db: Database, retentionDays: number, batch?: number): Promise<number> {
  return purgeEnded(db, CONNECTOR_RUNS, retentionDays, batch);
}

/**
 * The runs table as `purgeEnded` walks it. "A newer run" and "a newer Completed run" are asked as the
 * connector's latest start and latest Completed end, each one probe of an index's end per run read
 * (`runs_connector`; `runs_connector_completed`, connectors V17). Asked as `exists (… n.ended_at >
 * r.ended_at)`, the planner scanned the table for each run, expecting a match within a few rows where
 * the rows after an old run come last: a connector of a million runs took minutes per batch.
 */
export const CONNECTOR_RUNS: RunHistory = {
  job: 'connector-run-retention',
  table: 'connectors.runs',
  goes: `r.started_at < (select max(n.started_at) from connectors.runs n where n.connector_id = r.connector_id)
         and (r.status <> 'Completed'
              or r.ended_at < (select max(n.ended_at) from connectors.runs n where n.connector_id = r.connector_id and n.status = 'Completed'))
         and not exists (select 1 from connectors.dead_letters d where d.run_id = r.id)`,
};
