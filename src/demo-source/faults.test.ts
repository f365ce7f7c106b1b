import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { FAULTS } from './faults.js';
import { type DemoSource, startDemoSource } from './server.js';

let plain: DemoSource;
let testing: DemoSource;

beforeAll(async () => {
  plain = await startDemoSource({ port: 0, host: '127.0.0.1', rows: 95, log: () => {} });
  testing = await startDemoSource({ port: 0, host: '127.0.0.1', rows: 95, log: () => {}, faults: true, record: true });
});
afterAll(async () => {
  await plain.close();
  await testing.close();
});

describe('test-only fault routes', () => {
  it('are absent without the faults option: every one is a 404', async () => {
    expect(FAULTS.size).toBeGreaterThan(10);
    for (const path of FAULTS.keys()) {
      const res = await fetch(`${plain.url}${path}`, { method: path.endsWith('/graphql') ? 'POST' : 'GET', body: path.endsWith('/graphql') ? '{}' : undefined });
      expect([path, res.status]).toEqual([path, 404]);
      expect(await res.json()).toMatchObject({ error: 'not_found' });
    }
  });

  it('are served with it, beside the product dialects', async () => {
    const echo = await fetch(`${testing.url}/echo/partners/?a=1`, { method: 'POST', body: 'hello' });
    expect(echo.status).toBe(200);
    expect(await echo.json()).toMatchObject({ data: [{ method: 'POST', query: { a: '1' }, body: 'hello' }] });
    const html = await fetch(`${testing.url}/html/partners`);
    expect(html.headers.get('content-type')).toBe('text/html');
    expect((await fetch(`${testing.url}/html/partners`, { method: 'DELETE' })).status).toBe(405);
    expect((await fetch(`${testing.url}/open/partners?limit=1`)).status).toBe(200);
    expect((await fetch(`${testing.url}/no-such/partners`)).status).toBe(404);
  });
});

describe('the request recorder', () => {
  it('keeps method, path, query, headers and body of every request, and counts by path prefix', async () => {
    const before = testing.seen().length;
    const stale = testing.count('/stale/');
    await fetch(`${testing.url}/stale/partners?limit=2`, { headers: { 'X-Probe': 'p1' } });
    await fetch(`${testing.url}/graphql`, { method: 'POST', headers: { 'X-API-Key': 'demo-api-key' }, body: '{"query":"{ partners(first: 1) { edges { node { id } } } }"}' });
    const seen = testing.seen().slice(before);
    expect(seen.map((r) => [r.method, r.path])).toEqual([
      ['GET', '/stale/partners'],
      ['POST', '/graphql'],
    ]);
    expect(seen[0]!.url.searchParams.get('limit')).toBe('2');
    expect(seen[0]!.headers['x-probe']).toBe('p1');
    expect(JSON.parse(seen[1]!.body)).toEqual({ query: '{ partners(first: 1) { edges { node { id } } } }' });
    expect(testing.count('/stale/') - stale).toBe(1);
  });

  it('is off by default: seen() and count() say so', () => {
    expect(() => plain.seen()).toThrow(/record: true/);
    expect(() => plain.count('/')).toThrow(/record: true/);
  });
});
