import type OpenAI from 'openai';
import { APIConnectionError, APIConnectionTimeoutError, APIError } from 'openai';
import type { Agent } from 'undici';
import { egressAgent } from '../../egress/dispatcher.js';
import { describeNetworkError } from '../../egress/network-error.js';
import { type EgressPolicy, egressDenial } from '../../egress/policy.js';
import { ModelAnswerRefused, openAiClient, quotedErrorText, withinTimeLimit } from '../openai-client.js';
import { EmbeddingUnavailable } from './errors.js';
import { type EmbeddingPort, unitVector } from './port.js';

export interface OpenAiEmbeddingOptions {
  /** The API root, e.g. `https://api.openai.com/v1` or `http://ollama.internal:11434/v1`; `/embeddings` is appended. */
  baseUrl: string;
  model: string;
  apiKey: string;
  /**
   * The vector length to ask for and to insist on. Sent as `dimensions` (models that can shorten
   * their output, such as text-embedding-3-*, do); required for models this file does not know.
   */
  dimensions?: number;
  /** Every connection passes it (the hub's outbound address policy). */
  egress: EgressPolicy;
  /** Connect timeout (default 10 s). */
  connectTimeoutMs?: number;
  /** Per request: waiting for the answer and reading it (default 30 s). */
  timeoutMs?: number;
  /**
   * Retries of a request that got no answer, a 429 or a 5xx, with the client's backoff (default 2):
   * within the request's time (connect timeout + timeout), which bounds the whole call.
   */
  maxRetries?: number;
  /** Texts per request (default 128; OpenAI takes up to 2048). */
  batchSize?: number;
}

/**
 * The most bytes of an answer read, per number a batch's vectors hold: a float as JSON text is at
 * most 24 characters (`-1.2345678901234567e-05`), with its comma and a pretty-printer's newline and
 * indentation about 36; 64 is well above it.
 */
const BYTES_PER_NUMBER = 64;
/** …plus the answer's envelope (object names, indexes, usage, a server's extras). */
const ANSWER_ENVELOPE_BYTES = 1024 * 1024;

/** The most bytes of an embeddings answer read for `batchSize` texts of `dimensions` numbers each. */
export function maxEmbeddingAnswerBytes(batchSize: number, dimensions: number): number {
  return batchSize * dimensions * BYTES_PER_NUMBER + ANSWER_ENVELOPE_BYTES;
}

/** Output lengths of well-known models, for when `dimensions` is not configured. */
const KNOWN_DIMENSIONS: Record<string, number> = {
  'text-embedding-3-small': 1536,
  'text-embedding-3-large': 3072,
  'text-embedding-ada-002': 1536,
};

/**
 * Embeddings from any OpenAI-compatible endpoint, through the `openai` client with a `fetch` of
 * our own: undici with the egress dispatcher, so the endpoint's address passes the outbound
 * policy like every other request the hub makes (a self-hosted model on a private address must be
 * allow-listed). Floats are asked for explicitly (`encoding_format: "float"`): compatible servers
 * do not all speak the client's default base64. Every answer is checked (count, order by `index`,
 * length, numbers) and normalised; anything else is an EmbeddingUnavailable (503).
 */
export class OpenAiEmbedding implements EmbeddingPort {
  readonly provider = 'openai';
  readonly model: string;
  readonly dimensions: number;
  private readonly requestDimensions: number | undefined;
  private readonly batchSize: number;
  private readonly agent: Agent;
  private readonly client: OpenAI;
  private readonly timeouts: { connectTimeoutMs: number; timeoutMs: number };
  private readonly maxRetries: number;
  /** The most bytes of one answer read (maxEmbeddingAnswerBytes of a full batch). */
  private readonly maxAnswerBytes: number;
  /** Masked wherever the endpoint's own text is quoted. */
  private readonly apiKey: string;

  constructor(options: OpenAiEmbeddingOptions) {
    const dimensions = options.dimensions ?? KNOWN_DIMENSIONS[options.model];
    if (!dimensions || !Number.isInteger(dimensions) || dimensions <= 0) {
      throw new RangeError(`the embedding model ${options.model} needs its dimensions configured (a positive integer)`);
    }
    this.model = options.model;
    this.dimensions = dimensions;
    this.requestDimensions = options.dimensions;
    this.apiKey = options.apiKey;
    this.batchSize = Math.max(1, options.batchSize ?? 128);
    this.maxAnswerBytes = maxEmbeddingAnswerBytes(this.batchSize, dimensions);
    this.timeouts = { connectTimeoutMs: options.connectTimeoutMs ?? 10_000, timeoutMs: options.timeoutMs ?? 30_000 };
    this.agent = egressAgent(options.egress, {
      connectTimeoutMs: this.timeouts.connectTimeoutMs,
      headersTimeout: this.timeouts.timeoutMs,
      bodyTimeout: this.timeouts.timeoutMs,
    });
    this.client = openAiClient({
      baseUrl: options.baseUrl,
      apiKey: options.apiKey,
      timeoutMs: this.timeouts.connectTimeoutMs + this.timeouts.timeoutMs,
      maxAnswerBytes: this.maxAnswerBytes,
      dispatcher: this.agent,
    });
    this.maxRetries = options.maxRetries ?? 2;
  }

  async embed(texts: string[], signal?: AbortSignal): Promise<Float32Array[]> {
    const out: Float32Array[] = [];
    for (let start = 0; start < texts.length; start += this.batchSize) {
      out.push(...(await this.embedBatch(texts.slice(start, start + this.batchSize), signal)));
    }
    return out;
  }

  /** Closes the connections this client keeps open. */
  async close(): Promise<void> {
    await this.agent.close().catch(() => undefined);
  }

  private async embedBatch(texts: string[], signal?: AbortSignal): Promise<Float32Array[]> {
    let answer: unknown;
    try {
      const body = { model: this.model, input: texts, encoding_format: 'float' as const, ...(this.requestDimensions === undefined ? {} : { dimensions: this.requestDimensions }) };
      // Retries included, the call ends within the request's time.
      answer = await withinTimeLimit({ timeoutMs: this.timeouts.connectTimeoutMs + this.timeouts.timeoutMs, maxRetries: this.maxRetries, signal }, (attempt) =>
        this.client.embeddings.create(body, attempt),
      );
    } catch (err) {
      if (signal?.aborted) throw signal.reason;
      throw this.failure(err);
    }
    return this.vectors(answer, texts.length);
  }

  /** The answer's vectors in input order, checked and normalised. */
  private vectors(answer: unknown, count: number): Float32Array[] {
    const data = typeof answer === 'object' && answer !== null ? (answer as { data?: unknown }).data : undefined;
    if (!Array.isArray(data)) throw new EmbeddingUnavailable('answer', `the embedding endpoint answered no data array (${describe(answer)})`);
    if (data.length !== count) throw new EmbeddingUnavailable('answer', `the embedding endpoint answered ${data.length} vectors for ${count} texts`);
    const out = new Array<Float32Array | undefined>(count);
    data.forEach((item: unknown, position) => {
      const { embedding, index } = (typeof item === 'object' && item !== null ? item : {}) as { embedding?: unknown; index?: unknown };
      const slot = typeof index === 'number' ? index : position;
      if (!Number.isInteger(slot) || slot < 0 || slot >= count || out[slot]) {
        throw new EmbeddingUnavailable('answer', `the embedding endpoint answered a vector with index ${String(index)} for ${count} texts`);
      }
      if (!Array.isArray(embedding)) throw new EmbeddingUnavailable('answer', `the embedding endpoint answered no embedding array at index ${slot}`);
      if (embedding.length !== this.dimensions) {
        throw new EmbeddingUnavailable('dimensions', `the embedding model ${this.model} answered ${embedding.length} dimensions, ${this.dimensions} are configured`);
      }
      const unit = unitVector(embedding as number[]);
      if (!unit) throw new EmbeddingUnavailable('answer', `the embedding endpoint answered a vector at index ${slot} that is not numbers with a direction`);
      out[slot] = unit;
    });
    return out as Float32Array[];
  }

  private failure(err: unknown): EmbeddingUnavailable {
    const denied = egressDenial(err);
    if (denied) return new EmbeddingUnavailable('refused', `embedding endpoint: ${denied.message}`, { cause: err });
    if (err instanceof ModelAnswerRefused && err.reason === 'size') {
      return new EmbeddingUnavailable(
        'oversized',
        `the embedding endpoint answered more than ${err.limit} bytes for at most ${this.batchSize} texts of ${this.dimensions} dimensions; the hub stopped reading it`,
        { cause: err },
      );
    }
    if (err instanceof APIConnectionTimeoutError || err instanceof ModelAnswerRefused) {
      return new EmbeddingUnavailable('unreachable', `the embedding endpoint did not answer within ${this.timeouts.connectTimeoutMs + this.timeouts.timeoutMs} ms`, { cause: err });
    }
    if (err instanceof APIConnectionError) {
      return new EmbeddingUnavailable('unreachable', `the embedding endpoint is unreachable: ${describeNetworkError(rootCause(err), this.timeouts)}`, { cause: err });
    }
    if (err instanceof APIError && typeof err.status === 'number') {
      // The endpoint's own error text, its start only (a server may send megabytes of it), without the key should it echo it.
      const text = err.message ? `: ${quotedErrorText(err.message, this.apiKey)}` : '';
      return new EmbeddingUnavailable('status', `the embedding endpoint answered HTTP ${err.status}${text}`, { cause: err, httpStatus: err.status });
    }
    // The client parses a JSON content type itself; a body that is not JSON ends here as a SyntaxError.
    return new EmbeddingUnavailable('answer', `the embedding endpoint answered something unreadable: ${quotedErrorText(err instanceof Error ? err.message : String(err), this.apiKey)}`, { cause: err });
  }
}

/** The innermost `cause` (the client wraps undici's error, which wraps the socket's). */
function rootCause(err: unknown): unknown {
  let current = err;
  for (let depth = 0; depth < 4; depth++) {
    const cause = typeof current === 'object' && current !== null ? (current as { cause?: unknown }).cause : undefined;
    if (cause === undefined || cause === null) break;
    current = cause;
  }
  return current;
}

function describe(value: unknown, max = 80): string {
  const text = typeof value === 'string' ? value : JSON.stringify(value);
  return text === undefined ? String(value) : text.length > max ? `${text.slice(0, max)}…` : text;
}
