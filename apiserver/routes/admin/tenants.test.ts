import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { startIssuer, type TestIssuer } from '../../../test/harness/tokens.js';
import { type Client, devClient, EMPTY_403, ISO, ownerClient, shape, tokenClient } from '../../../test/harness/api-client.js';

/**
 * Tenant administration through HTTP: a dev-bypass hub for the behaviour, and an OIDC hub on the
 * same database for the role refusals (real tokens).
 */

let hub: TestHub;
let oidc: TestHub;
let issuer: TestIssuer;
let owner: pg.Client;
let api: Client;

beforeAll(async () => {
  hub = await startTestHub();
  issuer = await startIssuer();
  oidc = await startTestHub({ 'svc.oidc.issuer': issuer.issuer, 'svc.oidc.jwks-uri': issuer.jwksUri, 'svc.datasource.url': hub.ownerUrl });
  owner = await ownerClient(hub.ownerUrl);
  api = devClient(hub.url, 1);
});

afterAll(async () => {
  await owner?.end();
  await oidc?.stop();
  await hub?.stop();
  await issuer?.close();
});

type TenantRecord = { id: number; code: string; name: string; description: string | null; active: boolean; createdAt: string; updatedAt: string };

async function create(code: string, name = code.toUpperCase(), description?: string): Promise<TenantRecord> {
  const r = await api.post('/api/tenants', description === undefined ? { code, name } : { code, name, description });
  expect(r.status).toBe(201);
  return r.body as TenantRecord;
}

describe('POST /api/tenants', () => {
  it('creates a tenant: 201 with the record', async () => {
    const r = await api.post('/api/tenants', { code: 'acme', name: 'Acme', description: 'The first customer' });
    expect(r.status).toBe(201);
    expect(r.headers.get('content-type')).toMatch(/^application\/json/);
    const body = r.body as TenantRecord;
    expect(body).toEqual({ id: expect.any(Number), code: 'acme', name: 'Acme', description: 'The first customer', active: true, createdAt: expect.stringMatching(ISO), updatedAt: expect.stringMatching(ISO) });
    expect(body.id).toBeGreaterThan(1);
    const { rows } = await owner.query('select code, name, description, active from core.tenants where id = $1', [body.id]);
    expect(rows).toEqual([{ code: 'acme', name: 'Acme', description: 'The first customer', active: true }]);
  });

  it('description is optional (null in the record)', async () => {
    const t = await create('no-description', 'Plain');
    expect(t.description).toBeNull();
  });

  it('a duplicate code is a 409 naming code, and writes nothing', async () => {
    await create('dup-code');
    const before = await owner.query('select count(*)::int as n from core.tenants');
    const r = await api.post('/api/tenants', { code: 'dup-code', name: 'Again' });
    expect(r.status).toBe(409);
    expect(r.body).toEqual({ error: 'tenant code dup-code is already taken', field: 'code' });
    const after = await owner.query('select count(*)::int as n from core.tenants');
    expect(after.rows[0].n).toBe(before.rows[0].n);
  });

  it('the system tenant\'s code is taken too', async () => {
    const r = await api.post('/api/tenants', { code: 'system', name: 'Not the system' });
    expect(r.status).toBe(409);
  });

  it.each([['Acme'], ['acme_eu'], ['-acme'], ['acme-'], ['acme eu'], [''], ['a'.repeat(64)], ['été']])('refuses the code %p with a 400 naming code', async (code) => {
    const r = await api.post('/api/tenants', { code, name: 'X' });
    expect(r.status).toBe(400);
    expect(r.body).toEqual({
      error: 'code must be 1 to 63 lower-case letters, digits or dashes, starting and ending with a letter or digit',
      field: 'code',
      hint: 'for example acme or acme-eu-2',
    });
  });

  it.each([['a'], ['a1-b2'], ['x'.repeat(63)], ['0']])('accepts the code %p', async (code) => {
    const r = await api.post('/api/tenants', { code, name: 'Fine' });
    expect(r.status).toBe(201);
    expect((r.body as TenantRecord).code).toBe(code);
  });

  it('validates the body against its schema', async () => {
    expect((await api.post('/api/tenants', { code: 'no-name' })).body).toEqual({ error: 'name is required', field: 'name' });
    expect((await api.post('/api/tenants', { name: 'No code' })).body).toEqual({ error: 'code is required', field: 'code' });
    const extra = await api.post('/api/tenants', { code: 'extra', name: 'X', active: false });
    expect(extra.status).toBe(400);
    expect(extra.body).toEqual({ error: 'active is not a known field', field: 'active' });
    const blank = await api.post('/api/tenants', { code: 'blank-name', name: '   ' });
    expect(blank.status).toBe(400);
    expect(blank.body).toEqual({ error: 'name must not be blank', field: 'name' });
    const { rowCount } = await owner.query(`select 1 from core.tenants where code in ('no-name', 'extra', 'blank-name')`);
    expect(rowCount).toBe(0);
  });
});

describe('GET /api/tenants and /api/tenants/{id}', () => {
  it('lists active tenants by id, without the system tenant', async () => {
    const a = await create('list-a');
    const b = await create('list-b');
    const r = await api.get('/api/tenants');
    expect(r.status).toBe(200);
    const list = r.body as TenantRecord[];
    const ids = list.map((t) => t.id);
    expect(ids).toEqual([...ids].sort((x, y) => x - y));
    expect(ids).not.toContain(0);
    expect(ids).toEqual(expect.arrayContaining([1, a.id, b.id]));
    expect(list.every((t) => t.active)).toBe(true);
    expect(list.find((t) => t.id === 1)).toMatchObject({ code: 'default', name: 'Default tenant' });
    expect(list.find((t) => t.id === a.id)).toEqual(a);
  });

  it('gets one tenant', async () => {
    const t = await create('get-one', 'Get One', 'described');
    const r = await api.get(`/api/tenants/${t.id}`);
    expect(r.status).toBe(200);
    expect(r.body).toEqual(t);
  });

  it('an unknown id is a 404', async () => {
    const r = await api.get('/api/tenants/987654');
    expect(r.status).toBe(404);
    expect(r.body).toEqual({ error: 'tenant 987654 not found' });
  });

  it('the system tenant is a 404', async () => {
    const r = await api.get('/api/tenants/0');
    expect(r.status).toBe(404);
    expect(r.body).toEqual({ error: 'tenant 0 not found' });
  });

  it('an id that is not a number is a 400 naming id', async () => {
    const r = await api.get('/api/tenants/acme');
    expect(r.status).toBe(400);
    expect((r.body as { field: string }).field).toBe('id');
  });
});

describe('PUT /api/tenants/{id}', () => {
  it('updates name and description, and only the fields present', async () => {
    const t = await create('put-me', 'Before', 'old text');
    let r = await api.put(`/api/tenants/${t.id}`, { name: 'After' });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ ...t, name: 'After', updatedAt: expect.stringMatching(ISO) });
    expect(Date.parse((r.body as TenantRecord).updatedAt)).toBeGreaterThanOrEqual(Date.parse(t.updatedAt));
    r = await api.put(`/api/tenants/${t.id}`, { description: 'new text' });
    expect(r.body).toMatchObject({ name: 'After', description: 'new text', code: 'put-me' });
    r = await api.put(`/api/tenants/${t.id}`, { description: null });
    expect(r.body).toMatchObject({ name: 'After', description: null });
    expect((await api.get(`/api/tenants/${t.id}`)).body).toMatchObject({ name: 'After', description: null });
  });

  it('the code cannot be changed', async () => {
    const t = await create('fixed-code');
    const r = await api.put(`/api/tenants/${t.id}`, { code: 'other-code' });
    expect(r.status).toBe(400);
    expect(r.body).toEqual({ error: 'code is not a known field', field: 'code' });
  });

  it('an empty body is a 400', async () => {
    const t = await create('empty-put');
    expect((await api.put(`/api/tenants/${t.id}`, {})).status).toBe(400);
  });

  it('unknown and system tenants are 404s, and the system tenant stays as it was', async () => {
    expect((await api.put('/api/tenants/987654', { name: 'x' })).status).toBe(404);
    const r = await api.put('/api/tenants/0', { name: 'Hijacked' });
    expect(r.status).toBe(404);
    const { rows } = await owner.query('select name, active from core.tenants where id = 0');
    expect(rows).toEqual([{ name: 'System', active: true }]);
  });
});

describe('DELETE /api/tenants/{id}', () => {
  it('deactivates: 204, omitted from the list, the row stays, a single lookup shows it inactive', async () => {
    const t = await create('to-delete');
    const r = await api.del(`/api/tenants/${t.id}`);
    expect(r.status).toBe(204);
    expect(r.text).toBe('');
    const list = (await api.get('/api/tenants')).body as TenantRecord[];
    expect(list.map((x) => x.id)).not.toContain(t.id);
    const { rows } = await owner.query('select code, active from core.tenants where id = $1', [t.id]);
    expect(rows).toEqual([{ code: 'to-delete', active: false }]);
    expect((await api.get(`/api/tenants/${t.id}`)).body).toMatchObject({ id: t.id, active: false });
    expect((await api.del(`/api/tenants/${t.id}`)).status).toBe(204);
    const put = await api.put(`/api/tenants/${t.id}`, { name: 'Back' });
    expect(put.status).toBe(409);
    expect(put.body).toEqual({ error: `tenant ${t.id} is deactivated` });
    // The code stays taken.
    expect((await api.post('/api/tenants', { code: 'to-delete', name: 'Again' })).status).toBe(409);
  });

  it('the tenant\'s callers are refused from their next call (the authentication cache is dropped)', async () => {
    const t = await create('goes-away');
    const caller = devClient(hub.url, t.id);
    expect((await caller.get('/api/bff/v1/me')).status).toBe(200); // caches the tenant as active
    expect((await api.del(`/api/tenants/${t.id}`)).status).toBe(204);
    const r = await caller.get('/api/bff/v1/me');
    expect(r.status).toBe(403);
    expect(r.body).toEqual({ error: 'tenant inactive' });
  });

  it('a new tenant is usable at once, even by a caller refused a moment before as unknown', async () => {
    // The id the next tenant gets: a caller naming it is refused, and the refusal is cached.
    const { rows } = await owner.query<{ next: string }>(
      "select coalesce(last_value, start_value - 1) + 1 as next from pg_sequences where schemaname = 'core' and sequencename = 'tenants_id_seq'",
    );
    const next = Number(rows[0]!.next);
    const early = devClient(hub.url, next);
    expect((await early.get('/api/bff/v1/me')).body).toEqual({ error: `unknown tenant ${next}` });
    const t = await create('just-made');
    expect(t.id).toBe(next);
    const me = await early.get('/api/bff/v1/me');
    expect(me.status).toBe(200);
    expect(me.body).toMatchObject({ tenant: { id: next, code: 'just-made' } });
  });

  it('unknown and system tenants are 404s; the system tenant stays active', async () => {
    expect((await api.del('/api/tenants/987654')).status).toBe(404);
    expect((await api.del('/api/tenants/0')).status).toBe(404);
    const { rows } = await owner.query('select active from core.tenants where id = 0');
    expect(rows).toEqual([{ active: true }]);
  });
});

describe('GET /api/platform/admin/tenants', () => {
  it('lists the same active tenants', async () => {
    const r = await api.get('/api/platform/admin/tenants');
    expect(r.status).toBe(200);
    expect(r.body).toEqual((await api.get('/api/tenants')).body);
  });
});

describe('role gates with real tokens', () => {
  let subjects = 0;
  const as = async (roles: string[]) =>
    tokenClient(oidc.url, await issuer.mint({ tenant_id: 1, realm_access: { roles } }, { subject: `tenants-${++subjects}` }));

  it('svc_superadmin alone may administer tenants', async () => {
    const c = await as(['svc_superadmin']);
    expect((await c.get('/api/tenants')).status).toBe(200);
    const r = await c.post('/api/tenants', { code: 'by-token', name: 'By token' });
    expect(r.status).toBe(201);
  });

  it('svc_admin without svc_superadmin gets an empty 403 on every tenant operation, and nothing changes', async () => {
    const c = await as(['svc_admin', 'svc_user', 'svc_integrator']);
    const t = await create('guarded');
    expect(shape(await c.get('/api/tenants'))).toEqual(EMPTY_403);
    expect(shape(await c.get(`/api/tenants/${t.id}`))).toEqual(EMPTY_403);
    expect(shape(await c.post('/api/tenants', { code: 'sneaky', name: 'Sneaky' }))).toEqual(EMPTY_403);
    expect(shape(await c.put(`/api/tenants/${t.id}`, { name: 'Renamed' }))).toEqual(EMPTY_403);
    expect(shape(await c.del(`/api/tenants/${t.id}`))).toEqual(EMPTY_403);
    const { rows } = await owner.query('select name, active from core.tenants where id = $1', [t.id]);
    expect(rows).toEqual([{ name: 'GUARDED', active: true }]);
    expect((await owner.query(`select 1 from core.tenants where code = 'sneaky'`)).rowCount).toBe(0);
  });

  it('without a token: 401', async () => {
    const r = await fetch(`${oidc.url}/api/tenants`);
    expect(r.status).toBe(401);
    expect(r.headers.get('www-authenticate')).toBe('Bearer');
  });

  it('/api/platform/admin/tenants needs svc_integrator and svc_superadmin', async () => {
    const superOnly = await (await as(['svc_superadmin'])).get('/api/platform/admin/tenants');
    expect({ status: superOnly.status, text: superOnly.text }).toEqual({ status: 403, text: 'missing role svc_integrator' });
    expect(shape(await (await as(['svc_integrator'])).get('/api/platform/admin/tenants'))).toEqual(EMPTY_403);
    expect(shape(await (await as(['svc_integrator', 'svc_admin'])).get('/api/platform/admin/tenants'))).toEqual(EMPTY_403);
    const both = await (await as(['svc_integrator', 'svc_superadmin'])).get('/api/platform/admin/tenants');
    expect(both.status).toBe(200);
    expect((both.body as TenantRecord[]).map((t) => t.code)).toContain('default');
  });
});
