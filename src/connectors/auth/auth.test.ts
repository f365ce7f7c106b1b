import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { runWithContext } from '../../observability/context.js';
import { logger } from '../../observability/logger.js';
import { captureLogs } from '../../../test/harness/log-capture.js';
import { CredentialError, TemplateError } from '../engine/errors.js';
import { firstPage } from '../engine/read.js';
import type { DemoSource } from '../../demo-source/server.js';
import { connectorSpec, endpointSpec, engineContext, readAll, startFixtureSource } from '../engine/testing/specs.js';
import type { Auth, ConnectorSpec, HeaderSpec } from '../types.js';
import { parseRef } from '../../platform/secrets/store.js';
import { composeHeaders } from './headers.js';
import { resolveAuth } from './index.js';
import { createCredentialResolver } from './resolver.js';
import { resolveTemplates } from './template.js';

let source: DemoSource;
beforeAll(async () => {
  source = await startFixtureSource(95);
});
afterAll(() => source.close());

interface Echo {
  method: string;
  url: string;
  query: Record<string, string>;
  headers: Record<string, string>;
  body: string;
}

const echoEndpoint = (overrides = {}) => endpointSpec('/echo/partners', { kind: 'none', response_path: '$.data' }, overrides);

async function echo(connector: Partial<ConnectorSpec>, values: Record<string, string> = {}, endpoint = echoEndpoint()): Promise<Echo> {
  const result = await readAll(connectorSpec(source.url, connector), endpoint, engineContext(values));
  if (result.error) throw result.error;
  return result.items[0] as Echo;
}

describe('headers and auth on the wire', () => {
  it('declared headers apply first, auth wins a clash; an unresolved value_env drops its header; templates resolve from env', async () => {
    const headers: HeaderSpec[] = [
      { name: 'authorization', value: 'declared-loses' },
      { name: 'X-Api-Version', value: '2' },
      { name: 'X-Tenant', value_env: 'TENANT_HEADER' },
      { name: 'X-Missing', value_env: 'NOT_SET_ANYWHERE' },
      { name: 'X-Templated', value: 'v={{env:TEMPLATE_VALUE}}' },
      { name: 'Accept', value: 'application/hal+json' },
    ];
    const seen = await echo({ headers, auth: { kind: 'bearer', token_env: 'SRC_TOKEN' } }, { SRC_TOKEN: 'tok-123456', TENANT_HEADER: 'acme', TEMPLATE_VALUE: '42' });
    expect(seen.headers.authorization).toBe('Bearer tok-123456');
    expect(seen.headers['x-api-version']).toBe('2');
    expect(seen.headers['x-tenant']).toBe('acme');
    expect(seen.headers['x-missing']).toBeUndefined();
    expect(seen.headers['x-templated']).toBe('v=42');
    expect(seen.headers.accept).toBe('application/hal+json');
    expect(seen.method).toBe('GET');
  });

  it('an auth header clashing with a declared api-key header wins', async () => {
    const seen = await echo({ headers: [{ name: 'X-API-Key', value: 'declared' }], auth: { kind: 'api-key', in: 'header', name: 'X-API-Key', value_env: 'KEY' } }, { KEY: 'the-real-key' });
    expect(seen.headers['x-api-key']).toBe('the-real-key');
  });

  it('bearer: token_env wins over token_value; token_value alone is used', async () => {
    expect((await echo({ auth: { kind: 'bearer', token_env: 'TOK', token_value: 'inline-dev' } }, { TOK: 'from-secret' })).headers.authorization).toBe('Bearer from-secret');
    expect((await echo({ auth: { kind: 'bearer', token_value: 'inline-dev' } })).headers.authorization).toBe('Bearer inline-dev');
  });

  it('bearer: an unresolved token_env fails naming it, even with a token_value', async () => {
    const result = await readAll(connectorSpec(source.url, { auth: { kind: 'bearer', token_env: 'MISSING_TOKEN', token_value: 'inline-dev' } }), echoEndpoint(), engineContext());
    expect(result.error).toBeInstanceOf(CredentialError);
    expect(result.error?.message).toMatch(/^credential MISSING_TOKEN did not resolve \(auth\.token_env\)/);
    expect(result.error?.message).not.toContain('inline-dev');
    expect(result.error).toMatchObject({ runStatus: 'Failed', retryable: false });
  });

  it('basic: username plus the password from password_env', async () => {
    const seen = await echo({ auth: { kind: 'basic', username: 'demo', password_env: 'DEMO_PW' } }, { DEMO_PW: 'demo-password' });
    expect(seen.headers.authorization).toBe(`Basic ${Buffer.from('demo:demo-password').toString('base64')}`);
  });

  it('basic: an unresolved password_env fails naming it, never a value', async () => {
    const before = source.seen().length;
    const result = await readAll(connectorSpec(source.url, { auth: { kind: 'basic', username: 'demo', password_env: 'DEMO_PW' } }), echoEndpoint(), engineContext({ DEMO_PW: '' }));
    expect(result.error?.message).toMatch(/^credential DEMO_PW did not resolve \(auth\.password_env\)/);
    // The auth probe runs before any request.
    expect(source.seen().length).toBe(before);
  });

  it('api-key in query rides on every request URL, pagination links included', async () => {
    // The demo source's /link dialect takes the key as ?api_key= too, and refuses a page without it.
    const start = source.seen().length;
    const result = await readAll(
      connectorSpec(source.url, { auth: { kind: 'api-key', in: 'query', name: 'api_key', value_env: 'KEY' } }),
      endpointSpec('/link/partners?limit=40', { kind: 'link-header', response_path: '$' }),
      engineContext({ KEY: 'demo-api-key' }),
    );
    expect(result.error).toBeUndefined();
    expect(result.items).toHaveLength(95);
    const seen = source.seen().slice(start);
    expect(seen).toHaveLength(3);
    for (const r of seen) expect(r.url.searchParams.getAll('api_key')).toEqual(['demo-api-key']);
    expect(seen.every((r) => r.headers['x-api-key'] === undefined)).toBe(true);
  });

  it("a path's own query string is kept and joined with the pagination, watermark and api-key parameters", async () => {
    const result = await readAll(
      connectorSpec(source.url, { auth: { kind: 'api-key', in: 'query', name: 'api_key', value_env: 'KEY' } }),
      endpointSpec('/echo/partners?token=Y&limit=2', { kind: 'page', page_param: 'page', size_param: 'size', start_page: 1, size: 50, response_path: '$.data' }, { incremental: { mode: 'watermark', param: 'since', watermark_path: '$.x' } }),
      // The echo source answers one record per page, whatever the page: the first request is enough.
      engineContext({ KEY: 'the-key' }, { watermark: '2024-01-01', maxPages: 1 }),
    );
    const seen = result.items[0] as Echo;
    expect(seen.url).toBe(`${source.url}/echo/partners?token=Y&limit=2&page=1&size=50&since=2024-01-01&api_key=the-key`);
  });

  it('resolution: auth *_env, header value_env and templates all through the one resolver, before any request', async () => {
    const asked: string[] = [];
    const ctx = engineContext({}, {
      resolveCredential: async (name) => {
        asked.push(name);
        return 'cred';
      },
    });
    await readAll(
      connectorSpec(source.url, { headers: [{ name: 'X-A', value_env: 'A' }, { name: 'X-T', value: 'v={{env:T}}' }], auth: { kind: 'api-key', in: 'header', name: 'X-K', value_env: 'K' } }),
      echoEndpoint({ method: 'POST', body: { x: '{{env:B}}' } }),
      ctx,
    );
    expect(asked.sort()).toEqual(['A', 'B', 'K', 'T']);
  });

  it('a POST body template resolves {{env:NAME}} and goes as JSON', async () => {
    const seen = await echo({}, { SINCE: '2024-01-01' }, echoEndpoint({ method: 'POST', body: { filter: { since: '{{env:SINCE}}', all: true } } }));
    expect(seen.method).toBe('POST');
    expect(seen.headers['content-type']).toBe('application/json');
    expect(JSON.parse(seen.body)).toEqual({ filter: { since: '2024-01-01', all: true } });
  });

  it('an unresolved template fails the read naming the variable and where', async () => {
    const result = await readAll(connectorSpec(source.url), echoEndpoint({ method: 'POST', body: 'since={{env:NOT_SET_ANYWHERE}}' }), engineContext());
    expect(result.error).toBeInstanceOf(TemplateError);
    expect(result.error?.message).toBe("template {{env:NOT_SET_ANYWHERE}} in endpoint partners body did not resolve: the tenant has no stored secret NOT_SET_ANYWHERE (the hub's environment is read only for names allowed by svc.credentials.env-allow)");
  });
});

describe('{{env:secret:NAME}}', () => {
  // A secret store as the hub's is: per tenant, `secret:NAME` or NAME, a name of another form unknown.
  const stored: Record<number, Record<string, string>> = { 1: { ETOK: 'tenant-one-value' }, 2: { X: 'tenant-two-value' } };
  const secrets = { resolveSecret: async (tenantId: number, ref: string) => (parseRef(ref) !== undefined ? stored[tenantId]?.[parseRef(ref)!] : undefined) };
  const ctx = () => engineContext({}, { resolveCredential: createCredentialResolver({ secrets, envAllow: ['*'], env: { ETOK: 'from-env', X: 'from-env' } }, 1, 'connector:t') });

  it('resolves in a header value and a POST body as value_env secret:NAME does: the stored secret only', async () => {
    const result = await readAll(
      connectorSpec(source.url, { headers: [{ name: 'X-Val', value: '{{env:secret:ETOK}}' }, { name: 'X-Env', value_env: 'secret:ETOK' }] }),
      echoEndpoint({ method: 'POST', body: { v: '{{ env:secret:ETOK }}' } }),
      ctx(),
    );
    expect(result.error).toBeUndefined();
    const seen = result.items[0] as Echo;
    expect(seen.headers['x-val']).toBe('tenant-one-value');
    expect(seen.headers['x-env']).toBe('tenant-one-value');
    expect(JSON.parse(seen.body)).toEqual({ v: 'tenant-one-value' });
  });

  it('another tenant\'s secret or a path-like name never resolves and is never sent as written: the read fails naming it', async () => {
    for (const name of ['secret:X', 'secret:../2/X', '2:X', 'secret:2:X']) {
      const result = await readAll(connectorSpec(source.url, { headers: [{ name: 'X-Val', value: `{{env:${name}}}` }] }), echoEndpoint(), ctx());
      expect(result.error).toBeInstanceOf(TemplateError);
      expect(result.items).toEqual([]);
    }
    const missing = await readAll(connectorSpec(source.url, { headers: [{ name: 'X-Val', value: '{{env:secret:X}}' }] }), echoEndpoint(), ctx());
    expect(missing.error?.message).toBe('template {{env:secret:X}} in header X-Val did not resolve: the tenant has no stored secret X');
    const malformed = await readAll(connectorSpec(source.url), echoEndpoint({ method: 'POST', body: 'v={{env:secret:../2/X}}' }), ctx());
    expect(malformed.error?.message).toBe(
      "a {{env:…}} template in endpoint partners body names no value: a name is letters, digits, _, . and - (at most 128, not starting with . or -), or secret:NAME for the tenant's stored secret only",
    );
  });
});

describe('credentials stay out of messages', () => {
  it('an upstream body echoing the credential is masked in the failure text', async () => {
    const result = await readAll(
      connectorSpec(source.url, { auth: { kind: 'basic', username: 'demo', password_env: 'DEMO_PW' } }),
      endpointSpec('/bad-request/partners', { kind: 'none', response_path: '$' }),
      engineContext({ DEMO_PW: 'demo-password' }),
    );
    expect(result.error?.message).toBe('upstream returned HTTP 400 (permanent) — refusing to ingest its body as data: {"error":"bad_request","message":"header X-Api-Version is required","authorization":"Basic [REDACTED]"}');
  });
});

describe('values resolved for headers and templates stay out of messages and logs', () => {
  /** A careless upstream: its 403 quotes the request's headers and body back. */
  let refusing: Server;
  let refusingUrl: string;
  beforeAll(async () => {
    refusing = createServer((req, res) => {
      let body = '';
      req.on('data', (chunk) => (body += chunk));
      req.on('end', () => {
        const echo = { url: req.url, headers: req.headers, body };
        res.writeHead(req.url === '/graphql-echo' || req.url === '/echo-ok' ? 200 : 403, { 'content-type': 'application/json' });
        // A GraphQL error quoting the request; a record carrying a header's value; a refusal quoting it all.
        if (req.url === '/graphql-echo') res.end(JSON.stringify({ errors: [{ message: JSON.stringify(echo) }] }));
        else if (req.url === '/echo-ok') res.end(JSON.stringify([{ id: 1, echo: req.headers['x-trace'], form: new URLSearchParams({ t: String(req.headers['x-trace']) }).toString() }]));
        else res.end(JSON.stringify({ refused: true, ...echo }));
      });
    });
    await new Promise<void>((resolve) => refusing.listen(0, '127.0.0.1', resolve));
    refusingUrl = `http://127.0.0.1:${(refusing.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise((resolve) => refusing.close(resolve)));

  /** TRACE holds characters a JSON string escapes: the refusal quotes it as `trace\"value\\9t`. */
  const VALUES = { HDR: 'hdr-value-7h', TRACE: 'trace"value\\9t', BODYS: 'body-value-5b' };
  const headers: HeaderSpec[] = [
    { name: 'X-Client', value: 'id-{{env:HDR}}' },
    { name: 'X-Trace', value_env: 'TRACE' },
  ];
  const endpoints = {
    'a POST body': endpointSpec('/refuse', { kind: 'none', response_path: '$' }, { method: 'POST', body: '{"q":"{{env:BODYS}}"}' }),
    'GraphQL variables': endpointSpec('', { kind: 'none', response_path: '$' }, { graphql: true, query: '{ partners { id } }', variables: { t: '{{env:BODYS}}' } }),
  };

  it('pre-flight masks them too: in a GraphQL error quoting the request, and in the sample record', async () => {
    const graphql = await firstPage(
      connectorSpec(refusingUrl, { headers, graphqlPath: '/graphql-echo' }),
      endpointSpec('', { kind: 'none', response_path: '$' }, { graphql: true, query: '{ partners { id } }', variables: { t: '{{env:BODYS}}' } }),
      engineContext(VALUES),
    );
    expect(graphql.verdict).toMatch(/^GraphQL/);
    expect(graphql.verdict).toContain('[REDACTED]');
    const ok = await firstPage(connectorSpec(refusingUrl, { headers }), endpointSpec('/echo-ok', { kind: 'none', response_path: '$' }), engineContext(VALUES));
    expect(ok.verdict).toBe('ok');
    expect(ok.sample).toEqual({ id: 1, echo: '[REDACTED]', form: 't=[REDACTED]' });
    // What pre-flight answers with (src/connectors/preflight.ts): the verdict, the sample, the URL.
    for (const report of [graphql, ok]) {
      const shown = JSON.stringify({ verdict: report.verdict, sample: report.sample, url: report.url });
      for (const value of Object.values(VALUES)) expect(shown).not.toContain(JSON.stringify(value).slice(1, -1));
    }
  });

  for (const [what, endpoint] of Object.entries(endpoints)) {
    it(`headers (a template, a value_env) and ${what}: masked in the failure text; the log lines of the read scrubbed`, async () => {
      const logs = captureLogs('debug');
      try {
        const result = await runWithContext({ job: 'read' }, async () => {
          const read = await readAll(connectorSpec(refusingUrl, { headers }), endpoint, engineContext(VALUES));
          logger().warn({ headers: { 'x-trace': VALUES.TRACE } }, `sent ${VALUES.HDR} and ${VALUES.BODYS}`);
          return read;
        });
        const message = result.error?.message ?? '';
        expect(message).toMatch(/^upstream returned HTTP 403/);
        expect(message).toContain('"x-client":"id-[REDACTED]"');
        expect(message).toContain('"x-trace":"[REDACTED]"');
        for (const value of Object.values(VALUES)) {
          for (const form of [value, JSON.stringify(value).slice(1, -1)]) {
            expect(message).not.toContain(form);
            expect(logs.raw()).not.toContain(form);
          }
        }
        expect(logs.raw()).toContain('sent [REDACTED] and [REDACTED]');
      } finally {
        logs.restore();
      }
    });
  }
});

describe('composeHeaders', () => {
  it('compares names case-insensitively and lets auth win', () => {
    const headers = composeHeaders([{ name: 'X-One', value: '1' }, { name: 'x-one', value: '2' }, { name: 'Authorization', value: 'mine' }], () => undefined, { headers: [['AUTHORIZATION', 'Bearer t']], query: [], secrets: [] });
    expect(headers).toEqual({ Accept: 'application/json', 'User-Agent': 'svc-hub-connector/1', 'x-one': '2', AUTHORIZATION: 'Bearer t' });
  });

  it('a value_env that resolves to nothing keeps the default it would have replaced', () => {
    expect(composeHeaders([{ name: 'accept', value_env: 'NOPE' }], () => undefined, { headers: [], query: [], secrets: [] }).Accept).toBe('application/json');
  });
});

describe('resolveAuth', () => {
  it('none gives nothing', async () => {
    expect(await resolveAuth({ kind: 'none' }, async () => 'x')).toEqual({ headers: [], query: [], secrets: [] });
    expect(await resolveAuth(undefined as unknown as Auth, async () => 'x')).toEqual({ headers: [], query: [], secrets: [] });
  });

  it('keeps resolved values as secrets to mask', async () => {
    const parts = await resolveAuth({ kind: 'api-key', in: 'query', name: 'key', value_env: 'K' }, async () => 'abcdef');
    expect(parts).toEqual({ headers: [], query: [['key', 'abcdef']], secrets: ['abcdef'] });
  });
});

describe('resolveTemplates', () => {
  it('walks strings in arrays and objects, keys included, and leaves other values', () => {
    const env = (n: string) => ({ A: 'a', B: 'b' })[n];
    expect(resolveTemplates({ '{{env:A}}': ['x{{ env:B }}y', 1, null, true] }, env, 'here')).toEqual({ a: ['xby', 1, null, true] });
  });
});

describe('firstPage masks credentials in the composed URL', () => {
  it('api key in query is reported as ***', async () => {
    const report = await firstPage(
      connectorSpec(source.url, { auth: { kind: 'api-key', in: 'query', name: 'api_key', value_env: 'KEY' } }),
      endpointSpec('/link/partners?limit=2', { kind: 'link-header', response_path: '$' }),
      engineContext({ KEY: 'demo-api-key' }),
    );
    expect(report.url).toBe(`${source.url}/link/partners?limit=2&api_key=***`);
    expect(report.verdict).toBe('ok');
  });
});
