import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { type Client, client, devClient, ownerClient, type Reply } from '../../../test/harness/api-client.js';
import { ITEM_ENTITY, itemS3Export } from '../../../test/harness/export-manifests.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';

/**
 * The pages of an export's runs for a scope-bound caller, when the name's runs are of several
 * scopes (an earlier export of the name, deleted, under another scope): a page holds `limit` runs
 * the caller reads while that many follow, and following `Link` meets each of them once. The runs
 * of scopes it does not hold were left out after the page's rows were read: a page came back short
 * or empty with more to come, and a deleted export's first page of only those runs was a 403.
 * And the apply of a name whose export is of a scope the caller does not hold: a 403, the export as it was.
 */

let hub: TestHub;
let owner: pg.Client;
let api: Client;
let crm: Client;
const T = 1;

/** Runs of export `name` (of export id `exportId`), newest first, each of the scope given. */
async function insertRuns(name: string, exportId: string, scopes: string[]): Promise<string[]> {
  const ids: string[] = [];
  for (const [k, scope] of scopes.entries()) {
    const { rows } = await owner.query<{ id: string }>(
      `insert into exports.runs (tenant_id, export_id, export_name, entity, scope, destination, status, trigger, artifact_time, started_at, ended_at, failure_code, failure_reason)
       values ($1, $2, $3, 'item', $4, 's3', 'Failed', 'manual', now(), timestamptz '2026-12-01T00:00:00Z' - make_interval(secs => $5), now(), 'publication', 'test')
       returning id`,
      [T, exportId, name, scope, k],
    );
    ids.push(rows[0]!.id);
  }
  return ids;
}

/** The path a `Link: <…>; rel="next"` names, undefined without one. */
function nextPath(reply: Reply): string | undefined {
  const link = reply.headers.get('link');
  return link ? /^<(\/[^>]*)>; rel="next"$/.exec(link)?.[1] : undefined;
}

/** Each page from `path` on, following Link: the run ids of each page. */
async function pages(as: Client, path: string): Promise<string[][]> {
  const out: string[][] = [];
  for (let next: string | undefined = path; next !== undefined && out.length < 20; ) {
    const reply = await as.get(next);
    expect(reply.status).toBe(200);
    out.push((reply.body as Array<{ id: string }>).map((r) => r.id));
    next = nextPath(reply);
  }
  return out;
}

beforeAll(async () => {
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
  api = devClient(hub.url, T);
  await hub.services.connectors.ext.ensureTable(T, 'ext.items', [{ name: 'label', path: '$.label', type: 'text' }]);
  for (const [name, value] of [['S3_KEY', 'key-id'], ['S3_SECRET', 'secret-key']]) expect((await api.post('/api/platform/secrets', { name, value })).status).toBe(201);
  expect((await api.post('/api/entities/apply', ITEM_ENTITY)).status).toBe(201);
  const created = await api.post(`/api/tenants/${T}/users`, { login: 'crm-only', name: 'CRM only' });
  const userId = (created.body as { id: number }).id;
  expect((await api.put(`/api/tenants/${T}/users/${userId}/scopes`, { scopes: ['crm'] })).status).toBe(200);
  crm = client(hub.url, { 'X-Tenant-ID': String(T), 'X-User-ID': String(userId) });
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

describe('the runs of an export, for a caller holding some of their scopes', () => {
  it('a page holds `limit` runs the caller reads while that many follow, and Link meets each once', async () => {
    expect((await api.post('/api/exports/apply', itemS3Export('paged', 'http://127.0.0.1:9'))).status).toBe(201);
    const { rows } = await owner.query<{ id: string }>("select id from exports.exports where name = 'paged'");
    const ids = await insertRuns('paged', rows[0]!.id, ['sales', 'sales', 'crm', 'sales', 'sales', 'crm', 'crm', 'sales']);
    const mine = [ids[2]!, ids[5]!, ids[6]!];
    expect(await pages(crm, '/api/exports/paged/runs?limit=2')).toEqual([mine.slice(0, 2), mine.slice(2)]);
    expect(await pages(crm, '/api/exports/paged/runs?limit=3')).toEqual([mine]);
    // A caller bound by no scope reads them all.
    expect((await pages(api, '/api/exports/paged/runs?limit=5')).flat()).toEqual(ids);
  });

  it('of a deleted export, a first page whose newest runs are of another scope holds the caller\'s, not a 403; none of its scopes is a 403', async () => {
    const ids = await insertRuns('gone', '00000000-0000-4000-8000-00000000aaaa', ['sales', 'sales', 'crm', 'sales', 'crm']);
    expect(await pages(crm, '/api/exports/gone/runs?limit=2')).toEqual([[ids[2]!, ids[4]!]]);
    await insertRuns('gone-sales', '00000000-0000-4000-8000-00000000bbbb', ['sales']);
    const refused = await crm.get('/api/exports/gone-sales/runs');
    expect({ status: refused.status, body: refused.body }).toEqual({ status: 403, body: { error: 'scope not granted' } });
  });
});

describe('re-applying an export of a scope the caller does not hold', () => {
  it('is refused 403 scope not granted, as reading or deleting it is: the stored export keeps its scope, entity and destination', async () => {
    const ledger = { ...ITEM_ENTITY, metadata: { name: 'ledger' }, spec: { ...ITEM_ENTITY.spec, scope: 'sales' } };
    expect((await api.post('/api/entities/apply', ledger)).status).toBe(201);
    const sales = itemS3Export('sales-drop', 'https://s3.sales.example');
    expect((await api.post('/api/exports/apply', { ...sales, spec: { ...sales.spec, scope: 'sales', source: { entity: 'ledger' } } })).status).toBe(201);
    const before = (await api.get('/api/exports/sales-drop')).body;
    expect((await crm.del('/api/exports/sales-drop')).status).toBe(403);
    // The same name under the crm caller's own scope and entity, pointed at its own bucket.
    const takeover = itemS3Export('sales-drop', 'https://s3.crm.example');
    const refused = await crm.post('/api/exports/apply', takeover);
    expect({ status: refused.status, body: refused.body }).toEqual({ status: 403, body: { error: 'scope not granted' } });
    expect((await api.get('/api/exports/sales-drop')).body).toEqual(before);
    // An export of the caller's scope is still re-applied by it.
    expect((await crm.post('/api/exports/apply', itemS3Export('crm-drop', 'https://s3.crm.example'))).status).toBe(201);
    expect((await crm.post('/api/exports/apply', itemS3Export('crm-drop', 'https://s3.other.example'))).status).toBe(200);
  });
});
