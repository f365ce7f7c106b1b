import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { startIssuer, type TestIssuer } from '../../../test/harness/tokens.js';
import { type Client, devClient, EMPTY_403, ISO, ownerClient, shape, tokenClient } from '../../../test/harness/api-client.js';

/**
 * Users and scopes through HTTP: a dev-bypass hub for the behaviour (tenant 1 calls, tenant 2 is the
 * other tenant), and an OIDC hub on the same database for locking end to end and the role gates.
 */

let hub: TestHub;
let oidc: TestHub;
let issuer: TestIssuer;
let owner: pg.Client;
let api: Client;
let other: Client;
const T = 1;
const OTHER = 2;

type User = {
  id: number; tenantId: number; login: string; name: string | null; email: string | null; description: string | null;
  issuer: string | null; subject: string | null; locked: boolean; active: boolean; lastLoginAt: string | null; createdAt: string; updatedAt: string;
};

beforeAll(async () => {
  hub = await startTestHub();
  issuer = await startIssuer();
  oidc = await startTestHub({ 'svc.oidc.issuer': issuer.issuer, 'svc.oidc.jwks-uri': issuer.jwksUri, 'svc.datasource.url': hub.ownerUrl });
  owner = await ownerClient(hub.ownerUrl);
  await owner.query(`insert into core.tenants (id, code, name) values (${OTHER}, 'other', 'Other')`);
  api = devClient(hub.url, T);
  other = devClient(hub.url, OTHER);
});

afterAll(async () => {
  await owner?.end();
  await oidc?.stop();
  await hub?.stop();
  await issuer?.close();
});

let seq = 0;
const login = (prefix: string) => `${prefix}.${++seq}`;
const path = (rest = '') => `/api/tenants/${T}/users${rest}`;

async function create(c: Client, body: Record<string, unknown>, tid = c === other ? OTHER : T): Promise<User> {
  const r = await c.post(`/api/tenants/${tid}/users`, body);
  expect(r.status).toBe(201);
  return r.body as User;
}

describe('POST /api/tenants/{tid}/users', () => {
  it('creates a user: 201 with the record', async () => {
    const r = await api.post(path(), { login: 'ann', name: 'Ann Example', email: 'ann@example.com', description: 'Sales lead' });
    expect(r.status).toBe(201);
    expect(r.body).toEqual({
      id: expect.any(Number), tenantId: T, login: 'ann', name: 'Ann Example', email: 'ann@example.com', description: 'Sales lead',
      issuer: null, subject: null, locked: false, active: true, lastLoginAt: null, createdAt: expect.stringMatching(ISO), updatedAt: expect.stringMatching(ISO),
    });
    const { rows } = await owner.query('select tenant_id, login from core.users where id = $1', [(r.body as User).id]);
    expect(rows).toEqual([{ tenant_id: T, login: 'ann' }]);
  });

  it('email and description are optional', async () => {
    const u = await create(api, { login: login('plain'), name: 'Plain' });
    expect(u).toMatchObject({ email: null, description: null });
  });

  it('a duplicate login in the tenant is a 409; the same login in another tenant is fine', async () => {
    const l = login('dup');
    await create(api, { login: l, name: 'First' });
    const r = await api.post(path(), { login: l, name: 'Second' });
    expect(r.status).toBe(409);
    expect(r.body).toEqual({ error: `login ${l} is already taken`, field: 'login' });
    expect((await owner.query('select name from core.users where login = $1 and tenant_id = $2', [l, T])).rows).toEqual([{ name: 'First' }]);
    expect((await create(other, { login: l, name: 'Elsewhere' })).tenantId).toBe(OTHER);
  });

  it('stores no password: the field is refused as unknown', async () => {
    const l = login('pw');
    const r = await api.post(path(), { login: l, name: 'Pw', password: 'hunter2' });
    expect(r.status).toBe(400);
    expect(r.body).toEqual({ error: 'password is not a known field', field: 'password' });
    expect((await owner.query('select 1 from core.users where login = $1', [l])).rowCount).toBe(0);
  });

  it('validates the body', async () => {
    expect((await api.post(path(), { name: 'No login' })).body).toEqual({ error: 'login is required', field: 'login' });
    expect((await api.post(path(), { login: login('x') })).body).toEqual({ error: 'name is required', field: 'name' });
    expect((await api.post(path(), { login: login('x'), name: 'X', email: 'not-an-email' })).body).toMatchObject({ field: 'email' });
    expect((await api.post(path(), { login: login('x'), name: 'X', locked: true })).body).toEqual({ error: 'locked is not a known field', field: 'locked' });
    expect((await api.post(path(), { login: ' padded ', name: 'X' })).body).toEqual({ error: 'login must not start or end with whitespace', field: 'login' });
    expect((await api.post(path(), { login: login('x'), name: ' ' })).body).toEqual({ error: 'name must not be blank', field: 'name' });
  });
});

describe('GET /api/tenants/{tid}/users[/{id}]', () => {
  it('lists the active users of the tenant only, by id', async () => {
    const a = await create(api, { login: login('list'), name: 'A' });
    const gone = await create(api, { login: login('list'), name: 'Gone' });
    const theirs = await create(other, { login: login('list'), name: 'Theirs' });
    expect((await api.del(path(`/${gone.id}`))).status).toBe(204);
    const r = await api.get(path());
    expect(r.status).toBe(200);
    const list = r.body as User[];
    const ids = list.map((u) => u.id);
    expect(ids).toContain(a.id);
    expect(ids).not.toContain(gone.id);
    expect(ids).not.toContain(theirs.id);
    expect(ids).toEqual([...ids].sort((x, y) => x - y));
    expect(list.every((u) => u.tenantId === T && u.active)).toBe(true);
    expect(list.find((u) => u.id === a.id)).toEqual(a);
  });

  it('gets one; 404 when unknown or of another tenant', async () => {
    const a = await create(api, { login: login('get'), name: 'Get' });
    expect((await api.get(path(`/${a.id}`))).body).toEqual(a);
    const theirs = await create(other, { login: login('get'), name: 'Theirs' });
    const r = await api.get(path(`/${theirs.id}`));
    expect(r.status).toBe(404);
    expect(r.body).toEqual({ error: `user ${theirs.id} not found` });
    expect((await api.get(path('/987654'))).status).toBe(404);
  });

  it('another tenant\'s {tid} is an empty 403 on every user path', async () => {
    const theirs = await create(other, { login: login('tid'), name: 'Theirs' });
    const base = `/api/tenants/${OTHER}/users`;
    expect(shape(await api.get(base))).toEqual(EMPTY_403);
    expect(shape(await api.get(`${base}/${theirs.id}`))).toEqual(EMPTY_403);
    expect(shape(await api.post(base, { login: login('x'), name: 'X' }))).toEqual(EMPTY_403);
    expect(shape(await api.put(`${base}/${theirs.id}`, { locked: true }))).toEqual(EMPTY_403);
    expect(shape(await api.post(`${base}/${theirs.id}/unlock`))).toEqual(EMPTY_403);
    expect(shape(await api.del(`${base}/${theirs.id}`))).toEqual(EMPTY_403);
    expect(shape(await api.put(`${base}/${theirs.id}/scopes`, { scopes: [] }))).toEqual(EMPTY_403);
    expect((await owner.query('select locked, active from core.users where id = $1', [theirs.id])).rows).toEqual([{ locked: false, active: true }]);
  });
});

describe('PUT, unlock and DELETE', () => {
  it('updates the profile, only the fields present; null clears email and description', async () => {
    const u = await create(api, { login: login('upd'), name: 'Before', email: 'b@example.com', description: 'old' });
    let r = await api.put(path(`/${u.id}`), { name: 'After' });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ ...u, name: 'After', updatedAt: expect.stringMatching(ISO) });
    r = await api.put(path(`/${u.id}`), { email: null, description: 'new' });
    expect(r.body).toMatchObject({ name: 'After', email: null, description: 'new', login: u.login });
  });

  it('the login cannot be changed and a password cannot be set', async () => {
    const u = await create(api, { login: login('fixed'), name: 'Fixed' });
    expect((await api.put(path(`/${u.id}`), { login: 'other' })).body).toEqual({ error: 'login is not a known field', field: 'login' });
    expect((await api.put(path(`/${u.id}`), { password: 'x' })).body).toEqual({ error: 'password is not a known field', field: 'password' });
    expect((await api.put(path(`/${u.id}`), {})).status).toBe(400);
  });

  it('locked: true locks; POST …/unlock unlocks; locked: false is refused', async () => {
    const u = await create(api, { login: login('lock'), name: 'Lock' });
    let r = await api.put(path(`/${u.id}`), { locked: true });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ id: u.id, locked: true, active: true });
    r = await api.put(path(`/${u.id}`), { locked: false });
    expect(r.status).toBe(400);
    expect(r.body).toEqual({ error: 'locked can only be set to true here', field: 'locked', hint: 'unlock with POST /api/tenants/{tid}/users/{id}/unlock' });
    expect((await owner.query('select locked from core.users where id = $1', [u.id])).rows).toEqual([{ locked: true }]);
    r = await api.post(path(`/${u.id}/unlock`));
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ id: u.id, locked: false });
    r = await api.post(path(`/${u.id}/unlock`));
    expect(r.status).toBe(200);
    expect((r.body as User).locked).toBe(false);
  });

  it('deactivates: 204, omitted from the list, the row stays, and the user can no longer be changed', async () => {
    const u = await create(api, { login: login('del'), name: 'Del' });
    const r = await api.del(path(`/${u.id}`));
    expect(r.status).toBe(204);
    expect(r.text).toBe('');
    expect(((await api.get(path())).body as User[]).map((x) => x.id)).not.toContain(u.id);
    expect((await api.get(path(`/${u.id}`))).body).toMatchObject({ id: u.id, active: false });
    expect((await owner.query('select login, active from core.users where id = $1', [u.id])).rows).toEqual([{ login: u.login, active: false }]);
    expect((await api.del(path(`/${u.id}`))).status).toBe(204);
    const put = await api.put(path(`/${u.id}`), { name: 'Back' });
    expect(put.status).toBe(409);
    expect(put.body).toEqual({ error: `user ${u.id} is deactivated` });
    expect((await api.post(path(`/${u.id}/unlock`))).status).toBe(409);
    expect((await api.post(path(), { login: u.login, name: 'Reuse' })).status).toBe(409);
  });

  it('ids of another tenant are 404s and nothing changes', async () => {
    const theirs = await create(other, { login: login('foreign'), name: 'Theirs' });
    expect((await api.put(path(`/${theirs.id}`), { locked: true })).status).toBe(404);
    expect((await api.post(path(`/${theirs.id}/unlock`))).status).toBe(404);
    expect((await api.del(path(`/${theirs.id}`))).status).toBe(404);
    expect((await owner.query('select locked, active from core.users where id = $1', [theirs.id])).rows).toEqual([{ locked: false, active: true }]);
  });
});

describe('scopes', () => {
  it('PUT stores the list and answers it deduplicated and sorted; GET reads it back', async () => {
    const u = await create(api, { login: login('scoped'), name: 'Scoped' });
    expect((await api.get(path(`/${u.id}/scopes`))).body).toEqual({ scopes: [] });
    let r = await api.put(path(`/${u.id}/scopes`), { scopes: ['sales', 'hr', 'sales'] });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ scopes: ['hr', 'sales'] });
    expect((await api.get(path(`/${u.id}/scopes`))).body).toEqual({ scopes: ['hr', 'sales'] });
    r = await api.put(path(`/${u.id}/scopes`), { scopes: ['finance', 'sales'] });
    expect(r.body).toEqual({ scopes: ['finance', 'sales'] });
    // Replaced scopes keep their rows, switched off.
    const rows = await owner.query('select scope, active, tenant_id from core.user_scopes where user_id = $1 order by scope', [u.id]);
    expect(rows.rows).toEqual([
      { scope: 'finance', active: true, tenant_id: T },
      { scope: 'hr', active: false, tenant_id: T },
      { scope: 'sales', active: true, tenant_id: T },
    ]);
    r = await api.put(path(`/${u.id}/scopes`), { scopes: [] });
    expect(r.body).toEqual({ scopes: [] });
    r = await api.put(path(`/${u.id}/scopes`), { scopes: ['hr'] });
    expect(r.body).toEqual({ scopes: ['hr'] });
  });

  it('the user record itself stays as contracted (no scopes field)', async () => {
    const u = await create(api, { login: login('rec'), name: 'Rec' });
    await api.put(path(`/${u.id}/scopes`), { scopes: ['x'] });
    expect(Object.keys((await api.get(path(`/${u.id}`))).body as User).sort()).toEqual(
      ['active', 'createdAt', 'description', 'email', 'id', 'issuer', 'lastLoginAt', 'locked', 'login', 'name', 'subject', 'tenantId', 'updatedAt'],
    );
  });

  it('validates the list', async () => {
    const u = await create(api, { login: login('badscope'), name: 'Bad' });
    let r = await api.put(path(`/${u.id}/scopes`), { scopes: ['ok', 'has space'] });
    expect(r.status).toBe(400);
    expect(r.body).toEqual({ error: 'scopes[1] must be a non-blank scope name without whitespace', field: 'scopes[1]' });
    r = await api.put(path(`/${u.id}/scopes`), { scopes: ['ok', ''] });
    expect(r.status).toBe(400);
    expect((r.body as { field: string }).field).toBe('scopes[1]');
    expect((await api.put(path(`/${u.id}/scopes`), {})).body).toEqual({ error: 'scopes is required', field: 'scopes' });
    expect((await api.put(path(`/${u.id}/scopes`), { scopes: 'sales' })).status).toBe(400);
    expect((await owner.query('select 1 from core.user_scopes where user_id = $1', [u.id])).rowCount).toBe(0);
  });

  it('unknown or foreign users are 404s; deactivated users 409', async () => {
    const theirs = await create(other, { login: login('sc-foreign'), name: 'Theirs' });
    expect((await api.put(path(`/${theirs.id}/scopes`), { scopes: ['x'] })).status).toBe(404);
    expect((await api.get(path(`/${theirs.id}/scopes`))).status).toBe(404);
    expect((await api.put(path('/987654/scopes'), { scopes: ['x'] })).status).toBe(404);
    expect((await owner.query('select 1 from core.user_scopes where user_id = $1', [theirs.id])).rowCount).toBe(0);
    const gone = await create(api, { login: login('sc-gone'), name: 'Gone' });
    await api.del(path(`/${gone.id}`));
    expect((await api.put(path(`/${gone.id}/scopes`), { scopes: ['x'] })).status).toBe(409);
  });
});

describe('with real tokens', () => {
  const TT = 5;
  let subjects = 0;
  const mint = (roles: string[], claims: Record<string, unknown> = {}) =>
    issuer.mint({ tenant_id: TT, realm_access: { roles }, ...claims }, { subject: `users-${++subjects}` });
  let admin: Client;

  beforeAll(async () => {
    await owner.query(`insert into core.tenants (id, code, name) values (${TT}, 'tokens', 'Tokens')`);
    admin = tokenClient(oidc.url, await mint(['svc_admin']));
  });

  it('a locked or deactivated user is refused from the next call; unlocking lets them back in', async () => {
    const base = `/api/tenants/${TT}/users`;
    const created = await admin.post(base, { login: 'lou', name: 'Lou' });
    expect(created.status).toBe(201);
    const lou = created.body as User;
    const asLou = tokenClient(oidc.url, await mint(['svc_user'], { user_id: lou.id }));
    const me = await asLou.get('/api/bff/v1/me');
    expect(me.status).toBe(200);
    expect(me.body).toMatchObject({ user: { id: String(lou.id), login: 'lou' } });

    expect((await admin.put(`${base}/${lou.id}`, { locked: true })).status).toBe(200);
    let r = await asLou.get('/api/bff/v1/me');
    expect(r.status).toBe(403);
    expect(r.body).toEqual({ error: 'account locked' });

    expect((await admin.post(`${base}/${lou.id}/unlock`)).status).toBe(200);
    expect((await asLou.get('/api/bff/v1/me')).status).toBe(200);

    expect((await admin.del(`${base}/${lou.id}`)).status).toBe(204);
    r = await asLou.get('/api/bff/v1/me');
    expect(r.status).toBe(403);
    expect(r.body).toEqual({ error: 'account inactive' });
  });

  it('a caller cannot lock or deactivate their own account (409), another svc_admin can; nor deactivate their own tenant', async () => {
    const base = `/api/tenants/${TT}/users`;
    const self = tokenClient(oidc.url, await mint(['svc_admin', 'svc_user']));
    const me = await self.get('/api/bff/v1/me');
    expect(me.status).toBe(200);
    const myId = (me.body as { user: { id: string } }).user.id;
    for (const [r, what] of [
      [await self.del(`${base}/${myId}`), 'deactivate'],
      [await self.put(`${base}/${myId}`, { locked: true }), 'lock'],
    ] as const) {
      expect(r.status).toBe(409);
      expect(r.body).toEqual({ error: `you cannot ${what} your own account; another svc_admin of the tenant can` });
    }
    // A superadmin naming their own tenant in acting_as_tenant is still themselves there, not an impersonator.
    const acting = tokenClient(oidc.url, await mint(['svc_admin', 'svc_superadmin', 'svc_user'], { acting_as_tenant: TT }));
    const actingMe = await acting.get('/api/bff/v1/me');
    expect(actingMe.body).toMatchObject({ tenant: { id: TT, homeId: TT, impersonating: false } });
    const actingId = (actingMe.body as { user: { id: string } }).user.id;
    const locking = await acting.put(`${base}/${actingId}`, { locked: true });
    expect({ status: locking.status, body: locking.body }).toEqual({ status: 409, body: { error: 'you cannot lock your own account; another svc_admin of the tenant can' } });
    // Still in, and the profile of one's own account can still be edited.
    expect((await self.put(`${base}/${myId}`, { description: 'me' })).status).toBe(200);
    expect((await self.get('/api/bff/v1/me')).status).toBe(200);
    // Another administrator of the tenant can.
    const second = tokenClient(oidc.url, await mint(['svc_admin']));
    expect((await second.put(`${base}/${myId}`, { locked: true })).status).toBe(200);
    expect((await self.get('/api/bff/v1/me')).body).toEqual({ error: 'account locked' });
    expect((await second.post(`${base}/${myId}/unlock`)).status).toBe(200);
    expect((await self.get('/api/bff/v1/me')).status).toBe(200);
    // A superadmin's own tenant.
    const superadmin = tokenClient(oidc.url, await mint(['svc_superadmin']));
    const own = await superadmin.del(`/api/tenants/${TT}`);
    expect(own.status).toBe(409);
    expect(own.body).toEqual({ error: 'you cannot deactivate your own tenant; a svc_superadmin of another tenant can' });
    expect((await owner.query(`select active from core.tenants where id = ${TT}`)).rows[0]).toEqual({ active: true });
  });

  it('svc_integrator alone gets an empty 403 on the tenant administration paths', async () => {
    const c = tokenClient(oidc.url, await mint(['svc_integrator', 'svc_user']));
    for (const p of ['orgs', 'orgs/tree', 'users', 'roles']) expect(shape(await c.get(`/api/tenants/${TT}/${p}`))).toEqual(EMPTY_403);
    expect(shape(await c.post(`/api/tenants/${TT}/orgs`, { code: 'nope', name: 'Nope' }))).toEqual(EMPTY_403);
    expect(shape(await c.post(`/api/tenants/${TT}/users`, { login: 'nope', name: 'Nope' }))).toEqual(EMPTY_403);
    expect((await owner.query(`select 1 from core.orgs where code = 'nope'`)).rowCount).toBe(0);
  });

  it('svc_superadmin alone is not svc_admin', async () => {
    const c = tokenClient(oidc.url, await mint(['svc_superadmin']));
    expect(shape(await c.get(`/api/tenants/${TT}/orgs`))).toEqual(EMPTY_403);
  });

  it('svc_admin of one tenant gets an empty 403 on another tenant\'s paths', async () => {
    expect(shape(await admin.get(`/api/tenants/${T}/orgs`))).toEqual(EMPTY_403);
    expect(shape(await admin.get(`/api/tenants/${T}/users`))).toEqual(EMPTY_403);
    const r = await admin.get(`/api/tenants/${TT}/orgs`);
    expect(r.status).toBe(200);
  });
});
