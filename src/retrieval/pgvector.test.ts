import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { ConfigError } from '../config/config.js';
import { Database } from '../db/database.js';
import { migrate } from '../db/migrations.js';
import { roleUrl } from '../db/roles.js';
import { PortUnavailable } from '../errors.js';
import { createTestDatabase, TEST_ROLES } from '../../test/harness/database.js';
import { type PgvectorServer, startPgvectorServer } from '../../test/harness/pgvector.js';
import { captureLogs } from '../../test/harness/log-capture.js';
import { indexAll } from '../../test/harness/retrieval.js';
import { type EmbeddingPort, modelName } from './embedding/port.js';
import { embedPending } from './indexer.js';
import { findPgvector, hnswIndexName, preparePgvector, searchStatement } from './pgvector.js';
import { createRetrievalServices, type RetrievalServices } from './services.js';
import { decodeVector, encodeVector } from './vectors-codec.js';
import { bruteForce, clusteredUnitVectors, normalise, recall, seeded } from './vectors/testing.js';

/**
 * The pgvector search path against real PostgreSQL and pgvector code: PGlite with its pgvector
 * build behind its socket server (test/harness/pgvector.ts; no pgvector package exists here for
 * the embedded server). The hub's own migrations, the owner's preparation, the indexer's writes
 * and the services' search run on it; answers are checked against a brute-force scan of the
 * stored vectors, and row-level security on the search statement is checked under the
 * application role. The in-process path is what the embedded server (no extension) gets: checked
 * at the end.
 */

const D = 32;
const CHUNKS = 1200;
const QUERIES = 40;
const vectors = clusteredUnitVectors(CHUNKS + QUERIES + 100, D, 12, 1, seeded(7));

/** A scripted embedding port (a stand-in for a model): `chunk i` and `query q` have fixed vectors. */
function port(model = 'scripted'): EmbeddingPort & { calls: number } {
  return {
    provider: 'test',
    model,
    dimensions: D,
    calls: 0,
    async embed(texts) {
      this.calls++;
      return texts.map((t) => {
        const m = /^(chunk|query|other) (\d+)$/.exec(t);
        if (!m) throw new Error(`no vector for ${t}`);
        const offset = m[1] === 'chunk' ? 0 : m[1] === 'query' ? CHUNKS : CHUNKS + QUERIES;
        return vectors[offset + Number(m[2])]!;
      });
    },
  };
}

let server: PgvectorServer;
let owner: pg.Client;
let db: Database;

function services(mode: 'auto' | 'memory' | 'pgvector', embedding: EmbeddingPort, database = db, passBudgetMs?: number): RetrievalServices {
  return createRetrievalServices({
    passBudgetMs,
    db: database,
    embedding,
    chat: undefined,
    statementTimeoutMs: 5000,
    platformDocuments: () => [],
    memoryBudgetBytes: 64 * 1024 * 1024,
    embedBatch: 100,
    vectorSearch: mode,
  });
}

/** Chunk i: tenant 1 (i < 1000, corpus crm tagged sales for even i, ledger tagged finance for odd) or tenant 2 (crm, sales). */
async function insertChunks(): Promise<void> {
  await owner.query(
    `insert into retrieval.chunks (tenant_id, corpus, scopes, row_hash, table_name, external_id, content)
     select case when i < 1000 then 1 else 2 end,
            case when i < 1000 and i % 2 = 1 then 'ledger' else 'crm' end,
            case when i < 1000 and i % 2 = 1 then '{finance}'::text[] else '{sales}'::text[] end,
            md5(i::text), 'ext.rows', i::text, 'chunk ' || i
       from generate_series(0, $1 - 1) as i order by i`,
    [CHUNKS],
  );
}

/** The exact answer over what the database stores for tenant 1 (or 2), by chunk content number. */
async function exact(tenant: number, q: number, topK: number, admit: (i: number) => boolean = () => true): Promise<number[]> {
  const { rows } = await owner.query<{ n: number; embedding: Buffer }>(
    `select external_id::int as n, embedding from retrieval.chunks where tenant_id = $1 and embedding is not null`,
    [tenant],
  );
  return bruteForce(rows.map((r) => ({ id: r.n, vector: decodeVector(r.embedding) })), vectors[CHUNKS + q]!, topK, admit).map((h) => h.id);
}

beforeAll(async () => {
  server = await startPgvectorServer();
  await migrate(server.url, TEST_ROLES);
  owner = new pg.Client({ connectionString: server.url });
  await owner.connect();
  await owner.query(`insert into core.tenants (id, code, name) values (1, 'one', 'One'), (2, 'two', 'Two')`);
  db = new Database({ appUrl: roleUrl(server.url, TEST_ROLES.app), workerUrl: roleUrl(server.url, TEST_ROLES.worker), poolSize: 2 });
}, 120_000);

afterAll(async () => {
  await db?.close();
  await owner?.end();
  await server?.close();
});

describe('preparation by the owner', () => {
  it('creates the extension, the vec column and the HNSW index for the port\'s length; a second start changes nothing', async () => {
    expect(await preparePgvector(owner, 'auto', D)).toEqual({ version: expect.stringMatching(/^0\.([89]|\d\d)\./) });
    // A second start (every pod's, in a rolling update) asks for no lock on retrieval.chunks that holds up its
    // reads or writes: no `alter table` (was: `add column if not exists`, the table taken exclusively each
    // time, waiting without bound for any transaction on it), no trigger created, no plain index build or drop.
    const sent: string[] = [];
    const query = owner.query.bind(owner);
    owner.query = ((text: unknown, ...rest: unknown[]) => {
      sent.push(typeof text === 'string' ? text : String((text as { text?: string }).text));
      return (query as (...a: unknown[]) => unknown)(text, ...rest);
    }) as typeof owner.query;
    try {
      expect(await preparePgvector(owner, 'auto', D)).toEqual({ version: expect.any(String) });
    } finally {
      owner.query = query;
    }
    expect(sent.filter((q) => /\b(alter\s+table|create\s+trigger|(create|drop)\s+index\s+(?!concurrently))/i.test(q))).toEqual([]);
    expect(sent.filter((q) => /\bindex\s+concurrently\b/i.test(q))).toHaveLength(2);
    const { rows } = await owner.query(`select indexname, indexdef from pg_indexes where schemaname = 'retrieval' and indexname like 'chunks_vec%' order by indexname`);
    expect(rows).toEqual([
      { indexname: hnswIndexName(D), indexdef: expect.stringMatching(/USING hnsw \(\(\(vec\)::vector\(32\)\) vector_cosine_ops\)/) },
      { indexname: 'chunks_vec_missing', indexdef: expect.stringMatching(/WHERE \(\(vec IS NULL\) AND \(embedding IS NOT NULL\)\)/) },
    ]);
    expect(await findPgvector(db, D)).toEqual({ version: expect.any(String), schema: 'public', indexed: true });
    expect(await findPgvector(db, 8)).toEqual({ version: expect.any(String), schema: 'public', indexed: false });
  });

  it('memory mode and a hub without an embedding port prepare nothing', async () => {
    expect(await preparePgvector(owner, 'memory', D)).toEqual({ version: undefined, reason: 'svc.retrieval.vector-search is memory' });
    expect(await preparePgvector(owner, 'auto', undefined)).toEqual({ version: undefined, reason: 'no embedding port' });
  });
});

describe('indexing and search', () => {
  let pgv: RetrievalServices;

  beforeAll(async () => {
    await insertChunks();
    // The first 500 chunks are embedded before the hub used pgvector: no `vec` yet.
    expect(await embedPending(db, port(), 500)).toBe(500);
    expect((await owner.query('select count(embedding)::int as e, count(vec)::int as v from retrieval.chunks')).rows[0]).toEqual({ e: 500, v: 0 });
    pgv = services('auto', port());
    await indexAll(pgv);
  }, 120_000);

  it('every chunk gets its vector in vec too, equal to the float32 record (the early ones filled from it)', async () => {
    const { rows } = await owner.query<{ embedding: Buffer; vec: string; model: string }>('select embedding, vec::text as vec, model from retrieval.chunks');
    expect(rows).toHaveLength(CHUNKS);
    for (const r of rows) {
      expect(r.model).toBe(modelName(port()));
      expect(Float32Array.from(JSON.parse(r.vec) as number[])).toEqual(decodeVector(r.embedding));
    }
  });

  it('a pass that copies stored vectors into vec says how many: a pass whose time runs out copying is not taken for one with nothing left', async () => {
    await owner.query('update retrieval.chunks set vec = null where id in (select id from retrieval.chunks order by id limit 7)');
    // indexAll (and the hub's clock) stop at a pass that did nothing: on a busy machine the time
    // of a pass could go on copying, and the pass answered expanded 0, embedded 0 with chunks left.
    expect(await pgv.indexPass()).toEqual({ expanded: 0, filled: 7, embedded: 0, more: false });
    expect(await pgv.indexPass()).toEqual({ expanded: 0, filled: 0, embedded: 0, more: false });
    // A pass out of time before it copied or embedded anything (a busy machine: the model check,
    // the look for pgvector and a first batch can take the 2 s) says it may have left work.
    await owner.query('update retrieval.chunks set vec = null where id in (select id from retrieval.chunks order by id limit 3)');
    const late = services('auto', port(), db, 0);
    expect(await late.indexPass()).toEqual({ expanded: 0, filled: 0, embedded: 0, more: true });
    await late.close();
    expect(await pgv.indexPass()).toMatchObject({ filled: 3 });
  });

  it('a first start with pgvector copies the stored vectors before it builds the index', async () => {
    await owner.query(`drop index retrieval.${hnswIndexName(D)}`);
    await owner.query('update retrieval.chunks set vec = null');
    await preparePgvector(owner, 'auto', D);
    const { rows } = await owner.query<{ embedding: Buffer; vec: string }>('select embedding, vec::text as vec from retrieval.chunks');
    expect(rows).toHaveLength(CHUNKS);
    for (const r of rows) expect(Float32Array.from(JSON.parse(r.vec) as number[])).toEqual(decodeVector(r.embedding));
    expect(await findPgvector(db, D)).toMatchObject({ indexed: true });
  });

  it('an index left invalid by a build cut short (the hub stopped during it) is dropped and built again by the next start, the vectors copied first', async () => {
    // What a concurrent build cut short leaves: the index, marked invalid (never used by the planner).
    const invalidate = (name: string) => owner.query(`update pg_index set indisvalid = false where indexrelid = ('retrieval.' || $1)::regclass`, [name]);
    const valid = async () =>
      (await owner.query(`select c.relname as name, i.indisvalid as valid from pg_index i join pg_class c on c.oid = i.indexrelid where c.relname like 'chunks_vec%' order by 1`)).rows;
    await invalidate(hnswIndexName(D));
    await invalidate('chunks_vec_missing');
    await owner.query('update retrieval.chunks set vec = null where id in (select id from retrieval.chunks order by id limit 5)');
    const logs = captureLogs('warn');
    try {
      await preparePgvector(owner, 'auto', D);
      // Was: `create index if not exists` found the names and kept both invalid, for good: every search read every chunk.
      expect(await valid()).toEqual([
        { name: hnswIndexName(D), valid: true },
        { name: 'chunks_vec_missing', valid: true },
      ]);
      expect(logs.lines().map((l) => l.msg)).toEqual([
        'pgvector: index retrieval.chunks_vec_missing was left invalid by a build cut short; dropped and built again',
        `pgvector: index retrieval.${hnswIndexName(D)} was left invalid by a build cut short; dropped and built again`,
      ]);
    } finally {
      logs.restore();
    }
    expect((await owner.query('select count(*)::int as n from retrieval.chunks where vec is null')).rows[0].n).toBe(0);
  });

  it('the planner answers the search statement from the HNSW index', async () => {
    const { text, values } = searchStatement('public', { tenantId: 1, model: modelName(port()), query: vectors[CHUNKS]!, topK: 10, filter: {} });
    await owner.query('analyze retrieval.chunks');
    await owner.query('begin');
    try {
      const plan = (await owner.query<{ 'QUERY PLAN': string }>(`explain ${text}`, values)).rows.map((r) => r['QUERY PLAN']).join('\n');
      expect(plan).toContain(`Index Scan using ${hnswIndexName(D)}`);
      // The indexer's look for chunks still without `vec` (every pass) reads the partial index, not every chunk.
      const fill = (await owner.query<{ 'QUERY PLAN': string }>(
        `explain select id, embedding from retrieval.chunks where vec is null and embedding is not null and model = $1 order by id limit 500 for update skip locked`,
        ['x'],
      )).rows.map((r) => r['QUERY PLAN']).join('\n');
      expect(fill).toContain('chunks_vec_missing');
    } finally {
      await owner.query('rollback');
    }
  });

  it('answers the nearest chunks of the tenant, as exact search does (recall@10 ≥ 0.95 over 40 queries)', async () => {
    let sum = 0;
    for (let q = 0; q < QUERIES; q++) {
      const hits = await pgv.search(1, { query: `query ${q}`, topK: 10 });
      const found = hits.map((h) => Number(h.metadata.key));
      expect(found.every((n) => n < 1000)).toBe(true);
      expect(hits.map((h) => h.similarity)).toEqual([...hits.map((h) => h.similarity)].sort((a, b) => b - a));
      sum += recall(found.map((id) => ({ id })), (await exact(1, q, 10)).map((id) => ({ id })));
    }
    expect(sum / QUERIES).toBeGreaterThanOrEqual(0.95);
  });

  it('applies the corpus and scope filters before ranking: topK matching chunks, however they rank among all', async () => {
    for (let q = 0; q < 10; q++) {
      const ledger = (await pgv.search(1, { query: `query ${q}`, topK: 10, corpus: 'ledger' })).map((h) => Number(h.metadata.key));
      expect(ledger).toHaveLength(10);
      expect(ledger.every((n) => n % 2 === 1)).toBe(true);
      expect(recall(ledger.map((id) => ({ id })), (await exact(1, q, 10, (n) => n % 2 === 1)).map((id) => ({ id })))).toBeGreaterThanOrEqual(0.9);
      const sales = (await pgv.search(1, { query: `query ${q}`, topK: 10, scopes: ['sales'] })).map((h) => Number(h.metadata.key));
      expect(sales).toHaveLength(10);
      expect(sales.every((n) => n % 2 === 0)).toBe(true);
    }
    expect(await pgv.search(1, { query: 'query 0', topK: 10, scopes: [] })).toEqual([]);
    expect(await pgv.search(1, { query: 'query 0', topK: 10, scopes: ['nobody'] })).toEqual([]);
  });

  it('a tenant finds only its own chunks', async () => {
    const hits = await pgv.search(2, { query: 'query 3', topK: 50 });
    expect(hits).toHaveLength(50);
    expect(hits.every((h) => Number(h.metadata.key) >= 1000)).toBe(true);
  });

  it('the statement holds under row-level security as the application role: another tenant\'s chunks are not read', async () => {
    const { text, values } = searchStatement('public', { tenantId: 2, model: modelName(port()), query: vectors[CHUNKS]!, topK: 10, filter: {} });
    await owner.query('begin');
    try {
      await owner.query(`set local role ${TEST_ROLES.app}`);
      await owner.query(`select set_config('svc.tenant_id', '1', true)`);
      expect((await owner.query(text, values)).rows).toEqual([]);
      await owner.query(`select set_config('svc.tenant_id', '2', true)`);
      expect((await owner.query(text, values)).rows).toHaveLength(10);
    } finally {
      await owner.query('rollback');
    }
  });

  it('agrees with the in-process index over the same chunks', async () => {
    const memory = services('memory', port());
    let agree = 0;
    for (let q = 0; q < 10; q++) {
      const a = (await pgv.search(1, { query: `query ${q}`, topK: 5 })).map((h) => h.rowHash);
      const b = (await memory.search(1, { query: `query ${q}`, topK: 5 })).map((h) => h.rowHash);
      if (a[0] === b[0]) agree++;
      expect(b.filter((h) => a.includes(h)).length).toBeGreaterThanOrEqual(4);
    }
    expect(agree).toBeGreaterThanOrEqual(9);
  });

  it('a chunk embedded again by a process searching in process: the index never answers its earlier vector', async () => {
    // Chunk 4's text changes (the indexer's upsert clears its vector and model, not `vec`: the column is pgvector's)…
    const changed = `update retrieval.chunks set content = $1, embedding = null, model = null, embedded_seq = null, embedded_at = null
                      where tenant_id = 1 and external_id = '4'`;
    await owner.query(changed, ['other 0']);
    // …and a process searching in process (`memory`: no `vec` written) embeds it first.
    expect(await embedPending(db, port(), 100)).toBe(1);
    const nearest = async () => (await pgv.search(1, { query: 'chunk 4', topK: 1 }))[0]!;
    // Its earlier text's vector no longer answers for it: the search finds its new text's nearest, or nothing of it.
    expect(await nearest()).not.toMatchObject({ metadata: { key: '4' }, similarity: 1 });
    await indexAll(pgv);
    const { rows } = await owner.query<{ embedding: Buffer; vec: string }>(`select embedding, vec::text as vec from retrieval.chunks where tenant_id = 1 and external_id = '4'`);
    expect(Float32Array.from(JSON.parse(rows[0]!.vec) as number[])).toEqual(decodeVector(rows[0]!.embedding));
    expect((await pgv.search(1, { query: 'other 0', topK: 1 }))[0]).toMatchObject({ metadata: { key: '4' }, similarity: 1 });
    // Back as it was, for the tests after this one.
    await owner.query(changed, ['chunk 4']);
    await indexAll(pgv);
    expect(await nearest()).toMatchObject({ metadata: { key: '4' }, similarity: 1 });
  });

  it('a new model\'s vectors replace the old: chunks leave the search until embedded again, then come back', async () => {
    const other = port('scripted-2');
    const next = services('auto', other);
    // forgetOtherModels runs in the first pass; look before embedding by checking the search of a fresh service first.
    const before = await next.search(1, { query: 'query 1', topK: 10 });
    expect(before).toEqual([]); // no chunk carries the new model yet
    await indexAll(next);
    expect((await owner.query(`select count(*)::int as n from retrieval.chunks where model = $1 and vec is not null`, [modelName(other)])).rows[0].n).toBe(CHUNKS);
    expect(await next.search(1, { query: 'query 1', topK: 10 })).toHaveLength(10);
  });

  it('a model of another length: the owner drops the old index and the old vectors, and indexes the new length', async () => {
    await preparePgvector(owner, 'auto', 16);
    const { rows } = await owner.query(`select indexname from pg_indexes where schemaname = 'retrieval' and indexname like 'chunks_vec\\_hnsw%'`);
    expect(rows).toEqual([{ indexname: hnswIndexName(16) }]);
    expect((await owner.query('select count(vec)::int as n from retrieval.chunks')).rows[0].n).toBe(0);
  });

  it('the same model name asked for another length: its old vectors are embedded again, and searched in the new index', async () => {
    // preparePgvector(…, 16) above: the index of length 16 is there; the chunks still hold 32-value vectors of scripted-2.
    const shorter: EmbeddingPort = {
      provider: 'test',
      model: 'scripted-2',
      dimensions: 16,
      async embed(texts) {
        return (await port('scripted-2').embed(texts)).map((v) => normalise(v.slice(0, 16)));
      },
    };
    const next = services('auto', shorter);
    await indexAll(next);
    const { rows } = await owner.query(`select count(*)::int as n, min(octet_length(embedding))::int as bytes, count(vec)::int as vecs from retrieval.chunks where model = 'test:scripted-2'`);
    expect(rows[0]).toEqual({ n: CHUNKS, bytes: 64, vecs: CHUNKS });
    const hits = await next.search(1, { query: 'query 2', topK: 10 });
    expect(hits).toHaveLength(10);
    await preparePgvector(owner, 'auto', D); // back, for the suites after this one
  });
});

describe('an owner that may not create the extension', () => {
  it('auto stays in process with the reason; pgvector refuses to start with it', async () => {
    const fresh = await startPgvectorServer();
    const client = new pg.Client({ connectionString: fresh.url });
    try {
      await migrate(fresh.url, TEST_ROLES);
      await client.connect();
      // pgvector is not a trusted extension: a role without superuser cannot create it.
      await client.query(`set role ${TEST_ROLES.worker}`);
      const refused = /^the extension vector could not be created: permission denied to create extension "vector"/;
      expect(await preparePgvector(client, 'auto', D)).toEqual({ version: undefined, reason: expect.stringMatching(refused) });
      await expect(preparePgvector(client, 'pgvector', D)).rejects.toThrow(/^svc\.retrieval\.vector-search \(SVC_RETRIEVAL_VECTOR_SEARCH\): is pgvector, but the extension vector could not be created/);
      await client.query('reset role');
      expect((await client.query(`select count(*)::int as n from pg_extension where extname = 'vector'`)).rows[0].n).toBe(0);
    } finally {
      await client.end();
      await fresh.close();
    }
  }, 60_000);
});

describe('without pgvector (the embedded server)', () => {
  let ownerUrl: string;
  let plain: Database;

  beforeAll(async () => {
    ownerUrl = await createTestDatabase('nopgv');
    await migrate(ownerUrl, TEST_ROLES);
    plain = new Database({ appUrl: roleUrl(ownerUrl, TEST_ROLES.app), workerUrl: roleUrl(ownerUrl, TEST_ROLES.worker), poolSize: 2 });
  }, 60_000);

  afterAll(async () => {
    await plain?.close();
  });

  it('auto falls back to the in-process index; pgvector mode refuses to start, and answers 503 if it started', async () => {
    const client = new pg.Client({ connectionString: ownerUrl });
    await client.connect();
    try {
      expect(await preparePgvector(client, 'auto', D)).toEqual({ version: undefined, reason: 'the database has no pgvector extension (vector)' });
      // A configuration error, said as every one is (svc-hub prints it after `svc-hub: configuration error: `, with no stack).
      const refusal = await preparePgvector(client, 'pgvector', D).catch((e: unknown) => e);
      expect(refusal).toBeInstanceOf(ConfigError);
      expect((refusal as ConfigError).message).toBe('svc.retrieval.vector-search (SVC_RETRIEVAL_VECTOR_SEARCH): is pgvector, but the database has no pgvector extension (vector)');
    } finally {
      await client.end();
    }
    expect(await findPgvector(plain, D)).toBeUndefined();
    const refused = await services('pgvector', port(), plain).search(1, { query: 'query 0', topK: 3 }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(PortUnavailable);
    expect((refused as PortUnavailable).render().status).toBe(503);
    expect(await services('pgvector', port(), plain).status(1)).toMatchObject({ provider: 'test', vectorSearch: 'none' });
    expect(await services('auto', port(), plain).status(1)).toMatchObject({ provider: 'test', vectorSearch: 'memory' });
    expect(await services('auto', port(), plain).search(1, { query: 'query 0', topK: 3 })).toEqual([]);
  });

  it('vectors of another length under the model\'s name (its dimensions changed, not yet cleared by an indexer pass): search passes over them', async () => {
    // An api-role process runs no indexer pass; before, loading the tenant failed on the first such vector (a 500 at every search).
    const client = new pg.Client({ connectionString: ownerUrl });
    await client.connect();
    try {
      await client.query(`insert into core.tenants (id, code, name) values (1, 'one', 'One') on conflict do nothing`);
      await client.query(
        `insert into retrieval.chunks (tenant_id, corpus, row_hash, table_name, external_id, content, embedding, model, embedded_seq, embedded_at)
         values (1, 'crm', 'short', 'ext.rows', 'short', 'chunk 1', $1, $3, nextval('retrieval.embedded_seq'), now()),
                (1, 'crm', 'whole', 'ext.rows', 'whole', 'chunk 0', $2, $3, nextval('retrieval.embedded_seq'), now())`,
        [encodeVector(normalise(vectors[1]!.slice(0, 16))), encodeVector(vectors[0]!), modelName(port())],
      );
      const hits = await services('memory', port(), plain).search(1, { query: 'chunk 0', topK: 3 });
      expect(hits.map((h) => [h.rowHash, h.similarity])).toEqual([['whole', 1]]);
    } finally {
      await client.query(`delete from retrieval.chunks where tenant_id = 1 and row_hash in ('short', 'whole')`);
      await client.end();
    }
  });
});
