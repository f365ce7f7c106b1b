import { createHash } from 'node:crypto';
import { setImmediate as turn } from 'node:timers/promises';
import type { Dispatcher } from 'undici';
import { unsentHeaders } from '../auth/headers.js';
import { resolveAuth } from '../auth/index.js';
import { resolveNamedValues } from '../auth/named.js';
import { type AuthParts, NO_AUTH } from '../auth/types.js';
import { createStrategy } from '../pagination/index.js';
import type { PaginationStrategy, Position, ResumePoint } from '../pagination/types.js';
import type { TokenBucket } from '../rate-limit.js';
import type { ConnectorSpec, EndpointSpec, Page } from '../types.js';
import {
  CancelledError,
  DeclaredTotalMismatchError,
  EngineError,
  type EngineErrorCode,
  GraphQLErrorsError,
  GraphQLMalformedError,
  PageCapError,
  PaginationError,
  StalePositionError,
  UnreadableResponseError,
  UpstreamHttpError,
} from './errors.js';
import { type Exchange, exchange, type ExchangeOptions, type ExchangeTimeouts, type RetryEvent } from './http.js';
import { type ComposedRequest, composeRequest, planRequests, type RequestPlan, redactDeep, redactText, redactUrl, redirectLocation, removeQueryParameter, shownUrl } from './request.js';
import { DEFAULT_RETRY, type RetryPolicy } from './retry.js';
import { checkSoapAnswer, soapExchange, soapFailure } from './soap.js';
import { exactNumbersAsText, jsonText } from './exact-json.js';
import { cutDeeperThan, MAX_JSON_DEPTH } from '../../validation/input-limits.js';
import { TooDeepForPath } from '../jsonpath.js';

export const DEFAULT_MAX_PAGES = 10_000;

export interface EngineContext {
  /**
   * Every named value: auth `*_env` credentials, header `value_env` and `{{env:NAME}}` templates
   * (src/connectors/auth/resolver.ts: the tenant's stored secret, then an allowed environment variable).
   */
  resolveCredential(name: string): Promise<string | undefined>;
  /** From src/connectors/rate-limit.ts, one per connector, shared by its endpoints. */
  limiter: TokenBucket;
  /** Cancellation: stop at the next page boundary with a CancelledError. */
  signal?: AbortSignal;
  /**
   * firstPage only (a probe a client waits on): the longest it waits for a token of `limiter`; when the
   * bucket would take longer, nothing is sent and the report says when the next request is allowed.
   */
  maxTokenWaitMs?: number;
  /** Stored mark: sent as query param `incremental.param` on the first request only. */
  watermark?: string;
  /** Where an earlier read of the endpoint stopped at the page budget (PageCapError's `stoppedAt`): this read starts there. */
  resume?: ReadPosition;
  /** Default 5, 1000, 60000 (tests shorten). */
  retry?: { attempts: number; baseDelayMs: number; maxDelayMs: number };
  /** Default 10000. */
  maxPages?: number;
  /**
   * Headers timeout, body (idle) timeout and whole-answer timeout of each request
   * (svc.connectors.http.headers-timeout, svc.connectors.http.body-timeout,
   * svc.connectors.http.response-timeout); a timeout is a network error, retried per policy.
   */
  timeouts?: ExchangeTimeouts;
  /** What requests go through: the outbound address policy's agent (src/egress); tests may omit it. */
  dispatcher?: Dispatcher;
  /** Called before each retry wait (logs, metrics, tests). */
  onRetry?: (event: RetryEvent) => void;
}

/**
 * Where a read cut by the page budget stopped, as JSON (the runner stores it on the endpoint, and
 * the endpoint's next run resumes from it): the position it would have requested next (a next link
 * without the auth query parameters, which every request gets again), the strategy's state, and the
 * rows read and total declared so far over the reads of the chain (for the declared-total check at
 * its end).
 */
export interface ReadPosition extends ResumePoint {
  returned: number;
  declared?: number;
  totalChanged?: boolean;
  /** How messages and the endpoint's answer name the position (`offset 150`, `the next link <url>`, credentials masked). */
  shown: string;
}

/** The position a PageCapError carries (ReadPosition), when the read that threw it could tell it. */
export function stoppedAtOf(err: unknown): ReadPosition | undefined {
  return err instanceof PageCapError ? (err as { stoppedAt?: ReadPosition }).stoppedAt : undefined;
}

/** One read's fixed parts: auth, request plan, strategy. */
interface Session {
  plan: RequestPlan;
  strategy: PaginationStrategy;
  policy: RetryPolicy;
}

async function openSession(connector: ConnectorSpec, endpoint: EndpointSpec, ctx: EngineContext): Promise<Session> {
  const auth = await resolveAuth(connector.auth, (name) => ctx.resolveCredential(name));
  const named = await resolveNamedValues(connector, endpoint, (name) => ctx.resolveCredential(name));
  return {
    plan: planRequests(connector, endpoint, named, auth),
    strategy: createStrategy(endpoint.pagination, endpoint.soap),
    policy: { ...DEFAULT_RETRY, ...ctx.retry },
  };
}

/**
 * Reads every page of one endpoint, yielding each as soon as it is parsed (the next request is sent
 * only when the consumer asks for the next page, so at most one page is held).
 *
 * Ends with:
 * - UpstreamHttpError (Failed) on a final non-2xx answer, after retries;
 * - StalePositionError (Partial) when the source answers 404/410 for a position carried from an earlier page;
 * - GraphQLErrorsError / GraphQLMalformedError (Failed) on a GraphQL envelope with errors or without data;
 * - PageCapError (Partial) when maxPages pages were read and the source has more;
 * - DeclaredTotalMismatchError (Failed), after the last page, when total_path disagrees with the rows
 *   read (skipped without total_path, on watermark endpoints, and when the declared total changed);
 * - CredentialError, TemplateError, PaginationError, UnreadableResponseError, UpstreamNetworkError (Failed);
 * - CancelledError (Cancelled) when ctx.signal aborts, at the next page boundary.
 */
export async function* readEndpoint(connector: ConnectorSpec, endpoint: EndpointSpec, ctx: EngineContext): AsyncGenerator<Page> {
  if (ctx.signal?.aborted) throw new CancelledError();
  const { plan, strategy, policy } = await openSession(connector, endpoint, ctx);
  const maxPages = ctx.maxPages ?? DEFAULT_MAX_PAGES;
  const checkTotal = strategy.hasTotalPath && endpoint.incremental.mode !== 'watermark';

  const resume = ctx.resume;
  let position: Position | undefined = resume ? (strategy.resume?.(resume) ?? resume.position) : strategy.first();
  let previous: URL | undefined;
  let number = 0;
  let returned = resume?.returned ?? 0;
  let declared: number | undefined = resume?.declared;
  let totalChanged = resume?.totalChanged ?? false;
  /** The fingerprint of the page before (samePageAs), to catch a source answering the same records again. */
  let before: string | undefined;
  /**
   * Every earlier page's fingerprint and number: a source that cycles through pages (offsets it
   * answers A, B, A, B) repeats no page just before, but an earlier one (and with `total_path`
   * would end as complete with half of its records). A 44-character digest per page, to the page budget.
   */
  const seen = new Map<string, number>();

  while (position) {
    // undici gives a connection back to its pool one full turn of the event loop after a response's end (so that a
    // server closing it despite its keep-alive is seen first): a page asked for sooner (the page before handed over
    // and taken without a turn, or a read of the same source just ended) went out on a second connection, and the
    // pages alternated between two.
    await turn();
    if (ctx.signal?.aborted) throw new CancelledError();
    const req = composeRequest(plan, endpoint, position, previous, ctx.watermark);
    // A resumed read's first request carries a position an earlier run was given: a 404/410 for it is a stale position.
    if (resume) req.carriesPosition = true;
    const answer = await exchangeMasked(req, {
      limiter: ctx.limiter,
      policy,
      signal: ctx.signal,
      dispatcher: ctx.dispatcher,
      timeouts: ctx.timeouts,
      onRetry: ctx.onRetry,
      ...(endpoint.soap ? soapExchange(endpoint.soap) : {}),
    }, plan.auth);
    if (!answer.ok) throw endpoint.soap ? soapFailure(answer, endpoint, plan.auth) : failure(answer, req, plan.auth, number);
    if (endpoint.graphql) checkGraphQLEnvelope(answer.body, plan.auth);
    if (endpoint.soap) checkSoapAnswer(answer.status, answer.body, plan.auth);

    const items = strategy.items(answer.body);
    const fingerprint = pageFingerprint(items);
    number += 1;
    returned += items.length;
    const total = strategy.hasTotalPath ? strategy.declaredTotal(answer.body) : undefined;
    if (number === 1 && !resume) declared = total;
    else if (total !== declared) totalChanged = true;

    // The next position is worked out before the page is handed over (so the body can be released),
    // but a failure to paginate (custom's second page) surfaces only after this page was yielded.
    let next: Position | undefined;
    let deferred: unknown;
    try {
      next = strategy.next({ url: req.url, headers: answer.headers, body: answer.body, items });
    } catch (err) {
      deferred = err;
    }
    // The same records as the page before, at a position that moved on: the source ignores the
    // position (an offset or page parameter it does not know) or repeats its last page past the end.
    // Reading on would only loop to the page budget (or, with a declared total, end short of it as
    // if complete), so the read fails here without handing the page over. A strategy's own guard
    // (a cursor or link that came back) names the fault first.
    if (deferred === undefined && fingerprint !== undefined) {
      if (fingerprint === before) throw new PaginationError(samePageMessage(req.position, items.length));
      const earlier = seen.get(fingerprint);
      if (earlier !== undefined) throw new PaginationError(samePageMessage(req.position, items.length, earlier));
      seen.set(fingerprint, number);
    }
    before = fingerprint;
    const page: Page = { number, items };
    if (total !== undefined) page.declaredTotal = total;
    yield page;

    if (deferred !== undefined) throw deferred;
    if (next && number >= maxPages) {
      const kept = withoutAuthQuery(next, plan.auth);
      const stoppedAt: ReadPosition = { position: kept, state: strategy.saved?.(), returned, declared, totalChanged, shown: shownPosition(kept, plan.auth) };
      throw Object.assign(new PageCapError(maxPages), { stoppedAt });
    }
    previous = req.url;
    position = next;
  }

  if (checkTotal && !totalChanged && declared !== undefined && declared !== returned) throw new DeclaredTotalMismatchError(declared, returned);
}

/**
 * What tells a page from the one before it: its record count and its first, middle and last records
 * (as JSON, hashed), undefined for an empty page (an empty page ends every strategy's read) or one
 * whose sampled records do not serialise (nested past the stack; the row writer dead-letters them).
 * Three records, not all: a page of distinct records that shares them with the page before is no
 * page of a source that moved on, and the cost per page stays that of three small JSON texts.
 */
function pageFingerprint(items: unknown[]): string | undefined {
  if (items.length === 0) return undefined;
  try {
    const sample = [items[0], items[items.length >> 1], items[items.length - 1]];
    return createHash('sha256').update(`${items.length}:${jsonText(sample)}`).digest('base64');
  } catch {
    return undefined;
  }
}

/**
 * The message of a page answering the same records as the page before it, or (`earlier`) as an
 * earlier page of this read, by its number.
 */
export function samePageMessage(position: string, records: number, earlier?: number): string {
  if (earlier !== undefined) {
    return `pagination did not advance: the source answered ${position} with the same ${records} record(s) as page ${earlier} of this read (it cycles through its pages); the read stopped there, the pages before it are kept`;
  }
  return `pagination did not advance: the source answered ${position} with the same ${records} record(s) as the page before it (it ignores the position asked for, or repeats a page past its end); the read stopped there, the pages before it are kept`;
}

/** A next link without the auth query parameters (composeRequest sets them on every request): a stored position never holds a credential. */
function withoutAuthQuery(position: Position, auth: AuthParts): Position {
  if (position.url === undefined || auth.query.length === 0) return position;
  const url = new URL(position.url);
  for (const [name] of auth.query) removeQueryParameter(url, name);
  return { ...position, url: url.href };
}

/** How the endpoint's answer shows a stored position: its description, a next link's address masked as messages mask it. */
function shownPosition(position: Position, auth: AuthParts): string {
  return position.url === undefined ? position.describe : `${position.describe} ${shownUrl(new URL(position.url), auth)}`;
}

/** What the pre-flight reports for one endpoint. */
export interface FirstPageReport {
  /** The composed URL, credentials masked. */
  url: string;
  method: string;
  /** The HTTP status, 0 when no answer was received. */
  status: number;
  /** The records the pagination strategy read from the answer. */
  items: unknown[];
  /** The first record (bounded: a longer one is given as truncated JSON text). */
  sample?: unknown;
  /** `ok`, `HTTP <status>`, or the fault (unresolved credential, GraphQL error, unreadable body, network). */
  verdict: string;
  /** The connector's own fault, found before anything was sent (a credential or template that did not resolve, a secret that does not open). */
  unsent?: EngineErrorCode;
  /** What the request left out that a run leaves out too (a declared header whose value_env resolves to nothing). */
  warnings?: string[];
  /** The parsed body of a 2xx answer (for drafting an endpoint from it; never sent to clients whole). */
  body?: unknown;
  /** The `Link` header of the answer, if any. */
  link?: string;
  /** Nothing was sent: the connector's rate limit allows the next request only after this many milliseconds (past `maxTokenWaitMs`). */
  rateLimitedMs?: number;
}

const SAMPLE_CHARS = 2000;

/**
 * The pre-flight's probe: composes the first request a run would send (method, path, declared
 * headers, auth, pagination parameters, watermark), sends it once (no retry; a token is taken from
 * the connector's bucket, waiting at most `maxTokenWaitMs` for it: past that nothing is sent and
 * `rateLimitedMs` says when the next request is allowed), writes nothing and never throws for an
 * upstream or configuration fault: the verdict names it. Only cancellation throws.
 */
export async function firstPage(connector: ConnectorSpec, endpoint: EndpointSpec, ctx: EngineContext): Promise<FirstPageReport> {
  const strategy = createStrategy(endpoint.pagination, endpoint.soap);
  let auth: AuthParts = NO_AUTH;
  let plan: RequestPlan | undefined;
  let req: ComposedRequest | undefined;
  let named: (name: string) => string | undefined = () => undefined;
  try {
    named = await resolveNamedValues(connector, endpoint, (name) => ctx.resolveCredential(name));
    plan = planRequests(connector, endpoint, named, NO_AUTH);
    req = composeRequest(plan, endpoint, strategy.first(), undefined, ctx.watermark);
    auth = await resolveAuth(connector.auth, (name) => ctx.resolveCredential(name));
    plan = planRequests(connector, endpoint, named, auth);
    req = composeRequest(plan, endpoint, strategy.first(), undefined, ctx.watermark);
  } catch (err) {
    if (!(err instanceof EngineError)) throw err;
    return { url: req ? redactUrl(req.url, plan?.auth ?? auth) : '', method: plan?.method ?? endpoint.method, status: 0, items: [], verdict: err.message, unsent: err.code };
  }

  const unsent = unsentHeaders(connector.headers ?? [], named);
  const report = { url: redactUrl(req.url, plan.auth), method: req.method, ...(unsent.length > 0 ? { warnings: unsent } : {}) };
  const waitMs = ctx.maxTokenWaitMs === undefined ? 0 : ctx.limiter.waitMs();
  if (waitMs > ctx.maxTokenWaitMs!) {
    return { ...report, status: 0, items: [], verdict: `not checked: ${rateLimitWait(waitMs)}; nothing was sent`, rateLimitedMs: waitMs };
  }
  let answer: Exchange;
  try {
    answer = await exchangeMasked(req, {
      limiter: ctx.limiter,
      policy: { ...DEFAULT_RETRY, attempts: 1 },
      signal: ctx.signal,
      dispatcher: ctx.dispatcher,
      timeouts: ctx.timeouts,
      ...(endpoint.soap ? soapExchange(endpoint.soap) : {}),
    }, plan.auth);
  } catch (err) {
    if (err instanceof CancelledError || !(err instanceof EngineError)) throw err;
    // An answer that could not be read (not JSON, empty, compressed) was answered all the same: its status is shown.
    const status = (err as { status?: unknown }).status;
    return { ...report, status: typeof status === 'number' ? status : 0, items: [], verdict: err.message };
  }
  if (!answer.ok) return { ...report, status: answer.status, items: [], verdict: endpoint.soap ? soapFailure(answer, endpoint, plan.auth).message : `HTTP ${answer.status}` };
  try {
    if (endpoint.graphql) checkGraphQLEnvelope(answer.body, plan.auth);
    if (endpoint.soap) checkSoapAnswer(answer.status, answer.body, plan.auth);
  } catch (err) {
    return { ...report, status: answer.status, items: [], verdict: (err as Error).message };
  }
  let items: unknown[];
  try {
    items = strategy.items(answer.body);
  } catch (err) {
    // A response_path searching at any depth (..) over a page nesting past its limit: the run fails on it too.
    if (!(err instanceof TooDeepForPath)) throw err;
    return { ...report, status: answer.status, items: [], verdict: err.message };
  }
  const link = answer.headers.link;
  const out: FirstPageReport = { ...report, status: answer.status, items, verdict: 'ok', body: answer.body, link: Array.isArray(link) ? link.join(', ') : link };
  // Cut to the depth a row may have first: redacting and serialising walk it recursively.
  if (items.length > 0) out.sample = boundedSample(redactDeep(cutDeeperThan(items[0], MAX_JSON_DEPTH, DEEPER), plan.auth));
  return out;
}

/** Why a probe sent nothing: the wait for the connector's next token, in whole seconds (rounded up). */
export function rateLimitWait(waitMs: number): string {
  return `the connector's rate limit (default_rate_limit) allows its next request in ${Math.ceil(waitMs / 1000)} s`;
}

/**
 * exchange, with the start of a 2xx body that could not be read (not JSON, not a SOAP envelope),
 * which its message quotes, masked as every other upstream text is: a page that echoes the request
 * back (a gateway's error page) would otherwise show the credentials it carried.
 */
async function exchangeMasked(req: ComposedRequest, options: ExchangeOptions, auth: AuthParts): Promise<Exchange> {
  try {
    return await exchange(req, options);
  } catch (err) {
    if (err instanceof UnreadableResponseError) throw new UnreadableResponseError(redactText(err.message, auth), err.status);
    throw err;
  }
}

function failure(answer: Extract<Exchange, { ok: false }>, req: ComposedRequest, auth: AuthParts, pagesRead: number): EngineError {
  if ((answer.status === 404 || answer.status === 410) && req.carriesPosition) return new StalePositionError(answer.status, req.position, pagesRead);
  return new UpstreamHttpError(answer.status, redactText(answer.text, auth), redirectLocation(answer, auth));
}

/**
 * A GraphQL 200 must carry data and no errors (spec 3 Errors). GraphQL's `errors` is a list; one
 * given as something else (an object, a text) beside partial data is an error all the same, not
 * ignored: only an absent, null or empty `errors` is none.
 */
function checkGraphQLEnvelope(body: unknown, auth: AuthParts): void {
  const envelope = body && typeof body === 'object' && !Array.isArray(body) ? (body as { errors?: unknown; data?: unknown }) : undefined;
  const given = envelope?.errors;
  const errors = given === undefined || given === null || Array.isArray(given) ? given : [given];
  if (Array.isArray(errors) && errors.length > 0) {
    const first = errors[0] as { message?: unknown } | undefined;
    const message = typeof first === 'string' ? first : typeof first?.message === 'string' ? first.message : jsonText(first);
    throw new GraphQLErrorsError(errors.length, redactText(message, auth));
  }
  if (envelope?.data === null || envelope?.data === undefined) throw new GraphQLMalformedError(redactText(jsonText(body) ?? String(body), auth));
}

/** What a pre-flight sample shows in place of what a record nests below MAX_JSON_DEPTH. */
const DEEPER = `(nested deeper than ${MAX_JSON_DEPTH} levels: not shown)`;

function boundedSample(item: unknown): unknown {
  const text = jsonText(item);
  // An answer goes out through JSON.stringify: a bigint (an integer beyond ±(2^53 − 1)) or a number past a double's range as its text in a string.
  if (text === undefined || text.length <= SAMPLE_CHARS) return exactNumbersAsText(item);
  return `${text.slice(0, SAMPLE_CHARS)}…`;
}
