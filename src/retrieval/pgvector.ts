import pg from 'pg';
import { ConfigError } from '../config/config.js';
import type { Database, Tx } from '../db/database.js';
import { buildIndexConcurrently, dropIndexGivingWay, type GiveWay, inTransactionGivingWay, indexValid, untilDone } from '../db/give-way.js';
import { MIGRATION_LOCK_TIMEOUT_MS } from '../db/migrations.js';
import { startInterrupt } from '../db/pool.js';
import { loggableMessage } from '../observability/database-errors.js';
import { PortUnavailable } from '../errors.js';
import { logger } from '../observability/logger.js';
import type { SearchFilter } from './store.js';
import { decodeVector } from './vectors-codec.js';

/**
 * Vector search inside PostgreSQL, where the database has the pgvector extension: each chunk's
 * vector is kept a second time in `retrieval.chunks.vec` (type `vector`, any length) beside the
 * float32 `embedding` that stays the record, and one HNSW index over `vec::vector(<dimensions>)`
 * with cosine distance answers the nearest chunks. The in-process index (src/retrieval/vectors/)
 * serves databases without the extension. docs/retrieval-vectors.md, "pgvector".
 *
 * Which one a hub uses is `svc.retrieval.vector-search`: `auto` (pgvector where the database has
 * it, else in process), `memory`, or `pgvector` (the start fails without it).
 */

export type VectorSearchMode = 'auto' | 'memory' | 'pgvector';

const HNSW_INDEX_PREFIX = 'chunks_vec_hnsw_';

/** The index over one vector length: a model of another length gets its own, and the old one is dropped. */
export function hnswIndexName(dimensions: number): string {
  return `${HNSW_INDEX_PREFIX}${dimensions}`;
}

/** A name of the extension (type, function, operator class, operator) qualified by the schema it was installed in. */
export function inExtension(schema: string, name: string): string {
  return `${pg.escapeIdentifier(schema)}.${name}`;
}

export interface PgvectorPrepared {
  /** The extension's version, undefined when the database does not have it. */
  version: string | undefined;
  /** Why it is not used (absent when it is). */
  reason?: string;
}

/**
 * Run by the owner after the migrations: where pgvector is available (or `mode` is `pgvector`)
 * the extension is created, `retrieval.chunks.vec` added, vectors of another length cleared and
 * the HNSW index for `dimensions` created (others dropped). Idempotent; does nothing in `memory`
 * mode or without an embedding port (`dimensions` undefined). Throws in `pgvector` mode when the
 * database cannot have the extension.
 */
export async function preparePgvector(
  owner: pg.ClientBase,
  mode: VectorSearchMode,
  dimensions: number | undefined,
  options: { lockTimeoutMs?: number } = {},
): Promise<PgvectorPrepared> {
  if (mode === 'memory' || dimensions === undefined) return { version: undefined, reason: mode === 'memory' ? 'svc.retrieval.vector-search is memory' : 'no embedding port' };
  const signal = startInterrupt();
  // Replicas starting together prepare one after the other (each step is idempotent, but two
  // concurrent `create extension` or `create index` statements are not). The lock is tried again
  // and again, not waited for in one statement: a statement waiting holds a snapshot, which the
  // holder's concurrent index build waits for, and the two would wait for each other until
  // PostgreSQL failed one ('deadlock detected'), as for the migrations' lock.
  await untilDone(async () => (await owner.query<{ locked: boolean }>(`select pg_try_advisory_lock(hashtext('svc-hub:pgvector')) as locked`)).rows[0]!.locked, {
    firstMs: 50,
    maxMs: 500,
    signal,
  });
  try {
    return await prepareLocked(owner, mode, dimensions, {
      lockTimeoutMs: options.lockTimeoutMs ?? MIGRATION_LOCK_TIMEOUT_MS,
      signal,
      gaveWay: (err, pause) =>
        logger().warn(
          { err: loggableMessage(err) },
          `pgvector: gave way to a transaction holding a lock on retrieval.chunks it needs (waited ${options.lockTimeoutMs ?? MIGRATION_LOCK_TIMEOUT_MS} ms, so as not to hold up the statements queued behind it): trying again in ${pause} ms`,
        ),
    });
  } finally {
    await owner.query(`select pg_advisory_unlock(hashtext('svc-hub:pgvector'))`).catch(() => undefined);
  }
}

/**
 * The steps, on a table live pods (of this version and the one before) read and write: as the
 * migrations (docs/operations.md, "Upgrades: two versions side by side"), each step that needs a lock
 * on `retrieval.chunks` holding up its statements (the column, the trigger, an index dropped) is
 * taken only when there is something to do and waits for it `lockTimeoutMs` at most, then gives way
 * and tries again; the indexes are built `concurrently`, holding none of its reads or writes, and one
 * left invalid by a build cut short (the hub stopped) is dropped and built again.
 */
async function prepareLocked(owner: pg.ClientBase, mode: VectorSearchMode, dimensions: number, giveWay: GiveWay): Promise<PgvectorPrepared> {
  const refuse = (reason: string): PgvectorPrepared => {
    if (mode === 'pgvector') throw ConfigError.of('svc.retrieval.vector-search', `is pgvector, but ${reason}`);
    return { version: undefined, reason };
  };
  const available = await owner.query<{ installed: string | null }>(`select installed_version as installed from pg_available_extensions where name = 'vector'`);
  if (available.rowCount === 0) return refuse('the database has no pgvector extension (vector)');
  if (!available.rows[0]!.installed) {
    try {
      await owner.query('create extension if not exists vector');
    } catch (err) {
      return refuse(`the extension vector could not be created: ${(err as Error).message}`);
    }
  }
  const { rows } = await owner.query<{ version: string; schema: string }>(
    `select e.extversion as version, n.nspname as schema from pg_extension e join pg_namespace n on n.oid = e.extnamespace where e.extname = 'vector'`,
  );
  const { version, schema } = rows[0]!;
  const type = inExtension(schema, 'vector');
  // Looked for first: `alter table … add column if not exists` takes the table exclusively even
  // when the column is there, and every start would queue the live pods' reads behind it.
  const column = await owner.query(`select 1 from pg_attribute where attrelid = 'retrieval.chunks'::regclass and attname = 'vec' and not attisdropped`);
  if (column.rowCount === 0) {
    await inTransactionGivingWay(owner, async () => void (await owner.query(`alter table retrieval.chunks add column if not exists vec ${type}`)), giveWay);
  }
  // `vec` follows its record: a statement changing `embedding` without writing `vec` (a text
  // changed, a model change clearing vectors, a process searching in process storing a new vector)
  // clears it, and fillVectorColumn copies the new record. Before, such a chunk kept its earlier
  // text's vector in the index, and once embedded again in process it was searched by it.
  await owner.query(`create or replace function retrieval.vec_follows_embedding() returns trigger language plpgsql set search_path = pg_catalog as $$
    begin
      if new.vec::text is not distinct from old.vec::text then new.vec := null; end if;
      return new;
    end $$`);
  // Created once (no `create or replace trigger` before PostgreSQL 14); replicas prepare one after the other.
  const trigger = await owner.query(`select 1 from pg_trigger where tgrelid = 'retrieval.chunks'::regclass and tgname = 'chunks_vec_follows'`);
  if (trigger.rowCount === 0) {
    await inTransactionGivingWay(
      owner,
      async () =>
        void (await owner.query(`create trigger chunks_vec_follows before update of embedding on retrieval.chunks
      for each row when (old.embedding is distinct from new.embedding and old.vec is not null) execute function retrieval.vec_follows_embedding()`)),
      giveWay,
    );
  }
  const index = hnswIndexName(dimensions);
  const others = await owner.query<{ name: string }>(
    `select indexname as name from pg_indexes where schemaname = 'retrieval' and tablename = 'chunks' and starts_with(indexname, $2) and indexname <> $1`,
    [index, HNSW_INDEX_PREFIX],
  );
  for (const { name } of others.rows) await dropIndexGivingWay(owner, 'retrieval', name, giveWay);
  // Vectors of another length (an earlier model) cannot enter this index; the indexer embeds their chunks again.
  await owner.query(`update retrieval.chunks set vec = null where vec is not null and ${inExtension(schema, 'vector_dims')}(vec) <> $1`, [dimensions]);
  const leftInvalid = (name: string) => () => logger().warn({ index: name }, `pgvector: index retrieval.${name} was left invalid by a build cut short; dropped and built again`);
  // What `fillVectorColumn` looks for at every indexer pass: without this index, a scan of every chunk.
  await buildIndexConcurrently(
    owner,
    'retrieval',
    'chunks_vec_missing',
    'create index concurrently if not exists chunks_vec_missing on retrieval.chunks (id) where vec is null and embedding is not null',
    { ...giveWay, leftInvalid: leftInvalid('chunks_vec_missing') },
  );
  if (!(await indexValid(owner, 'retrieval', index))) {
    // A first start with pgvector (or with a model of this length, or after a build cut short): the
    // chunks embedded so far get `vec` before the index is built (one build instead of one graph
    // insertion a row) and before the hub serves, so that no search answers from part of them.
    const filled = await fillAll(owner, schema, dimensions);
    if (filled > 0) logger().info({ chunks: filled }, 'pgvector: stored vectors copied to the vector column');
  }
  await buildIndexConcurrently(
    owner,
    'retrieval',
    index,
    `create index concurrently if not exists ${pg.escapeIdentifier(index)} on retrieval.chunks using hnsw ((vec::${type}(${dimensions})) ${inExtension(schema, 'vector_cosine_ops')})`,
    { ...giveWay, leftInvalid: leftInvalid(index) },
  );
  logger().info({ version, index }, 'pgvector: chunk vectors searched by an HNSW index');
  return { version };
}

/** `vec` from the float32 record for every chunk of this length that lacks it, in batches; logs progress every 10 s. */
async function fillAll(owner: pg.ClientBase, schema: string, dimensions: number, batch = 2000): Promise<number> {
  let filled = 0;
  let logged = performance.now();
  for (let after = 0; ; ) {
    const { rows } = await owner.query<{ id: number; embedding: Buffer }>(
      `select id, embedding from retrieval.chunks
        where id > $1 and vec is null and embedding is not null and octet_length(embedding) = $2::int * 4 order by id limit $3`,
      [after, dimensions, batch],
    );
    if (rows.length === 0) return filled;
    await copyStored(owner, schema, rows);
    filled += rows.length;
    after = rows.at(-1)!.id;
    if (performance.now() - logged > 10_000) {
      logged = performance.now();
      logger().info({ chunks: filled }, 'pgvector: copying stored vectors to the vector column');
    }
  }
}

/** What a process finds in the database: the extension's version, and whether the column and index for `dimensions` exist. */
export interface PgvectorFound {
  version: string;
  schema: string;
  indexed: boolean;
}

export async function findPgvector(db: Database, dimensions: number): Promise<PgvectorFound | undefined> {
  const { rows } = await db.withoutTenant((tx) =>
    tx.query<{ version: string; schema: string; column: boolean; indexed: boolean }>(
      `select e.extversion as version, n.nspname as schema,
              exists (select 1 from information_schema.columns where table_schema = 'retrieval' and table_name = 'chunks' and column_name = 'vec') as column,
              exists (select 1 from pg_indexes where schemaname = 'retrieval' and tablename = 'chunks' and indexname = $1) as indexed
         from pg_extension e join pg_namespace n on n.oid = e.extnamespace where e.extname = 'vector'`,
      [hnswIndexName(dimensions)],
    ),
  );
  const found = rows[0];
  if (!found?.column) return undefined;
  return { version: found.version, schema: found.schema, indexed: found.indexed };
}

/** pgvector's text form of a vector: `[x,y,…]`, each float32 value written exactly. */
export function vectorLiteral(vector: Float32Array): string {
  let out = '[';
  for (let i = 0; i < vector.length; i++) out += (i ? ',' : '') + String(vector[i]);
  return `${out}]`;
}

/** `1.2.3` ≥ `major.minor`. */
function atLeast(version: string, major: number, minor: number): boolean {
  const [a = 0, b = 0] = version.split('.').map(Number);
  return a > major || (a === major && b >= minor);
}

/**
 * Nearest chunks by the HNSW index. The tenant, model, corpus and scope filters are conditions of
 * the same statement: with pgvector 0.8 or later the index is scanned iteratively in strict
 * distance order until `topK` rows passing them are found (`hnsw.iterative_scan`), so a filter
 * never empties a page of nearest neighbours; the planner may also choose an exact scan of the
 * matching rows when they are few. Row-level security applies as on every tenant read.
 */
export class PgvectorSearch {
  constructor(
    private readonly db: Database,
    private readonly model: string,
    private readonly dimensions: number,
    private readonly found: PgvectorFound,
    /** hnsw.ef_search: candidates kept per search (`svc.retrieval.hnsw-ef-search`; pgvector's own default is 40); at least 2 × topK is used. */
    private readonly efSearch = 100,
  ) {}

  async search(tenantId: number, query: Float32Array, topK: number, filter: SearchFilter): Promise<Array<{ id: number; similarity: number }>> {
    if (query.length !== this.dimensions) throw new Error(`query of ${query.length} dimensions, index of ${this.dimensions}`);
    const { text, values } = searchStatement(this.found.schema, { tenantId, model: this.model, query, topK, filter });
    // Both settings in one statement, local to the transaction, before the search is planned.
    const iterative = atLeast(this.found.version, 0, 8) ? `, set_config('hnsw.iterative_scan', 'strict_order', true)` : '';
    const efSearch = Math.min(1000, Math.max(this.efSearch, 2 * topK));
    return this.db.withTenant(tenantId, async (tx) => {
      await tx.query(`select set_config('hnsw.ef_search', $1, true)${iterative}`, [String(efSearch)]);
      const { rows } = await tx.query<{ id: number; similarity: number }>(text, values);
      return rows;
    });
  }
}

/** The search statement (exported for the test that runs it under row-level security); the index's length is the query's. */
export function searchStatement(
  schema: string,
  p: { tenantId: number; model: string; query: Float32Array; topK: number; filter: SearchFilter },
): { text: string; values: unknown[] } {
  const vectorType = `${inExtension(schema, 'vector')}(${p.query.length})`;
  const values: unknown[] = [p.tenantId, p.model, vectorLiteral(p.query), p.topK];
  const where = ['tenant_id = $1', 'model = $2', 'vec is not null'];
  if (p.filter.corpus !== undefined) {
    values.push(p.filter.corpus);
    where.push(`corpus = $${values.length}`);
  }
  // An empty list of tags matches nothing (`&&` with an empty array is false), as in process.
  if (p.filter.scopes !== undefined) {
    values.push(p.filter.scopes);
    where.push(`scopes && $${values.length}::text[]`);
  }
  const distance = `vec::${vectorType} operator(${inExtension(schema, '<=>')}) $3::${vectorType}`;
  return {
    text: `select id, (1 - (${distance}))::float8 as similarity from retrieval.chunks where ${where.join(' and ')} order by ${distance} limit $4`,
    values,
  };
}

/** Chunks embedded before `vec` existed (or while the in-process index was chosen) get it from their float32 record; returns how many. */
export async function fillVectorColumn(db: Database, model: string, schema: string, batch = 500): Promise<number> {
  return db.crossTenant('retrieval-vec', async (tx) => {
    const { rows } = await tx.query<{ id: number; embedding: Buffer }>(
      // Served by the partial index chunks_vec_missing (preparePgvector).
      'select id, embedding from retrieval.chunks where vec is null and embedding is not null and model = $1 order by id limit $2 for update skip locked',
      [model, batch],
    );
    if (rows.length > 0) await copyStored(tx, schema, rows);
    return rows.length;
  });
}

/** `vec` of these chunks from their float32 record. */
async function copyStored(on: Pick<Tx, 'query'>, schema: string, rows: Array<{ id: number; embedding: Buffer }>): Promise<void> {
  await on.query(
    `update retrieval.chunks c set vec = v.vec::${inExtension(schema, 'vector')} from unnest($1::bigint[], $2::text[]) as v(id, vec) where c.id = v.id`,
    [rows.map((r) => r.id), rows.map((r) => vectorLiteral(decodeVector(r.embedding)))],
  );
}

/** The 503 of `svc.retrieval.vector-search=pgvector` on a database that lost its index. */
export function pgvectorMissing(dimensions: number): PortUnavailable {
  return new PortUnavailable(
    `pgvector index ${hnswIndexName(dimensions)} not found`,
    'svc.retrieval.vector-search is pgvector: restart the hub with migrations so it creates the extension, the column and the index, or set it to auto',
  );
}
