import { PortUnavailable } from '../../errors.js';

/**
 * Why an embedding backend gave no usable vectors:
 * - `unreachable`: no answer (connection refused or reset, DNS, timeout);
 * - `refused`: the outbound address policy refuses the endpoint's address;
 * - `status`: the endpoint answered with an HTTP error (bad key, unknown model, its own failure);
 * - `dimensions`: vectors of another length than the model is configured for;
 * - `oversized`: an answer far larger than the vectors asked for (the hub stops reading it): the endpoint's doing, whatever the texts;
 * - `answer`: anything else malformed (not JSON, wrong count, non-numbers, zero vectors);
 * - `model`: the local model failed to load or to run.
 */
export type EmbeddingFailure = 'unreachable' | 'refused' | 'status' | 'dimensions' | 'oversized' | 'answer' | 'model';

const HINTS: Record<EmbeddingFailure, string> = {
  unreachable: 'check that the embedding endpoint is running and reachable from the hub; searches and indexing resume when it answers',
  refused: 'the endpoint is on an address the outbound policy refuses: add it to svc.egress.allow, or use the local embedding provider',
  status: 'check the embedding endpoint’s URL, API key and model name',
  dimensions: 'the configured dimensions must match what the model produces; changing them requires re-embedding every chunk',
  oversized: 'the endpoint answered far more than the vectors asked for: check that svc.embedding.base-url is an OpenAI-compatible embeddings endpoint',
  answer: 'the endpoint does not speak the OpenAI embeddings API (POST /embeddings answering {data: [{embedding, index}]})',
  model: 'the bundled sentence encoder could not run; see the hub’s log',
};

/** HTTP statuses of an embedding endpoint that are about the endpoint (key, address, proxy, rate), never the texts. */
const ENDPOINT_STATUSES = new Set([401, 403, 404, 407, 408, 429]);

/**
 * 503 `{error, hint}`: the embedding backend is unreachable or answered something unusable. Search
 * and indexing cannot proceed without vectors, but nothing is wrong with the caller's request, so
 * it is a dependency failure (503), as the database being away is.
 */
export class EmbeddingUnavailable extends PortUnavailable {
  /** With `status`: the HTTP status the endpoint answered. */
  readonly httpStatus: number | undefined;
  constructor(
    readonly failure: EmbeddingFailure,
    message: string,
    options?: { cause?: unknown; httpStatus?: number },
  ) {
    super(message, HINTS[failure], options);
    this.name = 'EmbeddingUnavailable';
    this.httpStatus = options?.httpStatus;
  }

  /**
   * Whether the failure says nothing about the texts sent (no answer, an address the policy
   * refuses, vectors of another length, an answer far too large, an HTTP status naming the key, the address or the rate: 401,
   * 403, 404, 407, 408, 429): the indexer tries the same batch again later rather than looking for a
   * text the model refuses (src/retrieval/indexer.ts, embedPending).
   */
  get aboutTheEndpoint(): boolean {
    if (this.failure === 'unreachable' || this.failure === 'refused' || this.failure === 'dimensions' || this.failure === 'oversized') return true;
    return this.httpStatus !== undefined && ENDPOINT_STATUSES.has(this.httpStatus);
  }
}
