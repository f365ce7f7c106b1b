import { type Agent, request } from 'undici';
import { egressAgent } from '../egress/dispatcher.js';
import { describeNetworkError } from '../egress/network-error.js';
import { EgressPolicy } from '../egress/policy.js';
import { type AttemptOutcome, RESPONSE_BODY_MAX } from './model.js';

/**
 * One HTTP POST of a delivery attempt, with undici: `connectTimeoutMs` to connect, `timeoutMs` for
 * the exchange (waiting for the response head, then between body chunks, and the whole exchange at
 * most connect + exchange), redirects not followed (a 3xx is an unsuccessful answer), and only the
 * start of the response body read and kept (RESPONSE_BODY_MAX characters). Never throws: every
 * failure becomes an outcome with `error`.
 */

export interface SenderOptions {
  connectTimeoutMs: number;
  timeoutMs: number;
  /** The outbound address policy every connection passes (default: none, for tests of other parts). */
  egress?: EgressPolicy;
  userAgent: string;
}

/** Bytes read at most: enough for RESPONSE_BODY_MAX characters of UTF-8. */
const READ_MAX_BYTES = RESPONSE_BODY_MAX * 4;

export class WebhookSender {
  private readonly agent: Agent;

  constructor(private readonly options: SenderOptions) {
    this.agent = egressAgent(options.egress ?? EgressPolicy.open(), {
      connectTimeoutMs: options.connectTimeoutMs,
      headersTimeout: options.timeoutMs,
      bodyTimeout: options.timeoutMs,
      keepAliveTimeout: 4_000,
    });
  }

  async send(url: string, headers: Record<string, string>, body: string, signal?: AbortSignal): Promise<AttemptOutcome> {
    const attemptedAt = new Date();
    const started = performance.now();
    const elapsed = () => Math.round(performance.now() - started);
    const fail = (error: string, httpStatus: number | null = null, responseBody: string | null = null): AttemptOutcome => ({
      ok: false,
      httpStatus,
      responseBody,
      error,
      durationMs: elapsed(),
      attemptedAt,
    });
    const limit = this.options.connectTimeoutMs + this.options.timeoutMs;
    const overall = new AbortController();
    const timer = setTimeout(() => overall.abort(new ExchangeTimeout(limit)), limit);
    const onAbort = () => overall.abort(signal?.reason ?? new Error('aborted'));
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const res = await request(url, {
        method: 'POST',
        headers: { 'User-Agent': this.options.userAgent, ...headers },
        body,
        dispatcher: this.agent,
        signal: overall.signal,
      });
      let text: string;
      try {
        text = await readStart(res.body);
      } catch {
        text = '';
      }
      const ok = res.statusCode >= 200 && res.statusCode < 300;
      return { ok, httpStatus: res.statusCode, responseBody: truncate(text), error: null, durationMs: elapsed(), attemptedAt };
    } catch (err) {
      return fail(describe(err, this.options, overall.signal.reason));
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    }
  }

  async close(): Promise<void> {
    await this.agent.destroy().catch(() => undefined);
  }
}

class ExchangeTimeout extends Error {
  constructor(readonly ms: number) {
    super(`no complete answer within ${ms} ms`);
  }
}

/** The first READ_MAX_BYTES of a body as text; the rest is not read (the connection is dropped). */
async function readStart(body: AsyncIterable<Buffer> & { destroy(err?: Error): unknown }): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    chunks.push(chunk);
    size += chunk.length;
    if (size >= READ_MAX_BYTES) {
      body.destroy();
      break;
    }
  }
  return new TextDecoder('utf-8', { fatal: false }).decode(Buffer.concat(chunks).subarray(0, READ_MAX_BYTES));
}

/** The first RESPONSE_BODY_MAX characters (code points, so no pair of a character is cut in two). */
export function truncate(text: string): string {
  if (text.length <= RESPONSE_BODY_MAX) return text;
  const points = Array.from(text);
  return points.length <= RESPONSE_BODY_MAX ? text : points.slice(0, RESPONSE_BODY_MAX).join('');
}

function describe(err: unknown, options: SenderOptions, abortReason: unknown): string {
  if (abortReason instanceof ExchangeTimeout) return `timeout: ${abortReason.message}`;
  return describeNetworkError(err, { connectTimeoutMs: options.connectTimeoutMs, timeoutMs: options.timeoutMs });
}
