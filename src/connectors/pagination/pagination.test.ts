import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { PageCapError, PaginationError } from '../engine/errors.js';
import { jsonText, parseJsonExact } from '../engine/exact-json.js';
import { type ReadPosition, stoppedAtOf } from '../engine/read.js';
import { encodeCursor } from '../../demo-source/graphql.js';
import type { DemoSource } from '../../demo-source/server.js';
import { connectorSpec, DEMO_AUTH, endpointSpec, engineContext, ids, range, readAll, startFixtureSource } from '../engine/testing/specs.js';
import type { Auth } from '../types.js';
import { parseLinkHeader } from './link-header.js';
import { PositionMemory } from './types.js';

let source: DemoSource;
/** A loopback source of broken pagination (cycles, "more" without a cursor, a bad Link), answering per path. */
let broken: Server;
let brokenUrl: string;
const brokenHits = new Map<string, number>();
/** The request bodies each path received. */
const brokenBodies = new Map<string, string[]>();
const hitsOf = (path: string) => brokenHits.get(path) ?? 0;

beforeAll(async () => {
  source = await startFixtureSource(95);
  broken = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    brokenHits.set(url.pathname, hitsOf(url.pathname) + 1);
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => {
      brokenBodies.set(url.pathname, [...(brokenBodies.get(url.pathname) ?? []), body]);
      const answer = brokenAnswer(url, body);
      res.writeHead(answer ? 200 : 404, { 'Content-Type': 'application/json', ...answer?.headers });
      res.end(answer ? (typeof answer.body === 'string' ? answer.body : JSON.stringify(answer.body)) : '');
    });
  });
  await new Promise<void>((resolve) => broken.listen(0, '127.0.0.1', resolve));
  brokenUrl = `http://127.0.0.1:${(broken.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise((resolve) => broken.close(resolve));
  await source.close();
});

/** Positions that cycle first → A → B → A → B …: each position's page and the position after it. */
const CYCLE: Record<string, string> = { '': 'A', A: 'B', B: 'A' };
const rowsAt = (position: string) => [{ id: `${position || 'first'}-1` }, { id: `${position || 'first'}-2` }];

/** The JSON body (and headers) the broken source answers at a path (a string: as written), undefined for a 404. */
function brokenAnswer(url: URL, sent: string): { body: unknown; headers?: Record<string, string> } | undefined {
  const at = url.searchParams.get('p') ?? '';
  const after = () => (JSON.parse(sent) as { variables: { after?: string } }).variables.after;
  switch (url.pathname) {
    case '/cursor-cycle':
      return { body: { data: rowsAt(at), has_more: true, next: CYCLE[at] } };
    case '/body-link-cycle':
      return { body: { results: rowsAt(at), next: `/body-link-cycle?p=${CYCLE[at]}` } };
    case '/link-header-cycle':
      return { body: rowsAt(at), headers: { Link: `</link-header-cycle?p=${CYCLE[at]}>; rel="next"` } };
    case '/link-header-first':
      // Page 2 links back to the first page (the URL the read began with).
      return { body: rowsAt(at), headers: { Link: at === '' ? '</link-header-first?p=A>; rel="next"' : '</link-header-first>; rel="next"' } };
    case '/relay-cycle':
      return { body: { data: { items: { nodes: rowsAt(after() ?? ''), pageInfo: { hasNextPage: true, endCursor: CYCLE[after() ?? ''] } } } } };
    case '/stripe-empty':
      // Page 2 is empty but still says has_more: the cursor (the last item's id) is gone.
      return { body: url.searchParams.has('starting_after') ? { data: [], has_more: true } : { data: rowsAt(''), has_more: true } };
    case '/relay-null':
      return { body: { data: { items: { nodes: rowsAt(after() ?? ''), pageInfo: { hasNextPage: true, endCursor: after() ? null : 'c1' } } } } };
    case '/relay-huge':
      // A cursor past a double's range (JSON.parse reads Infinity), written as the source writes it.
      return after() === undefined
        ? { body: '{"data":{"items":{"nodes":[{"id":1e400}],"pageInfo":{"hasNextPage":true,"endCursor":1e400}}}}' }
        : { body: '{"data":{"items":{"nodes":[{"id":2e400}],"pageInfo":{"hasNextPage":false,"endCursor":null}}}}' };
    case '/jsonapi-objects': {
      // JSON:API 1.1 link objects: `links.next` is `{"href": …}` on every page but the last (null).
      const page = Number(at || '1');
      return { body: { data: rowsAt(String(page)), links: { self: `/jsonapi-objects?p=${page}`, next: page < 3 ? { href: `/jsonapi-objects?p=${page + 1}`, meta: { page: page + 1 } } : null } } };
    }
    case '/offset-from-1': {
      // Offsets counting from 1 (start_offset 1): five records, the last at offset 5.
      const from = Number(url.searchParams.get('offset'));
      const limit = Number(url.searchParams.get('limit'));
      return { body: { data: range(5).slice(from - 1, from - 1 + limit).map((id) => ({ id })), total: 5 } };
    }
    case '/relay-errors-object':
      // Partial data beside an `errors` that is no list (GraphQL requires a list): an error all the same.
      return { body: { data: { items: { nodes: rowsAt(''), pageInfo: { hasNextPage: false, endCursor: null } } }, errors: url.searchParams.has('text') ? 'upstream timeout: partial result' : { message: 'upstream timeout: partial result' } } };
    case '/relay-feed':
      // No hasNextPage: the last page is empty and hands back the cursor it was asked with.
      return { body: { data: { items: { nodes: after() === undefined ? rowsAt('') : [], pageInfo: { endCursor: 'c1' } } } } };
    case '/changes': {
      // A change feed (CouchDB's _changes): each answer hands back the position to ask from next, the
      // same one when nothing is left; two pages of records, then an empty page at the end.
      const since = Number(url.searchParams.get('since') ?? '0');
      const results = since < 4 ? [{ id: since + 1 }, { id: since + 2 }] : [];
      return { body: { results, last_seq: String(since + results.length), ...(url.searchParams.has('more') ? { pending: results.length > 0 || since < 6 } : {}) } };
    }
    case '/capped-offset': {
      // Seven records served at most three a page, whatever limit is asked (as many sources cap it).
      const from = Number(url.searchParams.get('offset'));
      const limit = Math.min(Number(url.searchParams.get('limit')), 3);
      return { body: { data: range(7).slice(from, from + limit).map((id) => ({ id })) } };
    }
    case '/capped-page': {
      // Seven records served at most three a page, whatever size is asked, with their count (pages from 1).
      const page = Number(url.searchParams.get('page'));
      const size = Math.min(Number(url.searchParams.get('size')), 3);
      return { body: { data: range(7).slice((page - 1) * size, page * size).map((id) => ({ id })), total: 7 } };
    }
    case '/offset-ignored':
      // A source that knows no offset parameter: the same three records whatever is asked.
      return { body: { data: range(3).map((id) => ({ id })) } };
    case '/offset-cycling': {
      // A source that answers two pages in turn whatever the offset (an unstable sort at its worst), with a true count of 8.
      const first = Number(url.searchParams.get('offset')) % 4 === 0;
      return { body: { data: (first ? [1, 2] : [3, 4]).map((id) => ({ id })), total: 8 } };
    }
    case '/page-clamped': {
      // Seven records two a page (pages from 1); a page past the last answers the last page again, as some sources clamp it.
      const page = Math.min(Number(url.searchParams.get('page')), 4);
      return { body: { data: range(7).slice((page - 1) * 2, page * 2).map((id) => ({ id })) } };
    }
    case '/next-number':
      // A link_path that holds no URL (a page number) but is not the end either.
      return { body: { results: rowsAt(at), next: url.searchParams.has('false') ? false : at === '' ? 2 : null } };
    case '/link-header-bad':
      return { body: rowsAt(''), headers: { Link: '<http://[::1>; rel="next"' } };
    // Next links of LONG_LINK characters: to a page that is gone (404), to the same records again, to another host, or on for ever.
    case '/long-gone':
      return { body: { results: rowsAt(''), next: `/long-gone/past?p=${LONG_LINK}` } };
    case '/long-same':
      return { body: { results: rowsAt(''), next: `/long-same?p=${at.length}${LONG_LINK}` } };
    case '/long-away':
      return { body: { results: rowsAt(''), next: `http://${LONG_LINK}.example/next` } };
    case '/long-more':
      return { body: { results: rowsAt(at.slice(0, 8)), next: `/long-more?p=${at.length + 1}${LONG_LINK}` } };
    default:
      return undefined;
  }
}

/** A next link's length in characters: far past what a message quotes, within what the source's request line may hold. */
const LONG_LINK = 'a'.repeat(10_000);

/** A GraphQL endpoint at `path` paging Relay-style through `items` (the broken source's relay paths). */
const relay = (path: string) =>
  endpointSpec(path, { kind: 'relay', cursor_binding: 'variable', cursor_var: 'after', cursor_path: '$.data.items.pageInfo.endCursor', has_more_path: '$.data.items.pageInfo.hasNextPage', response_path: '$.data.items.nodes' }, {
    graphql: true,
    method: 'POST',
    query: 'query($after: String) { items(after: $after) { nodes { id } pageInfo { endCursor hasNextPage } } }',
  });

describe('a GraphQL errors value that is no list', () => {
  it.each([['an object', '/relay-errors-object'], ['text', '/relay-errors-object?text=1']])('(%s) beside partial data fails the read as one error; nothing is handed over', async (_what, path) => {
    const result = await readAll(connectorSpec(brokenUrl, { graphqlPath: path }), relay(path), engineContext());
    expect(result.error?.message).toBe('GraphQL response carried 1 error(s); first: upstream timeout: partial result');
    expect(result.pages).toHaveLength(0);
  });
});

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

  // A read cut by the page budget hands on where it stopped (PageCapError's stoppedAt, stored as the
  // runner stores it: exact JSON text); reads resumed from it read the rest, each row once, and the
  // last one checks the declared total over them all.
  it.each(cases)('%s: resumed over reads of 2 pages each', async (_name, auth, endpoint, pages) => {
    const connector = connectorSpec(source.url, { auth });
    const requested = source.seen().length;
    const items: unknown[] = [];
    let resume: ReadPosition | undefined;
    let reads = 0;
    for (;;) {
      reads += 1;
      const result = await readAll(connector, endpoint(), engineContext({}, { maxPages: 2, resume }));
      items.push(...result.items);
      if (!(result.error instanceof PageCapError)) {
        expect(result.error).toBeUndefined();
        break;
      }
      resume = parseJsonExact(jsonText(stoppedAtOf(result.error))) as ReadPosition;
      expect(reads).toBeLessThan(10);
    }
    expect(ids(items)).toEqual(range(95));
    expect(reads).toBe(Math.ceil(pages / 2));
    // As many requests as one read makes: a resumed strategy stops where one read would (total_pages_path, a short page).
    expect(source.seen().length - requested).toBe(pages);
  });

  it('a stored next link keeps no auth query parameter (every request gets it again), and shows none', async () => {
    const auth = { kind: 'api-key', in: 'query', name: 'api_key', value_env: 'DEMO_API_KEY' } as const;
    const endpoint = endpointSpec('/link/partners?limit=20', { kind: 'link-header', response_path: '$' });
    const first = await readAll(connectorSpec(source.url, { auth }), endpoint, engineContext({}, { maxPages: 1 }));
    const stopped = stoppedAtOf(first.error)!;
    expect(stopped.position.url).toBeDefined();
    const key = (await engineContext().resolveCredential('DEMO_API_KEY'))!;
    expect(first.items).toHaveLength(20);
    expect(JSON.stringify(stopped)).not.toContain(key);
    expect(stopped.shown).toMatch(/^the next link http:\/\/127\.0\.0\.1:\d+\/link\/partners\?/);
    const rest = await readAll(connectorSpec(source.url, { auth }), endpoint, engineContext({}, { resume: stopped }));
    expect(rest.error).toBeUndefined();
    expect(ids([...first.items, ...rest.items])).toEqual(range(95));
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

describe('a cursor handed back on an empty page', () => {
  it('ends the read (a change feed at its end), where it failed as a cursor that did not advance', async () => {
    const result = await readAll(connectorSpec(brokenUrl), endpointSpec('/changes', { kind: 'cursor', cursor_param: 'since', cursor_path: '$.last_seq', response_path: '$.results' }), engineContext());
    expect(result.error).toBeUndefined();
    expect(ids(result.items)).toEqual(range(4));
    expect(result.pages.map((p) => p.items.length)).toEqual([2, 2, 0]);
  });

  it('relay: ends the read too when hasNextPage is absent', async () => {
    const result = await readAll(connectorSpec(brokenUrl, { graphqlPath: '/relay-feed' }), relay('/relay-feed'), engineContext());
    expect(result.error).toBeUndefined();
    expect(result.pages.map((p) => p.items.length)).toEqual([2, 0]);
  });

  it('still fails when has_more_path says there is more, and on a page with records', async () => {
    const more = await readAll(connectorSpec(brokenUrl), endpointSpec('/changes?more=1', { kind: 'cursor', cursor_param: 'since', cursor_path: '$.last_seq', has_more_path: '$.pending', response_path: '$.results' }), engineContext());
    expect(more.error?.message).toBe('pagination did not advance: the source returned cursor "4" twice in a row (cursor_path $.last_seq)');
    const stuck = await readAll(connectorSpec(source.url), endpointSpec('/stuck/partners?limit=10', { kind: 'cursor', cursor_param: 'starting_after', cursor_path: '$.data[-1:].id', response_path: '$.data' }), engineContext());
    expect(stuck.error?.message).toMatch(/^pagination did not advance: the source returned cursor "10" twice in a row/);
  });
});

describe('offset from start_offset', () => {
  it('a source counting offsets from 1 is read to its last record, at offset total (it stopped one short: Failed, or Completed without it on a watermark endpoint)', async () => {
    const before = hitsOf('/offset-from-1');
    const endpoint = endpointSpec('/offset-from-1', { kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit: 2, start_offset: 1, response_path: '$.data', total_path: '$.total' });
    const result = await readAll(connectorSpec(brokenUrl), endpoint, engineContext());
    expect(result.error).toBeUndefined();
    expect(ids(result.items)).toEqual(range(5));
    expect(hitsOf('/offset-from-1') - before).toBe(3);
    const watermarked = await readAll(connectorSpec(brokenUrl), { ...endpoint, incremental: { mode: 'watermark', param: 'since', watermark_path: '$.id' } }, engineContext());
    expect(ids(watermarked.items)).toEqual(range(5));
  });
});

describe('offset without total_path', () => {
  it('a source that caps the limit is read whole: its short first page is not the last (it was: 3 of 7 rows, Completed)', async () => {
    const before = hitsOf('/capped-offset');
    const result = await readAll(connectorSpec(brokenUrl), endpointSpec('/capped-offset', { kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit: 5, response_path: '$.data' }), engineContext());
    expect(result.error).toBeUndefined();
    expect(ids(result.items)).toEqual(range(7));
    // 3, 3, then 1 (shorter than the pages before it: the last).
    expect(result.pages.map((p) => p.items.length)).toEqual([3, 3, 1]);
    expect(hitsOf('/capped-offset') - before).toBe(3);
  });

  it('a first page short of the limit costs one request more, answered empty', async () => {
    const result = await readAll(connectorSpec(brokenUrl), endpointSpec('/capped-offset', { kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit: 5, start_offset: 4, response_path: '$.data' }), engineContext());
    expect(result.pages.map((p) => p.items.length)).toEqual([3, 0]);
  });
});

describe('page with total_path and no total_pages_path', () => {
  it('is read to its first empty page: pages x size is never taken for the rows served (a source capping the size serves fewer)', async () => {
    const before = hitsOf('/capped-page');
    const result = await readAll(connectorSpec(brokenUrl), endpointSpec('/capped-page', { kind: 'page', page_param: 'page', size_param: 'size', start_page: 1, size: 5, response_path: '$.data', total_path: '$.total' }), engineContext());
    expect(result.error).toBeUndefined();
    expect(ids(result.items)).toEqual(range(7));
    expect(result.pages.map((p) => p.items.length)).toEqual([3, 3, 1, 0]);
    expect(hitsOf('/capped-page') - before).toBe(4);
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

  it("says it sends no credentials off the source only when the connector has some (probe 34 L5)", async () => {
    const endpoint = endpointSpec('/elsewhere/partners?limit=10', { kind: 'body-link', link_path: '$.next', response_path: '$.results' });
    const none = await readAll(connectorSpec(source.url), endpoint, engineContext());
    expect(none.error?.message).toBe(`the next link leaves the source (http://example.invalid, not ${source.url}); next links are followed only on the origin of spec.base_url`);
    const bearer = await readAll(connectorSpec(source.url, { auth: { kind: 'bearer', token_env: 'TOK' } }), endpoint, engineContext({ TOK: 'tok-123456' }));
    expect(bearer.error?.message).toBe(`the next link leaves the source (http://example.invalid, not ${source.url}); refusing to send the connector's credentials there`);
  });
});

describe('a next link of any length is named in at most 200 characters', () => {
  // A link's URL is the source's text: quoted whole, one of several megabytes (a page holds up to 64 MiB) made the run's
  // error message, its connector.run.failed event, a log line per retry and the position the lists show as long.
  const bodyLink = (path: string) => endpointSpec(path, { kind: 'body-link', link_path: '$.next', response_path: '$.results' });
  const cut = (url: string) => `${url.slice(0, 200)}…`;

  it('a 404 for it (Partial), the same records again, or another host (Failed): the message names the link cut', async () => {
    const gone = await readAll(connectorSpec(brokenUrl), bodyLink('/long-gone'), engineContext());
    expect(gone.error?.message).toBe(`the source answered HTTP 404 for the next link ${cut(`${brokenUrl}/long-gone/past?p=${LONG_LINK}`)}: it no longer has the records past that position; the run stopped after 1 page(s) read`);
    const same = await readAll(connectorSpec(brokenUrl), bodyLink('/long-same'), engineContext());
    expect(same.error?.message).toBe(
      `pagination did not advance: the source answered the next link ${cut(`${brokenUrl}/long-same?p=0${LONG_LINK}`)} with the same 2 record(s) as the page before it (it ignores the position asked for, or repeats a page past its end); the read stopped there, the pages before it are kept`,
    );
    const away = await readAll(connectorSpec(brokenUrl), bodyLink('/long-away'), engineContext());
    expect(away.error?.message).toBe(`the next link leaves the source (${cut(`http://${LONG_LINK}.example`)}, not ${brokenUrl}); next links are followed only on the origin of spec.base_url`);
  });

  it('where a read cut by the page budget stopped is shown cut, and stored whole (the next run requests it)', async () => {
    const result = await readAll(connectorSpec(brokenUrl), bodyLink('/long-more'), engineContext({}, { maxPages: 2 }));
    expect(result.error).toBeInstanceOf(PageCapError);
    const stopped = stoppedAtOf(result.error)!;
    const next = `${brokenUrl}/long-more?p=${LONG_LINK.length + 2}${LONG_LINK}`;
    expect(stopped.shown).toBe(`the next link ${cut(next)}`);
    expect(stopped.position.url).toBe(next);
  });
});

describe('a source that cycles through positions fails fast instead of looping to the page cap', () => {
  // A page cap of 50: without the guard each read would end Partial after 50 requests.
  const ctx = () => engineContext({}, { maxPages: 50 });

  it.each([
    ['cursor', '/cursor-cycle', () => endpointSpec('/cursor-cycle', { kind: 'cursor', cursor_param: 'p', cursor_path: '$.next', has_more_path: '$.has_more', response_path: '$.data' }), /^pagination did not advance: cursor "A" came back after 2 pages \(cursor_path \$\.next\)$/],
    ['relay', '/relay-cycle', () => relay('/relay-cycle'), /^pagination did not advance: cursor "A" came back after 2 pages \(cursor_path \$\.data\.items\.pageInfo\.endCursor\)$/],
    ['body-link', '/body-link-cycle', () => endpointSpec('/body-link-cycle', { kind: 'body-link', link_path: '$.next', response_path: '$.results' }), /^pagination did not advance: the next link at \$\.next came back after 2 pages$/],
    ['link-header', '/link-header-cycle', () => endpointSpec('/link-header-cycle', { kind: 'link-header', response_path: '$' }), /^pagination did not advance: the Link header's rel="next" came back after 2 pages$/],
  ])('%s: first → A → B → A fails on the third page', async (_kind, path, endpoint, message) => {
    const before = hitsOf(path);
    const result = await readAll(connectorSpec(brokenUrl, { graphqlPath: path }), endpoint(), ctx());
    expect(result.error).toBeInstanceOf(PaginationError);
    expect(result.error?.message).toMatch(message);
    expect(result.pages).toHaveLength(3);
    expect(hitsOf(path) - before).toBe(3);
  });

  it.each([
    ['offset, a source ignoring offset_param', '/offset-ignored', () => endpointSpec('/offset-ignored', { kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit: 3, response_path: '$.data' }), 'offset 3', 3, 1],
    ['page, a source repeating its last page past the end', '/page-clamped', () => endpointSpec('/page-clamped', { kind: 'page', page_param: 'page', size_param: 'size', size: 2, start_page: 1, response_path: '$.data' }), 'page 5', 1, 4],
  ])('%s: the same records again fail the read on the repeated page, not at the page cap', async (_kind, path, endpoint, position, records, pages) => {
    const before = hitsOf(path);
    const result = await readAll(connectorSpec(brokenUrl), endpoint(), ctx());
    expect(result.error).toBeInstanceOf(PaginationError);
    expect(result.error?.message).toBe(
      `pagination did not advance: the source answered ${position} with the same ${records} record(s) as the page before it (it ignores the position asked for, or repeats a page past its end); the read stopped there, the pages before it are kept`,
    );
    // The repeated page is not handed over: its records are those of the page before.
    expect(result.pages).toHaveLength(pages);
    expect(hitsOf(path) - before).toBe(pages + 1);
  });

  it('offset, a source cycling through two pages: the third page fails the read (with total_path it ended as complete with half the records)', async () => {
    const before = hitsOf('/offset-cycling');
    const result = await readAll(
      connectorSpec(brokenUrl),
      endpointSpec('/offset-cycling', { kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit: 2, response_path: '$.data', total_path: '$.total' }),
      ctx(),
    );
    expect(result.error).toBeInstanceOf(PaginationError);
    expect(result.error?.message).toBe(
      'pagination did not advance: the source answered offset 4 with the same 2 record(s) as page 1 of this read (it cycles through its pages); the read stopped there, the pages before it are kept',
    );
    expect(result.pages).toHaveLength(2);
    expect(hitsOf('/offset-cycling') - before).toBe(3);
  });

  it('remembers long positions by their digest: a long cursor that comes back is still caught', () => {
    const memory = new PositionMemory();
    const long = (c: string) => c.repeat(500);
    memory.pageRead();
    expect(memory.cameBack(long('A'))).toBeUndefined();
    memory.pageRead();
    expect(memory.cameBack(long('B'))).toBeUndefined();
    memory.pageRead();
    expect(memory.cameBack(long('A'))).toBe(2);
    expect(memory.cameBack(long('C'))).toBeUndefined();
  });

  it('link-header: a next link back to the first page fails on the second', async () => {
    const before = hitsOf('/link-header-first');
    const result = await readAll(connectorSpec(brokenUrl), endpointSpec('/link-header-first', { kind: 'link-header', response_path: '$' }), ctx());
    expect(result.error?.message).toBe('pagination did not advance: the Link header\'s rel="next" came back after 2 pages');
    expect(hitsOf('/link-header-first') - before).toBe(2);
  });
});

describe('a cursor past a double\'s range (1e400)', () => {
  it('relay: is sent back in the GraphQL variables as the source wrote it, a JSON number', async () => {
    const result = await readAll(connectorSpec(brokenUrl, { graphqlPath: '/relay-huge' }), relay('/relay-huge'), engineContext());
    expect(result.error).toBeUndefined();
    expect(result.pages.flatMap((p) => p.items.map((i) => String((i as { id: unknown }).id)))).toEqual(['1e400', '2e400']);
    const sent = brokenBodies.get('/relay-huge')!.slice(-2);
    expect(sent[0]).not.toContain('"after"');
    expect(sent[1]).toContain('"variables":{"after":1e400}');
  });
});

describe('a source that says there are more pages but gives no cursor fails instead of completing short', () => {
  it('cursor: an empty page with has_more true (no last item to take the cursor from)', async () => {
    const result = await readAll(
      connectorSpec(brokenUrl),
      endpointSpec('/stripe-empty', { kind: 'cursor', cursor_param: 'starting_after', cursor_path: '$.data[-1:].id', has_more_path: '$.has_more', response_path: '$.data' }),
      engineContext(),
    );
    expect(result.pages.map((p) => p.items.length)).toEqual([2, 0]);
    expect(result.error).toBeInstanceOf(PaginationError);
    expect(result.error?.message).toBe('pagination cannot continue: has_more_path $.has_more reads true (more pages) but cursor_path $.data[-1:].id gives no cursor');
  });

  it('relay: hasNextPage true with a null endCursor', async () => {
    const result = await readAll(connectorSpec(brokenUrl, { graphqlPath: '/relay-null' }), relay('/relay-null'), engineContext());
    expect(result.pages).toHaveLength(2);
    expect(result.error).toBeInstanceOf(PaginationError);
    expect(result.error?.message).toBe(
      'pagination cannot continue: has_more_path $.data.items.pageInfo.hasNextPage reads true (more pages) but cursor_path $.data.items.pageInfo.endCursor gives no cursor (null)',
    );
  });
});

describe('a next link that is not a URL', () => {
  it('body-link: a JSON:API link object is followed by its href (it ended the read after page 1, Completed)', async () => {
    const result = await readAll(connectorSpec(brokenUrl), endpointSpec('/jsonapi-objects', { kind: 'body-link', link_path: '$.links.next', response_path: '$.data' }), engineContext());
    expect(result.error).toBeUndefined();
    expect(ids(result.items)).toEqual(['1-1', '1-2', '2-1', '2-2', '3-1', '3-2']);
  });

  it('body-link: a value that is no URL and not null fails the read after its page instead of ending it', async () => {
    const result = await readAll(connectorSpec(brokenUrl), endpointSpec('/next-number', { kind: 'body-link', link_path: '$.next', response_path: '$.results' }), engineContext());
    expect(result.pages).toHaveLength(1);
    expect(result.error).toBeInstanceOf(PaginationError);
    expect(result.error?.message).toBe('the next link at $.next is not a URL (a number)');
    // false says "no next page" as null does.
    const last = await readAll(connectorSpec(brokenUrl), endpointSpec('/next-number?false=1', { kind: 'body-link', link_path: '$.next', response_path: '$.results' }), engineContext());
    expect(last.error).toBeUndefined();
    expect(last.pages).toHaveLength(1);
  });

  it('link-header: fails naming the Link header, after the page that carried it', async () => {
    const result = await readAll(connectorSpec(brokenUrl), endpointSpec('/link-header-bad', { kind: 'link-header', response_path: '$' }), engineContext());
    expect(result.pages).toHaveLength(1);
    expect(result.error).toBeInstanceOf(PaginationError);
    expect(result.error?.message).toBe('the next link in the Link header (rel="next") is not a URL');
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

  it('reads a quoted parameter as one value (RFC 8288): a `<`, `>`, `,`, `;` or `rel=` inside quotes is text, not a link or a parameter', () => {
    expect([...parseLinkHeader('<https://a.test/next>; rel="next"; title="a<b"')]).toEqual([['next', 'https://a.test/next']]);
    expect([...parseLinkHeader('<https://a.test/p2>; title="a<b>c"; rel="next", <https://a.test/p9>; rel="last"')]).toEqual([
      ['next', 'https://a.test/p2'],
      ['last', 'https://a.test/p9'],
    ]);
    // A rel spelled inside another parameter's quoted value is not the link's rel.
    expect([...parseLinkHeader('<https://evil.test/x>; title="; rel=next", <https://a.test/p2>; rel=next')]).toEqual([['next', 'https://a.test/p2']]);
    // Escapes inside a quoted string; a rel given twice: the first counts (RFC 8288 3.3).
    expect([...parseLinkHeader('<https://a.test/p2>; title="say \\"hi\\", <x>"; rel=next; rel=prev')]).toEqual([['next', 'https://a.test/p2']]);
  });
});
