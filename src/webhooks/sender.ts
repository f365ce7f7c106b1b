import type { Agent, Dispatcher } from 'undici';
import { REDIRECT_STATUSES, redirectTarget } from '../connectors/engine/errors.js';
import { egressAgent } from '../egress/dispatcher.js';
import { describeNetworkError } from '../egress/network-error.js';
import { EgressPolicy } from '../egress/policy.js';
import { redactSecrets } from '../observability/secret-forms.js';
import { type AttemptOutcome, RESPONSE_BODY_MAX } from './model.js';

/**
 * One HTTP POST of a delivery attempt, with undici: `connectTimeoutMs` to connect, `timeoutMs` for
 * the exchange (waiting for the response head, then between body chunks, and the whole exchange at
 * most connect + exchange), redirects not followed (a 3xx is an unsuccessful answer, its `error`
 * naming where it pointed, as a connector's redirect error does), and only the
 * start of the response body read and kept (RESPONSE_BODY_MAX characters; the connection is dropped
 * when more comes). An answer whose body is cut short (that limit, a reset, the whole-exchange
 * limit) keeps its status and what was read. Never throws: every failure becomes an outcome with
 * `error`. The secrets it is given (the integration's) are masked in the answer's body before it is
 * cut and kept: an echo service quotes the request's `Authorization` header back.
 *
 * The attempt goes through undici's dispatcher interface with one handler object per attempt
 * (`Exchange`) rather than `request()`: no response stream, async iterator or AbortController per
 * attempt. Measured on this path, that is less than half the CPU per POST (docs/performance.md).
 * The handler has undici's own callbacks (`onConnect`, `onHeaders`, `onData`, `onComplete`,
 * `onError`), which undici 7 marks deprecated: a handler with the controller ones (`onRequestStart`
 * …) is wrapped per request in an adapter that also makes an object of every answer's headers
 * (and trailers), which the attempt never reads, a visible share of a drain's CPU per delivery.
 */

export interface SenderOptions {
  connectTimeoutMs: number;
  timeoutMs: number;
  /** The outbound address policy every connection passes (default: none, for tests of other parts). */
  egress?: EgressPolicy;
  userAgent: string;
  /** Tests: the longest a connection stays open unused (default IDLE_TIMEOUT_MS). */
  idleTimeoutMs?: number;
}

/**
 * The longest a connection to a receiver stays open unused, whatever its `Keep-Alive: timeout=` asks
 * (undici would keep it as long as that says, up to 10 minutes: a hub delivering to many tenants'
 * receivers held an idle socket to each between bursts); one whose answers name no timeout, 4 s.
 */
const IDLE_TIMEOUT_MS = 60_000;

/** Bytes read at most: enough for RESPONSE_BODY_MAX characters of UTF-8. */
const READ_MAX_BYTES = RESPONSE_BODY_MAX * 4;
/** Parsed target URLs kept at most (one per integration endpoint in use). */
const TARGETS_MAX = 10_000;
const ABORTED = 'aborted: the process is stopping';
const utf8 = new TextDecoder('utf-8', { fatal: false });

interface Target {
  origin: string;
  path: string;
}

export class WebhookSender {
  /** The longest an attempt's exchange lasts: connect + exchange timeouts (the whole-exchange limit). */
  readonly exchangeMs: number;
  private readonly agent: Agent;
  private readonly targets = new Map<string, Target>();
  /** The exchanges under way per caller's signal (`Underway`). */
  private readonly underway = new WeakMap<AbortSignal, Underway>();

  constructor(private readonly options: SenderOptions) {
    this.exchangeMs = options.connectTimeoutMs + options.timeoutMs;
    this.agent = egressAgent(options.egress ?? EgressPolicy.open(), {
      connectTimeoutMs: options.connectTimeoutMs,
      headersTimeout: options.timeoutMs,
      bodyTimeout: options.timeoutMs,
      idleTimeoutMs: options.idleTimeoutMs ?? IDLE_TIMEOUT_MS,
    });
  }

  send(url: string, headers: Record<string, string>, body: string, signal?: AbortSignal, secrets: readonly string[] = []): Promise<AttemptOutcome> {
    return new Promise<AttemptOutcome>((resolve) => this.sendThen(url, headers, body, signal, secrets, resolve));
  }

  /**
   * `send` with a callback instead of a promise (the pool's attempts: no promise per attempt, each
   * of which costs the process's async-context hooks). `done` is called once: when the answer
   * or the failure came, or before this returns when no request could be made (a bad URL, an
   * aborted signal, a request undici refused); it runs inside undici's callbacks, so it must not throw.
   */
  sendThen(url: string, headers: Record<string, string>, body: string, signal: AbortSignal | undefined, secrets: readonly string[], done: (outcome: AttemptOutcome) => void): void {
    const attemptedAt = new Date();
    const started = performance.now();
    let target: Target;
    try {
      target = this.target(url);
    } catch (err) {
      done(failed(describeNetworkError(err), started, attemptedAt));
      return;
    }
    if (signal?.aborted) {
      done(failed(ABORTED, started, attemptedAt));
      return;
    }
    const exchange = new Exchange(done, this.options, started, attemptedAt, signal ? this.underwayOf(signal) : undefined, secrets);
    try {
      this.agent.dispatch({ origin: target.origin, path: target.path, method: 'POST', headers: { 'User-Agent': this.options.userAgent, ...headers }, body }, exchange);
    } catch (err) {
      exchange.onError(err as Error);
    }
  }

  async close(): Promise<void> {
    await this.agent.destroy().catch(() => undefined);
  }

  /** The exchanges under way for `signal` (made, and listening on it, the first time it is seen). */
  private underwayOf(signal: AbortSignal): Underway {
    let underway = this.underway.get(signal);
    if (!underway) {
      underway = new Underway();
      this.underway.set(signal, underway);
      signal.addEventListener('abort', underway, { once: true });
    }
    return underway;
  }

  /** Origin and path of a target URL (as undici's `request` derives them), kept per URL. */
  private target(url: string): Target {
    let target = this.targets.get(url);
    if (target) return target;
    const parsed = new URL(url);
    if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw new Error(`unsupported protocol ${parsed.protocol} (http or https only)`);
    target = { origin: parsed.origin, path: parsed.search ? `${parsed.pathname}${parsed.search}` : parsed.pathname };
    if (this.targets.size >= TARGETS_MAX) this.targets.clear();
    this.targets.set(url, target);
    return target;
  }
}

function failed(error: string, started: number, attemptedAt: Date): AttemptOutcome {
  return { ok: false, httpStatus: null, responseBody: null, error, durationMs: Math.round(performance.now() - started), attemptedAt };
}

/**
 * The exchanges under way for one caller's signal, in a list of their own, and the one listener on
 * the signal that ends them all (`handleEvent`), rather than a listener of each exchange: Node's
 * EventTarget leaves a removed listener pointing at its neighbours, so every exchange's listener,
 * once one of them had lived long enough to be promoted, kept every later exchange (its request,
 * its row, its timer) alive through the young generation's collections until the next full one, a
 * drain's scavenges promoting megabytes each. An exchange that ends leaves this list with its links
 * cleared.
 */
class Underway {
  head: Exchange | undefined;

  add(exchange: Exchange): void {
    exchange.next = this.head;
    if (this.head) this.head.previous = exchange;
    this.head = exchange;
  }

  remove(exchange: Exchange): void {
    if (exchange.previous) exchange.previous.next = exchange.next;
    else if (this.head === exchange) this.head = exchange.next;
    if (exchange.next) exchange.next.previous = exchange.previous;
    exchange.previous = undefined;
    exchange.next = undefined;
  }

  /** The signal was aborted: every exchange under way ends (each leaves the list as it settles). */
  handleEvent(): void {
    for (let exchange = this.head; exchange; ) {
      const next = exchange.next;
      exchange.stop('aborted');
      exchange = next;
    }
  }
}

/** Why this side ended an exchange: the start of the body was read, the whole-exchange limit, the caller's signal. */
type Cut = 'enough' | 'timeout' | 'aborted';

/**
 * One attempt's handler: collects the status and the start of the body, and settles once (the
 * answer, or the failure); while under way, in its caller's signal's list (`Underway`). undici's own
 * callbacks (see the file's comment): the answer's headers stay raw, never parsed into an object.
 */
class Exchange implements Dispatcher.DispatchHandler {
  /** Drops the request (and its connection): given by undici once the request has a connection. */
  private abort: ((err?: Error) => void) | undefined;
  private status: number | null = null;
  /** A redirect's Location header (only a redirect's is read). */
  private location: string | undefined;
  private readonly chunks: Buffer[] = [];
  private size = 0;
  private cut: Cut | undefined;
  private settled = false;
  private readonly timer: NodeJS.Timeout;
  /** Its neighbours in `underway`'s list while under way. */
  previous: Exchange | undefined = undefined;
  next: Exchange | undefined = undefined;

  constructor(
    private readonly resolve: (outcome: AttemptOutcome) => void,
    private readonly options: SenderOptions,
    private readonly started: number,
    private readonly attemptedAt: Date,
    private readonly underway: Underway | undefined,
    private readonly secrets: readonly string[],
  ) {
    this.timer = setTimeout(() => this.stop('timeout'), options.connectTimeoutMs + options.timeoutMs);
    underway?.add(this);
  }

  onConnect(abort: (err?: Error) => void): void {
    this.abort = abort;
    // Ended before the request reached a connection (a slow connect): it is not sent.
    if (this.cut) abort(new Error(`exchange ended (${this.cut})`));
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[]): boolean {
    // 1xx answers are informational: the final status follows.
    if (statusCode >= 200) this.status = statusCode;
    if (REDIRECT_STATUSES.has(statusCode)) this.location = headerValue(rawHeaders, 'location');
    return true;
  }

  onData(chunk: Buffer): boolean {
    if (this.settled) return true;
    this.chunks.push(chunk);
    this.size += chunk.length;
    if (this.size >= READ_MAX_BYTES) this.stop('enough');
    return true;
  }

  onComplete(): void {
    this.settle(undefined);
  }

  onError(error: Error): void {
    this.settle(error);
  }

  /** Ends the exchange from this side: settles now and drops the request (and its connection). */
  stop(cut: Cut): void {
    if (this.settled) return;
    this.cut = cut;
    this.settle(undefined);
    this.abort?.(new Error(`exchange ended (${cut})`));
  }

  private settle(error: Error | undefined): void {
    if (this.settled) return;
    this.settled = true;
    clearTimeout(this.timer);
    this.underway?.remove(this);
    const status = this.status;
    if (status !== null) {
      // An answer: its status decides, whatever happened to the rest of its body.
      const bytes = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks);
      const read = utf8.decode(bytes.length > READ_MAX_BYTES ? bytes.subarray(0, READ_MAX_BYTES) : bytes);
      // Masked before the cut, so no part of a secret is left at the end of what is kept.
      const text = truncate(this.secrets.length > 0 ? redactSecrets(read, this.secrets) : read);
      const durationMs = Math.round(performance.now() - this.started);
      const error = REDIRECT_STATUSES.has(status) ? redirectError(status, this.location, this.secrets) : null;
      this.resolve({ ok: status >= 200 && status < 300, httpStatus: status, responseBody: text, error, durationMs, attemptedAt: this.attemptedAt });
      return;
    }
    const limit = this.options.connectTimeoutMs + this.options.timeoutMs;
    const message =
      this.cut === 'aborted'
        ? ABORTED
        : this.cut === 'timeout'
          ? `timeout: no complete answer within ${limit} ms`
          : describeNetworkError(error ?? new Error('no answer'), { connectTimeoutMs: this.options.connectTimeoutMs, timeoutMs: this.options.timeoutMs });
    this.resolve(failed(message, this.started, this.attemptedAt));
  }
}

/** The first value of a header in undici's raw list (`[name, value, name, value, …]`), or undefined. */
function headerValue(raw: Buffer[], name: string): string | undefined {
  for (let i = 0; i + 1 < raw.length; i += 2) if (raw[i]!.toString('latin1').toLowerCase() === name) return raw[i + 1]!.toString('latin1');
  return undefined;
}

/**
 * The error of an answered redirect, never followed: where it pointed (the integration's secrets
 * masked, then without credentials, query and fragment, as a connector's redirect error names it).
 */
function redirectError(status: number, location: string | undefined, secrets: readonly string[]): string {
  const target = location ? ` to ${redirectTarget(secrets.length > 0 ? redactSecrets(location, secrets) : location)}` : '';
  return `answered HTTP ${status}, a redirect${target}; redirects are not followed (point the integration's targetUrl at the address it names)`;
}

/** The first RESPONSE_BODY_MAX characters (code points, so no pair of a character is cut in two). */
export function truncate(text: string): string {
  if (text.length <= RESPONSE_BODY_MAX) return text;
  const points = Array.from(text);
  return points.length <= RESPONSE_BODY_MAX ? text : points.slice(0, RESPONSE_BODY_MAX).join('');
}
