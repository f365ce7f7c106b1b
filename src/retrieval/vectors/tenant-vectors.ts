import { type Kernels, kernels } from './kernels.js';
import { TopK } from './top-k.js';

/** What a chunk is filtered by: its corpus and its scope tags. */
export interface VectorMeta {
  corpus: string;
  scopes: string[];
}

/**
 * A search's filter, applied before ranking. An absent list puts no constraint; an empty list
 * matches nothing (scopes decide who may see a chunk, so "no scopes" must never mean "all").
 * `scopes` matches a chunk that carries any of them.
 */
export interface VectorFilter {
  corpora?: readonly string[];
  scopes?: readonly string[];
}

export interface VectorHit {
  id: number;
  /** Cosine similarity, −1 … 1. */
  similarity: number;
}

export interface TenantVectorsOptions {
  dimensions: number;
  /**
   * From this many rows on, a search that is not narrowed to a small subset scans int8 codes and
   * re-ranks the best candidates on the float vectors; below it every search is an exact float scan.
   * Default 20,000 (see docs/retrieval-vectors.md for the measurements behind it).
   */
  quantiseFrom?: number;
  /** Candidates the int8 scan hands to the float re-rank, per requested result (default 4, at least 64 in all). */
  rerankFactor?: number;
  /** A filter that leaves at most this many rows is scored exactly on just those rows (default 2,048). */
  subsetUpTo?: number;
  /** Rows allocated up front (default 64); the slab grows by half when full. */
  initialCapacity?: number;
  /** Asked before the slab grows by `bytes`; throws to refuse (the memory budget). */
  beforeGrow?: (bytes: number) => void;
}

/** JavaScript-side bytes per row besides the slab: id, scale, group, and the id map's entry (an estimate). */
const SIDE_BYTES_PER_ROW = 8 + 4 + 4 + 64;
const PAGE = 65_536;
/** Query precision for the int8 scan: 13 bits keeps 512 × 127 × 8191 far inside int32. */
const QUERY_LEVELS = 8191;

interface Group {
  corpus: string;
  scopes: ReadonlySet<string>;
  rows: number;
}

/**
 * One tenant's vectors, in one WebAssembly memory so the SIMD kernels scan them in place:
 *
 *   [query f32 | query i16 | scores | float32 rows (padded to 16 dims) | int8 rows]
 *
 * Vectors are stored L2-normalised, so the dot product is the cosine similarity. Each row also
 * keeps an int8 copy (per-row scale, 1/4 of the float size) that large tenants scan first; the
 * best candidates are then re-ranked on the float rows, so the similarities answered are always the
 * float ones. Chunks sharing a corpus and a scope set share a group, so a filter is decided once per
 * group, not once per row. Removal moves the last row into the hole (no tombstones); the memory
 * itself never shrinks (WebAssembly memories cannot), dropping the tenant gives it back.
 */
export class TenantVectors {
  readonly dimensions: number;
  private readonly stride: number;
  private readonly quantiseFrom: number;
  private readonly rerankFactor: number;
  private readonly subsetUpTo: number;
  private readonly beforeGrow: ((bytes: number) => void) | undefined;
  private readonly memory: WebAssembly.Memory;
  private readonly kernels: Kernels;

  private capacity: number;
  private count = 0;
  private ids: Float64Array;
  private scales: Float32Array;
  private groupOf: Uint32Array;
  private readonly slotOf = new Map<number, number>();
  private readonly groups: Group[] = [];
  private readonly groupByKey = new Map<string, number>();

  // Byte offsets in the memory, and views over it (renewed when the memory grows).
  private readonly queryAt = 0;
  private readonly query16At: number;
  private readonly scoresAt: number;
  private floatsAt = 0;
  private codesAt = 0;
  private view!: { buffer: ArrayBuffer; floats: Float32Array; codes: Int8Array; scores: Float32Array; iscores: Int32Array; query: Float32Array; query16: Int16Array };

  constructor(options: TenantVectorsOptions) {
    if (!Number.isInteger(options.dimensions) || options.dimensions <= 0) throw new RangeError(`dimensions must be a positive integer, not ${options.dimensions}`);
    this.dimensions = options.dimensions;
    this.stride = Math.ceil(options.dimensions / 16) * 16;
    this.quantiseFrom = options.quantiseFrom ?? 20_000;
    this.rerankFactor = options.rerankFactor ?? 4;
    this.subsetUpTo = options.subsetUpTo ?? 2048;
    this.beforeGrow = options.beforeGrow;
    this.query16At = this.stride * 4;
    this.scoresAt = this.query16At + this.stride * 2;
    this.capacity = roundUp(Math.max(4, options.initialCapacity ?? 64), 4);
    this.beforeGrow?.(this.bytesFor(this.capacity));
    this.layout(this.capacity);
    this.memory = new WebAssembly.Memory({ initial: Math.ceil(this.slabBytes(this.capacity) / PAGE) });
    this.kernels = kernels(this.memory);
    this.ids = new Float64Array(this.capacity);
    this.scales = new Float32Array(this.capacity);
    this.groupOf = new Uint32Array(this.capacity);
    this.refreshViews();
  }

  /** Rows held. */
  get size(): number {
    return this.count;
  }

  /** Bytes this tenant holds: the whole WebAssembly memory plus the JavaScript-side arrays (estimated). */
  get bytes(): number {
    return this.memory.buffer.byteLength + this.capacity * SIDE_BYTES_PER_ROW;
  }

  has(id: number): boolean {
    return this.slotOf.has(id);
  }

  /** Adds a vector, or replaces the one stored under `id`. The vector is normalised here. */
  add(id: number, vector: Float32Array | readonly number[], meta: VectorMeta): void {
    if (vector.length !== this.dimensions) throw new RangeError(`vector ${id} has ${vector.length} dimensions, the index ${this.dimensions}`);
    const norm = l2(vector);
    if (!(norm > 0) || !Number.isFinite(norm)) throw new RangeError(`vector ${id} has no direction (norm ${norm})`);
    let slot = this.slotOf.get(id);
    if (slot === undefined) {
      if (this.count === this.capacity) this.grow(this.count + 1);
      slot = this.count++;
      this.slotOf.set(id, slot);
      this.ids[slot] = id;
    } else {
      this.groups[this.groupOf[slot]!]!.rows -= 1;
    }
    const group = this.groupFor(meta);
    this.groupOf[slot] = group;
    this.groups[group]!.rows += 1;
    const { floats, codes } = this.view;
    const base = slot * this.stride;
    let max = 0;
    for (let j = 0; j < this.dimensions; j++) {
      const v = vector[j]! / norm;
      floats[base + j] = v;
      const a = Math.abs(v);
      if (a > max) max = a;
    }
    const scale = max / 127;
    this.scales[slot] = scale;
    for (let j = 0; j < this.dimensions; j++) codes[base + j] = Math.round(floats[base + j]! / scale);
    // The padding must be zero: slots past the old end hold whatever the last growth moved through them.
    floats.fill(0, base + this.dimensions, base + this.stride);
    codes.fill(0, base + this.dimensions, base + this.stride);
  }

  /** Removes `id`; answers whether it was there. The last row moves into its place. */
  remove(id: number): boolean {
    const slot = this.slotOf.get(id);
    if (slot === undefined) return false;
    this.slotOf.delete(id);
    this.groups[this.groupOf[slot]!]!.rows -= 1;
    const last = --this.count;
    if (slot !== last) {
      const { floats, codes } = this.view;
      floats.copyWithin(slot * this.stride, last * this.stride, (last + 1) * this.stride);
      codes.copyWithin(slot * this.stride, last * this.stride, (last + 1) * this.stride);
      const moved = this.ids[last]!;
      this.ids[slot] = moved;
      this.scales[slot] = this.scales[last]!;
      this.groupOf[slot] = this.groupOf[last]!;
      this.slotOf.set(moved, slot);
    }
    return true;
  }

  /**
   * The `topK` rows most similar to `query` among those the filter admits (so a filtered search
   * still answers `topK` rows when that many match), best first.
   */
  search(query: Float32Array | readonly number[], topK: number, filter: VectorFilter = {}): VectorHit[] {
    if (query.length !== this.dimensions) throw new RangeError(`the query has ${query.length} dimensions, the index ${this.dimensions}`);
    if (topK <= 0 || this.count === 0) return [];
    const { allowed, matching } = this.admit(filter);
    if (matching === 0) return [];
    this.setQuery(query);
    let best: TopK;
    if (allowed && matching <= this.subsetUpTo) best = this.scanSubset(topK, allowed);
    else if (this.count < this.quantiseFrom) best = this.scanFloat(topK, allowed);
    else best = this.scanQuantised(topK, allowed);
    return best.sorted().map(({ slot, score }) => ({ id: this.ids[slot]!, similarity: score }));
  }

  /** Search by exact float scan whatever the size (the reference the quantised path is measured against). */
  searchExact(query: Float32Array | readonly number[], topK: number, filter: VectorFilter = {}): VectorHit[] {
    if (query.length !== this.dimensions) throw new RangeError(`the query has ${query.length} dimensions, the index ${this.dimensions}`);
    if (topK <= 0 || this.count === 0) return [];
    const { allowed, matching } = this.admit(filter);
    if (matching === 0) return [];
    this.setQuery(query);
    return this.scanFloat(topK, allowed)
      .sorted()
      .map(({ slot, score }) => ({ id: this.ids[slot]!, similarity: score }));
  }

  /** Which groups the filter admits (undefined: all) and how many rows they hold. */
  private admit(filter: VectorFilter): { allowed: Uint8Array | undefined; matching: number } {
    if (!filter.corpora && !filter.scopes) return { allowed: undefined, matching: this.count };
    const corpora = filter.corpora ? new Set(filter.corpora) : undefined;
    const scopes = filter.scopes;
    const allowed = new Uint8Array(this.groups.length);
    let matching = 0;
    this.groups.forEach((group, g) => {
      if (group.rows === 0) return;
      if (corpora && !corpora.has(group.corpus)) return;
      if (scopes && !scopes.some((s) => group.scopes.has(s))) return;
      allowed[g] = 1;
      matching += group.rows;
    });
    return { allowed, matching };
  }

  /** Normalises the query into the memory, as float32 and as int16 for the int8 kernel. */
  private setQuery(query: Float32Array | readonly number[]): void {
    const norm = l2(query);
    if (!(norm > 0) || !Number.isFinite(norm)) throw new RangeError(`the query has no direction (norm ${norm})`);
    const { query: q, query16 } = this.view;
    let max = 0;
    for (let j = 0; j < this.dimensions; j++) {
      const v = query[j]! / norm;
      q[j] = v;
      if (Math.abs(v) > max) max = Math.abs(v);
    }
    for (let j = 0; j < this.dimensions; j++) query16[j] = Math.round((q[j]! * QUERY_LEVELS) / max);
  }

  private scanFloat(topK: number, allowed: Uint8Array | undefined): TopK {
    this.kernels.scanF32(this.queryAt, this.floatsAt, this.count, this.stride * 4, this.scoresAt);
    const scores = this.view.scores;
    const best = new TopK(topK);
    let floor = best.floor;
    const groupOf = this.groupOf;
    for (let i = 0; i < this.count; i++) {
      const s = scores[i]!;
      if (s > floor && (!allowed || allowed[groupOf[i]!])) {
        best.push(s, i);
        floor = best.floor;
      }
    }
    return best;
  }

  private scanQuantised(topK: number, allowed: Uint8Array | undefined): TopK {
    this.kernels.scanI8(this.query16At, this.codesAt, this.count, this.stride, this.scoresAt);
    const iscores = this.view.iscores;
    const scales = this.scales;
    const groupOf = this.groupOf;
    const candidates = new TopK(Math.max(64, topK * this.rerankFactor));
    let floor = candidates.floor;
    for (let i = 0; i < this.count; i++) {
      const s = iscores[i]! * scales[i]!;
      if (s > floor && (!allowed || allowed[groupOf[i]!])) {
        candidates.push(s, i);
        floor = candidates.floor;
      }
    }
    const best = new TopK(topK);
    for (const { slot } of candidates.sorted()) best.push(this.dot(slot), slot);
    return best;
  }

  private scanSubset(topK: number, allowed: Uint8Array): TopK {
    const best = new TopK(topK);
    const groupOf = this.groupOf;
    for (let i = 0; i < this.count; i++) if (allowed[groupOf[i]!]) best.push(this.dot(i), i);
    return best;
  }

  /** The float dot product of the stored query with row `slot`. */
  private dot(slot: number): number {
    const { floats, query } = this.view;
    const base = slot * this.stride;
    let a0 = 0;
    let a1 = 0;
    let a2 = 0;
    let a3 = 0;
    for (let j = 0; j < this.stride; j += 4) {
      a0 += query[j]! * floats[base + j]!;
      a1 += query[j + 1]! * floats[base + j + 1]!;
      a2 += query[j + 2]! * floats[base + j + 2]!;
      a3 += query[j + 3]! * floats[base + j + 3]!;
    }
    return a0 + a1 + a2 + a3;
  }

  private groupFor(meta: VectorMeta): number {
    const scopes = [...new Set(meta.scopes)].sort();
    const key = `${meta.corpus}\u0001${scopes.join('\u0000')}`;
    let group = this.groupByKey.get(key);
    if (group === undefined) {
      group = this.groups.length;
      this.groups.push({ corpus: meta.corpus, scopes: new Set(scopes), rows: 0 });
      this.groupByKey.set(key, group);
    }
    return group;
  }

  private slabBytes(capacity: number): number {
    return this.scoresAt + capacity * 4 + capacity * this.stride * 5;
  }

  private bytesFor(capacity: number): number {
    return Math.ceil(this.slabBytes(capacity) / PAGE) * PAGE + capacity * SIDE_BYTES_PER_ROW;
  }

  private layout(capacity: number): void {
    this.floatsAt = this.scoresAt + capacity * 4;
    this.codesAt = this.floatsAt + capacity * this.stride * 4;
  }

  /** Grows to hold at least `rows` (by half at least), moving the row regions up in place. */
  private grow(rows: number): void {
    const capacity = roundUp(Math.max(rows, Math.ceil(this.capacity * 1.5)), 4);
    const pages = Math.ceil(this.slabBytes(capacity) / PAGE) - this.memory.buffer.byteLength / PAGE;
    this.beforeGrow?.(this.bytesFor(capacity) - this.bytes);
    const oldFloats = this.floatsAt;
    const oldCodes = this.codesAt;
    if (pages > 0) this.memory.grow(pages);
    this.layout(capacity);
    const bytes = new Uint8Array(this.memory.buffer);
    // The codes move furthest, so they go first; copyWithin copies as if through a buffer.
    bytes.copyWithin(this.codesAt, oldCodes, oldCodes + this.count * this.stride);
    bytes.copyWithin(this.floatsAt, oldFloats, oldFloats + this.count * this.stride * 4);
    const ids = new Float64Array(capacity);
    ids.set(this.ids);
    const scales = new Float32Array(capacity);
    scales.set(this.scales);
    const groupOf = new Uint32Array(capacity);
    groupOf.set(this.groupOf);
    this.ids = ids;
    this.scales = scales;
    this.groupOf = groupOf;
    this.capacity = capacity;
    this.refreshViews();
  }

  private refreshViews(): void {
    const buffer = this.memory.buffer;
    this.view = {
      buffer,
      floats: new Float32Array(buffer, this.floatsAt, this.capacity * this.stride),
      codes: new Int8Array(buffer, this.codesAt, this.capacity * this.stride),
      scores: new Float32Array(buffer, this.scoresAt, this.capacity),
      iscores: new Int32Array(buffer, this.scoresAt, this.capacity),
      query: new Float32Array(buffer, this.queryAt, this.stride),
      query16: new Int16Array(buffer, this.query16At, this.stride),
    };
  }
}

function roundUp(value: number, multiple: number): number {
  return Math.ceil(value / multiple) * multiple;
}

function l2(vector: Float32Array | readonly number[]): number {
  let sum = 0;
  for (let j = 0; j < vector.length; j++) sum += vector[j]! * vector[j]!;
  return Math.sqrt(sum);
}
