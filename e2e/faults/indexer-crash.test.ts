import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { startDemoSource, type DemoSource } from '../../src/demo-source/server.js';
import { createTestDatabase } from '../../test/harness/database.js';
import { type Receiver, startReceiver } from '../../test/harness/receiver.js';
import { until } from '../../test/harness/until.js';
import { count, embeddingsAnswer, indexed, indexerEnv, ingest, oneChunkEachRow, post } from './indexing.js';
import { killAll, startHubProcess } from './processes.js';

/**
 * kill -9 of `svc-hub all` while its retrieval indexer is part-way through a pass: chunks made, some
 * embedded, a model call in flight (held unanswered), and pending entries of a later run waiting.
 * The model is a stand-in on loopback (indexing.ts), not OpenAI. What docs/retrieval.md ("Chunks") allows: the vectors of the call in flight are
 * lost and embedded again by the next process; a pending entry is removed only in the transaction
 * that made its chunks, so none is lost; chunks are one per row hash and corpus, so none is doubled.
 */

const ROWS = 300;

let demo: DemoSource;
let model: Receiver;
/** While true the model holds every call it receives, never answering. */
let holding = false;
const owners: pg.Client[] = [];

beforeAll(async () => {
  demo = await startDemoSource({ port: 0, host: '127.0.0.1', rows: ROWS, log: () => undefined });
  model = await startReceiver((_path, received) => (holding ? 'hang' : embeddingsAnswer(received)));
});

afterAll(async () => {
  await killAll();
  for (const owner of owners) await owner.end();
  await model?.close();
  await demo?.close();
});

describe('kill -9 of the hub mid indexer pass', () => {
  it('with a model call in flight and entries pending: after restart every row has one chunk with a vector, none lost, none doubled', async () => {
    const url = await createTestDatabase('fault');
    const owner = new pg.Client({ connectionString: url });
    await owner.connect();
    owners.push(owner);

    const first = await startHubProcess('all', url, indexerEnv(model.url, 20));
    expect((await post(first, '/api/platform/secrets', { name: 'DEMO_PASSWORD', value: 'demo-password' })).status).toBe(201);
    await ingest(first, demo.url, 'crash-a');
    // Some calls answered (vectors stored), then the model holds the next one: the pass stays in it.
    await until('vectors of a first call to be stored', async () => (await count(owner, `select count(*) as n from retrieval.chunks where corpus = 'crash-a' and embedding is not null`)) > 0, { timeoutMs: 30_000 });
    holding = true;
    const calls = model.received.length;
    await model.waitFor(calls + 1, '/v1/embeddings', 20_000);
    // A second connector's run meanwhile: its entries wait behind the pass held in the model call.
    await ingest(first, demo.url, 'crash-b');

    await first.crash();
    const atKill = {
      pending: await count(owner, 'select count(*) as n from retrieval.pending'),
      chunks: await count(owner, 'select count(*) as n from retrieval.chunks where row_hash is not null'),
      embedded: await count(owner, 'select count(*) as n from retrieval.chunks where row_hash is not null and embedding is not null'),
    };
    expect(atKill.pending).toBeGreaterThan(0); // crash-b's entries were not indexed yet
    expect(atKill.embedded).toBeGreaterThan(0);
    expect(atKill.embedded).toBeLessThan(atKill.chunks); // mid embedding: the call in flight had stored nothing

    holding = false;
    const second = await startHubProcess('all', url, indexerEnv(model.url, 20));
    await indexed(owner, 2 * ROWS, () => second.output().slice(-2000));
    await oneChunkEachRow(owner, ['crash-a', 'crash-b'], ROWS);
    // Searchable: a search answers from the stored vectors, each row at most once.
    const search = await post(second, '/api/platform/rag/search', { query: 'a partner', topK: 50 });
    expect(search.status).toBe(200);
    // (The platform corpus, chunks with a key and no row hash, is searched with the tenant's own.)
    const hits = (search.json.results as Array<{ rowHash: string; metadata: { corpus: string; key?: string } }>).map((r) => `${r.metadata.corpus}/${r.rowHash || r.metadata.key}`);
    expect(hits.length).toBe(50);
    expect(hits.filter((h, i) => hits.indexOf(h) !== i)).toEqual([]);
    await second.stop();
  }, 120_000);
});
