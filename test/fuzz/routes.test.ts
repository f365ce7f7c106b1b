import { writeFileSync } from 'node:fs';
import { METHODS, request, Agent } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import fc from 'fast-check';
import type pg from 'pg';
import { routeTable } from '../../apiserver/app.js';
import { servesHead } from '../../apiserver/router.js';
import { ownerClient } from '../harness/api-client.js';
import { type Answer, DeclaredAnswers, mediaType } from '../harness/declared-answers.js';
import { startTestHub, type TestHub } from '../harness/hub.js';
import { startIssuer, type TestIssuer } from '../harness/tokens.js';
import { MAX_JSON_BODY_BYTES, unstorableText } from '../../src/validation/input-limits.js';
import { joinField } from '../../src/validation/schema-errors.js';
import { type FuzzRequest, plainRequest, requestArbitrary, tokenArbitrary, type Unreadable, undeclaredNameArbitrary, unreadableBodyArbitrary } from './arbitraries.js';
import { type LoopbackGuard, loopbackOnly } from './loopback-only.js';

/**
 * Property-based fuzzing of every declared route against a real hub on a real database: generated
 * path parameters, query strings, headers and bodies (from each route's JSON Schemas, and junk).
 * No request may get a 500 (or hang, or crash the process), a status its operation does not
 * declare in the OpenAPI document or a body not of the shape declared for it, and the hub must still answer
 * /q/health/live at the end. A route joins by being declared: the table is the router's own.
 * Bodies come as UTF-8 without a charset parameter, and with one (spelt in any case or quoted,
 * latin-1, UTF-16, unknown, empty, two of them) or with bytes invalid in their charset: a route that
 * reads a body answers those it cannot read with a 400 naming why (and the offset of invalid bytes).
 *
 * SVC_FUZZ_RUNS sets the requests per route (default 30, a third of that again with tokens: about
 * 20 s for the whole table);
 * SVC_FUZZ_SEED replays a run. Outbound connections are kept on loopback (loopback-only.ts).
 */

const RUNS = Number(process.env.SVC_FUZZ_RUNS ?? 30);
const SEED = process.env.SVC_FUZZ_SEED === undefined ? undefined : Number(process.env.SVC_FUZZ_SEED);
const REQUEST_TIMEOUT_MS = 10_000;
const MASTER_KEY = 'ab'.repeat(32);

const routes = routeTable({}, () => ({}));

let hub: TestHub;
/** The same database behind an OIDC issuer, in the prod profile: tokens with generated claims instead of the dev bypass. */
let oidcHub: TestHub;
let issuer: TestIssuer;
let owner: pg.Client;
let guard: LoopbackGuard;
let port: number;
let oidcPort: number;
const agent = new Agent({ keepAlive: true, maxSockets: 4 });
const crashes: unknown[] = [];
const statuses = new Map<string, number>();
const onCrash = (err: unknown) => crashes.push(err);

beforeAll(async () => {
  guard = loopbackOnly();
  process.on('uncaughtException', onCrash);
  process.on('unhandledRejection', onCrash);
  // No embedding port: search and chat answer 503 at once instead of running the local model for
  // every generated query (apiserver/routes/retrieval/rag.test.ts drives them with the model).
  // One master key for both hubs: they share the database and its stored secrets.
  hub = await startTestHub({ 'svc.connectors.retry.base-delay': '5ms', 'svc.connectors.retry.max-delay': '20ms', 'svc.embedding.provider': 'none', 'svc.secret.master-key': MASTER_KEY });
  port = Number(new URL(hub.url).port);
  issuer = await startIssuer();
  // The prod profile (its rate limits, its refusal of private outbound targets), as deployed.
  oidcHub = await startTestHub({ 'svc.profile': 'prod', 'svc.oidc.issuer': issuer.issuer, 'svc.datasource.url': hub.ownerUrl, 'svc.embedding.provider': 'none', 'svc.secret.master-key': MASTER_KEY });
  oidcPort = Number(new URL(oidcHub.url).port);
  owner = await ownerClient(hub.ownerUrl);
  await owner.query(`insert into core.tenants (id, code, name) values (2, 'other', 'Other') on conflict do nothing`);
  await owner.query(`select setval(pg_get_serial_sequence('core.tenants', 'id'), (select max(id) from core.tenants))`);
  // Something for the path parameters to find: a connector `fuzz` (endpoint `items`) and a secret.
  const seeded = [
    await seed('POST', '/api/connectors/apply', 'application/json', {
      apiVersion: 'connectors.svc.io/v1', kind: 'Connector', metadata: { name: 'fuzz' }, connector_type: 'rest-generic', scopes: ['fuzz'],
      spec: { base_url: 'http://127.0.0.1:9', endpoints: [{ id: 'items', path: '/items', target: { kind: 'hybrid', table: 'ext.fuzz_items', unique_key: '$.id' } }] },
    }),
    await seed('POST', '/api/platform/secrets', 'application/json', { name: 'fuzz-secret', value: 'not-a-real-secret' }),
  ];
  expect(seeded).toEqual([201, 201]);
}, 60_000);

afterAll(async () => {
  agent.destroy();
  await owner?.end();
  await oidcHub?.stop();
  await hub?.stop();
  await issuer?.close();
  process.off('uncaughtException', onCrash);
  process.off('unhandledRejection', onCrash);
  guard?.restore();
  // SVC_FUZZ_TRACE=<file>: how often each route answered each status (is the fuzzer getting past validation?).
  if (process.env.SVC_FUZZ_TRACE) writeFileSync(process.env.SVC_FUZZ_TRACE, [...statuses].map(([k, n]) => `${k}: ${n}`).join('\n'));
});

function trace(route: string, answer: Answer): void {
  if (!process.env.SVC_FUZZ_TRACE) return;
  const key = `${route} ${answer.status} ${answer.body.slice(0, 50)}`;
  statuses.set(key, (statuses.get(key) ?? 0) + 1);
}

async function seed(method: string, path: string, type: string, body: unknown): Promise<number> {
  return (await send({ method, path, headers: { 'X-Tenant-ID': '1', 'Content-Type': type }, body: Buffer.from(JSON.stringify(body)) })).status;
}

/** One request; an event stream is read only until its headers arrive, then dropped. */
function send(req: FuzzRequest, to = port): Promise<Answer & { allow?: string }> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string | number> = { ...req.headers };
    if (req.body) headers['Content-Length'] = req.body.length;
    const r = request({ host: '127.0.0.1', port: to, method: req.method, path: req.path, headers, agent, signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) }, (res) => {
      const status = res.statusCode ?? 0;
      if (String(res.headers['content-type'] ?? '').startsWith('text/event-stream')) {
        res.destroy();
        r.destroy();
        resolve({ status, type: 'text/event-stream', body: '' });
        return;
      }
      const type = mediaType(res.headers['content-type']);
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status, type, body: Buffer.concat(chunks).toString('utf8'), allow: res.headers.allow }));
      res.on('error', reject);
    });
    r.on('error', reject);
    r.end(req.body);
  });
}

const declared = new DeclaredAnswers(routes);

const clip = (text: string, n = 120) => (text.length > n ? `${text.slice(0, n)}…(${text.length})` : text);
const describeRequest = (req: FuzzRequest) =>
  JSON.stringify({ method: req.method, path: clip(req.path, 300), headers: Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k, clip(v)])), body: req.body && clip(req.body.toString('utf8'), 300) });

/** The router's 400 for a body it cannot read: `field: "body"`, the error naming why (and where, for invalid bytes). */
function expectRefusal(answer: Answer, unreadable: Unreadable, req: FuzzRequest): void {
  const fail = (why: string) => new Error(`${why}: ${answer.status} ${clip(answer.body, 500)} for ${describeRequest(req)}`);
  if (answer.status !== 400) throw fail('not a 400');
  const body = JSON.parse(answer.body) as { error: string; field?: string };
  if (body.field !== 'body' || !unreadable.error.test(body.error)) throw fail(`not the 400 expected (${unreadable.error})`);
  if (unreadable.at !== undefined) {
    const offset = Number(/byte offset (\d+)$/.exec(body.error)?.[1]);
    // The invalid sequence starts at `at`; a decoder refuses it at one of its bytes (at most four).
    if (!(offset >= unreadable.at && offset <= unreadable.at + 3)) throw fail(`the offset named is not that of the invalid bytes put at ${unreadable.at}`);
  }
}

/**
 * A request with a query parameter its route does not declare is refused (4xx: the 400 naming it, or a
 * refusal before the parameters are read: 401, 403, 404, 429, 431), never answered as if it were not given.
 */
function expectUndeclaredRefused(answer: Answer, req: FuzzRequest): void {
  if (req.undeclared?.length && (answer.status < 400 || answer.status >= 500)) {
    throw new Error(`${answer.status}: undeclared query parameters ${JSON.stringify(req.undeclared.map((n) => clip(n, 40)))} were not refused: ${clip(answer.body, 300)} for ${describeRequest(req)}`);
  }
}

describe('every declared route, fuzzed', () => {
  it('covers the whole route table', () => {
    expect(routes.length).toBeGreaterThan(50);
  });

  it.each(routes.map((r) => [`${r.method} ${r.path}`, r] as const))('%s: answers as declared, never a 500 or a hang', async (_name, decl) => {
    await fc.assert(
      fc.asyncProperty(requestArbitrary(decl), async (req) => {
        // A fuzzed request may have deactivated a tenant the others act as: each starts with both active.
        if ((await owner.query(`update core.tenants set active = true where id in (1, 2) and not active`)).rowCount) hub.services.directory.invalidate();
        const answer = await send(req);
        trace(`${decl.method} ${decl.path}`, answer);
        if (answer.status >= 500 && answer.status !== 502 && answer.status !== 503 && answer.status !== 504) {
          throw new Error(`${answer.status} ${clip(answer.body, 500)} for ${describeRequest(req)}`);
        }
        const problem = declared.problem(decl, req.path, answer);
        if (problem) throw new Error(`${problem}: ${clip(answer.body, 500)} for ${describeRequest(req)}`);
        if (req.unreadable && decl.body && answer.status < 300) throw new Error(`${answer.status}: a body that cannot be read as declared was taken, for ${describeRequest(req)}`);
        expectUndeclaredRefused(answer, req);
      }),
      { numRuns: RUNS, seed: SEED, endOnFailure: true },
    );
  }, 120_000);

  it.each(routes.map((r) => [`${r.method} ${r.path}`, r] as const))('%s with a bearer token of generated claims: answers as declared, never a 500', async (_name, decl) => {
    await fc.assert(
      fc.asyncProperty(requestArbitrary(decl), tokenArbitrary, async (req, token) => {
        if ((await owner.query(`update core.tenants set active = true where id in (1, 2) and not active`)).rowCount) {
          hub.services.directory.invalidate();
          oidcHub.services.directory.invalidate();
        }
        const jwt = await issuer.mint(token.claims, { subject: token.subject, expiresIn: token.expiresIn, rogue: token.rogue });
        const headers = { ...req.headers, Authorization: `Bearer ${jwt}` };
        const answer = await send({ ...req, headers }, oidcPort);
        trace(`oidc ${decl.method} ${decl.path}`, answer);
        if (answer.status >= 500 && answer.status !== 502 && answer.status !== 503 && answer.status !== 504) {
          throw new Error(`${answer.status} ${clip(answer.body, 500)} for ${describeRequest(req)} with claims ${JSON.stringify(token)}`);
        }
        const problem = declared.problem(decl, req.path, answer);
        if (problem) throw new Error(`${problem}: ${clip(answer.body, 500)} for ${describeRequest(req)} with claims ${JSON.stringify(token)}`);
        expectUndeclaredRefused(answer, req);
      }),
      { numRuns: Math.max(2, Math.ceil(RUNS / 3)), seed: SEED, endOnFailure: true },
    );
  }, 120_000);

  const reading = routes.filter((r) => r.body !== undefined);
  it.each(reading.map((r) => [`${r.method} ${r.path}`, r] as const))('%s: a body in an unknown or empty charset, with bytes invalid in its charset, or not JSON or YAML, is a 400 naming it', async (_name, decl) => {
    const base = plainRequest(decl);
    await fc.assert(
      fc.asyncProperty(unreadableBodyArbitrary(decl), async ({ type, bytes, unreadable }) => {
        const req: FuzzRequest = { ...base, headers: { ...base.headers, 'Content-Type': type }, body: bytes };
        const answer = await send(req);
        trace(`charset ${decl.method} ${decl.path}`, answer);
        // The route's rate limit is checked before the body is read.
        if (answer.status === 429 && decl.rateLimit) return;
        // A JSON or YAML body past MAX_JSON_BODY_BYTES (a deep value in UTF-16 can be) is refused for its
        // length, before it is decoded: that 413, not the charset's 400.
        if (bytes.length > MAX_JSON_BODY_BYTES && (decl.bodyTypes ?? ['application/json']).every((t) => /json|yaml/.test(t))) {
          expect({ status: answer.status, error: (JSON.parse(answer.body) as { error?: string }).error }).toEqual({
            status: 413,
            error: `body too large: more than the ${MAX_JSON_BODY_BYTES.toLocaleString('en-US')} bytes a JSON or YAML body may hold`,
          });
          return;
        }
        expectRefusal(answer, unreadable, req);
      }),
      { numRuns: RUNS, seed: SEED, endOnFailure: true },
    );
  }, 120_000);

  // A request the gate and the parameter checks let through, with query parameters the route does not
  // declare added (after the declared ones it needs): a 400 naming the first of them and the names
  // the route takes, whatever else the request holds (a route's rate limit is checked before it).
  it.each(routes.map((r) => [`${r.method} ${r.path}`, r] as const))('%s: a query parameter it does not declare is a 400 naming it', async (_name, decl) => {
    const base = plainRequest(decl);
    const properties = Object.keys(((decl.query as { properties?: object } | undefined)?.properties ?? {}) as object);
    const takes = properties.length ? `this route takes ${properties.join(', ')}` : 'this route takes no query parameters';
    await fc.assert(
      fc.asyncProperty(fc.array(fc.tuple(undeclaredNameArbitrary(decl.query as Record<string, unknown> | undefined), fc.string({ maxLength: 10 }).filter((v) => unstorableText(v) === undefined)), { minLength: 1, maxLength: 3 }), async (extra) => {
        const added = extra.map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join('&');
        const req: FuzzRequest = { ...base, path: `${base.path}${base.path.includes('?') ? '&' : '?'}${added}`, undeclared: extra.map(([k]) => k) };
        const answer = await send(req);
        trace(`undeclared ${decl.method} ${decl.path}`, answer);
        if (answer.status === 429 && decl.rateLimit) return;
        // One of them (the first the parsed query holds: JavaScript puts integer-like names before the others).
        const body = (answer.type === 'application/json' ? JSON.parse(answer.body) : {}) as { error?: string; field?: string };
        const named = extra.map(([k]) => joinField('', k)).find((field) => field === body.field) ?? joinField('', extra[0]![0]);
        const expected = { status: 400, error: `unknown query parameter ${named}: ${takes}`, field: named };
        const seen = { status: answer.status, error: body.error, field: body.field };
        if (JSON.stringify(seen) !== JSON.stringify(expected)) throw new Error(`${JSON.stringify(seen)}, not ${JSON.stringify(expected)}, for ${describeRequest(req)}`);
      }),
      { numRuns: RUNS, seed: SEED, endOnFailure: true },
    );
  }, 120_000);

  // Every method Node's parser takes (CONNECT aside: it opens a tunnel, not a request; HEAD is GET's, apiserver/head.test.ts),
  // on every declared path: one its declarations do not serve is a 405 naming those that do (an
  // OPTIONS a 200 naming them), never a 501; and on a path nothing serves a 404.
  const served = (path: string) => {
    const bare = path.split('?')[0]!;
    const pattern = (r: (typeof routes)[number]) => new RegExp(`^${r.path.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\{\w+\}/g, '[^/]+')}/?$`, 'i');
    const matching = routes.filter((r) => pattern(r).test(bare));
    const methods = new Set<string>(matching.map((r) => r.method));
    // HEAD is served with a GET, but not with one audited as egress (servesHead).
    if (matching.some(servesHead)) methods.add('HEAD');
    return methods;
  };
  const odd = METHODS.filter((m) => m !== 'CONNECT' && m !== 'HEAD');
  const paths = [...new Set(routes.map((r) => plainRequest(r).path))];
  it.each(paths)('%s: a method no declaration serves is a 405 naming those that do, JSON, never a 501', async (path) => {
    const allowed = served(path);
    expect(allowed.size).toBeGreaterThan(0);
    for (const method of odd.filter((m) => !allowed.has(m))) {
      const answer = await send({ method, path, headers: { 'X-Tenant-ID': '1' } });
      const allow = new Set(String(answer.allow ?? '').split(/,\s*/).filter(Boolean));
      const seen = `${method} ${path}: ${answer.status} ${answer.type} ${clip(answer.body)} Allow: ${[...allow].join(', ')}`;
      if (method === 'OPTIONS') {
        expect({ seen, ok: answer.status === 200 && answer.body === '' }).toEqual({ seen, ok: true });
      } else {
        expect({ seen, ok: answer.status === 405 && answer.type === 'application/json' && /^\{"error":"method [A-Z-]+ is not allowed on this path; it takes /.test(answer.body) }).toEqual({ seen, ok: true });
      }
      expect({ seen, allow: [...allow].sort() }).toEqual({ seen, allow: [...allowed].sort() });
    }
  }, 120_000);

  it.each(odd)('%s on a path nothing serves: 404 JSON, no Allow', async (method) => {
    for (const path of ['/api/no-such-route', '/api/platform/no-such-route', '/API/Platform/No/Such/Route']) {
      const answer = await send({ method, path, headers: { 'X-Tenant-ID': '1' } });
      expect({ method, path, status: answer.status, type: answer.type, body: answer.body, allow: answer.allow }).toEqual({ method, path, status: 404, type: 'application/json', body: '{"error":"not found"}', allow: undefined });
    }
  });

  it('leaves the hubs alive, with no crash', async () => {
    expect((await send({ method: 'GET', path: '/q/health/live', headers: {} })).status).toBe(200);
    expect((await send({ method: 'GET', path: '/q/health/live', headers: {} }, oidcPort)).status).toBe(200);
    expect(crashes).toEqual([]);
  });
});
