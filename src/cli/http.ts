import { STATUS_CODES } from 'node:http';
import { Agent, type Dispatcher, request } from 'undici';
import { NoTenantError } from '../errors.js';
import type { Target } from './config.js';
import { CliError, HttpError } from './errors.js';

/** The one HTTP helper of `svc`: every call goes through `call` (JSON), `open` (an event stream) or `fetch` (a file). */

export type Query = Record<string, string | number | boolean | string[] | undefined>;

interface CallOptions {
  query?: Query;
  /** Sent as application/json. */
  json?: unknown;
  headers?: Record<string, string>;
  /** The longest wait for the answer's head and between its body's bytes (default: two minutes for the head, undici's five minutes for the body). */
  timeoutMs?: number;
}

/** Said after a refused connection (nothing listening): the TUI leaves it out, its status line has no room for it. */
export const NOT_RUNNING_HINT = '; is the hub running there? (npm start serves http://127.0.0.1:8080; svc login --url <base URL> names another)';

/** The head of an answer waited for this long at most (a hub that accepts the connection and never answers). */
const HEADERS_TIMEOUT_MS = 120_000;
/** undici's default longest wait between two pieces of a body (a call without `timeoutMs`). */
const BODY_TIMEOUT_MS = 300_000;

export interface Reply<T> {
  status: number;
  body: T;
  /** A paged list's next page: the `before` cursor its `Link: <…>; rel="next"` header names, when more items follow. */
  next?: string;
}

/** The `before` cursor of a `Link` header's `rel="next"` target, undefined without one. */
export function nextCursor(link: string | string[] | undefined): string | undefined {
  for (const value of ([] as string[]).concat(link ?? [])) {
    const target = /<([^>]*)>\s*;\s*rel="?next"?/.exec(value)?.[1];
    const before = target === undefined ? null : new URL(target, 'http://hub.invalid').searchParams.get('before');
    if (before) return before;
  }
  return undefined;
}

/** A path with every interpolated value percent-encoded: path`/api/connectors/${name}`. */
export function path(strings: TemplateStringsArray, ...values: Array<string | number>): string {
  return strings.reduce((out, part, i) => out + part + (i < values.length ? encodeURIComponent(String(values[i])) : ''), '');
}

function refusedToken(from: Target['tokenFrom']): string {
  if (from === 'login') return 'the given token was refused; nothing was stored';
  if (from === 'environment') return 'the token in SVC_TOKEN was refused (expired?)';
  return 'the stored token was refused (expired?): svc login again';
}

/** The longest wait for the answer of /api/bff/v1/me asked to explain a 401 (then the hint names both causes). */
const PROBE_MS = 5_000;

/** The hub's 401 when the call needs a tenant and the caller names none (the token was taken, or, with the dev bypass, never read): `no tenant in security context`. */
const NO_TENANT = new NoTenantError().message;

/** What a refusal adds at login (the token given is stored only once the hub took it): nothing elsewhere. */
function nothingStored(target: Target): string {
  return target.tokenFrom === 'login' ? '; nothing was stored' : '';
}

/** The end of what svc says of a URL whose answers are not the hub's. */
function notAHub(target: Target): string {
  return `not a svc-hub, or not its base URL${nothingStored(target)}`;
}

/** Which token a message speaks of: SVC_TOKEN's, the one given to login, or the stored one. */
function tokenWhich(target: Target): string {
  return target.tokenFrom === 'environment' ? 'the token in SVC_TOKEN' : target.tokenFrom === 'login' ? 'the given token' : 'the stored token';
}

/** What an HTTP header value may not hold (the HTTP client's own test): a control character but tab, DEL, anything past U+00FF. */
const NOT_IN_HEADER = /[^\t\x20-\x7e\x80-\xff]/u;

/**
 * `value` when a header can carry it; else an error naming `what` and the character (never the
 * value: a token). Most often the CR that `SVC_TOKEN=$(cat token.txt)` keeps from a file saved with
 * CRLF line ends; the HTTP client refused it as `invalid authorization header`, which svc said as
 * `cannot reach URL`, of a hub that was up.
 */
function sendable(value: string, what: string, target: Target): string {
  const bad = NOT_IN_HEADER.exec(value)?.[0];
  if (bad === undefined) return value;
  const code = `U+${bad.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}`;
  const cr = bad === '\r' ? ' (a carriage return: the line end of a file saved with CRLF line ends?)' : '';
  throw new CliError(`${what} holds ${code}${cr}, which no HTTP header can carry; nothing was sent${nothingStored(target)}`);
}

/**
 * What a 401 `no tenant in security context` to a token means, by how `/api/bff/v1/me` says the hub
 * authenticated the same credential: a hub running the dev bypass reads no token (the tenant comes from
 * X-Tenant-ID); a hub that checks tokens took this one, and it names no tenant. Undefined `via`: /me
 * did not say (refused, unreachable), so both are named.
 */
export function tokenWithoutTenant(target: Target, via: unknown): string {
  const which = tokenWhich(target);
  const stored = nothingStored(target);
  const devTenant = target.tokenFrom === 'environment' ? 'unset SVC_TOKEN and set SVC_DEV_TENANT=ID' : `svc login --url ${target.url} --dev-tenant ID`;
  if (via === 'dev-bypass') return `${target.url} runs the dev bypass and reads no token, so the call named no tenant: ${devTenant}${stored}`;
  const useOther = "use a token of a tenant's user";
  if (via === 'token') return `${which} was taken but names no tenant (no tenant claim, no acting_as_tenant), and this call needs one: ${useOther}${stored}`;
  return `${which} named no tenant: either ${target.url} runs the dev bypass and reads no token (${devTenant}), or it names none (${useOther})${stored}`;
}

/**
 * What a call that sent no credential at all is told when the hub runs the dev bypass (`via` of /me):
 * it took the call as no tenant, and a dev tenant is what to give (a token it would not read).
 */
export function devBypassWithoutTenant(url: string): string {
  return `${url} runs the dev bypass, and no tenant was named (no credential was sent): svc login --url ${url} --dev-tenant ID, or set SVC_DEV_TENANT=ID`;
}

/** Why no credential went to `target` (SVC_URL names another URL than the stored login's): a 401's hint, and whoami's warning. */
export function storedForAnother(target: Target): string {
  return `the stored login is for ${target.storedFor}, and SVC_URL names ${target.url}: a credential is sent only to the URL it was stored for (svc login --url ${target.url}, or the same spelling of the URL)`;
}

export class Hub {
  /** A hub that accepts the connection and never answers is given up after two minutes (the answer's head; a stream's body has no limit). */
  private readonly agent = new Agent({ keepAliveTimeout: 2_000, headersTimeout: HEADERS_TIMEOUT_MS });

  constructor(
    readonly target: Target,
    private readonly signal?: AbortSignal,
  ) {}

  /** A JSON call; any status of 400 or more throws an HttpError carrying the hub's message, and so does a redirect (3xx), which is not followed. */
  async call<T = unknown>(method: Dispatcher.HttpMethod, route: string, options: CallOptions = {}): Promise<Reply<T>> {
    const headers: Record<string, string> = { accept: 'application/json', ...options.headers };
    let body: string | undefined;
    if (options.json !== undefined) {
      headers['content-type'] = 'application/json';
      body = JSON.stringify(options.json);
    }
    const res = await this.send(method, route, { query: options.query, headers, body, headersTimeout: options.timeoutMs, bodyTimeout: options.timeoutMs });
    if (res.statusCode >= 300) throw await this.refusal(res, method, route, options.timeoutMs);
    const text = await this.bodyText(res, options.timeoutMs);
    const type = String(res.headers['content-type'] ?? '');
    // The hub answers JSON (or nothing: a 204). Anything else is another server at the URL (a web
    // console's page answered for every path), whose 200 is no success of the call.
    if (text && !type.includes('json')) throw this.notTheHub(method, route, res.statusCode, type, "the hub's JSON");
    const next = nextCursor(res.headers.link);
    return { status: res.statusCode, body: parse(text, type) as T, ...(next ? { next } : {}) };
  }

  /**
   * A streaming GET (Server-Sent Events, `events tail`): no body timeout; the response with its body
   * unread, or, for a redirect or a status of 400 or more, an HttpError like `call`'s (the hint of a 401 included).
   */
  async open(route: string, query: Query, headers: Record<string, string>, headersTimeoutMs?: number): Promise<Dispatcher.ResponseData> {
    const res = await this.stream(route, query, headers, headersTimeoutMs);
    const type = String(res.headers['content-type'] ?? '');
    if (res.statusCode === 200 && !type.startsWith('text/event-stream')) {
      await res.body.dump();
      throw this.notTheHub('GET', route, res.statusCode, type, 'an event stream');
    }
    return res;
  }

  /**
   * The body of an answer, read whole; undici's `Body Timeout Error` (the head came, then the body
   * stalled for `timeoutMs`, or undici's five minutes without one) said as a missing head is.
   */
  private async bodyText(res: Dispatcher.ResponseData, timeoutMs: number | undefined): Promise<string> {
    try {
      return await res.body.text();
    } catch (err) {
      if (this.signal?.aborted || !isCode(err, 'UND_ERR_BODY_TIMEOUT')) throw err;
      throw new CliError(`${this.target.url} sent the head of its answer but then nothing of its body within ${seconds(timeoutMs ?? BODY_TIMEOUT_MS)}`);
    }
  }

  /** A success that is not what the hub answers (another server at the URL: a web console's page for every path). */
  private notTheHub(method: string, route: string, status: number, type: string, expected: string): CliError {
    const media = type.split(';')[0] || 'and no Content-Type';
    return new CliError(`${this.target.url} answered ${method} ${route.split('?')[0]} with ${status} ${media}, not ${expected}: ${notAHub(this.target)}`);
  }

  /**
   * A streaming GET of a file (no body timeout): the response with its body unread, or, for a
   * redirect or a status of 400 or more, an HttpError carrying the hub's message.
   */
  fetch(route: string, headers: Record<string, string> = {}): Promise<Dispatcher.ResponseData> {
    return this.stream(route, {}, headers);
  }

  private async stream(route: string, query: Query, headers: Record<string, string>, headersTimeout?: number): Promise<Dispatcher.ResponseData> {
    const res = await this.send('GET', route, { query, headers, bodyTimeout: 0, headersTimeout });
    if (res.statusCode < 300) return res;
    throw await this.refusal(res, 'GET', route);
  }

  /**
   * The HttpError for an answer of 300 or more: the hub's message with its hint, and its Retry-After.
   * A redirect (3xx) is not followed (the credential would go wherever it points, and a POST may come
   * back as a GET): it is an error naming where it points, never a success whose body nobody reads.
   */
  private async refusal(res: Dispatcher.ResponseData, method: string, route: string, timeoutMs?: number): Promise<HttpError> {
    if (res.statusCode < 400) {
      await res.body.dump();
      return new HttpError(res.statusCode, this.redirected(res.statusCode, header(res.headers.location), route), undefined);
    }
    const text = await this.bodyText(res, timeoutMs);
    const parsed = parse(text, String(res.headers['content-type'] ?? ''));
    const message = errorText(res.statusCode, parsed, text, String(res.headers['content-type'] ?? ''));
    // A token the hub took (or, with the dev bypass, never read) that names no tenant is no refused
    // token: the hub's 401 says which (`{"error": "no tenant in security context"}` against
    // `authentication required`), and /me, asked on this error path only, says why.
    // Without any credential that 401 comes from a hub running the dev bypass (one that checks tokens
    // answers `authentication required`): /me says so, and the hint names a dev tenant, not a token.
    const withoutTenant = res.statusCode === 401 && (parsed as { error?: unknown } | undefined)?.error === NO_TENANT;
    let hinted: string;
    if (withoutTenant && this.target.token) hinted = `${message}; ${tokenWithoutTenant(this.target, await this.via())}`;
    else if (withoutTenant && !this.target.devTenant && !this.target.storedFor && (await this.via()) === 'dev-bypass') hinted = `${message}; ${devBypassWithoutTenant(this.target.url)}`;
    else hinted = this.withHint(res.statusCode, message, parsed, method, route);
    return new HttpError(res.statusCode, hinted, parsed, retryAfter(res.headers['retry-after']));
  }

  /**
   * How the hub authenticates this target's credential (`via` of GET /api/bff/v1/me), undefined when
   * it does not say, or not within PROBE_MS (the error it explains is not held up for the two minutes
   * of an ordinary call).
   */
  private async via(): Promise<unknown> {
    try {
      const res = await this.send('GET', '/api/bff/v1/me', { headers: { accept: 'application/json' }, headersTimeout: PROBE_MS, bodyTimeout: PROBE_MS });
      const text = await res.body.text();
      if (res.statusCode !== 200) return undefined;
      return (parse(text, String(res.headers['content-type'] ?? '')) as { via?: unknown } | undefined)?.via;
    } catch {
      return undefined;
    }
  }

  /**
   * A 401 to a token (but `no tenant in security context`, which `refusal` explains with
   * `tokenWithoutTenant`): at login, the given one is wrong (and nothing is stored); a stored one (or
   * SVC_TOKEN's) has most likely expired. A 401 to a dev-bypass tenant: the hub checks tokens. A 401
   * without a credential because SVC_URL is not the stored login's URL: says so. A 404 from a URL that ends in `/api`: the routes begin
   * with `/api` themselves, so the URL named the API, not the hub. Any other 404 but the hub's for an
   * object it does not have (an empty body, another server's JSON, the hub's `not found` for a path
   * it does not serve): the URL is not the hub's base (notServed).
   */
  private withHint(status: number, message: string, body: unknown, method: string, route: string): string {
    if (status === 401 && this.target.token) return `${message}; ${refusedToken(this.target.tokenFrom)}`;
    if (status === 401 && this.target.devTenant) {
      const stored = nothingStored(this.target);
      return `${message}; this hub checks tokens (it has no dev bypass): svc login --url ${this.target.url} --token-stdin${stored}`;
    }
    if (status === 401 && this.target.storedFor) return `${message}; ${storedForAnother(this.target)}`;
    if (status === 401) {
      return `${message}; no credential was sent: svc login --url ${this.target.url} --token-stdin (or --dev-tenant ID), or set SVC_TOKEN (or SVC_DEV_TENANT)`;
    }
    if (status === 404 && /\/api\/*$/i.test(this.target.url)) return `${message}; the hub's URL is its base, without /api (${this.target.url.replace(/\/api\/*$/i, '')})${nothingStored(this.target)}`;
    if (status === 404 && !missingObject(body)) return `${message}; ${this.notServed(method, route)}`;
    return message;
  }

  /** What a 404 that is not the hub's for a missing object says: the URL does not serve the route (`; nothing was stored` at login). */
  notServed(method: string, route: string): string {
    return `${this.target.url} does not serve ${method} ${route.split('?')[0]}: ${notAHub(this.target)}`;
  }

  /**
   * What a redirect says: where it points and, when that is the same route under another base (an
   * ingress sending http to https, a moved hub), the base URL to log in with instead.
   */
  private redirected(status: number, location: string | undefined, route: string): string {
    const what = `${status} ${STATUS_CODES[status] ?? 'redirect'}`;
    const stored = nothingStored(this.target);
    if (!location) return `${this.target.url} answered ${what} without a Location; svc follows no redirect${stored}`;
    const target = URL.canParse(location, this.url(route)) ? new URL(location, this.url(route)) : undefined;
    const routePath = route.split('?')[0]!;
    const base = target?.pathname.endsWith(routePath) ? `${target.origin}${target.pathname.slice(0, -routePath.length)}` : undefined;
    const instead = base && base !== this.target.url ? `: give the hub's URL as it serves it, svc login --url ${base}` : '';
    return `${this.target.url} answered ${what} to ${target?.href ?? location}; svc follows no redirect (the credential would go along)${instead}${stored}`;
  }

  close(): Promise<void> {
    return this.agent.destroy();
  }

  url(route: string, query: Query = {}): string {
    const search = new URLSearchParams();
    for (const [key, value] of Object.entries(query)) {
      if (value === undefined) continue;
      for (const one of Array.isArray(value) ? value : [value]) search.append(key, String(one));
    }
    const qs = search.toString();
    return `${this.target.url}${route}${qs ? `?${qs}` : ''}`;
  }

  private async send(
    method: Dispatcher.HttpMethod,
    route: string,
    options: { query?: Query; headers: Record<string, string>; body?: string; bodyTimeout?: number; headersTimeout?: number },
  ): Promise<Dispatcher.ResponseData> {
    const url = this.url(route, options.query);
    const credential = this.authHeaders();
    try {
      return await request(url, {
        method,
        headers: { ...credential, ...options.headers },
        body: options.body,
        dispatcher: this.agent,
        signal: this.signal,
        bodyTimeout: options.bodyTimeout,
        headersTimeout: options.headersTimeout,
      });
    } catch (err) {
      if (this.signal?.aborted) throw err;
      const cause = (err as { cause?: Error }).cause;
      // Nothing listening there: most often a hub not started, or another address than the one it serves on.
      const codes = [(err as NodeJS.ErrnoException).code, (cause as NodeJS.ErrnoException | undefined)?.code];
      // A hub that took the connection and sends nothing (hanging, or a proxy waiting for it) is no unreachable one.
      if (codes.includes('UND_ERR_HEADERS_TIMEOUT')) {
        throw new CliError(`${this.target.url} took the connection but sent no answer within ${seconds(options.headersTimeout ?? HEADERS_TIMEOUT_MS)}`);
      }
      const refused = codes.includes('ECONNREFUSED') ? NOT_RUNNING_HINT : '';
      throw new CliError(`cannot reach ${this.target.url}: ${(err as Error).message}${cause?.message ? ` (${cause.message})` : ''}${refused}`);
    }
  }

  /** The credential's header; one that no header can carry is said here, before anything is sent (the HTTP client's refusal would read as a hub that cannot be reached). */
  private authHeaders(): Record<string, string> {
    const { token, devTenant } = this.target;
    if (token) return { authorization: `Bearer ${sendable(token, tokenWhich(this.target), this.target)}` };
    if (devTenant) return { 'x-tenant-id': sendable(devTenant, "the dev tenant (SVC_DEV_TENANT, or the stored login's)", this.target) };
    return {};
  }
}

/**
 * Whether a 404's body is the hub's answer for an object it does not have: its error shape (a JSON
 * object of `error`, and `field` and `hint` alone beside it) whose `error` is a sentence naming the
 * object (`connector NAME not found`, `decision not found`). Not: the hub's `not found` alone (a path
 * it does not serve), an empty body, text, or another server's JSON (`{"error": "not_found"}`, a
 * code rather than a sentence; `{"error": …, "message": …}`).
 */
export function missingObject(body: unknown): boolean {
  if (!body || typeof body !== 'object' || Array.isArray(body)) return false;
  const { error } = body as { error?: unknown };
  if (typeof error !== 'string' || error === 'not found' || !/\S\s+\S/.test(error)) return false;
  return Object.keys(body).every((key) => key === 'error' || key === 'field' || key === 'hint');
}

/** `10 s`, `2.5 s`: a duration as the messages say it. */
export function seconds(ms: number): string {
  return ms % 1_000 === 0 ? `${ms / 1_000} s` : `${(ms / 1_000).toFixed(1)} s`;
}

/** Whether `err`, or its cause, carries undici's (or the system's) error `code`. */
function isCode(err: unknown, code: string): boolean {
  return (err as NodeJS.ErrnoException | undefined)?.code === code || (err as { cause?: NodeJS.ErrnoException } | undefined)?.cause?.code === code;
}

function header(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

/** `Retry-After` as whole seconds; an HTTP date (or anything else) is ignored. */
function retryAfter(header: string | string[] | undefined): number | undefined {
  const value = Array.isArray(header) ? header[0] : header;
  return value !== undefined && /^\s*\d+\s*$/.test(value) ? Number(value) : undefined;
}

function parse(text: string, contentType: string): unknown {
  if (!text) return undefined;
  if (contentType.includes('json')) {
    try {
      return JSON.parse(text);
    } catch {
      return text;
    }
  }
  return text;
}

/**
 * `{error, field?, hint?}`, a plain-text body (the /api/platform 401/403), or the status's name. An
 * HTML page is none of the hub's answers (a proxy's or a load balancer's 502, 503, 504 in front of
 * it): its title, said to be such a page, where its markup was printed line after line.
 */
function errorText(status: number, body: unknown, text: string, contentType: string): string {
  if (body && typeof body === 'object' && typeof (body as { error?: unknown }).error === 'string') {
    const { error, field, hint } = body as { error: string; field?: string; hint?: string };
    return `${error}${field && !error.includes(field) ? ` (field ${field})` : ''}${hint ? `; hint: ${hint}` : ''}`;
  }
  if (contentType.includes('html')) {
    const title = /<title[^>]*>([^<]*)<\/title>/i.exec(text)?.[1]?.replace(/\s+/g, ' ').trim().slice(0, 200);
    return `${title || (STATUS_CODES[status] ?? 'error').toLowerCase()}: an HTML page, not the hub's answer (a proxy or a load balancer in front of it, or not a svc-hub)`;
  }
  if (text.trim()) return text.trim().slice(0, 500);
  return (STATUS_CODES[status] ?? 'error').toLowerCase();
}
