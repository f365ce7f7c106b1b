/**
 * The demo source of spec 3: a fixture HTTP server serving the same partner records under ten REST
 * dialects, one GraphQL endpoint and eight SOAP services. docs/demo-source.md describes every shape.
 * For tests only, `faults` adds the fault routes of faults.ts and `record` keeps every request.
 */
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { type AuthKind, authorized, challenge, credentialsFromEnv, type DemoCredentials, refusal } from './credentials.js';
import { DEFAULT_ROWS, Partners } from './data.js';
import { DIALECTS } from './dialects.js';
import { handleGraphQL } from './graphql.js';
import { FAULTS } from './faults.js';
import { HttpError, type RequestContext, requestBody, sendJson, sendText } from './http.js';
import { handleSoap, SOAP_SERVICES, soapFault } from './soap.js';

const DEFAULT_PORT = 8099;

interface DemoSourceOptions {
  /** Default DEMO_PORT, else 8099; 0 picks a free port. */
  port?: number;
  /** Default DEMO_HOST, else every interface. */
  host?: string;
  /** Default DEMO_ROWS, else 2400. */
  rows?: number;
  /** Each field defaults to its DEMO_* environment variable, else the fixed test value. */
  credentials?: Partial<DemoCredentials>;
  /** One line per request; default stdout. */
  log?: (line: string) => void;
  /** Test-only: also serve the fault routes of faults.ts (never set by `npm run demo-source`). */
  faults?: boolean;
  /** Test-only: keep every request (`seen()`, `count()`); bodies are read before routing. */
  record?: boolean;
}

/** A request as the recorder kept it. */
export interface SeenRequest {
  method: string;
  path: string;
  url: URL;
  headers: IncomingHttpHeaders;
  body: string;
}

export interface DemoSource {
  /** Base URL to call, e.g. http://127.0.0.1:8099 (127.0.0.1 when listening on every interface). */
  url: string;
  port: number;
  close(): Promise<void>;
  /** Requests received since start. */
  requests(): number;
  /** With `record`: every request received, in arrival order. */
  seen(): SeenRequest[];
  /** With `record`: the number of requests whose path starts with `prefix`. */
  count(prefix: string): number;
}

function envInt(name: string, value: string | undefined, fallback: number, max: number): number {
  if (value === undefined || value.trim() === '') return fallback;
  if (!/^\d+$/.test(value.trim()) || Number(value) > max) throw new Error(`${name} must be an integer from 0 to ${max}, got '${value}'`);
  return Number(value);
}

function unauthorized(ctx: RequestContext, kind: AuthKind, soap: boolean) {
  if (soap) return sendText(ctx.res, 401, 'text/xml; charset=utf-8', soapFault('Client', refusal(kind)), challenge(kind));
  sendJson(ctx.res, 401, { error: 'unauthorized', message: refusal(kind) }, challenge(kind));
}

function methodNotAllowed(method: string, allow: string, path: string): HttpError {
  return new HttpError(405, 'method_not_allowed', `${method} is not allowed on ${path}; use ${allow}`, { Allow: allow });
}

async function route(ctx: RequestContext, faults: boolean): Promise<void> {
  const { req, url } = ctx;
  const method = req.method ?? 'GET';
  const path = url.pathname;
  const readMethod = method === 'GET' || method === 'HEAD';

  if (path === '/health') {
    if (!readMethod) throw methodNotAllowed(method, 'GET', path);
    return sendJson(ctx.res, 200, { status: 'ok', rows: ctx.data.size });
  }
  if (path === '/admin/reset') {
    if (method !== 'GET' && method !== 'POST') throw methodNotAllowed(method, 'GET, POST', path);
    const cleared = ctx.flaky.size;
    ctx.flaky.clear();
    return sendJson(ctx.res, 200, { reset: true, cleared });
  }
  if (path === '/graphql') {
    if (method !== 'POST') throw methodNotAllowed(method, 'POST', path);
    if (!authorized('api-key', req, url.searchParams, ctx.credentials)) {
      return sendJson(ctx.res, 401, { errors: [{ message: refusal('api-key') }], data: null });
    }
    return handleGraphQL(ctx, await requestBody(ctx));
  }

  const segments = path.split('/');
  const soap = /^\/([\w-]+)\/start\.swe$/.exec(path);
  const service = soap ? SOAP_SERVICES[soap[1]!] : undefined;
  if (soap && service) {
    if (method !== 'POST') throw methodNotAllowed(method, 'POST', path);
    const xml = await requestBody(ctx);
    if (!authorized('basic', req, url.searchParams, ctx.credentials)) return unauthorized(ctx, 'basic', true);
    return handleSoap(ctx, soap[1]!, service, xml);
  }

  const dialect = /^\/[\w-]+\/partners\/?$/.test(path) ? DIALECTS[segments[1]!] : undefined;
  if (dialect) {
    if (!readMethod && !dialect.anyMethod) throw methodNotAllowed(method, 'GET', path);
    dialect.precheck?.(ctx);
    if (!authorized(dialect.auth, req, url.searchParams, ctx.credentials)) return unauthorized(ctx, dialect.auth, false);
    return dialect.handle(ctx);
  }
  const fault = faults ? FAULTS.get(path.replace(/(.)\/$/, '$1')) : undefined;
  if (fault) {
    if (!readMethod && !fault.anyMethod) throw methodNotAllowed(method, 'GET', path);
    return fault.handle(ctx);
  }
  throw new HttpError(404, 'not_found', `no route for ${method} ${path}; see docs/demo-source.md`);
}

function urlHost(host: string | undefined): string {
  if (host === undefined || host === '' || host === '0.0.0.0' || host === '::') return '127.0.0.1';
  return host.includes(':') ? `[${host}]` : host;
}

export async function startDemoSource(options: DemoSourceOptions = {}): Promise<DemoSource> {
  const env = process.env;
  const port = options.port ?? envInt('DEMO_PORT', env.DEMO_PORT, DEFAULT_PORT, 65535);
  const host = options.host ?? (env.DEMO_HOST || undefined);
  const rows = options.rows ?? envInt('DEMO_ROWS', env.DEMO_ROWS, DEFAULT_ROWS, 50_000_000);
  if (!Number.isInteger(rows) || rows < 0) throw new Error(`rows must be a non-negative integer, got ${rows}`);
  const credentials = { ...credentialsFromEnv(env), ...options.credentials };
  const log = options.log ?? ((line: string) => process.stdout.write(`${line}\n`));
  const data = new Partners(rows);
  const flaky = new Map<string, number>();
  const recorded: SeenRequest[] | undefined = options.record ? [] : undefined;
  const seen = () => {
    if (!recorded) throw new Error('startDemoSource({ record: true }) keeps the requests; this source was started without it');
    return recorded;
  };
  let count = 0;
  let boundPort = port;

  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    count++;
    const started = performance.now();
    let logged = false;
    const done = () => {
      if (logged) return;
      logged = true;
      log(`${req.method} ${req.url} ${res.statusCode} ${(performance.now() - started).toFixed(1)}ms`);
    };
    res.on('finish', done);
    res.on('close', done);

    const origin = `http://${req.headers.host ?? `${urlHost(host)}:${boundPort}`}`;
    let url: URL;
    try {
      url = new URL(req.url ?? '/', origin);
    } catch {
      url = new URL('/', 'http://invalid');
    }
    const ctx: RequestContext = { req, res, url, origin, data, credentials, flaky };
    const handle = async () => {
      if (recorded) {
        const entry: SeenRequest = { method: req.method ?? 'GET', path: url.pathname, url, headers: req.headers, body: '' };
        recorded.push(entry);
        entry.body = await requestBody(ctx);
      }
      await route(ctx, options.faults === true);
    };
    handle().catch((error: unknown) => {
      if (res.headersSent) return res.destroy();
      if (error instanceof HttpError) return sendJson(res, error.status, { error: error.code, message: error.message }, error.headers);
      sendJson(res, 500, { error: 'internal_error', message: `demo source bug: ${(error as Error)?.message ?? String(error)}` });
    });
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  boundPort = (server.address() as AddressInfo).port;

  return {
    url: `http://${urlHost(host)}:${boundPort}`,
    port: boundPort,
    requests: () => count,
    seen,
    count: (prefix) => seen().filter((r) => r.path.startsWith(prefix)).length,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.close((error) => (error ? reject(error) : resolve()));
        server.closeAllConnections();
      }),
  };
}
