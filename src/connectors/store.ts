import type { Tx } from '../db/database.js';
import { JsonText, jsonArraySql } from '../db/json-text.js';
import { isoTimestampSql } from '../db/timestamps.js';
import type { EgressPolicy } from '../egress/policy.js';
import { NotFoundError, ValidationError } from '../errors.js';
import { unchangedApply } from '../manifests/canonical.js';
import { takeApplyLocks, takeObjectTurn, takeTenantPlace } from '../manifests/tenant-cap.js';
import { csvSourceId, lockCsvSource } from './csv-source.js';
import { samePath } from './jsonpath.js';
import { redactQueryCredentials } from './auth/stated-credentials.js';
import { REDACTED, redactEndpoints, redactHeaders, redactManifest, shownBaseUrl } from './manifest/redact.js';
import { checkManifest, type ConnectorDraft, type Issue } from './manifest/validate.js';
import { inFlightError, runInFlight } from './runs/ledger.js';
import { catalogType, columnRoomRefusal, ddlLockName, EXT_COLUMNS, promoteColumnName, tableRegclassSql, takenRefusal, takenTableNames, tenantSchema, tenantTableSql, tenantTableText } from './target/ddl.js';
import { dropConnectorData, purgeEndpointData } from './target/drop.js';
import type { ConnectorSpec, EndpointSpec, PaginationKind } from './types.js';
import { isUuid } from '../validation/uuid.js';
import { CLEAR_RESUME, readFingerprint, RUN_END_FENCE } from './resume.js';

/**
 * Connectors as stored (schema `connectors`, migrations/connectors/V1__connectors.sql). Every
 * function runs inside the caller's tenant transaction (`Database.withTenant`): row-level security
 * keeps tenants apart, and a connector name is unique within its tenant only.
 */

export interface ApplyOptions {
  /** Who applies (recorded as created_by / updated_by). */
  actor?: string;
  /** Accept inline credential values (`token_value`, a literal Authorization header): the dev profile only. */
  inlineCredentials?: boolean;
  /** The outbound address policy: a base_url it refuses is a warning (manifest/validate.ts CheckOptions). */
  egress?: EgressPolicy;
}

export interface ApplyResult {
  connector: ConnectorSpec;
  /** true for a new name, false when an existing connector was updated. */
  created: boolean;
  /** The manifest was the one stored: nothing was written (sameManifest). */
  unchanged: boolean;
  warnings: Issue[];
  /** The scopes of the connector this apply replaced (undefined for a new name). */
  replacedScopes?: string[];
}

/** One endpoint as the list and read paths show it. */
export interface EndpointSummary {
  id: string;
  uuid: string;
  enabled: boolean;
  kind: 'rest' | 'graphql';
  method: string;
  path: string;
  /** The strategy after preset expansion. */
  pagination: PaginationKind;
  table: string;
  syncMode: string;
  watermark: string | null;
  /** ISO 8601 in UTC with milliseconds, as the answer has it. */
  watermarkUpdatedAt: string | null;
  /**
   * Where the endpoint's next run starts reading, when its last run stopped at the page budget
   * (`offset 20000`, `cursor "abc"`, `the next link <url>`; credentials masked); null: at the first page.
   */
  resumeFrom: string | null;
  /** The run that stored `resumeFrom`. */
  resumeRunId: string | null;
}

export interface ConnectorRecord {
  id: string;
  name: string;
  connectorType: string;
  scopes: string[];
  schedule: string | null;
  endpoints: EndpointSummary[];
  createdAt: string;
  updatedAt: string;
}

export interface ConnectorDetail extends ConnectorRecord {
  /** The manifest as applied. */
  manifest: unknown;
  /** The normalised model the runtime reads. */
  spec: ConnectorSpec;
}

/**
 * Connectors one tenant may have: each keeps its endpoints, runs and rows in the shared database
 * and may run on a schedule of its own, so the count is bounded; applying a new name past it is
 * refused (an update is not).
 */
export const MAX_CONNECTORS_PER_TENANT = 500;

function tenantOf(tx: Tx): number {
  if (tx.tenantId === undefined) throw new Error('connectors are stored per tenant: use Database.withTenant');
  return tx.tenantId;
}

/** The locks applyConnector takes before it writes the connector of that name, in its order (the object's turn, its row, then the tenant's turn): ManifestHandler.lockForApply. */
export const lockForApply = (tx: Tx, name: string): Promise<void> =>
  takeApplyLocks(tx, { table: 'connectors.connectors', plural: 'connectors', mode: 'for no key update', order: 'row-then-turn', where: 'name = $1' }, name);

/**
 * Validates, normalises and stores a manifest in the caller's transaction: a 400 (ValidationError
 * naming the field) on the first error, otherwise an insert or an update of the same name. Endpoint
 * UUIDs are kept for every id still in the manifest; ids no longer there lose their row and their
 * watermark (their ingested rows stay until the connector is deleted); new ids get new UUIDs.
 * The manifest stored, normalised as stored (unchangedApply), is checked and writes nothing:
 * `unchanged`, its warnings answered. A new name past MAX_CONNECTORS_PER_TENANT is a 400 naming `metadata.name`.
 */
export async function applyConnector(tx: Tx, manifest: unknown, opts: ApplyOptions = {}): Promise<ApplyResult> {
  const tenantId = tenantOf(tx);
  const check = checkManifest(manifest, { inlineCredentials: opts.inlineCredentials === true, egress: opts.egress });
  const first = check.errors[0];
  if (first || !check.connector) throw new ValidationError(first?.message ?? 'invalid manifest', first?.field || undefined);
  const draft = check.connector;
  const taken = (await tableNameRefusals(tx, draft))[0];
  if (taken) throw new ValidationError(taken.message, taken.field);
  // The object's turn first (takeObjectTurn): before its row, the tenant's turn and its owner record.
  await takeObjectTurn(tx, 'connectors', draft.name);
  // Locked as the upsert below would lock it: the connector replaced is the one read (replacedScopes).
  const held = async () => (await tx.query<ConnectorRow>(`select ${COLUMNS} from connectors.connectors where name = $1 for no key update`, [draft.name])).rows[0];
  const unchanged = async (stored: ConnectorRow | undefined): Promise<ApplyResult | undefined> =>
    stored && unchangedApply({ manifest: stored.manifest, normalised: stored.spec }, manifest, storedFormOf(draft, stored))
      ? { connector: specOf(stored), created: false, unchanged: true, warnings: [...check.warnings, ...(await promoteConflicts(tx, draft))], replacedScopes: stored.scopes }
      : undefined;
  const before = await unchanged(await held());
  if (before) return before;
  await takeTenantPlace(tx, { table: 'connectors.connectors', noun: 'connector', plural: 'connectors', max: MAX_CONNECTORS_PER_TENANT }, draft.name);
  // Read again once the tenant's turn is taken: an apply of the name that committed since the read above (it
  // held the turn) is the connector this one replaces, or stored this very manifest already (unchanged).
  const now = await held();
  const same = await unchanged(now);
  if (same) return same;
  const replacedScopes = now?.scopes;

  const upserted = await tx.query<{ id: string; created: boolean }>(
    `insert into connectors.connectors (tenant_id, name, connector_type, scopes, schedule, manifest, spec, created_by, updated_by)
     values (core.current_tenant(), $1, $2, $3, $4, $5, '{}'::jsonb, $6, $6)
     on conflict (tenant_id, name) do update
       set connector_type = excluded.connector_type, scopes = excluded.scopes, schedule = excluded.schedule,
           manifest = excluded.manifest, updated_by = excluded.updated_by, updated_at = now()
     returning id, (xmax = 0) as created`,
    [draft.name, draft.connectorType, draft.scopes, draft.schedule ?? null, JSON.stringify(manifest), opts.actor ?? null],
  );
  const { id, created } = upserted.rows[0]!;
  const changes = created ? [] : await targetChanges(tx, draft);

  const ids = draft.endpoints.map((e) => e.id);
  // An endpoint the manifest no longer lists goes, but not under a run of it: the run would write on
  // for an endpoint that is gone, and the same id applied again (a new endpoint) could run beside it.
  // A trigger recording runs of the connector holds its row `for share` (ConnectorRunner.trigger),
  // which the upsert above waited for: its runs are committed and seen here. One that comes after
  // waits for this transaction, then finds the endpoint gone and records no run of it.
  const dropped = await tx.query<{ uuid: string }>('select uuid from connectors.endpoints where connector_id = $1 and not (endpoint_id = any($2::text[]))', [id, ids]);
  const running = await runInFlight(tx, dropped.rows.map((r) => r.uuid));
  if (running) throw inFlightError(draft.name, running, `, then apply again (the manifest drops endpoint ${running.endpoint ?? '(none)'})`);
  await tx.query('delete from connectors.endpoints where connector_id = $1 and not (endpoint_id = any($2::text[]))', [id, ids]);
  const endpoints: EndpointSpec[] = [];
  for (const [position, endpoint] of draft.endpoints.entries()) {
    const { rows } = await tx.query<{ uuid: string }>(
      `insert into connectors.endpoints (tenant_id, connector_id, endpoint_id, enabled, position, kind, method, path, pagination, target_table, sync_mode)
       values (core.current_tenant(), $1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
       on conflict (connector_id, endpoint_id) do update
         set enabled = excluded.enabled, position = excluded.position, kind = excluded.kind, method = excluded.method, path = excluded.path,
             pagination = excluded.pagination, target_table = excluded.target_table, sync_mode = excluded.sync_mode, updated_at = now()
       returning uuid`,
      [id, endpoint.id, endpoint.enabled, position, ...summaryOf(endpoint)],
    );
    endpoints.push({ ...endpoint, uuid: rows[0]!.uuid });
  }
  // Rows read before the change are never read again under the new key (or into the new table)
  // while the watermark stays: the next run reads everything.
  for (const change of changes) await setWatermark(tx, change.uuid, null);
  // A position stored by a run of what an endpoint read before (its address, pagination, body, mode …)
  // means nothing to what it reads now: its next run starts from the first page (resume.ts).
  await tx.query(
    `update connectors.endpoints w set ${CLEAR_RESUME}
       from unnest($2::text[], $3::text[]) as d(endpoint_id, fingerprint)
      where w.connector_id = $1 and w.endpoint_id = d.endpoint_id and w.resume is not null and (w.resume::jsonb ->> 'fingerprint') is distinct from d.fingerprint`,
    [id, ids, draft.endpoints.map((e) => readFingerprint(draft, e))],
  );

  const connector: ConnectorSpec = { ...draft, id, tenantId, endpoints };
  await tx.query('update connectors.connectors set spec = $2 where id = $1', [id, JSON.stringify(connector)]);
  if (!created) await retagChunks(tx, id, draft.scopes);
  return {
    connector,
    created,
    unchanged: false,
    warnings: [...check.warnings, ...changes.flatMap((c) => (c.warning ? [c.warning] : [])), ...(await promoteConflicts(tx, draft))],
    replacedScopes,
  };
}

/** The spec `applyConnector` would store for `draft` over the connector stored (its id, its endpoints' UUIDs kept). */
function storedFormOf(draft: ConnectorDraft, stored: ConnectorRow): unknown {
  const uuids = new Map((stored.spec.endpoints ?? []).map((e) => [e.id, e.uuid]));
  return { ...draft, id: stored.id, tenantId: Number(stored.tenant_id), endpoints: draft.endpoints.map((e) => ({ ...e, uuid: uuids.get(e.id) })) };
}

/**
 * The target tables of `draft` whose name another relation of the tenant's than a table has (an index, a sequence, a
 * view …: PostgreSQL names a table's indexes and sequence after it, `ext.orders_pkey`): every run of the endpoint
 * would fail on it (ExtSchema.ensureTable), so apply refuses it (400) and validate answers it as an error, each
 * naming `spec.endpoints[i].target.table` with the run's refusal. A name of no relation yet is fine: the run makes the table.
 */
export async function tableNameRefusals(tx: Tx, draft: ConnectorDraft): Promise<Issue[]> {
  const taken = await takenTableNames(tx, draft.endpoints.map((e) => e.target.table));
  const issues: Issue[] = [];
  for (const [i, endpoint] of draft.endpoints.entries()) {
    const what = taken.get(endpoint.target.table);
    const field = `spec.endpoints[${i}].target.table`;
    if (what) issues.push({ field, message: `${field}: ${takenRefusal(endpoint.target.table, what)}` });
  }
  return issues;
}

/**
 * The promote entries of `draft` naming a column its table (the tenant's, as it exists now) already
 * has with another type, or that an earlier endpoint of the draft writing the same table promotes
 * with another type: a column's type is never changed over the rows it holds, so every run of such
 * an endpoint fails (ExtSchema.ensureTable: `column C of ext.T is <type>, but this endpoint promotes
 * it as <type>`), and apply and validate warn, naming the promote, before any run does. The stored
 * rows are untouched either way. And an endpoint promoting more columns its table does not have than
 * fit in it (PostgreSQL's 1,600, the table's own, promoted and dropped columns counted): every run of it
 * fails before it reads anything (ExtSchema.ensureTable: `the run promotes N columns ext.T does not
 * have: …`), and apply and validate warn on `spec.endpoints[i].target.promote`.
 */
export async function promoteConflicts(tx: Tx, draft: ConnectorDraft): Promise<Issue[]> {
  const tables = [...new Set(draft.endpoints.map((e) => e.target.table))];
  const names = new Map<string, string>();
  for (const table of tables) {
    try {
      names.set(tenantTableText(tx.tenantId, table), table);
    } catch {
      // not a usable table name (refused by the manifest's own checks), or no tenant: nothing stored
    }
  }
  const stored = new Map<string, string>(); // `table column` -> catalog type
  const numbered = new Map<string, number>(); // table -> columns it has numbered (TableColumns.numbered)
  if (names.size > 0) {
    const { rows } = await tx.query<{ name: string; column: string; type: string; numbered: number }>(
      `select n.name, a.attname as column, format_type(a.atttypid, a.atttypmod) as type, c.relnatts::int as numbered
         from unnest($1::text[]) as n(name) join pg_class c on c.oid = ${tableRegclassSql('n.name')}
         join pg_attribute a on a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped`,
      [[...names.keys()]],
    );
    for (const row of rows) {
      stored.set(`${names.get(row.name)} ${row.column}`, row.type);
      numbered.set(names.get(row.name)!, row.numbered);
    }
  }
  const declared = new Map<string, { type: string; as: string; endpoint: string }>();
  const issues: Issue[] = [];
  for (const [i, endpoint] of draft.endpoints.entries()) {
    const { table } = endpoint.target;
    const adding = endpoint.target.promote.filter((p) => promoteColumnName(p.name) && !stored.has(`${table} ${p.name}`)).length;
    const refusal = columnRoomRefusal(table, numbered.get(table) ?? EXT_COLUMNS.length, adding, `endpoint ${endpoint.id} promotes`);
    if (refusal) {
      issues.push({
        field: `spec.endpoints[${i}].target.promote`,
        message: `${refusal}: every run of the endpoint fails until it promotes fewer new columns (the others stay in data) or writes another table`,
      });
    }
    for (const [j, promote] of endpoint.target.promote.entries()) {
      const column = promoteColumnName(promote.name);
      if (!column) continue;
      const type = catalogType(promote.type);
      const key = `${table} ${column}`;
      const field = `spec.endpoints[${i}].target.promote[${j}].type`;
      const has = stored.get(key);
      const earlier = declared.get(key);
      if (has !== undefined && has !== type) {
        issues.push({
          field,
          message:
            `endpoint ${endpoint.id} promotes column ${column} of ${table} as ${promote.type}, but the table has it as ${has}: a column's type is never changed over its rows, ` +
            `so every run of the endpoint fails until the promote keeps the type ${has} or takes another name`,
        });
      } else if (has === undefined && earlier && earlier.type !== type) {
        issues.push({
          field,
          message:
            `endpoint ${endpoint.id} promotes column ${column} of ${table} as ${promote.type}, but endpoint ${earlier.endpoint} promotes it as ${earlier.as}: ` +
            'the table is made with the type of the first to run, and every run of the other fails; promote it with one type, or under two names',
        });
      }
      if (!earlier) declared.set(key, { type, as: promote.type, endpoint: endpoint.id });
    }
  }
  return issues;
}

/**
 * The endpoints of the stored connector of `draft`'s name that keep their id but change their
 * `unique_key` or target table (probe 31 H3): the rows they stored stay as they are (a new key
 * stores every row again beside them; a new table leaves them in the old one), so apply clears
 * their watermarks and apply and validate warn, naming the endpoint, the rows and the purge that
 * starts clean, when it has rows stored (counted in the table, as last written by it).
 */
export async function targetChanges(tx: Tx, draft: ConnectorDraft): Promise<Array<{ uuid: string; warning?: Issue }>> {
  const { rows } = await tx.query<{ uuid: string; endpoint_id: string; watermark: string | null; target: { table: string; unique_key: string } }>(
    `select w.uuid, w.endpoint_id, w.watermark, e -> 'target' as target
       from connectors.connectors c join connectors.endpoints w on w.connector_id = c.id
       join lateral jsonb_array_elements(c.spec -> 'endpoints') e on e ->> 'uuid' = w.uuid::text
      where c.name = $1`,
    [draft.name],
  );
  const changes: Array<{ uuid: string; warning?: Issue }> = [];
  for (const [i, endpoint] of draft.endpoints.entries()) {
    const stored = rows.find((r) => r.endpoint_id === endpoint.id);
    if (!stored) continue;
    const table = stored.target.table !== endpoint.target.table;
    if (!table && samePath(stored.target.unique_key, endpoint.target.unique_key)) continue;
    const n = await storedRows(tx, stored.target.table, stored.uuid);
    const cleared = stored.watermark !== null;
    const purge = `POST /api/connectors/${draft.name}/endpoints/${endpoint.id}/purge`;
    let warning: Issue | undefined;
    if (n > 0 && table) {
      warning = {
        field: `spec.endpoints[${i}].target.table`,
        message:
          `endpoint ${endpoint.id} changes its table from ${stored.target.table} to ${endpoint.target.table} over ${n} rows stored in ${stored.target.table}: ` +
          `they stay there until the connector is deleted${cleared ? ', and its watermark is cleared so that the next run reads everything' : ''}. To empty them, purge the endpoint (${purge})`,
      };
    } else if (n > 0) {
      warning = {
        field: `spec.endpoints[${i}].target.unique_key`,
        message:
          `endpoint ${endpoint.id} changes its unique_key from ${stored.target.unique_key} to ${endpoint.target.unique_key} over ${n} rows stored in ${stored.target.table}: ` +
          `the next run stores every row again under the new key beside them${cleared ? ', and its watermark is cleared so that run reads everything' : ''}. ` +
          `To start clean, purge the endpoint (${purge}) after applying`,
      };
    }
    changes.push({ uuid: stored.uuid, warning });
  }
  return changes;
}

/**
 * How many rows of the tenant's `table` an endpoint wrote last (0 when the table does not exist).
 * Under the tenant's DDL lock, shared (ddlLockName in ./target/ddl.ts, as a run's registration takes
 * it: registerTargetTable), taken before the table is looked up and held to the end of the caller's
 * transaction, after the connector's row (applyConnector's upsert), as a delete takes its own
 * (exclusive) after its connector's row (dropConnectorData). A delete of another connector drops
 * the tables nothing registers any more (drop_unused_ext_tables, under the same lock, exclusive):
 * it now runs before this or after the apply commits. Before, the count's lock on a table (held to
 * the commit) met the delete's drop of it: a re-apply counting two old tables, one the delete had
 * dropped and one it was about to drop, was a deadlock (40P01); one counting a table the delete had
 * dropped, uncommitted, waited for it and then failed (`relation … does not exist`).
 *
 * A validate (POST /api/connectors/validate) counts through Database.readWithTenant, where each
 * statement is its own transaction: the lock ends with its statement and holds nothing off, so a
 * delete may drop the table between the look-up and the count (or hold it dropped, uncommitted,
 * while the count waits for it). The count then fails with 42P01 (`relation … does not exist`),
 * which the API answered as a 503 saying migrations are pending: a table gone is counted as none,
 * as one not found is. (In a transaction, as an apply's, the lock rules this out; were it to happen
 * there, the transaction would be aborted all the same, and its next statement would fail.)
 */
async function storedRows(tx: Tx, table: string, endpointUuid: string): Promise<number> {
  let sql: string;
  try {
    sql = tenantTableSql(tx.tenantId, table);
  } catch {
    return 0;
  }
  if (tx.tenantId !== undefined) await tx.query('select pg_advisory_xact_lock_shared(hashtext($1))', [ddlLockName(tenantSchema(tx.tenantId))]);
  const exists = await tx.query<{ t: string | null }>(`select ${tableRegclassSql('$1')} as t`, [tenantTableText(tx.tenantId, table)]);
  if (!exists.rows[0]?.t) return 0;
  try {
    const { rows } = await tx.query<{ n: string }>(`select count(*) as n from ${sql} where endpoint_id = $1`, [endpointUuid]);
    return Number(rows[0]?.n ?? 0);
  } catch (err) {
    if ((err as { code?: unknown }).code === UNDEFINED_TABLE) return 0;
    throw err;
  }
}

/** PostgreSQL's `undefined_table`: `relation … does not exist`. */
const UNDEFINED_TABLE = '42P01';

interface ConnectorRow {
  id: string;
  tenant_id: number;
  name: string;
  connector_type: string;
  scopes: string[];
  schedule: string | null;
  manifest: unknown;
  spec: ConnectorSpec;
  created_at: Date;
  updated_at: Date;
}

const COLUMNS = 'id, tenant_id, name, connector_type, scopes, schedule, manifest, spec, created_at, updated_at';

const specOf = (row: Pick<ConnectorRow, 'spec' | 'id' | 'tenant_id'>): ConnectorSpec => ({ ...row.spec, id: row.id, tenantId: Number(row.tenant_id) });

/** The connector of that name in the caller's tenant. */
export async function loadConnector(tx: Tx, name: string): Promise<ConnectorSpec | undefined> {
  const { rows } = await tx.query<ConnectorRow>(`select ${COLUMNS} from connectors.connectors where name = $1`, [name]);
  return rows[0] ? specOf(rows[0]) : undefined;
}

/** The connector with that id in the caller's tenant (undefined for a malformed id too). */
export async function loadConnectorById(tx: Tx, id: string): Promise<ConnectorSpec | undefined> {
  if (!isUuid(id)) return undefined;
  const { rows } = await tx.query<ConnectorRow>(`select ${COLUMNS} from connectors.connectors where id = $1`, [id]);
  return rows[0] ? specOf(rows[0]) : undefined;
}

/**
 * What the lists show of an endpoint beside its id, UUID, state and watermark, in the order of the
 * summary's fields: stored with the endpoint row when the manifest is applied
 * (migrations/connectors/V6__endpoint_summary.sql), so that a list reads columns, not the spec.
 */
function summaryOf(e: Omit<EndpointSpec, 'uuid'>): [kind: EndpointSummary['kind'], method: string, path: string, pagination: PaginationKind, table: string, syncMode: string] {
  // The summary is what lists show: a credential stated in the path's query (dev profile only) is stored redacted.
  return [e.graphql ? 'graphql' : 'rest', e.method, redactQueryCredentials(e.path), e.pagination.kind, e.target.table, e.incremental.mode];
}

/**
 * The statement selecting connector records (`ConnectorRecord`, each column named as its field,
 * times as the answer's text) from `connectors.connectors c` with `where`. Each record's endpoints
 * are one JSON array made by the database, by a sub-select over the connector's own endpoints (an
 * index scan of endpoints' (connector_id, endpoint_id)), for the whole list as for one connector.
 * `to_json(array_agg(…))` writes the same text as `'[' || string_agg(row_to_json(…)::text, ',') || ']'`
 * and is `json` as it is: the text cast to `json` was parsed again to be checked.
 *
 * Not one aggregate over all the tenant's endpoints joined to the connectors: with the few rows of
 * these tables (below autovacuum's threshold, never analyzed) the planner expected one connector
 * and ran the aggregate again for each one, every endpoint's JSON made once per connector of the
 * tenant (≈ 1 ms of the server's CPU for 20 connectors, against ≈ 0.27 ms this way:
 * docs/performance.md, "Levers already in the code").
 */
function recordsSql(where: string): string {
  const endpoint = `select w.endpoint_id as id, w.uuid, w.enabled, w.kind, w.method, w.path, w.pagination, w.target_table as "table",
           w.sync_mode as "syncMode", w.watermark, ${isoTimestampSql('w.watermark_updated_at')} as "watermarkUpdatedAt",
           w.resume_shown as "resumeFrom", w.resume_run as "resumeRunId"`;
  const endpoints = `(select to_json(array_agg((select s from (${endpoint}) s) order by w.position)) from connectors.endpoints w where w.connector_id = c.id)`;
  return `select c.id, c.name, c.connector_type as "connectorType", c.scopes, c.schedule, coalesce(${endpoints}, '[]') as endpoints,
      ${isoTimestampSql('c.created_at')} as "createdAt", ${isoTimestampSql('c.updated_at')} as "updatedAt"
    from connectors.connectors c where ${where}`;
}

/** listConnectorsJson's text, made once: the same string each call (`textOfShape`, src/db/keyset.ts, says why). */
let listConnectorsText: string | undefined;

/**
 * Every connector of the caller's tenant, by name, as the answer's JSON text (src/db/json-text.ts):
 * the records `getConnector` answers, without their manifest and spec, from the same statement
 * (store-json.test.ts holds both to the stored spec and watermarks).
 */
export async function listConnectorsJson(tx: Tx): Promise<JsonText> {
  listConnectorsText ??= jsonArraySql(`${recordsSql('true')} order by c.name`, 'r.name');
  const { rows } = await tx.query<{ body: string }>(listConnectorsText, [], { prepare: true });
  return new JsonText(rows[0]!.body);
}

/** The id, the manifest as applied and the schedule of the connector of that name (one row, nothing derived). */
export async function storedManifest(tx: Tx, name: string): Promise<{ id: string; manifest: unknown; schedule: string | null; appliedBy: string | null } | undefined> {
  const { rows } = await tx.query<{ id: string; manifest: unknown; schedule: string | null; appliedBy: string | null }>('select id, manifest, schedule, updated_by as "appliedBy" from connectors.connectors where name = $1', [name]);
  return rows[0];
}

/**
 * One connector with its stored manifest and normalised spec, inline credential values (a dev
 * profile `token_value`, a literal credential header, a query's credential, a well-known key or JWT
 * in a body, variables or SOAP text) replaced by REDACTED in both, and credentials
 * in base_url (`user:pass@`, stored before apply refused them) masked (`https://***@host/`).
 */
export async function getConnector(tx: Tx, name: string): Promise<ConnectorDetail | undefined> {
  const { rows } = await tx.query<{ record: string; manifest: unknown; spec: ConnectorSpec; id: string; tenant_id: number }>(
    `select row_to_json(r)::text as record, c.manifest, c.spec, c.id, c.tenant_id
       from (${recordsSql('c.name = $1')}) r join connectors.connectors c on c.id = r.id`,
    [name],
  );
  const row = rows[0];
  if (!row) return undefined;
  return { ...(JSON.parse(row.record) as ConnectorRecord), manifest: redactManifest(row.manifest), spec: redactSpec(specOf(row)) };
}

function redactSpec(spec: ConnectorSpec): ConnectorSpec {
  const auth = spec.auth.kind === 'bearer' && spec.auth.token_value !== undefined ? { ...spec.auth, token_value: REDACTED } : spec.auth;
  return { ...spec, baseUrl: shownBaseUrl(spec.baseUrl), auth, headers: redactHeaders(spec.headers) as ConnectorSpec['headers'], endpoints: redactEndpoints(spec.endpoints) };
}

/**
 * Locks the connector of that name `for update` and answers its id (undefined when there is no such
 * name, or when the row this waited for was deleted meanwhile). The first lock of a connector delete
 * and of an endpoint purge, before any of the locks of src/connectors/target/drop.ts (advisory locks
 * on the tables it touches, retrieval.pending entries, ext rows and tables, chunks, endpoint rows): a
 * delete and a purge of one connector, or two purges of it, run one after the other instead of each
 * taking part of those in its own order (operations on different connectors sharing a table are
 * ordered by the table locks that come next: lockTables there). A
 * delete's last step drops the tables nothing registers any more (an exclusive table lock): a purge
 * that had begun deleting rows of such a table, waiting on a row the delete holds while holding its
 * own lock on the table, was a deadlock (40P01, the purge a 503). It also waits for a trigger
 * recording runs of the connector (ConnectorRunner.trigger locks the row `for share`).
 */
/** The scopes of the stored connector of that id; undefined when there is none (a CSV source's id, a deleted connector's). */
export async function connectorScopesById(tx: Tx, id: string): Promise<string[] | undefined> {
  const { rows } = await tx.query<{ scopes: string[] }>('select scopes from connectors.connectors where id = $1', [id]);
  return rows[0]?.scopes;
}

/** The scopes of the stored connector of that name, its row locked as a delete locks it (lockConnector); undefined when there is none. */
export async function lockedConnectorScopes(tx: Tx, name: string): Promise<string[] | undefined> {
  const { rows } = await tx.query<{ scopes: string[] }>('select scopes from connectors.connectors where name = $1 for update', [name]);
  return rows[0]?.scopes;
}

async function lockConnector(tx: Tx, name: string): Promise<string | undefined> {
  const { rows } = await tx.query<{ id: string }>('select id from connectors.connectors where name = $1 for update', [name]);
  return rows[0]?.id;
}

/** A delete's 409 while a run of the connector (or CSV source) is in flight. */
async function refuseWhileRunning(tx: Tx, id: string, name: string): Promise<void> {
  const running = await tx.query<{ id: string; endpoint: string | null }>(
    "select id, endpoint_id as endpoint from connectors.runs where connector_id = $1 and status = 'Running' order by started_at, id limit 1",
    [id],
  );
  if (running.rows[0]) throw inFlightError(name, running.rows[0], ', then delete the connector');
}

/**
 * Deletes a connector: its ingested data first (dropConnectorData: its rows in the ext.* tables and
 * its retrieval chunks), then the connector and its endpoints. false when there is no such name.
 * 409 while a run of it is in flight (probe 31 M2: the run would write on into tables the delete
 * empties or drops, leaving rows of a deleted connector or failing on a dropped table). Its row is
 * locked first (lockConnector).
 */
export async function deleteConnector(tx: Tx, name: string): Promise<boolean> {
  const id = await lockConnector(tx, name);
  if (!id) return false;
  await refuseWhileRunning(tx, id, name);
  await dropConnectorData(tx, id);
  // Its claimed schedule slots mean nothing once it is gone (a new connector of the name gets a new id).
  await tx.query('delete from connectors.schedule_slots where connector_id = $1', [id]);
  await tx.query('delete from connectors.connectors where id = $1', [id]);
  return true;
}

/**
 * Deletes what a CSV source with no manifest (`POST /api/platform/sources/csv/ingest?connector=NAME`
 * naming no stored connector) ingested into the current tenant: its rows, its table registrations
 * (tables nothing registers any more and left empty are dropped) and its chunks, as a connector's
 * delete does (dropConnectorData); its run records stay. false when the tenant has no such source
 * (no run in flight, nothing registered, no chunk). 409 while a run of it is in flight; a run being
 * recorded is waited for (lockCsvSource), then refuses the delete the same way.
 */
export async function deleteCsvSource(tx: Tx, name: string): Promise<boolean> {
  if (tx.tenantId === undefined) return false;
  const id = csvSourceId(tx.tenantId, name);
  await lockCsvSource(tx, id, 'exclusive');
  await refuseWhileRunning(tx, id, name);
  const found = await tx.query(
    'select 1 from connectors.ext_tables where connector_id = $1 union all select 1 from retrieval.chunks where connector_id = $1 limit 1',
    [id],
  );
  if (found.rowCount === 0) return false;
  await dropConnectorData(tx, id);
  return true;
}

/**
 * DELETE /api/connectors/{name}: the stored connector of the name (deleteConnector) or, when the
 * tenant has none, what a CSV source of the name ingested with no manifest (deleteCsvSource), in the
 * caller's transaction; never both. The source's rows are its own, not the connector's: when a
 * connector of its name was applied after it ingested, deleting that connector (as the operator's
 * finalizer does) erased them too. A second delete, once the connector is gone, erases the source's.
 * false when there was neither.
 */
export async function deleteConnectorOrSource(tx: Tx, name: string): Promise<boolean> {
  return (await deleteConnector(tx, name)) || deleteCsvSource(tx, name);
}

/** The stored watermark of an endpoint (undefined: none, the next run is a full read). */
export async function getWatermark(tx: Tx, endpointUuid: string): Promise<string | undefined> {
  return (await readWatermark(tx, endpointUuid)).value;
}

/**
 * An endpoint's watermark and when it was last set or cleared (`at`, the database's text of
 * `watermark_updated_at`): what a run read at its start, so that its end advances the watermark only
 * if nothing set or cleared it meanwhile (advanceWatermark).
 */
export async function readWatermark(tx: Tx, endpointUuid: string): Promise<{ value?: string; at: string | null; resume?: string }> {
  if (!isUuid(endpointUuid)) return { at: null };
  const { rows } = await tx.query<{ watermark: string | null; at: string | null; resume: string | null }>(
    'select watermark, watermark_updated_at::text as at, resume from connectors.endpoints where uuid = $1',
    [endpointUuid],
  );
  const row = rows[0];
  return { ...(row?.watermark != null ? { value: row.watermark } : {}), at: row?.at ?? null, ...(row?.resume != null ? { resume: row.resume } : {}) };
}

/**
 * Advances an endpoint's watermark to `value` unless it was set or cleared since `read` (a delete or
 * purge of rows of its table, a re-apply that changed its key or table: they clear it so that the
 * next run reads everything again, and a run that began before must not put it back), and unless the
 * endpoint as stored no longer writes `target` (the table and unique_key the run wrote with). The
 * second holds a run to the re-apply that moved its endpoint before the run read the watermark: a
 * run queued behind an earlier endpoint of its trigger reads it only when its turn comes and runs the
 * spec as stored when its trigger recorded it (ConnectorRunner.trigger), so such a run read the
 * watermark the apply had cleared, wrote the old table, and set the watermark of the new one (whose
 * next run then read only what changed since, leaving it without the rows before). Says whether it
 * was advanced.
 */
export async function advanceWatermark(tx: Tx, endpointUuid: string, read: { at: string | null }, value: string, target: { table: string; unique_key: string }): Promise<boolean> {
  // The run completed its chain (resume.ts): the position it read on from, if any, goes with it.
  const { rowCount } = await tx.query(`update connectors.endpoints w set watermark = $5, watermark_updated_at = now(), ${CLEAR_RESUME} where ${RUN_END_FENCE}`, [
    endpointUuid,
    read.at,
    target.table,
    target.unique_key,
    value,
  ]);
  return (rowCount ?? 0) > 0;
}

/** Stores (or, with null, clears) an endpoint's watermark; either way its stored position (resume.ts) is cleared: the next run starts from the first page. */
export async function setWatermark(tx: Tx, endpointUuid: string, value: string | null): Promise<void> {
  await tx.query(`update connectors.endpoints set watermark = $2, watermark_updated_at = now(), ${CLEAR_RESUME} where uuid = $1`, [endpointUuid, value]);
}

/** The connector id and endpoint UUID behind a name and an endpoint id; 404 naming what is missing. */
export async function findEndpoint(tx: Tx, connectorName: string, endpointId: string): Promise<{ connectorId: string; uuid: string }> {
  const { rows } = await tx.query<{ id: string; uuid: string | null }>(
    `select c.id, e.uuid from connectors.connectors c
       left join connectors.endpoints e on e.connector_id = c.id and e.endpoint_id = $2
      where c.name = $1`,
    [connectorName, endpointId],
  );
  const row = rows[0];
  if (!row) throw new NotFoundError(`connector ${connectorName} not found`);
  if (!row.uuid) throw new NotFoundError(`connector ${connectorName} has no endpoint ${endpointId}`);
  return { connectorId: row.id, uuid: row.uuid };
}

/** Clears an endpoint's watermark and stored position: its next run is a full read from the first page. 404 for an unknown connector or endpoint. */
export async function resetCursor(tx: Tx, connectorName: string, endpointId: string): Promise<void> {
  const { uuid } = await findEndpoint(tx, connectorName, endpointId);
  await setWatermark(tx, uuid, null);
}

/**
 * Empties one endpoint's rows and retrieval chunks (purgeEndpointData) and clears its watermark, so
 * the next run reads everything again rather than only what changed since. 404 as resetCursor. The
 * connector's row is locked first, as a delete locks it (lockConnector): a purge that waited for a
 * delete of its connector is a 404. 409 while a run of the endpoint is in flight, as a delete is
 * refused while a run of the connector is: the run would store rows again into what the purge
 * empties (the endpoint not left empty), its writes meeting the purge's deletes on the same rows.
 * A trigger recording a run of it meanwhile is waited for (the row lock), then refuses the purge.
 */
export async function purgeEndpoint(tx: Tx, connectorName: string, endpointId: string): Promise<void> {
  if (!(await lockConnector(tx, connectorName))) throw new NotFoundError(`connector ${connectorName} not found`);
  // Read after the lock (a statement of its own sees what committed while it waited).
  const { connectorId, uuid } = await findEndpoint(tx, connectorName, endpointId);
  const running = await runInFlight(tx, [uuid]);
  if (running) throw inFlightError(connectorName, running, ', then purge the endpoint');
  await purgeEndpointData(tx, connectorId, uuid);
  await setWatermark(tx, uuid, null);
}

/**
 * A re-applied connector whose scopes changed re-tags its retrieval chunks in the same transaction
 * (a trigger moves the tenant's index generation, so that in-memory indexes reload the new tags).
 */
async function retagChunks(tx: Tx, connectorId: string, scopes: string[]): Promise<void> {
  await tx.query('update retrieval.chunks set scopes = $2, updated_at = now() where connector_id = $1 and scopes is distinct from $2', [connectorId, scopes]);
}
