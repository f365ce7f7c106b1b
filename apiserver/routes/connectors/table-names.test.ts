import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { ownerClient } from '../../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { until } from '../../../test/harness/until.js';

/**
 * An ext table may take any name `ext.<name>` allows (a lower-case identifier of up to 63 characters), on a real hub
 * through the CSV ingest: the indexes and sequence PostgreSQL keeps beside a table (named after it) neither stop a table
 * of the longest names from being made nor pass for a table where one is read or written, and a connector or entity
 * naming one is refused at its apply.
 */

let hub: TestHub;

beforeAll(async () => {
  hub = await startTestHub();
}, 60_000);

afterAll(async () => {
  await hub?.stop();
});

async function call(method: string, path: string, body?: string, type = 'application/json') {
  const headers: Record<string, string> = { 'X-Tenant-ID': '1' };
  if (body !== undefined) headers['Content-Type'] = type;
  const res = await fetch(`${hub.url}${path}`, { method, headers, body });
  const text = await res.text();
  return { status: res.status, body: text && res.headers.get('content-type')?.startsWith('application/json') ? JSON.parse(text) : text };
}

type Run = { id: string; status: string; recordsOut: number; errorMessage: string | null };

/** A CSV ingest into `ext.<table>`, followed to its end: the run, or the refusal. */
async function ingest(table: string): Promise<{ status: number; run?: Run; body: unknown }> {
  const res = await call('POST', `/api/platform/sources/csv/ingest?connector=names&table=${table}&key=id`, 'id,name\n1,a\n2,b\n', 'text/csv');
  if (res.status !== 200) return { status: res.status, body: res.body };
  const run = await until(`the run into ext.${table} to end`, async () => {
    const r = (await call('GET', `/api/platform/runs/${(res.body as Run).id}`)).body as Run;
    return r.status === 'Completed' || r.status === 'Failed' ? r : undefined;
  });
  return { status: res.status, run, body: res.body };
}

describe('ext table names', () => {
  it('a table of 62 or 63 characters is made and written', async () => {
    for (const table of ['l'.repeat(63), 'm'.repeat(62), `${'n'.repeat(58)}_data`]) {
      const { run } = await ingest(table);
      expect({ table, status: run?.status, recordsOut: run?.recordsOut, error: run?.errorMessage }).toEqual({ table, status: 'Completed', recordsOut: 2, error: null });
    }
  });

  it('a table named as another table\'s index is made, whichever comes first', async () => {
    expect((await ingest('parts')).run?.status).toBe('Completed');
    for (const table of ['parts_data', 'parts_row_hash', 'parts_endpoint', 'lines_data']) expect({ table, status: (await ingest(table)).run?.status }).toEqual({ table, status: 'Completed' });
    expect((await ingest('lines')).run?.status).toBe('Completed');
  });

  it('a name PostgreSQL gave one of a table\'s indexes or its sequence is refused as a table, naming why', async () => {
    expect((await ingest('orders')).run?.status).toBe('Completed');
    for (const table of ['orders_pkey', 'orders_id_seq', 'orders_tenant_id_external_id_key']) {
      const { status, body } = await ingest(table);
      expect({ table, status, body }).toEqual({
        table,
        status: 400,
        body: { error: expect.stringMatching(new RegExp(`^ext\\.${table} cannot be made a table: the name is taken by an? (index|sequence) of ext\\.orders\\b`)), field: 'table' },
      });
    }
  });

  it('an entity over such a name is refused at its apply; one applied while the name was free finds no table there: its download the 409 of a source not ingested yet (was a 500)', async () => {
    const entity = (name: string, table: string) =>
      JSON.stringify({
        apiVersion: 'apps.svc.io/v1',
        kind: 'Entity',
        metadata: { name },
        spec: { scope: 'crm', key: 'id', columns: [{ name: 'id', type: 'text' }], sources: [{ table, key: 'external_id', columns: { id: 'external_id' } }] },
      });
    // Applied while no relation has the name: a warning, as for any table not made yet.
    const applied = await call('POST', '/api/entities/apply', entity('stock-key', 'ext.stock_tenant_id_external_id_key'));
    expect(applied).toMatchObject({ status: 201, body: { warnings: [{ field: 'spec.sources[0].table', message: expect.stringContaining('does not exist yet') }] } });
    // Then PostgreSQL gives the name to an index of the table made after it.
    expect((await ingest('stock')).run?.status).toBe('Completed');
    const download = await call('GET', '/api/exports/entities/stock-key/download');
    expect({ status: download.status, body: download.body }).toEqual({
      status: 409,
      body: { error: 'entity stock-key cannot be read: source table ext.stock_tenant_id_external_id_key of entity stock-key does not exist; ingest its sources first or fix the entity' },
    });
    // Applied (again, or anew) now: refused, naming what has the name. A table's own name is read.
    for (const name of ['stock-key', 'stock-seq']) {
      const table = name === 'stock-key' ? 'ext.stock_tenant_id_external_id_key' : 'ext.stock_id_seq';
      const what = name === 'stock-key' ? 'an index of ext.stock' : 'a sequence of ext.stock';
      const refused = await call('POST', '/api/entities/apply', entity(name, table));
      expect({ status: refused.status, body: refused.body }).toEqual({
        status: 400,
        body: {
          error: `spec.sources[0].table: ${table} cannot be read as a table: the name is taken by ${what} (PostgreSQL names a table's indexes and sequence after it); choose another table name`,
          field: 'spec.sources[0].table',
        },
      });
    }
    expect(await call('POST', '/api/entities/apply', entity('stock', 'ext.stock'))).toMatchObject({ status: 201, body: { warnings: [] } });
  });

  it('a connector whose target names an index, a sequence or a view is refused at apply and validate, as its run would be; a name of no relation yet is accepted', async () => {
    expect((await ingest('items')).run?.status).toBe('Completed');
    // An index named as the hub named them before PostgreSQL did (`<name>_row_hash`: a table made by an older hub), and a view someone else made.
    const owner = await ownerClient(hub.ownerUrl);
    try {
      await owner.query('create index items_row_hash on ext_t1.items (tenant_id, row_hash)');
      await owner.query('create view ext_t1.items_view as select external_id from ext_t1.items');
    } finally {
      await owner.end();
    }
    const connector = (name: string, table: string) =>
      JSON.stringify({
        apiVersion: 'connectors.svc.io/v1',
        kind: 'Connector',
        metadata: { name },
        connector_type: 'rest-generic',
        spec: { base_url: 'http://127.0.0.1:9', endpoints: [{ id: 'items', path: '/items', target: { table, unique_key: '$.id' } }] },
      });
    const field = 'spec.endpoints[0].target.table';
    for (const [table, what] of [
      ['items_pkey', 'an index of ext.items'],
      ['items_id_seq', 'a sequence of ext.items'],
      ['items_tenant_id_external_id_key', 'an index of ext.items'],
      ['items_row_hash', 'an index of ext.items'],
      ['items_view', 'a view'],
    ]) {
      const error = `${field}: ext.${table} cannot be made a table: the name is taken by ${what} (PostgreSQL names a table's indexes and sequence after it); choose another table name`;
      const applied = await call('POST', '/api/connectors/apply', connector('into-taken', `ext.${table}`));
      expect({ table, status: applied.status, body: applied.body }).toEqual({ table, status: 400, body: { error, field } });
      const checked = await call('POST', '/api/connectors/validate', connector('into-taken', `ext.${table}`));
      expect({ table, status: checked.status, errors: checked.body.errors }).toEqual({ table, status: 200, errors: [{ field, message: error }] });
    }
    expect((await call('GET', '/api/connectors/into-taken')).status).toBe(404);
    // A name of no relation yet (the run makes the table), and a table's own name, are accepted.
    for (const table of ['items_new', 'items']) expect({ table, status: (await call('POST', '/api/connectors/apply', connector(`into-${table}`.replace('_', '-'), `ext.${table}`))).status }).toEqual({ table, status: 201 });
  });
});
