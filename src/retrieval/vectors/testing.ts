/**
 * Vectors for tests and the search benchmark: a seeded generator (so a failure can be replayed),
 * random unit vectors (the hard case for any index: no structure), clustered unit vectors (what
 * sentence embeddings look like: topics as directions, chunks scattered around them), and the
 * brute-force reference every search is checked against.
 */

/** A seeded uniform generator in [0, 1) (mulberry32). */
export function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A standard normal sample (Box–Muller). */
export function gaussian(random: () => number): number {
  const u = 1 - random();
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * random());
}

export function normalise(vector: Float32Array): Float32Array {
  let sum = 0;
  for (const v of vector) sum += v * v;
  const norm = Math.sqrt(sum);
  for (let j = 0; j < vector.length; j++) vector[j] = vector[j]! / norm;
  return vector;
}

/** `count` random unit vectors (directions uniform on the sphere). */
export function randomUnitVectors(count: number, dimensions: number, random: () => number): Float32Array[] {
  return Array.from({ length: count }, () => normalise(Float32Array.from({ length: dimensions }, () => gaussian(random))));
}

/**
 * `count` unit vectors around `clusters` random centres: each is centre + noise of relative size
 * `spread`, normalised. With spread ≈ 1 neighbours within a cluster have cosine ≈ 0.5, as sentence
 * embeddings of one topic do.
 */
export function clusteredUnitVectors(count: number, dimensions: number, clusters: number, spread: number, random: () => number): Float32Array[] {
  const centres = randomUnitVectors(clusters, dimensions, random);
  const sigma = spread / Math.sqrt(dimensions);
  return Array.from({ length: count }, () => {
    const centre = centres[Math.floor(random() * clusters)]!;
    return normalise(Float32Array.from(centre, (c) => c + sigma * gaussian(random)));
  });
}

/** The exact answer: every admitted vector scored in double precision, best `topK` first. */
export function bruteForce(vectors: ReadonlyArray<{ id: number; vector: Float32Array }>, query: Float32Array, topK: number, admit: (id: number) => boolean = () => true): Array<{ id: number; similarity: number }> {
  const q = normalise(Float32Array.from(query));
  const scored: Array<{ id: number; similarity: number }> = [];
  for (const { id, vector } of vectors) {
    if (!admit(id)) continue;
    let dot = 0;
    let norm = 0;
    for (let j = 0; j < q.length; j++) {
      dot += q[j]! * vector[j]!;
      norm += vector[j]! * vector[j]!;
    }
    scored.push({ id, similarity: dot / Math.sqrt(norm) });
  }
  return scored.sort((a, b) => b.similarity - a.similarity || a.id - b.id).slice(0, topK);
}

/** The share of the reference's ids the answer found. */
export function recall(answer: ReadonlyArray<{ id: number }>, reference: ReadonlyArray<{ id: number }>): number {
  if (reference.length === 0) return 1;
  const found = new Set(answer.map((h) => h.id));
  return reference.filter((h) => found.has(h.id)).length / reference.length;
}
