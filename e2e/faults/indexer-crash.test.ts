import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { stringify } from 'yaml';
import { startDemoSource, type DemoSource } from '../../src/demo-source/server.js';
import { createTestDatabase } from '../../test/harness/database.js';
import { type Behaviour, type Receiver, type Received, startReceiver } from '../../test/harness/receiver.js';
import { until } from '../../test/harness/until.js';
import { type HubProcess, killAll, startHubProcess } from './processes.js';

/**
 * kill -9 of `svc-hub all` while its retrieval indexer is part-way through a pass: chunks made, some
 * embedded, a model call in flight (held unanswered), and pending entries of a later run waiting.
 * The model is a stand-in: the repo's scriptable HTTP peer on loopback (test/harness/receiver.ts)
 * speaking the OpenAI embeddings shape (`POST /v1/embeddings`, `{ data: [{ index, embedding }] }`);
 * it is not OpenAI. What docs/retrieval.md ("Chunks") allows: the vectors of the call in flight are
 * lost and embedded again by the next process; a pending entry is removed only in the transaction
 * that made its chunks, so none is lost; chunks are one per row hash and corpus, so none is doubled.
 */

const H = { 'X-Tenant-ID': '1', 'content-type': 'application/json' };
const DIMS = 8;
const ROWS = 300;

/** A well-formed answer to an embeddings request: one vector per input, in order. */
function embeddings(received: Received): Behaviour {
  const { input } = JSON.parse(received.body) as { input: string[] };
  const data = input.map((text, index) => ({ object: 'embedding', index, embedding: Array.from({ length: DIMS }, (_v, j) => (text.charCodeAt(j % text.length) % 7) + (j === 0 ? 1 : 0)) }));
  return { status: 200, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ object: 'list', model: 'stand-in-embed', data, usage: { prompt_tokens: 1, total_tokens: 1 } }) };
}

let demo: DemoSource;
let model: Receiver;
/** Calls answered before this count are answered; from it on each call is held (never answered) while `holding`. */
let holding = false;
const owners: pg.Client[] = [];

beforeAll(async () => {
  demo = await startDemoSource({ port: 0, host: '127.0.0.1', rows: ROWS, log: () => undefined });
  model = await startReceiver((_path, received) => (holding ? 'hang' : embeddings(received)));
});

afterAll(async () => {
  await killAll();
  for (const owner of owners) await owner.end();
  await model?.close();
  await demo?.close();
});

function env(): Record<string, string> {
  return {
    SVC_EMBEDDING_PROVIDER: 'openai',
    SVC_EMBEDDING_BASE_URL: `${model.url}/v1`,
    SVC_EMBEDDING_MODEL: 'stand-in-embed',
    SVC_EMBEDDING_DIMENSIONS: String(DIMS),
    SVC_EMBEDDING_BATCH: '20',
    SVC_RETRIEVAL_INDEX_EVERY: '200ms',
    SVC_CONNECTORS_HEARTBEAT_EVERY: '300ms',
    SVC_CONNECTORS_RUN_STALE_AFTER: '2s',
  };
}

async function send(hub: HubProcess, path: string, body: unknown, type = 'application/json'): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(`${hub.url}${path}`, { method: 'POST', headers: { ...H, 'content-type': type }, body: typeof body === 'string' ? body : JSON.stringify(body) });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

/** Applies connector `name` (the demo partners into ext.<name with underscores>) and runs it to completion. */
async function ingest(hub: HubProcess, name: string): Promise<void> {
  const yaml = stringify({
    apiVersion: 'connectors.svc.io/v1',
    kind: 'Connector',
    metadata: { name },
    connector_type: 'rest-generic',
    spec: {
      base_url: demo.url,
      auth: { kind: 'basic', username: 'demo', password_env: 'DEMO_PASSWORD' },
      default_rate_limit: '1000/s',
      endpoints: [
        {
          id: 'partners',
          path: '/offset/partners',
          pagination: { kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit: 50, response_path: '$.data', total_path: '$.total' },
          target: { kind: 'hybrid', table: `ext.${name.replaceAll('-', '_')}`, unique_key: '$.id' },
        },
      ],
    },
  });
  expect((await send(hub, '/api/connectors/apply', yaml, 'application/yaml')).status).toBe(201);
  const runId = ((await send(hub, `/api/connectors/${name}/runs`, {})).json.runs as Array<{ id: string }>)[0]!.id;
  const run = await until(`the run of ${name}`, async () => {
    const r = (await (await fetch(`${hub.url}/api/platform/runs/${runId}`, { headers: H })).json()) as { status: string };
    return r.status !== 'Running' && r;
  }, { timeoutMs: 30_000 });
  expect(run).toMatchObject({ status: 'Completed' });
}

describe('kill -9 of the hub mid indexer pass', () => {
  it('with a model call in flight and entries pending: after restart every row has one chunk with a vector, none lost, none doubled', async () => {
    const url = await createTestDatabase('fault');
    const owner = new pg.Client({ connectionString: url });
    await owner.connect();
    owners.push(owner);
    const count = async (sql: string) => Number((await owner.query(sql)).rows[0].n);

    const first = await startHubProcess('all', url, env());
    expect((await send(first, '/api/platform/secrets', { name: 'DEMO_PASSWORD', value: 'demo-password' })).status).toBe(201);
    await ingest(first, 'crash-a');
    // Some calls answered (vectors stored), then the model holds the next one: the pass stays in it.
    await until('vectors of a first call to be stored', async () => (await count(`select count(*) as n from retrieval.chunks where corpus = 'crash-a' and embedding is not null`)) > 0, { timeoutMs: 30_000 });
    holding = true;
    const calls = model.received.length;
    await model.waitFor(calls + 1, '/v1/embeddings', 20_000);
    // A second connector's run meanwhile: its entries wait behind the pass held in the model call.
    await ingest(first, 'crash-b');

    await first.crash();
    const atKill = {
      pending: await count('select count(*) as n from retrieval.pending'),
      chunks: await count('select count(*) as n from retrieval.chunks where row_hash is not null'),
      embedded: await count('select count(*) as n from retrieval.chunks where row_hash is not null and embedding is not null'),
    };
    expect(atKill.pending).toBeGreaterThan(0); // crash-b's entries were not indexed yet
    expect(atKill.embedded).toBeGreaterThan(0);
    expect(atKill.embedded).toBeLessThan(atKill.chunks); // mid embedding: the call in flight had stored nothing

    holding = false;
    const second = await startHubProcess('all', url, env());
    await until(
      'every entry indexed and every chunk embedded',
      async () =>
        (await count('select count(*) as n from retrieval.pending')) === 0 &&
        (await count('select count(*) as n from retrieval.chunks where row_hash is not null and embedding is null')) === 0 &&
        (await count('select count(*) as n from retrieval.chunks where row_hash is not null')) === 2 * ROWS,
      { timeoutMs: 40_000, detail: () => second.output().slice(-2000) },
    );
    // Every row of each table has exactly one chunk in its connector's corpus, with a vector.
    for (const [corpus, table] of [
      ['crash-a', 'ext_t1.crash_a'],
      ['crash-b', 'ext_t1.crash_b'],
    ] as const) {
      const { rows } = await owner.query(
        `select count(*)::int as rows, count(c.id)::int as chunked, count(c.embedding)::int as embedded,
                (select count(*)::int from retrieval.chunks where corpus = $1) as chunks,
                (select count(distinct row_hash)::int from retrieval.chunks where corpus = $1) as hashes
           from ${table} r left join retrieval.chunks c on c.tenant_id = r.tenant_id and c.corpus = $1 and c.row_hash = r.row_hash`,
        [corpus],
      );
      expect(rows[0]).toEqual({ rows: ROWS, chunked: ROWS, embedded: ROWS, chunks: ROWS, hashes: ROWS });
    }
    expect(await count(`select count(*) as n from retrieval.chunks where embed_attempts > 0`)).toBe(0);
    // Searchable: a search answers from the stored vectors, each row at most once.
    const search = await send(second, '/api/platform/rag/search', { query: 'a partner', topK: 50 });
    expect(search.status).toBe(200);
    // (The platform corpus, chunks with a key and no row hash, is searched with the tenant's own.)
    const hits = (search.json.results as Array<{ rowHash: string; metadata: { corpus: string; key?: string } }>).map((r) => `${r.metadata.corpus}/${r.rowHash || r.metadata.key}`);
    expect(hits.length).toBe(50);
    expect(hits.filter((h, i) => hits.indexOf(h) !== i)).toEqual([]);
    await second.stop();
  }, 120_000);
});
