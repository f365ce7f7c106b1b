import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { type Client, devClient, EMPTY_403, eventsSince, ISO, outboxMark, ownerClient, shape } from '../../../test/harness/api-client.js';

/**
 * Organisations through HTTP on a dev-bypass hub: tenant 1 (default) is the caller, tenant 2 the
 * other tenant whose ids must stay invisible. Events are read from events.outbox as the owner.
 */

let hub: TestHub;
let owner: pg.Client;
let api: Client;
let other: Client;
const T = 1;
const OTHER = 2;

type Org = { id: number; tenantId: number; code: string; name: string; description: string | null; parentId: number | null; active: boolean; createdAt: string; updatedAt: string };
type Node = Org & { children: Node[]; truncated: boolean };

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
/** A fresh, unique code for this run. */
const code = (prefix: string) => `${prefix}-${++seq}`;

async function create(c: Client, body: Record<string, unknown>): Promise<Org> {
  const r = await c.post(`/api/tenants/${c === other ? OTHER : T}/orgs`, body);
  expect(r.status).toBe(201);
  return r.body as Org;
}

const path = (rest = '') => `/api/tenants/${T}/orgs${rest}`;

describe('POST /api/tenants/{tid}/orgs', () => {
  it('creates an organisation: 201 with the record, and emits org.created in the tenant', async () => {
    const mark = await outboxMark(owner);
    const r = await api.post(path(), { code: 'sales', name: 'Sales', description: 'Everyone who sells' });
    expect(r.status).toBe(201);
    const org = r.body as Org;
    expect(org).toEqual({
      id: expect.any(Number), tenantId: T, code: 'sales', name: 'Sales', description: 'Everyone who sells', parentId: null, active: true,
      createdAt: expect.stringMatching(ISO), updatedAt: expect.stringMatching(ISO),
    });
    expect(await eventsSince(owner, mark)).toEqual([{ type: 'org.created', tenantId: T, payload: { orgId: org.id, tenantId: T, name: 'Sales' } }]);
    const { rows } = await owner.query('select tenant_id, code, parent_id, active from core.orgs where id = $1', [org.id]);
    expect(rows).toEqual([{ tenant_id: T, code: 'sales', parent_id: null, active: true }]);
  });

  it('creates under a parent of the tenant', async () => {
    const parent = await create(api, { code: code('parent'), name: 'Parent' });
    const child = await create(api, { code: code('child'), name: 'Child', parentId: parent.id });
    expect(child).toMatchObject({ parentId: parent.id, description: null });
  });

  it('a duplicate code in the tenant is a 409, and the rolled-back insert emits nothing', async () => {
    const c = code('dup');
    await create(api, { code: c, name: 'First' });
    const mark = await outboxMark(owner);
    const r = await api.post(path(), { code: c, name: 'Second' });
    expect(r.status).toBe(409);
    expect(r.body).toEqual({ error: `organisation code ${c} is already taken`, field: 'code' });
    expect(await eventsSince(owner, mark)).toEqual([]);
    expect((await owner.query('select name from core.orgs where code = $1', [c])).rows).toEqual([{ name: 'First' }]);
  });

  it('the same code in another tenant is fine', async () => {
    const c = code('shared');
    await create(api, { code: c, name: 'Ours' });
    const theirs = await create(other, { code: c, name: 'Theirs' });
    expect(theirs.tenantId).toBe(OTHER);
  });

  it('a parent that does not exist, is archived, or belongs to another tenant is a 400 naming parentId', async () => {
    const foreign = await create(other, { code: code('foreign'), name: 'Foreign' });
    const archived = await create(api, { code: code('archived-parent'), name: 'Gone' });
    expect((await api.del(path(`/${archived.id}`))).status).toBe(204);
    const mark = await outboxMark(owner);
    for (const parentId of [987654, foreign.id, archived.id]) {
      const c = code('orphan');
      const r = await api.post(path(), { code: c, name: 'Orphan', parentId });
      expect(r.status).toBe(400);
      expect(r.body).toEqual({ error: `parentId ${parentId} is not an active organisation of this tenant`, field: 'parentId' });
      expect((await owner.query('select 1 from core.orgs where code = $1', [c])).rowCount).toBe(0);
    }
    expect(await eventsSince(owner, mark)).toEqual([]);
  });

  it('validates the body', async () => {
    expect((await api.post(path(), { name: 'No code' })).body).toEqual({ error: 'code is required', field: 'code' });
    expect((await api.post(path(), { code: code('x') })).body).toEqual({ error: 'name is required', field: 'name' });
    expect((await api.post(path(), { code: code('x'), name: 'X', tenantId: 2 })).body).toEqual({ error: 'tenantId is not a known field', field: 'tenantId' });
    expect((await api.post(path(), { code: code('x'), name: 'X', parentId: 'abc' })).body).toMatchObject({ field: 'parentId' });
    const bad = await api.post(path(), { code: 'has space', name: 'X' });
    expect(bad.status).toBe(400);
    expect(bad.body).toEqual({ error: 'code must be 1 to 100 letters, digits, dots, underscores or dashes, starting with a letter or digit', field: 'code' });
    expect((await api.post(path(), { code: code('x'), name: '  ' })).body).toEqual({ error: 'name must not be blank', field: 'name' });
  });
});

describe('GET /api/tenants/{tid}/orgs[/{id}]', () => {
  it('lists the active organisations of the tenant only, by id', async () => {
    const a = await create(api, { code: code('list'), name: 'A' });
    const gone = await create(api, { code: code('list'), name: 'Gone' });
    const theirs = await create(other, { code: code('list'), name: 'Theirs' });
    await api.del(path(`/${gone.id}`));
    const r = await api.get(path());
    expect(r.status).toBe(200);
    const list = r.body as Org[];
    const ids = list.map((o) => o.id);
    expect(ids).toContain(a.id);
    expect(ids).not.toContain(gone.id);
    expect(ids).not.toContain(theirs.id);
    expect(ids).toEqual([...ids].sort((x, y) => x - y));
    expect(list.every((o) => o.tenantId === T && o.active)).toBe(true);
    expect(list.find((o) => o.id === a.id)).toEqual(a);
  });

  it('gets one; 404 when unknown or of another tenant', async () => {
    const a = await create(api, { code: code('get'), name: 'Get' });
    expect((await api.get(path(`/${a.id}`))).body).toEqual(a);
    const theirs = await create(other, { code: code('get'), name: 'Theirs' });
    const r = await api.get(path(`/${theirs.id}`));
    expect(r.status).toBe(404);
    expect(r.body).toEqual({ error: `organisation ${theirs.id} not found` });
    expect((await api.get(path('/987654'))).status).toBe(404);
    expect((await other.get(`/api/tenants/${OTHER}/orgs/${theirs.id}`)).status).toBe(200);
  });

  it('another tenant\'s {tid} is an empty 403', async () => {
    expect(shape(await api.get(`/api/tenants/${OTHER}/orgs`))).toEqual(EMPTY_403);
    expect(shape(await api.post(`/api/tenants/${OTHER}/orgs`, { code: code('x'), name: 'X' }))).toEqual(EMPTY_403);
    expect(shape(await api.get(`/api/tenants/${OTHER}/orgs/tree`))).toEqual(EMPTY_403);
  });
});

describe('PUT /api/tenants/{tid}/orgs/{id}', () => {
  it('updates name and description: org.updated only', async () => {
    const a = await create(api, { code: code('upd'), name: 'Before', description: 'old' });
    const mark = await outboxMark(owner);
    const r = await api.put(path(`/${a.id}`), { name: 'After', description: null });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ ...a, name: 'After', description: null, updatedAt: expect.stringMatching(ISO) });
    expect(await eventsSince(owner, mark)).toEqual([{ type: 'org.updated', tenantId: T, payload: { orgId: a.id, tenantId: T } }]);
  });

  it('a new parent: org.updated and org.moved with the new parent id', async () => {
    const p = await create(api, { code: code('mv-parent'), name: 'P' });
    const a = await create(api, { code: code('mv'), name: 'A' });
    const mark = await outboxMark(owner);
    const r = await api.put(path(`/${a.id}`), { parentId: p.id });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ id: a.id, parentId: p.id, name: 'A' });
    expect(await eventsSince(owner, mark)).toEqual([
      { type: 'org.updated', tenantId: T, payload: { orgId: a.id, tenantId: T } },
      { type: 'org.moved', tenantId: T, payload: { orgId: a.id, tenantId: T, newParentId: p.id } },
    ]);
  });

  it('a move to the top level (parentId null) has newParentId 0', async () => {
    const p = await create(api, { code: code('top-parent'), name: 'P' });
    const a = await create(api, { code: code('top'), name: 'A', parentId: p.id });
    const mark = await outboxMark(owner);
    const r = await api.put(path(`/${a.id}`), { parentId: null });
    expect(r.status).toBe(200);
    expect((r.body as Org).parentId).toBeNull();
    expect(await eventsSince(owner, mark)).toEqual([
      { type: 'org.updated', tenantId: T, payload: { orgId: a.id, tenantId: T } },
      { type: 'org.moved', tenantId: T, payload: { orgId: a.id, tenantId: T, newParentId: 0 } },
    ]);
  });

  it('a body that changes nothing writes and emits nothing', async () => {
    const p = await create(api, { code: code('same-parent'), name: 'P' });
    const a = await create(api, { code: code('same'), name: 'Same', parentId: p.id });
    const mark = await outboxMark(owner);
    const r = await api.put(path(`/${a.id}`), { name: 'Same', parentId: p.id });
    expect(r.status).toBe(200);
    expect(r.body).toEqual(a);
    expect(await eventsSince(owner, mark)).toEqual([]);
  });

  it('refuses a move under itself or a descendant (400 naming parentId), changing and emitting nothing', async () => {
    const a = await create(api, { code: code('cyc-a'), name: 'A' });
    const b = await create(api, { code: code('cyc-b'), name: 'B', parentId: a.id });
    const c = await create(api, { code: code('cyc-c'), name: 'C', parentId: b.id });
    const mark = await outboxMark(owner);
    let r = await api.put(path(`/${a.id}`), { parentId: a.id });
    expect(r.status).toBe(400);
    expect(r.body).toEqual({ error: 'parentId: an organisation cannot be its own parent', field: 'parentId' });
    r = await api.put(path(`/${a.id}`), { name: 'Renamed', parentId: c.id });
    expect(r.status).toBe(400);
    expect(r.body).toEqual({ error: `parentId ${c.id} is below organisation ${a.id}: the move would make it its own ancestor`, field: 'parentId' });
    r = await api.put(path(`/${a.id}`), { parentId: b.id });
    expect(r.status).toBe(400);
    expect(await eventsSince(owner, mark)).toEqual([]);
    expect((await api.get(path(`/${a.id}`))).body).toEqual(a);
    // A move sideways within the subtree is fine.
    expect((await api.put(path(`/${c.id}`), { parentId: a.id })).status).toBe(200);
  });

  it('a parent of another tenant or unknown is a 400; an id of another tenant is a 404', async () => {
    const a = await create(api, { code: code('x-parent'), name: 'A' });
    const theirs = await create(other, { code: code('x-parent'), name: 'Theirs' });
    const r = await api.put(path(`/${a.id}`), { parentId: theirs.id });
    expect(r.status).toBe(400);
    expect((r.body as { field: string }).field).toBe('parentId');
    const foreign = await api.put(path(`/${theirs.id}`), { name: 'Mine now' });
    expect(foreign.status).toBe(404);
    expect((await owner.query('select name from core.orgs where id = $1', [theirs.id])).rows).toEqual([{ name: 'Theirs' }]);
  });

  it('validates the body; an archived organisation cannot be changed (409)', async () => {
    const a = await create(api, { code: code('val'), name: 'A' });
    expect((await api.put(path(`/${a.id}`), { code: 'renamed' })).body).toEqual({ error: 'code is not a known field', field: 'code' });
    expect(await api.put(path(`/${a.id}`), {})).toMatchObject({ status: 400, body: { error: 'body must name at least one field' } });
    expect((await api.put(path(`/${a.id}`), { active: true })).status).toBe(400);
    await api.del(path(`/${a.id}`));
    const r = await api.put(path(`/${a.id}`), { name: 'Back' });
    expect(r.status).toBe(409);
    expect(r.body).toEqual({ error: `organisation ${a.id} is archived` });
  });
});

describe('DELETE /api/tenants/{tid}/orgs/{id}', () => {
  it('archives: 204, org.archived, omitted from the list, the row stays', async () => {
    const a = await create(api, { code: code('arch'), name: 'A' });
    const mark = await outboxMark(owner);
    const r = await api.del(path(`/${a.id}`));
    expect(r.status).toBe(204);
    expect(r.text).toBe('');
    expect(await eventsSince(owner, mark)).toEqual([{ type: 'org.archived', tenantId: T, payload: { id: a.id, code: a.code } }]);
    expect(((await api.get(path())).body as Org[]).map((o) => o.id)).not.toContain(a.id);
    expect((await api.get(path(`/${a.id}`))).body).toEqual({ ...a, active: false, updatedAt: expect.stringMatching(ISO) });
    expect((await owner.query('select active from core.orgs where id = $1', [a.id])).rows).toEqual([{ active: false }]);
    // Again: nothing changes, nothing is emitted.
    const again = await outboxMark(owner);
    expect((await api.del(path(`/${a.id}`))).status).toBe(204);
    expect(await eventsSince(owner, again)).toEqual([]);
    // The code stays taken.
    expect((await api.post(path(), { code: a.code, name: 'Reuse' })).status).toBe(409);
  });

  it('refuses while active children remain (409), then archives once they are gone', async () => {
    const p = await create(api, { code: code('busy'), name: 'P' });
    const c = await create(api, { code: code('busy-child'), name: 'C', parentId: p.id });
    const mark = await outboxMark(owner);
    const r = await api.del(path(`/${p.id}`));
    expect(r.status).toBe(409);
    expect(r.body).toEqual({ error: `organisation ${p.id} has 1 active child organisation(s): move or archive them first` });
    expect(await eventsSince(owner, mark)).toEqual([]);
    expect((await api.del(path(`/${c.id}`))).status).toBe(204);
    expect((await api.del(path(`/${p.id}`))).status).toBe(204);
  });

  it('an id of another tenant is a 404 and stays active', async () => {
    const theirs = await create(other, { code: code('keep'), name: 'Theirs' });
    expect((await api.del(path(`/${theirs.id}`))).status).toBe(404);
    expect((await owner.query('select active from core.orgs where id = $1', [theirs.id])).rows).toEqual([{ active: true }]);
  });
});

describe('events are written in the transaction of the change', () => {
  it('when writing the event fails, the organisation is not created either', async () => {
    await owner.query(`
      create function test_fail_outbox() returns trigger language plpgsql as $$
      begin
        if new.payload->>'name' = 'explode-on-emit' then raise exception 'outbox refused'; end if;
        return new;
      end $$;
      create trigger fail_outbox before insert on events.outbox for each row execute function test_fail_outbox();`);
    try {
      const c = code('atomic');
      const r = await api.post(path(), { code: c, name: 'explode-on-emit' });
      expect(r.status).toBe(500);
      expect((await owner.query('select 1 from core.orgs where code = $1', [c])).rowCount).toBe(0);
    } finally {
      await owner.query('drop trigger fail_outbox on events.outbox; drop function test_fail_outbox()');
    }
  });
});

describe('GET /api/tenants/{tid}/orgs/tree', () => {
  // A dedicated tenant so the top level holds only this tree: r1 > a > b > c > d, r1 > a2, r2; plus an archived root.
  const TT = 3;
  let t: Client;
  const o: Record<string, Org> = {};
  const tp = (q = '') => `/api/tenants/${TT}/orgs/tree${q}`;

  beforeAll(async () => {
    await owner.query(`insert into core.tenants (id, code, name) values (${TT}, 'treetenant', 'Tree')`);
    t = devClient(hub.url, TT);
    const mk = async (key: string, parent?: string) => {
      const r = await t.post(`/api/tenants/${TT}/orgs`, { code: key, name: key.toUpperCase(), ...(parent ? { parentId: o[parent]!.id } : {}) });
      expect(r.status).toBe(201);
      o[key] = r.body as Org;
    };
    await mk('r2');
    await mk('r1');
    await mk('z-gone');
    await mk('a', 'r1');
    await mk('a2', 'r1');
    await mk('b', 'a');
    await mk('c', 'b');
    await mk('d', 'c');
    expect((await t.del(`/api/tenants/${TT}/orgs/${o['z-gone']!.id}`)).status).toBe(204);
  });

  /** [code, truncated, children] for a readable comparison. */
  type Shape = [string, boolean, Shape[]];
  const shapeOf = (nodes: Node[]): Shape[] => nodes.map((n) => [n.code, n.truncated, shapeOf(n.children)]);

  it('by default: every top-level organisation, three levels deep, children by code', async () => {
    const r = await t.get(tp());
    expect(r.status).toBe(200);
    const tree = r.body as Node[];
    expect(shapeOf(tree)).toEqual([
      ['r1', false, [['a', false, [['b', true, []]]], ['a2', false, []]]],
      ['r2', false, []],
    ]);
    expect(tree[0]).toEqual({ ...o.r1, children: expect.any(Array), truncated: false });
    expect(tree[0]!.children[0]!.children[0]).toEqual({ ...o.b, children: [], truncated: true });
  });

  it('depth counts levels', async () => {
    expect(shapeOf((await t.get(tp('?depth=1'))).body as Node[])).toEqual([['r1', true, []], ['r2', false, []]]);
    expect(shapeOf((await t.get(tp('?depth=5'))).body as Node[])).toEqual([
      ['r1', false, [['a', false, [['b', false, [['c', false, [['d', false, []]]]]]]], ['a2', false, []]]],
      ['r2', false, []],
    ]);
  });

  it('from a root', async () => {
    expect(shapeOf((await t.get(tp(`?root=${o.a!.id}`))).body as Node[])).toEqual([['a', false, [['b', false, [['c', true, []]]]]]]);
    expect(shapeOf((await t.get(tp(`?root=${o.b!.id}&depth=2`))).body as Node[])).toEqual([['b', false, [['c', true, []]]]]);
    expect(shapeOf((await t.get(tp(`?root=${o.d!.id}`))).body as Node[])).toEqual([['d', false, []]]);
  });

  it('a root that is unknown, archived or of another tenant is a 404', async () => {
    const theirs = await create(api, { code: code('not-in-tree'), name: 'Elsewhere' });
    for (const root of [987654, o['z-gone']!.id, theirs.id]) {
      const r = await t.get(tp(`?root=${root}`));
      expect(r.status).toBe(404);
      expect(r.body).toEqual({ error: `organisation ${root} not found` });
    }
  });

  it('depth outside 1..10 or a root that is not a number is a 400', async () => {
    for (const q of ['?depth=0', '?depth=11', '?depth=two', '?root=abc']) {
      const r = await t.get(tp(q));
      expect(r.status).toBe(400);
      expect((r.body as { field: string }).field).toBe(q.startsWith('?depth') ? 'depth' : 'root');
    }
  });

  it('follows moves and archives', async () => {
    expect((await t.put(`/api/tenants/${TT}/orgs/${o.a2!.id}`, { parentId: o.r2!.id })).status).toBe(200);
    expect(shapeOf((await t.get(tp('?depth=2'))).body as Node[])).toEqual([
      ['r1', false, [['a', true, []]]],
      ['r2', false, [['a2', false, []]]],
    ]);
    expect((await t.del(`/api/tenants/${TT}/orgs/${o.a2!.id}`)).status).toBe(204);
    expect(shapeOf((await t.get(tp('?depth=2'))).body as Node[])).toEqual([
      ['r1', false, [['a', true, []]]],
      ['r2', false, []],
    ]);
  });
});
