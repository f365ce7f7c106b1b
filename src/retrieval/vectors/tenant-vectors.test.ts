import { describe, expect, it } from '@jest/globals';
import { TenantVectors, type VectorFilter, type VectorMeta } from './tenant-vectors.js';
import { bruteForce, clusteredUnitVectors, randomUnitVectors, recall, seeded } from './testing.js';

const CORPORA = ['tickets', 'wiki', 'mail'];
const SCOPES = ['sales', 'support', 'legal', 'hr', 'ops'];

interface Row {
  id: number;
  vector: Float32Array;
  meta: VectorMeta;
}

function rows(vectors: Float32Array[], random: () => number, firstId = 1): Row[] {
  return vectors.map((vector, i) => ({
    id: firstId + i * 3,
    vector,
    meta: { corpus: CORPORA[Math.floor(random() * CORPORA.length)]!, scopes: SCOPES.filter(() => random() < 0.3) },
  }));
}

function admits(filter: VectorFilter, byId: Map<number, Row>) {
  return (id: number) => {
    const { meta } = byId.get(id)!;
    if (filter.corpora && !filter.corpora.includes(meta.corpus)) return false;
    if (filter.scopes && !filter.scopes.some((s) => meta.scopes.includes(s))) return false;
    return true;
  };
}

function filled(data: Row[], options: Partial<ConstructorParameters<typeof TenantVectors>[0]> = {}): TenantVectors {
  const index = new TenantVectors({ dimensions: data[0]!.vector.length, initialCapacity: 4, ...options });
  for (const row of data) index.add(row.id, row.vector, row.meta);
  return index;
}

const ids = (hits: Array<{ id: number }>) => hits.map((h) => h.id);

describe('TenantVectors, exact float path', () => {
  it.each([512, 37])('answers the same top 10 as brute force (%i dimensions, rows padded to 16)', (dims) => {
    const random = seeded(dims);
    const data = rows(randomUnitVectors(1500, dims, random), random);
    const index = filled(data);
    expect(index.size).toBe(1500);
    for (const query of randomUnitVectors(20, dims, random)) {
      const got = index.search(query, 10);
      const want = bruteForce(data, query, 10);
      expect(ids(got)).toEqual(ids(want));
      for (const [i, hit] of got.entries()) expect(hit.similarity).toBeCloseTo(want[i]!.similarity, 5);
    }
  });

  it('normalises what it stores and what it is asked: scaled vectors give the same answer and similarity 1 for themselves', () => {
    const random = seeded(3);
    const data = rows(randomUnitVectors(200, 64, random), random);
    const index = new TenantVectors({ dimensions: 64 });
    for (const row of data) index.add(row.id, row.vector.map((v) => v * 7.5), row.meta);
    const target = data[17]!;
    const [first] = index.search(target.vector.map((v) => v * 0.01), 1);
    expect(first!.id).toBe(target.id);
    expect(first!.similarity).toBeCloseTo(1, 5);
  });

  it('refuses a vector of the wrong length or without direction', () => {
    const index = new TenantVectors({ dimensions: 8 });
    expect(() => index.add(1, new Float32Array(7), { corpus: 'c', scopes: [] })).toThrow(/7 dimensions, the index 8/);
    expect(() => index.add(1, new Float32Array(8), { corpus: 'c', scopes: [] })).toThrow(/no direction/);
    expect(() => index.search(new Float32Array(9), 3)).toThrow(/9 dimensions/);
    expect(index.size).toBe(0);
  });
});

describe('TenantVectors, int8 scan with float re-rank', () => {
  it.each([
    ['random', (r: () => number) => randomUnitVectors(6000, 256, r)],
    ['clustered', (r: () => number) => clusteredUnitVectors(6000, 256, 40, 1, r)],
  ] as const)('finds at least 95%% of the true top 10 on %s vectors, with the float similarities', (_name, make) => {
    const random = seeded(11);
    const data = rows(make(random), random);
    const index = filled(data, { quantiseFrom: 0 });
    let total = 0;
    const queries = randomUnitVectors(10, 256, random).concat(data.slice(0, 10).map((r) => r.vector));
    for (const query of queries) {
      const got = index.search(query, 10);
      const want = bruteForce(data, query, 10);
      total += recall(got, want);
      const exact = new Map(bruteForce(data, query, data.length).map((h) => [h.id, h.similarity]));
      for (const hit of got) expect(hit.similarity).toBeCloseTo(exact.get(hit.id)!, 5);
    }
    expect(total / queries.length).toBeGreaterThanOrEqual(0.95);
  });
});

describe('TenantVectors, filters before ranking', () => {
  const random = seeded(5);
  const data = rows(randomUnitVectors(3000, 64, random), random);
  const byId = new Map(data.map((r) => [r.id, r]));
  const filters: VectorFilter[] = [
    { corpora: ['wiki'] },
    { scopes: ['legal'] },
    { corpora: ['tickets', 'mail'], scopes: ['hr', 'ops'] },
    { scopes: ['sales', 'support', 'legal', 'hr', 'ops'] },
  ];
  const paths = [
    ['subset scan', { subsetUpTo: 1_000_000 }],
    ['float scan', { subsetUpTo: 0 }],
    ['int8 scan', { subsetUpTo: 0, quantiseFrom: 0 }],
  ] as const;

  it.each(paths)('%s: a filtered search answers the top 25 of the matching rows only, 25 of them', (_name, options) => {
    const index = filled(data, options);
    for (const filter of filters) {
      for (const query of randomUnitVectors(5, 64, random)) {
        const got = index.search(query, 25, filter);
        const want = bruteForce(data, query, 25, admits(filter, byId));
        expect(got).toHaveLength(25);
        expect(got.every((h) => admits(filter, byId)(h.id))).toBe(true);
        expect(recall(got, want)).toBeGreaterThanOrEqual(options === paths[2][1] ? 0.9 : 1);
      }
    }
  });

  it('answers fewer than topK when fewer rows match, and nothing for an empty list or an unknown corpus', () => {
    const index = filled(data);
    const query = randomUnitVectors(1, 64, random)[0]!;
    const rare = data.filter((r) => r.meta.corpus === 'wiki' && r.meta.scopes.includes('legal') && r.meta.scopes.includes('hr'));
    const narrow = data.filter((r) => r.meta.scopes.length === 0).length;
    expect(index.search(query, 5000, { scopes: [] })).toEqual([]);
    expect(index.search(query, 5000, { corpora: [] })).toEqual([]);
    expect(index.search(query, 10, { corpora: ['nowhere'] })).toEqual([]);
    const wikiLegal = index.search(query, 5000, { corpora: ['wiki'], scopes: ['legal'] });
    expect(wikiLegal.length).toBe(data.filter((r) => r.meta.corpus === 'wiki' && r.meta.scopes.includes('legal')).length);
    expect(rare.length).toBeGreaterThan(0);
    // Rows without scopes never match a scope filter, and are found without one.
    expect(narrow).toBeGreaterThan(0);
    expect(index.search(query, 5000, { scopes: SCOPES }).length).toBe(data.length - narrow);
    expect(index.search(query, 5000).length).toBe(data.length);
  });
});

describe('TenantVectors, remove and replace', () => {
  it('never answers a removed row, still finds the row moved into its place, and matches brute force after churn', () => {
    const random = seeded(9);
    const data = rows(randomUnitVectors(800, 32, random), random);
    const index = filled(data);
    const live = new Map(data.map((r) => [r.id, r]));
    for (const row of data.filter((_r, i) => i % 3 === 0)) {
      expect(index.remove(row.id)).toBe(true);
      live.delete(row.id);
    }
    expect(index.remove(data[0]!.id)).toBe(false);
    expect(index.size).toBe(live.size);
    const last = data[data.length - 1]!;
    expect(index.search(last.vector, 1)[0]!.id).toBe(last.id);
    for (const row of data.filter((_r, i) => i % 3 === 0)) expect(index.has(row.id)).toBe(false);
    // Replace some, add some removed ones back.
    const fresh = randomUnitVectors(50, 32, random);
    for (const [i, row] of data.slice(1, 51).entries()) {
      index.add(row.id, fresh[i]!, row.meta);
      live.set(row.id, { ...row, vector: fresh[i]! });
    }
    expect(index.size).toBe(live.size);
    for (const query of randomUnitVectors(10, 32, random)) {
      expect(ids(index.search(query, 10))).toEqual(ids(bruteForce([...live.values()], query, 10)));
    }
  });

  it('moves a replaced row to its new corpus', () => {
    const index = new TenantVectors({ dimensions: 4 });
    index.add(1, [1, 0, 0, 0], { corpus: 'a', scopes: ['x'] });
    index.add(1, [1, 0, 0, 0], { corpus: 'b', scopes: ['y'] });
    expect(index.size).toBe(1);
    expect(index.search([1, 0, 0, 0], 5, { corpora: ['a'] })).toEqual([]);
    expect(index.search([1, 0, 0, 0], 5, { corpora: ['b'], scopes: ['y'] })).toEqual([{ id: 1, similarity: 1 }]);
  });
});
