import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { ROLES } from '../src/auth/principal.js';
import { Config, ConfigError } from '../src/config/config.js';
import { startTestHub, type TestHub } from '../test/harness/hub.js';
import { route, type RouteDecl } from './route.js';

/** The dev bypass (no token; tenant, user and impersonation from headers; every role) and the configuration rules around it. */

const probes: RouteDecl[] = [
  route({
    method: 'GET', path: '/api/tenants/{tid}/probe', operationId: 'devProbeTenant', summary: 'probe', tags: ['Test'],
    auth: ['svc_admin'],
    responses: { 200: { description: 'ok' } },
    handler: ({ params, principal }) => ({ tid: params.tid, tenantId: principal!.tenantId, impersonating: principal!.impersonating }),
  }),
  route({
    method: 'GET', path: '/api/platform/deliveries-probe', operationId: 'devProbeDeliveries', summary: 'probe', tags: ['Test'],
    auth: ['svc_integrator', ['svc_admin', 'svc_superadmin']],
    responses: { 200: { description: 'ok' } },
    handler: () => ({ deliveries: [] }),
  }),
  route({
    method: 'GET', path: '/api/bff/v1/tenant-probe', operationId: 'devProbeNeedsTenant', summary: 'probe', tags: ['Test'],
    auth: ['svc_user'],
    responses: { 200: { description: 'ok' } },
    handler: async ({ principal, services }) => {
      const { rows } = await services.db.withTenant(principal!.tenantId, (tx) => tx.query<{ login: string }>('select login from core.users order by login'));
      return { tenantId: principal!.tenantId, logins: rows.map((r) => r.login) };
    },
  }),
];

let hub: TestHub;

beforeAll(async () => {
  hub = await startTestHub({}, probes);
  const owner = new pg.Client({ connectionString: hub.ownerUrl });
  await owner.connect();
  try {
    await owner.query(`insert into core.tenants (id, code, name, active) values (2, 'acme', 'Acme', true), (4, 'dormant', 'Dormant', false)`);
    await owner.query(`insert into core.users (tenant_id, login) values (2, 'ann'), (1, 'dora')`);
  } finally {
    await owner.end();
  }
});

afterAll(async () => {
  await hub?.stop();
});

async function call(path: string, headers: Record<string, string> = {}) {
  const res = await fetch(`${hub.url}${path}`, { headers });
  const text = await res.text();
  return { status: res.status, text, headers: res.headers, json: () => JSON.parse(text) as Record<string, unknown> };
}

describe('dev bypass', () => {
  it('the test hub runs with the bypass on (no issuer)', () => {
    expect(hub.config.bool('svc.security.dev-bypass')).toBe(true);
    expect(hub.config.optional('svc.oidc.issuer')).toBeUndefined();
  });

  it('no token: /me answers with every role and no tenant', async () => {
    const r = await call('/api/bff/v1/me');
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toMatch(/^application\/json/);
    expect(r.json()).toEqual({ tenant: null, roles: [...ROLES].sort(), user: { id: undefined, login: 'dev', subject: 'dev' }, via: 'dev-bypass' });
  });

  it('X-Tenant-ID sets the tenant', async () => {
    const r = await call('/api/bff/v1/me', { 'X-Tenant-ID': '1' });
    expect(r.status).toBe(200);
    expect(r.json()).toMatchObject({ tenant: { id: 1, code: 'default', homeId: 1, impersonating: false }, roles: [...ROLES].sort() });
  });

  it('X-Tenant-ID tolerates surrounding spaces', async () => {
    expect((await call('/api/bff/v1/me', { 'X-Tenant-ID': ' 2 ' })).json()).toMatchObject({ tenant: { id: 2, code: 'acme' } });
  });

  it.each(['abc', '1.5', '-1', '0x2', '1e3', '2; 3'])('non-numeric X-Tenant-ID %p: 400 naming the header', async (value) => {
    const r = await call('/api/bff/v1/me', { 'X-Tenant-ID': value });
    expect(r.status).toBe(400);
    expect(r.headers.get('content-type')).toMatch(/^application\/json/);
    const body = r.json();
    expect(String(body.error)).toMatch(/x-tenant-id/i);
    expect(String(body.field)).toMatch(/^x-tenant-id$/i);
  });

  it('non-numeric X-Impersonate-Tenant: 400 naming the header', async () => {
    const r = await call('/api/bff/v1/me', { 'X-Tenant-ID': '1', 'X-Impersonate-Tenant': 'acme' });
    expect(r.status).toBe(400);
    expect(String(r.json().error)).toMatch(/x-impersonate-tenant/i);
  });

  it('X-User-ID names the user', async () => {
    const r = await call('/api/bff/v1/me', { 'X-Tenant-ID': '1', 'X-User-ID': 'alice' });
    expect(r.json()).toMatchObject({ user: { id: 'alice', login: 'alice', subject: 'alice' } });
  });

  it.each(['X-Tenant-ID', 'X-Impersonate-Tenant', 'X-User-ID'])('%s given twice: 400 naming it, never one of the two (or both joined)', async (name) => {
    // fetch joins repeated headers into one: this goes through node:http, headers as sent.
    const r = await new Promise<{ status: number; text: string }>((resolve, reject) => {
      const url = new URL('/api/bff/v1/me', hub.url);
      const req = request({ host: url.hostname, port: url.port, path: url.pathname, headers: ['Host', url.host, 'X-Tenant-ID', '1', name, '2', name.toLowerCase(), '1'] }, (res) => {
        let text = '';
        res.on('data', (c: Buffer) => (text += c.toString('utf8')));
        res.on('end', () => resolve({ status: res.statusCode!, text }));
        res.on('error', reject);
      });
      req.on('error', reject);
      req.end();
    });
    expect(r.status).toBe(400);
    expect(JSON.parse(r.text)).toMatchObject({ error: `${name} is given twice`, field: name });
  });

  it('X-Impersonate-Tenant switches the tenant', async () => {
    const r = await call('/api/bff/v1/me', { 'X-Tenant-ID': '1', 'X-Impersonate-Tenant': '2' });
    expect(r.json()).toMatchObject({ tenant: { id: 2, code: 'acme', homeId: 1, impersonating: true } });
    const probe = await call('/api/tenants/2/probe', { 'X-Tenant-ID': '1', 'X-Impersonate-Tenant': '2' });
    expect(probe.status).toBe(200);
    expect(probe.json()).toEqual({ tid: '2', tenantId: 2, impersonating: true });
  });

  it('X-Impersonate-Tenant naming the X-Tenant-ID tenant is no impersonation', async () => {
    const r = await call('/api/bff/v1/me', { 'X-Tenant-ID': '2', 'X-Impersonate-Tenant': '2' });
    expect(r.json()).toMatchObject({ tenant: { id: 2, code: 'acme', homeId: 2, impersonating: false } });
    expect((await call('/api/tenants/2/probe', { 'X-Tenant-ID': '2', 'X-Impersonate-Tenant': '2' })).json()).toEqual({ tid: '2', tenantId: 2, impersonating: false });
  });

  it('every gate passes: platform floor, svc_admin, combined gate', async () => {
    const health = await call('/api/platform/health');
    expect(health.status).toBe(200);
    expect(health.json()).toEqual({ platform: 'ok', modules: { core: '0.1' } });
    expect((await call('/api/platform/deliveries-probe')).status).toBe(200);
    expect((await call('/api/tenants/1/probe', { 'X-Tenant-ID': '1' })).json()).toEqual({ tid: '1', tenantId: 1, impersonating: false });
  });

  it('the {tid} check still holds: 403 with an empty body', async () => {
    const r = await call('/api/tenants/2/probe', { 'X-Tenant-ID': '1' });
    expect({ status: r.status, text: r.text }).toEqual({ status: 403, text: '' });
    expect(r.headers.get('content-type')).toBeNull();
    const none = await call('/api/tenants/1/probe');
    expect({ status: none.status, text: none.text }).toEqual({ status: 403, text: '' });
  });

  it('tenant data is read as the header tenant', async () => {
    expect((await call('/api/bff/v1/tenant-probe', { 'X-Tenant-ID': '2' })).json()).toEqual({ tenantId: 2, logins: ['ann'] });
    expect((await call('/api/bff/v1/tenant-probe', { 'X-Tenant-ID': '1' })).json()).toEqual({ tenantId: 1, logins: ['dora'] });
  });

  it('a call that needs a tenant without X-Tenant-ID: 401 no tenant in security context', async () => {
    const r = await call('/api/bff/v1/tenant-probe');
    expect(r.status).toBe(401);
    expect(r.json()).toEqual({ error: 'no tenant in security context' });
  });

  it.each(['0', '00', ' 0 '])('X-Tenant-ID %p (the system tenant) is refused: 403', async (value) => {
    for (const path of ['/api/bff/v1/me', '/api/bff/v1/tenant-probe', '/api/platform/health']) {
      const r = await call(path, { 'X-Tenant-ID': value });
      expect({ path, status: r.status }).toEqual({ path, status: 403 });
      expect(r.json()).toEqual({ error: 'X-Tenant-ID names the system tenant' });
    }
  });

  it.each(['0', '00'])('X-Impersonate-Tenant %p (the system tenant) is refused: 403', async (value) => {
    for (const path of ['/api/bff/v1/me', '/api/bff/v1/tenant-probe', '/api/platform/health']) {
      const r = await call(path, { 'X-Tenant-ID': '1', 'X-Impersonate-Tenant': value });
      expect({ path, status: r.status }).toEqual({ path, status: 403 });
      expect(r.json()).toEqual({ error: 'X-Impersonate-Tenant names the system tenant' });
    }
    expect((await call('/api/bff/v1/me', { 'X-Impersonate-Tenant': value })).status).toBe(403);
  });

  it('an unknown /api/platform/* path is a 404 under the bypass (every role is held)', async () => {
    expect((await call('/api/platform/no-such-route')).status).toBe(404);
  });

  it('an unknown or inactive header tenant is refused', async () => {
    const unknown = await call('/api/bff/v1/me', { 'X-Tenant-ID': '77' });
    expect(unknown.status).toBe(403);
    expect(unknown.json()).toEqual({ error: 'unknown tenant 77' });
    const inactive = await call('/api/bff/v1/me', { 'X-Tenant-ID': '1', 'X-Impersonate-Tenant': '4' });
    expect(inactive.status).toBe(403);
    expect(inactive.json()).toEqual({ error: 'tenant inactive' });
  });
});

describe('configuration rules for the bypass', () => {
  const load = (overrides: Record<string, string | number | boolean>) => Config.load({ env: {}, overrides });
  const failure = (overrides: Record<string, string | number | boolean>): ConfigError => {
    try {
      load(overrides);
    } catch (err) {
      if (err instanceof ConfigError) return err;
      throw err;
    }
    throw new Error(`no ConfigError for ${JSON.stringify(overrides)}`);
  };

  it('dev profile without an issuer: the bypass is on by default', () => {
    expect(load({}).bool('svc.security.dev-bypass')).toBe(true);
  });

  it('dev profile with an issuer: the bypass is off by default', () => {
    expect(load({ 'svc.oidc.issuer': 'https://idp.example.com/realms/hub' }).bool('svc.security.dev-bypass')).toBe(false);
  });

  it('the prod profile refuses the bypass', () => {
    const err = failure({
      'svc.profile': 'prod', 'svc.security.dev-bypass': true, 'svc.secret.master-key': 'a'.repeat(64), 'svc.oidc.issuer': 'https://idp.example.com',
    });
    expect(err.property).toBe('svc.security.dev-bypass');
    expect(err.message).toMatch(/prod/);
  });

  it('the prod profile without an issuer: the bypass is off, so an issuer is required', () => {
    const err = failure({ 'svc.profile': 'prod', 'svc.secret.master-key': 'a'.repeat(64) });
    expect(err.property).toBe('svc.oidc.issuer');
  });

  it('bypass off requires an issuer (dev profile too)', () => {
    const err = failure({ 'svc.security.dev-bypass': false });
    expect(err.property).toBe('svc.oidc.issuer');
    expect(err.message).toMatch(/required when the dev bypass is off/);
  });

  it('prod with an issuer and no bypass loads', () => {
    const config = load({ 'svc.profile': 'prod', 'svc.secret.master-key': 'a'.repeat(64), 'svc.oidc.issuer': 'https://idp.example.com' });
    expect(config.bool('svc.security.dev-bypass')).toBe(false);
  });

  it('the bypass listens on loopback only', () => {
    expect(failure({ 'svc.http.host': '0.0.0.0' }).property).toBe('svc.http.host');
    expect(load({ 'svc.http.host': '127.0.0.1' }).bool('svc.security.dev-bypass')).toBe(true);
  });

  it('an issuer that is not a URL is refused', () => {
    expect(failure({ 'svc.oidc.issuer': 'not a url' }).property).toBe('svc.oidc.issuer');
  });
});
