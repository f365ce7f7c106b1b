import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { parse, stringify } from 'yaml';
import { startDemoSource } from '../../../src/demo-source/server.js';
import { ownerClient } from '../../../test/harness/api-client.js';
import { captureLogs } from '../../../test/harness/log-capture.js';
import { until } from '../../../test/harness/until.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { type Receiver, startReceiver } from '../../../test/harness/receiver.js';

/** Pre-flight, draft and scaffold against the real demo source and a local OpenAPI document server. */

let hub: TestHub;
let demo: Awaited<ReturnType<typeof startDemoSource>>;
let docs: Receiver;
let docsUrl: string;
const H = { 'X-Tenant-ID': '1', 'Content-Type': 'application/json' };

const openapi = {
  openapi: '3.0.3',
  info: { title: 'Partners API' },
  servers: [{ url: '/api' }],
  components: {
    securitySchemes: { token: { type: 'http', scheme: 'bearer' } },
    schemas: {
      // data, tenant_id and xmin are columns every ext table has: never drafted as promotes (apply refuses them).
      Partner: { type: 'object', properties: { id: { type: 'integer' }, name: { type: 'string' }, data: { type: 'string' }, credit_limit: { type: 'integer' }, tenant_id: { type: 'integer' }, xmin: { type: 'string' }, updated_at: { type: 'string', format: 'date-time' } } },
    },
  },
  paths: {
    '/partners': {
      get: {
        responses: {
          200: {
            content: {
              'application/json': {
                schema: { type: 'object', properties: { data: { type: 'array', items: { $ref: '#/components/schemas/Partner' } }, has_more: { type: 'boolean' } } },
              },
            },
          },
        },
      },
    },
    '/partners/{id}': { get: { responses: { 200: { content: { 'application/json': { schema: { $ref: '#/components/schemas/Partner' } } } } } } },
  },
};

/** An OpenAPI document in YAML whose `paths` mapping holds 60,000 keys (about 0.8 MB). */
const manyPaths = stringify({ ...openapi, paths: { ...openapi.paths, ...Object.fromEntries(Array.from({ length: 60_000 }, (_, i) => [`/p${i}`, {}])) } });

/**
 * How long a plain read of `manyPaths` takes (the yardstick of the scaffold's reading), timed here,
 * before any connection is open: timed in the test, the seconds of synchronous parsing on a loaded
 * machine outlasted the server's keep-alive, and the next request met a socket the server had just
 * closed (ECONNRESET).
 */
const plainMs = (() => {
  const started = performance.now();
  parse(manyPaths, { uniqueKeys: false });
  return performance.now() - started;
})();

/** 300 GET operations answering one schema of 1,000 scalar properties: 67 KB that drafted 21 MB of manifest. */
const wide = {
  openapi: '3.0.0',
  paths: Object.fromEntries(
    Array.from({ length: 300 }, (_, i) => [`/r${i}`, { get: { responses: { 200: { content: { 'application/json': { schema: { type: 'array', items: { $ref: '#/components/schemas/R' } } } } } } } }]),
  ),
  components: { schemas: { R: { type: 'object', properties: { id: { type: 'string' }, ...Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`p${i}`, { type: 'string' }])) } } } },
};

/**
 * Work a draft must not multiply: 900 operations answering one object of 20,000 properties that is no list of
 * records, a path of 100,000 dashes (a regular expression trimming them backtracked), a `$ref` and a security scheme
 * that are no text (a 500 before), and a title that breaks its line (it wrote YAML into the draft).
 */
const odd = {
  swagger: '2.0',
  info: { title: 'Odd\nspec:\n  base_url: http://evil.example\n#' },
  securityDefinitions: { a: { type: 'http', scheme: 5 }, b: { type: 'http', scheme: 'bearer' } },
  paths: {
    ...Object.fromEntries(Array.from({ length: 900 }, (_, i) => [`/o${i}`, { get: { responses: { 200: { schema: { $ref: '#/definitions/B' } } } } }])),
    '/numeric-ref': { get: { responses: { 200: { schema: { $ref: 5 } } } } },
    [`/a${'-'.repeat(100_000)}a`]: { get: { responses: { 200: { schema: { type: 'array', items: { type: 'object', properties: { id: { type: 'string' } } } } } } } },
    '/items': { get: { responses: { 200: { schema: { type: 'array', items: { type: 'object', properties: { id: { type: 'string' }, name: { type: 'string' } } } } } } } },
  },
  definitions: { B: { type: 'object', properties: Object.fromEntries(Array.from({ length: 20_000 }, (_, i) => [`p${i}`, {}])) } },
};

beforeAll(async () => {
  demo = await startDemoSource({ port: 0, host: '127.0.0.1', log: () => undefined });
  hub = await startTestHub({ 'svc.credentials.env-allow': 'TOOLS_DEMO_*' });
  docs = await startReceiver((path) => {
    if (path === '/openapi.json') return { headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(openapi) };
    if (path === '/openapi.yaml') return { headers: { 'Content-Type': 'application/yaml' }, body: stringify(openapi) };
    if (path === '/not-a-spec') return { body: '<html>hello</html>' };
    if (path === '/many-paths.yaml') return { headers: { 'Content-Type': 'application/yaml' }, body: manyPaths };
    if (path === '/wide.json') return { headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(wide) };
    if (path === '/odd.json') return { headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(odd) };
    // A first server address no URL reader takes, and one that is no string.
    if (path === '/bad-server.json') return { headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ ...openapi, servers: [{ url: 'http://[not-an-address' }] }) };
    if (path === '/object-server.json') return { headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ ...openapi, servers: [{ url: { href: 'http://evil.example' } }] }) };
    if (path === '/large.yaml') return { headers: { 'Content-Type': 'application/yaml' }, body: `${stringify(openapi)}# ${'x'.repeat(1024 * 1024)}\n` };
    if (path === '/circular.yaml') return { headers: { 'Content-Type': 'application/yaml' }, body: 'openapi: 3.0.0\npaths: &paths\n  /items: {get: {x: *paths}}\n' };
    if (path === '/tiny-nodes.yaml') return { headers: { 'Content-Type': 'application/yaml' }, body: `openapi: 3.0.0\nx: [${'1,'.repeat(260_000)}1]\n` };
    if (path === '/deep.yaml') return { headers: { 'Content-Type': 'application/yaml' }, body: `openapi: 3.0.0\nx: ${'['.repeat(200_000)}${']'.repeat(200_000)}\n` };
    // Records for the pre-flight's key check: every one keyed, some keyed (an empty key is none).
    if (path.split('?')[0] === '/records/keyed') return { headers: { 'Content-Type': 'application/json' }, body: JSON.stringify([{ id: 1 }, { id: 'b' }]) };
    // Fields spelt alike but for case, and named as columns every table has (PostgreSQL's own included), under a path segment longer than an endpoint id or table name may be.
    if (path.startsWith('/records/cased-')) return { headers: { 'Content-Type': 'application/json' }, body: JSON.stringify([{ id: 1, Name: 'A', name: 'a', CITY: 'X', City: 'x', Data: 'd', xmin: 'm', CTID: 'c' }]) };
    if (path === '/records/mixed') return { headers: { 'Content-Type': 'application/json' }, body: JSON.stringify([{ id: 1 }, { name: 'no id' }, { id: '' }]) };
    // A page nesting past the 1,000 levels a path searching at any depth (..) is run over: beside the records, and in one of them.
    if (path === '/records/deep-page') return { headers: { 'Content-Type': 'application/json' }, body: `{"data":[{"id":1}],"x":${'['.repeat(5000)}${']'.repeat(5000)}}` };
    if (path === '/records/deep-record') return { headers: { 'Content-Type': 'application/json' }, body: `[{"id":1},{"id":2,"x":${'['.repeat(5000)}${']'.repeat(5000)}}]` };
    return { status: 404 };
  });
  docsUrl = docs.url;
  process.env.TOOLS_DEMO_PASSWORD = 'demo-password';
  const manifest = {
    apiVersion: 'connectors.svc.io/v1',
    kind: 'Connector',
    metadata: { name: 'probe' },
    connector_type: 'rest-generic',
    scopes: ['partners'],
    spec: {
      base_url: demo.url,
      auth: { kind: 'basic', username: 'demo', password_env: 'TOOLS_DEMO_PASSWORD' },
      endpoints: [
        { id: 'offset', path: '/offset/partners', pagination: { kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit: 20, response_path: '$.data', total_path: '$.total' }, target: { kind: 'hybrid', table: 'ext.probe_offset', unique_key: '$.id' } },
        { id: 'down', path: '/down/partners', target: { kind: 'hybrid', table: 'ext.probe_down', unique_key: '$.id' } },
        { id: 'hdr', path: '/hdr/partners', pagination: { kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit: 20, response_path: '$.data' }, target: { kind: 'hybrid', table: 'ext.probe_hdr', unique_key: '$.id' } },
        { id: 'off', enabled: false, path: '/open/partners', target: { kind: 'hybrid', table: 'ext.probe_off', unique_key: '$.id' } },
      ],
    },
  };
  const res = await fetch(`${hub.url}/api/connectors/apply`, { method: 'POST', headers: H, body: JSON.stringify(manifest) });
  expect(res.status).toBe(201);
});

afterAll(async () => {
  await hub?.stop();
  await demo?.close();
  await docs?.close();
});

describe('pre-flight', () => {
  it('sends each enabled endpoint\'s first request once, writes nothing, names every fault', async () => {
    const before = demo.requests();
    const res = await fetch(`${hub.url}/api/connectors/probe/preflight`, { method: 'POST', headers: H });
    expect(res.status).toBe(200);
    const report = (await res.json()) as { ok: boolean; skipped: number; endpoints: Array<{ id: string; status: number; items: number; verdict: string; url?: string; sample?: unknown }> };
    expect(report.ok).toBe(false);
    expect(report.skipped).toBe(1);
    const byId = Object.fromEntries(report.endpoints.map((e) => [e.id, e]));
    expect(byId.offset).toMatchObject({ status: 200, items: 20, verdict: 'ok' });
    expect(byId.offset!.url).toContain('/offset/partners');
    expect(byId.offset!.sample).toMatchObject({ id: 1 });
    expect(byId.down).toMatchObject({ status: 500, items: 0, verdict: 'HTTP 500' });
    expect(byId.hdr).toMatchObject({ status: 400, verdict: 'HTTP 400' });
    expect(demo.requests() - before).toBe(3); // no retry, nothing for the disabled endpoint
    const runs = (await (await fetch(`${hub.url}/api/platform/runs`, { headers: H })).json()) as unknown[];
    expect(runs).toEqual([]);
  });

  it('an unresolved credential is named before any run', async () => {
    const saved = process.env.TOOLS_DEMO_PASSWORD;
    delete process.env.TOOLS_DEMO_PASSWORD;
    try {
      const report = (await (await fetch(`${hub.url}/api/connectors/probe/preflight`, { method: 'POST', headers: H })).json()) as { endpoints: Array<{ verdict: string; status: number }> };
      expect(report.endpoints[0]!.status).toBe(0);
      expect(report.endpoints[0]!.verdict).toContain('TOOLS_DEMO_PASSWORD');
    } finally {
      process.env.TOOLS_DEMO_PASSWORD = saved;
    }
  });

  it('404 for an unknown connector', async () => {
    expect((await fetch(`${hub.url}/api/connectors/nope/preflight`, { method: 'POST', headers: H })).status).toBe(404);
  });

  type Report = { ok: boolean; endpoints: Array<{ id: string; status: number; items: number; verdict: string; warnings?: string[] }> };
  /** Applies a connector of these endpoints (each `[id, path, unique_key, pagination?]`) and answers its pre-flight report. */
  async function preflightOf(name: string, baseUrl: string, endpoints: Array<[string, string, string, object?]>): Promise<Report> {
    const spec = {
      base_url: baseUrl,
      endpoints: endpoints.map(([id, path, uniqueKey, pagination]) => ({ id, path, ...(pagination ? { pagination } : {}), target: { kind: 'hybrid', table: `ext.${name}_${id}`, unique_key: uniqueKey } })),
    };
    const manifest = { apiVersion: 'connectors.svc.io/v1', kind: 'Connector', metadata: { name }, connector_type: 'rest-generic', spec };
    expect((await fetch(`${hub.url}/api/connectors/apply`, { method: 'POST', headers: H, body: JSON.stringify(manifest) })).status).toBe(201);
    return (await (await fetch(`${hub.url}/api/connectors/${name}/preflight`, { method: 'POST', headers: H })).json()) as Report;
  }

  it('a unique_key that resolves to nothing in every record read is not ok (a run would dead-letter every row); in some of them, a warning', async () => {
    const report = await preflightOf('keys', docsUrl, [
      ['keyed', '/records/keyed', '$.id'],
      ['nope', '/records/keyed', '$.nope'],
      ['mixed', '/records/mixed', '$.id'],
    ]);
    const byId = Object.fromEntries(report.endpoints.map((e) => [e.id, e]));
    expect(byId.keyed).toMatchObject({ status: 200, items: 2, verdict: 'ok' });
    expect(byId.keyed!.warnings).toBeUndefined();
    expect(byId.nope).toMatchObject({
      status: 200,
      items: 2,
      verdict: 'unique_key $.nope resolves to nothing in all 2 records read: a run would dead-letter every row (missing_key) and store none; fix target.unique_key',
    });
    // Record 2 has no id, record 3 an empty one: the first record whose key is there but no key is named.
    expect(byId.mixed).toMatchObject({
      status: 200,
      items: 3,
      verdict: 'ok',
      warnings: ['unique_key $.id gives no key in 2 of the 3 records read (record 3: unique_key $.id is empty; the row cannot be stored): a run dead-letters those rows (missing_key)'],
    });
    expect(report.ok).toBe(false);
  });

  it('a path searching at any depth (..) over a page nesting past 1,000 levels is a verdict naming it, never a 500', async () => {
    const report = await preflightOf('deep', docsUrl, [
      ['page', '/records/deep-page', '$.id', { kind: 'none', response_path: '$..data' }],
      ['record', '/records/deep-record', '$..id'],
    ]);
    const byId = Object.fromEntries(report.endpoints.map((e) => [e.id, e]));
    // As the run fails on it.
    expect(byId.page).toMatchObject({ status: 200, items: 0, verdict: 'the path $..data searches at any depth (..), and the value nests objects and arrays deeper than 1000 levels' });
    // A run dead-letters the deep record (unstorable, nesting past 64 levels), its key read from the 64 levels kept: the key check reads it so.
    expect(byId.record).toMatchObject({ status: 200, items: 2, verdict: 'ok' });
    expect(report.ok).toBe(false);
  });

  it('the tester\'s case: `unique_key: $.nope` over the demo source\'s partners is not ok', async () => {
    const offset = { kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit: 50, response_path: '$.data' };
    const report = await preflightOf('nope', demo.url, [['open', '/open/partners', '$.nope', offset]]);
    expect(report.ok).toBe(false);
    expect(report.endpoints[0]!.items).toBe(50);
    expect(report.endpoints[0]!.verdict).toMatch(/^unique_key \$\.nope resolves to nothing in all 50 records read: a run would dead-letter every row/);
  });
});

describe('a connector rate limit slower than the client waits', () => {
  /** Applies a connector of `rate` with two endpoints on the records of the document server. */
  async function applyLimited(base: string, name: string, rate: string): Promise<void> {
    const endpoints = ['first', 'second'].map((id) => ({ id, path: `/records/keyed?${name}-${id}`, target: { kind: 'hybrid', table: `ext.${name}_${id}`, unique_key: '$.id' } }));
    const manifest = { apiVersion: 'connectors.svc.io/v1', kind: 'Connector', metadata: { name }, connector_type: 'rest-generic', spec: { base_url: docsUrl, default_rate_limit: rate, endpoints } };
    expect((await fetch(`${base}/api/connectors/apply`, { method: 'POST', headers: H, body: JSON.stringify(manifest) })).status).toBe(201);
  }
  const sent = (name: string, id: string) => docs.on(`/records/keyed?${name}-${id}`).length;

  it('a pre-flight does not wait past svc.connectors.preflight.max-token-wait for a token: the endpoint is not checked, nothing sent; a draft is a 429', async () => {
    // 1/h: the second endpoint's token comes an hour after the first (it waited that hour inside the request).
    await applyLimited(hub.url, 'hourly', '1/h');
    const report = (await (await fetch(`${hub.url}/api/connectors/hourly/preflight`, { method: 'POST', headers: H })).json()) as { ok: boolean; endpoints: Array<{ id: string; status: number; items: number; verdict: string }> };
    expect(report.ok).toBe(false);
    expect(report.endpoints[0]).toMatchObject({ id: 'first', status: 200, items: 2, verdict: 'ok' });
    expect(report.endpoints[1]).toMatchObject({ id: 'second', status: 0, items: 0 });
    expect(report.endpoints[1]!.verdict).toMatch(/^not checked: the connector's rate limit \(default_rate_limit\) allows its next request in 3[56]\d\d s; nothing was sent$/);
    expect([sent('hourly', 'first'), sent('hourly', 'second')]).toEqual([1, 0]);
    const draft = await fetch(`${hub.url}/api/connectors/hourly/draft`, { method: 'POST', headers: H, body: JSON.stringify({ path: '/records/keyed?hourly-draft' }) });
    expect(draft.status).toBe(429);
    expect(Number(draft.headers.get('retry-after'))).toBeGreaterThan(3500);
    expect(((await draft.json()) as { error: string }).error).toMatch(/^nothing was sent to the source: the connector's rate limit \(default_rate_limit\) allows its next request in 3[56]\d\d s$/);
    expect(docs.on('/records/keyed?hourly-draft')).toEqual([]);
  });

  it('a client that gives up ends the pre-flight\'s wait for a token (a bound long enough to wait)', async () => {
    const logs = captureLogs('info');
    const patient = await startTestHub({ 'svc.datasource.url': hub.ownerUrl, 'svc.connectors.preflight.max-token-wait': '2h' });
    try {
      await applyLimited(patient.url, 'patient', '1/h');
      const client = new AbortController();
      const asked = fetch(`${patient.url}/api/connectors/patient/preflight`, { method: 'POST', headers: H, signal: client.signal }).catch((err: unknown) => err);
      // The first endpoint is answered; the second waits for its token (an hour away): the client gives up.
      await docs.waitFor(1, '/records/keyed?patient-first');
      client.abort();
      expect(await asked).toMatchObject({ name: 'AbortError' });
      // The request ends (its access line, 499) rather than holding its wait for the hour.
      const line = await until('the request\'s access line', () => logs.lines().find((l) => l.msg === 'request' && l.path === '/api/connectors/patient/preflight'));
      expect(line).toMatchObject({ status: 499 });
      expect(sent('patient', 'second')).toBe(0);
    } finally {
      logs.restore();
      await patient.stop();
    }
  });
});

describe('a base_url stored with credentials (applied before apply refused them)', () => {
  const PASSWORD = 'sk_live_stored123';
  const withUser = (url: string) => url.replace('://', `://user:${PASSWORD}@`);
  const masked = (url: string) => url.replace('://', '://***@');

  /** Applies a connector reading `path`, then writes `baseUrl` into its stored manifest and spec, bypassing apply's checks. */
  async function storedWith(name: string, baseUrl: string, path: string): Promise<void> {
    const spec = { base_url: docsUrl, endpoints: [{ id: 'e', path, target: { kind: 'hybrid', table: `ext.${name.replaceAll('-', '_')}_e`, unique_key: '$.id' } }] };
    const manifest = { apiVersion: 'connectors.svc.io/v1', kind: 'Connector', metadata: { name }, connector_type: 'rest-generic', spec };
    expect((await fetch(`${hub.url}/api/connectors/apply`, { method: 'POST', headers: H, body: JSON.stringify(manifest) })).status).toBe(201);
    const owner = await ownerClient(hub.ownerUrl);
    try {
      const { rowCount } = await owner.query(
        `update connectors.connectors set manifest = jsonb_set(manifest, '{spec,base_url}', to_jsonb($2::text)), spec = jsonb_set(spec, '{baseUrl}', to_jsonb($2::text))
          where tenant_id = 1 and name = $1`,
        [name, baseUrl],
      );
      expect(rowCount).toBe(1);
    } finally {
      await owner.end();
    }
  }

  it('GET shows it masked in the manifest and the spec, and re-applying what it shows is the 400 of credentials in base_url', async () => {
    await storedWith('userinfo', withUser(docsUrl), '/records/keyed');
    const res = await fetch(`${hub.url}/api/connectors/userinfo`, { headers: H });
    const text = await res.text();
    expect(res.status).toBe(200);
    expect(text).not.toContain(PASSWORD);
    const body = JSON.parse(text) as { manifest: { spec: { base_url: string } }; spec: { baseUrl: string } };
    expect(body.manifest.spec.base_url).toBe(masked(docsUrl));
    expect(body.spec.baseUrl).toBe(masked(docsUrl));
    const again = await fetch(`${hub.url}/api/connectors/apply`, { method: 'POST', headers: H, body: JSON.stringify(body.manifest) });
    expect(again.status).toBe(400);
    expect(await again.json()).toMatchObject({ field: 'spec.base_url', error: expect.stringContaining('must not carry credentials') });
  });

  it('the pre-flight reports the address it read with them masked (they are never sent)', async () => {
    await storedWith('userinfo-pre', withUser(docsUrl), '/records/keyed');
    const res = await fetch(`${hub.url}/api/connectors/userinfo-pre/preflight`, { method: 'POST', headers: H });
    const text = await res.text();
    expect(res.status).toBe(200);
    expect(text).not.toContain(PASSWORD);
    expect(JSON.parse(text)).toMatchObject({ ok: true, endpoints: [{ id: 'e', status: 200, items: 2, verdict: 'ok', url: `${masked(docsUrl)}/records/keyed` }] });
  });

  it('a credential in a stored base_url\'s query (applied before apply refused a query there) is shown [REDACTED] by GET and the pre-flight', async () => {
    const QUERY_KEY = 'stored-query-key-0007';
    await storedWith('base-query', `${docsUrl}/?api_key=${QUERY_KEY}`, '/records/keyed');
    const text = await (await fetch(`${hub.url}/api/connectors/base-query`, { headers: H })).text();
    expect(text).not.toContain(QUERY_KEY);
    const body = JSON.parse(text) as { manifest: { spec: { base_url: string } }; spec: { baseUrl: string } };
    expect([body.manifest.spec.base_url, body.spec.baseUrl]).toEqual([`${docsUrl}/?api_key=[REDACTED]`, `${docsUrl}/?api_key=[REDACTED]`]);
    const report = await (await fetch(`${hub.url}/api/connectors/base-query/preflight`, { method: 'POST', headers: H })).text();
    expect(report).not.toContain(QUERY_KEY);
    expect(JSON.parse(report)).toMatchObject({ endpoints: [{ id: 'e', url: expect.stringContaining('api_key=[REDACTED]') }] });
  });

  it('a stored base_url that is no URL (a port past 65535, accepted before apply read it as a request does) is quoted masked', async () => {
    await storedWith('userinfo-port', withUser('http://127.0.0.1:99999'), '/records/keyed');
    const text = await (await fetch(`${hub.url}/api/connectors/userinfo-port/preflight`, { method: 'POST', headers: H })).text();
    expect(text).not.toContain(PASSWORD);
    expect(JSON.parse(text)).toMatchObject({ ok: false, endpoints: [{ id: 'e', status: 0, verdict: expect.stringContaining('the address http://***@127.0.0.1:99999/records/keyed is not a valid URL') }] });
  });
});

describe('draft', () => {
  it('guesses the pagination preset and promotes the first record\'s scalars', async () => {
    const res = await fetch(`${hub.url}/api/connectors/probe/draft`, { method: 'POST', headers: H, body: JSON.stringify({ path: '/spring/partners' }) });
    expect(res.status).toBe(200);
    const fragment = (await res.json()) as { id: string; pagination: { kind: string }; target: { table: string; unique_key: string; promote: Array<{ name: string; type: string; transform?: string }> } };
    expect(fragment.pagination.kind).toBe('spring');
    expect(fragment.target.unique_key).toBe('$.id');
    expect(fragment.target.table).toBe('ext.partners');
    const types = Object.fromEntries(fragment.target.promote.map((p) => [p.name, p.type]));
    expect(types).toMatchObject({ name: 'text', city: 'text', credit_limit: 'bigint', updated_at: 'timestamptz' });
    expect(types.id).toBeUndefined();
  });

  it('recognises the offset envelope and answers unknown for an unrecognised one', async () => {
    const offset = (await (await fetch(`${hub.url}/api/connectors/probe/draft`, { method: 'POST', headers: H, body: JSON.stringify({ path: '/offset/partners' }) })).json()) as { pagination: { kind: string; total_path?: string } };
    expect(offset.pagination).toMatchObject({ kind: 'offset', total_path: '$.total' });
    const health = (await (await fetch(`${hub.url}/api/connectors/probe/draft`, { method: 'POST', headers: H, body: JSON.stringify({ path: '/health' }) })).json()) as { pagination: { kind: string } };
    expect(health.pagination.kind).toBe('unknown');
  });

  it('a bare array without a next link is one page: pagination none, which apply takes', async () => {
    const spec = { base_url: docsUrl, endpoints: [] };
    const created = await fetch(`${hub.url}/api/connectors/apply`, { method: 'POST', headers: H, body: JSON.stringify({ apiVersion: 'connectors.svc.io/v1', kind: 'Connector', metadata: { name: 'bare' }, connector_type: 'rest-generic', scopes: ['partners'], spec }) });
    expect(created.status).toBe(201);
    const res = await fetch(`${hub.url}/api/connectors/bare/draft`, { method: 'POST', headers: H, body: JSON.stringify({ path: '/records/keyed' }) });
    expect(res.status).toBe(200);
    const fragment = (await res.json()) as { pagination: { kind: string } };
    expect(fragment.pagination).toEqual({ kind: 'none' });
    const manifest = { apiVersion: 'connectors.svc.io/v1', kind: 'Connector', metadata: { name: 'bare' }, connector_type: 'rest-generic', scopes: ['partners'], spec: { ...spec, endpoints: [fragment] } };
    const check = (await (await fetch(`${hub.url}/api/connectors/validate`, { method: 'POST', headers: H, body: JSON.stringify(manifest) })).json()) as { valid: boolean; errors: unknown[] };
    expect(check).toMatchObject({ valid: true, errors: [] });
  });

  it('a fragment drafted from fields spelt alike but for case or named as columns every table has, under a long path segment, validates', async () => {
    const spec = { base_url: docsUrl, endpoints: [] };
    const envelope = { apiVersion: 'connectors.svc.io/v1', kind: 'Connector', metadata: { name: 'cased' }, connector_type: 'rest-generic', scopes: ['partners'] };
    expect((await fetch(`${hub.url}/api/connectors/apply`, { method: 'POST', headers: H, body: JSON.stringify({ ...envelope, spec }) })).status).toBe(201);
    const path = `/records/cased-${'x'.repeat(80)}`;
    const res = await fetch(`${hub.url}/api/connectors/cased/draft`, { method: 'POST', headers: H, body: JSON.stringify({ path }) });
    expect(res.status).toBe(200);
    const fragment = (await res.json()) as { id: string; target: { table: string; promote: Array<{ name: string; path: string }> } };
    expect(fragment.target.promote.map((p) => [p.name, p.path])).toEqual([
      ['name', '$.Name'],
      ['city', '$.CITY'],
    ]);
    expect(fragment.id).toBe(`cased-${'x'.repeat(55)}`);
    expect(fragment.target.table).toBe(`ext.cased_${'x'.repeat(55)}`);
    const manifest = { ...envelope, spec: { ...spec, endpoints: [fragment] } };
    const check = (await (await fetch(`${hub.url}/api/connectors/validate`, { method: 'POST', headers: H, body: JSON.stringify(manifest) })).json()) as { valid: boolean; errors: unknown[] };
    expect(check).toMatchObject({ valid: true, errors: [] });
  });

  it('a path that does not start with / is a 400 naming it, nothing sent (apply would refuse the fragment)', async () => {
    const before = demo.requests();
    for (const path of ['http://127.0.0.1:9/abs', '@127.0.0.1/at', 'spring/partners']) {
      const res = await fetch(`${hub.url}/api/connectors/probe/draft`, { method: 'POST', headers: H, body: JSON.stringify({ path }) });
      expect(res.status).toBe(400);
      expect(await res.json()).toEqual({ error: 'path must match the pattern ^/', field: 'path' });
    }
    expect(demo.requests()).toBe(before);
  });

  it('refuses an upstream error naming its status', async () => {
    const res = await fetch(`${hub.url}/api/connectors/probe/draft`, { method: 'POST', headers: H, body: JSON.stringify({ path: '/down/partners' }) });
    expect(res.status).toBe(502);
    expect(((await res.json()) as { error: string }).error).toBe('upstream answered HTTP 500 for GET /down/partners');
  });

  it('a credential that does not resolve is the connector\'s fault, not the source\'s: 409, nothing sent', async () => {
    const saved = process.env.TOOLS_DEMO_PASSWORD;
    delete process.env.TOOLS_DEMO_PASSWORD;
    const before = demo.requests();
    try {
      const res = await fetch(`${hub.url}/api/connectors/probe/draft`, { method: 'POST', headers: H, body: JSON.stringify({ path: '/spring/partners' }) });
      expect(res.status).toBe(409);
      const { error } = (await res.json()) as { error: string };
      expect(error).toMatch(/^nothing was sent to the source: credential TOOLS_DEMO_PASSWORD did not resolve/);
      expect(demo.requests()).toBe(before);
    } finally {
      process.env.TOOLS_DEMO_PASSWORD = saved;
    }
  });
});

describe('scaffold', () => {
  it('drafts a manifest from an OpenAPI document (JSON or YAML) that validates', async () => {
    for (const file of ['openapi.json', 'openapi.yaml']) {
      const res = await fetch(`${hub.url}/api/connectors/scaffold`, { method: 'POST', headers: H, body: JSON.stringify({ openapiUrl: `${docsUrl}/${file}`, name: 'partners-api' }) });
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toContain('application/yaml');
      const text = await res.text();
      const manifest = parse(text) as { spec: { base_url: string; auth: unknown; endpoints: Array<{ id: string; pagination: { kind: string }; target: { promote: Array<{ name: string; type: string }> } }> } };
      expect(manifest.spec.base_url).toBe(`${docsUrl}/api`);
      expect(manifest.spec.auth).toEqual({ kind: 'bearer', token_env: 'PARTNERS_API_TOKEN' });
      expect(manifest.spec.endpoints.map((e) => e.id)).toEqual(['partners']);
      expect(manifest.spec.endpoints[0]!.pagination.kind).toBe('stripe');
      expect(manifest.spec.endpoints[0]!.target.promote.map((p) => `${p.name}:${p.type}`)).toEqual(['name:text', 'credit_limit:bigint', 'updated_at:timestamptz']);
      const check = (await (await fetch(`${hub.url}/api/connectors/validate`, { method: 'POST', headers: { ...H, 'Content-Type': 'application/yaml' }, body: text })).json()) as { valid: boolean; errors: unknown[] };
      expect(check).toMatchObject({ valid: true, errors: [] });
    }
  });

  it('reads YAML in time growing with its length, and refuses YAML past 1 MiB or nested compactly past 64 levels', async () => {
    // The yaml package's own duplicate-key check compares each key with every earlier key of its
    // mapping: 60,000 paths took it minutes. The hub's reading must cost about what a plain read does.
    const started = performance.now();
    const drafted = await fetch(`${hub.url}/api/connectors/scaffold`, { method: 'POST', headers: H, body: JSON.stringify({ openapiUrl: `${docsUrl}/many-paths.yaml`, name: 'many' }) });
    const hubMs = performance.now() - started;
    expect(drafted.status).toBe(200);
    expect({ hubMs, plainMs, within: hubMs < 5 * plainMs + 1000 }).toMatchObject({ within: true });

    const refused = async (path: string) => {
      const res = await fetch(`${hub.url}/api/connectors/scaffold`, { method: 'POST', headers: H, body: JSON.stringify({ openapiUrl: `${docsUrl}${path}`, name: 'x' }) });
      return { status: res.status, body: (await res.json()) as { error: string; field: string; hint?: string } };
    };
    expect(await refused('/large.yaml')).toEqual({
      status: 400,
      body: { error: `the document at ${docsUrl}/large.yaml is not JSON, and larger than the 1 MiB of YAML the hub reads`, field: 'openapiUrl', hint: expect.stringContaining('JSON form') },
    });
    // 260,000 nodes in 0.5 MB: past the 250,000 a YAML document may write (MAX_YAML_DOCUMENT_NODES), refused from its tokens.
    expect(await refused('/tiny-nodes.yaml')).toEqual({
      status: 413,
      body: { error: `the document at ${docsUrl}/tiny-nodes.yaml is not JSON, and as YAML it holds more than 250,000 keys and values (YAML nodes), more than the hub reads as YAML`, hint: expect.stringContaining('JSON form') },
    });
    expect(await refused('/deep.yaml')).toEqual({ status: 400, body: { error: `the document at ${docsUrl}/deep.yaml nests deeper than 64 levels`, field: 'openapiUrl' } });
    expect(await refused('/circular.yaml')).toEqual({
      status: 400,
      body: { error: `the document at ${docsUrl}/circular.yaml is not JSON, and cannot be read as YAML: the alias *paths is inside the value its anchor &paths names, a value that would contain itself (kubectl refuses it too): repeat the part instead of aliasing it`, field: 'openapiUrl', hint: expect.stringContaining('JSON form') },
    });
  });

  it('drafts at most 100 endpoints of 50 promoted properties each, naming what it left out', async () => {
    const started = performance.now();
    const res = await fetch(`${hub.url}/api/connectors/scaffold`, { method: 'POST', headers: H, body: JSON.stringify({ openapiUrl: `${docsUrl}/wide.json`, name: 'wide' }) });
    const text = await res.text();
    const tookMs = performance.now() - started;
    expect(res.status).toBe(200);
    const manifest = parse(text) as { spec: { endpoints: Array<{ target: { promote: unknown[] } }> } };
    expect(manifest.spec.endpoints).toHaveLength(100);
    for (const endpoint of manifest.spec.endpoints) expect(endpoint.target.promote).toHaveLength(50);
    expect(text).toContain('# 200 more GET operation(s) left out: a draft looks at the first 1000 and holds at most 100.');
    expect(text).toContain('# 95000 more record propert(ies) left out of promote: a draft promotes the first 50 scalar ones of an endpoint.');
    // 21 MB and seconds of the event loop before; now a draft of a few hundred kilobytes.
    expect({ bytes: text.length, tookMs, small: text.length < 1_000_000 }).toMatchObject({ small: true });
  });

  it('drafts in time bounded by the document: operations answering no records, long paths, odd values, a title breaking its line', async () => {
    const started = performance.now();
    const res = await fetch(`${hub.url}/api/connectors/scaffold`, { method: 'POST', headers: H, body: JSON.stringify({ openapiUrl: `${docsUrl}/odd.json`, name: 'odd' }) });
    const text = await res.text();
    const tookMs = performance.now() - started;
    expect({ status: res.status, text: res.status === 200 ? '' : text }).toEqual({ status: 200, text: '' });
    // 900 × 20,000 properties read once each, and 100,000 dashes trimmed once: seconds to minutes before.
    expect({ tookMs, bounded: tookMs < 3000 }).toMatchObject({ bounded: true });
    const manifest = parse(text) as { spec: { base_url: string; auth: unknown; endpoints: Array<{ id: string; path: string }> } };
    expect(text.split('\n')[0]).toBe(`# Drafted from ${docsUrl}/odd.json (Odd spec:   base_url: http://evil.example #): review pagination, unique_key and credentials before applying.`);
    expect(manifest.spec.base_url).toBe(docsUrl);
    expect(manifest.spec.auth).toEqual({ kind: 'bearer', token_env: 'ODD_TOKEN' });
    expect(manifest.spec.endpoints.map((e) => e.id)).toEqual(['a', 'items']);
  });

  it('refuses a URL carrying credentials, without quoting them (a relative server address carried them into base_url)', async () => {
    const withUser = docsUrl.replace('://', '://user:sk_live_abc123@');
    const res = await fetch(`${hub.url}/api/connectors/scaffold`, { method: 'POST', headers: H, body: JSON.stringify({ openapiUrl: `${withUser}/openapi.json`, name: 'x' }) });
    const text = await res.text();
    expect(res.status).toBe(400);
    expect(JSON.parse(text)).toMatchObject({ field: 'openapiUrl', error: expect.stringContaining('must not carry credentials') });
    expect(text).not.toContain('sk_live_abc123');
  });

  it('a first server URL that cannot be read is a 400 naming openapiUrl, never a 500; one that is no string is left out (the document\'s origin)', async () => {
    const scaffold = (path: string) => fetch(`${hub.url}/api/connectors/scaffold`, { method: 'POST', headers: H, body: JSON.stringify({ openapiUrl: `${docsUrl}${path}`, name: 'x' }) });
    const bad = await scaffold('/bad-server.json');
    expect({ status: bad.status, body: await bad.json() }).toEqual({
      status: 400,
      body: {
        error: `the OpenAPI document at ${docsUrl}/bad-server.json names a first server URL (servers[0].url) that cannot be read as a URL`,
        field: 'openapiUrl',
        hint: 'fix servers[0].url in the document, or draft from another copy of it',
      },
    });
    const object = await scaffold('/object-server.json');
    const text = await object.text();
    expect({ status: object.status, text: object.status === 200 ? '' : text }).toEqual({ status: 200, text: '' });
    expect((parse(text) as { spec: { base_url: string } }).spec.base_url).toBe(docsUrl);
  });

  it('a document trickling in without end (a byte every 50 ms, never silent): the read ends when the client leaves, and at svc.connectors.http.response-timeout (a 400 naming it), never held open', async () => {
    const trickles: Array<{ closed: boolean }> = [];
    const slow = createServer((_req, res) => {
      const state = { closed: false };
      trickles.push(state);
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.write('{"openapi":"3.0.3","x":"');
      const timer = setInterval(() => res.write('x'), 50);
      res.on('close', () => {
        clearInterval(timer);
        state.closed = true;
      });
    });
    await new Promise<void>((resolve) => slow.listen(0, '127.0.0.1', resolve));
    const slowUrl = `http://127.0.0.1:${(slow.address() as AddressInfo).port}/openapi.json`;
    const bounded = await startTestHub({ 'svc.connectors.http.response-timeout': '1500ms' });
    try {
      // The client gives up: the hub stops reading the document.
      const leaving = new AbortController();
      const gone = fetch(`${hub.url}/api/connectors/scaffold`, { method: 'POST', headers: H, body: JSON.stringify({ openapiUrl: slowUrl, name: 'x' }), signal: leaving.signal }).catch(() => 'aborted');
      await until('the hub reading the document', () => trickles.length === 1);
      leaving.abort();
      expect(await gone).toBe('aborted');
      await until('the hub closing its read of the document', () => trickles[0]!.closed, 5000);
      // A client that waits: a 400 naming the bound once the document took longer than it as a whole.
      const started = Date.now();
      const res = await fetch(`${bounded.url}/api/connectors/scaffold`, { method: 'POST', headers: H, body: JSON.stringify({ openapiUrl: slowUrl, name: 'x' }) });
      expect(res.status).toBe(400);
      const body = (await res.json()) as { error: string; field: string };
      expect(body.field).toBe('openapiUrl');
      expect(body.error).toBe(`no readable OpenAPI document at ${slowUrl}: the document took longer than 1500 ms as a whole (svc.connectors.http.response-timeout)`);
      expect(Date.now() - started).toBeLessThan(10_000);
      await until('the hub closing its read of the document', () => trickles[1]!.closed, 5000);
    } finally {
      await bounded.stop();
      slow.closeAllConnections();
      await new Promise((resolve) => slow.close(resolve));
    }
  });

  it('refuses a URL that holds no readable OpenAPI document', async () => {
    for (const path of ['/not-a-spec', '/missing']) {
      const res = await fetch(`${hub.url}/api/connectors/scaffold`, { method: 'POST', headers: H, body: JSON.stringify({ openapiUrl: `${docsUrl}${path}`, name: 'x' }) });
      expect(res.status).toBe(400);
      const body = (await res.json()) as { error: string; field: string };
      expect(body.field).toBe('openapiUrl');
      expect(body.error).toContain('no readable OpenAPI document');
    }
  });
});
