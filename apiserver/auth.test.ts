import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { SignJWT, UnsecuredJWT, type JWTPayload } from 'jose';
import pg from 'pg';
import { ROLES, type Role } from '../src/auth/principal.js';
import { startTestHub, type TestHub } from '../test/harness/hub.js';
import { startIssuer, type MintOptions, type TestIssuer } from '../test/harness/tokens.js';
import { until } from '../test/harness/until.js';
import { route, type RouteDecl } from './route.js';

/**
 * Authentication and role gates through the real pipeline (router gate, error mapper, directory,
 * verifier) with OIDC on: one loopback issuer, one hub that finds the keys through discovery and
 * one that is given an explicit jwks-uri and an audience. Probe routes are mounted to reach gate
 * shapes the shipped routes do not have yet.
 */

const probes: RouteDecl[] = [
  route({
    method: 'GET', path: '/api/tenants/{tid}/probe', operationId: 'authProbeTenant', summary: 'probe', tags: ['Test'],
    auth: ['svc_admin'],
    responses: { 200: { description: 'ok' } },
    handler: ({ params, principal }) => ({ tid: params.tid, tenantId: principal!.tenantId, impersonating: principal!.impersonating }),
  }),
  route({
    method: 'POST', path: '/api/tenants/{tid}/probe', operationId: 'authProbeTenantPost', summary: 'probe', tags: ['Test'],
    auth: ['svc_admin'],
    body: { type: 'object', required: ['name'], properties: { name: { type: 'string' } } },
    responses: { 200: { description: 'ok' } },
    handler: ({ body }) => ({ got: body }),
  }),
  route({
    method: 'GET', path: '/api/platform/deliveries-probe', operationId: 'authProbeDeliveries', summary: 'probe', tags: ['Test'],
    auth: ['svc_integrator', ['svc_admin', 'svc_superadmin']],
    responses: { 200: { description: 'ok' } },
    handler: () => ({ deliveries: [] }),
  }),
  // A platform route whose own gate forgets svc_integrator: the platform floor must still hold.
  route({
    method: 'GET', path: '/api/platform/admin-probe', operationId: 'authProbePlatformAdmin', summary: 'probe', tags: ['Test'],
    auth: ['svc_admin'],
    responses: { 200: { description: 'ok' } },
    handler: () => ({ admin: true }),
  }),
  // Needs a tenant: reads the caller's users through row-level security.
  route({
    method: 'GET', path: '/api/bff/v1/tenant-probe', operationId: 'authProbeNeedsTenant', summary: 'probe', tags: ['Test'],
    auth: ['svc_user'],
    responses: { 200: { description: 'ok' } },
    handler: async ({ principal, services }) => {
      const { rows } = await services.db.withTenant(principal!.tenantId, (tx) =>
        tx.query<{ login: string }>('select login from core.users order by login'),
      );
      return { tenantId: principal!.tenantId, logins: rows.map((r) => r.login) };
    },
  }),
];

const AUDIENCE = 'svc-hub-api';

let issuer: TestIssuer;
/** OIDC on, keys through discovery, no audience configured. */
let hub: TestHub;
/** OIDC on, issuer `<base>/realm` (no discovery document there), explicit jwks-uri, audience required. */
let audHub: TestHub;
let realmIssuer: string;
let owner: pg.Client;
/** Users seeded directly: subject -> id. */
const seeded: Record<string, number> = {};

beforeAll(async () => {
  issuer = await startIssuer();
  realmIssuer = `${issuer.issuer}/realm`;
  hub = await startTestHub({ 'svc.oidc.issuer': issuer.issuer }, probes);
  audHub = await startTestHub(
    { 'svc.oidc.issuer': realmIssuer, 'svc.oidc.jwks-uri': issuer.jwksUri, 'svc.oidc.audience': AUDIENCE, 'svc.datasource.url': hub.ownerUrl },
    probes,
  );
  owner = new pg.Client({ connectionString: hub.ownerUrl });
  await owner.connect();
  await owner.query(
    `insert into core.tenants (id, code, name, active) values (2, 'acme', 'Acme', true), (3, 'globex', 'Globex', true), (4, 'dormant', 'Dormant', false)`,
  );
  const users: Array<[number, string, string, boolean, boolean]> = [
    [2, 'ann', 'seed-ann', false, true],
    [3, 'carl', 'seed-carl', false, true],
    [2, 'locked.lou', 'seed-locked', true, true],
    [2, 'gone.gil', 'seed-inactive', false, false],
    [2, 'taken', 'seed-taken', false, true],
  ];
  for (const [tenant, login, subject, locked, active] of users) {
    const { rows } = await owner.query<{ id: string }>(
      'insert into core.users (tenant_id, login, issuer, subject, locked, active) values ($1, $2, $3, $4, $5, $6) returning id',
      [tenant, login, issuer.issuer, subject, locked, active],
    );
    seeded[subject] = Number(rows[0]!.id);
  }
});

afterAll(async () => {
  await owner?.end();
  await audHub?.stop();
  await hub?.stop();
  await issuer?.close();
});

// ---------------------------------------------------------------------------------------------
// helpers

interface Reply {
  status: number;
  text: string;
  headers: Headers;
  json(): unknown;
}

async function call(
  path: string,
  options: { token?: string; authorization?: string; headers?: Record<string, string>; method?: string; body?: unknown; base?: string } = {},
): Promise<Reply> {
  const headers: Record<string, string> = { ...options.headers };
  if (options.token) headers.authorization = `Bearer ${options.token}`;
  if (options.authorization !== undefined) headers.authorization = options.authorization;
  if (options.body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(`${options.base ?? hub.url}${path}`, {
    method: options.method ?? 'GET',
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
  });
  const text = await res.text();
  return { status: res.status, text, headers: res.headers, json: () => JSON.parse(text) };
}

let subjects = 0;
/** A token with the given realm roles and claims; a fresh subject unless one is given. */
function token(roles: readonly string[] | undefined, claims: JWTPayload = {}, options: MintOptions = {}): Promise<string> {
  const body: JWTPayload = { ...claims };
  if (roles) body.realm_access = { roles: [...roles] };
  return issuer.mint(body, { subject: `sub-${process.pid}-${++subjects}`, ...options });
}

function expectPlatform401(r: Reply): void {
  expect({ status: r.status, text: r.text }).toEqual({ status: 401, text: 'authentication required' });
  expect(r.headers.get('content-type')).toMatch(/^text\/plain/);
  expect(r.headers.get('www-authenticate')).toBe('Bearer');
}

function expectJson401(r: Reply): void {
  expect(r.status).toBe(401);
  expect(r.headers.get('content-type')).toMatch(/^application\/json/);
  expect(r.json()).toEqual({ error: 'authentication required' });
  expect(r.headers.get('www-authenticate')).toBe('Bearer');
}

function expectMissingIntegrator(r: Reply): void {
  expect({ status: r.status, text: r.text }).toEqual({ status: 403, text: 'missing role svc_integrator' });
  expect(r.headers.get('content-type')).toMatch(/^text\/plain/);
  expect(r.headers.get('www-authenticate')).toBeNull();
}

function expectEmpty403(r: Reply): void {
  expect({ status: r.status, text: r.text }).toEqual({ status: 403, text: '' });
  expect(r.headers.get('content-type')).toBeNull();
  expect(r.headers.get('www-authenticate')).toBeNull();
}

function expectJson403(r: Reply, error: string): void {
  expect(r.status).toBe(403);
  expect(r.headers.get('content-type')).toMatch(/^application\/json/);
  expect(r.json()).toEqual({ error });
}

async function userRows(subject: string, iss = issuer.issuer) {
  const { rows } = await owner.query<{ id: string; tenant_id: string; login: string; name: string | null; email: string | null; last_login_at: Date | null }>(
    'select id, tenant_id, login, name, email, last_login_at from core.users where issuer = $1 and subject = $2',
    [iss, subject],
  );
  return rows;
}

// ---------------------------------------------------------------------------------------------

describe('public paths need no token with OIDC on', () => {
  it.each(['/q/health', '/q/health/live', '/q/health/ready'])('%s answers 200 UP without a token', async (path) => {
    const r = await call(path);
    expect(r.status).toBe(200);
    expect(r.json()).toMatchObject({ status: 'UP' });
    expect(r.headers.get('www-authenticate')).toBeNull();
  });

  it('/q/metrics answers the Prometheus text format without a token', async () => {
    const r = await call('/q/metrics');
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toMatch(/^text\/plain/);
    expect(r.text).toMatch(/^# HELP /m);
  });

  it('a public path ignores an invalid Authorization header instead of refusing it', async () => {
    const r = await call('/q/health/live', { authorization: 'Bearer garbage' });
    expect(r.status).toBe(200);
  });
});

describe('an identity provider that cannot be reached before the hub fetched its keys', () => {
  const cases: Array<{ what: string; settings: (i: TestIssuer) => Record<string, string>; set: (i: TestIssuer, mode: 'up' | 'down') => void; asked: (i: TestIssuer) => number }> = [
    {
      what: 'discovery document',
      settings: () => ({}),
      set: (i, mode) => {
        i.discovery = mode;
      },
      asked: (i) => i.discoveryFetches(),
    },
    {
      what: 'key set (svc.oidc.jwks-uri)',
      settings: (i) => ({ 'svc.oidc.jwks-uri': i.jwksUri }),
      set: (i, mode) => {
        i.jwks = mode;
      },
      asked: (i) => i.jwksFetches(),
    },
  ];
  it.each(cases)('$what: answers 503 to every call, asking the provider once per back-off (not once per call), and verifies tokens once it is back', async ({ settings, set, asked }) => {
    const down = await startIssuer();
    set(down, 'down');
    const downHub = await startTestHub({ 'svc.oidc.issuer': down.issuer, ...settings(down), 'svc.datasource.url': hub.ownerUrl }, probes);
    try {
      const bearer = await down.mint({ realm_access: { roles: ['svc_user'] } }, { subject: `down-${process.pid}` });
      const me = () => call('/api/bff/v1/me', { token: bearer, base: downHub.url });
      const unavailable = (r: Reply) => {
        expect(r.status).toBe(503);
        expect(r.json()).toEqual({ error: 'identity provider unreachable' });
      };
      // Twenty calls at once, then twenty one after the other: one request to the provider (the back-off is 2 s).
      (await Promise.all(Array.from({ length: 20 }, me))).forEach(unavailable);
      for (let i = 0; i < 20; i++) unavailable(await me());
      expect(asked(down)).toBe(1);
      // Back up: once the back-off is over, a call finds the key set and is answered.
      set(down, 'up');
      await until('a call answered once the provider is back', async () => (await me()).status === 200, { everyMs: 100 });
      expect(asked(down)).toBe(2);
    } finally {
      await downHub.stop();
      await down.close();
    }
  });
});

describe('bearer token verification (on /api/platform/health: 401 plain text)', () => {
  it('no Authorization header', async () => {
    expectPlatform401(await call('/api/platform/health'));
  });

  it.each([
    ['Basic credentials', 'Basic dXNlcjpwYXNz'],
    ['an empty Bearer', 'Bearer'],
    ['Bearer and spaces only', 'Bearer    '],
    ['a non-JWT bearer', 'Bearer not-a-jwt'],
    ['three garbage segments', 'Bearer a.b.c'],
    ['another scheme', 'Token abc.def.ghi'],
    ['two tokens', 'Bearer aaa bbb'],
    ['plain garbage', '%%%garbage%%%'],
  ])('malformed header: %s', async (_name, authorization) => {
    expectPlatform401(await call('/api/platform/health', { authorization }));
  });

  it('accepts a valid RS256 token (sanity check for the refusals below)', async () => {
    const r = await call('/api/platform/health', { token: await token(['svc_integrator'], {}, { alg: 'RS256' }) });
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toMatch(/^application\/json/);
    expect(r.json()).toEqual({ platform: 'ok', modules: { core: '0.1' } });
  });

  it('accepts a valid ES256 token', async () => {
    const r = await call('/api/platform/health', { token: await token(['svc_integrator'], {}, { alg: 'ES256' }) });
    expect(r.status).toBe(200);
    expect(r.json()).toEqual({ platform: 'ok', modules: { core: '0.1' } });
  });

  it('the scheme name is case-insensitive', async () => {
    const r = await call('/api/platform/health', { authorization: `bearer ${await token(['svc_integrator'])}` });
    expect(r.status).toBe(200);
  });

  it.each(['RS256', 'ES256'] as const)('refuses an expired %s token', async (alg) => {
    expectPlatform401(await call('/api/platform/health', { token: await token(['svc_integrator'], {}, { alg, expiresIn: -120 }) }));
  });

  it('refuses a token valid for longer than svc.oidc.max-token-lifetime (a year), as one without exp', async () => {
    const year = await token(['svc_integrator', 'svc_user'], { tenant_id: 2 }, { expiresIn: 365 * 86_400 });
    expectPlatform401(await call('/api/platform/health', { token: year }));
    expectJson401(await call('/api/bff/v1/me', { token: year }));
    const hour = await token(['svc_integrator', 'svc_user'], { tenant_id: 2 }, { expiresIn: 3600 });
    expect((await call('/api/platform/health', { token: hour })).status).toBe(200);
  });

  it.each(['RS256', 'ES256'] as const)('refuses a %s token without exp (properly signed, otherwise valid)', async (alg) => {
    const noExp = await token(['svc_integrator', 'svc_user'], { tenant_id: 2 }, { alg, expiresIn: null });
    const claims = JSON.parse(Buffer.from(noExp.split('.')[1]!, 'base64url').toString('utf8')) as JWTPayload;
    expect(claims.exp).toBeUndefined();
    expectPlatform401(await call('/api/platform/health', { token: noExp }));
    expectJson401(await call('/api/bff/v1/me', { token: noExp }));
    // The same claims with an expiry pass: the refusal is the missing exp.
    expect((await call('/api/platform/health', { token: await token(['svc_integrator', 'svc_user'], { tenant_id: 2 }, { alg }) })).status).toBe(200);
  });

  it('refuses a token that is not yet valid (nbf in the future)', async () => {
    const nbf = Math.floor(Date.now() / 1000) + 600;
    expectPlatform401(await call('/api/platform/health', { token: await token(['svc_integrator'], { nbf }) }));
  });

  it.each(['RS256', 'ES256'] as const)('refuses a %s token from another issuer', async (alg) => {
    const t = await token(['svc_integrator'], {}, { alg, issuer: 'https://evil.example.com' });
    expectPlatform401(await call('/api/platform/health', { token: t }));
  });

  it('refuses a token whose issuer differs only by a trailing slash', async () => {
    expectPlatform401(await call('/api/platform/health', { token: await token(['svc_integrator'], {}, { issuer: `${issuer.issuer}/` }) }));
  });

  it.each(['RS256', 'ES256'] as const)('refuses a %s token signed by a key the JWKS does not publish (same kid)', async (alg) => {
    expectPlatform401(await call('/api/platform/health', { token: await token(['svc_integrator'], {}, { alg, rogue: true }) }));
  });

  it('refuses a valid token whose payload was altered (roles escalated)', async () => {
    const genuine = await token(['svc_user'], { tenant_id: 2 });
    const [header, payload, signature] = genuine.split('.') as [string, string, string];
    const claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as JWTPayload;
    claims.realm_access = { roles: ['svc_integrator', 'svc_superadmin'] };
    const forged = `${header}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}.${signature}`;
    expectPlatform401(await call('/api/platform/health', { token: forged }));
  });

  it('refuses an HS256 token (symmetric algorithms are not accepted)', async () => {
    const now = Math.floor(Date.now() / 1000);
    const hs = await new SignJWT({ realm_access: { roles: ['svc_integrator'] } })
      .setProtectedHeader({ alg: 'HS256', kid: 'rs-1' })
      .setIssuer(issuer.issuer)
      .setSubject('hs-user')
      .setIssuedAt(now)
      .setExpirationTime(now + 300)
      .sign(new TextEncoder().encode('a-shared-secret-that-is-long-enough-for-hs256'));
    expectPlatform401(await call('/api/platform/health', { token: hs }));
  });

  it('refuses an unsecured (alg none) token', async () => {
    const none = new UnsecuredJWT({ realm_access: { roles: ['svc_integrator'] } })
      .setIssuer(issuer.issuer)
      .setSubject('none-user')
      .setIssuedAt()
      .setExpirationTime('5m')
      .encode();
    expectPlatform401(await call('/api/platform/health', { token: none }));
  });

  it.each([['acme'], [''], [-2], [2.5], [true], [false], [[3]], [{ id: 3 }]])('refuses a token whose tenant claim %p is not a tenant id', async (tenantId) => {
    expectPlatform401(await call('/api/platform/health', { token: await token(['svc_integrator'], { tenant_id: tenantId }) }));
    expectJson401(await call('/api/bff/v1/me', { token: await token(['svc_user'], { tenant_id: tenantId }) }));
  });

  it('HEAD is gated like GET', async () => {
    const res = await fetch(`${hub.url}/api/platform/health`, { method: 'HEAD' });
    expect(res.status).toBe(401);
    expect(res.headers.get('www-authenticate')).toBe('Bearer');
  });
});

describe('401 outside /api/platform/* is JSON', () => {
  it('/api/bff/v1/me without a token', async () => {
    expectJson401(await call('/api/bff/v1/me'));
  });

  it('/api/bff/v1/me with an expired token', async () => {
    expectJson401(await call('/api/bff/v1/me', { token: await token(['svc_user'], { tenant_id: 2 }, { expiresIn: -120 }) }));
  });

  it('/api/bff/v1/me with a Basic header', async () => {
    expectJson401(await call('/api/bff/v1/me', { authorization: 'Basic dXNlcjpwYXNz' }));
  });

  it('/api/bff/v1/me with a forged token', async () => {
    expectJson401(await call('/api/bff/v1/me', { token: await token(['svc_user'], { tenant_id: 2 }, { rogue: true, alg: 'ES256' }) }));
  });

  it('/api/bff/v1/me with a token giving a claim twice (the last is not taken): 401 as an invalid token', async () => {
    const sub = (n: number) => ({ subject: `dup-${process.pid}-${n}` });
    for (const [n, members] of [
      '"realm_access":{"roles":["svc_user"]},"tenant_id":3,"tenant_id":2',
      '"realm_access":{"roles":["svc_user"]},"tenant_id":3,"tenant_\\u0069d":2',
      '"realm_access":{"roles":["svc_user"]},"realm_access":{"roles":["svc_user","svc_superadmin"]},"tenant_id":2',
      '"realm_access":{"roles":["svc_user","svc_superadmin"]},"tenant_id":2,"acting_as_tenant":2,"acting_as_tenant":3',
    ].entries()) {
      expectJson401(await call('/api/bff/v1/me', { token: await issuer.mintText(members, sub(n)) }));
      expectPlatform401(await call('/api/platform/health', { token: await issuer.mintText(members.replace('"svc_user"', '"svc_integrator"'), sub(n)) }));
    }
    // Each given once: accepted, acting as the tenant it names.
    const once = await call('/api/bff/v1/me', { token: await issuer.mintText('"realm_access":{"roles":["svc_user"]},"tenant_\\u0069d":2', sub(9)) });
    expect(once.status).toBe(200);
    expect(once.json()).toMatchObject({ tenant: { id: 2 } });
  });

  it('a request with two Authorization headers: 401 as an invalid token, whichever comes first (Node would keep only the first)', async () => {
    // fetch joins repeated headers into one: these go through node:http, headers as sent.
    const twice = (path: string, headers: string[]) =>
      new Promise<{ status: number; type: string | undefined; text: string; www: string | undefined }>((resolve, reject) => {
        const url = new URL(path, hub.url);
        const r = request({ host: url.hostname, port: url.port, method: 'GET', path, headers: ['Host', url.host, ...headers] }, (res) => {
          let text = '';
          res.on('data', (c: Buffer) => (text += c.toString('utf8')));
          res.on('end', () => resolve({ status: res.statusCode!, type: res.headers['content-type'], text, www: res.headers['www-authenticate'] as string | undefined }));
          res.on('error', reject);
        });
        r.on('error', reject);
        r.end();
      });
    const good = `Bearer ${await token(['svc_user', 'svc_integrator'], { tenant_id: 2 })}`;
    const other = `Bearer ${await token(['svc_user', 'svc_integrator'], { tenant_id: 3 })}`;
    for (const [first, second] of [[good, 'Bearer garbage'], ['Bearer garbage', good], [good, other], [good, good]]) {
      const me = await twice('/api/bff/v1/me', ['Authorization', first!, 'authorization', second!]);
      expect(me).toMatchObject({ status: 401, text: '{"error":"authentication required"}', www: 'Bearer' });
      const platform = await twice('/api/platform/health', ['Authorization', first!, 'Authorization', second!]);
      expect(platform).toMatchObject({ status: 401, text: 'authentication required', www: 'Bearer' });
      expect(platform.type).toMatch(/^text\/plain/);
      // Undeclared platform paths hold the same floor.
      expect(await twice('/api/platform/nope', ['Authorization', first!, 'Authorization', second!])).toMatchObject({ status: 401, text: 'authentication required' });
    }
    expect(await twice('/api/bff/v1/me', ['Authorization', good])).toMatchObject({ status: 200 });
  });

  it('/api/bff/v1/me with a subject that is not a string: 401 as an invalid token, never the user its text would name', async () => {
    // ["seed-ann"] would read as ann's subject, and every object as the one user "[object Object]".
    for (const sub of [['seed-ann'], { a: 1 }, 7, true]) {
      // mintText writes the subject as JSON, whatever it is.
      const token = await issuer.mintText('"realm_access":{"roles":["svc_user","svc_integrator"]},"tenant_id":2', { subject: sub as unknown as string });
      expectJson401(await call('/api/bff/v1/me', { token }));
      expectPlatform401(await call('/api/platform/health', { token }));
    }
    expect(await userRows('[object Object]')).toEqual([]);
  });

  it('a tenant path without a token', async () => {
    expectJson401(await call('/api/tenants/2/probe'));
  });

  it('authentication comes before body validation', async () => {
    expectJson401(await call('/api/tenants/2/probe', { method: 'POST', body: { wrong: 1 } }));
    expectEmpty403(await call('/api/tenants/2/probe', { method: 'POST', body: { wrong: 1 }, token: await token(['svc_user'], { tenant_id: 2 }) }));
    const bad = await call('/api/tenants/2/probe', { method: 'POST', body: { wrong: 1 }, token: await token(['svc_admin'], { tenant_id: 2 }) });
    expect(bad.status).toBe(400);
    expect(bad.json()).toMatchObject({ field: 'name' });
  });
});

describe('the platform floor: svc_integrator on every /api/platform/* path', () => {
  it.each([
    ['no realm_access claim', undefined],
    ['an empty role list', []],
  ])('authenticated with %s: 403 missing role svc_integrator', async (_name, roles) => {
    expectMissingIntegrator(await call('/api/platform/health', { token: await token(roles, { tenant_id: 2 }) }));
  });

  it('holds for a platform route whose own gate does not name svc_integrator', async () => {
    expectMissingIntegrator(await call('/api/platform/admin-probe', { token: await token(['svc_admin'], { tenant_id: 2 }) }));
    const ok = await call('/api/platform/admin-probe', { token: await token(['svc_admin', 'svc_integrator'], { tenant_id: 2 }) });
    expect(ok.status).toBe(200);
  });

  it.each(['/API/platform/admin-probe', '/api/Platform/admin-probe', '/api/platform/admin-probe/'])(
    'holds for a spelling of the path the router also matches: %s',
    async (path) => {
      expectMissingIntegrator(await call(path, { token: await token(['svc_admin'], { tenant_id: 2 }) }));
      expectPlatform401(await call(path));
    },
  );

  it('a role in another claim or another case is not svc_integrator', async () => {
    expectMissingIntegrator(await call('/api/platform/health', { token: await token(['SVC_INTEGRATOR', 'svc_integrator ', 'integrator'], { tenant_id: 2 }) }));
    expectMissingIntegrator(
      await call('/api/platform/health', {
        token: await token(undefined, { tenant_id: 2, roles: ['svc_integrator'], resource_access: { hub: { roles: ['svc_integrator'] } }, scope: 'svc_integrator' }),
      }),
    );
    expectMissingIntegrator(await call('/api/platform/health', { token: await token(undefined, { tenant_id: 2, realm_access: { roles: 'svc_integrator' } }) }));
  });
});

describe('a body is read only once the caller passed authentication and the gate', () => {
  /**
   * Sends the head of a request announcing `length` bytes of body and only the first few of them, and
   * waits for the answer: one given while the body is still being sent was given without reading it.
   */
  function answerBeforeBody(path: string, headers: Record<string, string>, length = 1_000_000): Promise<{ status: number; text: string } | 'waited for the body'> {
    return new Promise((resolve, reject) => {
      const url = new URL(path, hub.url);
      const req = request({ host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers: { 'Content-Type': 'application/json', 'Content-Length': String(length), ...headers } });
      const timer = setTimeout(() => {
        req.destroy();
        resolve('waited for the body');
      }, 3_000);
      req.on('response', (res) => {
        let text = '';
        res.on('data', (chunk: Buffer) => (text += chunk));
        res.on('end', () => {
          clearTimeout(timer);
          req.destroy();
          resolve({ status: res.statusCode!, text });
        });
      });
      req.on('error', (err) => {
        clearTimeout(timer);
        reject(err);
      });
      req.write('{"name": "');
    });
  }

  it('without a token (401), without the platform role or the route\'s own (403), the hub answers without waiting for the body it announced', async () => {
    expect(await answerBeforeBody('/api/platform/secrets', {})).toEqual({ status: 401, text: 'authentication required' });
    expect(await answerBeforeBody('/api/platform/no-such-route', {})).toEqual({ status: 401, text: 'authentication required' });
    expect(await answerBeforeBody('/api/connectors/apply', {})).toEqual({ status: 401, text: '{"error":"authentication required"}' });
    const user = `Bearer ${await token(['svc_user'], { tenant_id: 2 })}`;
    expect(await answerBeforeBody('/api/platform/secrets', { Authorization: user })).toEqual({ status: 403, text: 'missing role svc_integrator' });
    expect(await answerBeforeBody('/api/connectors/apply', { Authorization: user })).toEqual({ status: 403, text: '' });
    // Past the gate the body is read: the answer waits for it (announced under the 1 MiB a JSON body may hold, which
    // is refused from its Content-Length at once).
    expect(await answerBeforeBody('/api/platform/secrets', { Authorization: `Bearer ${await token(['svc_integrator', 'svc_admin'], { tenant_id: 2 })}` })).toBe('waited for the body');
  });
});

describe('the platform floor holds before routing: an unknown /api/platform/* path is not told apart', () => {
  it.each(['/api/platform/no-such-route', '/api/platform/health/deeper', '/API/Platform/nothing-here', '/api/platform'])(
    'without credentials %s is a 401 like a declared path',
    async (path) => {
      expectPlatform401(await call(path));
      expectPlatform401(await call(path, { method: 'POST', body: {} }));
      expectPlatform401(await call(path, { authorization: 'Bearer not-a-jwt' }));
    },
  );

  it('a declared platform path with a method it does not serve is a 401 too (no 405 naming the methods)', async () => {
    const r = await call('/api/platform/health', { method: 'DELETE' });
    expectPlatform401(r);
    expect(r.headers.get('allow')).toBeNull();
  });

  it('with credentials: 403 without svc_integrator, then 404 as usual', async () => {
    expectMissingIntegrator(await call('/api/platform/no-such-route', { token: await token(['svc_user'], { tenant_id: 2 }) }));
    const found = await call('/api/platform/no-such-route', { token: await token(['svc_integrator'], { tenant_id: 2 }) });
    expect(found.status).toBe(404);
    const wrongMethod = await call('/api/platform/health', { method: 'DELETE', token: await token(['svc_integrator'], { tenant_id: 2 }) });
    expect(wrongMethod.status).toBe(405);
    expect(wrongMethod.headers.get('allow')).toBe('HEAD, GET');
    expect(await wrongMethod.json()).toEqual({ error: 'method DELETE is not allowed on this path; it takes HEAD, GET' });
  });

  // fetch refuses TRACE: these go through node:http.
  const raw = (method: string, path: string, token?: string) =>
    new Promise<{ status: number; type: string | undefined; allow: string | undefined; text: string }>((resolve, reject) => {
      const url = new URL(path, hub.url);
      const r = request({ host: url.hostname, port: url.port, method, path, headers: token ? { authorization: `Bearer ${token}` } : {} }, (res) => {
        let text = '';
        res.on('data', (c: Buffer) => (text += c.toString('utf8')));
        res.on('end', () => resolve({ status: res.statusCode!, type: res.headers['content-type'], allow: res.headers.allow, text }));
        res.on('error', reject);
      });
      r.on('error', reject);
      r.end();
    });

  it.each(['TRACE', 'PROPFIND', 'PURGE', 'OPTIONS'])('%s, which no route serves: 401 first, then 404 JSON on an unknown path and 405 JSON naming the methods on a declared one (never 501)', async (method) => {
    const integrator = await token(['svc_integrator'], { tenant_id: 2 });
    for (const path of ['/api/platform/nope', '/api/platform/health']) {
      const anonymous = await raw(method, path);
      expect({ status: anonymous.status, text: anonymous.text, allow: anonymous.allow }).toEqual({ status: 401, text: 'authentication required', allow: undefined });
    }
    const unknown = await raw(method, '/api/platform/nope', integrator);
    expect(unknown).toMatchObject({ status: 404, text: '{"error":"not found"}', allow: undefined });
    expect(unknown.type).toMatch(/^application\/json/);
    expect(await raw(method, '/api/nothing-here')).toMatchObject({ status: 404, text: '{"error":"not found"}', allow: undefined });
    const declared = await raw(method, '/api/platform/health', integrator);
    if (method === 'OPTIONS') {
      // OPTIONS asks which methods a path takes: answered with them, no body.
      expect(declared).toMatchObject({ status: 200, allow: 'HEAD, GET', text: '' });
      return;
    }
    expect(declared).toMatchObject({ status: 405, allow: 'HEAD, GET' });
    expect(declared.type).toMatch(/^application\/json/);
    expect(JSON.parse(declared.text)).toEqual({ error: `method ${method} is not allowed on this path; it takes HEAD, GET` });
  });

  it('outside /api/platform an unknown path stays a plain 404', async () => {
    expect((await call('/api/nothing-here')).status).toBe(404);
    expect((await call('/api/platformish/x')).status).toBe(404);
  });
});

describe('each role alone', () => {
  const others = (role: Role) => ROLES.filter((r) => r !== role);

  describe('/api/platform/health (svc_integrator)', () => {
    it('svc_integrator alone: 200', async () => {
      const r = await call('/api/platform/health', { token: await token(['svc_integrator'], { tenant_id: 2 }) });
      expect(r.status).toBe(200);
    });
    it.each(others('svc_integrator'))('%s alone: 403 missing role svc_integrator', async (role) => {
      expectMissingIntegrator(await call('/api/platform/health', { token: await token([role], { tenant_id: 2 }) }));
    });
  });

  describe('/api/bff/v1/me (svc_user)', () => {
    it('svc_user alone: 200 with tenant, roles and user', async () => {
      const r = await call('/api/bff/v1/me', { token: await token(['svc_user'], { tenant_id: 2 }) });
      expect(r.status).toBe(200);
      expect(r.headers.get('content-type')).toMatch(/^application\/json/);
      expect(r.json()).toMatchObject({ tenant: { id: 2, code: 'acme', homeId: 2, impersonating: false }, roles: ['svc_user'], via: 'token' });
    });
    it.each(others('svc_user'))('%s alone: 403 with an empty body', async (role) => {
      expectEmpty403(await call('/api/bff/v1/me', { token: await token([role], { tenant_id: 2 }) }));
    });
    it('no roles: 403 with an empty body', async () => {
      expectEmpty403(await call('/api/bff/v1/me', { token: await token(undefined, { tenant_id: 2 }) }));
    });
  });

  describe('/api/tenants/{tid}/probe (svc_admin)', () => {
    it('svc_admin alone: 200', async () => {
      const r = await call('/api/tenants/2/probe', { token: await token(['svc_admin'], { tenant_id: 2 }) });
      expect(r.status).toBe(200);
      expect(r.json()).toEqual({ tid: '2', tenantId: 2, impersonating: false });
    });
    it.each(others('svc_admin'))('%s alone: 403 with an empty body', async (role) => {
      expectEmpty403(await call('/api/tenants/2/probe', { token: await token([role], { tenant_id: 2 }) }));
    });
  });

  describe('/api/platform/deliveries-probe (svc_integrator and (svc_admin or svc_superadmin))', () => {
    it('svc_integrator alone: 403 with an empty body (the floor passes, the rest of the gate does not)', async () => {
      expectEmpty403(await call('/api/platform/deliveries-probe', { token: await token(['svc_integrator'], { tenant_id: 2 }) }));
    });
    it.each(others('svc_integrator'))('%s alone: 403 missing role svc_integrator', async (role) => {
      expectMissingIntegrator(await call('/api/platform/deliveries-probe', { token: await token([role], { tenant_id: 2 }) }));
    });
    it.each(['svc_admin', 'svc_superadmin'] as const)('svc_integrator with %s: 200', async (role) => {
      const r = await call('/api/platform/deliveries-probe', { token: await token(['svc_integrator', role], { tenant_id: 2 }) });
      expect(r.status).toBe(200);
      expect(r.json()).toEqual({ deliveries: [] });
    });
    it('svc_integrator with svc_user: 403 with an empty body', async () => {
      expectEmpty403(await call('/api/platform/deliveries-probe', { token: await token(['svc_integrator', 'svc_user'], { tenant_id: 2 }) }));
    });
  });

  it('no role implies another: svc_superadmin does not pass an svc_admin gate, nor svc_admin an svc_user gate', async () => {
    expectEmpty403(await call('/api/tenants/2/probe', { token: await token(['svc_superadmin', 'svc_user', 'svc_integrator'], { tenant_id: 2 }) }));
    expectEmpty403(await call('/api/bff/v1/me', { token: await token(['svc_admin', 'svc_superadmin', 'svc_integrator'], { tenant_id: 2 }) }));
  });

  it('unknown extra roles are carried but grant nothing', async () => {
    const r = await call('/api/bff/v1/me', { token: await token(['svc_user', 'offline_access', 'uma_authorization'], { tenant_id: 2 }) });
    expect(r.status).toBe(200);
    expect((r.json() as { roles: string[] }).roles).toEqual(['offline_access', 'svc_user', 'uma_authorization']);
  });
});

describe('tenant from the token', () => {
  it('{tid} other than the token tenant: 403 with an empty body', async () => {
    const t = await token(['svc_admin'], { tenant_id: 2 });
    expectEmpty403(await call('/api/tenants/3/probe', { token: t }));
    expectEmpty403(await call('/api/tenants/1/probe', { token: t }));
    expectEmpty403(await call('/api/tenants/0/probe', { token: t }));
    expect((await call('/api/tenants/2/probe', { token: t })).status).toBe(200);
  });

  it('{tid} written as the tenant id but not the one way (02, 2.0, +2, 002): 400 naming tid on every route, never another tenant', async () => {
    const admin = await token(['svc_admin'], { tenant_id: 2 });
    for (const [tid, canonical] of [['02', '2'], ['2.0', '2'], ['%2B2', '2'], ['002', '2'], ['03', '3'], ['3.00', '3'], ['00', '0'], ['-0', '0']] as const) {
      for (const path of [`/api/tenants/${tid}/probe`, `/api/tenants/${tid}/integrations`, `/api/tenants/${tid}/orgs`, `/api/tenants/${tid}/users`]) {
        const r = await call(path, { token: admin });
        expect({ path, status: r.status, body: r.json() }).toEqual({
          path, status: 400, body: { error: `tid must be written ${canonical}, not ${decodeURIComponent(tid)}`, field: 'tid', hint: 'write an integer without leading zeros, sign or fraction' },
        });
      }
    }
    expect((await call('/api/tenants/2.5/probe', { token: admin })).json()).toEqual({ error: 'tid must be an integer', field: 'tid' });
    expect((await call('/api/tenants/2/integrations', { token: admin })).status).toBe(200);
    expectEmpty403(await call('/api/tenants/3/integrations', { token: admin }));
    // The tenants' own route reads its id the same way.
    const superadmin = await token(['svc_superadmin'], { tenant_id: 2 });
    expect((await call('/api/tenants/2', { token: superadmin })).status).toBe(200);
    for (const [id, canonical] of [['02', '2'], ['2.0', '2'], ['01', '1'], ['%2B1', '1']] as const) {
      expect((await call(`/api/tenants/${id}`, { token: superadmin })).json()).toMatchObject({ error: `id must be written ${canonical}, not ${decodeURIComponent(id)}`, field: 'id' });
    }
  });

  it('a number written otherwise than the one way whose value is out of range is refused for the range, as that value is: {tid} and ids alike', async () => {
    const admin = await token(['svc_admin'], { tenant_id: 2 });
    // {tid} (0 to 2^53 - 1) is read before the tenant check: "tid must be written -1, not -01" named a value refused too.
    for (const [tid, error] of [['-01', 'tid must be at least 0'], ['-1.0', 'tid must be at least 0'], ['09007199254740992', 'tid must be at most 9007199254740991'], ['%2B9007199254740993', 'tid must be at most 9007199254740991']] as const) {
      for (const path of [`/api/tenants/${tid}/integrations`, `/api/tenants/${tid}/orgs`, `/api/tenants/${tid}/users`]) {
        const r = await call(path, { token: admin });
        expect({ path, status: r.status, body: r.json() }).toEqual({ path, status: 400, body: { error, field: 'tid' } });
      }
    }
    // An id of at least 1: -0, 00 and 0.0 are 0, refused as 0 is.
    for (const id of ['-0', '00', '0.0', '%2B0', '0']) {
      expect((await call(`/api/tenants/2/orgs/${id}`, { token: admin })).json()).toEqual({ error: 'id must be at least 1', field: 'id' });
    }
    expect((await call('/api/tenants/2/orgs/09007199254740992', { token: admin })).json()).toEqual({ error: 'id must be at most 9007199254740991', field: 'id' });
    expect((await call('/api/tenants/2/orgs/01', { token: admin })).json()).toMatchObject({ error: 'id must be written 1, not 01', field: 'id' });
  });

  it('a numeric string tenant claim is accepted', async () => {
    const r = await call('/api/tenants/3/probe', { token: await token(['svc_admin'], { tenant_id: '3' }) });
    expect(r.status).toBe(200);
    expect(r.json()).toEqual({ tid: '3', tenantId: 3, impersonating: false });
  });

  it('X-Tenant-ID is ignored when a token is presented', async () => {
    const t = await token(['svc_admin', 'svc_user'], { tenant_id: 2 });
    expectEmpty403(await call('/api/tenants/3/probe', { token: t, headers: { 'X-Tenant-ID': '3' } }));
    const me = await call('/api/bff/v1/me', { token: t, headers: { 'X-Tenant-ID': '3', 'X-Impersonate-Tenant': '3', 'X-User-ID': '999' } });
    expect(me.status).toBe(200);
    expect(me.json()).toMatchObject({ tenant: { id: 2, code: 'acme', impersonating: false } });
    expect((me.json() as { user: { id: string } }).user.id).not.toBe('999');
  });

  it('a tenant-scoped query runs as the token tenant (row-level security)', async () => {
    const r = await call('/api/bff/v1/tenant-probe', { token: await token(['svc_user'], { tenant_id: 3 }) });
    expect(r.status).toBe(200);
    const body = r.json() as { tenantId: number; logins: string[] };
    expect(body.tenantId).toBe(3);
    expect(body.logins).toContain('carl');
    expect(body.logins).not.toContain('ann');
  });

  it('a call that needs a tenant with a token naming none: 401 no tenant in security context', async () => {
    const r = await call('/api/bff/v1/tenant-probe', { token: await token(['svc_user']) });
    expect(r.status).toBe(401);
    expect(r.headers.get('content-type')).toMatch(/^application\/json/);
    expect(r.json()).toEqual({ error: 'no tenant in security context' });
  });

  it('without a tenant, /me still answers (tenant null)', async () => {
    const r = await call('/api/bff/v1/me', { token: await token(['svc_user']) });
    expect(r.status).toBe(200);
    expect(r.json()).toMatchObject({ tenant: null, roles: ['svc_user'] });
  });

  it('without a tenant, a {tid} path is refused: 403 with an empty body', async () => {
    expectEmpty403(await call('/api/tenants/1/probe', { token: await token(['svc_admin']) }));
  });

  it.each([0, '0', '000'])('a token whose tenant claim %p names the system tenant is refused: 401', async (tenantId) => {
    expectJson401(await call('/api/bff/v1/me', { token: await token(['svc_user', 'svc_superadmin'], { tenant_id: tenantId }) }));
    expectPlatform401(await call('/api/platform/health', { token: await token(['svc_integrator'], { tenant_id: tenantId }) }));
  });

  it('an unknown tenant is refused', async () => {
    expectJson403(await call('/api/bff/v1/me', { token: await token(['svc_user'], { tenant_id: 999 }) }), 'unknown tenant 999');
  });

  it('an inactive tenant is refused', async () => {
    expectJson403(await call('/api/bff/v1/me', { token: await token(['svc_user'], { tenant_id: 4 }) }), 'tenant inactive');
  });

  it('a superadmin who has not impersonated is refused for another tenant', async () => {
    const t = await token(['svc_superadmin', 'svc_admin', 'svc_user', 'svc_integrator'], { tenant_id: 2 });
    expectEmpty403(await call('/api/tenants/3/probe', { token: t }));
    expect((await call('/api/tenants/2/probe', { token: t })).status).toBe(200);
  });
});

describe('impersonation (acting_as_tenant)', () => {
  it('a superadmin acting as tenant 3 passes a tenant-3 path and sees tenant 3', async () => {
    const t = await token(['svc_superadmin', 'svc_admin', 'svc_user'], { tenant_id: 2, acting_as_tenant: 3 });
    const probe = await call('/api/tenants/3/probe', { token: t });
    expect(probe.status).toBe(200);
    expect(probe.json()).toEqual({ tid: '3', tenantId: 3, impersonating: true });
    const me = await call('/api/bff/v1/me', { token: t });
    expect(me.json()).toMatchObject({ tenant: { id: 3, code: 'globex', homeId: 2, impersonating: true }, roles: ['svc_admin', 'svc_superadmin', 'svc_user'] });
    const data = await call('/api/bff/v1/tenant-probe', { token: t });
    expect(data.json()).toMatchObject({ tenantId: 3 });
    expect((data.json() as { logins: string[] }).logins).toContain('carl');
    expect((data.json() as { logins: string[] }).logins).not.toContain('ann');
  });

  it('a superadmin acting as tenant 3 is refused for tenant 1', async () => {
    expectEmpty403(await call('/api/tenants/1/probe', { token: await token(['svc_superadmin', 'svc_admin'], { tenant_id: 2, acting_as_tenant: 3 }) }));
  });

  it('roles are unchanged: without svc_admin the impersonated tenant path is still refused', async () => {
    expectEmpty403(await call('/api/tenants/3/probe', { token: await token(['svc_superadmin'], { tenant_id: 2, acting_as_tenant: 3 }) }));
  });

  it('a superadmin with no home tenant can impersonate', async () => {
    const r = await call('/api/tenants/3/probe', { token: await token(['svc_superadmin', 'svc_admin'], { acting_as_tenant: 3 }) });
    expect(r.status).toBe(200);
    expect(r.json()).toEqual({ tid: '3', tenantId: 3, impersonating: true });
  });

  it.each([
    ['/api/tenants/3/probe', ['svc_admin']],
    ['/api/bff/v1/me', ['svc_user', 'svc_admin', 'svc_integrator']],
    ['/api/platform/health', ['svc_integrator']],
  ] as const)('the claim without svc_superadmin on %s: 403 svc_superadmin required', async (path, roles) => {
    expectJson403(
      await call(path, { token: await token(roles, { tenant_id: 2, acting_as_tenant: 3 }) }),
      'svc_superadmin required to impersonate a tenant',
    );
  });

  it.each([0, '0', '00'])('a token naming the system tenant (acting_as_tenant %p) is refused: 401', async (acting) => {
    const t = await token(['svc_superadmin', 'svc_user', 'svc_integrator'], { tenant_id: 2, acting_as_tenant: acting });
    expectJson401(await call('/api/bff/v1/me', { token: t }));
    expectPlatform401(await call('/api/platform/health', { token: t }));
    const homeless = await token(['svc_superadmin', 'svc_user'], { acting_as_tenant: acting });
    expectJson401(await call('/api/bff/v1/me', { token: homeless }));
  });

  it.each([[[3]], [''], [false], ['globex'], [{ id: 3 }]])('a token whose acting_as_tenant %p is not a tenant id is refused as an invalid token: 401, with or without svc_superadmin', async (acting) => {
    for (const roles of [['svc_superadmin', 'svc_user', 'svc_integrator'], ['svc_user', 'svc_integrator']]) {
      const t = await token(roles, { tenant_id: 2, acting_as_tenant: acting });
      expectJson401(await call('/api/bff/v1/me', { token: t }));
      expectPlatform401(await call('/api/platform/health', { token: t }));
    }
  });

  it('impersonating an unknown tenant is refused', async () => {
    expectJson403(await call('/api/bff/v1/me', { token: await token(['svc_superadmin', 'svc_user'], { tenant_id: 2, acting_as_tenant: 998 }) }), 'unknown tenant 998');
  });
});

describe('hub users: just-in-time provisioning', () => {
  it('the first call creates a core.users row for (iss, sub); later calls reuse it', async () => {
    const claims = { tenant_id: 2, preferred_username: 'jit.jane', name: 'Jane Jit', email: 'jane@example.com' };
    const t = await token(['svc_user'], claims, { subject: 'jit-jane' });
    expect(await userRows('jit-jane')).toHaveLength(0);
    const first = await call('/api/bff/v1/me', { token: t });
    expect(first.status).toBe(200);
    const rows = await userRows('jit-jane');
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ tenant_id: 2, login: 'jit.jane', name: 'Jane Jit', email: 'jane@example.com' });
    expect(rows[0]!.last_login_at).toBeInstanceOf(Date);
    const me = first.json() as { user: { id: string; login: string; subject: string; issuer: string } };
    expect(me.user).toEqual({ id: String(rows[0]!.id), login: 'jit.jane', subject: 'jit-jane', issuer: issuer.issuer });

    // Past the directory cache, a new token for the same (iss, sub) finds the same row.
    hub.services.directory.invalidate();
    const again = await call('/api/bff/v1/me', { token: await token(['svc_user'], claims, { subject: 'jit-jane' }) });
    expect((again.json() as { user: { id: string } }).user.id).toBe(me.user.id);
    const after = await userRows('jit-jane');
    expect(after).toHaveLength(1);
    expect(after[0]!.last_login_at!.getTime()).toBeGreaterThanOrEqual(rows[0]!.last_login_at!.getTime());
  });

  it('the login falls back to email, then subject', async () => {
    await call('/api/bff/v1/me', { token: await token(['svc_user'], { tenant_id: 2, email: 'mail.only@example.com' }, { subject: 'jit-mail' }) });
    await call('/api/bff/v1/me', { token: await token(['svc_user'], { tenant_id: 2 }, { subject: 'jit-bare' }) });
    expect((await userRows('jit-mail'))[0]).toMatchObject({ login: 'mail.only@example.com' });
    expect((await userRows('jit-bare'))[0]).toMatchObject({ login: 'jit-bare' });
  });

  it('a login already taken in the tenant gets the subject appended', async () => {
    const r = await call('/api/bff/v1/me', { token: await token(['svc_user'], { tenant_id: 2, preferred_username: 'taken' }, { subject: 'jit-taken' }) });
    expect(r.status).toBe(200);
    expect((await userRows('jit-taken'))[0]).toMatchObject({ tenant_id: 2, login: 'taken#jit-taken' });
  });

  it('a login taken with the subject appended too still provisions the user (a login with a tail), never a 500', async () => {
    await owner.query('insert into core.users (tenant_id, login) values (2, $1), (2, $2)', ['twice.taken', 'twice.taken#jit-twice']);
    const r = await call('/api/bff/v1/me', { token: await token(['svc_user'], { tenant_id: 2, preferred_username: 'twice.taken' }, { subject: 'jit-twice' }) });
    expect(r.status).toBe(200);
    const rows = await userRows('jit-twice');
    expect(rows).toHaveLength(1);
    expect(rows[0]!.login).toMatch(/^twice\.taken#jit-twice#[0-9a-f]{8}$/);
    expect(r.json()).toMatchObject({ user: { id: String(rows[0]!.id), login: rows[0]!.login } });
  });

  it('the first calls of one new user at the same moment provision one row', async () => {
    const tokens = await Promise.all(Array.from({ length: 6 }, () => token(['svc_user'], { tenant_id: 2, preferred_username: 'eager' }, { subject: 'jit-eager' })));
    const replies = await Promise.all(tokens.map((t) => call('/api/bff/v1/me', { token: t })));
    expect(replies.map((r) => r.status)).toEqual(tokens.map(() => 200));
    expect(await userRows('jit-eager')).toEqual([expect.objectContaining({ login: 'eager' })]);
    expect(new Set(replies.map((r) => (r.json() as { user: { id: string } }).user.id)).size).toBe(1);
  });

  it('a token with no tenant provisions its user in the system tenant 0', async () => {
    const r = await call('/api/platform/health', { token: await token(['svc_integrator'], {}, { subject: 'jit-system' }) });
    expect(r.status).toBe(200);
    expect((await userRows('jit-system'))[0]).toMatchObject({ tenant_id: 0, login: 'jit-system' });
  });

  it('the same subject from another issuer is another user', async () => {
    const t = await issuer.mint({ realm_access: { roles: ['svc_user'] }, tenant_id: 2, preferred_username: 'twin' }, {
      subject: 'jit-twin', issuer: realmIssuer, audience: AUDIENCE,
    });
    const a = await call('/api/bff/v1/me', { base: audHub.url, token: t });
    const b = await call('/api/bff/v1/me', { token: await token(['svc_user'], { tenant_id: 2, preferred_username: 'twin' }, { subject: 'jit-twin' }) });
    expect(a.status).toBe(200);
    expect(b.status).toBe(200);
    const idA = (a.json() as { user: { id: string } }).user.id;
    const idB = (b.json() as { user: { id: string } }).user.id;
    expect(idA).not.toBe(idB);
    expect(await userRows('jit-twin', realmIssuer)).toHaveLength(1);
    expect(await userRows('jit-twin')).toHaveLength(1);
  });

  it('claim user_id names a hub user directly; nothing is provisioned for the subject', async () => {
    const r = await call('/api/bff/v1/me', { token: await token(['svc_user'], { tenant_id: 2, user_id: seeded['seed-ann'] }, { subject: 'jit-via-user-id' }) });
    expect(r.status).toBe(200);
    expect(r.json()).toMatchObject({ user: { id: String(seeded['seed-ann']), login: 'ann', subject: 'jit-via-user-id' } });
    expect(await userRows('jit-via-user-id')).toHaveLength(0);
  });

  it('claim user_id as a numeric string works the same', async () => {
    const r = await call('/api/bff/v1/me', { token: await token(['svc_user'], { tenant_id: 2, user_id: String(seeded['seed-ann']) }) });
    expect(r.json()).toMatchObject({ user: { id: String(seeded['seed-ann']), login: 'ann' } });
  });

  it('claim user_id naming a user of another tenant is refused', async () => {
    expectJson403(await call('/api/bff/v1/me', { token: await token(['svc_user'], { tenant_id: 2, user_id: seeded['seed-carl'] }) }), 'unknown user');
  });

  it.each([['abc'], [1.5], [-1], [true], [[1]], [{ id: 1 }]])('claim user_id %p that is not a user id is refused as an invalid token', async (userId) => {
    expectJson401(await call('/api/bff/v1/me', { token: await token(['svc_user'], { tenant_id: 2, user_id: userId }) }));
    expectPlatform401(await call('/api/platform/health', { token: await token(['svc_integrator'], { tenant_id: 2, user_id: userId }) }));
  });
});

describe('account state', () => {
  it('a locked user: 403 account locked', async () => {
    const t = await token(['svc_user', 'svc_integrator'], { tenant_id: 2 }, { subject: 'seed-locked' });
    expectJson403(await call('/api/bff/v1/me', { token: t }), 'account locked');
    expectJson403(await call('/api/platform/health', { token: t }), 'account locked');
  });

  it('a deactivated user: 403 account inactive', async () => {
    const t = await token(['svc_user', 'svc_integrator'], { tenant_id: 2 }, { subject: 'seed-inactive' });
    expectJson403(await call('/api/bff/v1/me', { token: t }), 'account inactive');
    expectJson403(await call('/api/platform/health', { token: t }), 'account inactive');
  });

  it('a locked user named through user_id is refused too', async () => {
    expectJson403(await call('/api/bff/v1/me', { token: await token(['svc_user'], { tenant_id: 2, user_id: seeded['seed-locked'] }) }), 'account locked');
  });

  it('locking a provisioned user takes effect once the directory cache is past', async () => {
    const t = await token(['svc_user'], { tenant_id: 2 }, { subject: 'jit-to-lock' });
    expect((await call('/api/bff/v1/me', { token: t })).status).toBe(200);
    await owner.query('update core.users set locked = true where issuer = $1 and subject = $2', [issuer.issuer, 'jit-to-lock']);
    hub.services.directory.invalidate();
    expectJson403(await call('/api/bff/v1/me', { token: t }), 'account locked');
  });
});

describe('audience and an explicit jwks-uri (issuer without a discovery document)', () => {
  const mintFor = (roles: string[], options: MintOptions = {}) =>
    issuer.mint({ realm_access: { roles }, tenant_id: 2 }, { subject: `aud-${++subjects}`, issuer: realmIssuer, audience: AUDIENCE, ...options });

  it.each(['RS256', 'ES256'] as const)('the right audience (%s): 200', async (alg) => {
    const r = await call('/api/platform/health', { base: audHub.url, token: await mintFor(['svc_integrator'], { alg }) });
    expect(r.status).toBe(200);
    expect(r.json()).toEqual({ platform: 'ok', modules: { core: '0.1' } });
  });

  it('the audience among several: 200', async () => {
    const r = await call('/api/platform/health', { base: audHub.url, token: await mintFor(['svc_integrator'], { audience: ['account', AUDIENCE] }) });
    expect(r.status).toBe(200);
  });

  it('a wrong audience: 401', async () => {
    expectPlatform401(await call('/api/platform/health', { base: audHub.url, token: await mintFor(['svc_integrator'], { audience: 'another-api' }) }));
    expectJson401(await call('/api/bff/v1/me', { base: audHub.url, token: await mintFor(['svc_user'], { audience: 'another-api' }) }));
  });

  it('no audience at all: 401', async () => {
    const t = await issuer.mint({ realm_access: { roles: ['svc_integrator'] }, tenant_id: 2 }, { issuer: realmIssuer });
    expectPlatform401(await call('/api/platform/health', { base: audHub.url, token: t }));
  });

  it("a token for the discovery hub's issuer is the wrong issuer here", async () => {
    expectPlatform401(await call('/api/platform/health', { base: audHub.url, token: await token(['svc_integrator'], {}, { audience: AUDIENCE }) }));
  });

  it('a forged token with the right audience: 401', async () => {
    expectPlatform401(await call('/api/platform/health', { base: audHub.url, token: await mintFor(['svc_integrator'], { rogue: true }) }));
  });

  it('without an audience configured, any audience is accepted', async () => {
    const r = await call('/api/platform/health', { token: await token(['svc_integrator'], {}, { audience: 'whatever' }) });
    expect(r.status).toBe(200);
  });
});
