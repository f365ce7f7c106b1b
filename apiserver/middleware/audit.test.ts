import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { purgeAudit } from '../../src/audit/recorder.js';
import { ValidationError } from '../../src/errors.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { route, type RouteDecl } from '../route.js';

const probes: RouteDecl[] = [
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

async function entries() {
  const deadline = Date.now() + 3000;
  while (hub.services.audit.pending() > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  await new Promise((r) => setTimeout(r, 150));
  const { rows } = await owner.query('select tenant_id, actor, action, target, outcome, status, request_id from audit.entries order by id');
  return rows;
}

describe('audit', () => {
  it('records every mutating call and every data egress, buffered and flushed on the clock', async () => {
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

  it('a stopping hub flushes what is still buffered', async () => {
    const own = await startTestHub({ 'svc.audit.dispatch-every': '1h' }, probes);
    await fetch(`${own.url}/api/probe/things`, { method: 'POST', headers: { 'X-Tenant-ID': '1', 'Content-Type': 'application/json' }, body: '{"name":"b"}' });
    expect(own.services.audit.pending()).toBe(1);
    await own.stop();
    const client = new pg.Client({ connectionString: own.ownerUrl });
    await client.connect();
    const { rows } = await client.query('select action from audit.entries');
    await client.end();
    expect(rows).toEqual([{ action: 'POST /api/probe/things' }]);
  });
});
