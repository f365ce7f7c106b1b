import { expect } from '@jest/globals';
import type pg from 'pg';
import { stringify } from 'yaml';
import type { Behaviour, Received } from '../../test/harness/receiver.js';
import { until } from '../../test/harness/until.js';
import type { HubProcess } from './processes.js';

/**
 * The retrieval indexer's faults: the embedding model is a stand-in, the repo's scriptable HTTP peer on
 * loopback (test/harness/receiver.ts) speaking the OpenAI embeddings shape (`POST /v1/embeddings`,
 * `{ data: [{ index, embedding }] }`); it is not OpenAI. Rows come from the demo source through connector runs.
 */

export const DIMS = 8;
const H = { 'X-Tenant-ID': '1', 'content-type': 'application/json' };

/** A well-formed answer to an embeddings request: one vector per input, in order. */
export function embeddingsAnswer(received: Received, delayMs?: number): Behaviour {
  const { input } = JSON.parse(received.body) as { input: string[] };
  const data = input.map((text, index) => ({ object: 'embedding', index, embedding: Array.from({ length: DIMS }, (_v, j) => (text.charCodeAt(j % text.length) % 7) + (j === 0 ? 1 : 0)) }));
  return { status: 200, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ object: 'list', model: 'stand-in-embed', data, usage: { prompt_tokens: 1, total_tokens: 1 } }), delayMs };
}

/** A hub's environment for the stand-in at `modelUrl`: `batch` chunks a call, an indexer pass every 200 ms. */
export function indexerEnv(modelUrl: string, batch: number): Record<string, string> {
  return {
    SVC_EMBEDDING_PROVIDER: 'openai',
    SVC_EMBEDDING_BASE_URL: `${modelUrl}/v1`,
    SVC_EMBEDDING_MODEL: 'stand-in-embed',
    SVC_EMBEDDING_DIMENSIONS: String(DIMS),
    SVC_EMBEDDING_BATCH: String(batch),
    SVC_RETRIEVAL_INDEX_EVERY: '200ms',
    // A claim of the killed process lapses after this long, and its chunks are embedded again (docs/retrieval.md).
    SVC_RETRIEVAL_EMBED_CLAIM: '3s',
    SVC_CONNECTORS_HEARTBEAT_EVERY: '300ms',
    SVC_CONNECTORS_RUN_STALE_AFTER: '2s',
  };
}

export async function post(hub: HubProcess, path: string, body: unknown, type = 'application/json'): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(`${hub.url}${path}`, { method: 'POST', headers: { ...H, 'content-type': type }, body: typeof body === 'string' ? body : JSON.stringify(body) });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

/** Applies connector `name` (the demo partners into ext.<name with underscores>) and runs it to completion (the DEMO_PASSWORD secret stored before). */
export async function ingest(hub: HubProcess, demoUrl: string, name: string): Promise<void> {
  const yaml = stringify({
    apiVersion: 'connectors.svc.io/v1',
    kind: 'Connector',
    metadata: { name },
    connector_type: 'rest-generic',
    spec: {
      base_url: demoUrl,
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
  expect((await post(hub, '/api/connectors/apply', yaml, 'application/yaml')).status).toBe(201);
  const runId = ((await post(hub, `/api/connectors/${name}/runs`, {})).json.runs as Array<{ id: string }>)[0]!.id;
  const run = await until(`the run of ${name}`, async () => {
    const r = (await (await fetch(`${hub.url}/api/platform/runs/${runId}`, { headers: H })).json()) as { status: string };
    return r.status !== 'Running' && r;
  }, { timeoutMs: 30_000 });
  expect(run).toMatchObject({ status: 'Completed' });
}

export async function count(owner: pg.Client, sql: string): Promise<number> {
  return Number((await owner.query(sql)).rows[0].n);
}

/** Waits until no entry is pending and `total` row chunks all have a vector. */
export async function indexed(owner: pg.Client, total: number, detail: () => string): Promise<void> {
  await until(
    'every entry indexed and every chunk embedded',
    async () =>
      (await count(owner, 'select count(*) as n from retrieval.pending')) === 0 &&
      (await count(owner, 'select count(*) as n from retrieval.chunks where row_hash is not null and embedding is null')) === 0 &&
      (await count(owner, 'select count(*) as n from retrieval.chunks where row_hash is not null')) === total,
    { timeoutMs: 40_000, detail },
  );
}

/** Every row of each connector's table has exactly one chunk in its corpus, with a vector; none set aside. */
export async function oneChunkEachRow(owner: pg.Client, connectors: string[], rows: number): Promise<void> {
  for (const corpus of connectors) {
    const { rows: got } = await owner.query(
      `select count(*)::int as rows, count(c.id)::int as chunked, count(c.embedding)::int as embedded,
              (select count(*)::int from retrieval.chunks where corpus = $1) as chunks,
              (select count(distinct row_hash)::int from retrieval.chunks where corpus = $1) as hashes
         from ext_t1.${corpus.replaceAll('-', '_')} r left join retrieval.chunks c on c.tenant_id = r.tenant_id and c.corpus = $1 and c.row_hash = r.row_hash`,
      [corpus],
    );
    expect(got[0]).toEqual({ rows, chunked: rows, embedded: rows, chunks: rows, hashes: rows });
  }
  expect(await count(owner, 'select count(*) as n from retrieval.chunks where embed_attempts > 0')).toBe(0);
}
