import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { ownerClient } from '../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../test/harness/hub.js';

/**
 * The growing lists paged (apiserver/paging.ts): runs, dead letters, deliveries (the tenant's and an
 * integration's), export runs and the inbox. Walking a list by its `Link` headers meets every item
 * once, in the order of the whole list, with the filters kept, the last page without a `Link`; a
 * cursor the hub did not make for that list is a 400 naming `before`; a `limit` above 200 reads as
 * 200 on every list; and a cursor moves within the caller's tenant only. Rows are written with the
 * owner connection, at chosen instants (several to the same microsecond, across a page's edge).
 */

let hub: TestHub;
let owner: pg.Client;
const H = { 'X-Tenant-ID': '1' };
const H2 = { 'X-Tenant-ID': '2' };

const ALPHA = 'a0000000-0000-4000-8000-000000000000';
const BETA = 'b0000000-0000-4000-8000-000000000000';
const RUN = 'c0000000-0000-4000-8000-000000000000';
let integration: number;
let otherIntegration: number;

const uuid = (n: number, tenant = 1) => `${String(tenant).padStart(8, '0')}-0000-4000-8000-${String(n).padStart(12, '0')}`;

beforeAll(async () => {
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
  await owner.query(`insert into core.tenants (id, code, name) values (2, 'other', 'Other'), (3, 'bulk', 'Bulk')`);
  // Runs: three started in the same microsecond, two within one millisecond, and tenant 2's between them.
  const runs: Array<[string, number, string, string, string]> = [
    [uuid(1), 1, ALPHA, 'alpha', '2030-01-01 00:00:00.000500+00'],
    [uuid(2), 1, ALPHA, 'alpha', '2030-01-01 00:00:00.000500+00'],
    [uuid(3), 1, BETA, 'beta', '2030-01-01 00:00:00.000500+00'],
    [uuid(4), 1, ALPHA, 'alpha', '2030-01-01 00:00:00.000400+00'],
    [uuid(5), 1, BETA, 'beta', '2030-01-01 00:00:00.000401+00'],
    [uuid(6), 1, ALPHA, 'alpha', '2029-06-01 00:00:00+00'],
    [uuid(7), 1, ALPHA, 'alpha', '2029-01-01 00:00:00+00'],
    [RUN, 1, ALPHA, 'alpha', '2028-01-01 00:00:00+00'],
    [uuid(1, 2), 2, ALPHA, 'alpha', '2030-01-01 00:00:00.000500+00'],
    [uuid(2, 2), 2, ALPHA, 'alpha', '2029-03-01 00:00:00+00'],
  ];
  for (const [id, tenant, connectorId, name, at] of runs) {
    await owner.query(`insert into connectors.runs (id, tenant_id, connector_id, connector_name, status, triggered_by, started_at) values ($1, $2, $3, $4, 'Completed', 'manual', $5)`, [id, tenant, connectorId, name, at]);
  }
  // Tenant 3: more runs than a page holds.
  await owner.query(
    `insert into connectors.runs (tenant_id, connector_id, connector_name, status, triggered_by, started_at)
     select 3, $1, 'bulk', 'Completed', 'manual', timestamptz '2030-01-01' - n * interval '1 second' from generate_series(1, 205) n`,
    [ALPHA],
  );
  // Tenant 2's rows first (smaller ids than tenant 1's), then tenant 1's.
  // Dead letters: two of tenant 2; five of run RUN unresolved, one resolved (its history only).
  await owner.query(`insert into connectors.dead_letters (tenant_id, run_id, connector_id, skip_reason, error_message) select 2, $1, $2, 'mapping', 'theirs' from generate_series(1, 2)`, [uuid(1, 2), ALPHA]);
  await owner.query(
    `insert into connectors.dead_letters (tenant_id, run_id, connector_id, skip_reason, error_message, resolution)
     select 1, $1, $2, 'mapping', 'entry ' || n, case when n = 3 then 'discarded' end from generate_series(1, 6) n`,
    [RUN, ALPHA],
  );
  // Deliveries: failures and successes interleaved by id, two integrations, and tenant 2's.
  const made = async (tenant: number, name: string) =>
    Number((await owner.query(`insert into hub.integrations (tenant_id, name, target_url, auth_mode, event_types) values ($1, $2, 'http://127.0.0.1:9/', 'NONE', array['org.created']) returning id`, [tenant, name])).rows[0].id);
  integration = await made(1, 'paging');
  const second = await made(1, 'second');
  otherIntegration = await made(2, 'theirs');
  let event = 0;
  const delivery = async (tenant: number, integrationId: number, succeeded: boolean) =>
    owner.query(`insert into hub.deliveries (tenant_id, integration_id, kind, event_id, event_type, body, attempts, succeeded) values ($1, $2, 'event', $3, 'org.created', '{}', 1, $4)`, [
      tenant,
      integrationId,
      ++event,
      succeeded,
    ]);
  for (const succeeded of [false, true]) await delivery(2, otherIntegration, succeeded);
  for (const succeeded of [false, true, false, true, true, false, true]) await delivery(1, integration, succeeded);
  for (const succeeded of [true, false]) await delivery(1, second, succeeded);
  // Export runs of an export since deleted (its history stays): two started in the same microsecond.
  const exportRun = (tenant: number, n: number, at: string) =>
    owner.query(
      `insert into exports.runs (id, tenant_id, export_id, export_name, entity, scope, destination, status, trigger, artifact_time, started_at, ended_at)
       values ($1, $2, $3, 'gone', 'partners', 'default', 'sftp', 'Completed', 'manual', $4, $4, $4)`,
      [uuid(100 + n, tenant), tenant, ALPHA, at],
    );
  for (const [n, at] of [[1, '2030-01-01 00:00:00.000001+00'], [2, '2030-01-01 00:00:00.000001+00'], [3, '2030-01-01 00:00:00.000001+00'], [4, '2029-01-01 00:00:00+00'], [5, '2028-01-01 00:00:00+00']] as const) {
    await exportRun(1, n, at);
  }
  await exportRun(2, 9, '2029-06-01 00:00:00+00');
  // Inbox items, some acknowledged.
  await owner.query(`insert into events.inbox (tenant_id, event_id, type, payload) values (2, 2000, 'decision.paging', '{}')`);
  await owner.query(
    `insert into events.inbox (tenant_id, event_id, type, payload, acked_at, acked_by)
     select 1, 1000 + n, 'decision.paging', jsonb_build_object('message', 'item ' || n), case when n % 2 = 0 then now() end, case when n % 2 = 0 then 'someone' end
       from generate_series(1, 7) n`,
  );
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

interface Answer {
  status: number;
  body: unknown;
  link: string | null;
}

async function get(path: string, headers: Record<string, string> = H): Promise<Answer> {
  const res = await fetch(`${hub.url}${path}`, { headers });
  return { status: res.status, body: await res.json(), link: res.headers.get('link') };
}

/** The path a `Link: <…>; rel="next"` names. */
function next(link: string | null): string | undefined {
  if (link === null) return undefined;
  const match = /^<(\/[^>]*)>; rel="next"$/.exec(link);
  if (!match) throw new Error(`not a next link: ${link}`);
  return match[1];
}

/** Every page from `path` on, by the Link headers: the items of each page. */
async function walk(path: string, headers: Record<string, string> = H): Promise<{ pages: unknown[][]; links: string[] }> {
  const pages: unknown[][] = [];
  const links: string[] = [];
  for (let at: string | undefined = path; at !== undefined; ) {
    const answer = await get(at, headers);
    expect({ at, status: answer.status }).toEqual({ at, status: 200 });
    pages.push(answer.body as unknown[]);
    if (answer.link) links.push(answer.link);
    at = next(answer.link);
    if (pages.length > 50) throw new Error('the pages never end');
  }
  return { pages, links };
}

const withQuery = (path: string, query: string) => `${path}${path.includes('?') ? '&' : '?'}${query}`;

const LISTS: Array<[string, string]> = [
  ['runs', '/api/platform/runs'],
  ['runs of a connector by name', '/api/platform/runs?connector=alpha'],
  ['runs of a connector by id', `/api/platform/runs?connector=${ALPHA.toUpperCase()}`],
  ['active dead letters', '/api/platform/dlq'],
  ['a run\'s dead letters', `/api/platform/dlq?run=${RUN}`],
  ['the tenant\'s deliveries', '/api/platform/deliveries'],
  ['the tenant\'s failed deliveries', '/api/platform/deliveries?status=failed'],
  ['the deliveries of one integration, across the platform list', '/api/platform/deliveries?integrationId=INTEGRATION'],
  ['an integration\'s deliveries', '/api/tenants/1/integrations/INTEGRATION/deliveries'],
  ['an integration\'s failed deliveries', '/api/tenants/1/integrations/INTEGRATION/deliveries?status=failed'],
  ['export runs', '/api/exports/gone/runs'],
  ['the inbox', '/api/inbox'],
  ['the inbox, unacknowledged', '/api/inbox?acked=false'],
];

const resolved = (path: string) => path.replaceAll('INTEGRATION', String(integration));

describe('paging the growing lists', () => {
  it.each(LISTS)('%s: pages of 2 by the Link headers meet every item once, in order, with the filters kept; the last page has no Link', async (_name, template) => {
    const path = resolved(template);
    const whole = await get(withQuery(path, 'limit=200'));
    expect(whole.status).toBe(200);
    expect(whole.link).toBeNull();
    const items = whole.body as unknown[];
    expect(items.length).toBeGreaterThan(2);
    const { pages, links } = await walk(withQuery(path, 'limit=2'));
    expect(pages.flat()).toEqual(items);
    expect(pages.map((p) => p.length)).toEqual(pages.map((_, i) => (i < pages.length - 1 ? 2 : items.length - 2 * (pages.length - 1))));
    expect(links).toHaveLength(pages.length - 1);
    const asked = new URL(path, 'http://x');
    for (const link of links) {
      const url = new URL(next(link)!, 'http://x');
      expect(url.pathname).toBe(asked.pathname);
      const kept = Object.fromEntries([...url.searchParams].filter(([k]) => k !== 'before'));
      expect(kept).toEqual({ ...Object.fromEntries(asked.searchParams), limit: '2' });
      expect(url.searchParams.get('before')).toMatch(/^[A-Za-z0-9_-]+$/);
    }
  });

  it('the runs list filters by connector on the hub: by name or id, a deleted connector\'s runs by name, nothing for a name no run has', async () => {
    const ids = async (path: string, headers = H) => ((await get(path, headers)).body as Array<{ id: string; connector: string }>).map((r) => r.id);
    expect(await ids('/api/platform/runs?connector=alpha')).toEqual([uuid(1), uuid(2), uuid(4), uuid(6), uuid(7), RUN]);
    expect(await ids(`/api/platform/runs?connector=${BETA}`)).toEqual([uuid(3), uuid(5)]);
    expect(await ids('/api/platform/runs?connector=nobody')).toEqual([]);
    // Another tenant's runs of a connector of the same name and id: only its own.
    expect(await ids('/api/platform/runs?connector=alpha', H2)).toEqual([uuid(1, 2), uuid(2, 2)]);
    // Runs in the same microsecond are ordered by id, across a page's edge.
    expect(await ids('/api/platform/runs?limit=4')).toEqual([uuid(1), uuid(2), uuid(3), uuid(5)]);
  });

  it('a limit above 200 reads as 200 on runs, dead letters and deliveries, and is refused on export runs and the inbox (1 to 200); the next page then holds the rest', async () => {
    const first = await get('/api/platform/runs?limit=500', { 'X-Tenant-ID': '3' });
    expect(first.status).toBe(200);
    expect(first.body).toHaveLength(200);
    const rest = new URL(next(first.link)!, 'http://x');
    expect(rest.searchParams.get('limit')).toBe('200');
    const { pages } = await walk(`${rest.pathname}${rest.search}`, { 'X-Tenant-ID': '3' });
    expect(pages.map((p) => p.length)).toEqual([5]);
    const all = [...(first.body as Array<{ id: string }>), ...(pages[0] as Array<{ id: string }>)].map((r) => r.id);
    expect(new Set(all).size).toBe(205);
    const ranged = (template: string) => template.startsWith('/api/inbox') || template.startsWith('/api/exports/');
    for (const template of LISTS.map(([, path]) => path)) {
      const answer = await get(withQuery(resolved(template), 'limit=201'));
      const expected = ranged(template) ? { status: 400, link: null } : { status: 200, link: null };
      expect({ template, status: answer.status, link: answer.link }).toEqual({ template, ...expected });
    }
    for (const path of ['/api/inbox', '/api/exports/gone/runs', '/api/platform/runs']) {
      for (const limit of ['0', '9007199254740992']) {
        const answer = await get(`${path}?limit=${limit}`);
        expect({ path, limit, status: answer.status, field: (answer.body as { field?: string }).field }).toEqual({ path, limit, status: 400, field: 'limit' });
      }
    }
  });

  it('a cursor the hub did not make for that list is a 400 naming before', async () => {
    const runsCursor = new URL(next((await get('/api/platform/runs?limit=1')).link)!, 'http://x').searchParams.get('before')!;
    const dlqCursor = new URL(next((await get('/api/platform/dlq?limit=1')).link)!, 'http://x').searchParams.get('before')!;
    const cursor = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
    const refused: Array<[string, string]> = [
      ['/api/platform/runs', ''],
      ['/api/platform/runs', 'x'],
      ['/api/platform/runs', `${runsCursor}=`],
      ['/api/platform/runs', dlqCursor],
      ['/api/exports/gone/runs', runsCursor],
      ['/api/platform/runs', cursor(['runs', '2030-13-01T00:00:00.000000Z', uuid(1)])],
      ['/api/platform/runs', cursor(['runs', '2030-02-30T00:00:00.000000Z', uuid(1)])],
      ['/api/platform/runs', cursor(['runs', '0000-01-01T00:00:00.000000Z', uuid(1)])],
      ['/api/platform/runs', cursor(['runs', '2030-01-01T00:00:00.000Z', uuid(1)])],
      ['/api/platform/runs', cursor(['runs', '2030-01-01T00:00:00.000000Z', 'not-a-uuid'])],
      ['/api/platform/runs', cursor(['runs', '2030-01-01T00:00:00.000000Z'])],
      ['/api/platform/dlq', cursor(['dlq', '9223372036854775808'])],
      ['/api/platform/dlq', cursor(['dlq', '0'])],
      ['/api/platform/dlq', cursor(['dlq', 5])],
      ['/api/platform/deliveries', cursor(['platform-deliveries', 'maybe', '5'])],
      ['/api/inbox', cursor({ inbox: '5' })],
      ['/api/inbox', Buffer.from('not json').toString('base64url')],
    ];
    for (const [path, before] of refused) {
      const answer = await get(`${path}?before=${before.startsWith('%') ? before : encodeURIComponent(before)}`);
      expect({ path, before, status: answer.status, field: (answer.body as { field?: string }).field }).toEqual({ path, before, status: 400, field: 'before' });
    }
    // The largest id a key may hold is taken (and names no row).
    expect((await get(`/api/platform/dlq?before=${cursor(['dlq', '9223372036854775807'])}`)).status).toBe(200);
  });

  it('a cursor moves within the caller\'s tenant only: another tenant\'s cursor lists the caller\'s own items after that key', async () => {
    const first = await get('/api/platform/runs?limit=1');
    // Tenant 2's run of the same microsecond, with a larger id, comes after the key; nothing of tenant 1's.
    const rest = await get(next(first.link)!, H2);
    expect((rest.body as Array<{ id: string }>).map((r) => r.id)).toEqual([uuid(1, 2)]);
    expect(((await get(next(rest.link)!, H2)).body as Array<{ id: string }>).map((r) => r.id)).toEqual([uuid(2, 2)]);
    const deliveries = await get('/api/platform/deliveries?limit=1');
    const theirs = (await get(next(deliveries.link)!, H2)).body as Array<{ integrationId: number; succeeded: boolean }>;
    expect(theirs.map((d) => [d.integrationId, d.succeeded])).toEqual([[otherIntegration, false]]);
    const inbox = await get('/api/inbox?limit=1');
    expect(((await get(next(inbox.link)!, H2)).body as Array<{ eventId: number }>).map((i) => i.eventId)).toEqual([2000]);
    const letters = await get('/api/platform/dlq?limit=1');
    expect(((await get(next(letters.link)!, H2)).body as Array<{ errorMessage: string }>).map((e) => e.errorMessage)).toEqual(['theirs']);
    const exported = await get('/api/exports/gone/runs?limit=1');
    expect(((await get(next(exported.link)!, H2)).body as Array<{ id: string }>).map((r) => r.id)).toEqual([uuid(109, 2)]);
  });
});
