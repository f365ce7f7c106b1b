import { afterAll, beforeAll, describe, expect, it, jest } from '@jest/globals';
import { startTestHub, type TestHub } from '../test/harness/hub.js';
import { route, type RouteDecl } from './route.js';

/**
 * The router refuses a query parameter a route does not declare (400 naming it and the names the
 * route takes), and one given twice where the route takes one value, on every route, before the
 * handler runs and before the database is asked anything (docs/architecture.md, "The error mapping").
 */

const calls = { filtered: 0, bare: 0, listed: 0 };

const probes: RouteDecl[] = [
  route({
    method: 'GET', path: '/api/probe/filtered', operationId: 'probeFiltered', summary: 'probe', tags: ['Probe'], auth: ['svc_user'],
    query: { type: 'object', properties: { connector: { type: 'string' }, limit: { type: 'integer', minimum: 1, maximum: 200, default: 50 } } },
    responses: { 200: { description: 'the query read' } },
    handler: ({ query }) => {
      calls.filtered++;
      return { query };
    },
  }),
  route({
    method: 'GET', path: '/api/probe/bare', operationId: 'probeBare', summary: 'probe', tags: ['Probe'], auth: ['svc_user'],
    responses: { 200: { description: 'the query read' } },
    handler: ({ query }) => {
      calls.bare++;
      return { query };
    },
  }),
  route({
    method: 'GET', path: '/api/probe/listed', operationId: 'probeListed', summary: 'probe', tags: ['Probe'], auth: ['svc_user'],
    query: { type: 'object', properties: { topic: { anyOf: [{ type: 'string' }, { type: 'array', items: { type: 'string' } }] } } },
    responses: { 200: { description: 'the query read' } },
    handler: ({ query }) => {
      calls.listed++;
      return { query };
    },
  }),
];

let hub: TestHub;

beforeAll(async () => {
  hub = await startTestHub({}, probes);
});

afterAll(async () => {
  await hub.stop();
});

const H = { 'X-Tenant-ID': '1' };

async function get(path: string): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${hub.url}${path}`, { headers: H });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

describe('a query parameter the route does not declare', () => {
  it('is a 400 naming it and the parameters the route takes, before the handler runs', async () => {
    const before = calls.filtered;
    expect(await get('/api/probe/filtered?conector=x')).toEqual({
      status: 400,
      body: { error: 'unknown query parameter conector: this route takes connector, limit', field: 'conector', hint: 'did you mean connector?' },
    });
    // With declared ones beside it, and in another case than declared: still refused.
    expect(await get('/api/probe/filtered?connector=x&limit=5&colour=red')).toMatchObject({ status: 400, body: { error: 'unknown query parameter colour: this route takes connector, limit', field: 'colour' } });
    expect(await get('/api/probe/filtered?Limit=5')).toMatchObject({ status: 400, body: { field: 'Limit', hint: 'did you mean limit?' } });
    // Given without a value, and with an empty name (written as a field path writes such a key).
    expect(await get('/api/probe/filtered?verbose')).toMatchObject({ status: 400, body: { field: 'verbose' } });
    expect(await get('/api/probe/filtered?=1')).toMatchObject({ status: 400, body: { error: 'unknown query parameter [""]: this route takes connector, limit', field: '[""]' } });
    expect(calls.filtered).toBe(before);
  });

  it('on a route that declares no query parameters, says it takes none', async () => {
    const before = calls.bare;
    const answer = await get('/api/probe/bare?limit=5');
    expect(answer.status).toBe(400);
    expect(answer.body).toMatchObject({ error: 'unknown query parameter limit: this route takes no query parameters', field: 'limit' });
    expect(typeof answer.body.hint).toBe('string');
    expect(calls.bare).toBe(before);
  });

  it('declared parameters still work, and a route without any still answers a request without a query', async () => {
    expect(await get('/api/probe/filtered?connector=x&limit=5')).toEqual({ status: 200, body: { query: { connector: 'x', limit: 5 } } });
    expect(await get('/api/probe/filtered')).toEqual({ status: 200, body: { query: { limit: 50 } } });
    expect(await get('/api/probe/bare')).toEqual({ status: 200, body: { query: {} } });
    expect(await get('/api/probe/bare?')).toEqual({ status: 200, body: { query: {} } });
  });

  it('on a real route, is refused before the database is asked anything', async () => {
    // Once as a valid request: the tenant directory is read (and cached) as for any request.
    expect((await get('/api/platform/runs?connector=x')).status).toBe(200);
    const db = hub.services.db;
    const spies = (['withTenant', 'readWithTenant', 'withoutTenant', 'crossTenant', 'crossTenantQuery'] as const).map((name) => jest.spyOn(db, name));
    try {
      expect(await get('/api/platform/runs?conector=x')).toEqual({
        status: 400,
        body: { error: 'unknown query parameter conector: this route takes connector, limit, before', field: 'conector', hint: 'did you mean connector?' },
      });
      expect(await get('/api/platform/events?limit=5')).toMatchObject({ status: 400, body: { error: 'unknown query parameter limit: this route takes no query parameters', field: 'limit' } });
      expect(spies.map((spy) => spy.mock.calls.length)).toEqual(spies.map(() => 0));
    } finally {
      for (const spy of spies) spy.mockRestore();
    }
  });

  it('/q/openapi takes format (json or yaml) and nothing else', async () => {
    expect(await get('/q/openapi?formt=yaml')).toMatchObject({ status: 400, body: { error: 'unknown query parameter formt: this route takes format', field: 'formt', hint: 'did you mean format?' } });
    expect(await get('/q/openapi?format=xml')).toMatchObject({ status: 400, body: { field: 'format' } });
    const json = await fetch(`${hub.url}/q/openapi?format=json`, { headers: { Accept: 'application/yaml' } });
    expect(json.headers.get('content-type')).toMatch(/^application\/json/);
    await json.arrayBuffer();
  });
});

describe('a query parameter given twice', () => {
  it('is a 400 naming it where the route takes one value', async () => {
    const before = calls.filtered;
    expect(await get('/api/probe/filtered?limit=1&limit=2')).toEqual({
      status: 400,
      body: { error: 'query parameter limit is given 2 times: it takes one value', field: 'limit', hint: 'send limit once' },
    });
    expect(await get('/api/probe/filtered?connector=a&connector=a')).toMatchObject({ status: 400, body: { error: 'query parameter connector is given 2 times: it takes one value', field: 'connector' } });
    expect(calls.filtered).toBe(before);
    expect(await get('/api/platform/runs?limit=1&limit=2')).toMatchObject({ status: 400, body: { field: 'limit' } });
  });

  it('is taken where the route takes a list', async () => {
    expect(await get('/api/probe/listed?topic=a&topic=b')).toEqual({ status: 200, body: { query: { topic: ['a', 'b'] } } });
    expect(await get('/api/probe/listed?topic=a')).toEqual({ status: 200, body: { query: { topic: 'a' } } });
  });
});
