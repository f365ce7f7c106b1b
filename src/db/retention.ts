import { PURGE_BATCH } from './batches.js';
import type { Database } from './database.js';

/**
 * The daily purges of the hub's history tables (docs/operations.md, "How long history is kept"):
 * the delivery journal, connector runs and their dead letters, export runs and the decision inbox.
 * Each deletes the rows that are over (a run ended, an entry resolved, an item acknowledged) and older
 * than its retention, in short transactions of `batch` rows walking a key forward, so no row is read
 * twice however many the purge keeps (open, latest, still referenced) and no long lock or
 * transaction id is held (src/db/batches.ts says why that matters). 0 days keeps everything.
 */

/**
 * Runs `statement` again and again, each time as the worker role in autocommit, until it deletes
 * fewer than `batch` rows. Its parameters: `values`, then `$k` the key (a text[]) the previous batch
 * ended at (null for the first), then `$n` the batch size. It deletes at most `$n` rows of those after
 * the key in its order and answers one row: `n`, how many it deleted, and `last`, the key of the last
 * one (a text[]). Returns how many went in all.
 */
export async function deleteWalking(db: Database, job: string, statement: string, values: unknown[], batch = PURGE_BATCH): Promise<number> {
  let total = 0;
  let after: string[] | null = null;
  for (;;) {
    const result: { rows: Array<{ n: number; last: string[] | null }> } = await db.crossTenantQuery(job, statement, [...values, after, batch]);
    const row = result.rows[0];
    const deleted = row?.n ?? 0;
    total += deleted;
    if (deleted < batch || !row?.last) return total;
    after = row.last;
  }
}

/** A table whose rows are numbered (a bigint identity) in the order they are recorded. */
export interface RecordedHistory {
  /** The clock job's name, which the statements carry (`crossTenantQuery`). */
  job: string;
  /** Schema-qualified, its primary key `id`. */
  table: string;
  /** The column of when a row was recorded. */
  recordedAt: string;
  /**
   * The condition under which a row is over and has been for the retention: SQL over the table's
   * columns, `$1` the cutoff (a timestamptz). Whatever time it compares must be no earlier than
   * `recordedAt` (an end, a resolution, an acknowledgement).
   */
  over: string;
  /** Deletes of what hangs off a row, each a statement over the CTE `gone (id)` of the rows deleted. */
  dependents?: string[];
}

/**
 * Purges a `RecordedHistory` table: the rows recorded more than `retentionDays` days ago that are
 * `over`. The cutoff and a bound are found once: the bound is the first row recorded inside the
 * retention, so every row below it is older (a transaction that began before the cutoff and
 * committed after it can leave a few just above it, kept a day more). The batches then walk the
 * primary key up to it: no index on the time is needed, which every row recorded would pay for.
 */
export async function purgeRecorded(db: Database, history: RecordedHistory, retentionDays: number, batch?: number): Promise<number> {
  if (retentionDays <= 0) return 0;
  const { table, recordedAt, job } = history;
  const found = await db.crossTenantQuery<{ cutoff: Date; bound: string | null }>(
    job,
    `select now() - make_interval(days => $1) as cutoff, coalesce(
       (select id from ${table} where ${recordedAt} >= now() - make_interval(days => $1) order by id limit 1),
       (select max(id) + 1 from ${table})) as bound`,
    [retentionDays],
  );
  const { cutoff, bound } = found.rows[0] ?? {};
  if (bound === null || bound === undefined || cutoff === undefined) return 0;
  const dependents = (history.dependents ?? []).map((statement, i) => `, dependent_${i} as (${statement})`).join('');
  return deleteWalking(
    db,
    job,
    `with gone as (
       delete from ${table} where id in (
         select id from ${table}
          where id > coalesce(($3::text[])[1]::bigint, 0) and id < $2 and ${recordedAt} < $1 and (${history.over})
          order by id limit $4)
       returning id)${dependents}
     select count(*)::int as n, array[max(id)::text] as last from gone`,
    [cutoff, bound],
    batch,
  );
}

/** A table of runs: a uuid `id`, `status` 'Running' until the run ends, then `ended_at` set. */
export interface RunHistory {
  /** The clock job's name, which the statements carry (`crossTenantQuery`). */
  job: string;
  /** Schema-qualified, with an index on `ended_at` (where not null) the walk reads. */
  table: string;
  /** What a run `r` that ended before the cutoff must meet to go: SQL over `r` (the runs kept are those that fail it). */
  goes: string;
}

/**
 * Purges a `RunHistory` table: the runs that ended more than `retentionDays` days ago and meet
 * `goes`. A Running run stays whatever its age. The batches walk the ended runs by end, then id, so
 * the runs kept are read once a purge.
 */
export async function purgeEnded(db: Database, runs: RunHistory, retentionDays: number, batch?: number): Promise<number> {
  if (retentionDays <= 0) return 0;
  return deleteWalking(db, runs.job, purgeEndedStatement(runs), [retentionDays], batch);
}

/** One batch of `purgeEnded`: $1 the retention in days, $2 where the walk is (null at its start), $3 the batch size. */
export function purgeEndedStatement(runs: RunHistory): string {
  const { table } = runs;
  return `with after as (
       select coalesce(($2::text[])[1]::timestamptz, '-infinity') as ended_at,
              coalesce(($2::text[])[2]::uuid, '00000000-0000-0000-0000-000000000000') as id),
     gone as (
       delete from ${table} where id in (
         select r.id from ${table} r, after
          where r.ended_at is not null and r.ended_at < now() - make_interval(days => $1)
            and r.ended_at >= after.ended_at and (r.ended_at, r.id) > (after.ended_at, after.id)
            and r.status <> 'Running' and (${runs.goes})
          order by r.ended_at, r.id limit $3)
       returning id, ended_at)
     select count(*)::int as n,
            (select array[g.ended_at::text, g.id::text] from gone g order by g.ended_at desc, g.id desc limit 1) as last
       from gone`;
}
