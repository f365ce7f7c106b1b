import type { Statement, Tx } from '../../db/database.js';
import { JsonText } from '../../db/json-text.js';
import { isoTimestampSql } from '../../db/timestamps.js';
import { jsonPageSql, keyInstantSql, type Page, type PageRequest, textOfShape } from '../../db/keyset.js';
import { ConflictError, NotFoundError } from '../../errors.js';
import { isUuid } from '../../validation/uuid.js';

export type RunStatus = 'Running' | 'Completed' | 'Partial' | 'Failed' | 'Cancelled';

/** The run record of spec 1, plus the endpoint (UUID and id) of CONTRACTS.md section 5. */
export interface RunRecord {
  id: string;
  connectorId: string;
  connector: string;
  endpointId: string | null;
  endpoint: string | null;
  status: RunStatus;
  startedAt: string;
  endedAt: string | null;
  recordsIn: number;
  recordsOut: number;
  recordsSkipped: number;
  deadLetterCount: number;
  triggeredBy: string;
  syncMode: string;
  chunkCount: number;
  errorMessage: string | null;
}

/**
 * A run's columns, read as the record itself: its times as the text of the answer (`isoTimestampSql`).
 * `added`: the alias of the counts its chunks recorded while it runs (addedCounts), when read.
 */
function columns(added?: string): string {
  const plus = (column: string, addend: string) => (added ? `${column} + coalesce(${added}.${addend}, 0)` : column);
  return `id, connector_id as "connectorId", connector_name as "connector", endpoint_uuid as "endpointId", endpoint_id as "endpoint",
  status, ${isoTimestampSql('started_at')} as "startedAt", ${isoTimestampSql('ended_at')} as "endedAt", ${plus('records_in', 'added_in')} as "recordsIn",
  ${plus('records_out', 'added_out')} as "recordsOut", ${plus('records_skipped', 'added_skipped')} as "recordsSkipped",
  ${plus('dead_letter_count', 'added_dead_letters')} as "deadLetterCount", triggered_by as "triggeredBy", sync_mode as "syncMode",
  ${plus('chunk_count', 'added_chunks')} as "chunkCount", error_message as "errorMessage"`;
}

/**
 * The columns of a run's row as a statement returns it (the row of a run created or just ended:
 * no chunk counts beside it, connectors V14).
 */
const COLUMNS = columns();

/**
 * The counts the chunks of the run `run` (an alias of connectors.runs) recorded beside its row while it
 * runs (addChunk; connectors V14 adds them to the row as the run ends), as a lateral join's columns
 * `added_*`: one row, with nulls (and 0 chunks) for none. Looked up for a Running run only.
 */
function addedCounts(run: string): string {
  return `left join lateral (
      select sum(k.records_in)::bigint as added_in, sum(k.records_out)::bigint as added_out, sum(k.records_skipped)::bigint as added_skipped,
             sum(k.dead_letters)::bigint as added_dead_letters, count(*)::integer as added_chunks
        from connectors.run_chunk_counts k where k.run_id = ${run}.id and ${run}.status = 'Running') added on true`;
}

/** A run's record as read, its counts those of its row and of its chunks so far. */
const READ_COLUMNS = columns('added');

export async function createRun(
  tx: Tx,
  run: { connectorId: string; connectorName: string; endpointUuid: string; endpointId: string; triggeredBy: string; syncMode: string; slot?: Date },
): Promise<RunRecord> {
  const { rows } = await tx.query<RunRecord>(
    `insert into connectors.runs (tenant_id, connector_id, connector_name, endpoint_uuid, endpoint_id, status, triggered_by, sync_mode, slot)
     values (core.current_tenant(), $1, $2, $3, $4, 'Running', $5, $6, $7) returning ${COLUMNS}`,
    [run.connectorId, run.connectorName, run.endpointUuid, run.endpointId, run.triggeredBy, run.syncMode, run.slot ?? null],
  );
  return rows[0]!;
}

/** The unique index that lets one Running run per endpoint exist (migrations/connectors/V7__one_run_in_flight.sql). */
export const ONE_IN_FLIGHT = 'runs_one_in_flight';

/** The oldest Running run of these endpoints, if any. */
export async function runInFlight(tx: Tx, endpointUuids: readonly string[]): Promise<{ id: string; endpoint: string | null } | undefined> {
  if (endpointUuids.length === 0) return undefined;
  const { rows } = await tx.query<{ id: string; endpoint: string | null }>(
    "select id, endpoint_id as endpoint from connectors.runs where endpoint_uuid = any($1::uuid[]) and status = 'Running' order by started_at, id limit 1",
    [endpointUuids],
  );
  return rows[0];
}

/**
 * The 409 of a connector whose run is in flight (a trigger of one of its endpoints running already, a
 * delete): names the run and how to stop it. `then`: what to do once it has ended, when not run again.
 */
export function inFlightError(connector: string, run: { id: string; endpoint: string | null } | undefined, then = ''): ConflictError {
  const which = run ? `run ${run.id} of endpoint ${run.endpoint ?? '(none)'} is Running` : 'a run has just been started';
  const cancel = run ? ` or cancel it (POST /api/platform/runs/${run.id}/cancel)` : '';
  return new ConflictError(`connector ${connector} has a run in flight`, undefined, `${which}; wait for it to end${cancel}${then}`);
}

/**
 * A chunk of a run that another process has closed meanwhile (the interrupted-run sweep, or a cancel,
 * failed it as `interrupted` while its heartbeat was silent: its process paused, or was cut off from
 * the database, and then resumed). Thrown by addChunk in the chunk's transaction, so that what the
 * chunk wrote is rolled back: once closed, the run no longer holds off a delete or purge of what it
 * writes (no run of it is Running), and rows written on would outlive its connector.
 */
export class RunClosedError extends Error {
  constructor(runId: string, status: string) {
    super(`run ${runId} was closed (${status}) by another process while this one still ran it: its chunk is not written, and it stops`);
    this.name = 'RunClosedError';
  }
}

/**
 * Holds the run's row (`for share`, to the caller's commit: a sweep or cancel closing it waits) and
 * throws RunClosedError when another process has closed it already: a run queued behind an earlier
 * endpoint of its trigger, closed while it waited, does not register or make its table (for a
 * connector deleted meanwhile, that registration would keep the table for ever).
 */
export async function holdRunning(tx: Tx, runId: string): Promise<void> {
  const { rows } = await tx.query<{ status: string }>('select status from connectors.runs where id = $1 for share', [runId]);
  if (rows[0] && rows[0].status !== 'Running') throw new RunClosedError(runId, rows[0].status);
}

/**
 * Records one chunk's counters, in the chunk's transaction; answers whether a cancel was requested
 * meanwhile. The run's row is held `for share` to the chunk's commit, so a sweep or cancel closing
 * it waits for the chunk, while the other chunks of the run in flight do not (an update of the row
 * held each to the commit of the one before it): the counts go to a row of their own
 * (connectors.run_chunk_counts), added to the run's as it ends (connectors V14). A run closed already
 * is a RunClosedError.
 */
export async function addChunk(tx: Tx, runId: string, counts: ChunkCounts): Promise<{ cancelRequested: boolean }> {
  const statement = chunkStatement(runId, counts);
  try {
    return chunkAdded((await tx.query<ChunkAnswer>(statement.text, statement.values, { prepare: statement.prepare })).rows);
  } catch (err) {
    throw runClosed(err, runId);
  }
}

export interface ChunkCounts {
  in: number;
  out: number;
  skipped: number;
  deadLetters: number;
}

/** The row addChunk's statement answers (none for a run that does not exist). */
export interface ChunkAnswer {
  status: string;
  cancel_requested: boolean;
}

/** addChunk's statement, for a caller that sends it in one message with others (Tx.queryAfter); its rows go to chunkAdded. */
export function chunkStatement(runId: string, counts: ChunkCounts): Statement {
  return {
    text: `with run as (select status, cancel_requested from connectors.runs where id = $1 for share),
          counted as (insert into connectors.run_chunk_counts (run_id, tenant_id, records_in, records_out, records_skipped, dead_letters)
                      select $1, core.current_tenant(), $2, $3, $4, $5 from run where status = 'Running')
     select status, cancel_requested from run where connectors.run_open($1, status)`,
    values: [runId, counts.in, counts.out, counts.skipped, counts.deadLetters],
    // Once per chunk, its plan the same whatever the values: a named statement, parsed once per connection.
    prepare: true,
  };
}

/** What addChunk answers from its statement's rows (a run closed already failed the statement: runClosed). */
export function chunkAdded(rows: ChunkAnswer[]): { cancelRequested: boolean } {
  return { cancelRequested: rows[0]?.cancel_requested ?? false };
}

/** The SQLSTATE of chunkStatement's failure for a run closed already (connectors.run_open, connectors V15). */
const RUN_CLOSED = 'SV002';

/**
 * `err` as a RunClosedError when it is chunkStatement's failure for a run closed already (its status the
 * error's detail), `err` itself otherwise: the statement fails in the database, so that what follows it
 * in the chunk's message (its COMMIT) is skipped and the chunk rolled back.
 */
export function runClosed(err: unknown, runId: string): unknown {
  const e = err as { code?: unknown; detail?: unknown } | null;
  return e && e.code === RUN_CLOSED ? new RunClosedError(runId, typeof e.detail === 'string' ? e.detail : 'closed') : err;
}

export async function cancelRequested(tx: Tx, runId: string): Promise<boolean> {
  const { rows } = await tx.query<{ cancel_requested: boolean }>('select cancel_requested from connectors.runs where id = $1', [runId]);
  return rows[0]?.cancel_requested ?? false;
}

/**
 * Ends a run, once: a run no longer Running (the interrupted-run sweep got there first, its process
 * having gone silent) keeps the end it has; `ended` then says false and the record is the stored one.
 */
export async function finishRun(tx: Tx, runId: string, status: Exclude<RunStatus, 'Running'>, errorMessage?: string): Promise<RunRecord & { ended: boolean }> {
  const { rows } = await tx.query<RunRecord>(
    `update connectors.runs set status = $2, ended_at = now(), error_message = $3 where id = $1 and status = 'Running' returning ${COLUMNS}`,
    [runId, status, errorMessage ?? null],
  );
  if (rows[0]) return { ...rows[0], ended: true };
  return { ...(await getRun(tx, runId)), ended: false };
}

export async function getRun(tx: Tx, id: string): Promise<RunRecord> {
  if (!isUuid(id)) throw new NotFoundError('run not found');
  const { rows } = await tx.query<RunRecord>(`select ${READ_COLUMNS} from connectors.runs run ${addedCounts('run')} where run.id = $1`, [id]);
  if (!rows[0]) throw new NotFoundError('run not found');
  return rows[0];
}

/** The newest runs first (of one connector, given its id). */
function runsSql(connectorId: string | undefined): string {
  return `select ${READ_COLUMNS} from connectors.runs run ${addedCounts('run')} ${connectorId === undefined ? '' : 'where run.connector_id = $2'} order by run.started_at desc, run.id limit $1`;
}

export async function listRuns(tx: Tx, limit: number, connectorId?: string): Promise<RunRecord[]> {
  // A named statement per shape (with or without the connector), each with a plan of its own.
  const { rows } = await tx.query<RunRecord>(runsSql(connectorId), connectorId === undefined ? [limit] : [limit, connectorId], { prepare: true });
  return rows;
}

/** A run list's filter: a connector by its name (runs of a deleted connector keep it) or its id. */
export interface RunFilter {
  connector?: string;
}

/**
 * A page of the tenant's runs, newest first, as the answer's JSON text (src/db/json-text.ts) with the
 * last run's sort key when more follow (src/db/keyset.ts). The order is the start instant itself
 * (to the microsecond), then the id: not `startedAt`, whose text stops at milliseconds (two runs
 * started within one millisecond sorted by their ids there, so the newest `limit` runs were chosen
 * by one order and shown in another: `limit=1` answered the newer run, `limit=2` the older one
 * first). A page after a key holds the runs after it in that order, so paging meets every run once.
 * With `connector`, only the runs recorded under that name or connector id (none for a name no run
 * has). Each record is made from its row beside the row's own start and id.
 */
/** listRunsJson's texts by their filters (`textOfShape`). */
const RUN_PAGE_TEXTS = new Map<string, string>();

export async function listRunsJson(tx: Tx, page: PageRequest, filter: RunFilter = {}): Promise<Page<JsonText>> {
  const where: string[] = [];
  const values: unknown[] = [page.limit];
  if (filter.connector) {
    // A name is read through runs_tenant_connector_name in the list's order (connectors V10); an id,
    // which may be a name too, joins the runs of that connector id (runs_connector) and is sorted.
    values.push(filter.connector);
    const name = `connector_name = $${values.length}`;
    if (isUuid(filter.connector)) {
      values.push(filter.connector);
      where.push(`(${name} or connector_id = $${values.length}::uuid)`);
    } else where.push(name);
  }
  if (page.after) {
    values.push(page.after[0], page.after[1]);
    const [at, id] = [`$${values.length - 1}::timestamptz`, `$${values.length}::uuid`];
    // The first term bounds the index scan (runs_tenant_started); the second drops the ties already shown.
    where.push(`started_at <= ${at} and (started_at < ${at} or id > ${id})`);
  }
  // A named statement per shape (filtered or not, first page or not), each with a plan of its own.
  const filters = where.join(' and ');
  const text = textOfShape(RUN_PAGE_TEXTS, filters, () =>
    jsonPageSql({
      rows: `select run.*, added.* from connectors.runs run ${addedCounts('run')} ${filters ? `where ${filters}` : ''} order by started_at desc, id limit $1::integer + 1`,
      order: 'started_at desc, id',
      limit: '$1::integer',
      record: columns('run'),
      alias: 'run',
      key: `array[${keyInstantSql('started_at')}, id::text]`,
    }),
  );
  const { rows } = await tx.query<{ body: string; next: string[] | null }>(text, values, { prepare: true });
  return { items: new JsonText(rows[0]!.body), ...(rows[0]!.next ? { next: rows[0]!.next } : {}) };
}

/**
 * Cancel: 202 semantics for a running run (the flag its process reads: see ConnectorRunner), 409 when
 * already over. A run whose heartbeat is stale (`staleMs`, the rule of `failInterrupted`) has no
 * process left to read the flag: it is ended at once as the interrupted-run sweep would end it (Failed,
 * `INTERRUPTED_MESSAGE`), freeing its endpoint, and `interrupted` is true; the caller emits the
 * sweep's event for it.
 */
export async function requestCancel(tx: Tx, id: string, staleMs: number): Promise<{ run: RunRecord; interrupted: boolean }> {
  const run = await getRun(tx, id);
  if (run.status !== 'Running') throw new ConflictError(`run ${id} is already ${run.status}`);
  const { rows } = await tx.query<RunRecord>(
    `update connectors.runs set status = 'Failed', ended_at = now(), error_message = $3
      where id = $1 and status = 'Running' and ${STALE} returning ${COLUMNS}`,
    [id, staleMs / 1000, INTERRUPTED_MESSAGE],
  );
  if (rows[0]) return { run: rows[0], interrupted: true };
  await tx.query('update connectors.runs set cancel_requested = true where id = $1', [id]);
  return { run, interrupted: false };
}

/**
 * Marks runs this process is running (or about to) as alive; answers those of them whose cancel was
 * requested meanwhile (by whichever process served the request).
 */
export async function heartbeat(tx: Tx, runIds: readonly string[]): Promise<string[]> {
  if (runIds.length === 0) return [];
  const { rows } = await tx.query<{ id: string; cancel_requested: boolean }>(
    `update connectors.runs set heartbeat_at = now() where id = any($1::uuid[]) and status = 'Running' returning id, cancel_requested`,
    [runIds],
  );
  return rows.filter((r) => r.cancel_requested).map((r) => r.id);
}

export const INTERRUPTED_MESSAGE = 'interrupted: the hub stopped during the run';

/** A run's heartbeat older than the stale limit (in seconds, parameter $2): its process died. */
const STALE = 'heartbeat_at < now() - make_interval(secs => $2)';

/**
 * Runs left Running by a process that died (no heartbeat for `staleMs`): closed as Failed, each
 * with its `connector.run.failed` event (retryable), in the transaction given, which must see every
 * tenant (`Database.crossTenant`). Returns the runs closed.
 */
export async function failInterrupted(
  tx: Tx,
  staleMs: number,
  emit: (tenantId: number, runId: string, connectorId: string) => Promise<void>,
): Promise<Array<{ id: string; tenantId: number; connector: string }>> {
  const { rows } = await tx.query<{ id: string; tenant_id: string; connector_id: string; connector_name: string }>(
    `update connectors.runs set status = 'Failed', ended_at = now(), error_message = $1
      where id in (select id from connectors.runs where status = 'Running' and ${STALE} for update skip locked)
      returning id, tenant_id, connector_id::text, connector_name`,
    [INTERRUPTED_MESSAGE, staleMs / 1000],
  );
  for (const r of rows) await emit(Number(r.tenant_id), r.id, r.connector_id);
  return rows.map((r) => ({ id: r.id, tenantId: Number(r.tenant_id), connector: r.connector_name }));
}
