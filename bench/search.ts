/**
 * The vector search benchmark: top-10 cosine search over one tenant of 10,000 and 100,000 chunks of
 * 512 dimensions, on random unit vectors (no structure: the worst case for any approximate index)
 * and on clustered unit vectors (topics as directions, as sentence embeddings are), with the
 * in-process index of src/retrieval/vectors, beside the exact-scan ceiling measured in the same run:
 *
 * - `js exact`: a plain JavaScript scan over one contiguous Float32Array (dot product unrolled by
 *   four, a bounded heap for the top 10). Its answers are the reference every recall is computed
 *   against (ties aside, it is exact).
 * - `simd exact`: the index's float32 scan (WebAssembly SIMD kernel), every row scored.
 * - `int8 + re-rank`: the index's int8 scan, the best 64 candidates re-ranked on the float rows.
 * - `index`: what `search()` does by default at that size (exact below 20,000 rows, int8 above).
 * - `index, filter ≈30%` and `≈1%`: the same with a corpus/scope filter, against the exact answer
 *   over the matching rows only (filters apply before ranking).
 * - `pgvector hnsw (PGlite, WebAssembly)`, `pgvector, filter ≈30%` and `pgvector, ef_search 400`
 *   (hnsw.ef_search 100, the hub's default, then 400; 10,000 rows by default,
 *   SEARCH_PGVECTOR_SIZES): the search statement of src/retrieval/pgvector.ts through its HNSW index,
 *   on PGlite's WebAssembly build of PostgreSQL and pgvector; recall is the graph's, times are
 *   WebAssembly's (no native pgvector server can be installed here).
 *
 * p50 / p99 latency per query (ms) and recall@10 (mean and worst query). Prints tables and writes
 * bench/results/search.json.
 *
 *   npx tsx bench/search.ts
 *   SEARCH_SIZES=10000 SEARCH_QUERIES=50 npx tsx bench/search.ts   # a quick look
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { generatePartners } from '../src/demo-source/data.js';
import { rowChunkText } from '../src/retrieval/content.js';
import { LocalEmbedding } from '../src/retrieval/embedding/local.js';
import { TenantVectors, type VectorFilter } from '../src/retrieval/vectors/tenant-vectors.js';
import { gaussian, normalise, randomUnitVectors, seeded } from '../src/retrieval/vectors/testing.js';
import { TopK } from '../src/retrieval/vectors/top-k.js';
import pg from 'pg';
import { Database } from '../src/db/database.js';
import { migrate } from '../src/db/migrations.js';
import { roleUrl } from '../src/db/roles.js';
import { findPgvector, hnswIndexName, PgvectorSearch, preparePgvector, vectorLiteral } from '../src/retrieval/pgvector.js';
import { startPgvectorServer } from '../test/harness/pgvector.js';
import { machineFacts, probeMachine } from './support/measure.js';

const DIMS = 512;
const SIZES = (process.env.SEARCH_SIZES ?? '10000,100000').split(',').map(Number);
const QUERIES = Number(process.env.SEARCH_QUERIES ?? 200);
/** Sizes also measured on the pgvector path (PGlite: its HNSW build of 100,000 × 512 takes minutes). */
const PGVECTOR_SIZES = (process.env.SEARCH_PGVECTOR_SIZES ?? '10000').split(',').filter(Boolean).map(Number);
const K = 10;
const EMBED_TEXTS = Number(process.env.SEARCH_EMBED_TEXTS ?? 1000);
const RESULTS = fileURLToPath(new URL('./results/', import.meta.url));
const CORPORA = ['tickets', 'wiki', 'mail'];

interface Chunk {
  id: number;
  vector: Float32Array;
  corpus: string;
  scopes: string[];
}

interface PathFigures {
  p50: number;
  p99: number;
  mean: number;
  recallMean: number;
  recallMin: number;
}

const log = (line: string) => process.stdout.write(`${line}\n`);
const round = (value: number, digits = 2) => Math.round(value * 10 ** digits) / 10 ** digits;

/** Clustered unit vectors and queries drawn from the same topics (centre + noise, normalised). */
function clustered(count: number, queries: number, random: () => number): { data: Float32Array[]; queries: Float32Array[] } {
  const centres = randomUnitVectors(Math.max(10, Math.round(count / 500)), DIMS, random);
  const sigma = 1 / Math.sqrt(DIMS);
  const around = () => {
    const centre = centres[Math.floor(random() * centres.length)]!;
    return normalise(Float32Array.from(centre, (c) => c + sigma * gaussian(random)));
  };
  return { data: Array.from({ length: count }, around), queries: Array.from({ length: queries }, around) };
}

/** Scopes: ≈30% of chunks carry `common`, ≈1% carry `rare`. */
function chunks(vectors: Float32Array[], random: () => number): Chunk[] {
  return vectors.map((vector, i) => {
    const scopes = [`team-${i % 7}`];
    if (random() < 0.3) scopes.push('common');
    if (random() < 0.01) scopes.push('rare');
    return { id: i + 1, vector, corpus: CORPORA[i % CORPORA.length]!, scopes };
  });
}

/** The plain JavaScript exact scan: one contiguous Float32Array, unrolled by four, a heap for the top K. */
class JsExact {
  private readonly rows: Float32Array;
  constructor(private readonly data: Chunk[]) {
    this.rows = new Float32Array(data.length * DIMS);
    for (const [i, c] of data.entries()) this.rows.set(c.vector, i * DIMS);
  }

  search(query: Float32Array, k: number, admit?: (chunk: Chunk) => boolean): number[] {
    const best = new TopK(k);
    const rows = this.rows;
    for (let r = 0, o = 0; r < this.data.length; r++, o += DIMS) {
      if (admit && !admit(this.data[r]!)) continue;
      let a0 = 0;
      let a1 = 0;
      let a2 = 0;
      let a3 = 0;
      for (let j = 0; j < DIMS; j += 4) {
        a0 += query[j]! * rows[o + j]!;
        a1 += query[j + 1]! * rows[o + j + 1]!;
        a2 += query[j + 2]! * rows[o + j + 2]!;
        a3 += query[j + 3]! * rows[o + j + 3]!;
      }
      best.push(a0 + a1 + a2 + a3, r);
    }
    return best.sorted().map(({ slot }) => this.data[slot]!.id);
  }
}

function measure(queries: Float32Array[], run: (q: Float32Array) => number[], reference: number[][] | undefined): PathFigures {
  for (const q of queries.slice(0, 5)) run(q); // warm-up (JIT, caches)
  const times: number[] = [];
  const answers: number[][] = [];
  for (const q of queries) {
    const started = performance.now();
    answers.push(run(q));
    times.push(performance.now() - started);
  }
  return figures(times, answers, reference);
}

/** `measure` for a path that answers asynchronously (a database round trip). */
async function measureAsync(queries: Float32Array[], run: (q: Float32Array) => Promise<number[]>, reference: number[][]): Promise<PathFigures> {
  for (const q of queries.slice(0, 5)) await run(q);
  const times: number[] = [];
  const answers: number[][] = [];
  for (const q of queries) {
    const started = performance.now();
    answers.push(await run(q));
    times.push(performance.now() - started);
  }
  return figures(times, answers, reference);
}

function figures(times: number[], answers: number[][], reference: number[][] | undefined): PathFigures {
  const recalls = answers.map((ids, i) => {
    const want = reference?.[i] ?? ids;
    const got = new Set(ids);
    return want.length === 0 ? 1 : want.filter((id) => got.has(id)).length / want.length;
  });
  times.sort((a, b) => a - b);
  const at = (p: number) => times[Math.min(times.length - 1, Math.floor(p * times.length))]!;
  return {
    p50: round(at(0.5)),
    p99: round(at(0.99)),
    mean: round(times.reduce((s, t) => s + t, 0) / times.length),
    recallMean: round(recalls.reduce((s, r) => s + r, 0) / recalls.length, 4),
    recallMin: round(Math.min(...recalls), 2),
  };
}

async function benchDataset(name: string, data: Chunk[], queries: Float32Array[]) {
  const started = performance.now();
  const index = new TenantVectors({ dimensions: DIMS });
  for (const c of data) index.add(c.id, c.vector, { corpus: c.corpus, scopes: c.scopes });
  const buildMs = performance.now() - started;
  const forcedInt8 = new TenantVectors({ dimensions: DIMS, quantiseFrom: 0, initialCapacity: data.length });
  for (const c of data) forcedInt8.add(c.id, c.vector, { corpus: c.corpus, scopes: c.scopes });
  const js = new JsExact(data);
  const ids = (hits: Array<{ id: number }>) => hits.map((h) => h.id);

  // The JS exact scan is the ceiling and the reference in one: measured while it answers.
  const reference: number[][] = [];
  const jsFigures = measure(queries, (q) => js.search(q, K), undefined);
  for (const q of queries) reference.push(js.search(q, K));
  const paths: Record<string, PathFigures> = {
    'js exact (ceiling, reference)': { ...jsFigures, recallMean: 1, recallMin: 1 },
    'simd exact': measure(queries, (q) => ids(index.searchExact(q, K)), reference),
    'int8 + re-rank': measure(queries, (q) => ids(forcedInt8.search(q, K)), reference),
    index: measure(queries, (q) => ids(index.search(q, K)), reference),
  };
  const filters: Array<[string, VectorFilter, (c: Chunk) => boolean]> = [
    ['index, filter ≈30%', { corpora: ['tickets', 'wiki', 'mail'], scopes: ['common'] }, (c) => c.scopes.includes('common')],
    ['index, filter ≈1%', { corpora: ['tickets', 'wiki'], scopes: ['rare'] }, (c) => c.corpus !== 'mail' && c.scopes.includes('rare')],
  ];
  const matching: Record<string, number> = {};
  const references: Record<string, number[][]> = {};
  for (const [label, filter, admit] of filters) {
    references[label] = queries.map((q) => js.search(q, K, admit));
    matching[label] = data.filter(admit).length;
    paths[label] = measure(queries, (q) => ids(index.search(q, K, filter)), references[label]);
  }
  const pgvector = PGVECTOR_SIZES.includes(data.length)
    ? await benchPgvector(data, queries, reference, references['index, filter ≈30%']!, paths)
    : undefined;
  const memory = {
    /** Rows added one by one (a streaming loader): the memory grows by half each time it fills. */
    grownMb: round(index.bytes / 1024 / 1024, 1),
    grownBytesPerRow: Math.round(index.bytes / data.length),
    /** Sized for the row count up front (a loader that answers an array). */
    exactMb: round(forcedInt8.bytes / 1024 / 1024, 1),
    exactBytesPerRow: Math.round(forcedInt8.bytes / data.length),
  };
  return { name, rows: data.length, buildSeconds: round(buildMs / 1000), memory, matchingRows: matching, paths, ...(pgvector ? { pgvector } : {}) };
}

/**
 * The pgvector path (src/retrieval/pgvector.ts) on the same chunks: the hub's migrations, the
 * owner's preparation and its search statement (through PgvectorSearch, as the API runs it), on
 * PGlite with its pgvector build (test/harness/pgvector.ts): real PostgreSQL and pgvector code, but
 * compiled to WebAssembly and single-threaded, so its times are far above a native server's; its
 * recall is the HNSW graph's own. Adds its paths to `paths`; answers what it took to load and index.
 */
async function benchPgvector(data: Chunk[], queries: Float32Array[], reference: number[][], commonReference: number[][], paths: Record<string, PathFigures>) {
  const server = await startPgvectorServer();
  const roles = { app: 'svc_app', worker: 'svc_worker', analytic: 'svc_analytic' };
  const owner = new pg.Client({ connectionString: server.url });
  const db = new Database({ appUrl: roleUrl(server.url, roles.app), workerUrl: roleUrl(server.url, roles.worker), poolSize: 2 });
  try {
    await migrate(server.url, roles);
    await owner.connect();
    await owner.query(`insert into core.tenants (id, code, name) values (1, 'bench', 'Bench')`);
    const prepared = await preparePgvector(owner, 'pgvector', DIMS);
    await owner.query(`drop index retrieval.${hnswIndexName(DIMS)}`); // built once, after the load
    let started = performance.now();
    for (let i = 0; i < data.length; i += 500) {
      const part = data.slice(i, i + 500);
      await owner.query(
        `insert into retrieval.chunks (tenant_id, corpus, scopes, key, content, model, vec)
         select 1, u.corpus, string_to_array(u.scopes, ','), u.key, u.key, 'bench', u.vec::vector
           from unnest($1::text[], $2::text[], $3::text[], $4::text[]) as u(key, corpus, scopes, vec)`,
        [part.map((c) => String(c.id)), part.map((c) => c.corpus), part.map((c) => c.scopes.join(',')), part.map((c) => vectorLiteral(c.vector))],
      );
    }
    const loadSeconds = round((performance.now() - started) / 1000);
    started = performance.now();
    await preparePgvector(owner, 'pgvector', DIMS);
    await owner.query('analyze retrieval.chunks');
    const indexSeconds = round((performance.now() - started) / 1000);
    const { rows } = await owner.query<{ id: number; key: string; n: number }>('select id, key, count(*) over ()::int as n from retrieval.chunks where tenant_id = 1');
    if (rows[0]?.n !== data.length || new Set(rows.map((r) => r.key)).size !== data.length) throw new Error(`pgvector: ${rows[0]?.n} chunks stored for ${data.length}`);
    const chunkOf = new Map(rows.map((r) => [r.id, Number(r.key)]));
    const found = await findPgvector(db, DIMS);
    if (!found?.indexed) throw new Error('pgvector: the index was not found after preparation');
    const search = new PgvectorSearch(db, 'bench', DIMS, found);
    const ids = (hits: Array<{ id: number }>) => hits.map((h) => chunkOf.get(h.id)!);
    paths['pgvector hnsw (PGlite, WebAssembly)'] = await measureAsync(queries, async (q) => ids(await search.search(1, q, K, {})), reference);
    paths['pgvector, filter ≈30%'] = await measureAsync(queries, async (q) => ids(await search.search(1, q, K, { scopes: ['common'] })), commonReference);
    const wider = new PgvectorSearch(db, 'bench', DIMS, found, 400);
    paths['pgvector, ef_search 400'] = await measureAsync(queries, async (q) => ids(await wider.search(1, q, K, {})), reference);
    return { version: prepared.version, loadSeconds, indexSeconds };
  } finally {
    await owner.end().catch(() => undefined);
    await db.close();
    await server.close();
  }
}

/**
 * The offline model's throughput on chunks as the indexer writes them (demo partner rows): how fast
 * rows become searchable after their run. The vectors are checked (one unit vector of 512 per text).
 */
async function embeddingThroughput(threads: number): Promise<{ threads: number; texts: number; seconds: number; textsPerSec: number; loadSeconds: number }> {
  const texts = generatePartners(EMBED_TEXTS).map((p) => rowChunkText('ext.partners', String(p.id), p));
  const model = new LocalEmbedding({ threads, batchSize: 64 });
  try {
    const loading = performance.now();
    await model.embed(Array.from({ length: 64 * threads }, (_v, i) => `warm up ${i}`)); // every thread's model loaded
    const loadSeconds = round((performance.now() - loading) / 1000, 2);
    const started = performance.now();
    const vectors = await model.embed(texts);
    const seconds = (performance.now() - started) / 1000;
    if (vectors.length !== texts.length || vectors.some((v) => v.length !== DIMS || Math.abs(v.reduce((s, x) => s + x * x, 0) - 1) > 1e-3)) {
      throw new Error('the local model answered something other than one unit vector per text');
    }
    return { threads, texts: texts.length, seconds: round(seconds, 2), textsPerSec: Math.round(texts.length / seconds), loadSeconds };
  } finally {
    await model.close();
  }
}

async function main(): Promise<void> {
  const benchStart = performance.now();
  const loadAtStart = loadavg().map((l) => round(l));
  await probeMachine(log);
  log(`search benchmark: ${SIZES.join(', ')} chunks × ${DIMS} dimensions, ${QUERIES} queries, top ${K}, ${process.version}, ${cpus().length} CPUs`);
  const datasets = [];
  for (const size of SIZES) {
    for (const kind of ['random', 'clustered'] as const) {
      const random = seeded(size + (kind === 'random' ? 1 : 2));
      const made = kind === 'random' ? { data: randomUnitVectors(size, DIMS, random), queries: randomUnitVectors(QUERIES, DIMS, random) } : clustered(size, QUERIES, random);
      const result = await benchDataset(`${kind} ${size.toLocaleString('en-US')}`, chunks(made.data, random), made.queries);
      datasets.push(result);
      log('');
      const m = result.memory;
      log(`${result.name}: built row by row in ${result.buildSeconds} s; ${m.grownMb} MiB grown (${m.grownBytesPerRow} bytes a row), ${m.exactMb} MiB sized up front (${m.exactBytesPerRow} bytes a row)`);
      const rows = Object.entries(result.paths).map(([path, f]) => `${path.padEnd(32)} ${String(f.p50).padStart(8)} ${String(f.p99).padStart(8)} ${f.recallMean.toFixed(4).padStart(8)} ${f.recallMin.toFixed(2).padStart(6)}`);
      if (result.pgvector) log(`pgvector ${result.pgvector.version} on PGlite: chunks loaded in ${result.pgvector.loadSeconds} s, HNSW index built in ${result.pgvector.indexSeconds} s`);
      log(`${'path'.padEnd(32)} ${'p50 ms'.padStart(8)} ${'p99 ms'.padStart(8)} ${'recall'.padStart(8)} ${'worst'.padStart(6)}`);
      for (const line of rows) log(line);
    }
  }
  const embedding = await embeddingThroughput(1);
  const embeddingThreads = await embeddingThroughput(2);
  log('');
  for (const e of [embedding, embeddingThreads]) {
    log(`local embedding model, ${e.threads} worker thread(s): ${e.texts} partner-row chunks in ${e.seconds} s = ${e.textsPerSec} texts/s (loaded and warmed up with 64 texts a thread in ${e.loadSeconds} s)`);
  }
  const result = {
    dimensions: DIMS,
    embedding,
    embeddingThreads,
    queries: QUERIES,
    topK: K,
    target: { p50Ms: 20, recallAt10: 0.95, atRows: 100_000 },
    datasets,
    ...machineFacts(benchStart, loadAtStart),
  };
  mkdirSync(RESULTS, { recursive: true });
  writeFileSync(join(RESULTS, 'search.json'), `${JSON.stringify(result, null, 2)}\n`);
  log('');
  log(`wrote bench/results/search.json (${result.benchSeconds} s in all)`);
}

await main();
