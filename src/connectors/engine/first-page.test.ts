import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { generatePartners } from '../../demo-source/data.js';
import type { DemoSource } from '../../demo-source/server.js';
import { firstPage } from './read.js';
import { connectorSpec, DEMO_AUTH, endpointSpec, engineContext, startFixtureSource } from './testing/specs.js';

let source: DemoSource;
beforeAll(async () => {
  source = await startFixtureSource(95);
});
afterAll(() => source.close());

const spring = endpointSpec('/spring/partners', { kind: 'page', page_param: 'page', size_param: 'size', start_page: 0, size: 10, total_pages_path: '$.totalPages', response_path: '$.content' });

describe('firstPage (pre-flight probe)', () => {
  it('composes the first request a run would send and reports its records', async () => {
    const report = await firstPage(connectorSpec(source.url, { auth: DEMO_AUTH.basic }), spring, engineContext());
    expect(report).toMatchObject({ url: `${source.url}/spring/partners?page=0&size=10`, method: 'GET', status: 200, verdict: 'ok' });
    expect(report.items).toHaveLength(10);
    expect(report.sample).toEqual(generatePartners(1)[0]);
  });

  it('a 200 whose response_path matches nothing: ok with 0 items', async () => {
    const report = await firstPage(connectorSpec(source.url, { auth: DEMO_AUTH.basic }), endpointSpec('/spring/partners', { kind: 'none', response_path: '$.nothing' }), engineContext());
    expect(report).toMatchObject({ status: 200, items: [], verdict: 'ok' });
    expect(report.sample).toBeUndefined();
  });

  it('does not retry: one request to a source that is down, verdict HTTP 500', async () => {
    const before = source.count('/down/');
    const report = await firstPage(connectorSpec(source.url), endpointSpec('/down/partners', { kind: 'none', response_path: '$' }), engineContext());
    expect(source.count('/down/') - before).toBe(1);
    expect(report).toMatchObject({ status: 500, verdict: 'HTTP 500', items: [] });
  });

  it('a declared header whose value_env resolves to nothing is left out, as a run leaves it out, and the report says so', async () => {
    const headers = [
      { name: 'X-Resolved', value_env: 'HEADER_SET' },
      { name: 'X-Unresolved', value_env: 'SVC_SECRET_MASTER_KEY' },
    ];
    const report = await firstPage(connectorSpec(source.url, { auth: DEMO_AUTH.basic, headers }), spring, engineContext({ HEADER_SET: 'yes' }));
    expect(report).toMatchObject({ status: 200, verdict: 'ok' });
    expect(report.warnings).toEqual(['header X-Unresolved is not sent: its value_env SVC_SECRET_MASTER_KEY resolves to nothing (no stored secret of that name)']);
    const sent = source.seen().at(-1)!;
    expect(sent.headers['x-resolved']).toBe('yes');
    expect(sent.headers['x-unresolved']).toBeUndefined();
    const all = await firstPage(connectorSpec(source.url, { auth: DEMO_AUTH.basic, headers: headers.slice(0, 1) }), spring, engineContext({ HEADER_SET: 'yes' }));
    expect(all.warnings).toBeUndefined();
  });

  it('a header value the HTTP client cannot send (a line break from a stored secret) is a verdict naming the header, never a crash; nothing is sent', async () => {
    const before = source.seen().length;
    const headers = [{ name: 'X-From-Secret', value_env: 'HEADER_SET' }];
    for (const bad of ['v\r\nX-Evil: 1', 'v\u2603']) {
      const report = await firstPage(connectorSpec(source.url, { auth: DEMO_AUTH.basic, headers }), spring, engineContext({ HEADER_SET: bad }));
      expect(report).toMatchObject({ status: 0, items: [] });
      expect(report.verdict).toMatch(/^the request could not be sent: .*x-from-secret.*; a header value holds a line break or a character beyond Latin-1/i);
      expect(report.verdict).not.toContain(bad);
    }
    expect(source.seen().length).toBe(before);
  });

  it('a stored header the HTTP client writes itself (applied before apply refused it: Expect was a 500 of the pre-flight) is a verdict naming it; nothing is sent', async () => {
    const before = source.seen().length;
    for (const header of [{ name: 'Expect', value: '100-continue' }, { name: 'Host', value: 'admin.internal' }, { name: 'Transfer-Encoding', value_env: 'HEADER_SET' }]) {
      const report = await firstPage(connectorSpec(source.url, { auth: DEMO_AUTH.basic, headers: [header] }), spring, engineContext({ HEADER_SET: 'chunked' }));
      expect(report).toMatchObject({ status: 0, items: [] });
      expect(report.verdict).toMatch(new RegExp(`^the request could not be sent: header ${header.name} is written by the hub's HTTP client \\(.+\\): remove it from spec.headers$`));
    }
    expect(source.seen().length).toBe(before);
  });

  it('a stored base_url that is not a URL (applied before apply read it as a request does) is a verdict, never a crash', async () => {
    for (const base of ['http://127.0.0.1%2509:18111', 'http://[fe80::1%25lo]:18111']) {
      const report = await firstPage(connectorSpec(base, { auth: DEMO_AUTH.basic }), spring, engineContext());
      expect(report).toMatchObject({ status: 0, items: [], unsent: 'request_invalid' });
      expect(report.verdict).toBe(`the request could not be sent: the address ${base}/spring/partners is not a valid URL; fix spec.base_url (apply reads it as a request does)`);
    }
  });

  it('a refused credential is HTTP 401; an unresolved one is named before any request', async () => {
    const secure = endpointSpec('/v1/partners?limit=3', { kind: 'none', response_path: '$.data' });
    const bearer = connectorSpec(source.url, { auth: { kind: 'bearer', token_env: 'SRC_TOKEN' } });
    expect(await firstPage(bearer, secure, engineContext({ SRC_TOKEN: 'wrong' }))).toMatchObject({ status: 401, verdict: 'HTTP 401' });
    expect(await firstPage(bearer, secure, engineContext({ SRC_TOKEN: 'demo-bearer-token' }))).toMatchObject({ status: 200, verdict: 'ok', items: [expect.anything(), expect.anything(), expect.anything()] });
    const before = source.seen().length;
    const unresolved = await firstPage(bearer, secure, engineContext());
    expect(source.seen().length).toBe(before);
    expect(unresolved).toMatchObject({ url: `${source.url}/v1/partners?limit=3`, method: 'GET', status: 0, items: [] });
    expect(unresolved.verdict).toMatch(/^credential SRC_TOKEN did not resolve/);
  });

  it('GraphQL faults are named in the verdict', async () => {
    const relay = (query: string) =>
      endpointSpec('/graphql', { kind: 'relay', cursor_binding: 'variable', cursor_var: 'after', cursor_path: '$.data.partners.pageInfo.endCursor', has_more_path: '$.data.partners.pageInfo.hasNextPage', response_path: '$.data.partners.edges[*].node' }, { graphql: true, method: 'POST', query });
    const boom = await firstPage(connectorSpec(source.url, { auth: DEMO_AUTH.apiKey }), relay('{ boom }'), engineContext());
    expect(boom).toMatchObject({ method: 'POST', status: 200, items: [], verdict: 'GraphQL response carried 1 error(s); first: boom: the demo source fails any query mentioning boom' });
    const twice = await firstPage(connectorSpec(source.url, { graphqlPath: '/errors/graphql' }), relay('{ partners { edges { node { id } } } }'), engineContext());
    expect(twice).toMatchObject({ url: `${source.url}/errors/graphql`, status: 200, items: [], verdict: 'GraphQL response carried 2 error(s); first: boom: the first of two errors' });
    const good = await firstPage(connectorSpec(source.url, { auth: DEMO_AUTH.apiKey }), relay('{ partners(first: 7) { edges { node { id } } } }'), engineContext());
    expect(good).toMatchObject({ url: `${source.url}/graphql`, method: 'POST', status: 200, verdict: 'ok' });
    expect(good.items).toHaveLength(7);
  });

  it('a network fault is named', async () => {
    const report = await firstPage(connectorSpec('http://127.0.0.1:1'), spring, engineContext());
    expect(report.status).toBe(0);
    expect(report.verdict).toMatch(/^upstream could not be reached after 1 attempt\(s\): .*ECONNREFUSED/);
  });

  it('sends the stored watermark like the first request of a run', async () => {
    const report = await firstPage(
      connectorSpec(source.url, { auth: DEMO_AUTH.basic }),
      endpointSpec('/offset/partners', { kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit: 5, response_path: '$.data' }, { incremental: { mode: 'watermark', param: 'updated_since', watermark_path: '$.updated_at' } }),
      engineContext({}, { watermark: '2025-06-01' }),
    );
    expect(report.url).toBe(`${source.url}/offset/partners?offset=0&limit=5&updated_since=2025-06-01`);
    expect(report.verdict).toBe('ok');
    expect(report.items.every((p) => (p as { updated_at: string }).updated_at >= '2025-06-01')).toBe(true);
  });
});
