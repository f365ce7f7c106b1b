import { VectorBudgetExceeded } from './budget.js';
import { TenantVectors, type TenantVectorsOptions, type VectorFilter, type VectorHit, type VectorMeta } from './tenant-vectors.js';

/** One stored chunk as the loader hands it over. */
export interface VectorRow {
  id: number;
  vector: Float32Array | readonly number[];
  meta: VectorMeta;
}

/**
 * Reads every chunk of a tenant (from the database); called the first time the tenant is searched.
 * An array lets the index size the tenant's memory exactly; an async iterable streams (the memory
 * then grows by half each time it fills, so up to a third of it may be spare).
 */
export type VectorLoader = (tenantId: number) => Promise<Iterable<VectorRow> | AsyncIterable<VectorRow>> | AsyncIterable<VectorRow>;

export interface VectorIndexOptions extends Omit<TenantVectorsOptions, 'beforeGrow'> {
  /** The memory all tenants' vectors may take together, in bytes. */
  budgetBytes: number;
  load: VectorLoader;
}

export interface VectorIndexUsage {
  bytes: number;
  budgetBytes: number;
  /** Loaded tenants, least recently used first. */
  tenants: Array<{ tenantId: number; rows: number; bytes: number }>;
  /** Tenants evicted to make room since the index was made. */
  evictions: number;
}

/**
 * The vectors of every tenant, in process, each tenant loaded on its first search by the caller's
 * loader and kept until evicted. The database stays the record: this is a cache of it, so `add` and
 * `remove` on a tenant that is not loaded do nothing (the loader will read the row when it is).
 *
 * Memory budget: all tenants together stay within `budgetBytes`. When a tenant must grow (a load or
 * an add), the least recently used other tenants (not those still loading) are evicted whole until
 * it fits; a tenant that alone does not fit fails with VectorBudgetExceeded (503), is dropped if it was loading, and
 * keeps what it had if it was an add.
 */
export class VectorIndex {
  private readonly tenants = new Map<number, TenantVectors>();
  private readonly loading = new Map<number, Promise<TenantVectors>>();
  private evictions = 0;

  constructor(private readonly options: VectorIndexOptions) {
    if (!(options.budgetBytes > 0)) throw new RangeError(`budgetBytes must be positive, not ${options.budgetBytes}`);
  }

  get dimensions(): number {
    return this.options.dimensions;
  }

  /** The `topK` chunks of the tenant most similar to `query`, the filter applied before ranking. */
  async search(tenantId: number, query: Float32Array | readonly number[], topK: number, filter: VectorFilter = {}): Promise<VectorHit[]> {
    const tenant = await this.tenant(tenantId);
    return tenant.search(query, topK, filter);
  }

  /** Adds or replaces a chunk's vector in a loaded tenant (after a load in flight ends); no-op otherwise. */
  async add(tenantId: number, id: number, vector: Float32Array | readonly number[], meta: VectorMeta): Promise<void> {
    await this.loading.get(tenantId)?.catch(() => undefined);
    const tenant = this.tenants.get(tenantId);
    if (!tenant) return;
    this.touch(tenantId, tenant);
    tenant.add(id, vector, meta);
  }

  /** Removes a chunk from a loaded tenant; answers whether it was there. */
  async remove(tenantId: number, id: number): Promise<boolean> {
    await this.loading.get(tenantId)?.catch(() => undefined);
    return this.tenants.get(tenantId)?.remove(id) ?? false;
  }

  /** Drops a tenant's vectors (the next search loads them again). */
  evict(tenantId: number): boolean {
    return this.tenants.delete(tenantId);
  }

  isLoaded(tenantId: number): boolean {
    return this.tenants.has(tenantId);
  }

  usage(): VectorIndexUsage {
    const tenants = [...this.tenants].map(([tenantId, t]) => ({ tenantId, rows: t.size, bytes: t.bytes }));
    return { bytes: this.totalBytes(), budgetBytes: this.options.budgetBytes, tenants, evictions: this.evictions };
  }

  /** The tenant's vectors, loading them once (concurrent callers share the load). */
  async tenant(tenantId: number): Promise<TenantVectors> {
    const pending = this.loading.get(tenantId);
    if (pending) return pending;
    const loaded = this.tenants.get(tenantId);
    if (loaded) {
      this.touch(tenantId, loaded);
      return loaded;
    }
    const load = this.loadTenant(tenantId).finally(() => this.loading.delete(tenantId));
    this.loading.set(tenantId, load);
    return load;
  }

  private async loadTenant(tenantId: number): Promise<TenantVectors> {
    const { budgetBytes: _budget, load, ...tenantOptions } = this.options;
    // Registered before the first row so that the budget counts it while it loads; dropped on failure.
    let tenant: TenantVectors | undefined;
    try {
      const rows = await load(tenantId);
      // A loader that answers an array says how many rows there are: the slab is sized once, exactly.
      const initialCapacity = Array.isArray(rows) ? Math.max(rows.length, tenantOptions.initialCapacity ?? 0) : tenantOptions.initialCapacity;
      tenant = new TenantVectors({ ...tenantOptions, initialCapacity, beforeGrow: (bytes) => this.makeRoom(tenantId, tenant, bytes) });
      this.tenants.set(tenantId, tenant);
      for await (const row of rows) tenant.add(row.id, row.vector, row.meta);
      return tenant;
    } catch (err) {
      if (tenant && this.tenants.get(tenantId) === tenant) this.tenants.delete(tenantId);
      throw err;
    }
  }

  /** Evicts least recently used other tenants until `bytes` more fit; throws when they never will. */
  private makeRoom(tenantId: number, tenant: TenantVectors | undefined, bytes: number): void {
    const budget = this.options.budgetBytes;
    const own = tenant?.bytes ?? 0;
    if (own + bytes > budget) throw new VectorBudgetExceeded(tenantId, own + bytes, budget);
    for (const [otherId, other] of this.tenants) {
      if (this.totalBytes() + bytes <= budget) return;
      if (other === tenant || this.loading.has(otherId)) continue;
      this.tenants.delete(otherId);
      this.evictions += 1;
    }
    if (this.totalBytes() + bytes > budget) throw new VectorBudgetExceeded(tenantId, own + bytes, budget);
  }

  private touch(tenantId: number, tenant: TenantVectors): void {
    this.tenants.delete(tenantId);
    this.tenants.set(tenantId, tenant);
  }

  private totalBytes(): number {
    let total = 0;
    for (const t of this.tenants.values()) total += t.bytes;
    return total;
  }
}
