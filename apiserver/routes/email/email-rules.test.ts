import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { type Client, devClient, EMPTY_403, ownerClient, shape } from '../../../test/harness/api-client.js';

/** /api/tenants/{tid}/email-rules through HTTP (dev bypass: tenant 1 calls, tenant 2 is the other). */

let hub: TestHub;
let owner: pg.Client;
let api: Client;
let other: Client;

beforeAll(async () => {
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
  await owner.query(`insert into core.tenants (id, code, name) values (2, 'other', 'Other')`);
  api = devClient(hub.url, 1);
  other = devClient(hub.url, 2);
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

const p = (rest = '') => `/api/tenants/1/email-rules${rest}`;
const valid = { name: 'ops', eventTypes: ['org.*', 'connector.run.failed'], recipient: 'ops@example.com, dev@example.org', subject: 'Org {{payload.orgId}}: {{type}}', body: '{{payload}}' };

describe('/api/tenants/{tid}/email-rules', () => {
  it('creates (201 with the record), gets, lists', async () => {
    expect((await api.get(p())).body).toEqual([]);
    const r = await api.post(p(), valid);
    expect(r.status).toBe(201);
    expect(r.body).toEqual({ id: expect.any(Number), ...valid, enabled: true });
    const id = (r.body as { id: number }).id;
    expect((await api.get(p(`/${id}`))).body).toEqual(r.body);
    const minimal = await api.post(p(), { name: 'minimal', eventTypes: ['org.created'], recipient: 'a@example.com', enabled: false });
    expect(minimal.status).toBe(201);
    expect(minimal.body).toMatchObject({ subject: '[svc-hub] {{type}}', enabled: false });
    expect((minimal.body as { body: string }).body).toContain('{{payload}}');
    expect((await api.get(p())).body).toEqual([r.body, minimal.body]);
  });

  it('refuses invalid bodies with 400 naming the field', async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ ...valid, name: 'a', eventTypes: ['*'] }, 'eventTypes[0]'],
      [{ ...valid, name: 'a', eventTypes: [] }, 'eventTypes'],
      [{ ...valid, name: 'a', eventTypes: ['org.*', 'org created'] }, 'eventTypes[1]'],
      [{ ...valid, name: 'a', recipient: 'not-an-address' }, 'recipient'],
      [{ ...valid, name: 'a', recipient: 'ops@example.com; dev@example.org' }, 'recipient'],
      [{ ...valid, name: 'a', subject: 'Hello {{user.name}}' }, 'subject'],
      [{ ...valid, name: 'a', body: 'Hello {{type' }, 'body'],
      [{ ...valid, name: '   ' }, 'name'],
      [{ ...valid, name: 'a', extra: 1 }, 'extra'],
      [{ name: 'a', eventTypes: ['org.created'] }, 'recipient'],
      [{ ...valid, name: 'a', enabled: 'yes' }, 'enabled'],
    ];
    for (const [body, field] of cases) {
      const r = await api.post(p(), body);
      expect({ field, status: r.status, got: (r.body as { field?: string }).field }).toEqual({ field, status: 400, got: field });
      expect((r.body as { error: string }).error).toEqual(expect.any(String));
    }
    const unknown = await api.post(p(), { ...valid, name: 'a', subject: '{{nope}}' });
    expect((unknown.body as { hint: string }).hint).toContain('{{payload.<field>');
  });

  it('refuses a name holding a control character (a line break, a tab), as an integration\'s; one stored before is listed, read, updated and deleted', async () => {
    for (const name of ['ops\r\nBcc: x@example.com', 'a\tb', 'a\u0085b', 'a\u2028b', 'a\x1b[2Jb']) {
      const r = await api.post(p(), { ...valid, name });
      // Was: 201, the name stored as it was.
      expect({ name, status: r.status, body: r.body }).toEqual({ name, status: 400, body: expect.objectContaining({ field: 'name', error: 'name may not hold control characters (a line break, a tab)' }) });
    }
    const created = (await api.post(p(), { ...valid, name: 'to-rename' })).body as { id: number };
    expect(await api.put(p(`/${created.id}`), { name: 'x\ny' })).toMatchObject({ status: 400, body: { field: 'name' } });
    // As an earlier version stored it: every view still takes it, and a rename mends it.
    await owner.query('update email.rules set name = $2 where id = $1', [created.id, 'old\r\nname']);
    expect((await api.get(p(`/${created.id}`))).body).toMatchObject({ name: 'old\r\nname' });
    expect(((await api.get(p())).body as Array<{ name: string }>).map((r) => r.name)).toContain('old\r\nname');
    expect(await api.put(p(`/${created.id}`), { enabled: false })).toMatchObject({ status: 200, body: { name: 'old\r\nname', enabled: false } });
    expect(await api.put(p(`/${created.id}`), { name: 'mended' })).toMatchObject({ status: 200, body: { name: 'mended' } });
    expect((await api.del(p(`/${created.id}`))).status).toBe(204);
  });

  it('names are unique in the tenant (409), not across tenants', async () => {
    const again = await api.post(p(), { ...valid });
    expect(again.status).toBe(409);
    expect(again.body).toMatchObject({ field: 'name' });
    expect((await other.post('/api/tenants/2/email-rules', valid)).status).toBe(201);
  });

  it('updates only the fields present', async () => {
    const created = (await api.post(p(), { ...valid, name: 'to-update' })).body as { id: number };
    const r = await api.put(p(`/${created.id}`), { enabled: false, recipient: 'x@example.com' });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ ...valid, id: created.id, name: 'to-update', enabled: false, recipient: 'x@example.com' });
    expect((await api.put(p(`/${created.id}`), {})).status).toBe(400);
    expect((await api.put(p(`/${created.id}`), { eventTypes: ['*'] })).body).toMatchObject({ field: 'eventTypes[0]' });
    expect((await api.put(p(`/${created.id}`), { name: 'ops' })).status).toBe(409);
    expect((await api.get(p(`/${created.id}`))).body).toMatchObject({ name: 'to-update', eventTypes: valid.eventTypes });
  });

  it('deletes softly: 204, then gone from list, get, update and delete; the name is free again', async () => {
    const created = (await api.post(p(), { ...valid, name: 'to-delete' })).body as { id: number };
    const del = await api.del(p(`/${created.id}`));
    expect(del.status).toBe(204);
    expect(del.text).toBe('');
    expect(((await api.get(p())).body as Array<{ id: number }>).map((r) => r.id)).not.toContain(created.id);
    expect((await api.get(p(`/${created.id}`))).status).toBe(404);
    expect((await api.put(p(`/${created.id}`), { enabled: true })).status).toBe(404);
    expect((await api.del(p(`/${created.id}`))).status).toBe(404);
    const { rows } = await owner.query('select deleted_at from email.rules where id = $1', [created.id]);
    expect(rows[0].deleted_at).toBeInstanceOf(Date);
    expect((await api.post(p(), { ...valid, name: 'to-delete' })).status).toBe(201);
  });

  it('another tenant\'s rule is a 404 under your own {tid}; another {tid} is a body-less 403', async () => {
    const theirs = (await other.post('/api/tenants/2/email-rules', { ...valid, name: 'theirs' })).body as { id: number };
    expect((await api.get(p(`/${theirs.id}`))).status).toBe(404);
    expect((await api.put(p(`/${theirs.id}`), { enabled: false })).status).toBe(404);
    expect((await api.del(p(`/${theirs.id}`))).status).toBe(404);
    expect(((await api.get(p())).body as Array<{ name: string }>).map((r) => r.name)).not.toContain('theirs');
    expect(shape(await api.get('/api/tenants/2/email-rules'))).toEqual(EMPTY_403);
    expect(shape(await api.post('/api/tenants/2/email-rules', { ...valid, name: 'sneaky' }))).toEqual(EMPTY_403);
    expect(shape(await api.del(`/api/tenants/2/email-rules/${theirs.id}`))).toEqual(EMPTY_403);
    expect((await other.get(`/api/tenants/2/email-rules/${theirs.id}`)).status).toBe(200);
  });

  it('is in the OpenAPI document', async () => {
    const doc = (await (await fetch(`${hub.url}/q/openapi`, { headers: { accept: 'application/json' } })).json()) as { paths: Record<string, Record<string, unknown>> };
    expect(Object.keys(doc.paths['/api/tenants/{tid}/email-rules'] ?? {}).sort()).toEqual(['get', 'post']);
    expect(Object.keys(doc.paths['/api/tenants/{tid}/email-rules/{id}'] ?? {}).sort()).toEqual(['delete', 'get', 'put']);
  });
});
