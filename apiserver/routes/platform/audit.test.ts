import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { startIssuer, type TestIssuer } from '../../../test/harness/tokens.js';
import { type Client, client, EMPTY_403, ISO, ownerClient, shape, tokenClient } from '../../../test/harness/api-client.js';

/**
 * GET /api/platform/audit on real PostgreSQL: a dev-bypass hub (tenants 1 and 2, each admin sees its
 * own entries only; filters; paging), and an OIDC hub on the same database for the role gate.
 */

let hub: TestHub;
let oidc: TestHub;
let issuer: TestIssuer;
let owner: pg.Client;
const T = 1;
const OTHER = 2;

type Entry = { at: string; actor: string; action: string; target: string; outcome: string; status: number | null; requestId: string | null; homeTenantId: number | null; impersonating: boolean };

const as = (tenant: number, user: string, acting?: number): Client =>
  client(hub.url, { 'X-Tenant-ID': String(tenant), 'X-User-ID': user, ...(acting !== undefined ? { 'X-Impersonate-Tenant': String(acting) } : {}) });

beforeAll(async () => {
  hub = await startTestHub();
  issuer = await startIssuer();
  oidc = await startTestHub({ 'svc.oidc.issuer': issuer.issuer, 'svc.oidc.jwks-uri': issuer.jwksUri, 'svc.datasource.url': hub.ownerUrl });
  owner = await ownerClient(hub.ownerUrl);
  await owner.query(`insert into core.tenants (id, code, name) values (${OTHER}, 'other', 'Other')`);
});

afterAll(async () => {
  await owner?.end();
  await oidc?.stop();
  await hub?.stop();
  await issuer?.close();
});

/** Entries written as the recorder writes them, at chosen instants (`at` in ms from a fixed start). */
async function seed(tenant: number, rows: Array<{ actor: string; action?: string; outcome?: 'success' | 'failure'; status?: number; at: number }>): Promise<void> {
  const start = Date.parse('2026-06-01T00:00:00.000Z');
  for (const r of rows) {
    await owner.query(
      `insert into audit.entries (tenant_id, actor, action, target, outcome, status, request_id, at, home_tenant_id, impersonating)
       values ($1, $2, $3, '/api/x', $4, $5, null, $6, $1, false)`,
      [tenant, r.actor, r.action ?? 'POST /api/x', r.outcome ?? 'success', r.status ?? 200, new Date(start + r.at)],
    );
  }
}

const next = (link: string | null) => (link ? /^<([^>]+)>; rel="next"$/.exec(link)![1]! : undefined);

describe('GET /api/platform/audit', () => {
  it('each tenant\'s admin sees its own entries only, newest first; impersonated calls in the tenant acted as', async () => {
    expect((await as(T, 'ann').post(`/api/tenants/${T}/orgs`, { code: 'ann-org', name: 'Ann' })).status).toBe(201);
    expect((await as(OTHER, 'bob').post(`/api/tenants/${OTHER}/orgs`, { code: 'bob-org', name: 'Bob' })).status).toBe(201);
    // Sue of tenant 1 acting as tenant 2.
    expect((await as(T, 'sue', OTHER).post(`/api/tenants/${OTHER}/orgs`, { code: 'sue-org', name: 'Sue' })).status).toBe(201);

    const mine = await as(T, 'ann').get('/api/platform/audit');
    expect(mine.status).toBe(200);
    expect(mine.body).toEqual([
      {
        at: expect.stringMatching(ISO), actor: 'ann', action: 'POST /api/tenants/{tid}/orgs', target: `/api/tenants/${T}/orgs`,
        outcome: 'success', status: 201, requestId: expect.any(String), homeTenantId: T, impersonating: false,
      },
    ]);
    const theirs = (await as(OTHER, 'bob').get('/api/platform/audit')).body as Entry[];
    expect(theirs.map((e) => [e.actor, e.target, e.homeTenantId, e.impersonating])).toEqual([
      ['sue', `/api/tenants/${OTHER}/orgs`, T, true],
      ['bob', `/api/tenants/${OTHER}/orgs`, OTHER, false],
    ]);
    expect(theirs[0]!.at >= theirs[1]!.at).toBe(true);
    // Reading the trail is not itself recorded.
    expect((await as(T, 'ann').get('/api/platform/audit')).body).toHaveLength(1);
  });

  it('filters by actor, action, outcome, since and until; a bad instant is a 400 naming it', async () => {
    await seed(T, [
      { actor: 'flt', action: 'POST /api/a', at: 1000 },
      { actor: 'flt', action: 'DELETE /api/a/{id}', outcome: 'failure', status: 404, at: 2000 },
      { actor: 'flt', action: 'POST /api/a', at: 3000 },
      { actor: 'flt-other', action: 'POST /api/a', at: 2500 },
    ]);
    await seed(OTHER, [{ actor: 'flt', action: 'POST /api/a', at: 2000 }]);
    const ats = async (query: string) => {
      const r = await as(T, 'ann').get(`/api/platform/audit?${query}`);
      expect(r.status).toBe(200);
      return (r.body as Entry[]).map((e) => `${e.actor} ${e.at.slice(17, 19)}`);
    };
    expect(await ats('actor=flt')).toEqual(['flt 03', 'flt 02', 'flt 01']);
    expect(await ats('actor=flt&action=POST%20/api/a')).toEqual(['flt 03', 'flt 01']);
    expect(await ats('action=POST%20/api')).toEqual([]);
    expect(await ats('actor=flt&outcome=failure')).toEqual(['flt 02']);
    expect(await ats('since=2026-06-01T00:00:02Z&until=2026-06-01T00:00:03Z')).toEqual(['flt-other 02', 'flt 02']);
    expect(await ats('actor=flt&since=2026-06-01T02:00:02.500%2B02:00')).toEqual(['flt 03']);
    for (const [name, value] of [['since', 'yesterday'], ['until', '2026-06-01'], ['since', '2026-06-01T00:00:00'], ['until', '2026-12-31T23:59:60Z']] as const) {
      const r = await as(T, 'ann').get(`/api/platform/audit?${name}=${value}`);
      expect(r.status).toBe(400);
      expect(r.body).toMatchObject({ error: expect.stringContaining(name), field: name });
    }
    expect((await as(T, 'ann').get('/api/platform/audit?outcome=maybe')).body).toMatchObject({ field: 'outcome' });
  });

  it('pages newest first over more than one page (Link, before), ties on the instant included', async () => {
    await seed(T, [0, 1, 1, 1, 2, 3, 4].map((at) => ({ actor: 'pager', at: 10_000 + at })));
    await seed(OTHER, [{ actor: 'pager', at: 10_002 }]);
    const all = (await as(T, 'ann').get('/api/platform/audit?actor=pager')).body as Entry[];
    expect(all).toHaveLength(7);
    let path: string | undefined = '/api/platform/audit?actor=pager&limit=2';
    const pages: Entry[][] = [];
    while (path) {
      const r = await as(T, 'ann').get(path);
      expect(r.status).toBe(200);
      pages.push(r.body as Entry[]);
      path = next(r.headers.get('link'));
      if (path) expect(path).toMatch(/^\/api\/platform\/audit\?actor=pager&before=[A-Za-z0-9_-]+&limit=2$/);
    }
    expect(pages.map((p) => p.length)).toEqual([2, 2, 2, 1]);
    expect(pages.flat()).toEqual(all);
    expect(all.map((e) => e.at.slice(20, 23))).toEqual(['004', '003', '002', '001', '001', '001', '000']);
    // A limit above 200 reads as 200; a cursor of another list is a 400 naming before.
    expect((await as(T, 'ann').get('/api/platform/audit?actor=pager&limit=100000')).body).toHaveLength(7);
    const runsCursor = Buffer.from(JSON.stringify(['runs', '2026-06-01T00:00:00.000000Z', '00000000-0000-4000-8000-000000000001'])).toString('base64url');
    expect((await as(T, 'ann').get(`/api/platform/audit?before=${runsCursor}`)).body).toMatchObject({ field: 'before' });
  });

  it('is refused without svc_admin (empty 403) and without svc_integrator (the /api/platform floor)', async () => {
    const TT = 7;
    await owner.query(`insert into core.tenants (id, code, name) values (${TT}, 'gate', 'Gate')`);
    const mint = (roles: string[]) => issuer.mint({ tenant_id: TT, realm_access: { roles } }, { subject: `audit-${roles.join('-')}` });
    expect(shape(await tokenClient(oidc.url, await mint(['svc_integrator', 'svc_user'])).get('/api/platform/audit'))).toEqual(EMPTY_403);
    const floor = await tokenClient(oidc.url, await mint(['svc_admin'])).get('/api/platform/audit');
    expect([floor.status, floor.text]).toEqual([403, 'missing role svc_integrator']);
    const admin = await tokenClient(oidc.url, await mint(['svc_integrator', 'svc_admin'])).get('/api/platform/audit');
    expect(admin.status).toBe(200);
    expect(admin.body).toEqual([]);
  });
});
