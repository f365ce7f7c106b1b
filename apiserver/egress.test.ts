import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { startReceiver, type Receiver } from '../test/harness/receiver.js';
import { startTestHub, type TestHub } from '../test/harness/hub.js';
import { startIssuer, type TestIssuer } from '../test/harness/tokens.js';

/**
 * The outbound address policy over HTTP, in the prod profile (where it is on by default): two hubs
 * on one database, `strict` with the defaults and `allowing` with `svc.egress.allow=127.0.0.1`.
 * Every destination is a loopback receiver; what the strict hub refuses must never reach it.
 */

let issuer: TestIssuer;
let receiver: Receiver;
let strict: TestHub;
let allowing: TestHub;
let auth: Record<string, string>;

const RECORDS = JSON.stringify([{ id: 1, name: 'one' }]);
const OPENAPI = JSON.stringify({
  openapi: '3.0.0',
  info: { title: 'Items' },
  paths: { '/items': { get: { responses: { 200: { content: { 'application/json': { schema: { type: 'array', items: { type: 'object', properties: { id: { type: 'integer' } } } } } } } } } } },
});

beforeAll(async () => {
  issuer = await startIssuer();
  receiver = await startReceiver((path) => ({ status: 200, body: path.startsWith('/openapi') ? OPENAPI : RECORDS }));
  const prod = { 'svc.profile': 'prod', 'svc.oidc.issuer': issuer.issuer, 'svc.secret.master-key': randomBytes(32).toString('hex'), 'svc.http.host': '127.0.0.1' };
  allowing = await startTestHub({ ...prod, 'svc.egress.allow': '127.0.0.1' });
  strict = await startTestHub({ ...prod, 'svc.datasource.url': allowing.ownerUrl, 'svc.migrate.on-start': false });
  const token = await issuer.mint({ realm_access: { roles: ['svc_integrator', 'svc_admin'] }, tenant_id: 1 }, { subject: 'egress-admin' });
  auth = { authorization: `Bearer ${token}`, 'content-type': 'application/json' };
  const applied = await post(allowing, '/api/connectors/apply', {
    apiVersion: 'connectors.svc.io/v1',
    kind: 'Connector',
    metadata: { name: 'loopback-source' },
    connector_type: 'rest-generic',
    scopes: ['items'],
    spec: { base_url: receiver.url, endpoints: [{ id: 'items', path: '/items', target: { kind: 'hybrid', table: 'ext.egress_items', unique_key: '$.id' } }] },
  });
  expect(applied.status).toBe(201);
});

afterAll(async () => {
  await strict?.stop();
  await allowing?.stop();
  await receiver?.close();
  await issuer?.close();
});

async function post(hub: TestHub, path: string, body: unknown = {}) {
  const res = await fetch(`${hub.url}${path}`, { method: 'POST', headers: auth, body: JSON.stringify(body) });
  const text = await res.text();
  const json = (res.headers.get('content-type') ?? '').includes('json');
  return { status: res.status, body: json && text ? JSON.parse(text) : undefined, text };
}

const POLICY = /refused by the outbound address policy \(svc\.egress\.deny-private\)/;

describe('connectors', () => {
  it('pre-flight: a loopback source is refused before any connection; allow-listed it is read', async () => {
    const before = receiver.received.length;
    const refused = await post(strict, '/api/connectors/loopback-source/preflight');
    expect(refused.status).toBe(200);
    expect(refused.body.ok).toBe(false);
    expect(refused.body.endpoints[0].verdict).toMatch(/^upstream not contacted: 127\.0\.0\.1 is a loopback address/);
    expect(refused.body.endpoints[0].verdict).toMatch(POLICY);
    expect(receiver.received.length).toBe(before);

    const read = await post(allowing, '/api/connectors/loopback-source/preflight');
    expect(read.body).toMatchObject({ ok: true, endpoints: [{ verdict: 'ok', items: 1 }] });
    expect(receiver.received.length).toBe(before + 1);
  });

  it('draft: refused with a 502 naming the policy, nothing sent', async () => {
    const before = receiver.received.length;
    const refused = await post(strict, '/api/connectors/loopback-source/draft', { path: '/items' });
    expect(refused.status).toBe(502);
    expect(refused.body.error).toMatch(POLICY);
    expect(receiver.received.length).toBe(before);
    expect((await post(allowing, '/api/connectors/loopback-source/draft', { path: '/items' })).status).toBe(200);
  });

  it('a run fails naming the policy, not retried, nothing sent', async () => {
    const before = receiver.received.length;
    const started = await post(strict, '/api/connectors/loopback-source/runs');
    expect(started.status).toBe(202);
    const runId = started.body.runs[0].id as string;
    let run: { status: string; errorMessage: string | null } | undefined;
    for (let i = 0; i < 200; i++) {
      const res = await fetch(`${strict.url}/api/platform/runs/${runId}`, { headers: auth });
      run = (await res.json()) as typeof run;
      if (run && run.status !== 'Running' && run.status !== 'Pending') break;
      await new Promise((r) => setTimeout(r, 25));
    }
    expect(run).toMatchObject({ status: 'Failed' });
    expect(run?.errorMessage).toMatch(POLICY);
    expect(receiver.received.length).toBe(before);
  });

  // WHATWG URLs normalise numeric IPv4 spellings and trailing dots; the policy reads the raw forms too (src/egress/policy.test.ts).
  it.each([
    ['loopback', (port: string) => `http://127.0.0.1:${port}/openapi.json`],
    ['decimal IPv4', (port: string) => `http://2130706433:${port}/openapi.json`],
    ['hex IPv4', (port: string) => `http://0x7f.1:${port}/openapi.json`],
    ['octal IPv4', (port: string) => `http://0177.0.0.1:${port}/openapi.json`],
    ['IPv4-mapped IPv6', (port: string) => `http://[::ffff:127.0.0.1]:${port}/openapi.json`],
    ['IPv4-mapped IPv6, hex', (port: string) => `http://[::ffff:7f00:1]:${port}/openapi.json`],
    ['localhost with a trailing dot', (port: string) => `http://localhost.:${port}/openapi.json`],
    ['a .localhost name', (port: string) => `http://svc.localhost:${port}/openapi.json`],
  ])('scaffold: %s is refused with a 400 naming openapiUrl, nothing sent', async (_form, url) => {
    const port = new URL(receiver.url).port;
    const before = receiver.received.length;
    const refused = await post(strict, '/api/connectors/scaffold', { openapiUrl: url(port), name: 'items' });
    expect(refused.status).toBe(400);
    expect(refused.body.field).toBe('openapiUrl');
    expect(refused.body.error).toMatch(POLICY);
    expect(receiver.received.length).toBe(before);
  });

  it('scaffold: an allow-listed address is read', async () => {
    const res = await post(allowing, '/api/connectors/scaffold', { openapiUrl: `${receiver.url}/openapi.json`, name: 'items' });
    expect(res.status).toBe(200);
    expect(res.text).toContain('base_url');
  });
});

describe('webhooks', () => {
  it('a loopback target is refused when stored; one stored through an allowing hub is refused at connect time; allow-listed it is delivered', async () => {
    const input = { name: 'loopback-hook', targetUrl: `${receiver.url}/hook`, eventTypes: ['org.created'], authMode: 'NONE' };
    const refused = await post(strict, '/api/tenants/1/integrations', input);
    expect(refused.status).toBe(400);
    expect(refused.body.field).toBe('targetUrl');
    expect(refused.body.error).toMatch(POLICY);
    const mapped = await post(strict, '/api/tenants/1/integrations', { ...input, targetUrl: `http://[::ffff:7f00:1]:${new URL(receiver.url).port}/hook` });
    expect(mapped.status).toBe(400);

    const created = await post(allowing, '/api/tenants/1/integrations', input);
    expect(created.status).toBe(201);
    const before = receiver.on('/hook').length;
    const test = await post(strict, `/api/tenants/1/integrations/${created.body.id}/test`, { eventType: 'org.created' });
    expect(test.status).toBe(200);
    expect(test.body.ok).toBe(false);
    expect(JSON.stringify(test.body)).toMatch(POLICY);
    expect(receiver.on('/hook').length).toBe(before);

    const sent = await post(allowing, `/api/tenants/1/integrations/${created.body.id}/test`, { eventType: 'org.created' });
    expect(sent.body.ok).toBe(true);
    expect(receiver.on('/hook').length).toBe(before + 1);
  });
});
