import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { ownerClient } from '../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../test/harness/hub.js';
import { captureLogs, type LogCapture } from '../test/harness/log-capture.js';
import { route, type RouteDecl } from './route.js';

/**
 * Inbound rate limits through the real pipeline (router, gate, error mapper, metrics, OpenAPI), on
 * probe routes that declare a bucket: the routes that will carry the buckets are not needed to
 * test the router's side. Time is the test's own clock, moved forward instead of slept through.
 */

const T0 = Date.UTC(2026, 0, 1, 12, 0, 0);
let t = T0;
const advance = (ms: number) => {
  t += ms;
};

/** Handler runs per probe, to prove a refused request never reaches it. */
const runs: Record<string, number> = {};
const ran = (name: string) => {
  runs[name] = (runs[name] ?? 0) + 1;
  return { ok: name };
};

const question = { type: 'object', required: ['question'], additionalProperties: false, properties: { question: { type: 'string', minLength: 1 } } } as const;

const probes: RouteDecl[] = [
  route({
    method: 'POST', path: '/api/platform/probe/chat', operationId: 'probeLimitedChat', summary: 'probe', tags: ['Test'],
    auth: ['svc_integrator'], rateLimit: 'platform-chat', body: question,
    responses: { 200: { description: 'ok' } },
    handler: () => ran('chat'),
  }),
  route({
    method: 'POST', path: '/api/platform/probe/search', operationId: 'probeLimitedSearch', summary: 'probe', tags: ['Test'],
    auth: ['svc_integrator'], rateLimit: 'platform-search', body: question,
    responses: { 200: { description: 'ok' } },
    handler: () => ran('search'),
  }),
  route({
    method: 'POST', path: '/api/probe/user-chat', operationId: 'probeLimitedUserChat', summary: 'probe', tags: ['Test'],
    auth: ['svc_user'], rateLimit: 'user-chat', body: question,
    responses: { 200: { description: 'ok' } },
    handler: () => ran('user-chat'),
  }),
  route({
    method: 'POST', path: '/api/tenants/{tid}/probe/views', operationId: 'probeLimitedViews', summary: 'probe', tags: ['Test'],
    auth: ['svc_admin'], rateLimit: 'view-generate',
    responses: { 200: { description: 'ok' } },
    handler: () => ran('views'),
  }),
];

const CHAT_RPM = 3;
let hub: TestHub;
let owner: pg.Client;

beforeAll(async () => {
  hub = await startTestHub(
    {
      'svc.ratelimit.platform-chat.rpm': CHAT_RPM,
      'svc.ratelimit.platform-search.rpm': 2,
      'svc.ratelimit.user-chat.rpm': 0,
      'svc.ratelimit.view-generate.rpm': 1,
    },
    probes,
    { now: () => t },
  );
  owner = await ownerClient(hub.ownerUrl);
  await owner.query(`insert into core.tenants (id, code, name, active) values (2, 'acme', 'Acme', true), (3, 'globex', 'Globex', true), (4, 'dormant', 'Dormant', false)`);
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

// Every test starts in a window of its own: a minute and more after the last.
beforeEach(() => advance(10 * 60_000));

async function call(path: string, headers: Record<string, string>, body: unknown = { question: 'q' }) {
  const res = await fetch(`${hub.url}${path}`, { method: 'POST', headers: { 'Content-Type': 'application/json', ...headers }, body: JSON.stringify(body) });
  return { status: res.status, retryAfter: res.headers.get('retry-after'), text: await res.text(), type: res.headers.get('content-type') };
}

const tenant = (id: number) => ({ 'X-Tenant-ID': String(id) });

async function metric(bucket: string): Promise<number> {
  const text = await (await fetch(`${hub.url}/q/metrics`)).text();
  const match = new RegExp(`^svc_rate_limited_total\\{bucket="${bucket}"\\} (\\d+)$`, 'm').exec(text);
  return match ? Number(match[1]) : 0;
}

describe('a bucket with a limit', () => {
  it('lets rpm requests through in a window; the next gets 429, Retry-After the whole seconds to the reset, and the handler does not run', async () => {
    const before = runs.chat ?? 0;
    for (let i = 0; i < CHAT_RPM; i++) expect((await call('/api/platform/probe/chat', tenant(2))).status).toBe(200);
    advance(20_400);
    const refused = await call('/api/platform/probe/chat', tenant(2));
    expect(refused).toEqual({ status: 429, retryAfter: '40', text: JSON.stringify({ error: 'rate limit exceeded' }), type: expect.stringContaining('application/json') });
    expect(runs.chat).toBe(before + CHAT_RPM);
    advance(39_599);
    expect(await call('/api/platform/probe/chat', tenant(2))).toMatchObject({ status: 429, retryAfter: '1' });
  });

  it('the window resets after 60 seconds', async () => {
    for (let i = 0; i < CHAT_RPM; i++) await call('/api/platform/probe/chat', tenant(2));
    expect((await call('/api/platform/probe/chat', tenant(2))).status).toBe(429);
    advance(59_999);
    expect((await call('/api/platform/probe/chat', tenant(2))).status).toBe(429);
    advance(1);
    for (let i = 0; i < CHAT_RPM; i++) expect((await call('/api/platform/probe/chat', tenant(2))).status).toBe(200);
    expect((await call('/api/platform/probe/chat', tenant(2))).status).toBe(429);
  });

  it('another tenant is counted apart', async () => {
    for (let i = 0; i < CHAT_RPM; i++) await call('/api/platform/probe/chat', tenant(2));
    expect((await call('/api/platform/probe/chat', tenant(2))).status).toBe(429);
    for (let i = 0; i < CHAT_RPM; i++) expect((await call('/api/platform/probe/chat', tenant(3))).status).toBe(200);
    expect((await call('/api/platform/probe/chat', tenant(3))).status).toBe(429);
  });

  it('another bucket is counted apart', async () => {
    for (let i = 0; i < CHAT_RPM; i++) await call('/api/platform/probe/chat', tenant(2));
    expect((await call('/api/platform/probe/chat', tenant(2))).status).toBe(429);
    expect((await call('/api/platform/probe/search', tenant(2))).status).toBe(200);
    expect((await call('/api/platform/probe/search', tenant(2))).status).toBe(200);
    expect((await call('/api/platform/probe/search', tenant(2))).status).toBe(429);
  });

  it('requests with no resolved tenant share one system key', async () => {
    for (let i = 0; i < CHAT_RPM; i++) expect((await call('/api/platform/probe/chat', {})).status).toBe(200);
    expect((await call('/api/platform/probe/chat', {})).status).toBe(429);
    // The tenants are not charged for it.
    expect((await call('/api/platform/probe/chat', tenant(2))).status).toBe(200);
  });

  it('refuses before the body is validated', async () => {
    for (let i = 0; i < CHAT_RPM; i++) expect((await call('/api/platform/probe/chat', tenant(3), { nonsense: true })).status).toBe(400);
    expect((await call('/api/platform/probe/chat', tenant(3), { nonsense: true })).status).toBe(429);
    expect((await call('/api/platform/probe/chat', tenant(3), 'not json at all')).status).toBe(429);
  });

  it('counts only after authentication and the gate: a refused caller is not counted', async () => {
    // {tid} naming another tenant: 403 from the gate, five times; the caller's one request still goes through.
    for (let i = 0; i < 5; i++) expect((await call('/api/tenants/3/probe/views', tenant(2), {})).status).toBe(403);
    // An inactive tenant is refused at authentication.
    expect((await call('/api/tenants/4/probe/views', tenant(4), {})).status).toBe(403);
    expect((await call('/api/tenants/2/probe/views', tenant(2), {})).status).toBe(200);
    expect((await call('/api/tenants/2/probe/views', tenant(2), {})).status).toBe(429);
  });

  it('an impersonated tenant is counted as the tenant the call acts as', async () => {
    for (let i = 0; i < CHAT_RPM; i++) expect((await call('/api/platform/probe/chat', { ...tenant(2), 'X-Impersonate-Tenant': '3' })).status).toBe(200);
    expect((await call('/api/platform/probe/chat', tenant(3))).status).toBe(429);
    expect((await call('/api/platform/probe/chat', tenant(2))).status).toBe(200);
  });
});

describe('a bucket of 0', () => {
  it('is off: nothing is counted, nothing refused', async () => {
    const before = await metric('user-chat');
    for (let i = 0; i < 50; i++) expect((await call('/api/probe/user-chat', tenant(2))).status).toBe(200);
    expect(await metric('user-chat')).toBe(before);
  });
});

describe('a refusal is observable', () => {
  let logs: LogCapture;
  beforeEach(() => {
    logs = captureLogs('warn');
  });
  afterEach(() => logs.restore());

  it('counts svc_rate_limited_total{bucket} and writes a warning naming bucket, tenant, rpm and retry seconds', async () => {
    const before = await metric('platform-search');
    await call('/api/platform/probe/search', tenant(3));
    await call('/api/platform/probe/search', tenant(3));
    advance(15_000);
    expect((await call('/api/platform/probe/search', tenant(3))).status).toBe(429);
    expect((await call('/api/platform/probe/search', tenant(3))).status).toBe(429);
    expect(await metric('platform-search')).toBe(before + 2);
    const text = await (await fetch(`${hub.url}/q/metrics`)).text();
    // Tagged with the bucket only.
    expect(text).toMatch(/^svc_rate_limited_total\{bucket="platform-search"\} \d+$/m);
    const warnings = logs.lines().filter((l) => l.bucket !== undefined);
    expect(warnings).toHaveLength(2);
    expect(warnings[0]).toMatchObject({ level: 'warn', bucket: 'platform-search', tenant: '3', rpm: 2, retryAfterSeconds: 45 });
    expect(warnings[0]!.msg).toBe('rate limit exceeded: bucket platform-search, tenant 3, 2 requests per minute; retry in 45 s');
  });

  it('names the system key when the request has no tenant', async () => {
    await call('/api/platform/probe/search', {});
    await call('/api/platform/probe/search', {});
    expect((await call('/api/platform/probe/search', {})).status).toBe(429);
    expect(logs.lines().find((l) => l.bucket !== undefined)).toMatchObject({ bucket: 'platform-search', tenant: 'system', rpm: 2, retryAfterSeconds: 60 });
  });
});

describe('OpenAPI', () => {
  it('documents the 429 and its Retry-After on limited routes only', async () => {
    const doc = (await (await fetch(`${hub.url}/q/openapi?format=json`, { headers: { Accept: 'application/json' } })).json()) as {
      paths: Record<string, Record<string, { responses: Record<string, { headers?: Record<string, unknown> }>; description?: string; 'x-svc-rate-limit'?: string }>>;
    };
    const chat = doc.paths['/api/platform/probe/chat']!.post!;
    expect(chat.responses['429']).toMatchObject({ headers: { 'Retry-After': { schema: { type: 'integer' } } } });
    expect(chat['x-svc-rate-limit']).toBe('platform-chat');
    expect(chat.description).toContain('svc.ratelimit.platform-chat.rpm');
    expect(doc.paths['/api/platform/health']!.get!.responses['429']).toBeUndefined();
  });
});
