import OpenAI, { APIConnectionError, APIError } from 'openai';
import { type Dispatcher, Response, fetch as undiciFetch } from 'undici';
import { storableMessage } from '../observability/logger.js';
import { redactSecrets } from '../observability/secret-forms.js';
import { loggableText } from '../observability/url-redaction.js';

/**
 * Why the hub stopped reading a model endpoint's answer: it grew past `limit` bytes (`size`), or it
 * was not complete `limit` ms after the request was sent (`time`). The message names the limit only,
 * never the endpoint's address, key or what it sent.
 */
export class ModelAnswerRefused extends Error {
  constructor(
    readonly reason: 'size' | 'time',
    readonly limit: number,
  ) {
    super(
      reason === 'size'
        ? `the model endpoint's answer is larger than ${limit} bytes; the hub stopped reading it`
        : // "timed out": the client takes an error before the answer's headers as a timeout by these words.
          `the model endpoint's answer was not complete within ${limit} ms (timed out); the hub stopped reading it`,
    );
    this.name = 'ModelAnswerRefused';
  }
}

export interface OpenAiClientOptions {
  baseUrl: string;
  apiKey: string;
  /** The whole exchange of one request: sending it, the answer's headers and its whole body. */
  timeoutMs: number;
  /** The most bytes of one answer's body (after content decoding) read: past them the request is given up. */
  maxAnswerBytes: number;
  /** The outbound address policy's agent. */
  dispatcher: Dispatcher;
}

/**
 * The `openai` client of an OpenAI-compatible endpoint, its requests sent by undici through
 * `dispatcher` (the outbound address policy's agent), so a model endpoint is reached like any other
 * destination the hub calls. Shared by the chat and embedding ports.
 *
 * The client's own timeout ends when the answer's headers arrive, and it reads the body whole, so
 * each answer is bounded here: its body is read through a counter that gives the request up past
 * `maxAnswerBytes` (an endpoint sending gigabytes, or without end), and the request is given up
 * `timeoutMs` after it was sent, body included (an endpoint sending a byte now and then). Either
 * fails the call with a ModelAnswerRefused, the connection closed. The client itself does not
 * retry: `withinTimeLimit` does, within the call's time.
 */
export function openAiClient(options: OpenAiClientOptions): OpenAI {
  return new OpenAI({
    baseURL: options.baseUrl,
    apiKey: options.apiKey,
    timeout: options.timeoutMs,
    maxRetries: 0,
    fetch: (input, init) => boundedFetch(input, init, options) as unknown as Promise<Response>,
  });
}

/** undici's fetch with the dispatcher (its Request and Response are the ones Node's own fetch uses), its answer bounded in size and time. */
async function boundedFetch(input: unknown, init: unknown, options: OpenAiClientOptions): Promise<Response> {
  const { dispatcher, timeoutMs, maxAnswerBytes } = options;
  const given = init as Parameters<typeof undiciFetch>[1];
  const deadline = new AbortController();
  const timer = setTimeout(() => deadline.abort(new ModelAnswerRefused('time', timeoutMs)), timeoutMs);
  timer.unref();
  const signal = given?.signal ? AbortSignal.any([given.signal as AbortSignal, deadline.signal]) : deadline.signal;
  let response: Response;
  try {
    // A 3xx is the endpoint's answer, never followed (as for connectors and webhooks): a 307 or 308
    // would send the request again, the tenant's text in it, to wherever its Location points.
    response = await undiciFetch(input as Parameters<typeof undiciFetch>[0], { ...given, signal, dispatcher, redirect: 'manual' });
  } catch (err) {
    clearTimeout(timer);
    throw withoutCredentials(err);
  }
  if (!response.body) {
    clearTimeout(timer);
    return response;
  }
  let read = 0;
  const counted = response.body.pipeThrough(
    new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, controller) {
        read += chunk.byteLength;
        if (read <= maxAnswerBytes) return controller.enqueue(chunk);
        clearTimeout(timer);
        // Errors the body its reader holds, and cancels the source: undici closes the connection.
        controller.error(new ModelAnswerRefused('size', maxAnswerBytes));
      },
      flush() {
        clearTimeout(timer);
      },
    }),
  );
  // A deadline passing while the body is read errors the source with the ModelAnswerRefused, and so the counted body.
  return new Response(counted, { status: response.status, statusText: response.statusText, headers: response.headers });
}

/**
 * A failed request's error with the credentials of an address its message quotes masked (`***@`,
 * query values `***`). fetch refuses a URL with credentials before it connects and quotes that URL
 * whole (`Request cannot be constructed from a URL that includes credentials: https://user:pass@…`);
 * the chat and embedding ports put the message in their 503 `{error}`, which every tenant's caller
 * reads. The error itself is kept (its kind and cause decide how the ports classify the failure).
 */
function withoutCredentials(err: unknown): unknown {
  if (err instanceof Error) {
    const masked = loggableText(err.message);
    if (masked !== err.message) err.message = masked;
  }
  return err;
}

/** The shortest key masked by its value (a key-less endpoint is given a placeholder such as `unused`, a word an error text may hold). */
const MIN_KEY_CHARS = 8;

/**
 * An endpoint's own text (its error message, quoted in a port's 503 `{error}` that every tenant's
 * caller reads) without the key the hub sent it, in any form a server may echo it (some do:
 * `Invalid key: Bearer sk-…`, `Received API Key = sk-…`), nor any other secret of the hub's, Bearer
 * or Basic credentials, or an address's credentials: masked as a log line is (`[REDACTED]`).
 */
export function withoutKey(text: string, apiKey: string | undefined): string {
  const masked = storableMessage(text);
  return apiKey && apiKey.length >= MIN_KEY_CHARS ? redactSecrets(masked, [apiKey], MIN_KEY_CHARS) : masked;
}

/** The most characters of an endpoint's error text a port's message quotes. */
export const MAX_ERROR_TEXT = 500;

/**
 * An endpoint's error text (an HTTP error answer's message) as the chat and embedding ports quote it
 * in their 503 `{error}`: the key and the hub's other secrets masked (withoutKey), every run of
 * ECHO_CHARS characters or more of one of `sent` (the texts of the request) masked `[text sent]`
 * (some servers quote their input, `Input '…' is too long`), cut to MAX_ERROR_TEXT characters,
 * ending in `…`.
 */
export function quotedErrorText(text: string, apiKey: string | undefined, sent: readonly string[] = []): string {
  // The key masked in the whole text first (a cut could split it); the texts sent looked for up to a bound: the quote is cut to MAX_ERROR_TEXT anyway.
  const keyless = withoutKey(text, apiKey);
  const masked = maskTextsSent(keyless.slice(0, 4 * MAX_ERROR_TEXT), sent);
  return masked.length > MAX_ERROR_TEXT || keyless.length > 4 * MAX_ERROR_TEXT ? `${masked.slice(0, MAX_ERROR_TEXT)}…` : masked;
}

/** A run of this many characters of a text sent, found in an endpoint's message, is masked. */
const ECHO_CHARS = 12;
/** What a masked run of a text sent reads as. */
export const MASKED_TEXT = '[text sent]';

/**
 * `text` with every run of ECHO_CHARS characters or more of one of `sent` written MASKED_TEXT: an
 * endpoint's error text is its server's own, and some servers quote the input in it, which would
 * put the tenants' rows in the hub's log, or another caller's 503.
 */
export function maskTextsSent(text: string, sent: readonly string[]): string {
  if (sent.length === 0) return text;
  let out = '';
  let i = 0;
  while (i < text.length) {
    const at = i + ECHO_CHARS <= text.length ? sent.find((s) => s.includes(text.slice(i, i + ECHO_CHARS))) : undefined;
    if (at === undefined) {
      out += text[i];
      i++;
      continue;
    }
    let end = i + ECHO_CHARS;
    while (end < text.length && at.includes(text.slice(i, end + 1))) end++;
    out += MASKED_TEXT;
    i = end;
  }
  return out;
}

/** What `withinTimeLimit` gives each attempt: the call's deadline as a signal, and no retries of the client's own. */
export interface AttemptOptions {
  signal: AbortSignal;
  maxRetries: 0;
}

/**
 * One call to a model endpoint (`attempt`, a request of the `openai` client given these options),
 * retried up to `maxRetries` times where the client would retry it (no answer, a 408, 409, 429 or
 * 5xx, or a server's `x-should-retry: true`), with the client's waits (its backoff of 0.5 s doubling
 * up to 8 s, or the server's `retry-after-ms` / `Retry-After`) — all of it within `timeoutMs`. The
 * client's own retries make a call take (retries + 1) × its timeout plus the waits, and wait as long
 * as a server's Retry-After asks (an hour, if it says so). Here the attempt in flight is given up
 * when `timeoutMs` has passed since the call began (a ModelAnswerRefused 'time', the connection
 * closed), and a retry whose wait would end after that is not made: the call fails with the last
 * attempt's own error (an HTTP 500 stays an HTTP 500). `signal` (whoever waits for the answer went
 * away) ends the call at once in the same way, the attempt in flight closed or the wait for a retry
 * cut short, with the signal's reason.
 */
export async function withinTimeLimit<T>(limits: { timeoutMs: number; maxRetries: number; signal?: AbortSignal }, attempt: (options: AttemptOptions) => Promise<T>): Promise<T> {
  const { timeoutMs, maxRetries, signal } = limits;
  signal?.throwIfAborted();
  const deadline = Date.now() + timeoutMs;
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new ModelAnswerRefused('time', timeoutMs)), timeoutMs);
  timer.unref();
  const gone = () => controller.abort(signal!.reason);
  signal?.addEventListener('abort', gone, { once: true });
  try {
    for (let retry = 0; ; retry++) {
      try {
        return await attempt({ signal: controller.signal, maxRetries: 0 });
      } catch (err) {
        // The client answers an abort as its own APIUserAbortError: the deadline is the reason.
        if (controller.signal.aborted) throw controller.signal.reason;
        const wait = retry < maxRetries ? retryWait(err, retry) : undefined;
        if (wait === undefined || Date.now() + wait >= deadline) throw err;
        await new Promise<void>((resolve) => {
          const pause = setTimeout(resolve, wait);
          controller.signal.addEventListener('abort', () => {
            clearTimeout(pause);
            resolve();
          }, { once: true });
        });
        controller.signal.throwIfAborted();
      }
    }
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener('abort', gone);
  }
}

/** How long the `openai` client would wait before retrying after `err` (its rules), or undefined where it would not retry. */
function retryWait(err: unknown, retry: number): number | undefined {
  if (err instanceof APIConnectionError) return backoff(retry);
  if (!(err instanceof APIError) || typeof err.status !== 'number') return undefined;
  const headers = err.headers as Headers | undefined;
  const told = headers?.get('x-should-retry');
  if (told === 'false') return undefined;
  if (told !== 'true' && ![408, 409, 429].includes(err.status) && err.status < 500) return undefined;
  return retryAfter(headers) ?? backoff(retry);
}

/** The wait a server asks for: `retry-after-ms`, else `Retry-After` in seconds or as a date. */
function retryAfter(headers: Headers | undefined): number | undefined {
  const ms = Number.parseFloat(headers?.get('retry-after-ms') ?? '');
  if (!Number.isNaN(ms)) return Math.max(0, ms);
  const value = headers?.get('retry-after');
  if (!value) return undefined;
  const seconds = Number.parseFloat(value);
  const wait = Number.isNaN(seconds) ? Date.parse(value) - Date.now() : seconds * 1000;
  return Number.isNaN(wait) ? undefined : Math.max(0, wait);
}

/** The client's backoff: 0.5 s doubling per retry up to 8 s, less up to a quarter at random. */
function backoff(retry: number): number {
  return Math.min(0.5 * 2 ** retry, 8) * (1 - Math.random() * 0.25) * 1000;
}
