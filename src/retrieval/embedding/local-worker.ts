import { parentPort } from 'node:worker_threads';
import { loadEncoder } from './local-model.js';

/**
 * The worker thread of the local embedding provider (local.ts): runs the sentence encoder off the
 * main thread, so embedding (≈ 10 ms of CPU per short text) never stalls the event loop that serves
 * HTTP. Protocol: `{id, texts}` in, `{id, vectors}` (buffers transferred) or `{id, error}` out.
 */

export interface EmbedRequest {
  id: number;
  texts: string[];
}

export type EmbedResponse = { id: number; vectors: Float32Array[] } | { id: number; error: string };

const port = parentPort;
if (!port) throw new Error('local-worker.ts runs as a worker thread only');

port.on('message', (request: EmbedRequest) => {
  loadEncoder()
    .then((encode) => encode(request.texts))
    .then(
      (vectors) => port.postMessage({ id: request.id, vectors } satisfies EmbedResponse, vectors.map((v) => v.buffer as ArrayBuffer)),
      (err: unknown) => port.postMessage({ id: request.id, error: err instanceof Error ? err.message : String(err) } satisfies EmbedResponse),
    );
});
