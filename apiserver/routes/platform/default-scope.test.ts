import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { startIssuer, type TestIssuer } from '../../../test/harness/tokens.js';
import { client, type Client, devClient, ownerClient, tokenClient } from '../../../test/harness/api-client.js';

/**
 * The caller's default scope through HTTP: a dev-bypass hub (tenant 1, the user from X-User-ID) for
 * the behaviour, and an OIDC hub on the same database for a provisioned user and the platform floor.
 */

let hub: TestHub;
let oidc: TestHub;
let issuer: TestIssuer;
let owner: pg.Client;
let admin: Client;
const T = 1;
const OTHER = 2;
const PATH = '/api/platform/users/me/scope';

beforeAll(async () => {
  hub = await startTestHub();
  issuer = await startIssuer();
  oidc = await startTestHub({ 'svc.oidc.issuer': issuer.issuer, 'svc.oidc.jwks-uri': issuer.jwksUri, 'svc.datasource.url': hub.ownerUrl });
  owner = await ownerClient(hub.ownerUrl);
  await owner.query(`insert into core.tenants (id, code, name) values (${OTHER}, 'other', 'Other')`);
  admin = devClient(hub.url, T);
});

afterAll(async () => {
  await owner?.end();
  await oidc?.stop();
  await hub?.stop();
  await issuer?.close();
});

let seq = 0;
async function newUser(tenant = T, scopes: string[] = []): Promise<number> {
  const c = devClient(hub.url, tenant);
  const r = await c.post(`/api/tenants/${tenant}/users`, { login: `scope-user.${++seq}`, name: 'Scope User' });
  expect(r.status).toBe(201);
  const id = (r.body as { id: number }).id;
  if (scopes.length) expect((await c.put(`/api/tenants/${tenant}/users/${id}/scopes`, { scopes })).status).toBe(200);
  return id;
}

const as = (userId: number | string, tenant = T) => client(hub.url, { 'X-Tenant-ID': String(tenant), 'X-User-ID': String(userId) });

describe('GET and PUT /api/platform/users/me/scope', () => {
  it('none at first; set, read back, cleared with the empty string', async () => {
    const me = as(await newUser());
    expect(await me.get(PATH)).toMatchObject({ status: 200, body: { defaultScope: '' } });
    expect(await me.put(PATH, { defaultScope: 'crm' })).toMatchObject({ status: 200, body: { defaultScope: 'crm' } });
    expect(await me.get(PATH)).toMatchObject({ status: 200, body: { defaultScope: 'crm' } });
    expect(await me.put(PATH, { defaultScope: '' })).toMatchObject({ status: 200, body: { defaultScope: '' } });
    expect(await me.get(PATH)).toMatchObject({ status: 200, body: { defaultScope: '' } });
  });

  it('is the caller\'s own: another user\'s stays as it was', async () => {
    const ann = as(await newUser());
    const bob = as(await newUser());
    await ann.put(PATH, { defaultScope: 'crm' });
    await bob.put(PATH, { defaultScope: 'hr' });
    expect((await ann.get(PATH)).body).toEqual({ defaultScope: 'crm' });
    expect((await bob.get(PATH)).body).toEqual({ defaultScope: 'hr' });
  });

  it('drops surrounding whitespace; whitespace only clears', async () => {
    const me = as(await newUser());
    expect((await me.put(PATH, { defaultScope: '  crm ' })).body).toEqual({ defaultScope: 'crm' });
    expect((await me.put(PATH, { defaultScope: '   ' })).body).toEqual({ defaultScope: '' });
  });

  it.each([
    ['whitespace inside', { defaultScope: 'two words' }, 'defaultScope'],
    ['201 characters', { defaultScope: 'x'.repeat(201) }, 'defaultScope'],
    ['no defaultScope', {}, 'defaultScope'],
    ['a number', { defaultScope: 3 }, 'defaultScope'],
    ['an unknown field', { defaultScope: 'crm', extra: true }, 'extra'],
  ])('%s: 400 naming the field', async (_label, body, field) => {
    const me = as(await newUser());
    const r = await me.put(PATH, body);
    expect(r.status).toBe(400);
    expect((r.body as { field?: string }).field).toBe(field);
    expect((await me.get(PATH)).body).toEqual({ defaultScope: '' });
  });

  it('a scope-bound user may choose a granted scope or all, and clear it; anything else: 403 scope not granted', async () => {
    const me = as(await newUser(T, ['crm', 'sales']));
    expect((await me.put(PATH, { defaultScope: 'sales' })).body).toEqual({ defaultScope: 'sales' });
    const refused = await me.put(PATH, { defaultScope: 'hr' });
    expect({ status: refused.status, body: refused.body }).toEqual({ status: 403, body: { error: 'scope not granted' } });
    expect((await me.get(PATH)).body).toEqual({ defaultScope: 'sales' });
    expect((await me.put(PATH, { defaultScope: 'all' })).body).toEqual({ defaultScope: 'all' });
    expect((await me.put(PATH, { defaultScope: '' })).body).toEqual({ defaultScope: '' });
  });

  it('an unbound user may choose any scope name', async () => {
    const me = as(await newUser());
    expect((await me.put(PATH, { defaultScope: 'anything-at-all' })).status).toBe(200);
  });
});

describe('no hub user behind the call: 404', () => {
  const expect404 = async (c: Client, id: string) => {
    for (const r of [await c.get(PATH), await c.put(PATH, { defaultScope: 'crm' })]) {
      expect({ status: r.status, body: r.body }).toEqual({ status: 404, body: { error: `no user record on this hub for user_id ${id}` } });
    }
  };

  it('an id with no row', async () => {
    await expect404(as(987654), '987654');
  });

  it('an id that cannot be a user id', async () => {
    await expect404(as('alice'), 'alice');
    await expect404(as('99999999999999999999'), '99999999999999999999');
  });

  it('a user of another tenant (row-level security)', async () => {
    const theirs = await newUser(OTHER);
    await expect404(as(theirs, T), String(theirs));
    // Theirs is untouched, and reachable from their own tenant.
    expect((await as(theirs, OTHER).get(PATH)).body).toEqual({ defaultScope: '' });
  });

  it('no user named at all', async () => {
    await expect404(admin, '(none)');
  });

  it('no tenant: 401 no tenant in security context', async () => {
    const r = await client(hub.url, { 'X-User-ID': '1' }).get(PATH);
    expect({ status: r.status, body: r.body }).toEqual({ status: 401, body: { error: 'no tenant in security context' } });
  });
});

describe('with tokens', () => {
  const token = (roles: string[], subject: string) => issuer.mint({ tenant_id: T, realm_access: { roles } }, { subject });

  it('the provisioned user of the token', async () => {
    const me = tokenClient(oidc.url, await token(['svc_integrator'], 'scope-jit'));
    expect((await me.get(PATH)).body).toEqual({ defaultScope: '' });
    expect((await me.put(PATH, { defaultScope: 'crm' })).body).toEqual({ defaultScope: 'crm' });
    const { rows } = await owner.query('select default_scope from core.users where subject = $1', ['scope-jit']);
    expect(rows).toEqual([{ default_scope: 'crm' }]);
  });

  it('the platform floor: 401 plain text without a token, 403 missing role svc_integrator without the role', async () => {
    const anonymous = await fetch(`${oidc.url}${PATH}`);
    expect({ status: anonymous.status, text: await anonymous.text() }).toEqual({ status: 401, text: 'authentication required' });
    const user = tokenClient(oidc.url, await token(['svc_user'], 'scope-user-only'));
    for (const r of [await user.get(PATH), await user.put(PATH, { defaultScope: 'crm' })]) {
      expect({ status: r.status, text: r.text }).toEqual({ status: 403, text: 'missing role svc_integrator' });
    }
  });
});

describe('services.admin.users.scopeAccess', () => {
  it('an unbound user: not bound, no grants, the default', async () => {
    const id = await newUser();
    await as(id).put(PATH, { defaultScope: 'crm' });
    expect(await hub.services.admin.users.scopeAccess(T, { userId: String(id) })).toEqual({ bound: false, granted: [], defaultScope: 'crm' });
  });

  it('a scope-bound user: the active grants, sorted', async () => {
    const id = await newUser(T, ['sales', 'crm']);
    await as(id).put(PATH, { defaultScope: 'sales' });
    expect(await hub.services.admin.users.scopeAccess(T, { userId: String(id) })).toEqual({ bound: true, granted: ['crm', 'sales'], defaultScope: 'sales' });
  });

  it('no hub user: unbound with no default (grants belong to users)', async () => {
    expect(await hub.services.admin.users.scopeAccess(T, { userId: undefined })).toEqual({ bound: false, granted: [], defaultScope: '' });
    expect(await hub.services.admin.users.scopeAccess(T, { userId: '987654' })).toEqual({ bound: false, granted: [], defaultScope: '' });
  });
});

describe('OpenAPI', () => {
  it('documents both operations with their 404', async () => {
    const doc = (await (await fetch(`${hub.url}/q/openapi`, { headers: { Accept: 'application/json' } })).json()) as {
      paths: Record<string, Record<string, { operationId: string; responses: Record<string, unknown> }>>;
    };
    const ops = doc.paths[PATH]!;
    expect(ops.get!.operationId).toBe('getMyDefaultScope');
    expect(ops.put!.operationId).toBe('setMyDefaultScope');
    expect(Object.keys(ops.put!.responses).sort()).toEqual(['200', '400', '401', '403', '404', '415']);
  });
});
