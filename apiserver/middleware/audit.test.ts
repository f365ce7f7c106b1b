import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { purgeAudit } from '../../src/audit/recorder.js';
import { ValidationError } from '../../src/errors.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { route, type RouteDecl } from '../route.js';
import { until } from '../../test/harness/until.js';

/** Calls of the `users` probe wait here after their transaction committed, until the test lets them go. */
const held = new Map<string, { reached: () => void; release: Promise<void> }>();

const probes: RouteDecl[] = [
  // Writes a user in the caller's tenant; `hold` parks the call after its commit, `fail` throws after
  // the insert (inside the transaction), `failAfter` throws after the commit.
  route({
    method: 'POST', path: '/api/probe/users', operationId: 'probeUser', summary: 'user', tags: ['Probe'], auth: ['svc_admin'],
    body: { type: 'object', required: ['login'], properties: { login: { type: 'string' }, mode: { type: 'string' } } },
    responses: { 201: { description: 'created' } },
    handler: async ({ body, principal, services, ctx }) => {
      const { login, mode } = body as { login: string; mode?: string };
      await services.db.withTenant(principal!.tenantId, async (tx) => {
        await tx.query('select 1'); // a read first: the entry waits for the write
        await tx.query('insert into core.users (tenant_id, login) values ($1, $2)', [principal!.tenantId, login]);
        if (mode === 'fail') throw new ValidationError('refused inside the transaction', 'mode');
      });
      if (mode === 'failAfter') throw new Error('boom after the commit');
      // The database lost after the commit (as pg-pool says when no connection comes in time).
      if (mode === 'unavailableAfter') throw new Error('timeout exceeded when trying to connect');
      const parked = held.get(login);
      if (parked) {
        parked.reached();
        await parked.release;
      }
      ctx.status = 201;
      return { login };
    },
  }),
  route({
    method: 'POST', path: '/api/probe/things', operationId: 'probeCreate', summary: 'create', tags: ['Probe'], auth: ['svc_admin'],
    body: { type: 'object', required: ['name'], properties: { name: { type: 'string' } } },
    responses: { 201: { description: 'created' } },
    handler: ({ body, ctx }) => {
      if ((body as { name: string }).name === 'taken') throw new ValidationError('name taken', 'name');
      ctx.status = 201;
      return { ok: true };
    },
  }),
  route({
    method: 'GET', path: '/api/probe/things', operationId: 'probeList', summary: 'list', tags: ['Probe'], auth: ['svc_admin'],
    responses: { 200: { description: 'list' } },
    handler: () => [],
  }),
  route({
    method: 'GET', path: '/api/probe/rows/{id}', operationId: 'probeRow', summary: 'raw row', tags: ['Probe'], auth: ['svc_admin'], audit: 'egress',
    responses: { 200: { description: 'row' } },
    handler: ({ params }) => ({ id: params.id }),
  }),
];

let hub: TestHub;
let owner: pg.Client;

beforeAll(async () => {
  hub = await startTestHub({ 'svc.audit.dispatch-every': '100ms' }, probes);
  owner = new pg.Client({ connectionString: hub.ownerUrl });
  await owner.connect();
});

afterAll(async () => {
  await owner.end();
  await hub.stop();
});

/** What the database holds right now: no waiting, the entries must be there when the response is. */
async function entries(action?: string) {
  const { rows } = await owner.query(
    `select tenant_id, actor, action, target, outcome, status, request_id from audit.entries where $1::text is null or action = $1 order by id`,
    [action ?? null],
  );
  return rows;
}

describe('audit', () => {
  it('records every mutating call and every data egress, in the database when the response arrives', async () => {
    const headers = { 'X-Tenant-ID': '1', 'X-User-ID': 'alice', 'Content-Type': 'application/json' };
    const ok = await fetch(`${hub.url}/api/probe/things`, { method: 'POST', headers, body: JSON.stringify({ name: 'a' }) });
    expect(ok.status).toBe(201);
    const refused = await fetch(`${hub.url}/api/probe/things`, { method: 'POST', headers, body: JSON.stringify({ name: 'taken' }) });
    expect(refused.status).toBe(400);
    await fetch(`${hub.url}/api/probe/things`, { headers });
    await fetch(`${hub.url}/api/probe/rows/42`, { headers });
    const rows = await entries();
    expect(rows).toEqual([
      { tenant_id: 1, actor: 'alice', action: 'POST /api/probe/things', target: '/api/probe/things', outcome: 'success', status: 201, request_id: ok.headers.get('x-request-id') },
      { tenant_id: 1, actor: 'alice', action: 'POST /api/probe/things', target: '/api/probe/things', outcome: 'failure', status: 400, request_id: refused.headers.get('x-request-id') },
      { tenant_id: 1, actor: 'alice', action: 'GET /api/probe/rows/{id}', target: '/api/probe/rows/42', outcome: 'success', status: 200, request_id: expect.any(String) },
    ]);
  });

  it('is readable per tenant only', async () => {
    const mine = await hub.services.db.withTenant(1, (tx) => tx.query('select count(*)::int as n from audit.entries'));
    const theirs = await hub.services.db.withTenant(0, (tx) => tx.query('select count(*)::int as n from audit.entries'));
    expect(mine.rows[0]?.n).toBeGreaterThan(0);
    expect(theirs.rows[0]?.n).toBe(0);
  });

  it('the daily purge removes entries past the retention; 0 disables it', async () => {
    await owner.query(`insert into audit.entries (tenant_id, actor, action, target, outcome, at) values
      (1, 'old', 'POST /x', '/x', 'success', now() - interval '400 days'),
      (1, 'recent', 'POST /x', '/x', 'success', now() - interval '10 days')`);
    expect(await purgeAudit(hub.services.db, 0)).toBe(0);
    expect(await purgeAudit(hub.services.db, 365)).toBe(1);
    const { rows } = await owner.query(`select actor from audit.entries where actor in ('old', 'recent')`);
    expect(rows).toEqual([{ actor: 'recent' }]);
  });

  it('the daily purge deletes in short transactions: the batches before a row it waits on are committed already', async () => {
    const { rows: made } = await owner.query<{ id: string }>(
      `insert into audit.entries (tenant_id, actor, action, target, outcome, at)
       select 1, 'batched', 'POST /x', '/x', 'success', now() - interval '400 days' + n * interval '1 second' from generate_series(1, 5) n
       returning id`,
    );
    const ids = made.map((r) => Number(r.id)).sort((a, b) => a - b);
    // Another transaction holds the newest of them: the purge, two entries a transaction, waits on it in its third.
    const holder = new pg.Client({ connectionString: hub.ownerUrl });
    await holder.connect();
    let purge: Promise<number> | undefined;
    try {
      await holder.query('begin');
      await holder.query('select id from audit.entries where id = $1 for update', [ids[4]]);
      purge = purgeAudit(hub.services.db, 365, 2);
      await until('the purge to wait on the held entry', async () => {
        const { rows } = await owner.query("select 1 from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query ilike '%delete from audit.entries%'");
        return rows.length > 0;
      });
      // What it deleted before is gone for every reader: no transaction of the purge is held open over it.
      const { rows } = await owner.query(`select id from audit.entries where actor = 'batched' order by id`);
      expect(rows.map((r) => Number(r.id))).toEqual([ids[4]]);
    } finally {
      await holder.query('commit');
      await holder.end();
    }
    expect(await purge).toBe(5);
  });

  it('nothing is buffered: the entry is written before the response, whatever the flush clock', async () => {
    const own = await startTestHub({ 'svc.audit.dispatch-every': '1h' }, probes);
    const client = new pg.Client({ connectionString: own.ownerUrl });
    await client.connect();
    try {
      const res = await fetch(`${own.url}/api/probe/things`, { method: 'POST', headers: { 'X-Tenant-ID': '1', 'Content-Type': 'application/json' }, body: '{"name":"b"}' });
      expect(res.status).toBe(201);
      expect(own.services.audit.pending()).toBe(0);
      const { rows } = await client.query('select action, status from audit.entries');
      expect(rows).toEqual([{ action: 'POST /api/probe/things', status: 201 }]);
    } finally {
      await client.end();
      await own.stop();
    }
  });

  it("commits with the call's own write: present (status not yet known) as soon as that transaction committed", async () => {
    let reached!: () => void;
    const atHold = new Promise<void>((resolve) => {
      reached = resolve;
    });
    let release!: () => void;
    held.set('held-hana', { reached, release: new Promise<void>((resolve) => (release = resolve)) });
    const headers = { 'X-Tenant-ID': '1', 'X-User-ID': 'alice', 'Content-Type': 'application/json' };
    const pending = fetch(`${hub.url}/api/probe/users`, { method: 'POST', headers, body: JSON.stringify({ login: 'held-hana' }) });
    await atHold;
    // The call is still running (a process killed now would never answer): its write and its entry are both there.
    expect((await owner.query(`select count(*)::int as n from core.users where login = 'held-hana'`)).rows[0].n).toBe(1);
    const during = await owner.query(`select tenant_id, actor, target, outcome, status, request_id, xmin::text as xmin from audit.entries where action = 'POST /api/probe/users'`);
    const user = await owner.query(`select xmin::text as xmin from core.users where login = 'held-hana'`);
    expect(during.rows).toEqual([{ tenant_id: 1, actor: 'alice', target: '/api/probe/users', outcome: 'success', status: null, request_id: expect.any(String), xmin: user.rows[0].xmin }]);
    release();
    const res = await pending;
    expect(res.status).toBe(201);
    expect(await entries('POST /api/probe/users')).toEqual([
      { tenant_id: 1, actor: 'alice', action: 'POST /api/probe/users', target: '/api/probe/users', outcome: 'success', status: 201, request_id: res.headers.get('x-request-id') },
    ]);
    held.delete('held-hana');
  });

  it('a call whose transaction rolls back leaves one failure entry and no write; one that fails after its commit leaves one entry marked failed', async () => {
    await owner.query(`delete from audit.entries where action = 'POST /api/probe/users'`);
    const headers = { 'X-Tenant-ID': '1', 'X-User-ID': 'bob', 'Content-Type': 'application/json' };
    const refused = await fetch(`${hub.url}/api/probe/users`, { method: 'POST', headers, body: JSON.stringify({ login: 'rolled-back-rob', mode: 'fail' }) });
    expect(refused.status).toBe(400);
    const broken = await fetch(`${hub.url}/api/probe/users`, { method: 'POST', headers, body: JSON.stringify({ login: 'committed-cora', mode: 'failAfter' }) });
    expect(broken.status).toBe(500);
    const users = await owner.query(`select login from core.users where login in ('rolled-back-rob', 'committed-cora')`);
    expect(users.rows).toEqual([{ login: 'committed-cora' }]);
    expect(await entries('POST /api/probe/users')).toEqual([
      { tenant_id: 1, actor: 'bob', action: 'POST /api/probe/users', target: '/api/probe/users', outcome: 'failure', status: 400, request_id: refused.headers.get('x-request-id') },
      { tenant_id: 1, actor: 'bob', action: 'POST /api/probe/users', target: '/api/probe/users', outcome: 'failure', status: 500, request_id: broken.headers.get('x-request-id') },
    ]);
  });

  it('a call that committed and then found the database unavailable: its 503 is completed on its row by the next flush, not left a success', async () => {
    const headers = { 'X-Tenant-ID': '1', 'X-User-ID': 'una', 'Content-Type': 'application/json' };
    const res = await fetch(`${hub.url}/api/probe/users`, { method: 'POST', headers, body: JSON.stringify({ login: 'unavailable-uma', mode: 'unavailableAfter' }) });
    expect(res.status).toBe(503);
    const ofIt = async () => (await entries('POST /api/probe/users')).filter((r) => r.request_id === res.headers.get('x-request-id'));
    // Inserted with the call's write (status unknown yet); the completion waits for the flush clock.
    await until('the entry to be completed', async () => (await ofIt())[0]?.status === 503, { timeoutMs: 5_000 });
    expect(await ofIt()).toEqual([{ tenant_id: 1, actor: 'una', action: 'POST /api/probe/users', target: '/api/probe/users', outcome: 'failure', status: 503, request_id: res.headers.get('x-request-id') }]);
  });

  it('an impersonating call is recorded in the tenant it acted as, with the home tenant and impersonating true', async () => {
    await owner.query(`insert into core.tenants (id, code, name, active) values (7, 'audit-seven', 'Seven', true) on conflict do nothing`);
    const as = (home: string, acting?: string) => ({ 'X-Tenant-ID': home, 'X-User-ID': 'sue', 'Content-Type': 'application/json', ...(acting ? { 'X-Impersonate-Tenant': acting } : {}) });
    // A write (the entry commits with it), a call that writes nothing (inserted whole at the end), and the caller's own tenant.
    const wrote = await fetch(`${hub.url}/api/probe/users`, { method: 'POST', headers: as('1', '7'), body: JSON.stringify({ login: 'imp-ivy' }) });
    expect(wrote.status).toBe(201);
    const refused = await fetch(`${hub.url}/api/probe/things`, { method: 'POST', headers: as('1', '7'), body: JSON.stringify({ name: 'taken' }) });
    expect(refused.status).toBe(400);
    const own = await fetch(`${hub.url}/api/probe/things`, { method: 'POST', headers: as('1'), body: JSON.stringify({ name: 'own' }) });
    expect(own.status).toBe(201);
    const ids = [wrote, refused, own].map((r) => r.headers.get('x-request-id'));
    const { rows } = await owner.query(
      'select request_id, tenant_id, home_tenant_id, impersonating, actor, status from audit.entries where request_id = any($1) order by id',
      [ids],
    );
    expect(rows).toEqual([
      { request_id: ids[0], tenant_id: 7, home_tenant_id: 1, impersonating: true, actor: 'sue', status: 201 },
      { request_id: ids[1], tenant_id: 7, home_tenant_id: 1, impersonating: true, actor: 'sue', status: 400 },
      { request_id: ids[2], tenant_id: 1, home_tenant_id: 1, impersonating: false, actor: 'sue', status: 201 },
    ]);
    // The retry buffer keeps them too.
    hub.services.audit.record({ tenantId: 7, homeTenantId: 1, impersonating: true, actor: 'retry-imp', action: 'POST /x', target: '/x', outcome: 'success', status: 200, at: new Date() });
    expect(await hub.services.audit.flush()).toBe(1);
    expect((await owner.query(`select tenant_id, home_tenant_id, impersonating from audit.entries where actor = 'retry-imp'`)).rows).toEqual([
      { tenant_id: 7, home_tenant_id: 1, impersonating: true },
    ]);
  });

  it('a refused call is recorded as the platform (tenant 0, anonymous)', async () => {
    // The dev bypass refuses a non-numeric tenant header before the handler.
    const res = await fetch(`${hub.url}/api/probe/things`, { method: 'POST', headers: { 'X-Tenant-ID': 'acme', 'Content-Type': 'application/json' }, body: '{"name":"c"}' });
    expect(res.status).toBe(400);
    const rows = (await entries('POST /api/probe/things')).filter((r) => r.request_id === res.headers.get('x-request-id'));
    expect(rows).toEqual([{ tenant_id: 0, actor: 'anonymous', action: 'POST /api/probe/things', target: '/api/probe/things', outcome: 'failure', status: 400, request_id: res.headers.get('x-request-id') }]);
  });

  it('refused anonymous calls are one row per action, status and minute, with their count (a flood does not grow the trail)', async () => {
    const refused = () => fetch(`${hub.url}/api/probe/users`, { method: 'POST', headers: { 'X-Tenant-ID': 'acme', 'Content-Type': 'application/json' }, body: '{"login":"x"}' });
    const first = await refused();
    expect(first.status).toBe(400);
    // Written with the first call, as any entry: in the database when its answer arrives.
    const written = await owner.query(`select tenant_id, actor, target, outcome, status, request_id, count from audit.entries where action = 'POST /api/probe/users' and actor = 'anonymous'`);
    expect(written.rows).toEqual([{ tenant_id: 0, actor: 'anonymous', target: '/api/probe/users', outcome: 'failure', status: 400, request_id: first.headers.get('x-request-id'), count: 1 }]);
    for (let i = 0; i < 199; i++) expect((await refused()).status).toBe(400);
    // Two flushes at once (the clock's and another) add each call once.
    await Promise.all([hub.services.audit.flush(), hub.services.audit.flush()]);
    const { rows } = await owner.query<{ status: number; count: number }>(`select status, count from audit.entries where action = 'POST /api/probe/users' and actor = 'anonymous' order by id`);
    // One row, or two when a minute ended during the calls.
    expect(rows.length).toBeLessThanOrEqual(2);
    expect(rows.reduce((sum, r) => sum + r.count, 0)).toBe(200);
    // An identified caller's calls are still one row each.
    const before = (await entries('POST /api/probe/things')).length;
    for (const name of ['taken', 'taken']) expect((await fetch(`${hub.url}/api/probe/things`, { method: 'POST', headers: { 'X-Tenant-ID': '1', 'Content-Type': 'application/json' }, body: JSON.stringify({ name }) })).status).toBe(400);
    expect((await entries('POST /api/probe/things')).length).toBe(before + 2);
  });

  it('an entry a call could not write is buffered and written by the next flush', async () => {
    hub.services.audit.record({ tenantId: 1, actor: 'retry', action: 'POST /x', target: '/x', outcome: 'success', status: 200, at: new Date() });
    expect(hub.services.audit.pending()).toBe(1);
    expect(await hub.services.audit.flush()).toBe(1);
    expect((await owner.query(`select status from audit.entries where actor = 'retry'`)).rows).toEqual([{ status: 200 }]);
    // Text PostgreSQL cannot store (NUL, from a token claim say) does not poison the buffer.
    hub.services.audit.record({ tenantId: 1, actor: 'nul\u0000actor', action: 'POST /x', target: '/x\u0000', outcome: 'failure', status: 400, at: new Date() });
    expect(await hub.services.audit.flush()).toBe(1);
    expect((await owner.query(`select target from audit.entries where actor = 'nul\uFFFDactor'`)).rows).toEqual([{ target: '/x\uFFFD' }]);
  });
});
