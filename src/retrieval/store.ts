import type { Database } from '../db/database.js';
import { decodeVector } from './vectors-codec.js';

/** What an in-memory index of one tenant's vectors offers (src/retrieval/vectors/). */
export interface TenantIndex {
  add(id: number, vector: Float32Array, meta: { corpus: string; scopes: string[] }): void;
  search(query: Float32Array, topK: number, filter: { corpora?: string[]; scopes?: string[] }): Array<{ id: number; similarity: number }>;
  readonly size: number;
  readonly bytes: number;
}

export interface SearchFilter {
  /** Only this corpus. */
  corpus?: string;
  /** Only chunks carrying at least one of these tags; undefined = no tag filter. An empty list matches nothing. */
  scopes?: string[];
}

interface Loaded {
  index: TenantIndex;
  seq: number;
  generation: number;
  usedAt: number;
}

/**
 * The vectors of each tenant in process memory, loaded on the tenant's first search and kept in
 * step with the database: every search first asks for the tenant's deletion generation (a changed
 * generation reloads the tenant) and the vectors embedded since the last one it saw. Tenants are
 * dropped least recently searched first when the budget is exceeded.
 */
export class VectorStore {
  private readonly tenants = new Map<number, Loaded>();

  constructor(
    private readonly db: Database,
    private readonly newIndex: () => TenantIndex,
    private readonly budgetBytes: number,
  ) {}

  async search(tenantId: number, query: Float32Array, topK: number, filter: SearchFilter): Promise<Array<{ id: number; similarity: number }>> {
    const loaded = await this.sync(tenantId);
    const scopes = filter.scopes;
    if (scopes && scopes.length === 0) return [];
    return loaded.index.search(query, topK, { corpora: filter.corpus === undefined ? undefined : [filter.corpus], scopes });
  }

  /** Brings the tenant's index up to date with the database (first load, deletions, new vectors). */
  private async sync(tenantId: number): Promise<Loaded> {
    const { rows: gen } = await this.db.withTenant(tenantId, (tx) =>
      tx.query<{ generation: number }>('select coalesce((select generation from retrieval.generations where tenant_id = $1), 0) as generation', [tenantId]),
    );
    const generation = gen[0]!.generation;
    let loaded = this.tenants.get(tenantId);
    if (!loaded || loaded.generation !== generation) {
      loaded = { index: this.newIndex(), seq: 0, generation, usedAt: Date.now() };
      this.tenants.set(tenantId, loaded);
    }
    const { rows } = await this.db.withTenant(tenantId, (tx) =>
      tx.query<{ id: number; embedding: Buffer; corpus: string; scopes: string[]; embedded_seq: number }>(
        `select id, embedding, corpus, scopes, embedded_seq from retrieval.chunks
          where tenant_id = $1 and embedded_seq > $2 and embedding is not null order by embedded_seq`,
        [tenantId, loaded.seq],
      ),
    );
    for (const r of rows) {
      loaded.index.add(r.id, decodeVector(r.embedding), { corpus: r.corpus, scopes: r.scopes });
      loaded.seq = r.embedded_seq;
    }
    loaded.usedAt = Date.now();
    this.evict(tenantId);
    return loaded;
  }

  private evict(keep: number): void {
    let total = 0;
    for (const t of this.tenants.values()) total += t.index.bytes;
    const byAge = [...this.tenants.entries()].filter(([id]) => id !== keep).sort((a, b) => a[1].usedAt - b[1].usedAt);
    while (total > this.budgetBytes && byAge.length) {
      const [id, t] = byAge.shift()!;
      total -= t.index.bytes;
      this.tenants.delete(id);
    }
  }

  /** Tenants held and their vectors (status, tests). */
  held(): Array<{ tenantId: number; vectors: number }> {
    return [...this.tenants.entries()].map(([tenantId, t]) => ({ tenantId, vectors: t.index.size }));
  }
}

/** Exact cosine search over normalised vectors (the reference; src/retrieval/vectors/ holds the fast one). */
export class ExactIndex implements TenantIndex {
  private readonly items = new Map<number, { vector: Float32Array; corpus: string; scopes: string[] }>();
  bytes = 0;

  get size(): number {
    return this.items.size;
  }

  add(id: number, vector: Float32Array, meta: { corpus: string; scopes: string[] }): void {
    const old = this.items.get(id);
    if (old) this.bytes -= old.vector.byteLength;
    this.items.set(id, { vector, ...meta });
    this.bytes += vector.byteLength;
  }

  search(query: Float32Array, topK: number, filter: { corpora?: string[]; scopes?: string[] }) {
    const hits: Array<{ id: number; similarity: number }> = [];
    for (const [id, item] of this.items) {
      if (filter.corpora && !filter.corpora.includes(item.corpus)) continue;
      if (filter.scopes && !item.scopes.some((s) => filter.scopes!.includes(s))) continue;
      let dot = 0;
      for (let i = 0; i < query.length; i++) dot += query[i]! * item.vector[i]!;
      hits.push({ id, similarity: dot });
    }
    return hits.sort((a, b) => b.similarity - a.similarity).slice(0, topK);
  }
}
