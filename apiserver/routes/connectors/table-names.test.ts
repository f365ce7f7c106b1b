import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { until } from '../../../test/harness/until.js';

/**
 * An ext table may take any name `ext.<name>` allows (a lower-case identifier of up to 63 characters), on a real hub
 * through the CSV ingest: the indexes and sequence PostgreSQL keeps beside a table (named after it) neither stop a table
 * of the longest names from being made nor pass for a table where one is read or written.
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

  it('an entity over such a name finds no table there: a warning at its apply, and its download the 409 of a source not ingested yet (was a 500)', async () => {
    expect((await ingest('stock')).run?.status).toBe('Completed');
    const manifest = {
      apiVersion: 'apps.svc.io/v1',
      kind: 'Entity',
      metadata: { name: 'stock-key' },
      spec: { scope: 'crm', key: 'id', columns: [{ name: 'id', type: 'text' }], sources: [{ table: 'ext.stock_tenant_id_external_id_key', key: 'external_id', columns: { id: 'external_id' } }] },
    };
    const applied = await call('POST', '/api/entities/apply', JSON.stringify(manifest));
    expect(applied).toMatchObject({ status: 201, body: { warnings: [{ field: 'spec.sources[0].table', message: expect.stringContaining('does not exist yet') }] } });
    const download = await call('GET', '/api/exports/entities/stock-key/download');
    expect({ status: download.status, body: download.body }).toEqual({
      status: 409,
      body: { error: 'entity stock-key cannot be read: source table ext.stock_tenant_id_external_id_key of entity stock-key does not exist; ingest its sources first or fix the entity' },
    });
  });
});
