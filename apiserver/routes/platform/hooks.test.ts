import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { Catalog, loadCatalog } from '../../../src/events/catalog.js';
import { packageRoot } from '../../../src/package-root.js';
import { HookRunner } from '../../../src/platform/hooks/runner.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { startIssuer, type TestIssuer } from '../../../test/harness/tokens.js';

/**
 * Hooks through HTTP with real tokens. The core module declares no hooks, so after the first test
 * the hub's runner is replaced by one over core plus a test-only module
 * (src/platform/hooks/__fixtures__/modules); the override cache TTL is shortened through config.
 */

const TTL = '1s';
let issuer: TestIssuer;
let hub: TestHub;
let owner: pg.Client;
let globex: number;

beforeAll(async () => {
  issuer = await startIssuer();
  hub = await startTestHub({ 'svc.oidc.issuer': issuer.issuer, 'svc.oidc.jwks-uri': issuer.jwksUri, 'svc.hooks.cache-ttl': TTL });
  owner = new pg.Client({ connectionString: hub.ownerUrl });
  await owner.connect();
  globex = (await owner.query(`insert into core.tenants (code, name) values ('globex', 'Globex') returning id`)).rows[0].id;
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
  await issuer?.close();
});

const ADMIN = ['svc_integrator', 'svc_admin'];
const SUPER = ['svc_integrator', 'svc_superadmin'];

async function call(method: string, path: string, roles: string[] | null = ADMIN, tenant = 1) {
  const headers: Record<string, string> = {};
  if (roles) {
    headers.Authorization = `Bearer ${await issuer.mint({ realm_access: { roles }, tenant_id: tenant, preferred_username: 'ops', sub: `ops-${tenant}` })}`;
  }
  const res = await fetch(`${hub.url}${path}`, { method, headers });
  const text = await res.text();
  return { status: res.status, text, json: () => JSON.parse(text) as unknown, headers: res.headers };
}

const hook = (id: string, priority: number, target: string, events: string[], enabled: boolean) => ({ id, module: 'hooks-fixture', target, events, priority, enabled });
const DEFAULTS = [
  hook('org-watch', 1, 'test.record', ['org.*'], true),
  hook('early-bird', 5, 'test.record', ['platform.secret.created'], false),
  hook('audit-trail', 10, 'test.record', ['platform.secret.*'], true),
  hook('shaky', 15, 'test.fail', ['platform.secret.created'], true),
  hook('welcome', 20, 'test.record', ['platform.secret.created'], true),
  hook('orphan', 30, 'test.missing', ['platform.secret.created'], true),
];

const enabledOf = async (tenant = 1, roles = ADMIN) =>
  Object.fromEntries(((await call('GET', '/api/platform/hooks', roles, tenant)).json() as Array<{ id: string; enabled: boolean }>).map((h) => [h.id, h.enabled]));

describe('with the core module only', () => {
  it('GET lists no hooks and a toggle names an unknown hook: 404', async () => {
    const list = await call('GET', '/api/platform/hooks');
    expect(list.status).toBe(200);
    expect(list.json()).toEqual([]);
    const toggle = await call('POST', '/api/platform/hooks/welcome/toggle?tenantId=1');
    expect(toggle.status).toBe(404);
    expect(toggle.json()).toEqual({ error: 'hook welcome not found' });
  });
});

describe('with declared hooks', () => {
  const ran: string[] = [];

  beforeAll(() => {
    const modules = [...loadCatalog().modules, ...loadCatalog(join(packageRoot(), 'src/platform/hooks/__fixtures__/modules')).modules];
    const runner = new HookRunner(new Catalog(modules), hub.services.db, { ttlMs: hub.config.duration('svc.hooks.cache-ttl') });
    runner.register('test.record', (_event, h) => {
      ran.push(h.id);
    });
    runner.register('test.fail', () => {
      throw new Error('boom');
    });
    hub.services.hooks = runner;
  });

  describe('refusals', () => {
    it('no token: 401 plain text', async () => {
      for (const [method, path] of [['GET', '/api/platform/hooks'], ['POST', '/api/platform/hooks/welcome/toggle']] as const) {
        const res = await call(method, path, null);
        expect(res.status).toBe(401);
        expect(res.text).toBe('authentication required');
        expect(res.headers.get('www-authenticate')).toBe('Bearer');
      }
    });

    it('without svc_integrator: 403 plain text `missing role svc_integrator`', async () => {
      for (const [method, path] of [['GET', '/api/platform/hooks'], ['POST', '/api/platform/hooks/welcome/toggle']] as const) {
        const res = await call(method, path, ['svc_admin', 'svc_superadmin']);
        expect(res.status).toBe(403);
        expect(res.text).toBe('missing role svc_integrator');
      }
    });

    it('svc_integrator without svc_admin: GET and toggle are empty-body 403s', async () => {
      for (const [method, path] of [['GET', '/api/platform/hooks'], ['POST', '/api/platform/hooks/welcome/toggle']] as const) {
        const res = await call(method, path, ['svc_integrator', 'svc_user']);
        expect(res.status).toBe(403);
        expect(res.text).toBe('');
      }
      // A superadmin is not an admin for the listing.
      const superList = await call('GET', '/api/platform/hooks', SUPER);
      expect(superList.status).toBe(403);
      expect(superList.text).toBe('');
    });

    it('an svc_admin toggling another tenant: empty-body 403, whether or not the hook exists; nothing recorded', async () => {
      for (const path of [`/api/platform/hooks/welcome/toggle?tenantId=${globex}`, `/api/platform/hooks/nope/toggle?tenantId=${globex}`, '/api/platform/hooks/welcome/toggle?tenantId=999999']) {
        const res = await call('POST', path, ['svc_integrator', 'svc_admin', 'svc_user']);
        expect(res.status).toBe(403);
        expect(res.text).toBe('');
      }
      expect((await owner.query('select * from platform.hook_overrides')).rowCount).toBe(0);
    });
  });

  it('GET lists every hook in run order with the declared defaults', async () => {
    const res = await call('GET', '/api/platform/hooks');
    expect(res.status).toBe(200);
    expect(res.json()).toEqual(DEFAULTS);
  });

  it('toggle without enabled flips the caller tenant\'s flag: 200 with the new effective state', async () => {
    const res = await call('POST', '/api/platform/hooks/welcome/toggle');
    expect(res.status).toBe(200);
    expect(res.json()).toEqual({ ...hook('welcome', 20, 'test.record', ['platform.secret.created'], false), tenantId: 1 });
    expect((await enabledOf()).welcome).toBe(false);
    const back = await call('POST', '/api/platform/hooks/welcome/toggle?tenantId=1');
    expect(back.status).toBe(200);
    expect((back.json() as { enabled: boolean }).enabled).toBe(true);
    const early = await call('POST', '/api/platform/hooks/early-bird/toggle');
    expect((early.json() as { enabled: boolean }).enabled).toBe(true);
    expect(await enabledOf()).toMatchObject({ 'early-bird': true, welcome: true });
    const { rows } = await owner.query('select tenant_id, hook_id, enabled, updated_by from platform.hook_overrides order by hook_id');
    expect(rows).toEqual([
      { tenant_id: 1, hook_id: 'early-bird', enabled: true, updated_by: 'ops' },
      { tenant_id: 1, hook_id: 'welcome', enabled: true, updated_by: 'ops' },
    ]);
  });

  it('toggle with enabled=true|false sets the flag (idempotent)', async () => {
    for (const [query, expected] of [['enabled=false', false], ['enabled=false', false], ['enabled=true', true], ['enabled=false', false]] as const) {
      const res = await call('POST', `/api/platform/hooks/audit-trail/toggle?${query}`);
      expect(res.status).toBe(200);
      expect((res.json() as { enabled: boolean }).enabled).toBe(expected);
    }
    expect((await enabledOf())['audit-trail']).toBe(false);
    await call('POST', '/api/platform/hooks/audit-trail/toggle?enabled=true');
  });

  it('bad queries are 400s naming the field; an unknown hook is a 404', async () => {
    const bad = await call('POST', '/api/platform/hooks/welcome/toggle?enabled=maybe');
    expect(bad.status).toBe(400);
    expect(bad.json()).toEqual({ error: 'enabled must be a boolean', field: 'enabled' });
    const tenant = await call('POST', '/api/platform/hooks/welcome/toggle?tenantId=abc');
    expect(tenant.status).toBe(400);
    expect((tenant.json() as { field: string }).field).toBe('tenantId');
    const unknown = await call('POST', '/api/platform/hooks/nope/toggle?tenantId=1');
    expect(unknown.status).toBe(404);
    expect(unknown.json()).toEqual({ error: 'hook nope not found' });
  });

  it('an svc_superadmin may toggle for any tenant; an unknown tenant is a 404', async () => {
    const res = await call('POST', `/api/platform/hooks/orphan/toggle?tenantId=${globex}`, SUPER);
    expect(res.status).toBe(200);
    expect(res.json()).toEqual({ ...hook('orphan', 30, 'test.missing', ['platform.secret.created'], false), tenantId: globex });
    expect((await enabledOf(globex)).orphan).toBe(false);
    expect((await enabledOf(1)).orphan).toBe(true);
    const withAdmin = await call('POST', `/api/platform/hooks/orphan/toggle?tenantId=${globex}&enabled=true`, [...SUPER, 'svc_admin']);
    expect((withAdmin.json() as { enabled: boolean }).enabled).toBe(true);
    const own = await call('POST', '/api/platform/hooks/orphan/toggle?enabled=true', SUPER);
    expect(own.json()).toMatchObject({ enabled: true, tenantId: 1 });
    const missing = await call('POST', '/api/platform/hooks/orphan/toggle?tenantId=999999', SUPER);
    expect(missing.status).toBe(404);
    expect(missing.json()).toEqual({ error: 'tenant 999999 not found' });
    // The system tenant 0 is a row of the registry, but no caller acts for it: a 404 too, and no override is written.
    const system = await call('POST', '/api/platform/hooks/orphan/toggle?tenantId=0&enabled=false', SUPER);
    expect({ status: system.status, body: system.json() }).toEqual({ status: 404, body: { error: 'tenant 0 not found' } });
    expect((await owner.query('select count(*)::int as n from platform.hook_overrides where tenant_id = 0')).rows[0].n).toBe(0);
    // A tenant id past what a JSON number holds exactly is a 400 naming tenantId, for either role: it was
    // rounded (a 404 naming another tenant) or, past a bigint, reached the database as out of range.
    for (const big of ['9007199254740993', '9223372036854775807', '99999999999999999999']) {
      for (const roles of [SUPER, undefined]) {
        const res = await call('POST', `/api/platform/hooks/orphan/toggle?tenantId=${big}`, roles);
        expect({ status: res.status, body: res.json() }).toEqual({ status: 400, body: { error: 'tenantId must be at most 9007199254740991', field: 'tenantId' } });
      }
    }
    expect((await call('POST', '/api/platform/hooks/orphan/toggle?tenantId=9007199254740991', SUPER)).json()).toEqual({ error: 'tenant 9007199254740991 not found' });
  });

  it('the runner runs enabled hooks in priority order and skips disabled ones, per tenant', async () => {
    await owner.query('delete from platform.hook_overrides');
    hub.services.hooks.invalidate();
    ran.length = 0;
    const outcomes = await hub.services.hooks.run({ tenantId: 1, type: 'platform.secret.created', payload: {} });
    expect(outcomes.map((o) => [o.id, o.status])).toEqual([
      ['early-bird', 'disabled'],
      ['audit-trail', 'ran'],
      ['shaky', 'failed'],
      ['welcome', 'ran'],
      ['orphan', 'no-handler'],
    ]);
    expect(ran).toEqual(['audit-trail', 'welcome']);

    // Toggled through the API: honoured at once by this process.
    await call('POST', '/api/platform/hooks/early-bird/toggle?enabled=true');
    await call('POST', '/api/platform/hooks/audit-trail/toggle?enabled=false');
    ran.length = 0;
    await hub.services.hooks.run({ tenantId: 1, type: 'platform.secret.created', payload: {} });
    expect(ran).toEqual(['early-bird', 'welcome']);
    ran.length = 0;
    await hub.services.hooks.run({ tenantId: globex, type: 'platform.secret.created', payload: {} });
    expect(ran).toEqual(['audit-trail', 'welcome']);
  });

  it('an override written by another process is honoured once the cache TTL has passed, not before', async () => {
    const ttl = hub.config.duration('svc.hooks.cache-ttl');
    hub.services.hooks.invalidate(globex);
    ran.length = 0;
    const loadedAfter = Date.now(); // the cache entry expires no sooner than loadedAfter + ttl
    await hub.services.hooks.run({ tenantId: globex, type: 'platform.secret.rotated', payload: {} });
    expect(ran).toEqual(['audit-trail']);
    await owner.query(`insert into platform.hook_overrides (tenant_id, hook_id, enabled) values ($1, 'audit-trail', false)`, [globex]);
    ran.length = 0;
    let at = Date.now();
    await hub.services.hooks.run({ tenantId: globex, type: 'platform.secret.rotated', payload: {} });
    if (at - loadedAfter < ttl) expect(ran).toEqual(['audit-trail']);
    at = Date.now();
    const listed = (await enabledOf(globex))['audit-trail'];
    if (at - loadedAfter < ttl) expect(listed).toBe(true);
    await new Promise((r) => setTimeout(r, Math.max(0, loadedAfter + ttl - Date.now()) + 50));
    ran.length = 0;
    await hub.services.hooks.run({ tenantId: globex, type: 'platform.secret.rotated', payload: {} });
    expect(ran).toEqual([]);
    expect((await enabledOf(globex))['audit-trail']).toBe(false);
  });
});
