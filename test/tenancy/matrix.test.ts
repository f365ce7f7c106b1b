import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { existsSync } from 'node:fs';
import pg from 'pg';
import { stringify } from 'yaml';
import { allRoutes } from '../../apiserver/app.js';
import { DeclaredAnswers, mediaType } from '../harness/declared-answers.js';
import { startTestHub, type TestHub } from '../harness/hub.js';
import { startIssuer, type TestIssuer } from '../harness/tokens.js';
import { ENDPOINTS, NOT_TENANT_SCOPED, type SqlOutcome, TABLES } from './matrix.js';

/**
 * Runs the tenancy matrix (test/tenancy/matrix.ts) against a real hub with two tenants: theirs is
 * filled through the API (a dev-bypass hub), mine calls with a real token (a second hub on the same
 * database with an OIDC issuer). Fails when a tenant table or a route is missing from the matrix.
 */

const MINE = 2;
const THEIRS = 3;
const MARK = 'globex';

let dev: TestHub;
let oidc: TestHub;
let issuer: TestIssuer;
let owner: pg.Client;
let token: string;
const fixtures: Record<string, string> = {};

beforeAll(async () => {
  dev = await startTestHub();
  issuer = await startIssuer();
  oidc = await startTestHub({ 'svc.oidc.issuer': issuer.issuer, 'svc.oidc.jwks-uri': issuer.jwksUri, 'svc.datasource.url': dev.ownerUrl });
  owner = new pg.Client({ connectionString: dev.ownerUrl });
  await owner.connect();
  await owner.query(`insert into core.tenants (id, code, name) values ($1, 'acme', 'Acme'), ($2, $3, 'Globex')`, [MINE, THEIRS, MARK]);
  token = await issuer.mint({ tenant_id: MINE, realm_access: { roles: ['svc_user', 'svc_admin', 'svc_integrator'] } }, { subject: 'matrix-mine' });
  await theirScenario();
  await myDeclaration();
  for (const t of TABLES) if (t.seed) await owner.query(t.seed, [THEIRS]);
}, 60_000);

afterAll(async () => {
  await owner?.end();
  await oidc?.stop();
  await dev?.stop();
  await issuer?.close();
});

/** One call as their tenant on the dev-bypass hub; the JSON answer. */
async function asThem(method: string, path: string, body?: unknown, type = 'application/json'): Promise<Record<string, unknown>> {
  const headers: Record<string, string> = { 'X-Tenant-ID': String(THEIRS), 'X-User-ID': `${MARK}-admin` };
  if (body !== undefined) headers['Content-Type'] = type;
  const res = await fetch(`${dev.url}${path}`, { method, headers, body: typeof body === 'string' || body === undefined ? body : JSON.stringify(body) });
  const text = await res.text();
  if (res.status >= 300) throw new Error(`${method} ${path} as their tenant: ${res.status} ${text}`);
  return text ? JSON.parse(text) : {};
}

/** Their tenant's data, made as a user would: one resource of every kind. */
async function theirScenario() {
  const base = `/api/tenants/${THEIRS}`;
  fixtures.user = String((await asThem('POST', `${base}/users`, { login: `${MARK}-ann`, name: 'Ann' })).id);
  fixtures.org = String((await asThem('POST', `${base}/orgs`, { code: `${MARK}-sales`, name: 'Sales' })).id);
  fixtures.role = String((await asThem('POST', `${base}/roles`, { name: `${MARK}-role` })).id);
  await asThem('PUT', `${base}/users/${fixtures.user}/roles/${fixtures.role}`);
  await asThem('PUT', `${base}/roles/${fixtures.role}/orgs/${fixtures.org}`);
  await asThem('PUT', `${base}/users/${fixtures.user}/scopes`, { scopes: [`${MARK}-scope`] });
  fixtures.rule = String((await asThem('POST', `${base}/email-rules`, { name: `${MARK}-rule`, eventTypes: ['connector.run.completed'], recipient: 'ops@globex.example' })).id);
  fixtures.integration = String(
    (await asThem('POST', `${base}/integrations`, { name: `${MARK}-hook`, targetUrl: 'http://127.0.0.1:9/hook', eventTypes: ['connector.run.completed'] })).id,
  );
  fixtures.secret = `${MARK.toUpperCase()}_TOKEN`;
  await asThem('POST', '/api/platform/secrets', { name: fixtures.secret, value: 'their-secret' });
  fixtures.connector = `${MARK}-crm`;
  fixtures.connectorId = String((await asThem('POST', '/api/connectors/apply', stringify(matrixConnector(fixtures.connector, 'accounts', 'ext.contacts')), 'application/yaml')).id);
  fixtures.endpoint = 'accounts';
  fixtures.table = 'contacts';
  // A CSV run: a run, an ext table of theirs with rows, a dead letter (the row without a key), events.
  const run = await asThem('POST', `/api/platform/sources/csv/ingest?connector=${MARK}-import&table=contacts&key=id`, 'id,city\n1,Lyon\n,Nowhere\n', 'text/csv');
  fixtures.run = String(run.id);
  const dlq = (await asThem('GET', `/api/platform/dlq?run=${fixtures.run}`)) as unknown as Array<{ id: number }>;
  fixtures.dlq = String(dlq[0]!.id);
  fixtures.hash = (await owner.query<{ row_hash: string }>(`select row_hash from ext_t${THEIRS}.contacts limit 1`)).rows[0]!.row_hash;
  // An entity over their ext table (it exists now: the CSV run made it).
  fixtures.entity = `${MARK}-partner`;
  await asThem('POST', '/api/entities/apply', {
    apiVersion: 'apps.svc.io/v1',
    kind: 'Entity',
    metadata: { name: fixtures.entity },
    spec: { scope: `${MARK}-scope`, key: 'id', columns: [{ name: 'id', type: 'text' }, { name: 'city', type: 'text' }], sources: [{ table: 'ext.contacts', key: 'external_id', columns: { city: 'city' } }] },
  });
  // A workflow over their entity.
  fixtures.workflow = `${MARK}-cities`;
  await asThem('POST', '/api/workflows/apply', {
    apiVersion: 'apps.svc.io/v1',
    kind: 'Workflow',
    metadata: { name: fixtures.workflow },
    spec: { entity: fixtures.entity, stateColumn: 'city', states: ['Lyon', 'Paris'], dormancy: { after: '30d' } },
  });
  // An export of their entity, and a run of it.
  fixtures.export = `${MARK}-daily`;
  await asThem('POST', '/api/exports/apply', {
    apiVersion: 'apps.svc.io/v1',
    kind: 'Export',
    metadata: { name: fixtures.export },
    spec: {
      scope: `${MARK}-scope`,
      source: { entity: fixtures.entity },
      columns: ['id', 'city'],
      order: ['id'],
      format: { kind: 'csv' },
      destination: { kind: 's3', bucket: 'their-bucket', filename: 'f.csv' },
      mode: 'snapshot',
    },
  });
  const exportRun = await owner.query<{ id: string }>(
    `insert into exports.runs (tenant_id, export_id, export_name, entity, scope, destination, status, trigger, artifact_time, ended_at, failure_code, failure_reason)
     select tenant_id, id, name, entity, scope, 's3', 'Failed', 'manual', now(), now(), 'publication', 'matrix' from exports.exports where tenant_id = $1 returning id`,
    [THEIRS],
  );
  fixtures.exportRun = exportRun.rows[0]!.id;
  // A process of theirs, and a decision in their inbox (written by the hub's own event writer).
  fixtures.process = `${MARK}-big-runs`;
  await asThem('POST', '/api/processes/apply', {
    apiVersion: 'apps.svc.io/v1',
    kind: 'Process',
    metadata: { name: fixtures.process },
    spec: { event: 'connector.run.*', when: 'payload.records_out > 0', decision: 'decision.matrix', message: 'run {{payload.run_id}}' },
  });
  const decisionEvent = await dev.services.db.withTenant(THEIRS, (tx) => dev.services.events.emit(tx, 'decision.matrix', { message: `${MARK} decision` }));
  fixtures.decision = String((await owner.query<{ id: string }>('select id from events.inbox where event_id = $1', [decisionEvent])).rows[0]!.id);
  // The inbox's cursor form (apiserver/paging.ts: base64url of `["inbox", id]`) for the id after theirs: a page before it would hold their item.
  fixtures.decisionCursor = Buffer.from(JSON.stringify(['inbox', String(Number(fixtures.decision) + 1)])).toString('base64url');
  const hooks = (await asThem('GET', '/api/platform/hooks')) as unknown as Array<{ id: string }>;
  fixtures.hook = hooks[0]?.id ?? 'matrix-hook';
  await dev.services.audit.flush();
  const delivery = await owner.query<{ id: number }>(
    `insert into hub.deliveries (tenant_id, integration_id, kind, event_type, body) values ($1, $2, 'test', 'matrix.test', '{}') returning id`,
    [THEIRS, Number(fixtures.integration)],
  );
  fixtures.delivery = String(delivery.rows[0]!.id);
}

/** A connector of one endpoint `id` into `table`, declaring `matrix-scope`, the scope their card is stored under (matrix.ts). */
function matrixConnector(name: string, id: string, table: string) {
  return {
    apiVersion: 'connectors.svc.io/v1',
    kind: 'Connector',
    metadata: { name },
    connector_type: 'rest-generic',
    scopes: ['matrix-scope'],
    spec: { base_url: 'http://127.0.0.1:9', endpoints: [{ id, path: `/${id}`, target: { table, unique_key: '$.id' } }] },
  };
}

/**
 * A connector of mine (never run) declaring the scope their connector declares and their card is
 * stored under: my analytic questions on it reach the card lookup, where a scope nothing of mine
 * declares is a 404 before any card is read.
 */
async function myDeclaration() {
  const manifest = stringify(matrixConnector('acme-matrix', 'rows', 'ext.matrix_rows'));
  const res = await fetch(`${dev.url}/api/connectors/apply`, { method: 'POST', headers: { 'X-Tenant-ID': String(MINE), 'X-User-ID': 'matrix-mine', 'Content-Type': 'application/yaml' }, body: manifest });
  if (res.status !== 201) throw new Error(`applying my connector: ${res.status} ${await res.text()}`);
}

function fill(text: string): string {
  return text
    .replaceAll('{mine}', String(MINE))
    .replaceAll('{theirs}', String(THEIRS))
    .replace(/\{their\.([a-zA-Z]+)\}/g, (_m, key: string) => {
      const value = fixtures[key];
      if (value === undefined) throw new Error(`the matrix names {their.${key}}, which the scenario does not make`);
      return value;
    });
}

/** Every table with a tenant_id column, `ext_t<id>.<name>` folded to `ext_t*.*`. */
async function tenantTables(): Promise<string[]> {
  const { rows } = await owner.query<{ schema: string; table: string }>(`
    select c.table_schema as schema, c.table_name as table from information_schema.columns c
      join information_schema.tables t on t.table_schema = c.table_schema and t.table_name = c.table_name and t.table_type = 'BASE TABLE'
     where c.column_name = 'tenant_id' and c.table_schema not in ('pg_catalog', 'information_schema')
     order by 1, 2`);
  return rows.map((r) => `${r.schema}.${r.table}`);
}

const matrixName = (table: string) => (/^ext_t\d+\./.test(table) ? 'ext_t*.*' : table);

/** Their rows of every tenant table, as one digest per table (owner, so nothing is filtered). */
async function fingerprint(): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const table of await tenantTables()) {
    if (matrixName(table) === 'ext_t*.*' && !table.startsWith(`ext_t${THEIRS}.`)) continue;
    const ident = table.split('.').map((p) => pg.escapeIdentifier(p)).join('.');
    const { rows } = await owner.query<{ d: string | null }>(`select md5(string_agg(x::text, '|' order by x::text)) as d from ${ident} x where tenant_id = $1`, [THEIRS]);
    out[table] = rows[0]!.d ?? 'empty';
  }
  return out;
}

describe('the tenancy matrix is complete', () => {
  it('names every table with a tenant_id column, and no table that does not exist', async () => {
    const present = new Set((await tenantTables()).map(matrixName));
    const declared = new Set(TABLES.map((t) => t.table));
    expect({ missingFromMatrix: [...present].filter((t) => !declared.has(t)) }).toEqual({ missingFromMatrix: [] });
    expect({ notInDatabase: [...declared].filter((t) => !present.has(t)) }).toEqual({ notInDatabase: [] });
  });

  it('names every route of the route table, or says why it touches no tenant\'s data', () => {
    const routes = allRoutes().filter((r) => !r.hidden).map((r) => `${r.method} ${r.path}`);
    const covered = new Set([...ENDPOINTS.map((e) => e.route), ...Object.keys(NOT_TENANT_SCOPED)]);
    expect({ missingFromMatrix: routes.filter((r) => !covered.has(r)) }).toEqual({ missingFromMatrix: [] });
    const known = new Set(routes);
    expect({ notARoute: [...covered].filter((r) => !known.has(r)) }).toEqual({ notARoute: [] });
  });

  it('every test file a reason points to exists', () => {
    const named = Object.values(NOT_TENANT_SCOPED).flatMap((reason) => reason.match(/[\w./-]+\.test\.ts/g) ?? []);
    expect(named.length).toBeGreaterThan(0);
    expect({ missingFiles: [...new Set(named)].filter((file) => !existsSync(file)) }).toEqual({ missingFiles: [] });
  });

  it('calls every /api/tenants/{tid} route with their tenant id, and every other tenant route with mine', () => {
    for (const decl of allRoutes()) {
      const key = `${decl.method} ${decl.path}`;
      const cases = ENDPOINTS.filter((e) => e.route === key);
      if (decl.path.includes('{tid}')) {
        expect({ key, theirTenant: cases.some((e) => e.path.startsWith(`/api/tenants/{theirs}`) && e.expect === 403) }).toEqual({ key, theirTenant: true });
      }
      for (const c of cases) expect({ key, path: c.path, pathParamsFilled: /\{(?!mine\}|theirs\}|their\.)/.test(c.path) }).toEqual({ key, path: c.path, pathParamsFilled: false });
    }
  });
});

describe('SQL: the application role with my tenant set sees and changes none of their rows', () => {
  const ops: Array<{ op: 'select' | 'update' | 'delete'; sql: (t: string) => string }> = [
    { op: 'select', sql: (t) => `select 1 from ${t} where tenant_id = $1` },
    { op: 'update', sql: (t) => `update ${t} set tenant_id = tenant_id where tenant_id = $1` },
    { op: 'delete', sql: (t) => `delete from ${t} where tenant_id = $1` },
  ];

  it.each(TABLES.map((t) => [t.table, t] as const))('%s', async (_name, tableCase) => {
    const tables = (await tenantTables()).filter((t) => matrixName(t) === tableCase.table && (tableCase.table !== 'ext_t*.*' || t.startsWith(`ext_t${THEIRS}.`)));
    expect(tables.length).toBeGreaterThan(0);
    for (const table of tables) {
      const ident = table.split('.').map((p) => pg.escapeIdentifier(p)).join('.');
      const theirs = await owner.query(`select 1 from ${ident} where tenant_id = $1`, [THEIRS]);
      // Without a row of theirs the check proves nothing: the scenario or the row's `seed` must make one.
      expect({ table, theirRows: (theirs.rowCount ?? 0) > 0 }).toEqual({ table, theirRows: true });
      for (const { op, sql } of ops) {
        const client = await oidc.services.db.app.connect();
        let outcome: SqlOutcome | string;
        try {
          await client.query('begin');
          await client.query(`select set_config('svc.tenant_id', $1, true)`, [String(MINE)]);
          const result = await client.query(sql(ident), [THEIRS]);
          outcome = result.rowCount === 0 ? 'none' : `${result.rowCount} rows`;
        } catch (err) {
          outcome = /permission denied/.test((err as Error).message) ? 'denied' : (err as Error).message;
        } finally {
          await client.query('rollback').catch(() => undefined);
          client.release();
        }
        expect({ table, op, outcome }).toEqual({ table, op, outcome: tableCase[op] });
      }
    }
  });
});

describe('HTTP: my calls naming their tenant or their resources', () => {
  let before: Record<string, string>;
  const routesByKey = new Map(allRoutes().map((r) => [`${r.method} ${r.path}`, r]));
  const declared = new DeclaredAnswers(allRoutes());
  const markers = () => [MARK, fixtures.connectorId!, fixtures.run!, fixtures.hash!];

  beforeAll(async () => {
    before = await fingerprint();
  });

  it.each(ENDPOINTS.map((e) => [`${e.route} as ${e.path}`, e] as const))('%s', async (_name, c) => {
    const [method] = c.route.split(' ');
    const headers: Record<string, string> = { Authorization: `Bearer ${token}` };
    let body: string | undefined;
    if (c.body !== undefined) {
      headers['Content-Type'] = c.type ?? 'application/json';
      body = fill(typeof c.body === 'string' ? c.body : JSON.stringify(c.body));
    }
    const path = fill(c.path);
    const res = await fetch(`${oidc.url}${path}`, { method, headers, body });
    const text = await res.text();
    expect({ status: res.status, text: res.status === c.expect ? '' : text }).toEqual({ status: c.expect, text: '' });
    // And as the OpenAPI document declares it: that status, in a declared media type and shape.
    const decl = routesByKey.get(c.route)!;
    expect({ route: c.route, problem: declared.problem(decl, path, { status: res.status, type: mediaType(res.headers.get('content-type')), body: text }) }).toEqual({ route: c.route, problem: undefined });
    if (c.excludes) for (const marker of markers()) expect({ marker, found: text.includes(marker) }).toEqual({ marker, found: false });
  });

  it('changed none of their rows in any table', async () => {
    await oidc.services.audit.flush();
    expect(await fingerprint()).toEqual(before);
  });
});
