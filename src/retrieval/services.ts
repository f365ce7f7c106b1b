import type { Database } from '../db/database.js';
import { PortUnavailable } from '../errors.js';
import { loggableMessage } from '../observability/database-errors.js';
import { logger } from '../observability/logger.js';
import type { ResolvedScope } from '../admin/scope-access.js';
import { type AnalyticAnswer, analyticChat } from './analytic-chat.js';
import { AnalyticGate } from './analytic/gate.js';
import { AnalyticRefusal } from './analytic/refusal.js';
import type { ChatPort } from './chat/port.js';
import { DiscoveryNotStarted, discoverCard, loadCard, type StoredCard } from './discovery.js';
import { readableCard } from './analytic/held-card.js';
import { type SemanticAnswer, semanticChat } from './chat/semantic.js';
import { type EmbeddingPort, modelName } from './embedding/port.js';
import { checkModel, confirmModel, embedPending, expandPending } from './indexer.js';
import { EmbeddingOutage } from './embedding/outage.js';
import type { Now } from '../clock/clock.js';
import { PLATFORM_CORPUS, PLATFORM_TENANT, type PlatformDocument, rebuildPlatformCorpus } from './platform-corpus.js';
import { fillVectorColumn, findPgvector, PgvectorSearch, type PgvectorFound, pgvectorMissing, type VectorSearchMode } from './pgvector.js';
import { type SearchFilter, VectorStore } from './store.js';
import type { SearchHit, SearchRequest } from './types.js';

export interface RetrievalDeps {
  db: Database;
  /** The embedding port, or undefined when none is configured (search answers 503). */
  embedding: EmbeddingPort | undefined;
  /** The language model, or undefined when none is configured (chat answers 503). */
  chat: ChatPort | undefined;
  /** Statement timeout of an analytic query. */
  statementTimeoutMs: number;
  /** The largest answer of an analytic query, in bytes (`svc.analytic.max-answer-bytes`; default 4 MiB). */
  maxAnswerBytes?: number;
  /** An analytic query's work_mem, temp_file_limit and memory of all its sorts and hashes in kB (`svc.analytic.work-mem`, `svc.analytic.temp-file-limit`, `svc.analytic.statement-memory`); default 4MB, none and 512MB. */
  analyticMemory?: { workMemKb?: number; tempFileLimitKb?: number; statementMemoryKb?: number };
  /** Analytic queries at once, in all and per tenant (`svc.analytic.concurrency[-per-tenant]`); default 4 and 2. */
  analyticConcurrency?: { total: number; perTenant: number };
  /** The documents of the platform corpus (the composition root knows the OpenAPI document). */
  platformDocuments: () => PlatformDocument[];
  memoryBudgetBytes: number;
  embedBatch: number;
  /** Where vectors are searched (`svc.retrieval.vector-search`, src/retrieval/pgvector.ts); default `auto`. */
  vectorSearch?: VectorSearchMode;
  /** hnsw.ef_search of the pgvector path (`svc.retrieval.hnsw-ef-search`); default 100. */
  hnswEfSearch?: number;
  /** How long one indexer pass may expand pending entries, and then copy and embed (tests); default PASS_BUDGET_MS each. */
  passBudgetMs?: number;
  /**
   * How long the recorded embedding model's processes may go without confirming it (each indexer pass
   * does) before a process of another model takes over (src/retrieval/indexer.ts, checkModel); default
   * MODEL_LEASE_MS. Longer than the indexer's cadence, or a process of the recorded model would seem gone between passes.
   */
  modelLeaseMs?: number;
  /** How long an indexer pass's claim on a batch it embeds holds (src/retrieval/indexer.ts, embedPending; tests); default EMBED_CLAIM_MS. */
  embedClaimMs?: number;
  /** How often, at most, an embedding outage is logged again (tests); default OUTAGE_LOG_EVERY_MS (src/retrieval/embedding/outage.ts). */
  outageLogEveryMs?: number;
  /** The time, for the outage log (tests hand in their own); default Date.now. */
  now?: Now;
}

export interface ScopeEntry {
  scope: string;
  connectors: number;
  chunks: number;
  lastIndexed: string;
}

export interface CorpusEntry {
  name: string;
  chunkCount: number;
}

export interface RetrievalStatus {
  indexed: boolean;
  chunks: number;
  indexedAt: string | null;
  provider: string;
  embeddingModel: string;
  /** Chunks with a vector of the configured model (0 without an embedding port): `chunks - embedded` are still waiting for one. */
  embedded: number;
  /**
   * Chunks without a vector that the embedding model refused on their own and that are set aside
   * (`embed_attempts` > 0: passed over until `embed_retry_at`, tried again then); they are among
   * `chunks - embedded` but are not merely waiting for the indexer.
   */
  setAside: number;
  /**
   * Ingested rows handed to the indexer (`retrieval.pending`, connector runs' and purges' hand-offs)
   * that it has not yet made into chunks: not counted in `chunks`, and not searchable yet.
   */
  pendingRows: number;
  /** Where search runs: `memory` (in process), `pgvector`, or `none` (no embedding port). */
  vectorSearch: 'memory' | 'pgvector' | 'none';
}

/** How long one indexer pass may expand pending entries, and then embed, before it yields to the next tick. */
const PASS_BUDGET_MS = 2000;
/** How long the recorded embedding model's processes may go without confirming it before a process of another model takes over (checkModel). */
export const MODEL_LEASE_MS = 5 * 60_000;

const NO_EMBEDDING = new PortUnavailable('no embedding port is configured', 'set svc.embedding.provider to local or openai');

export interface RetrievalServices {
  search(tenantId: number, request: SearchRequest, signal?: AbortSignal): Promise<SearchHit[]>;
  /** Semantic chat: the nearest chunks as context, the model's answer, the retrieved rows' hashes. */
  chat(tenantId: number, question: string, request: Omit<SearchRequest, 'query'>, signal?: AbortSignal): Promise<SemanticAnswer>;
  /** Analytic chat over the scope's schema card (src/retrieval/analytic-chat.ts). `signal`: the asking client went away (both). */
  analytic(tenantId: number, question: string, scope: ResolvedScope, signal?: AbortSignal): Promise<AnalyticAnswer>;
  /** The stored schema card of a scope (a ScopeNotDeclared, 404, when nothing of the tenant declares it: loadCard); to a scope-bound caller (`granted`), only the relations whose rows are all of their scopes (analytic/held-card.ts). */
  schemaCard(tenantId: number, scope: string, granted?: readonly string[]): Promise<StoredCard | undefined>;
  /**
   * Discovers and stores a scope's schema card from its ext tables, held to the statement timeout in all.
   * It takes a turn among the analytic queries (the gate), whose connection it holds as long: a
   * DiscoveryNotStarted (503) when none comes within the statement timeout. `signal`: the asking client
   * went away; a wait for the turn ends, the running statement is cancelled in PostgreSQL, nothing is stored.
   */
  rediscover(tenantId: number, scope: string, signal?: AbortSignal): Promise<{ scope: string; tableCount: number; columnCount: number; enriched: boolean; sourceType: string }>;
  /** Chunks of the caller's tenant (plus the platform corpus), for a granted set or everything. */
  scopes(tenantId: number, granted: string[] | undefined): Promise<ScopeEntry[]>;
  corpora(tenantId: number, granted: string[] | undefined): Promise<CorpusEntry[]>;
  status(tenantId: number): Promise<RetrievalStatus>;
  /** Starts rebuilding the platform corpus in the background; resolves at once. */
  reindex(): void;
  /**
   * One indexer pass, bounded in time: pending rows into chunks, stored vectors copied into
   * pgvector's column (`filled`), then chunks into vectors. What the background clock runs;
   * `signal` (the clocks' stop) ends it at once, a batch being embedded dropped (its chunks stay
   * pending for the next start). A pass whose time ran out says so (`more`): "nothing left" is a
   * pass that did nothing and had time to spare.
   */
  indexPass(signal?: AbortSignal): Promise<IndexPassResult>;
  /** The embedding port (chat embeds its question with it). */
  readonly embedding: EmbeddingPort | undefined;
  /** Waits for a running reindex (tests, orderly stop). */
  idle(): Promise<void>;
  /** Stops the embedding port's worker, after a running reindex. */
  close(): Promise<void>;
}


/** What one indexer pass did. */
export interface IndexPassResult {
  expanded: number;
  filled: number;
  embedded: number;
  /** The pass's time ran out before it ran out of work (a busy machine): work may be left for the next. */
  more: boolean;
}

/** Whether an indexer pass did anything or may have left work (one that did neither had nothing left to do). */
export function indexedAnything(done: IndexPassResult): boolean {
  return done.more || done.expanded > 0 || done.filled > 0 || done.embedded > 0;
}

interface Searcher {
  search(tenantId: number, query: Float32Array, topK: number, filter: SearchFilter): Promise<Array<{ id: number; similarity: number }>>;
}

export function createRetrievalServices(deps: RetrievalDeps): RetrievalServices {
  const { db, embedding } = deps;
  const mode = deps.vectorSearch ?? 'auto';
  const analyticGate = new AnalyticGate(deps.analyticConcurrency?.total ?? 4, deps.analyticConcurrency?.perTenant ?? 2, (tenantId, work) => deps.db.holdConnection(tenantId, work));
  let chosen: Promise<{ searcher: Searcher; pgvector?: PgvectorFound }> | undefined;
  /**
   * The search path, decided once per process from what the database has (the owner prepared it
   * at start: src/retrieval/pgvector.ts): the HNSW index where pgvector is there, else the
   * in-process index. A failed look is tried again at the next use.
   */
  function vectors(port: EmbeddingPort): Promise<{ searcher: Searcher; pgvector?: PgvectorFound }> {
    chosen ??= (async () => {
      if (mode !== 'memory') {
        const found = await findPgvector(db, port.dimensions);
        if (found?.indexed) {
          logger().info({ version: found.version, dimensions: port.dimensions }, 'vector search: pgvector HNSW index');
          return { searcher: new PgvectorSearch(db, modelName(port), port.dimensions, found, deps.hnswEfSearch), pgvector: found };
        }
        if (mode === 'pgvector') throw pgvectorMissing(port.dimensions);
      }
      return { searcher: new VectorStore(db, modelName(port), port.dimensions, deps.memoryBudgetBytes) };
    })();
    chosen.catch(() => {
      chosen = undefined;
    });
    return chosen;
  }
  let reindexing: Promise<void> | undefined;
  // The embedding endpoint away: logged when it starts, at most once a minute while it lasts, and when it ends.
  const outage = new EmbeddingOutage(deps.outageLogEveryMs, deps.now);
  let modelChecked = false;
  const leaseMs = deps.modelLeaseMs ?? MODEL_LEASE_MS;
  // When this process last confirmed its model in use (Date.now()); undefined while another model is recorded.
  let confirmedAt: number | undefined;
  // The recorded model this process last deferred to (logged once a change).
  let deferredTo: string | undefined;
  let stopping = false;

  async function search(tenantId: number, request: SearchRequest, signal?: AbortSignal): Promise<SearchHit[]> {
    if (!embedding) throw NO_EMBEDDING;
    const { searcher: store } = await vectors(embedding);
    const [query] = await embedding.embed([request.query], signal);
    const filter = { corpus: request.corpus, scopes: request.scopes };
    const own = await store.search(tenantId, query!, request.topK, filter);
    // The platform corpus carries no tag: a tag filter leaves it out.
    const platform = tenantId !== PLATFORM_TENANT && request.scopes === undefined && (request.corpus === undefined || request.corpus === PLATFORM_CORPUS)
      ? await store.search(PLATFORM_TENANT, query!, request.topK, filter)
      : [];
    const hits = [...own, ...platform].sort((a, b) => b.similarity - a.similarity).slice(0, request.topK);
    if (hits.length === 0) return [];
    // The filters again, on the chunks as read: the index ranked by the tags it saw, and a re-apply
    // re-tagging a chunk since (a connector's other scopes) must not answer it to a search of its
    // former tag, a scope-bound caller's granted one. A hit that no longer passes is dropped as a deleted one is.
    const { rows } = await db.withTenant(tenantId, (tx) =>
      tx.query<{ id: number; row_hash: string | null; key: string | null; table_name: string | null; corpus: string; scopes: string[]; content: string }>(
        `select id, row_hash, coalesce(key, external_id) as key, table_name, corpus, scopes, content from retrieval.chunks
          where id = any($1) and ($2::text is null or corpus = $2) and ($3::text[] is null or scopes && $3::text[])`,
        [hits.map((h) => h.id), request.corpus ?? null, request.scopes ?? null],
      ),
    );
    const byId = new Map(rows.map((r) => [r.id, r]));
    return hits.flatMap((h) => {
      const r = byId.get(h.id);
      if (!r) return []; // deleted (or re-tagged) since the index last looked
      const metadata: SearchHit['metadata'] = { row_hash: r.row_hash, table: r.table_name, corpus: r.corpus, scopes: r.scopes };
      if (r.key) metadata.key = r.key;
      return [{ rowHash: r.row_hash ?? '', content: r.content, similarity: Math.round(h.similarity * 1e6) / 1e6, metadata }];
    });
  }

  async function scopes(tenantId: number, granted: string[] | undefined): Promise<ScopeEntry[]> {
    const { rows } = await db.withTenant(tenantId, (tx) =>
      tx.query<{ scope: string; connectors: number; chunks: number; last_indexed: Date | null }>(
        // One pass over each table, grouped by tag (a tag written twice on one row counts the row once),
        // not three scans of the chunks per tag.
        `with k as (select s.scope, count(distinct k.id)::int as chunks, max(k.embedded_at) as last_indexed
                      from retrieval.chunks k cross join lateral unnest(k.scopes) as s(scope) where k.tenant_id = $1 group by s.scope),
              c as (select s.scope, count(distinct c.id)::int as connectors
                      from connectors.connectors c cross join lateral unnest(c.scopes) as s(scope) where c.tenant_id = $1 group by s.scope)
         select coalesce(c.scope, k.scope) as scope, coalesce(c.connectors, 0) as connectors, coalesce(k.chunks, 0) as chunks, k.last_indexed
           from c full join k on k.scope = c.scope order by 1`,
        [tenantId],
      ),
    );
    return rows
      .filter((r) => granted === undefined || granted.includes(r.scope))
      .map((r) => ({ scope: r.scope, connectors: r.connectors, chunks: r.chunks, lastIndexed: r.last_indexed ? r.last_indexed.toISOString() : '' }));
  }

  async function corpora(tenantId: number, granted: string[] | undefined): Promise<CorpusEntry[]> {
    const { rows } = await db.withTenant(tenantId, (tx) =>
      tx.query<{ name: string; chunks: number; tags: string[] }>(
        // One row per chunk and tag: counted by id, a chunk of two tags counted once (it counted twice). The platform
        // corpus apart from a corpus of the tenant's of the same name (a connector named `system`), after it.
        `select corpus as name, count(distinct id)::int as chunks, coalesce(array_agg(distinct s) filter (where s is not null), '{}') as tags
           from retrieval.chunks left join lateral unnest(scopes) as s on true
          where tenant_id = $1 or (tenant_id = $2 and corpus = $3)
          group by corpus, tenant_id order by corpus, tenant_id = $2`,
        [tenantId, PLATFORM_TENANT, PLATFORM_CORPUS],
      ),
    );
    return rows
      .filter((r) => granted === undefined || r.tags.some((t) => granted.includes(t)))
      .map((r) => ({ name: r.name, chunkCount: r.chunks }));
  }

  async function status(tenantId: number): Promise<RetrievalStatus> {
    const { rows } = await db.withTenant(tenantId, (tx) =>
      tx.query<{ chunks: number; embedded: number; current: number; aside: number; at: Date | null; pending: number }>(
        `select count(*)::int as chunks, count(embedding)::int as embedded,
                (count(*) filter (where embedding is not null and model = $2))::int as current,
                (count(*) filter (where embedding is null and embed_attempts > 0))::int as aside, max(embedded_at) as at,
                (select coalesce(sum(cardinality(p.row_hashes)), 0)::int from retrieval.pending p where p.tenant_id = $1) as pending
           from retrieval.chunks where tenant_id = $1`,
        [tenantId, embedding ? modelName(embedding) : null],
      ),
    );
    const r = rows[0]!;
    // `none` too where search cannot run (`pgvector` mode on a database without the index): status still answers.
    const path = embedding
      ? await vectors(embedding).then(
          (v) => (v.pgvector ? ('pgvector' as const) : ('memory' as const)),
          (err: unknown) => {
            if (err instanceof PortUnavailable) return 'none' as const;
            throw err;
          },
        )
      : 'none';
    return {
      indexed: r.embedded > 0,
      chunks: r.chunks,
      indexedAt: r.at ? r.at.toISOString() : null,
      provider: embedding?.provider ?? 'none',
      embeddingModel: embedding?.model ?? 'none',
      embedded: r.current,
      setAside: r.aside,
      pendingRows: r.pending,
      vectorSearch: path,
    };
  }

  function reindex(): void {
    if (reindexing) return;
    reindexing = (async () => {
      try {
        const result = await rebuildPlatformCorpus(db, deps.platformDocuments());
        logger().info(result, 'platform corpus rebuilt');
      } catch (err) {
        logger().warn({ err: loggableMessage(err) }, 'platform corpus rebuild failed');
      } finally {
        reindexing = undefined;
      }
    })();
  }

  /**
   * The model's lease kept during a pass (between its steps: a batch of entries, a call of the model,
   * each call of a failed batch split down to single texts: embedPending), renewed a tenth of the lease after the last confirmation: a pass longer than the lease does not let a
   * deferring process of another model take over. False when this process's model is not (or no longer) the one recorded.
   */
  async function keepLease(): Promise<boolean> {
    if (!embedding || confirmedAt === undefined) return false;
    if (Date.now() - confirmedAt < leaseMs / 10) return true;
    const still = await confirmModel(db, embedding);
    confirmedAt = still ? Date.now() : undefined;
    return still;
  }

  /**
   * Bounded work per pass (a clock tick): pending entries become chunks for at most PASS_BUDGET_MS,
   * then batches are embedded for at most PASS_BUDGET_MS, and the next tick goes on. Before, the
   * pass expanded whatever was pending before it embedded anything: while rows were written faster
   * than they were expanded (a large load, several runs at once), no chunk of any tenant got a
   * vector until the writing stopped. A stop (`signal`) does not wait for the batch being embedded
   * (seconds on a busy machine): its vectors are dropped unwritten.
   */
  async function indexPass(signal?: AbortSignal): Promise<IndexPassResult> {
    const budget = deps.passBudgetMs ?? PASS_BUDGET_MS;
    const goOn = () => !stopping && !signal?.aborted;
    let expanded = 0;
    // Whether a step ended because its time was up (work may be left), not because it ran out of work.
    let more = false;
    const expandStarted = Date.now();
    for (let n = await expandPending(db); n > 0 && goOn(); n = await expandPending(db)) {
      expanded += n;
      if (Date.now() - expandStarted >= budget) {
        more = true;
        break;
      }
      await keepLease();
    }
    if (!embedding) return { expanded, filled: 0, embedded: 0, more };
    // Only the recorded model embeds (checkModel): a process of another model started before it defers.
    const model = await checkModel(db, embedding, !modelChecked, leaseMs);
    modelChecked = true;
    confirmedAt = model.inUse ? Date.now() : undefined;
    if (!model.inUse) {
      if (deferredTo !== model.recorded) {
        logger().info(
          { model: modelName(embedding), dimensions: embedding.dimensions, recorded: model.recorded },
          `embedding deferred: the model in use is ${model.recorded}, recorded by another process; this process embeds nothing while that model's processes run`,
        );
      }
      deferredTo = model.recorded;
      return { expanded, filled: 0, embedded: 0, more };
    }
    deferredTo = undefined;
    const { pgvector } = await vectors(embedding);
    let embedded = 0;
    let filled = 0;
    const embedStarted = Date.now();
    const inTime = () => {
      const up = Date.now() - embedStarted >= budget;
      more ||= up;
      return !up;
    };
    // Chunks embedded before the database had pgvector get their `vec` from the stored vector.
    while (pgvector && goOn() && inTime() && (await keepLease())) {
      const n = await fillVectorColumn(db, modelName(embedding), pgvector.schema);
      if (n === 0) break;
      filled += n;
    }
    while (goOn() && inTime() && (await keepLease())) {
      // One batch per thread of the model, so that they all work.
      const n = await embedPending(db, embedding, deps.embedBatch * (embedding.parallelism ?? 1), pgvector, signal, outage, keepLease, deps.embedClaimMs);
      if (n === 0) break;
      embedded += n;
    }
    return { expanded, filled, embedded, more };
  }

  return {
    search,
    chat: (tenantId, question, request, signal) => semanticChat((r, s) => search(tenantId, r, s), deps.chat, question, request, signal),
    analytic: (tenantId, question, scope, signal) =>
      analyticChat({ db, chat: deps.chat, statementTimeoutMs: deps.statementTimeoutMs, maxAnswerBytes: deps.maxAnswerBytes ?? 4 * 1024 * 1024, memory: deps.analyticMemory, gate: analyticGate }, tenantId, question, scope, signal),
    schemaCard: (tenantId, scope, granted) =>
      db.withTenant(tenantId, async (tx) => {
        const stored = await loadCard(tx, scope);
        return stored && { ...stored, card: await readableCard(tx, stored.card, granted) };
      }),
    rediscover: async (tenantId, scope, signal) => {
      const discover = () => db.withTenant(tenantId, (tx) => discoverCard(tx, scope, deps.statementTimeoutMs, signal && { db, signal }));
      try {
        return await analyticGate.run(tenantId, '', deps.statementTimeoutMs, discover, signal);
      } catch (err) {
        // The gate's refusal (no turn in time) is a query's answer; a discovery answers it as a 503.
        if (err instanceof AnalyticRefusal) throw new DiscoveryNotStarted(deps.statementTimeoutMs);
        throw err;
      }
    },
    scopes,
    corpora,
    status,
    reindex,
    indexPass,
    embedding,
    async idle() {
      await reindexing;
    },
    async close() {
      stopping = true;
      await reindexing;
      await (embedding as { close?: () => Promise<void> } | undefined)?.close?.();
    },
  };
}
