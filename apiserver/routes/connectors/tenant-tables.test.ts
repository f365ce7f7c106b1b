import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { stringify } from 'yaml';
import { startDemoSource } from '../../../src/demo-source/server.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { until } from '../../../test/harness/until.js';
import { deleteConnector } from '../../../src/connectors/store.js';
import { ownerClient } from '../../../test/harness/api-client.js';

/**
 * Every tenant's ext tables are its own (schema ext_t<id>), on a real hub with real runs against
 * the demo source and the CSV ingest route: one tenant widening or typing `ext.partners` cannot
 * break another's ingest into `ext.partners`, and connector delete and endpoint purge remove the
 * caller's rows and tables while another tenant's, in a table of the same name, survive.
 */

let hub: TestHub;
let demo: Awaited<ReturnType<typeof startDemoSource>>;
let owner: pg.Client;

const ROWS = 300;
const A = '2';
const B = '3';

beforeAll(async () => {
  demo = await startDemoSource({ port: 0, host: '127.0.0.1', rows: ROWS, log: () => undefined });
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
  await owner.query(`insert into core.tenants (id, code, name) values (2, 'acme', 'Acme'), (3, 'globex', 'Globex')`);
  // The demo source's password, as each tenant's own stored secret.
  for (const tenant of [A, B]) {
    const res = await call('POST', '/api/platform/secrets', tenant, JSON.stringify({ name: 'DEMO_TT_PASSWORD', value: 'demo-password' }), 'application/json');
    expect(res.status).toBe(201);
  }
}, 60_000);

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
  await demo?.close();
});

async function call(method: string, path: string, tenant: string, body?: string, type = 'application/json') {
  const headers: Record<string, string> = { 'X-Tenant-ID': tenant };
  if (body !== undefined) headers['Content-Type'] = type;
  const res = await fetch(`${hub.url}${path}`, { method, headers, body });
  const text = await res.text();
  return { status: res.status, body: text && res.headers.get('content-type')?.startsWith('application/json') ? JSON.parse(text) : text };
}

type Run = { id: string; status: string; recordsOut: number; errorMessage: string | null };

function manifest(name: string, endpointId: string, table: string) {
  return stringify({
    apiVersion: 'connectors.svc.io/v1',
    kind: 'Connector',
    metadata: { name },
    connector_type: 'rest-generic',
    spec: {
      base_url: demo.url,
      auth: { kind: 'basic', username: 'demo', password_env: 'DEMO_TT_PASSWORD' },
      endpoints: [
        {
          id: endpointId,
          path: '/offset/partners',
          pagination: { kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit: 100, response_path: '$.data', total_path: '$.total' },
          target: {
            table,
            unique_key: '$.id',
            promote: [
              { name: 'name', path: '$.name', type: 'text' },
              { name: 'credit_limit', path: '$.credit_limit', type: 'bigint' },
              { name: 'updated_at', path: '$.updated_at', type: 'timestamptz', transform: 'parse_iso8601' },
            ],
          },
        },
      ],
    },
  });
}

async function applyAndRun(tenant: string, name: string, endpointId: string, table: string): Promise<Run> {
  const applied = await call('POST', '/api/connectors/apply', tenant, manifest(name, endpointId, table), 'application/yaml');
  expect([200, 201]).toContain(applied.status);
  return run(tenant, name);
}

async function run(tenant: string, name: string): Promise<Run> {
  const started = await call('POST', `/api/connectors/${name}/runs`, tenant, '{}');
  expect(started.status).toBe(202);
  const id = (started.body as { runs: Array<{ id: string }> }).runs[0]!.id;
  return until(`run ${id} to end`, async () => {
    const r = (await call('GET', `/api/platform/runs/${id}`, tenant)).body as Run;
    return r.status !== 'Running' && r;
  }, 30_000);
}

const csvIngest = (tenant: string, connector: string, table: string, csv: string) =>
  call('POST', `/api/platform/sources/csv/ingest?connector=${connector}&table=${table}&key=id`, tenant, csv, 'text/csv');

const count = async (table: string) => (await owner.query<{ n: number }>(`select count(*)::int as n from ${table}`)).rows[0]!.n;
const exists = async (table: string) => (await owner.query<{ t: string | null }>('select to_regclass($1) as t', [table])).rows[0]!.t !== null;
const columnType = async (schema: string, table: string, column: string) =>
  (await owner.query<{ data_type: string }>('select data_type from information_schema.columns where table_schema = $1 and table_name = $2 and column_name = $3', [schema, table, column]))
    .rows[0]?.data_type;

describe('one tenant cannot harm another tenant\'s tables', () => {
  it('tenant A filling ext.partners to the column limit and typing credit_limit as text leaves B\'s ingest into ext.partners whole', async () => {
    // 8 fixed columns + credit_limit + 1590 = 1599 columns: in a shared table B's two new promoted
    // columns (name, updated_at) would pass PostgreSQL's limit of 1600 and B's runs would fail.
    const wide = Array.from({ length: 1590 }, (_v, i) => `c${String(i).padStart(4, '0')}`);
    const header = ['id', 'credit_limit', ...wide].join(',');
    const line = ['1', 'a lot', ...wide.map(() => 'x')].join(',');
    const attack = await csvIngest(A, 'widen', 'partners', `${header}\n${line}\n`);
    expect(attack.status).toBe(200);
    expect(attack.body).toMatchObject({ status: 'Completed', recordsOut: 1 });
    expect(await columnType('ext_t2', 'partners', 'credit_limit')).toBe('text');

    const victim = await applyAndRun(B, 'crm', 'partners', 'ext.partners');
    expect(victim).toMatchObject({ status: 'Completed', recordsOut: ROWS, errorMessage: null });
    expect(await count('ext_t3.partners')).toBe(ROWS);
    // B's columns have B's types, and none of A's.
    expect(await columnType('ext_t3', 'partners', 'credit_limit')).toBe('bigint');
    expect(await columnType('ext_t3', 'partners', 'updated_at')).toBe('timestamp with time zone');
    expect(await columnType('ext_t3', 'partners', 'c0000')).toBeUndefined();
    // A's table is as A left it.
    expect(await count('ext_t2.partners')).toBe(1);
    expect(await columnType('ext_t2', 'partners', 'name')).toBeUndefined();
  }, 60_000);

  it('a tenant promoting a column with another type than its own table has fails its run naming both types', async () => {
    const res = await applyAndRun(A, 'retype', 'partners', 'ext.partners');
    expect(res.status).toBe('Failed');
    expect(res.errorMessage).toMatch(/credit_limit of ext\.partners is text, but this endpoint promotes it as bigint/);
    expect(await count('ext_t3.partners')).toBe(ROWS);
    const cleanup = await call('DELETE', '/api/connectors/retype', A);
    expect(cleanup.status).toBe(204);
  }, 30_000);

  it('the tables carry a check constraint and row-level security for their tenant', async () => {
    await expect(owner.query(`insert into ext_t3.partners (tenant_id, external_id, row_hash, data, connector_id, endpoint_id)
      values (2, 'x', 'h', '{}', gen_random_uuid(), gen_random_uuid())`)).rejects.toThrow(/check constraint/);
    const { rows } = await owner.query<{ rls: boolean }>(`select relrowsecurity as rls from pg_class where oid = 'ext_t3.partners'::regclass`);
    expect(rows[0]!.rls).toBe(true);
  });
});

describe('connector delete and endpoint purge against real rows', () => {
  it('purge empties the caller\'s endpoint only; delete drops the caller\'s table and keeps the other tenant\'s rows and tables', async () => {
    // Both tenants ingest ext.accounts under the same connector and endpoint names; A also has a CSV table.
    for (const tenant of [A, B]) expect(await applyAndRun(tenant, 'ledger', 'accounts', 'ext.accounts')).toMatchObject({ status: 'Completed', recordsOut: ROWS });
    expect((await csvIngest(A, 'crm-import', 'contacts', 'id,city\n1,Lyon\n2,Nice\n')).body).toMatchObject({ status: 'Completed', recordsOut: 2 });
    const hashB = (await owner.query<{ row_hash: string }>(`select row_hash from ext_t3.accounts where external_id = '7'`)).rows[0]!.row_hash;

    // Purge in A: A's rows are gone, its table stays; B's rows are untouched.
    expect((await call('POST', '/api/connectors/ledger/endpoints/accounts/purge', A)).status).toBe(204);
    expect(await count('ext_t2.accounts')).toBe(0);
    expect(await count('ext_t3.accounts')).toBe(ROWS);

    // A reads again, then deletes the connector: its table goes, its other table stays, B keeps everything.
    expect(await run(A, 'ledger')).toMatchObject({ status: 'Completed', recordsOut: ROWS });
    expect(await count('ext_t2.accounts')).toBe(ROWS);
    expect((await call('DELETE', '/api/connectors/ledger', A)).status).toBe(204);
    expect(await exists('ext_t2.accounts')).toBe(false);
    expect(await count('ext_t2.contacts')).toBe(2);
    expect(await count('ext_t3.accounts')).toBe(ROWS);
    expect((await owner.query(`select 1 from connectors.ext_tables where tenant_id = 2 and table_name = 'ext.accounts'`)).rowCount).toBe(0);
    expect((await owner.query(`select 1 from connectors.ext_tables where tenant_id = 3 and table_name = 'ext.accounts'`)).rowCount).toBe(1);
    const row = await call('GET', `/api/platform/data/row/${hashB}`, B);
    expect(row.status).toBe(200);
    expect((row.body as Record<string, string>).id).toBe('7');
    expect((await call('GET', `/api/platform/data/row/${hashB}`, A)).status).toBe(404);

    // A delete naming B's connector from A is a 404 and touches nothing of B.
    expect((await call('DELETE', '/api/connectors/crm', A)).status).toBe(404);
    expect(await count('ext_t3.partners')).toBe(ROWS);

    // B deletes both its connectors: its last tables go, and with them its schema.
    expect((await call('DELETE', '/api/connectors/ledger', B)).status).toBe(204);
    expect((await call('DELETE', '/api/connectors/crm', B)).status).toBe(204);
    expect((await owner.query(`select 1 from pg_namespace where nspname = 'ext_t3'`)).rowCount).toBe(0);
    expect(await count('ext_t2.contacts')).toBe(2);
    expect(await count('ext_t2.partners')).toBe(1);

    // A new run of a deleted table's name creates it again.
    expect(await applyAndRun(B, 'ledger', 'accounts', 'ext.accounts')).toMatchObject({ status: 'Completed', recordsOut: ROWS });
    expect(await count('ext_t3.accounts')).toBe(ROWS);
  }, 90_000);

  it('a delete outside HTTP (as the operator\'s finalizer does) drops the tables in its own transaction', async () => {
    expect(await applyAndRun(A, 'operated', 'accounts', 'ext.operated')).toMatchObject({ status: 'Completed', recordsOut: ROWS });
    expect(await hub.services.db.withTenant(Number(A), (tx) => deleteConnector(tx, 'operated'))).toBe(true);
    expect(await exists('ext_t2.operated')).toBe(false);
    // A delete that fails after the drop rolls the drop back with everything else.
    expect(await applyAndRun(A, 'operated', 'accounts', 'ext.operated')).toMatchObject({ status: 'Completed' });
    await expect(
      hub.services.db.withTenant(Number(A), async (tx) => {
        await deleteConnector(tx, 'operated');
        throw new Error('after the drop');
      }),
    ).rejects.toThrow('after the drop');
    expect(await count('ext_t2.operated')).toBe(ROWS);
  }, 30_000);

  it('the drop function acts on the current tenant\'s schema only', async () => {
    await owner.query('create table ext_t3.orphan (tenant_id bigint)');
    const dropped = await hub.services.db.withTenant(Number(A), (tx) => tx.query<{ name: string }>('select connectors.drop_unused_ext_tables() as name'));
    expect(dropped.rows.map((r) => r.name)).not.toContain('ext.orphan');
    expect(await exists('ext_t3.orphan')).toBe(true);
    const none = await hub.services.db.withoutTenant((tx) => tx.query('select connectors.drop_unused_ext_tables()'));
    expect(none.rowCount).toBe(0);
    const theirs = await hub.services.db.withTenant(Number(B), (tx) => tx.query<{ name: string }>('select connectors.drop_unused_ext_tables() as name'));
    expect(theirs.rows.map((r) => r.name)).toEqual(['ext.orphan']);
    expect(await exists('ext_t3.orphan')).toBe(false);
  });
});
