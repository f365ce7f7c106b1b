/**
 * What the hub needs from an embedding model: texts in, one vector each out, in order. Two
 * implementations: the offline sentence encoder shipped with the hub (`local`, no network at all)
 * and any OpenAI-compatible embeddings endpoint (`openai`). Everything downstream (the vector index
 * sizes its rows by `dimensions`) depends on this port only.
 *
 * Contract: `embed` answers exactly one Float32Array per text, in the order given, each of length
 * `dimensions` and of unit L2 length (so a dot product is the cosine similarity), or rejects with
 * EmbeddingUnavailable; it never answers a partial or malformed result.
 */
export interface EmbeddingPort {
  /** 'local' | 'openai' */
  readonly provider: string;
  readonly model: string;
  readonly dimensions: number;
  /** Batches it embeds at once (the local model's worker threads); callers hand it that many batches a call. Default 1. */
  readonly parallelism?: number;
  /** `signal`: whoever waits went away; a model behind a network call stops it and throws the signal's reason (the local model finishes the batch). */
  embed(texts: string[], signal?: AbortSignal): Promise<Float32Array[]>;
}

/** `values` scaled to unit L2 length as a new Float32Array; undefined when it has no direction (zero, NaN, infinite). */
export function unitVector(values: ArrayLike<number>): Float32Array | undefined {
  let sum = 0;
  for (let j = 0; j < values.length; j++) {
    const v = values[j]!;
    if (typeof v !== 'number' || !Number.isFinite(v)) return undefined;
    sum += v * v;
  }
  const norm = Math.sqrt(sum);
  if (!(norm > 0) || !Number.isFinite(norm)) return undefined;
  const out = new Float32Array(values.length);
  for (let j = 0; j < values.length; j++) out[j] = values[j]! / norm;
  return out;
}

/** How a vector's model is recorded beside it (`local:universal-sentence-encoder-lite`): vectors of two models are never compared. */
export function modelName(port: Pick<EmbeddingPort, 'provider' | 'model'>): string {
  return `${port.provider}:${port.model}`;
}
