import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { type Client, devClient, ownerClient } from '../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { indexAll } from '../../test/harness/retrieval.js';
import { until } from '../../test/harness/until.js';

/**
 * `svc.retrieval.index-rows=false` after rows were indexed: a hub indexing rows and a hub that does
 * not, over one real PostgreSQL, a connector of a source on loopback whose rows change between runs.
 * Rows rewritten while indexing is off get no chunk, and the chunks of their earlier versions are
 * settled (removed here: no other row of the connector holds that content), never left citing a
 * version that is gone.
 */

const T = 1;
let source: Server;
let records: Array<{ id: string; name: string; city: string }>;
let indexing: TestHub;
let off: TestHub;
let owner: pg.Client;

beforeAll(async () => {
  records = [{ id: 'k1', name: 'Ada Lovelace', city: 'London' }, { id: 'k2', name: 'Grace Hopper', city: 'Arlington' }, { id: 'k3', name: 'Alan Turing', city: 'Wilmslow' }];
  source = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(records));
  });
  source.listen(0, '127.0.0.1');
  await once(source, 'listening');
  indexing = await startTestHub();
  off = await startTestHub({ 'svc.datasource.url': indexing.ownerUrl, 'svc.retrieval.index-rows': false });
  owner = await ownerClient(indexing.ownerUrl);
}, 60_000);

afterAll(async () => {
  await owner?.end();
  await off?.stop();
  await indexing?.stop();
  if (source) await new Promise<void>((resolve) => source.close(() => resolve()));
});

async function run(hub: TestHub): Promise<void> {
  const admin: Client = devClient(hub.url, T);
  const started = await admin.post('/api/connectors/people/runs', {});
  expect(started.status).toBe(202);
  const id = (started.body as { runs: Array<{ id: string }> }).runs[0]!.id;
  const status = await until(`run ${id} to end`, async () => {
    const { status } = (await admin.get(`/api/platform/runs/${id}`)).body as { status: string };
    return status !== 'Running' && status;
  }, { timeoutMs: 30_000, everyMs: 50 });
  expect(status).toBe('Completed');
}

async function chunks(): Promise<Array<{ key: string; cites: boolean }>> {
  const { rows } = await owner.query<{ key: string; cites: boolean }>(
    `select c.external_id as key, exists (select 1 from ext_t${T}.people r where r.external_id = c.external_id and r.row_hash = c.row_hash) as cites
       from retrieval.chunks c where c.tenant_id = $1 and c.table_name = 'ext.people' order by 1`,
    [T],
  );
  return rows;
}

describe('svc.retrieval.index-rows=false', () => {
  it('rows rewritten while indexing is off drop the chunks of their earlier versions and get none; the others keep theirs', async () => {
    const manifest = {
      apiVersion: 'connectors.svc.io/v1', kind: 'Connector', metadata: { name: 'people' }, connector_type: 'rest-generic', scopes: ['people'],
      spec: {
        base_url: `http://127.0.0.1:${(source.address() as AddressInfo).port}`,
        endpoints: [{ id: 'all', path: '/people', pagination: { kind: 'none', response_path: '$' }, target: { kind: 'hybrid', table: 'ext.people', unique_key: '$.id', promote: [{ name: 'name', path: '$.name', type: 'text' }] } }],
      },
    };
    expect((await devClient(indexing.url, T).post('/api/connectors/apply', manifest)).status).toBe(201);
    await run(indexing);
    await indexAll(indexing.services.retrieval);
    expect(await chunks()).toEqual([{ key: 'k1', cites: true }, { key: 'k2', cites: true }, { key: 'k3', cites: true }]);
    const before = (await devClient(indexing.url, T).post('/api/platform/rag/search', { query: 'Ada Lovelace in London', topK: 3 })).body as { results: Array<{ rowHash: string }> };
    expect(before.results).toHaveLength(3);

    // Indexing off: k1 rewritten, k4 new, k2 and k3 as they were.
    records = [{ id: 'k1', name: 'Ada King, Countess of Lovelace', city: 'London' }, records[1]!, records[2]!, { id: 'k4', name: 'Edsger Dijkstra', city: 'Nuenen' }];
    await run(off);
    await indexAll(off.services.retrieval);
    expect(await chunks()).toEqual([{ key: 'k2', cites: true }, { key: 'k3', cites: true }]);
    const pending = await owner.query('select count(*)::int as n from retrieval.pending');
    expect(pending.rows[0].n).toBe(0);
    // Search (in process, kept in step at each search) cites only rows that exist.
    const after = (await devClient(off.url, T).post('/api/platform/rag/search', { query: 'Ada Lovelace in London', topK: 3 })).body as { results: Array<{ rowHash: string; metadata: { key: string } }> };
    expect(after.results.map((r) => r.metadata.key).sort()).toEqual(['k2', 'k3']);

    // A run that rewrites nothing a chunk names records nothing.
    await run(off);
    expect((await owner.query('select count(*)::int as n from retrieval.pending')).rows[0].n).toBe(0);
  });
});
