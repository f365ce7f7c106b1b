import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { PaginationError } from '../engine/errors.js';
import { encodeCursor } from '../../demo-source/graphql.js';
import type { DemoSource } from '../../demo-source/server.js';
import { connectorSpec, DEMO_AUTH, endpointSpec, engineContext, ids, range, readAll, startFixtureSource } from '../engine/testing/specs.js';
import type { Auth } from '../types.js';
import { parseLinkHeader } from './link-header.js';

let source: DemoSource;
beforeAll(async () => {
  source = await startFixtureSource(95);
});
afterAll(() => source.close());

describe('every strategy reads every row exactly once', () => {
  const cases: Array<[string, Auth, () => ReturnType<typeof endpointSpec>, number]> = [
    ['page (Spring, start 0, totalPages)', DEMO_AUTH.basic, () => endpointSpec('/spring/partners', { kind: 'page', page_param: 'page', size_param: 'size', start_page: 0, size: 20, total_pages_path: '$.totalPages', response_path: '$.content', total_path: '$.totalElements' }), 5],
    ['page (no total_pages_path: stops on the empty page)', DEMO_AUTH.basic, () => endpointSpec('/spring/partners', { kind: 'page', page_param: 'page', size_param: 'size', start_page: 0, size: 20, response_path: '$.content' }), 6],
    ['offset with total', DEMO_AUTH.basic, () => endpointSpec('/offset/partners', { kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit: 20, response_path: '$.data', total_path: '$.total' }), 5],
    ['offset without total (short page)', DEMO_AUTH.basic, () => endpointSpec('/offset/partners', { kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit: 20, response_path: '$.data' }), 5],
    ['cursor (Stripe)', DEMO_AUTH.bearer, () => endpointSpec('/v1/partners?limit=20', { kind: 'cursor', cursor_param: 'starting_after', cursor_path: '$.data[-1:].id', has_more_path: '$.has_more', response_path: '$.data' }), 5],
    ['body-link (DRF, absolute next)', DEMO_AUTH.bearer, () => endpointSpec('/drf/partners?limit=20', { kind: 'body-link', link_path: '$.next', response_path: '$.results', total_path: '$.count' }), 5],
    ['body-link (relative next)', { kind: 'none' }, () => endpointSpec('/relative-drf/partners?limit=20', { kind: 'body-link', link_path: '$.next', response_path: '$.results' }), 5],
    ['link-header (absolute)', DEMO_AUTH.apiKey, () => endpointSpec('/link/partners?limit=20', { kind: 'link-header', response_path: '$' }), 5],
    ['link-header (relative)', { kind: 'none' }, () => endpointSpec('/relative-link/partners?limit=20', { kind: 'link-header', response_path: '$' }), 5],
    [
      'relay (GraphQL)',
      DEMO_AUTH.apiKey,
      () =>
        endpointSpec('/graphql', { kind: 'relay', cursor_binding: 'variable', cursor_var: 'after', cursor_path: '$.data.partners.pageInfo.endCursor', has_more_path: '$.data.partners.pageInfo.hasNextPage', response_path: '$.data.partners.edges[*].node' }, {
          graphql: true,
          method: 'POST',
          query: 'query($after: String) { partners(first: 20, after: $after) { edges { cursor node { id name } } pageInfo { endCursor hasNextPage } } }',
          variables: { region: 'eu' },
        }),
      5,
    ],
  ];

  it.each(cases)('%s', async (_name, auth, endpoint, pages) => {
    const result = await readAll(connectorSpec(source.url, { auth }), endpoint(), engineContext());
    expect(result.error).toBeUndefined();
    expect(ids(result.items)).toEqual(range(95));
    expect(result.pages.map((p) => p.number)).toEqual(range(pages));
  });

  it('none: one request, records at response_path', async () => {
    const before = source.count('/offset/partners');
    const result = await readAll(connectorSpec(source.url, { auth: DEMO_AUTH.basic }), endpointSpec('/offset/partners?limit=500', { kind: 'none', response_path: '$.data' }), engineContext());
    expect(ids(result.items)).toEqual(range(95));
    expect(source.count('/offset/partners') - before).toBe(1);
  });

  it('relay injects the cursor on top of the static variables, and only from the second page', async () => {
    const start = source.seen().length;
    // The static `after` starts the read past id 40: rows 41-90, then 91-95 after the source's cursor.
    await readAll(
      connectorSpec(source.url, { auth: DEMO_AUTH.apiKey }),
      endpointSpec('/graphql', { kind: 'relay', cursor_binding: 'variable', cursor_var: 'after', cursor_path: '$.data.partners.pageInfo.endCursor', has_more_path: '$.data.partners.pageInfo.hasNextPage', response_path: '$.data.partners.edges[*].node' }, {
        graphql: true,
        method: 'POST',
        query: '{ partners(first: 50, after: $after) { edges { node { id } } pageInfo { endCursor hasNextPage } } }',
        variables: { region: 'eu', after: encodeCursor(40) },
      }),
      engineContext(),
    );
    const bodies = source.seen().slice(start).map((r) => JSON.parse(r.body) as { variables: Record<string, unknown> });
    expect(bodies).toHaveLength(2);
    expect(bodies[0]!.variables).toEqual({ region: 'eu', after: encodeCursor(40) });
    expect(bodies[1]!.variables).toEqual({ region: 'eu', after: encodeCursor(90) });
    expect(source.seen().slice(start).every((r) => r.method === 'POST' && r.path === '/graphql' && r.headers['content-type'] === 'application/json')).toBe(true);
  });

  it('page sends page_param from start_page and size_param on every request', async () => {
    const start = source.seen().length;
    await readAll(connectorSpec(source.url, { auth: DEMO_AUTH.basic }), endpointSpec('/spring/partners', { kind: 'page', page_param: 'page', size_param: 'size', start_page: 0, size: 50, total_pages_path: '$.totalPages', response_path: '$.content' }), engineContext());
    expect(source.seen().slice(start).map((r) => r.url.search)).toEqual(['?page=0&size=50', '?page=1&size=50']);
  });
});

describe('custom', () => {
  it('reads its first page, then fails on the second with a clear message', async () => {
    const result = await readAll(connectorSpec(source.url, { auth: DEMO_AUTH.basic }), endpointSpec('/offset/partners?limit=10', { kind: 'custom', response_path: '$.data' }), engineContext());
    expect(result.pages).toHaveLength(1);
    expect(result.items).toHaveLength(10);
    expect(result.error).toBeInstanceOf(PaginationError);
    expect(result.error?.message).toMatch(/pagination kind custom cannot fetch a second page/);
    expect((result.error as PaginationError).runStatus).toBe('Failed');
  });
});

describe('pagination that does not advance or leaves the source', () => {
  it('a cursor returned twice fails instead of looping to the page cap', async () => {
    const result = await readAll(connectorSpec(source.url), endpointSpec('/stuck/partners?limit=10', { kind: 'cursor', cursor_param: 'starting_after', cursor_path: '$.data[-1:].id', has_more_path: '$.has_more', response_path: '$.data' }), engineContext());
    expect(result.pages).toHaveLength(2);
    expect(result.error?.message).toMatch(/pagination did not advance: the source returned cursor "10" twice/);
  });

  it('a next link to another origin is refused (credentials stay with the source)', async () => {
    const result = await readAll(connectorSpec(source.url), endpointSpec('/elsewhere/partners?limit=10', { kind: 'body-link', link_path: '$.next', response_path: '$.results' }), engineContext());
    expect(result.pages).toHaveLength(1);
    expect(result.error?.message).toMatch(/the next link leaves the source \(http:\/\/example\.invalid/);
  });
});

describe('parseLinkHeader', () => {
  it('reads rel values, quoted or not, several per link, across header values', () => {
    const links = parseLinkHeader(['<https://a.test/p?page=2&x=1,2>; rel="next last"', '</p?page=1>; title="first, one"; rel=first, <https://a.test/p?page=9>; rel=prev']);
    expect(links.get('next')).toBe('https://a.test/p?page=2&x=1,2');
    expect(links.get('last')).toBe('https://a.test/p?page=2&x=1,2');
    expect(links.get('first')).toBe('/p?page=1');
    expect(links.get('prev')).toBe('https://a.test/p?page=9');
    expect(parseLinkHeader(undefined).size).toBe(0);
  });
});
