import type { Tx } from '../../db/database.js';
import { keyInstantSql, type Page, type PageRequest, pageOfRows } from '../../db/keyset.js';
import { ConflictError, NotFoundError } from '../../errors.js';
import type { FailureCode } from '../types.js';
import { SlotWithdrawn, slotWithdrawn } from '../../connectors/schedule.js';
import { isUuid } from '../../validation/uuid.js';
import { logger, storableMessage, storableUpstreamMessage } from '../../observability/logger.js';

/**
 * The export run ledger (spec 3 "Export run record" and "Export run"): one row per run, from claim
 * to receipt, in the caller's tenant transaction unless the function says otherwise. A claim is an
 * insert: the partial unique index `runs_one_in_flight` lets one Running run per export exist, in
 * any number of replicas, and `runs_one_per_slot` lets a cron slot be claimed once.
 */

export interface ExportRun {
  id: string;
  exportName: string;
  entity: string;
  scope: string;
  destination: 'sftp' | 's3';
  status: 'Running' | 'Completed' | 'Failed';
  trigger: 'manual' | 'scheduled';
  attempt: number;
  retryOf: string | null;
  /** The time file-name tokens resolve against (request moment, or cron slot). */
  artifactTime: string;
  slot: string | null;
  startedAt: string;
  endedAt: string | null;
  /** Rows and bytes written so far while Running; the receipt's figures once Completed. */
  rowCount: number | null;
  byteCount: number | null;
  sha256: string | null;
  location: string | null;
  failureCode: FailureCode | null;
  failureReason: string | null;
  /** S3 only. */
  etag?: string;
  /** S3 versioned buckets only. */
  versionId?: string;
}

interface RunRow {
  id: string;
  export_id: string;
  export_name: string;
  entity: string;
  scope: string;
  destination: 'sftp' | 's3';
  status: ExportRun['status'];
  trigger: ExportRun['trigger'];
  attempt: number;
  retry_of: string | null;
  artifact_time: Date;
  slot: Date | null;
  started_at: Date;
  ended_at: Date | null;
  row_count: number | null;
  byte_count: number | null;
  sha256: string | null;
  location: string | null;
  etag: string | null;
  version_id: string | null;
  failure_code: FailureCode | null;
  failure_reason: string | null;
}

const COLUMNS =
  'id, export_id, export_name, entity, scope, destination, status, trigger, attempt, retry_of, artifact_time, slot, started_at, ended_at, row_count, byte_count, sha256, location, etag, version_id, failure_code, failure_reason';

export function runRecord(row: RunRow): ExportRun {
  const run: ExportRun = {
    id: row.id,
    exportName: row.export_name,
    entity: row.entity,
    scope: row.scope,
    destination: row.destination,
    status: row.status,
    trigger: row.trigger,
    attempt: row.attempt,
    retryOf: row.retry_of,
    artifactTime: row.artifact_time.toISOString(),
    slot: row.slot?.toISOString() ?? null,
    startedAt: row.started_at.toISOString(),
    endedAt: row.ended_at?.toISOString() ?? null,
    rowCount: row.row_count,
    byteCount: row.byte_count,
    sha256: row.sha256,
    location: row.location,
    failureCode: row.failure_code,
    failureReason: row.failure_reason,
  };
  if (row.etag) run.etag = row.etag;
  if (row.version_id) run.versionId = row.version_id;
  return run;
}

/** The run's export and its target, as the claim records them. */
export interface ClaimTarget {
  exportId: string;
  exportName: string;
  entity: string;
  scope: string;
  destination: 'sftp' | 's3';
}

export interface Claim {
  trigger: 'manual' | 'scheduled';
  artifactTime: Date;
  slot?: Date;
  retryOf?: string;
  attempt?: number;
  requestedBy?: string;
}

/** The error texts of spec 3. */
export const IN_FLIGHT = 'already has a run in flight';
export const ALREADY_DELIVERED = 'already delivered';

/**
 * Claims a run: inserts it Running. 409 `already has a run in flight` when the export has one;
 * for a scheduled slot already claimed, answers undefined (the slot runs once).
 */
export async function claimRun(tx: Tx, claimed: ClaimTarget, claim: Claim): Promise<ExportRun | undefined> {
  // The export as stored now, its row held `for share` until the run is recorded (a re-apply or
  // delete sent meanwhile waits for it; one that came first is waited for here): the run records the
  // scope, entity and destination it is claimed for as they are, not as its caller read them before
  // (the scope decides who may read the run record).
  const { rows: held } = await tx.query<{ scope: string; entity: string; destination: ClaimTarget['destination']; schedule: string | null }>(
    `select scope, entity, spec->'destination'->>'kind' as destination, schedule from exports.exports where id = $1 for share`,
    [claimed.exportId],
  );
  const stored = held[0];
  const target: ClaimTarget = stored ? { ...claimed, scope: stored.scope, entity: stored.entity, destination: stored.destination } : claimed;
  // A scheduled slot (not a retry of one) is run only if the export as stored now still schedules it:
  // the scheduler read the export before, and a re-apply or delete committed since may have removed the
  // schedule or changed its cron.
  if (claim.trigger === 'scheduled' && claim.slot && !claim.retryOf) {
    const at = claim.slot.toISOString();
    if (!stored) throw new SlotWithdrawn(`export ${target.exportName} was deleted after its slot ${at} fell due: the slot is not run`);
    const withdrawn = slotWithdrawn(`export ${target.exportName} was re-applied after its slot ${at} fell due`, { schedule: stored.schedule ?? undefined }, claim.slot);
    if (withdrawn) throw new SlotWithdrawn(withdrawn);
  }
  // The name's run in flight may belong to an export deleted while it ran (and applied again since).
  const earlier = await runningUnderName(tx, target.exportName, target.exportId);
  if (earlier) throw new ConflictError(IN_FLIGHT, undefined, `export ${target.exportName} is running run ${earlier} (of the export deleted before it was applied again); wait for it to end`);
  await tx.query('savepoint claim');
  try {
    const { rows } = await tx.query<RunRow>(
      `insert into exports.runs (tenant_id, export_id, export_name, entity, scope, destination, status, trigger, attempt, retry_of, slot, artifact_time, requested_by)
       values (core.current_tenant(), $1, $2, $3, $4, $5, 'Running', $6, $7, $8, $9, $10, $11)
       returning ${COLUMNS}`,
      [
        target.exportId,
        target.exportName,
        target.entity,
        target.scope,
        target.destination,
        claim.trigger,
        claim.attempt ?? 1,
        claim.retryOf ?? null,
        claim.slot ?? null,
        claim.artifactTime,
        claim.requestedBy ?? null,
      ],
    );
    await tx.query('release savepoint claim');
    return runRecord(rows[0]!);
  } catch (err) {
    await tx.query('rollback to savepoint claim');
    const constraint = (err as { code?: string; constraint?: string }).code === '23505' ? (err as { constraint?: string }).constraint : undefined;
    if (constraint === 'runs_one_per_slot') return undefined;
    if (constraint === 'runs_one_in_flight') {
      const running = await tx.query<{ id: string }>("select id from exports.runs where export_id = $1 and status = 'Running'", [target.exportId]);
      throw new ConflictError(IN_FLIGHT, undefined, `export ${target.exportName} is running run ${running.rows[0]?.id ?? '(just ended)'}; wait for it to end`);
    }
    throw err;
  }
}

/** One run of an export; 404 when the id is not a run of that export. */
export async function getRun(tx: Tx, exportName: string, id: string): Promise<ExportRun> {
  if (!isUuid(id)) throw new NotFoundError(`export ${exportName} has no run ${id}`);
  const { rows } = await tx.query<RunRow>(`select ${COLUMNS} from exports.runs where id = $1 and export_name = $2`, [id, exportName]);
  if (!rows[0]) throw new NotFoundError(`export ${exportName} has no run ${id}`);
  return runRecord(rows[0]);
}

/** A run by id alone (the runner's own lookups). */
export async function runById(tx: Tx, id: string): Promise<ExportRun | undefined> {
  const { rows } = await tx.query<RunRow>(`select ${COLUMNS} from exports.runs where id = $1`, [id]);
  return rows[0] && runRecord(rows[0]);
}

/**
 * A page of the runs of an export, newest first: by the start instant to the microsecond, then the
 * id, both descending (a page after a key: the runs before it in that order). With `scopes`, only
 * the runs of those scopes, left out by the statement: a page holds `limit` of them while that
 * many follow (filtered after the read, a page held fewer, none even, with more to come).
 */
export async function listRuns(tx: Tx, exportName: string, page: PageRequest, scopes?: readonly string[]): Promise<Page<ExportRun[]>> {
  const values: unknown[] = [exportName, page.limit];
  const where = ['export_name = $1'];
  if (page.after) {
    values.push(page.after[0], page.after[1]);
    where.push(`started_at <= $${values.length - 1}::timestamptz and (started_at, id) < ($${values.length - 1}::timestamptz, $${values.length}::uuid)`);
  }
  if (scopes) {
    values.push(scopes);
    where.push(`scope = any($${values.length}::text[])`);
  }
  const { rows } = await tx.query<RunRow & { page_key: string }>(
    `select ${COLUMNS}, ${keyInstantSql('started_at')} as page_key from exports.runs where ${where.join(' and ')} order by started_at desc, id desc limit $2 + 1`,
    values,
  );
  return pageOfRows(rows, page.limit, (row) => [row.page_key, row.id], runRecord);
}

/** The latest run of an export (the operator's `lastRun`). */
export async function latestRun(tx: Tx, exportName: string): Promise<ExportRun | undefined> {
  return (await listRuns(tx, exportName, { limit: 1 })).items[0];
}

/** Whether another run of the same slot (the slot's first run or a retry of it) delivered. */
export async function slotDelivered(tx: Tx, exportId: string, slot: Date): Promise<boolean> {
  const { rows } = await tx.query("select 1 from exports.runs where export_id = $1 and slot = $2 and status = 'Completed' limit 1", [exportId, slot]);
  return rows.length > 0;
}

/** A request to stop a Running run: the failure it is to end with. */
export interface StopRequest {
  code: 'definition' | 'interrupted';
  reason: string;
}

/**
 * Progress of a Running run, and proof its process lives. Answers whether the run is still Running
 * (false: something ended it meanwhile, the interrupted-run sweep when beats were held up past
 * `svc.export.run-stale-after`) and the stop requested for it (`requestStop`), if any.
 */
export async function heartbeat(tx: Tx, id: string, progress: { rows: number; bytes: number }): Promise<{ running: boolean; stop?: StopRequest }> {
  // Progress only moves forward, whichever of two beats commits last.
  const { rows } = await tx.query<{ stop_code: StopRequest['code'] | null; stop_reason: string | null }>(
    `update exports.runs set heartbeat_at = now(), row_count = greatest(coalesce(row_count, 0), $2), byte_count = greatest(coalesce(byte_count, 0), $3)
      where id = $1 and status = 'Running' returning stop_code, stop_reason`,
    [id, progress.rows, progress.bytes],
  );
  const row = rows[0];
  if (!row) return { running: false };
  return row.stop_code ? { running: true, stop: { code: row.stop_code, reason: row.stop_reason ?? '' } } : { running: true };
}

/**
 * The key of a run's publication lock (transaction-scoped, advisory), `id` the SQL of the run's id:
 * what `lockRunning` holds and the interrupted-run sweep tries for each run it would fail.
 */
const publicationLock = (id: string) => `hashtextextended('svc-hub:export-publication:' || ${id}::text, 0)`;

/**
 * Locks a run's publication until the transaction ends and answers whether the run is still
 * Running: the interrupted-run sweep passes over a run whose lock is held, so a run that holds it
 * while its file is published and its end recorded cannot be failed meanwhile. An advisory lock, not
 * a lock of the run's row: a row lock gives the transaction a transaction id, and one held while a
 * destination answers (minutes at worst) held back every outbox consumer of the server (they read
 * below the oldest transaction id still running). Nothing else waits for it: a heartbeat or a
 * cancel's stop request during the publication is answered at once. The status is read after the
 * lock is granted (a statement of its own, so its snapshot sees a sweep that held the lock first).
 */
export async function lockRunning(tx: Tx, id: string): Promise<boolean> {
  await tx.query(`select pg_advisory_xact_lock(${publicationLock('$1')})`, [id]);
  const { rows } = await tx.query<{ status: ExportRun['status'] }>('select status from exports.runs where id = $1', [id]);
  return rows[0]?.status === 'Running';
}

/**
 * What a run about to stream must know, read in its own transaction: the export it was claimed for
 * (by id: a name may have been deleted and applied again since) and the stop requested meanwhile,
 * if any (another process served a cancel or a delete before this one's heartbeat read it).
 */
export async function runStart(tx: Tx, id: string): Promise<{ exportId: string; stop?: StopRequest } | undefined> {
  const { rows } = await tx.query<{ export_id: string; stop_code: StopRequest['code'] | null; stop_reason: string | null }>(
    'select export_id, stop_code, stop_reason from exports.runs where id = $1',
    [id],
  );
  const row = rows[0];
  if (!row) return undefined;
  return { exportId: row.export_id, ...(row.stop_code ? { stop: { code: row.stop_code, reason: row.stop_reason ?? '' } } : {}) };
}

/**
 * What a stopped run's reason says of the destination's cleanup (written with the stop, before it
 * is done): when the cleanup then fails, the runner puts what was left in its place.
 */
export const CLEANED_UP = ' (temporary file removed, multipart upload aborted)';

/** What a run in flight of a deleted export ends with. */
export const EXPORT_DELETED: StopRequest = {
  code: 'definition',
  reason: `the export was deleted during the run; nothing was published${CLEANED_UP}`,
};

/**
 * Asks the process running an export's runs to stop them (its next heartbeat reads it): the Running
 * runs of one export (a delete; one run's cancel is `requestStopFirst`). The first request stands.
 * Returns the ids of the runs still Running.
 */
export async function requestStop(tx: Tx, which: { exportId: string }, stop: StopRequest): Promise<string[]> {
  const { rows } = await tx.query<{ id: string }>(
    `update exports.runs set stop_code = coalesce(stop_code, $2), stop_reason = coalesce(stop_reason, $3)
      where export_id = $1 and status = 'Running' returning id`,
    [which.exportId, stop.code, stop.reason],
  );
  return rows.map((r) => r.id);
}

/**
 * Asks one Running run to stop unless a stop was asked for already (a cancel or a delete before,
 * even one committing at the same moment: the update waits for it and then finds the request).
 * Answers the request that stands when this one did not: undefined when this one does.
 */
export async function requestStopFirst(tx: Tx, runId: string, stop: StopRequest): Promise<StopRequest | { status: ExportRun['status'] } | undefined> {
  const { rowCount } = await tx.query(
    "update exports.runs set stop_code = $2, stop_reason = $3 where id = $1 and status = 'Running' and stop_code is null",
    [runId, stop.code, stop.reason],
  );
  if (rowCount === 1) return undefined;
  const { rows } = await tx.query<{ status: ExportRun['status']; stop_code: StopRequest['code'] | null; stop_reason: string | null }>(
    'select status, stop_code, stop_reason from exports.runs where id = $1',
    [runId],
  );
  const row = rows[0]!;
  return row.status === 'Running' && row.stop_code ? { code: row.stop_code, reason: row.stop_reason ?? '' } : { status: row.status };
}

/** A Running run of another export of this name (one deleted while it ran): the name's one run in flight. */
export async function runningUnderName(tx: Tx, exportName: string, exportId: string): Promise<string | undefined> {
  const { rows } = await tx.query<{ id: string }>("select id from exports.runs where export_name = $1 and export_id <> $2 and status = 'Running' limit 1", [exportName, exportId]);
  return rows[0]?.id;
}

export interface Receipt {
  rowCount: number;
  byteCount: number;
  sha256: string;
  location: string;
  etag?: string;
  versionId?: string;
}

/**
 * Running -> Completed with the receipt, the end time the moment of the statement (the transaction
 * may have begun before the publication: the fence's). A run the sweep failed as `interrupted` is
 * corrected too: its receipt shows it did publish, which only its own process can know (the fence's
 * lock lost with its connection while the file was published). False when the run had ended otherwise.
 */
export async function completeRun(tx: Tx, id: string, receipt: Receipt): Promise<boolean> {
  const { rowCount } = await tx.query(
    `update exports.runs set status = 'Completed', ended_at = clock_timestamp(), row_count = $2, byte_count = $3, sha256 = $4, location = $5, etag = $6, version_id = $7,
        failure_code = null, failure_reason = null
      where id = $1 and (status = 'Running' or (status = 'Failed' and failure_code = 'interrupted'))`,
    [id, receipt.rowCount, receipt.byteCount, receipt.sha256, receipt.location, receipt.etag ?? null, receipt.versionId ?? null],
  );
  return rowCount === 1;
}

/** Whether the sweep failed the run as `interrupted` (not its own process). */
export async function wasSwept(tx: Tx, id: string): Promise<boolean> {
  const { rows } = await tx.query("select 1 from exports.runs where id = $1 and status = 'Failed' and failure_code = 'interrupted'", [id]);
  return rows.length > 0;
}

/**
 * Where a failure's reason comes from, which decides how it is masked: `hub`, the hub's own failure
 * (its database, its snapshot query, anything unexpected), masked as a log line is
 * (src/observability/logger.ts, `storableMessage`); `tenant`, text the tenant chose or its own
 * destination answered (an S3 error code is the store's to choose, a secret's name the tenant's),
 * masked without the hub's own credentials (`storableUpstreamMessage`): the hub never sends them
 * there, so such text holds one only where the tenant wrote it, and masking it would confirm a
 * tenant's guesses at them. Decided where the failure is made, not by its code: a `publication`
 * failure may be either.
 */
export type FailureOrigin = 'hub' | 'tenant';

/** Running -> Failed with its code and reason, the reason masked by its origin (`FailureOrigin`). */
export async function failRun(tx: Tx, id: string, code: FailureCode, reason: string, origin: FailureOrigin): Promise<boolean> {
  const stored = origin === 'tenant' ? storableUpstreamMessage(reason) : storableMessage(reason);
  const { rowCount } = await tx.query(
    "update exports.runs set status = 'Failed', ended_at = clock_timestamp(), failure_code = $2, failure_reason = $3 where id = $1 and status = 'Running'",
    [id, code, stored],
  );
  return rowCount === 1;
}

export const INTERRUPTED_REASON = 'the hub stopped during the run; a partial file (SFTP .part, S3 incomplete multipart upload) may be left behind. Retry it: a collision on retry means this run did publish';

/**
 * Across tenants (a crossTenant transaction): Running runs whose process stopped beating for
 * `staleMs` become Failed `interrupted`, except one publishing (its publication lock held,
 * `lockRunning`): the sweep takes that lock of each run it fails, until its transaction ends, so a
 * publication that comes after waits and then finds the run Failed. Returns them.
 */
export async function failInterrupted(tx: Tx, staleMs: number): Promise<Array<{ id: string; tenantId: number; exportName: string }>> {
  return failDead(tx, staleMs, { code: 'interrupted', reason: INTERRUPTED_REASON });
}

/**
 * Ends one Running run now with `stop`, when no live process holds it (the interrupted-run sweep's
 * rule, `failInterrupted`: no heartbeat for `staleMs`, its publication lock free, taken until the
 * transaction ends): a cancel of a run whose process died. False when a process may still run it
 * (it reads the stop request) or the run has ended. The reason stored as the runner stores a stop's.
 */
export async function failIfDead(tx: Tx, id: string, staleMs: number, stop: StopRequest): Promise<boolean> {
  return (await failDead(tx, staleMs, { code: stop.code, reason: storableUpstreamMessage(stop.reason) }, id)).length === 1;
}

/**
 * Which runs a stop ends at once (`endIfDead`): svc.export.run-stale-after, and the runs this
 * process runs (they live whatever their heartbeat says: the caller stops them; none known, none).
 */
export interface DeadRunRule {
  staleAfterMs: number;
  runsHere?: (runId: string) => boolean;
}

/**
 * Ends a Running run at once with `end` when no live process holds it (not run by this process;
 * `failIfDead`: no heartbeat for svc.export.run-stale-after, its publication lock free: the sweep's
 * rule), its stop request standing: nothing would read that request. The lock is taken until `tx`
 * commits (a publication that comes after finds the run Failed). False: a process may run it, it
 * reads the request.
 */
export async function endIfDead(tx: Tx, id: string, rule: DeadRunRule, end: StopRequest): Promise<boolean> {
  return !rule.runsHere?.(id) && (await failIfDead(tx, id, rule.staleAfterMs, end));
}

/**
 * What a stop ends a run with whose process died (`endIfDead`), `what` the stop (a cancel, the
 * export's delete) and `after` what follows: nothing was cleaned up.
 */
export function deadRunStop(what: string, staleAfterMs: number, after = ''): StopRequest {
  return {
    code: 'interrupted',
    reason: `${what} after the run's process had stopped (no heartbeat for ${Math.round(staleAfterMs / 1000)} s): a partial file (SFTP .part, S3 incomplete multipart upload) may be left behind${after}`,
  };
}

/** The warning of a run `endIfDead` ended, `on` the stop (logged once its transaction committed). */
export function warnEndedDead(tenantId: number | undefined, run: { id: string; exportName: string }, on: string, staleAfterMs: number): void {
  logger().warn({ runId: run.id, tenantId, export: run.exportName }, `export run ${run.id} of ${run.exportName} failed as interrupted on ${on}: no heartbeat for ${staleAfterMs} ms`);
}

/** Fails the Running runs (one, with `id`) with no heartbeat for `staleMs` whose publication lock is free, taking the lock. */
async function failDead(tx: Tx, staleMs: number, end: StopRequest, id?: string): Promise<Array<{ id: string; tenantId: number; exportName: string }>> {
  const { rows } = await tx.query<{ id: string; tenant_id: number; export_name: string }>(
    // The lock is tried on the stale runs alone (a condition of the materialised CTE's rows, never
    // pushed down to a scan of every run); the status is checked again on the row locked.
    `with stale as materialized (
       select id from exports.runs where status = 'Running' and heartbeat_at < now() - make_interval(secs => $1) and ($4::uuid is null or id = $4::uuid)
     )
     update exports.runs set status = 'Failed', ended_at = now(), failure_code = $3, failure_reason = $2
      where id in (
        select r.id from exports.runs r
         where r.id in (select s.id from stale s where pg_try_advisory_xact_lock(${publicationLock('s.id')}))
           and r.status = 'Running'
           for update of r skip locked)
      returning id, tenant_id, export_name`,
    [staleMs / 1000, end.reason, end.code, id ?? null],
  );
  return rows.map((r) => ({ id: r.id, tenantId: Number(r.tenant_id), exportName: r.export_name }));
}
