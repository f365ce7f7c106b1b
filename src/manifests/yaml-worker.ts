import { parentPort } from 'node:worker_threads';
import { readYamlDocument, readYamlManifest, type YamlRead } from './yaml-body.js';

/**
 * The YAML reading thread (yaml-reader.ts): reads a tenant's YAML off the event loop that serves every tenant.
 * Protocol: `'ready'` out once it listens, then `{id, text, root}` in (`root` naming a manifest body's field, or undefined for another document),
 * `{id, read}` out (`read` undefined when a document that is not a manifest is not YAML), or `{id, error}` when reading
 * failed otherwise.
 */

export interface YamlRequest {
  id: number;
  text: string;
  root: string | undefined;
  /** The most JSON text the value may make (readYamlManifest, readYamlDocument). */
  maxJsonBytes: number;
}

export type YamlResponse = { id: number; read: YamlRead | undefined } | { id: number; error: string };

const port = parentPort;
if (!port) throw new Error('yaml-worker.ts runs as a worker thread only');

port.on('message', (request: YamlRequest) => {
  let response: YamlResponse;
  try {
    response = { id: request.id, read: request.root === undefined ? readYamlDocument(request.text, request.maxJsonBytes) : readYamlManifest(request.text, request.root, request.maxJsonBytes) };
  } catch (err) {
    response = { id: request.id, error: err instanceof Error ? err.message : String(err) };
  }
  port.postMessage(response);
});
// Ready for the first read: what the reader counts a read's time from excludes the thread's start.
port.postMessage('ready');
