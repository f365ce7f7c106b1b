import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { type Client, devClient, EMPTY_403, ownerClient, shape } from '../../../test/harness/api-client.js';

/** Roles, assignments and organisation grants through HTTP (dev bypass: tenant 1 calls, tenant 2 is the other). */

let hub: TestHub;
let owner: pg.Client;
let api: Client;
let other: Client;
const T = 1;
const OTHER = 2;

type Role = { id: number; name: string; description: string | null };

beforeAll(async () => {
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
  await owner.query(`insert into core.tenants (id, code, name) values (${OTHER}, 'other', 'Other')`);
  api = devClient(hub.url, T);
  other = devClient(hub.url, OTHER);
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

let seq = 0;
const unique = (prefix: string) => `${prefix}-${++seq}`;
const tid = (c: Client) => (c === other ? OTHER : T);

async function role(c: Client, name = unique('role'), description?: string): Promise<Role> {
  const r = await c.post(`/api/tenants/${tid(c)}/roles`, description === undefined ? { name } : { name, description });
  expect(r.status).toBe(201);
  return r.body as Role;
}
async function user(c: Client): Promise<number> {
  const r = await c.post(`/api/tenants/${tid(c)}/users`, { login: unique('user'), name: 'U' });
  expect(r.status).toBe(201);
  return (r.body as { id: number }).id;
}
async function org(c: Client): Promise<number> {
  const r = await c.post(`/api/tenants/${tid(c)}/orgs`, { code: unique('org'), name: 'O' });
  expect(r.status).toBe(201);
  return (r.body as { id: number }).id;
}

const p = (rest: string) => `/api/tenants/${T}${rest}`;

describe('/api/tenants/{tid}/roles', () => {
  it('starts empty, creates (201 {id, name, description}) and lists by id', async () => {
    expect((await api.get(p('/roles'))).body).toEqual([]);
    const r = await api.post(p('/roles'), { name: 'auditor', description: 'Reads everything' });
    expect(r.status).toBe(201);
    expect(r.body).toEqual({ id: expect.any(Number), name: 'auditor', description: 'Reads everything' });
    const plain = await role(api, 'viewer');
    expect(plain).toEqual({ id: expect.any(Number), name: 'viewer', description: null });
    expect((await api.get(p('/roles'))).body).toEqual([r.body, plain]);
    expect((await api.get(p(`/roles/${plain.id}`))).body).toEqual(plain);
    expect((await owner.query('select tenant_id from core.roles where id = $1', [plain.id])).rows).toEqual([{ tenant_id: T }]);
  });

  it('a duplicate name is a 409; the same name in another tenant is fine and stays invisible here', async () => {
    const name = unique('dup');
    await role(api, name);
    const r = await api.post(p('/roles'), { name });
    expect(r.status).toBe(409);
    expect(r.body).toEqual({ error: `role ${name} already exists`, field: 'name' });
    const theirs = await role(other, name);
    expect(((await api.get(p('/roles'))).body as Role[]).map((x) => x.id)).not.toContain(theirs.id);
    expect((await api.get(p(`/roles/${theirs.id}`))).status).toBe(404);
  });

  it('validates the body', async () => {
    expect((await api.post(p('/roles'), {})).body).toEqual({ error: 'name is required', field: 'name' });
    expect((await api.post(p('/roles'), { name: 'x', permissions: [] })).body).toEqual({ error: 'permissions is not a known field', field: 'permissions' });
    expect((await api.post(p('/roles'), { name: '  ' })).body).toEqual({ error: 'name must not be blank', field: 'name' });
  });

  it('another tenant\'s {tid} is an empty 403', async () => {
    expect(shape(await api.get(`/api/tenants/${OTHER}/roles`))).toEqual(EMPTY_403);
    expect(shape(await api.post(`/api/tenants/${OTHER}/roles`, { name: unique('x') }))).toEqual(EMPTY_403);
  });
});

describe('/api/tenants/{tid}/users/{uid}/roles/{roleId}', () => {
  it('assigns (204), lists, is idempotent, removes (204) keeping the row, and assigns again', async () => {
    const u = await user(api);
    const r1 = await role(api);
    const r2 = await role(api);
    let r = await api.put(p(`/users/${u}/roles/${r1.id}`));
    expect(r.status).toBe(204);
    expect(r.text).toBe('');
    expect((await api.put(p(`/users/${u}/roles/${r2.id}`))).status).toBe(204);
    expect((await api.put(p(`/users/${u}/roles/${r1.id}`))).status).toBe(204);
    expect((await api.get(p(`/users/${u}/roles`))).body).toEqual([r1, r2]);
    r = await api.del(p(`/users/${u}/roles/${r1.id}`));
    expect(r.status).toBe(204);
    expect((await api.get(p(`/users/${u}/roles`))).body).toEqual([r2]);
    const rows = await owner.query('select role_id, active, revoked_at is not null as revoked from core.user_roles where user_id = $1 order by role_id', [u]);
    expect(rows.rows).toEqual([
      { role_id: r1.id, active: false, revoked: true },
      { role_id: r2.id, active: true, revoked: false },
    ]);
    expect((await api.del(p(`/users/${u}/roles/${r1.id}`))).status).toBe(204);
    expect((await api.put(p(`/users/${u}/roles/${r1.id}`))).status).toBe(204);
    expect((await api.get(p(`/users/${u}/roles`))).body).toEqual([r1, r2]);
  });

  it('an unknown or foreign user or role is a 404, and nothing is stored', async () => {
    const u = await user(api);
    const r = await role(api);
    const theirUser = await user(other);
    const theirRole = await role(other);
    for (const [uid, roleId] of [[987654, r.id], [u, 987654], [theirUser, r.id], [u, theirRole.id]] as const) {
      const put = await api.put(p(`/users/${uid}/roles/${roleId}`));
      expect(put.status).toBe(404);
      expect(put.body).toEqual({ error: uid === u ? `role ${roleId} not found` : `user ${uid} not found` });
      expect((await api.del(p(`/users/${uid}/roles/${roleId}`))).status).toBe(404);
    }
    expect((await api.get(p(`/users/${theirUser}/roles`))).status).toBe(404);
    expect((await owner.query('select 1 from core.user_roles where user_id = any($1) or role_id = $2', [[u, theirUser], theirRole.id])).rowCount).toBe(0);
  });

  it('a deactivated user cannot be given a role (409)', async () => {
    const u = await user(api);
    const r = await role(api);
    await api.del(p(`/users/${u}`));
    const put = await api.put(p(`/users/${u}/roles/${r.id}`));
    expect(put.status).toBe(409);
    expect(put.body).toEqual({ error: `user ${u} is deactivated` });
  });

  it('another tenant\'s {tid} is an empty 403', async () => {
    const u = await user(other);
    const r = await role(other);
    expect(shape(await api.put(`/api/tenants/${OTHER}/users/${u}/roles/${r.id}`))).toEqual(EMPTY_403);
    expect(shape(await api.del(`/api/tenants/${OTHER}/users/${u}/roles/${r.id}`))).toEqual(EMPTY_403);
  });
});

describe('/api/tenants/{tid}/roles/{roleId}/orgs/{orgId}', () => {
  it('grants (204), lists, is idempotent, revokes (204) keeping the row', async () => {
    const r = await role(api);
    const o1 = await org(api);
    const o2 = await org(api);
    let res = await api.put(p(`/roles/${r.id}/orgs/${o1}`));
    expect(res.status).toBe(204);
    expect(res.text).toBe('');
    expect((await api.put(p(`/roles/${r.id}/orgs/${o2}`))).status).toBe(204);
    expect((await api.put(p(`/roles/${r.id}/orgs/${o1}`))).status).toBe(204);
    const listed = (await api.get(p(`/roles/${r.id}/orgs`))).body as Array<{ id: number; tenantId: number }>;
    expect(listed.map((o) => o.id)).toEqual([o1, o2]);
    expect(listed[0]).toEqual((await api.get(p(`/orgs/${o1}`))).body);
    res = await api.del(p(`/roles/${r.id}/orgs/${o1}`));
    expect(res.status).toBe(204);
    expect(((await api.get(p(`/roles/${r.id}/orgs`))).body as Array<{ id: number }>).map((o) => o.id)).toEqual([o2]);
    expect((await owner.query('select org_id, active from core.role_orgs where role_id = $1 order by org_id', [r.id])).rows).toEqual([
      { org_id: o1, active: false },
      { org_id: o2, active: true },
    ]);
  });

  it('an unknown or foreign role or organisation is a 404; an archived organisation a 409', async () => {
    const r = await role(api);
    const o = await org(api);
    const theirRole = await role(other);
    const theirOrg = await org(other);
    for (const [roleId, orgId] of [[987654, o], [r.id, 987654], [theirRole.id, o], [r.id, theirOrg]] as const) {
      expect((await api.put(p(`/roles/${roleId}/orgs/${orgId}`))).status).toBe(404);
      expect((await api.del(p(`/roles/${roleId}/orgs/${orgId}`))).status).toBe(404);
    }
    expect((await api.get(p(`/roles/${theirRole.id}/orgs`))).status).toBe(404);
    expect((await owner.query('select 1 from core.role_orgs where role_id = any($1)', [[r.id, theirRole.id]])).rowCount).toBe(0);
    await api.del(p(`/orgs/${o}`));
    const res = await api.put(p(`/roles/${r.id}/orgs/${o}`));
    expect(res.status).toBe(409);
    expect(res.body).toEqual({ error: `organisation ${o} is archived` });
  });

  it('another tenant\'s {tid} is an empty 403', async () => {
    const r = await role(other);
    const o = await org(other);
    expect(shape(await api.put(`/api/tenants/${OTHER}/roles/${r.id}/orgs/${o}`))).toEqual(EMPTY_403);
    expect(shape(await api.del(`/api/tenants/${OTHER}/roles/${r.id}/orgs/${o}`))).toEqual(EMPTY_403);
  });
});
