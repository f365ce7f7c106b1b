import { randomUUID } from 'node:crypto';
import { type Caller, hubUserId, type ScopeAccess, scopeAccessOf, scopeAccessSql } from '../admin/scope-access.js';
import { arrayLiteral } from '../db/array-literal.js';
import type { Tx } from '../db/database.js';
import { JsonText } from '../db/json-text.js';
import { jsonPageSql, type Page, type PageRequest, textOfShape } from '../db/keyset.js';
import { isoTimestampSql } from '../db/timestamps.js';
import { NotFoundError } from '../errors.js';
import { storableUpstreamMessage } from '../observability/logger.js';
import { storableText } from '../validation/input-limits.js';
import type { AttemptOutcome, AttemptRecord, DeliveryKind, DeliveryRecord } from './model.js';
import { integrationNotFound, parseId } from './integrations.js';

/**
 * The delivery journal (spec 1 "Delivery record"; CONTRACTS.md section 4): reads in the caller's
 * tenant (`Database.withTenant`), and the lease-guarded writes of the workers (any transaction).
 */

/**
 * A record's columns, each named as the record's field and its times as the text of the answer
 * (`isoTimestampSql`): a row is a DeliveryRecord as it is, and the lists are the rows as the
 * database serialises them (`jsonPageSql`, src/db/keyset.ts).
 */
const RECORD_COLUMNS = `d.id, d.integration_id as "integrationId", d.event_type as "eventType", d.event_id as "eventId", d.kind,
  d.replay_of as "replayOf", d.attempts, d.succeeded, d.closed_reason as "closedReason", d.http_status, d.response_body, d.error,
  d.duration_ms, ${isoTimestampSql('d.attempted_at')} as attempted_at, ${isoTimestampSql('d.created_at')} as "createdAt"`;

/**
 * The lists are named statements with their row limit written into the text, each parsed once per
 * connection and, its plan not depending on any parameter left, planned once (PostgreSQL keeps the
 * generic plan after five executions). With the limit a parameter, PostgreSQL estimated the generic
 * plan for a tenth of the table and planned every execution anew (≈ 0.2–0.4 ms of the server's
 * time per list under load, as much as running it). The text takes the smallest of a few steps that
 * covers the limit asked for (and one row past it, which says whether another page follows), and
 * the limit itself is a parameter of the outer statement over at most that many rows (which leaves
 * the plan as it is), so a connection holds a handful of these statements whatever limits callers
 * choose, not one per limit.
 */
const PREPARED = { prepare: true } as const;
const LIMIT_STEPS = [10, 50, 100, 200] as const;

/** The row limit written into a list's text for `limit`: a step, or `limit` itself above the last (an integer, never text from outside). */
function limitStep(limit: number): number {
  if (!Number.isSafeInteger(limit) || limit < 1) throw new Error(`a list limit must be a positive integer, not ${limit}`);
  return LIMIT_STEPS.find((step) => step >= limit) ?? limit;
}

/** deliveryPage's texts by their shape (`textOfShape`). */
const PAGE_TEXTS = new Map<string, string>();

/** `status=failed`: not succeeded, and attempted at least once or closed (those waiting for a retry included). */
const FAILED = '(not d.succeeded and (d.attempts > 0 or d.closed_reason is not null))';

interface ListOptions {
  failedOnly: boolean;
  integrationId?: number;
  /** Integrations whose deliveries are left out (a scope-bound caller's: not theirs to hold). */
  excluded?: number[];
  /** Whose scope access is read with the page (`Listed.access`). */
  caller: Caller;
}

/** A page of deliveries, and the caller's scope access read in the same statement (`scopeAccessSql`). */
export interface Listed {
  page: Page<JsonText>;
  access: ScopeAccess;
}

/**
 * A page of deliveries as the answer's JSON text, with the last one's sort key when more follow:
 * the rows of `where` (over `d`) in `order` (unqualified columns), one past the step covering the
 * limit written into the text (`limitStep`), the page's limit a parameter. The caller's scope access
 * comes with it: one round trip for the route where reading the access first cost two more.
 */
async function deliveryPage(
  tx: Tx,
  q: { found: string; where: string[]; order: string; key: string; values: unknown[]; limit: number; caller: Caller },
): Promise<{ found: boolean } & Listed> {
  const values = [...q.values, hubUserId(q.caller) ?? null, q.limit];
  const filters = q.where.join(' and ');
  const step = limitStep(q.limit);
  const text = textOfShape(PAGE_TEXTS, `${q.found}\n${filters}\n${q.order}\n${q.key}\n${step}\n${values.length}`, () => {
    const rows = `select d.* from hub.deliveries d ${filters ? `where ${filters}` : ''} order by ${q.order} limit ${step + 1}`;
    const page = jsonPageSql({ rows, order: q.order, limit: `$${values.length}::integer`, record: RECORD_COLUMNS, alias: 'd', key: q.key });
    const access = scopeAccessSql(`$${values.length - 1}::bigint`);
    return `select ${q.found} as found, p.body, p.next, a."defaultScope", a.granted from (${page}) p left join (${access}) a on true`;
  });
  const { rows: answer } = await tx.query<{ found: boolean; body: string; next: string[] | null; defaultScope: string | null; granted: string[] | null }>(text, values, PREPARED);
  const row = answer[0]!;
  return { found: row.found, page: { items: new JsonText(row.body), ...(row.next ? { next: row.next } : {}) }, access: scopeAccessOf(row) };
}

/**
 * A page of one integration's deliveries, newest first (a page after a key: the smaller ids), as the
 * answer's JSON text, with the caller's scope access; 404 when the tenant has no integration of that
 * id (a deleted one keeps its deliveries). One statement: whether the integration exists, its
 * deliveries and the access.
 */
export async function listForIntegration(tx: Tx, integrationId: string | number, page: PageRequest, options: ListOptions): Promise<Listed> {
  const id = parseId(integrationId);
  if (id === undefined) throw integrationNotFound(integrationId);
  const values: unknown[] = [id];
  const where = ['d.integration_id = $1'];
  if (options.failedOnly) where.push(FAILED);
  if (page.after) {
    values.push(page.after[0]);
    where.push(`d.id < $${values.length}::bigint`);
  }
  const listed = await deliveryPage(tx, {
    found: 'exists (select 1 from hub.integrations i where i.id = $1)',
    where,
    order: 'id desc',
    key: 'array[id::text]',
    values,
    limit: page.limit,
    caller: options.caller,
  });
  if (!listed.found) throw integrationNotFound(integrationId);
  return { page: listed.page, access: listed.access };
}

/**
 * A page of the tenant's deliveries across integrations, failures first, then newest first (a page
 * after a key: the rest of its group, then the later group), as the answer's JSON text, with the
 * caller's scope access. Filtered by an integration id the tenant has no integration of: 404, as
 * that integration's own list (an empty list would hide a wrong id); a deleted one keeps its deliveries.
 */
export async function listForTenant(tx: Tx, page: PageRequest, options: ListOptions): Promise<Listed> {
  const values: unknown[] = [];
  const where: string[] = [];
  let found = 'true';
  if (options.failedOnly) where.push(FAILED);
  if (options.integrationId !== undefined) {
    values.push(options.integrationId);
    where.push(`d.integration_id = $${values.length}`);
    found = `exists (select 1 from hub.integrations i where i.id = $${values.length})`;
  }
  if (options.excluded?.length) {
    values.push(options.excluded);
    where.push(`d.integration_id <> all($${values.length}::bigint[])`);
  }
  if (page.after) {
    values.push(page.after[0], page.after[1]);
    const [succeeded, id] = [`$${values.length - 1}::boolean`, `$${values.length}::bigint`];
    where.push(`d.succeeded >= ${succeeded} and (d.succeeded > ${succeeded} or d.id < ${id})`);
  }
  const listed = await deliveryPage(tx, { found, where, order: 'succeeded, id desc', key: 'array[succeeded::text, id::text]', values, limit: page.limit, caller: options.caller });
  if (!listed.found) throw integrationNotFound(options.integrationId!);
  return { page: listed.page, access: listed.access };
}

/** One delivery of the tenant (optionally of one integration) with every attempt; 404 otherwise. */
export async function getDelivery(tx: Tx, deliveryId: string | number, integrationId?: number): Promise<DeliveryRecord & { attemptLog: AttemptRecord[] }> {
  const id = parseId(deliveryId);
  if (id === undefined) throw new NotFoundError(`delivery ${deliveryId} not found`);
  const { rows } = await tx.query<DeliveryRecord>(`select ${RECORD_COLUMNS} from hub.deliveries d where d.id = $1`, [id]);
  const row = rows[0];
  if (!row || (integrationId !== undefined && row.integrationId !== integrationId)) throw new NotFoundError(`delivery ${deliveryId} not found`);
  const attempts = await tx.query<{ attempt: number; http_status: number | null; response_body: string | null; error: string | null; duration_ms: number; attempted_at: Date }>(
    'select attempt, http_status, response_body, error, duration_ms, attempted_at from hub.delivery_attempts where delivery_id = $1 order by attempt',
    [id],
  );
  return {
    ...row,
    attemptLog: attempts.rows.map((a) => ({ ...a, attempted_at: a.attempted_at.toISOString() })),
  };
}

export async function recordById(tx: Tx, id: number): Promise<DeliveryRecord> {
  const { rows } = await tx.query<DeliveryRecord>(`select ${RECORD_COLUMNS} from hub.deliveries d where d.id = $1`, [id]);
  if (!rows[0]) throw new NotFoundError(`delivery ${id} not found`);
  return rows[0];
}

/** What a worker needs to make one attempt: the row and its integration, read when the lease was taken. */
export type ClaimedRow = {
  id: number;
  tenant_id: number;
  kind: DeliveryKind;
  event_id: number | null;
  event_type: string;
  body: string;
  attempts: number;
  integration_id: number;
  target_url: string;
  auth_mode: 'HMAC' | 'BEARER' | 'NONE';
  secret_iv: Buffer | null;
  secret_tag: Buffer | null;
  secret_ciphertext: Buffer | null;
  event_types: string[];
  enabled: boolean;
  deleted: boolean;
  standard_webhooks: boolean;
  /** Read with the integration: false once its tenant is deactivated (the attempt then closes the row). */
  tenant_active: boolean;
};

/** What an attempt needs of its integration (part of ClaimedRow). */
export type IntegrationColumns = Pick<
  ClaimedRow,
  'integration_id' | 'target_url' | 'auth_mode' | 'secret_iv' | 'secret_tag' | 'secret_ciphertext' | 'event_types' | 'enabled' | 'deleted' | 'standard_webhooks' | 'tenant_active'
>;

/** SQL, the `tenant_active` column of integration `i`: whether its tenant is still active. */
export const TENANT_ACTIVE_SQL = '(select t.active from core.tenants t where t.id = i.tenant_id) is not false as tenant_active';

export function integrationColumns(row: IntegrationColumns): IntegrationColumns {
  return {
    integration_id: row.integration_id,
    target_url: row.target_url,
    auth_mode: row.auth_mode,
    secret_iv: row.secret_iv,
    secret_tag: row.secret_tag,
    secret_ciphertext: row.secret_ciphertext,
    event_types: row.event_types,
    enabled: row.enabled,
    deleted: row.deleted,
    standard_webhooks: row.standard_webhooks,
    tenant_active: row.tenant_active,
  };
}

/** An integration as an attempt needs it (any tenant: the worker role), or undefined when it never existed. */
export async function readIntegration(tx: Tx, id: number): Promise<IntegrationColumns | undefined> {
  const { rows } = await tx.query<IntegrationColumns>(
    `select i.id as integration_id, i.target_url, i.auth_mode, i.secret_iv, i.secret_tag, i.secret_ciphertext, i.event_types, i.enabled,
            i.deleted_at is not null as deleted, i.standard_webhooks, ${TENANT_ACTIVE_SQL}
       from hub.integrations i where i.id = $1`,
    [id],
  );
  return rows[0];
}

/**
 * Renews the lease of a row this worker holds (its token) and reads what the attempt needs.
 * Undefined when the row is no longer this worker's (the lease ran out and someone else claimed
 * it), or is done (succeeded or closed).
 */
export async function takeLease(tx: Tx, id: number, token: string, leaseMs: number): Promise<ClaimedRow | undefined> {
  const { rows } = await tx.query<ClaimedRow>(
    `update hub.deliveries d set lease_until = now() + make_interval(secs => $3::double precision / 1000)
       from hub.integrations i
      where d.id = $1 and d.lease_token = $2 and i.id = d.integration_id and not d.succeeded and d.closed_reason is null
      returning d.id, d.tenant_id, d.kind, d.event_id, d.event_type, d.body, d.attempts, i.id as integration_id, i.target_url, i.auth_mode,
                i.secret_iv, i.secret_tag, i.secret_ciphertext, i.event_types, i.enabled, i.deleted_at is not null as deleted, i.standard_webhooks,
                ${TENANT_ACTIVE_SQL}`,
    [id, token, leaseMs],
  );
  return rows[0];
}

/**
 * Renews the lease of a row whose attempt is still under way (an exchange that may outlast half the
 * lease); nothing when the row is no longer this worker's (its outcome written, or claimed by another).
 */
export async function renewLease(tx: Tx, id: number, token: string, leaseMs: number): Promise<void> {
  await renewLeases(tx, [{ id, token }], leaseMs);
}

/** `renewLease` for many rows in one statement (outcomes waiting to be written: outcome-writer.ts). */
export async function renewLeases(tx: Tx, rows: ReadonlyArray<{ id: number; token: string }>, leaseMs: number): Promise<void> {
  await tx.query(
    `update hub.deliveries d set lease_until = now() + make_interval(secs => $3::double precision / 1000)
       from unnest($1::bigint[], $2::uuid[]) as q (id, token) where d.id = q.id and d.lease_token = q.token`,
    [rows.map((r) => r.id), rows.map((r) => r.token), leaseMs],
  );
}

/** Gives back the leases of rows ($1, ids) leased under a token ($2) and never queued: the next retry sweep takes them. */
/**
 * Keeps an outbox event (`o`) from the retention purge while a batch of the webhook consumer names
 * it (hub.delivery_batches): its cursor has passed the event, but the deliveries of a batch whose
 * process died are written by the retry sweep from the event itself (src/events/consumer.ts,
 * `purgeOutbox`).
 */
export const OUTBOX_KEPT_FOR_BATCHES = 'exists (select 1 from hub.delivery_batches b where o.id = any(b.event_ids))';

export const RELEASE_LEASES_SQL = 'update hub.deliveries set lease_until = null, lease_token = null where id = any($1::bigint[]) and lease_token = $2';

/** Closes a row this worker holds with a reason (no attempt made); its lease goes. */
export async function closeRow(tx: Tx, id: number, token: string, reason: string): Promise<void> {
  await tx.query(
    `update hub.deliveries set closed_reason = $3, lease_until = null, lease_token = null
      where id = $1 and lease_token = $2 and closed_reason is null`,
    [id, token, reason],
  );
}

/**
 * Writes an attempt's outcome back: the row's latest outcome and attempt count, and the attempt in
 * the journal. The lease is released only if this worker still holds it. An outcome is recorded
 * even if the lease ran out meanwhile (the attempt did happen). Written again under the same
 * `outcomeId` (a batch whose commit succeeded but whose answer was lost, written again row by row),
 * it changes nothing and answers the attempt number it was written as.
 */
export async function writeBack(tx: Tx, id: number, token: string, outcome: AttemptOutcome, outcomeId: string = randomUUID()): Promise<number | undefined> {
  // One statement: the row and its journal entry together, with no transaction to open around them.
  const { rows } = await tx.query<{ attempt: number }>(
    `with written as (
       select attempt from hub.delivery_attempts where delivery_id = $1 and outcome_id = $9
     ), row as (
       update hub.deliveries set attempts = attempts + 1, succeeded = succeeded or $3,
              -- the latest attempt's fields: an outcome written late, of an attempt older than the one recorded, leaves them
              http_status = case when attempted_at > $8 then http_status else $4 end,
              response_body = case when attempted_at > $8 then response_body else $5 end,
              error = case when attempted_at > $8 then error else $6 end,
              duration_ms = case when attempted_at > $8 then duration_ms else $7 end,
              attempted_at = greatest(attempted_at, $8),
              lease_until = case when lease_token = $2 then null else lease_until end,
              lease_token = case when lease_token = $2 then null else lease_token end
        where id = $1 and not exists (select 1 from written)
        returning id, attempts, tenant_id
     ), inserted as (
       insert into hub.delivery_attempts (delivery_id, attempt, tenant_id, http_status, response_body, error, duration_ms, attempted_at, outcome_id)
       select id, attempts, tenant_id, $4, $5, $6, $7, $8, $9 from row
       returning attempt
     )
     select attempt from inserted union all select attempt from written`,
    [id, token, outcome.ok, outcome.httpStatus, storable(outcome.responseBody), storableError(outcome.error), outcome.durationMs, outcome.attemptedAt, outcomeId],
  );
  return rows[0]?.attempt;
}

/**
 * `writeBack` of an outcome whose batch (`writeBackMany`) failed without a word on whether it
 * committed (its connection lost): the batch may have committed, or may still be running on the
 * server, or may not even have reached it yet. First, in a statement of its own, the delivery is
 * marked with the outcome's id (`outcome_written_again`, hub V8): that waits for a batch holding the
 * row to end, and from its commit on a batch that reaches the row skips it. Then the outcome is
 * written as `writeBack` does, unless the journal has it: the batch committed. Two statements, on
 * this path only; the batches pay one comparison per row for it.
 */
export async function writeBackAgain(tx: Tx, id: number, token: string, outcome: AttemptOutcome, outcomeId: string): Promise<number | undefined> {
  await tx.query('update hub.deliveries set outcome_written_again = $2 where id = $1', [id, outcomeId]);
  return writeBack(tx, id, token, outcome, outcomeId);
}

/** One outcome to write back (`writeBackMany`). */
export interface Outcome {
  id: number;
  token: string;
  outcome: AttemptOutcome;
}

/**
 * `writeBack` for many rows in one statement (each row at most once): every row's latest outcome
 * and attempt count, and each attempt in the journal, with the same lease rule. Returns the
 * attempt number of each row written (rows that are gone are absent). The rows are also named by
 * `id = any(…)`: joined to the unnest alone, the planner scans the whole table while it is small
 * (a new hub's first few thousand deliveries: 2–3 ms a statement for 6,000 rows). With `answer`
 * false, nobody waits for the attempt numbers: the statement returns no rows (an empty map), which
 * saves a row object per outcome. Every outcome of the statement is written under the one
 * `outcomeId` (default a new one): an outcome id tells apart the attempts of one delivery only
 * (`writeBack` looks it up with the delivery's id), and a statement writes each row at most once, so
 * one id per statement is as good as one per outcome, without a UUID made and sent per outcome.
 */
export async function writeBackMany(tx: Tx, outcomes: Outcome[], answer = true, outcomeId: string = randomUUID()): Promise<Map<number, number>> {
  if (outcomes.length === 0) return new Map();
  const { rows } = await tx.query<{ delivery_id: number; attempt: number }>(
    `with v as (
       select * from unnest($1::bigint[], $2::uuid[], $3::boolean[], $4::integer[], $5::text[], $6::text[], $7::integer[], $8::timestamptz[])
         as v (id, token, ok, http_status, response_body, error, duration_ms, attempted_at)
     ), row as (
       update hub.deliveries d set attempts = d.attempts + 1, succeeded = d.succeeded or v.ok,
              -- the latest attempt's fields: an outcome written late, of an attempt older than the one recorded, leaves them
              http_status = case when d.attempted_at > v.attempted_at then d.http_status else v.http_status end,
              response_body = case when d.attempted_at > v.attempted_at then d.response_body else v.response_body end,
              error = case when d.attempted_at > v.attempted_at then d.error else v.error end,
              duration_ms = case when d.attempted_at > v.attempted_at then d.duration_ms else v.duration_ms end,
              attempted_at = greatest(d.attempted_at, v.attempted_at),
              lease_until = case when d.lease_token = v.token then null else d.lease_until end,
              lease_token = case when d.lease_token = v.token then null else d.lease_token end
         from v
        -- a row whose outcome is being written again (writeBackAgain) already has it, or will
        where d.id = v.id and d.id = any($1::bigint[]) and d.outcome_written_again is distinct from $9::uuid
        returning d.id, d.attempts, d.tenant_id, v.http_status, v.response_body, v.error, v.duration_ms, v.attempted_at
     )
     insert into hub.delivery_attempts (delivery_id, attempt, tenant_id, http_status, response_body, error, duration_ms, attempted_at, outcome_id)
     select id, attempts, tenant_id, http_status, response_body, error, duration_ms, attempted_at, $9::uuid from row
     ${answer ? 'returning delivery_id, attempt' : ''}`,
    // The arrays' literals made here in one pass each (src/db/array-literal.ts), not by node-postgres.
    [
      arrayLiteral(outcomes.map((o) => o.id)),
      arrayLiteral(outcomes.map((o) => o.token)),
      ...outcomeArrays(outcomes),
      outcomeId,
    ],
  );
  return new Map(rows.map((r) => [r.delivery_id, r.attempt]));
}

/** The rows' bodies (each the JSON text sent) as one JSON array: `[body,body,…]`. */
function jsonArrayOf(outcomes: ReadonlyArray<{ row: { body: string } }>): string {
  let text = '[';
  for (let k = 0; k < outcomes.length; k++) text += k === 0 ? outcomes[k]!.row.body : `,${outcomes[k]!.row.body}`;
  return `${text}]`;
}

/** The outcome columns of a batch of outcomes as array literals (src/db/array-literal.ts): ok, status, body, error, duration, time. */
function outcomeArrays(outcomes: ReadonlyArray<{ outcome: AttemptOutcome }>): string[] {
  return [
    arrayLiteral(outcomes.map((o) => o.outcome.ok)),
    arrayLiteral(outcomes.map((o) => o.outcome.httpStatus)),
    arrayLiteral(outcomes.map((o) => storable(o.outcome.responseBody))),
    arrayLiteral(outcomes.map((o) => storableError(o.outcome.error))),
    arrayLiteral(outcomes.map((o) => o.outcome.durationMs)),
    arrayLiteral(outcomes.map((o) => o.outcome.attemptedAt.toISOString())),
  ];
}

/**
 * An attempt's error (a network failure's description) as stored: masked as a log line is, but for the hub's own
 * secrets (src/observability/logger.ts, `storableUpstreamMessage`). It describes the exchange with the tenant's own
 * endpoint, which may choose what it quotes (a certificate's names in a TLS refusal), and the hub never sends its
 * credentials there: masking them would tell the tenant which of its guesses is one.
 */
function storableError(text: string | null): string | null {
  return text === null ? null : storableUpstreamMessage(text);
}

/**
 * PostgreSQL text holds no NUL character: a response body with one is stored with U+FFFD instead
 * (storableText). The test operation answers it so too, as its delivery records it.
 */
export function storable(text: string | null): string | null {
  return text === null ? null : storableText(text);
}

/**
 * The consumer's matching of a batch's events (`batch`: id, tenant_id, type, created_at, txid) with
 * the integrations they go to: active integrations of the event's tenant, made active before the
 * event was written (not retroactive), whose event types match. Shared by the webhook consumer and
 * the retry sweep's expansion of a batch whose process died (`expandBatches`).
 */
export function batchMatchesSql(matches: string): string {
  return `batch b
           join hub.integrations i on i.tenant_id = b.tenant_id and i.enabled and i.deleted_at is null and i.active_since <= b.created_at
          where ${matches}`;
}

/**
 * The deliveries' identity, a regclass: the consumer reserves the ids of a batch's deliveries
 * (`nextval`), written later under them. Looked up once per statement (a scalar subquery): called per
 * row, the lookup (the name parsed, the dependency found in the catalog) was a visible share of the
 * consumer's statement.
 */
export const DELIVERY_ID_SEQUENCE = `(select pg_get_serial_sequence('hub.deliveries', 'id')::regclass)`;

/**
 * A batch of the webhook consumer held by this process (hub.delivery_batches): its first attempts
 * whose rows are not written yet (`left`), and whether all of them will be written by this process
 * (`kept`: one of them was not, a stop or a failure; its row stays for the retry sweep's expansion
 * once its lease runs out).
 */
export interface HeldBatch {
  id: number;
  token: string;
  left: number;
  kept: boolean;
  /** Its lease's renewal (half a lease after it began, again every half lease), while rows are left. */
  timer: NodeJS.Timeout | undefined;
}

/** One first attempt's outcome to write as its whole row (`writeFirstMany`). */
export interface FirstOutcome {
  row: ClaimedRow;
  outcome: AttemptOutcome;
}

/**
 * Writes the rows of first attempts made on Claims (their rows not written yet: the consumer only
 * reserved their ids), each whole with its outcome (one attempt, no lease), and each attempt in
 * the journal, in one statement; deletes the batch rows `doneBatches` in the same statement (their
 * last rows). An event's row that exists already (written by the retry sweep's expansion of the
 * batch, its lease run out meanwhile) gets the outcome as `writeBackMany` writes one, the attempt
 * counted; one marked with `outcomeId` (`writeBackAgain`) is skipped. Returns the attempt number of
 * each row written by its reserved id (with `answer`).
 */
export async function writeFirstMany(tx: Tx, outcomes: FirstOutcome[], doneBatches: number[], answer = true, outcomeId: string = randomUUID()): Promise<Map<number, number>> {
  if (outcomes.length === 0) return new Map();
  const { rows } = await tx.query<{ delivery_id: number; attempt: number }>(
    `with v as (
       -- The bodies as one JSON array, each element's text kept as sent (the json type): no quoting
       -- and escaping of every body as a text[] element.
       select * from rows from (unnest($1::bigint[]), unnest($2::bigint[]), unnest($3::bigint[]), unnest($4::bigint[]), unnest($5::text[]), json_array_elements($6::json),
                                unnest($7::boolean[]), unnest($8::integer[]), unnest($9::text[]), unnest($10::text[]), unnest($11::integer[]), unnest($12::timestamptz[]))
         as v (id, tenant_id, integration_id, event_id, event_type, body, ok, http_status, response_body, error, duration_ms, attempted_at)
     ), row as (
       insert into hub.deliveries as d (id, tenant_id, integration_id, kind, event_id, event_type, body, attempts, succeeded, http_status, response_body, error, duration_ms, attempted_at)
       overriding system value
       select id, tenant_id, integration_id, 'event', event_id, event_type, body::text, 1, ok, http_status, response_body, error, duration_ms, attempted_at from v
       on conflict (integration_id, event_id) where kind = 'event' do update set attempts = d.attempts + 1, succeeded = d.succeeded or excluded.succeeded,
              http_status = case when d.attempted_at > excluded.attempted_at then d.http_status else excluded.http_status end,
              response_body = case when d.attempted_at > excluded.attempted_at then d.response_body else excluded.response_body end,
              error = case when d.attempted_at > excluded.attempted_at then d.error else excluded.error end,
              duration_ms = case when d.attempted_at > excluded.attempted_at then d.duration_ms else excluded.duration_ms end,
              attempted_at = greatest(d.attempted_at, excluded.attempted_at)
        where d.outcome_written_again is distinct from $13::uuid
       returning d.id, d.attempts, d.tenant_id, d.integration_id, d.event_id, d.http_status, d.response_body, d.error, d.duration_ms, d.attempted_at,
                 d.xmax = 0 as inserted
     )${doneBatches.length > 0 ? ', gone as (delete from hub.delivery_batches where id = any($14::bigint[]))' : ''}
     insert into hub.delivery_attempts (delivery_id, attempt, tenant_id, http_status, response_body, error, duration_ms, attempted_at, outcome_id)
     -- A row inserted holds its outcome; one updated (it existed) may hold a later attempt's: its outcome from v.
     select id, attempts, tenant_id, http_status, response_body, error, duration_ms, attempted_at, $13::uuid from row where inserted
     union all
     select r.id, r.attempts, r.tenant_id, v.http_status, v.response_body, v.error, v.duration_ms, v.attempted_at, $13::uuid
       from row r join v on v.integration_id = r.integration_id and v.event_id = r.event_id where not r.inserted
     ${answer ? 'returning delivery_id, attempt' : ''}`,
    [
      arrayLiteral(outcomes.map((o) => o.row.id)),
      arrayLiteral(outcomes.map((o) => o.row.tenant_id)),
      arrayLiteral(outcomes.map((o) => o.row.integration_id)),
      arrayLiteral(outcomes.map((o) => o.row.event_id)),
      arrayLiteral(outcomes.map((o) => o.row.event_type)),
      jsonArrayOf(outcomes),
      ...outcomeArrays(outcomes),
      outcomeId,
      ...(doneBatches.length > 0 ? [arrayLiteral(doneBatches)] : []),
    ],
  );
  return new Map(rows.map((r) => [r.delivery_id, r.attempt]));
}

/**
 * Writes the rows of first attempts made on Claims that will not get their outcome from this
 * attempt (left to the retry sweep, refused, stopped, too old to send on the Claim's read), as
 * the consumer recorded rows before: no attempt, leased under `lease` (the attempt goes on with the
 * row) or not (the retry sweep claims it), or closed with `closedReason`. A row that exists already
 * is left as it is. Deletes the batch rows `doneBatches` in the same statement.
 */
export async function materialiseRows(
  tx: Tx,
  rows: readonly ClaimedRow[],
  lease: { token: string; leaseMs: number } | undefined,
  closedReason: string | null,
  doneBatches: readonly number[],
): Promise<void> {
  if (rows.length === 0 && doneBatches.length === 0) return;
  await tx.query(
    `with v as (
       select * from unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::text[], $6::text[])
         as v (id, tenant_id, integration_id, event_id, event_type, body)
     ), gone as (delete from hub.delivery_batches where id = any($10::bigint[]))
     insert into hub.deliveries (id, tenant_id, integration_id, kind, event_id, event_type, body, lease_until, lease_token, closed_reason)
     overriding system value
     select id, tenant_id, integration_id, 'event', event_id, event_type, body,
            case when $7::uuid is null then null else now() + make_interval(secs => $8::double precision / 1000) end, $7::uuid, $9::text
       from v
     on conflict (integration_id, event_id) where kind = 'event' do nothing`,
    [
      arrayLiteral(rows.map((r) => r.id)),
      arrayLiteral(rows.map((r) => r.tenant_id)),
      arrayLiteral(rows.map((r) => r.integration_id)),
      arrayLiteral(rows.map((r) => r.event_id)),
      arrayLiteral(rows.map((r) => r.event_type)),
      arrayLiteral(rows.map((r) => r.body)),
      lease?.token ?? null,
      lease?.leaseMs ?? 0,
      closedReason,
      arrayLiteral(doneBatches),
    ],
  );
}

/** Renews the lease of a batch row this process holds (its token); nothing when it is gone. */
export async function renewBatchLease(tx: Tx, id: number, token: string, leaseMs: number): Promise<void> {
  await tx.query('update hub.delivery_batches set lease_until = now() + make_interval(secs => $3::double precision / 1000) where id = $1 and lease_token = $2', [id, token, leaseMs]);
}
