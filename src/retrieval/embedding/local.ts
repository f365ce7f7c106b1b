import { setTimeout as sleep } from 'node:timers/promises';
import type { Worker } from 'node:worker_threads';
import { startWorker } from '../../runtime/worker-thread.js';
import { EmbeddingUnavailable } from './errors.js';
import { LOCAL_DIMENSIONS, LOCAL_MODEL, loadEncoder } from './local-model.js';
import type { EmbedRequest, EmbedResponse } from './local-worker.js';
import type { EmbeddingPort } from './port.js';

export interface LocalEmbeddingOptions {
  /** Texts per model call (default 32): larger batches are slightly faster and hold the CPU longer. */
  batchSize?: number;
  /**
   * `worker` (default): the model runs in a worker thread, so the event loop stays free while it
   * computes. `in-thread`: on the calling thread, yielding to the event loop between batches only
   * (each batch still blocks it for its whole duration: ≈ 0.25 s for 32 short texts).
   */
  mode?: 'worker' | 'in-thread';
  /**
   * Worker threads (default 1), each with its own copy of the model: the batches of one call are
   * shared among them, so N threads embed up to N times as fast on N idle cores (and take N cores
   * while they do). Ignored in-thread.
   */
  threads?: number;
}

interface Backend {
  encode(texts: string[]): Promise<Float32Array[]>;
  close(): Promise<void>;
}

/**
 * Embeddings from the sentence encoder shipped with the hub (Universal Sentence Encoder lite,
 * 512 dimensions, English): no network, no key, nothing to configure. Loaded lazily on the first
 * call, once. It is CPU-bound (of the order of 100 short texts a second per core), so by default it
 * runs in a worker thread; see docs/retrieval-vectors.md for the measurements.
 */
export class LocalEmbedding implements EmbeddingPort {
  readonly provider = 'local';
  readonly model = LOCAL_MODEL;
  readonly dimensions = LOCAL_DIMENSIONS;
  private readonly batchSize: number;
  private readonly backends: Backend[];
  readonly parallelism: number;

  constructor(options: LocalEmbeddingOptions = {}) {
    this.batchSize = Math.max(1, options.batchSize ?? 32);
    const threads = Math.max(1, Math.floor(options.threads ?? 1));
    this.backends = options.mode === 'in-thread' ? [new InThread()] : Array.from({ length: threads }, () => new InWorker());
    this.parallelism = this.backends.length;
  }

  /** Worker threads running now (tests). */
  get threadsStarted(): number {
    return this.backends.filter((b) => b instanceof InWorker && b.started).length;
  }

  /**
   * The texts in batches of `batchSize`; each backend takes the next batch when it is done with
   * one, and the vectors are put back in the texts' order. A second thread is only started for a
   * call of more than one batch.
   */
  async embed(texts: string[]): Promise<Float32Array[]> {
    const out = new Array<Float32Array>(texts.length);
    const starts: number[] = [];
    for (let start = 0; start < texts.length; start += this.batchSize) starts.push(start);
    let next = 0;
    const lane = async (backend: Backend) => {
      for (let i = next++; i < starts.length; i = next++) {
        // A timer, not setImmediate: the loop's timers and I/O get their turn between batches.
        if (i > 0) await sleep(0);
        const start = starts[i]!;
        let vectors: Float32Array[];
        try {
          vectors = await backend.encode(texts.slice(start, start + this.batchSize));
        } catch (err) {
          throw err instanceof EmbeddingUnavailable ? err : new EmbeddingUnavailable('model', `the local sentence encoder failed: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
        }
        for (const [j, v] of vectors.entries()) out[start + j] = v;
      }
    };
    await Promise.all(this.backends.slice(0, Math.max(1, Math.min(this.backends.length, starts.length))).map(lane));
    return out;
  }

  /** Stops the worker threads (a later call starts them again). */
  async close(): Promise<void> {
    await Promise.all(this.backends.map((b) => b.close()));
  }
}

class InThread implements Backend {
  async encode(texts: string[]): Promise<Float32Array[]> {
    return (await loadEncoder())(texts);
  }

  async close(): Promise<void> {}
}

/** The worker: started on first use (startWorker: local-worker.ts or .js), the model loaded in it once. */
class InWorker implements Backend {
  /**
   * The worker running now and the calls waiting for its answers: each worker its own, so a worker that stops (closed,
   * or failed) fails its own calls only, never those of the worker started after it (a call made while it closed).
   */
  private current: { worker: Worker; pending: Map<number, Waiting> } | undefined;
  private nextId = 1;

  get started(): boolean {
    return this.current !== undefined;
  }

  encode(texts: string[]): Promise<Float32Array[]> {
    const { worker, pending } = this.start();
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      pending.set(id, { resolve, reject });
      worker.ref();
      worker.postMessage({ id, texts } satisfies EmbedRequest);
    });
  }

  async close(): Promise<void> {
    const closing = this.current;
    this.current = undefined;
    // Its calls are failed by its exit.
    if (closing) await closing.worker.terminate();
  }

  private start(): { worker: Worker; pending: Map<number, Waiting> } {
    if (this.current) return this.current;
    const worker = startWorker(import.meta.url, './local-worker');
    const pending = new Map<number, Waiting>();
    const current = { worker, pending };
    worker.on('message', (response: EmbedResponse) => {
      const waiting = pending.get(response.id);
      if (!waiting) return;
      pending.delete(response.id);
      if ('error' in response) waiting.reject(new EmbeddingUnavailable('model', `the local sentence encoder failed: ${response.error}`));
      // Copied into this thread's own Float32Array (2 KiB a text): what arrives was made by the
      // structured clone in the main realm, which a test runner's sandbox does not share.
      else waiting.resolve(response.vectors.map((v) => Float32Array.from(v)));
      if (pending.size === 0) worker.unref();
    });
    const fail = (err: Error) => {
      if (this.current === current) this.current = undefined;
      for (const { reject } of pending.values()) reject(new EmbeddingUnavailable('model', `the local sentence encoder's worker stopped: ${err.message}`, { cause: err }));
      pending.clear();
    };
    worker.on('error', fail);
    worker.on('exit', (code) => fail(new Error(`exit code ${code}`)));
    this.current = current;
    return current;
  }
}

interface Waiting {
  resolve: (v: Float32Array[]) => void;
  reject: (e: Error) => void;
}
