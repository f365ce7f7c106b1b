import type { Database, Tx } from '../db/database.js';
import { VectorIndex, type VectorRow } from './vectors/vector-index.js';
import { decodeVector } from './vectors-codec.js';

export interface SearchFilter {
  /** Only this corpus. */
  corpus?: string;
  /** Only chunks carrying at least one of these tags; undefined = no tag filter. An empty list matches nothing. */
  scopes?: string[];
}

/**
 * The database's vectors behind the in-process index (src/retrieval/vectors/): a tenant is loaded
 * on its first search (vectors of the current model only) and kept in step at every search: a
 * changed deletion generation (chunks deleted, re-tagged or re-embedded) reloads it, otherwise the
 * vectors embedded since the last one seen are added (embedding sequence numbers become visible in
 * order: src/retrieval/indexer.ts). The index's memory budget evicts least recently searched tenants.
 */
export class VectorStore {
  private readonly index: VectorIndex;
  private readonly seen = new Map<number, { seq: number; generation: number }>();

  constructor(
    private readonly db: Database,
    private readonly model: string,
    private readonly dimensions: number,
    budgetBytes: number,
  ) {
    this.index = new VectorIndex({ dimensions, budgetBytes, load: (tenantId) => this.load(tenantId) });
  }

  async search(tenantId: number, query: Float32Array, topK: number, filter: SearchFilter): Promise<Array<{ id: number; similarity: number }>> {
    await this.sync(tenantId);
    return this.index.search(tenantId, query, topK, { corpora: filter.corpus === undefined ? undefined : [filter.corpus], scopes: filter.scopes });
  }

  /** Tenants held and their vectors (status, tests). */
  held(): Array<{ tenantId: number; vectors: number }> {
    return this.index.usage().tenants.map((t) => ({ tenantId: t.tenantId, vectors: t.rows }));
  }

  private async sync(tenantId: number): Promise<void> {
    const seen = this.seen.get(tenantId);
    const loaded = this.index.isLoaded(tenantId) && seen !== undefined;
    // One transaction: the deletion generation, and (for a loaded tenant) what was embedded since.
    const { generation, rows } = await this.db.withTenant(tenantId, async (tx) => ({
      generation: (
        await tx.query<{ generation: number }>('select coalesce((select generation from retrieval.generations where tenant_id = $1), 0) as generation', [tenantId])
      ).rows[0]!.generation,
      rows: loaded ? await this.rows(tx, tenantId, seen.seq) : [],
    }));
    if (!loaded || seen.generation !== generation) {
      this.index.evict(tenantId);
      this.seen.set(tenantId, { seq: 0, generation });
      return; // the search loads it whole
    }
    for (const row of rows) {
      await this.index.add(tenantId, row.id, row.vector, row.meta);
      seen.seq = Math.max(seen.seq, row.seq);
    }
  }

  private async load(tenantId: number): Promise<VectorRow[]> {
    const rows = await this.db.withTenant(tenantId, (tx) => this.rows(tx, tenantId, 0));
    const seen = this.seen.get(tenantId);
    if (seen) seen.seq = rows.reduce((max, r) => Math.max(max, r.seq), 0);
    return rows;
  }

  private async rows(tx: Tx, tenantId: number, after: number): Promise<Array<VectorRow & { seq: number }>> {
    const { rows } = await tx.query<{ id: number; embedding: Buffer; corpus: string; scopes: string[]; embedded_seq: number }>(
      // Of the model's length too: vectors of another length under its name (its dimensions changed) wait for an
      // indexer pass to clear them (forgetOtherModels), which a process that runs none never does; the index refuses them.
      `select id, embedding, corpus, scopes, embedded_seq from retrieval.chunks
        where tenant_id = $1 and embedded_seq > $2 and embedding is not null and model = $3 and octet_length(embedding) = $4::int * 4 order by embedded_seq`,
      [tenantId, after, this.model, this.dimensions],
    );
    return rows.map((r) => ({ id: r.id, vector: decodeVector(r.embedding), meta: { corpus: r.corpus, scopes: r.scopes }, seq: r.embedded_seq }));
  }
}
