import type { Statement, Tx } from '../../db/database.js';
import { type Page, type PageRequest, pageOfRows } from '../../db/keyset.js';
import { ConflictError, NotFoundError, ValidationError } from '../../errors.js';
import { toStorable } from '../../validation/input-limits.js';
import { exactNumbersAsText, jsonText, parseJsonExact } from '../engine/exact-json.js';
import { isUuid } from '../../validation/uuid.js';

export interface DeadLetterInput {
  skipReason: string;
  errorMessage: string;
  payload: unknown;
  skipDetail?: Record<string, unknown>;
}

export interface DeadLetter {
  id: number;
  runId: string;
  connectorId: string;
  endpointId: string | null;
  skipReason: string;
  errorMessage: string;
  attempts: number;
  resolution: string | null;
  capturedAt: string;
  payload?: unknown;
  skipDetail?: unknown;
}

const SUMMARY = `id, run_id as "runId", connector_id as "connectorId", endpoint_uuid as "endpointId", skip_reason as "skipReason",
  error_message as "errorMessage", attempts, resolution, captured_at as "capturedAt"`;

type Row = Omit<DeadLetter, 'capturedAt'> & { capturedAt: Date };
const toEntry = (row: Row): DeadLetter => ({ ...row, capturedAt: row.capturedAt.toISOString() });

export async function insertDeadLetters(tx: Tx, ids: { runId: string; connectorId: string; endpointUuid: string }, entries: DeadLetterInput[]): Promise<void> {
  const statement = deadLettersStatement(ids, entries);
  if (statement) await tx.query(statement.text, statement.values);
}

/** insertDeadLetters's one statement (none for no entry), for a caller that sends it in one message with others (Tx.queryAfter). */
export function deadLettersStatement(ids: { runId: string; connectorId: string; endpointUuid: string }, entries: DeadLetterInput[]): Statement | undefined {
  if (entries.length === 0) return undefined;
  return {
    text: `insert into connectors.dead_letters (tenant_id, run_id, connector_id, endpoint_uuid, skip_reason, error_message, payload, skip_detail)
     select core.current_tenant(), $1, $2, $3, x.skip_reason, x.error_message, x.payload, x.skip_detail
       from jsonb_to_recordset($4::jsonb) as x(skip_reason text, error_message text, payload jsonb, skip_detail jsonb)`,
    values: [
      ids.runId,
      ids.connectorId,
      ids.endpointUuid,
      // What could not be stored is kept with its unstorable characters replaced (U+FFFD).
      jsonText(entries.map((e) => toStorable({ skip_reason: e.skipReason, error_message: e.errorMessage, payload: e.payload, skip_detail: e.skipDetail ?? null }))),
    ],
  };
}

/**
 * Every connector id a name or id stands for: a manifest connector's, and those the runs record
 * under that name or id (a CSV source known only from its runs, a deleted connector whose name was
 * applied again, a CSV source ingested before a manifest of its name was applied), as the run list
 * reads a name (listRunsJson: `connector_name`). An id is a UUID in either case, as the run records
 * and entries show it. Empty when the tenant has none.
 */
export async function connectorIdsOf(tx: Tx, ref: string): Promise<string[]> {
  const { rows } = await tx.query<{ id: string }>(
    `select id from connectors.connectors where name = $1 or id = $2::uuid
     union select distinct connector_id from connectors.runs where connector_name = $1 or connector_id = $2::uuid`,
    [ref, isUuid(ref) ? ref : null],
  );
  return rows.map((r) => r.id);
}

/**
 * The ids of the connectors a scope-bound caller holding the scopes of parameter `$n` may read: a
 * connector of at least one scope, each held (a CSV source with no manifest, or a deleted
 * connector, has none).
 */
const HELD_CONNECTORS = (n: number) => `select id from connectors.connectors where cardinality(scopes) > 0 and scopes <@ $${n}::text[]`;

/**
 * The scopes of the connector an entry came from, for the scope check of a scope-bound caller:
 * [] when the connector is gone or was a CSV source with no manifest (no scope); undefined when there
 * is no such entry, or it is erased.
 */
export async function deadLetterScopes(tx: Tx, id: string): Promise<string[] | undefined> {
  assertEntryId(id);
  const { rows } = await tx.query<{ scopes: string[] | null }>(
    'select c.scopes from connectors.dead_letters d left join connectors.connectors c on c.id = d.connector_id where d.id = $1 and d.erased_at is null',
    [id],
  );
  return rows[0] && (rows[0].scopes ?? []);
}

/** The connector id of a run (a UUID), as a list: empty when there is no such run. */
export async function runConnectorIds(tx: Tx, runId: string): Promise<string[]> {
  const { rows } = await tx.query<{ id: string }>('select connector_id as id from connectors.runs where id = $1', [runId]);
  return rows.map((r) => r.id);
}

/**
 * Whether any of these connector ids (a run's, or those a name stands for) is of a connector whose
 * every scope is held: a filter naming only others' is a 403 to a scope-bound caller.
 */
export async function holdsAnyConnector(tx: Tx, ids: readonly string[], held: readonly string[]): Promise<boolean> {
  const { rows } = await tx.query<{ held: boolean }>(`select exists (select 1 from (${HELD_CONNECTORS(2)}) c where c.id = any($1::uuid[])) as held`, [ids, held]);
  return rows[0]!.held;
}

/**
 * Spec 1 list semantics: with `run`, that run's whole history (every reason and resolution) and it
 * wins over `connector`; with `connector`, only its unresolved entries; with neither, every active
 * (unresolved) entry. Erased entries never appear. Newest (largest id) first: a page after a key
 * holds the entries of smaller ids. `held`: a scope-bound caller's scopes; only the entries of
 * connectors every scope of which is held are listed (in the statement, so that a page holds `limit`).
 */
export async function listDeadLetters(tx: Tx, page: PageRequest, query: { runId?: string; connectorIds?: string[]; held?: readonly string[] }): Promise<Page<DeadLetter[]>> {
  if (query.runId && !isUuid(query.runId)) return { items: [] };
  const values: unknown[] = [page.limit];
  const where = ['erased_at is null'];
  if (query.held) {
    values.push(query.held);
    where.push(`connector_id in (${HELD_CONNECTORS(values.length)})`);
  }
  if (query.runId) {
    values.push(query.runId);
    where.push(`run_id = $${values.length}`);
  } else {
    where.push('resolution is null');
    if (query.connectorIds !== undefined) {
      values.push(query.connectorIds);
      where.push(`connector_id = any($${values.length}::uuid[])`);
    }
  }
  if (page.after) {
    values.push(page.after[0]);
    where.push(`id < $${values.length}::bigint`);
  }
  const { rows } = await tx.query<Row>(`select ${SUMMARY} from connectors.dead_letters where ${where.join(' and ')} order by id desc limit $1 + 1`, values);
  return pageOfRows(rows, page.limit, (row) => [String(row.id)], toEntry);
}

/** An entry's id as the path gives it: anything but a bigint's digits names no entry. */
function assertEntryId(id: string): void {
  if (!/^\d{1,18}$/.test(id)) throw new NotFoundError('dead-letter entry not found');
}

export async function getDeadLetter(tx: Tx, id: string): Promise<DeadLetter> {
  assertEntryId(id);
  // The payload as text, read as the engine reads a source: a number a double cannot hold (an integer
  // beyond ±(2^53 − 1), 1e400) comes out as its text in a string, as the pre-flight's sample shows it.
  const { rows } = await tx.query<Row & { payload: string | null }>(
    `select ${SUMMARY}, payload::text as payload, skip_detail as "skipDetail" from connectors.dead_letters where id = $1 and erased_at is null`,
    [id],
  );
  if (!rows[0]) throw new NotFoundError('dead-letter entry not found');
  const { payload } = rows[0];
  return toEntry({ ...rows[0], payload: payload === null ? null : exactNumbersAsText(parseJsonExact(payload)) });
}

/**
 * Spec 1 moves an entry out of pending only. The same resolution again is a no-op that keeps the
 * first record (a retried request answers 204 as the first did); a replay naming another run than the
 * one recorded (or a run where none was recorded) and the other resolution are a ConflictError (409).
 */
async function resolve(tx: Tx, id: string, resolution: 'replayed' | 'discarded', newRunId: string | null): Promise<void> {
  const { rowCount } = await tx.query(
    `update connectors.dead_letters set resolution = $2, resolved_run_id = $3, resolved_at = now() where id = $1 and erased_at is null and resolution is null`,
    [id, resolution, newRunId],
  );
  if (rowCount) return;
  const { rows } = await tx.query<{ resolution: string; runId: string | null }>(
    `select resolution, resolved_run_id as "runId" from connectors.dead_letters where id = $1 and erased_at is null`,
    [id],
  );
  const held = rows[0];
  if (!held) throw new NotFoundError('dead-letter entry not found');
  if (held.resolution !== resolution) throw new ConflictError(`dead-letter entry ${id} is already ${held.resolution}`);
  if (resolution === 'replayed' && newRunId !== null && newRunId !== held.runId) {
    throw new ConflictError(`dead-letter entry ${id} is already replayed ${held.runId ? `by run ${held.runId}` : 'without a run id'}`, 'newRunId');
  }
}

export async function markReplayed(tx: Tx, id: string, newRunId?: string): Promise<void> {
  await getDeadLetter(tx, id);
  // The replaying run is recorded as a reference: it must be a run of the tenant (row-level security).
  if (newRunId !== undefined && !(await tx.query('select 1 from connectors.runs where id = $1', [newRunId])).rowCount) {
    throw new ValidationError(`newRunId ${newRunId} names no run of the tenant`, 'newRunId');
  }
  await resolve(tx, id, 'replayed', newRunId ?? null);
}

export async function discard(tx: Tx, id: string): Promise<void> {
  await getDeadLetter(tx, id);
  await resolve(tx, id, 'discarded', null);
}

/** Data-protection erase: the entry is soft-deleted, its payload scrubbed, and excluded everywhere. */
export async function erase(tx: Tx, id: string): Promise<void> {
  assertEntryId(id);
  // Only an entry not erased yet: of two erases at once, the second finds none (404), as an erase
  // after an erase, and the erasure keeps the first one's time.
  const { rowCount } = await tx.query(
    `update connectors.dead_letters set erased_at = now(), payload = null, skip_detail = null, error_message = '[erased]' where id = $1 and erased_at is null`,
    [id],
  );
  if (!rowCount) throw new NotFoundError('dead-letter entry not found');
}
