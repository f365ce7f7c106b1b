import { TextDecoder } from 'node:util';
import { type BrotliOptions, constants, createBrotliDecompress, createGunzip, createInflate, createInflateRaw, type ZlibOptions } from 'node:zlib';
import { type Dispatcher, errors, request } from 'undici';
import { logger } from '../../observability/logger.js';
import { delay, type TokenBucket } from '../rate-limit.js';
import { isEgressDenied } from '../../egress/policy.js';
import type { NetworkErrorContext } from '../../egress/network-error.js';
import { CancelledError, DestinationRefusedError, isNetworkError, quote, RequestInvalidError, SHORT_QUOTE_LIMIT, TRANSIENT_STATUSES, UnreadableResponseError, UpstreamNetworkError } from './errors.js';
import type { ComposedRequest } from './request.js';
import { backoffDelay, type RetryPolicy } from './retry.js';
import { type PageBounds, pageOverBounds, parseJsonExact, SHORT_STRING } from './exact-json.js';
import { firstUndecodable } from '../../validation/undecodable.js';
import { decodeUtf8Escaping, escapeBytes, incompleteUtf8End } from './utf8-escape.js';
import { readStart } from '../../http-body.js';

export type ResponseHeaders = Record<string, string | string[] | undefined>;

/** The final answer to one request, after retries. */
export type Exchange =
  | { ok: true; status: number; headers: ResponseHeaders; body: unknown; attempts: number }
  | { ok: false; status: number; headers: ResponseHeaders; text: string; attempts: number };

/** What a retried attempt looked like (for logs, metrics and tests). */
export interface RetryEvent {
  /** The attempt that failed (1-based). */
  attempt: number;
  status?: number;
  error?: string;
  /** The wait before the next attempt. */
  delayMs: number;
  position: string;
}

export interface ExchangeOptions {
  limiter: TokenBucket;
  policy: RetryPolicy;
  signal?: AbortSignal;
  dispatcher?: Dispatcher;
  /**
   * How long the response headers may take, and the longest silence within a body (undici's defaults,
   * 300 s, when absent); responseMs: the longest one attempt may take as a whole, from sending the
   * request to the last byte of its body (none when absent), so a body trickling in without ever
   * going silent for bodyMs is cut off too.
   */
  timeouts?: ExchangeTimeouts;
  /** Largest page body read (default 64 MiB). */
  maxPageBytes?: number;
  onRetry?: (event: RetryEvent) => void;
  /**
   * How a 2xx body's text becomes the page (default JSON), or a promise of it. Throws (rejects with)
   * UnreadableResponseError for a body it cannot read. SOAP reads XML here, asynchronously.
   */
  parse?: (text: string, status: number, headers: ResponseHeaders) => unknown | Promise<unknown>;
  /**
   * Whether an answer with a retried status is final all the same, from its body's start: a SOAP
   * Fault on HTTP 500 is an answer, not a transient error. Without it, retried statuses are retried.
   */
  isFinal?: (status: number, text: string) => boolean;
}

export interface ExchangeTimeouts {
  headersMs: number;
  bodyMs: number;
  responseMs?: number;
}

/** An attempt cut off by timeouts.responseMs: a network error (retried per policy), worded by describeNetworkError. */
export class ResponseTimeoutError extends Error {
  readonly code = 'SVC_RESPONSE_TIMEOUT';
  constructor(readonly timeoutMs: number) {
    super(`timeout: the answer took longer than ${timeoutMs} ms as a whole (svc.connectors.http.response-timeout)`);
  }
}

/**
 * For a headers or body timeout that ran out, the time it allowed and its setting, for the error's
 * text to name as the whole-answer timeout's names its own: which setting to raise, at what it stood.
 */
function timeoutNamed(err: unknown, timeouts: ExchangeTimeouts | undefined): NetworkErrorContext | undefined {
  const code = (err as { code?: unknown }).code;
  if (!timeouts) return undefined;
  if (code === 'UND_ERR_HEADERS_TIMEOUT') return { timeoutMs: timeouts.headersMs, setting: 'svc.connectors.http.headers-timeout' };
  if (code === 'UND_ERR_BODY_TIMEOUT') return { timeoutMs: timeouts.bodyMs, setting: 'svc.connectors.http.body-timeout' };
  return undefined;
}

export const MAX_PAGE_BYTES = 64 * 1024 * 1024;
/** Largest error body read before it is quoted (the message keeps 500 characters of it). */
const ERROR_BODY_BYTES = 64 * 1024;

/**
 * Sends one request under the retry policy: takes a token from the connector's bucket before every
 * attempt, retries 408/429/500/502/503/504 and network errors (a failure while reading a 2xx body
 * included), and answers the final response: a 2xx with its JSON body parsed (one page in memory,
 * bounded by maxPageBytes), anything else with the start of its body as text (decompressed, or
 * described when it is no text: errorText). An empty 2xx body other than a 204's or a 205's (no
 * content, both) is retried as a cut-off one, then unreadable; a compressed one is unreadable at once. Cancellation (the
 * signal) interrupts waits and the request in flight with a CancelledError.
 */
export async function exchange(req: ComposedRequest, o: ExchangeOptions): Promise<Exchange> {
  const attempts = Math.max(1, Math.floor(o.policy.attempts));
  const cancelled = () => o.signal?.aborted === true;
  /** The attempt in flight ran past timeouts.responseMs, or past headersMs without its status (its request and body were aborted). */
  let timedOut: Error | undefined;
  const guard = async <T>(work: Promise<T>): Promise<T> => {
    try {
      return await work;
    } catch (err) {
      if (cancelled()) throw new CancelledError();
      if (timedOut) throw timedOut;
      throw err;
    }
  };
  const retryAfter = async (event: Omit<RetryEvent, 'position'>) => {
    const full = { ...event, position: req.position };
    o.onRetry?.(full);
    logger().info({ attempt: event.attempt, status: event.status, error: event.error, delayMs: event.delayMs, position: req.position }, 'upstream request failed; retrying');
    await guard(delay(event.delayMs, o.signal));
  };

  for (let attempt = 1; ; attempt++) {
    if (cancelled()) throw new CancelledError();
    await guard(o.limiter.take(o.signal));
    // The whole attempt's time limit: from here (the token taken) to the last byte of the body read.
    timedOut = undefined;
    const responseMs = o.timeouts?.responseMs;
    const headersMs = o.timeouts?.headersMs;
    const limit = responseMs === undefined && headersMs === undefined ? undefined : new AbortController();
    const cut = (err: Error) => {
      timedOut = err;
      limit!.abort(err);
    };
    const timer = responseMs === undefined ? undefined : setTimeout(() => cut(new ResponseTimeoutError(responseMs)), responseMs);
    // The status within headersMs of here, whatever comes before it: undici restarts its own headers timer at each
    // interim answer (1xx), so a source sending 103 Early Hints without end never ran out of it.
    let headersTimer = headersMs === undefined ? undefined : setTimeout(() => cut(new errors.HeadersTimeoutError()), headersMs);
    const signal = limit ? (o.signal ? AbortSignal.any([o.signal, limit.signal]) : limit.signal) : o.signal;
    try {
      let res: Dispatcher.ResponseData;
      try {
        res = await guard(
          request(req.url, {
            method: req.method,
            headers: req.headers,
            body: req.body,
            dispatcher: o.dispatcher,
            signal,
            ...(o.timeouts ? { headersTimeout: o.timeouts.headersMs, bodyTimeout: o.timeouts.bodyMs } : {}),
          }),
        );
        clearTimeout(headersTimer);
        headersTimer = undefined;
      } catch (err) {
        if (isEgressDenied(err)) throw new DestinationRefusedError(err);
        if ((err as { code?: unknown }).code === 'UND_ERR_INVALID_ARG') throw new RequestInvalidError(`${(err as Error).message}; a header value holds a line break or a character beyond Latin-1, perhaps from a stored secret: fix the secret or the manifest`);
        if (!isNetworkError(err)) throw err;
        if (attempt >= attempts) throw new UpstreamNetworkError(attempt, err, timeoutNamed(err, o.timeouts));
        await retryAfter({ attempt, error: errorCode(err), delayMs: backoffDelay(o.policy, attempt) });
        continue;
      }

      const status = res.statusCode;
      const headers = res.headers as ResponseHeaders;
      if (status >= 200 && status < 300) {
        const encoding = compressedWith(status, headers);
        if (encoding !== undefined) {
          await res.body.dump().catch(() => undefined);
          const asked = Object.keys(req.headers).some((name) => name.toLowerCase() === 'accept-encoding');
          throw new UnreadableResponseError(
            `upstream answered HTTP ${status} with a ${encoding}-compressed body (Content-Encoding: ${encoding}), which the hub ${asked ? 'does not decode: remove the Accept-Encoding header the connector declares' : 'did not ask for and does not decode'}`,
            status,
          );
        }
        try {
          // A JSON page's bytes that are not UTF-8 fail only the records whose strings hold them (readPageText).
          const page = await guard(readPageText(res.body, status, o.maxPageBytes ?? MAX_PAGE_BYTES, charsetOf(headers) ?? 'utf-8', o.parse === undefined));
          const text = page.text;
          // An empty 2xx other than 204 or 205 is a page lost on the way (a proxy hiccup), not a page of no records.
          if (!NO_CONTENT.has(status) && text.trim() === '') {
            if (attempt >= attempts) {
              throw new UnreadableResponseError(
                `upstream answered HTTP ${status} with an empty body (content-type ${contentType(headers)}) after ${attempt} attempt(s): only HTTP 204 or 205 may answer no content, so the page is unreadable rather than empty`,
                status,
              );
            }
            await retryAfter({ attempt, status, error: 'empty body', delayMs: backoffDelay(o.policy, attempt) });
            continue;
          }
          let body: unknown;
          try {
            body = await (o.parse ?? parseJson)(text, status, headers);
          } catch (err) {
            // Such bytes where no string holds them: the page is unreadable, as they make it.
            throw page.undecodable && err instanceof UnreadableResponseError ? page.undecodable : err;
          }
          return { ok: true, status, headers, body, attempts: attempt };
        } catch (err) {
          if (!isNetworkError(err)) throw err;
          if (attempt >= attempts) throw new UpstreamNetworkError(attempt, err, timeoutNamed(err, o.timeouts));
          await retryAfter({ attempt, status, error: errorCode(err), delayMs: backoffDelay(o.policy, attempt) });
          continue;
        }
      }
      if (TRANSIENT_STATUSES.has(status) && attempt < attempts && o.isFinal) {
        const text = await guard(errorText(res.body, status, headers, ERROR_BODY_BYTES)).catch((err) => {
          if (err instanceof CancelledError) throw err;
          return '';
        });
        if (o.isFinal(status, text)) return { ok: false, status, headers, text, attempts: attempt };
        await retryAfter({ attempt, status, delayMs: backoffDelay(o.policy, attempt, headers['retry-after']) });
        continue;
      }
      if (TRANSIENT_STATUSES.has(status) && attempt < attempts) {
        await res.body.dump().catch(() => undefined);
        await retryAfter({ attempt, status, delayMs: backoffDelay(o.policy, attempt, headers['retry-after']) });
        continue;
      }
      const text = await guard(errorText(res.body, status, headers, ERROR_BODY_BYTES)).catch((err) => {
        if (err instanceof CancelledError) throw err;
        return '';
      });
      return { ok: false, status, headers, text, attempts: attempt };
    } finally {
      clearTimeout(timer);
      clearTimeout(headersTimer);
    }
  }
}

/**
 * A 2xx body as text, refused past maxBytes (one page in memory, never more). Each chunk is decoded
 * as it arrives (a character split between chunks waits in the decoder for its other bytes), so a
 * large page costs no buffer copy and no single long decode once its last byte is in. The charset
 * is the one the content type declares (default UTF-8); bytes that are not valid in it are refused,
 * naming the offset of the first, never replaced with U+FFFD. A leading byte order mark is dropped.
 */
export async function readPage(body: AsyncIterable<unknown> & { destroy(): unknown }, status: number, maxBytes: number, charset = 'utf-8'): Promise<string> {
  return (await readPageText(body, status, maxBytes, charset, false)).text;
}

/**
 * Most bytes that are not UTF-8 one page may hold and still be read (readPageText): past it the page
 * is taken for one in another charset than it declares, and refused as a whole. Each costs a string
 * of its own here and six characters in its row's JSON: 64 MiB of them held the event loop for over
 * a minute and took 4 GB of heap (measured).
 */
export const MAX_ESCAPED_BYTES = 65_536;

/**
 * A page's text; with `escapeInvalidUtf8`, bytes of a UTF-8 page that are not valid UTF-8 are not
 * refused but each read as an unpaired surrogate, byte 0xXY as U+DCXY (as Python's surrogateescape
 * does): a JSON parser takes one inside a string, so only the record holding it is unstorable
 * (dead-lettered by the run, naming its field), and refuses one anywhere else. `undecodable` is then
 * the refusal a strict read gives, for the caller to throw when the text is no page. Another
 * charset is read strictly whatever `escapeInvalidUtf8` says, and so is a page past
 * MAX_ESCAPED_BYTES such bytes (thrown at once).
 */
export async function readPageText(
  body: AsyncIterable<unknown> & { destroy(): unknown },
  status: number,
  maxBytes: number,
  charset: string,
  escapeInvalidUtf8: boolean,
): Promise<{ text: string; undecodable?: Error }> {
  let decoder: TextDecoder;
  try {
    decoder = new TextDecoder(charset, { fatal: true });
  } catch {
    // Leaving the loop at once closes the body (as an error thrown inside it does below).
    for await (const _ of body) break;
    throw new UnreadableResponseError(`upstream answered HTTP ${status} with a body in charset ${quote(charset, SHORT_QUOTE_LIMIT)}, which the hub cannot decode (declare UTF-8 or another charset of the WHATWG Encoding Standard)`, status);
  }
  const escaping = escapeInvalidUtf8 && decoder.encoding === 'utf-8';
  let text = '';
  let size = 0;
  /** The last bytes decoded (at most 3): where the decoder's held bytes are when it refuses the next chunk. */
  let tail: Buffer = Buffer.alloc(0);
  /** Once a byte was refused (escaping): the refusal, and the bytes of a character cut at the end of the last chunk. */
  let undecodable: Error | undefined;
  let held: Buffer = Buffer.alloc(0);
  let escaped = 0;
  for await (const chunk of body) {
    const buf = chunk as Buffer;
    size += buf.length;
    if (size > maxBytes) {
      body.destroy();
      throw new UnreadableResponseError(`upstream answered HTTP ${status} with a page larger than ${maxBytes} bytes; refusing to hold it in memory`, status);
    }
    if (undecodable) {
      const read = decodeUtf8Escaping(held.length ? Buffer.concat([held, buf]) : buf, MAX_ESCAPED_BYTES - escaped);
      if (!read) throw undecodable;
      text += read.text;
      held = read.rest;
      escaped += read.escaped;
      continue;
    }
    try {
      text += decoder.decode(buf, { stream: true });
      tail = buf.length >= 3 ? buf.subarray(buf.length - 3) : Buffer.concat([tail, buf]).subarray(-3);
    } catch {
      // Searched with the bytes of a UTF-8 character the chunk before left cut; the chunk alone decoding
      // means those bytes were at fault: its start.
      const before = decoder.encoding === 'utf-8' ? incompleteUtf8End(tail) : Buffer.alloc(0);
      const searched = before.length ? Buffer.concat([before, buf]) : buf;
      const refused = notDecodable(status, decoder.encoding, size - searched.length + (firstUndecodable(decoder.encoding, searched) ?? before.length));
      if (!escaping) throw refused;
      undecodable = refused;
      const read = decodeUtf8Escaping(searched, MAX_ESCAPED_BYTES);
      if (!read) throw refused;
      text += read.text;
      held = read.rest;
      escaped = read.escaped;
    }
  }
  if (undecodable) {
    // A character cut off by the end of the body: its bytes are no text.
    text += escapeBytes(held);
  } else {
    try {
      text += decoder.decode();
    } catch {
      const refused = notDecodable(status, decoder.encoding, size);
      if (!escaping) throw refused;
      undecodable = refused;
      text += escapeBytes(incompleteUtf8End(tail));
    }
  }
  return { text: text.charCodeAt(0) === 0xfeff ? text.slice(1) : text, ...(undecodable ? { undecodable } : {}) };
}

function notDecodable(status: number, encoding: string, offset: number): Error {
  return new UnreadableResponseError(`upstream answered HTTP ${status} with a body that is not valid ${encoding}: an invalid byte sequence at byte offset ${offset}`, status);
}

/** The charset parameter of a content type, if any. */
export function charsetOf(headers: ResponseHeaders): string | undefined {
  const match = /;\s*charset\s*=\s*"?([^";\s]+)"?/i.exec(contentTypeHeader(headers));
  return match?.[1];
}

/** The statuses that answer no content by definition: 204 No Content, 205 Reset Content. */
const NO_CONTENT = new Set([204, 205]);

/**
 * What one JSON page may make `JSON.parse` build (exact-json.ts pageOverBounds): objects and arrays,
 * as a SOAP page's elements are bounded (soap/xml.ts MAX_XML_ELEMENTS); distinct keys, and distinct
 * short strings, each of which costs a shared copy (a key also hidden classes). A page past one is
 * refused before it is parsed.
 */
export const PAGE_BOUNDS: Readonly<PageBounds> = { containers: 1_000_000, keys: 100_000, shortStrings: 500_000 };

/** What a page past each bound holds too much of, for its message. */
const OVER_BOUND: Record<keyof PageBounds, string> = {
  containers: 'JSON objects and arrays',
  keys: 'distinct JSON object keys',
  shortStrings: `distinct JSON strings of up to ${SHORT_STRING} characters`,
};

/**
 * Below this many characters a page cannot pass a bound: each object or array takes two, each
 * distinct key six (`"k":0,`), each distinct short string four (`"s",`). Not counted.
 */
const COUNT_FROM_CHARS = Math.min(2 * PAGE_BOUNDS.containers, 6 * PAGE_BOUNDS.keys, 4 * PAGE_BOUNDS.shortStrings);

/**
 * A 2xx body as JSON; a 204's or 205's (no content) is null, no records. A page past PAGE_BOUNDS is
 * refused unparsed: the byte limit alone lets 64 MiB of `{},` build 22 million objects (1.5 GB of
 * heap, the event loop held for most of a minute), and 64 MiB of one object's distinct keys held it
 * for seconds.
 */
function parseJson(text: string, status: number, headers: ResponseHeaders): unknown {
  if (NO_CONTENT.has(status) && text.trim() === '') return null;
  const over = text.length > COUNT_FROM_CHARS ? pageOverBounds(text, PAGE_BOUNDS) : undefined;
  if (over) {
    throw new UnreadableResponseError(
      `upstream answered HTTP ${status} with a page of more than ${PAGE_BOUNDS[over].toLocaleString('en-US')} ${OVER_BOUND[over]}; refusing to build it in memory (ask the source for smaller pages)`,
      status,
    );
  }
  try {
    return parseJsonExact(text);
  } catch {
    throw new UnreadableResponseError(`upstream answered HTTP ${status} with a body that is not JSON (content-type ${contentType(headers)}): ${quote(text, 200)}`, status);
  }
}

/** The content type of an answer as a message quotes it: at most SHORT_QUOTE_LIMIT characters. */
export function contentType(headers: ResponseHeaders): string {
  return quote(contentTypeHeader(headers), SHORT_QUOTE_LIMIT);
}

/** The content type of an answer, whole (up to undici's 16 KiB of headers): to read, never to quote. */
function contentTypeHeader(headers: ResponseHeaders): string {
  const type = headers['content-type'];
  return Array.isArray(type) ? type.join(', ') : (type ?? 'none');
}

/** The content codings that compress (IANA's HTTP Content Coding registry, with the x- aliases). */
const COMPRESSING = new Set(['gzip', 'x-gzip', 'deflate', 'br', 'compress', 'x-compress', 'zstd', 'dcb', 'dcz', 'exi', 'pack200-gzip', 'aes128gcm']);

/**
 * The Content-Encoding of an answer when it names a coding that compresses (undici hands the body
 * over as sent: the hub asks for none). Anything else (identity, or a value some servers send by
 * mistake such as `utf-8` or `none`) leaves the body to be read as it is; a 204 or 205 has no body to read.
 */
function compressedWith(status: number, headers: ResponseHeaders): string | undefined {
  if (NO_CONTENT.has(status)) return undefined;
  const value = headers['content-encoding'];
  const codings = (Array.isArray(value) ? value.join(',') : (value ?? '')).split(',').map((c) => c.trim().toLowerCase()).filter(Boolean);
  return codings.some((c) => COMPRESSING.has(c)) ? codings.join(', ') : undefined;
}

/** The content codings an error page is decompressed from; a cut-off stream is decompressed as far as it goes. */
const DECOMPRESSORS: Record<string, (bytes: Buffer) => NodeJS.ReadWriteStream> = {
  gzip: () => createGunzip(CUT_OFF_ZLIB),
  'x-gzip': () => createGunzip(CUT_OFF_ZLIB),
  // `deflate` is the zlib format; some servers send the raw one (no header whose 16 bits are a multiple of 31).
  deflate: (bytes) => ((bytes[0]! & 0x0f) === 8 && ((bytes[0]! << 8) | bytes[1]!) % 31 === 0 ? createInflate(CUT_OFF_ZLIB) : createInflateRaw(CUT_OFF_ZLIB)),
  br: () => createBrotliDecompress(CUT_OFF_BROTLI),
};
const CUT_OFF_ZLIB: ZlibOptions = { finishFlush: constants.Z_SYNC_FLUSH };
const CUT_OFF_BROTLI: BrotliOptions = { finishFlush: constants.BROTLI_OPERATION_FLUSH };

/** At most maxBytes of `bytes` decompressed from `coding`, or undefined when the hub has no decoder for it or nothing decompresses. */
async function decompressed(bytes: Buffer, coding: string, maxBytes: number): Promise<Buffer | undefined> {
  const make = DECOMPRESSORS[coding];
  if (!make || bytes.length === 0) return undefined;
  const stream = make(bytes);
  stream.end(bytes);
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    // Leaving the loop destroys the stream: a body that expands without end is decompressed no further.
    for await (const chunk of stream) {
      chunks.push(chunk as Buffer);
      size += (chunk as Buffer).length;
      if (size >= maxBytes) break;
    }
  } catch {
    if (size === 0) return undefined;
  }
  return Buffer.concat(chunks).subarray(0, maxBytes);
}

/**
 * The start of a non-2xx answer's body as text to quote, never binary: at most maxBytes read; a
 * body compressed with gzip, deflate or br is decompressed (at most maxBytes of it, as a page is
 * bounded); one in another coding (zstd, compress, several) or that does not decompress is named
 * with its size instead, and so is one that is no text (a NUL, or more than a tenth of its
 * characters control characters or bytes invalid in its charset). Text is decoded in the declared
 * charset (UTF-8 when none), leniently: an error page is quoted, not stored.
 */
async function errorText(body: Dispatcher.ResponseData['body'], status: number, headers: ResponseHeaders, maxBytes: number): Promise<string> {
  const { bytes, more } = await readStart(body, maxBytes);
  const declared = Number(Array.isArray(headers['content-length']) ? headers['content-length'][0] : headers['content-length']);
  const size = Number.isFinite(declared) && declared >= bytes.length ? `${declared} bytes` : more ? `more than ${maxBytes} bytes` : `${bytes.length} bytes`;
  const coding = compressedWith(status, headers);
  let text: Buffer = bytes;
  if (coding !== undefined) {
    const plain = await decompressed(bytes, coding, maxBytes);
    if (plain === undefined) return `(a ${coding}-compressed body of ${size}, not shown)`;
    text = plain;
  }
  let decoder: TextDecoder;
  try {
    decoder = new TextDecoder(charsetOf(headers) ?? 'utf-8');
  } catch {
    decoder = new TextDecoder('utf-8');
  }
  // stream: a character cut at maxBytes is not taken for an invalid one.
  const decoded = decoder.decode(text, { stream: true });
  return isText(decoded) ? decoded : `(a ${coding === undefined ? '' : `${coding}-compressed `}body of ${size} that is not text, content-type ${contentType(headers)}, not shown)`;
}

/** Whether decoded text reads as text: no NUL, and at most a tenth control characters (but tab and line breaks) or U+FFFD. */
function isText(text: string): boolean {
  let odd = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0) return false;
    if ((c < 0x20 && c !== 0x09 && c !== 0x0a && c !== 0x0d && c !== 0x0c) || c === 0x7f || c === 0xfffd) odd++;
  }
  return odd * 10 <= text.length;
}

function errorCode(err: unknown): string {
  const e = err as { code?: unknown; message?: unknown };
  return typeof e?.code === 'string' ? e.code : String(e?.message ?? err);
}
