import { afterAll, beforeAll, expect, it } from '@jest/globals';
import pg from 'pg';
import { stringify } from 'yaml';
import { devClient } from '../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { type PgvectorServer, startPgvectorServer } from '../../test/harness/pgvector.js';
import { demoPartnersConnector, indexAll } from '../../test/harness/retrieval.js';
import { until } from '../../test/harness/until.js';
import { startDemoSource } from '../demo-source/server.js';

/**
 * The whole hub over a PostgreSQL that has pgvector (PGlite with its pgvector build behind its
 * socket server: test/harness/pgvector.ts): at start it prepares the extension, the column and the
 * HNSW index; a connector run of the demo source is indexed by the real offline model; search
 * through the public API is answered by the index, and answers what the in-process path answers
 * over the same chunks.
 */

const T = 1;
let server: PgvectorServer;
let demo: Awaited<ReturnType<typeof startDemoSource>>;
let hub: TestHub;
let memory: TestHub;
let owner: pg.Client;

beforeAll(async () => {
  server = await startPgvectorServer();
  demo = await startDemoSource({ port: 0, host: '127.0.0.1', rows: 40, log: () => undefined });
  hub = await startTestHub({ 'svc.datasource.url': server.url });
  // A second hub on the same database, held to the in-process index.
  memory = await startTestHub({ 'svc.datasource.url': server.url, 'svc.retrieval.vector-search': 'memory' });
  owner = new pg.Client({ connectionString: server.url });
  await owner.connect();
}, 120_000);

afterAll(async () => {
  await owner?.end();
  await memory?.stop();
  await hub?.stop();
  await demo?.close();
  await server?.close();
});

it('ingested rows are searched through the HNSW index, with the answers of the in-process path', async () => {
  const admin = devClient(hub.url, T);
  const manifest = demoPartnersConnector('crm', ['sales'], 'ext.partners', demo.url);
  const applied = await fetch(`${hub.url}/api/connectors/apply`, { method: 'POST', headers: { 'X-Tenant-ID': String(T), 'content-type': 'application/yaml' }, body: stringify(manifest) });
  expect(applied.status).toBe(201);
  const started = await admin.post('/api/connectors/crm/runs', {});
  expect(started.status).toBe(202);
  const runId = (started.body as { runs: Array<{ id: string }> }).runs[0]!.id;
  await until('the run to complete', async () => ((await admin.get(`/api/platform/runs/${runId}`)).body as { status: string }).status === 'Completed', 60_000);
  await indexAll(hub.services.retrieval);
  const stored = await owner.query(`select count(*)::int as chunks, count(vec)::int as vecs from retrieval.chunks where tenant_id = $1`, [T]);
  expect(stored.rows[0]).toEqual({ chunks: 40, vecs: 40 });
  expect((await admin.get('/api/platform/rag/status')).body).toMatchObject({ chunks: 40, embedded: 40, vectorSearch: 'pgvector' });
  expect((await devClient(memory.url, T).get('/api/platform/rag/status')).body).toMatchObject({ chunks: 40, embedded: 40, vectorSearch: 'memory' });

  const search = async (h: TestHub) => {
    const r = await devClient(h.url, T).post('/api/platform/rag/search', { query: 'a partner in Berlin', topK: 5, scope: 'sales' });
    expect(r.status).toBe(200);
    return (r.body as { results: Array<{ rowHash: string; content: string; similarity: number }> }).results;
  };
  const viaIndex = await search(hub);
  const inProcess = await search(memory);
  expect(viaIndex).toHaveLength(5);
  expect(viaIndex[0]!.content).toContain('Berlin');
  // 40 chunks: the HNSW graph is searched in full, so both answers are exact and equal.
  expect(viaIndex.map((h) => h.rowHash)).toEqual(inProcess.map((h) => h.rowHash));
  for (const [i, h] of viaIndex.entries()) expect(h.similarity).toBeCloseTo(inProcess[i]!.similarity, 5);

  // Proof of which path answered: a chunk whose `vec` is cleared leaves the index's answers only.
  await owner.query('update retrieval.chunks set vec = null where row_hash = $1', [viaIndex[0]!.rowHash]);
  expect((await search(hub)).map((h) => h.rowHash)).not.toContain(viaIndex[0]!.rowHash);
  expect((await search(memory)).map((h) => h.rowHash)[0]).toBe(viaIndex[0]!.rowHash);
}, 120_000);
