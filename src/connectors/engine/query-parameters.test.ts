import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { setQueryParameter } from './request.js';
import { connectorSpec, endpointSpec, engineContext, readAll } from './testing/specs.js';

/**
 * The parameters the engine adds to a request (pagination, the watermark, an API key in the query)
 * leave the rest of its query as written: a next link signed over its exact query, or a cursor its
 * source compares as sent, reaches the source unchanged.
 */

describe('setQueryParameter', () => {
  it('adds a parameter, replaces every one of its name, and leaves the others as written', () => {
    const url = new URL('http://x/items?cursor=a%20b~c&sig=x+y*&page=1&page=2');
    setQueryParameter(url, 'page', '3');
    setQueryParameter(url, 'api_key', 'k y');
    expect(url.search).toBe('?cursor=a%20b~c&sig=x+y*&page=3&api_key=k%20y');
  });

  it('finds a name however it is encoded', () => {
    const url = new URL('http://x/items?api%5Fkey=old&a+b=1&bad=%E0%A4%A');
    setQueryParameter(url, 'api_key', 'new');
    setQueryParameter(url, 'a b', '2');
    expect(url.search).toBe('?api_key=new&a%20b=2&bad=%E0%A4%A');
    expect(url.searchParams.get('api_key')).toBe('new');
  });

  it('an empty query gets the parameter alone', () => {
    const url = new URL('http://x/items');
    setQueryParameter(url, 'limit', '50');
    expect(url.href).toBe('http://x/items?limit=50');
  });
});

describe('a next link with an API key in the query', () => {
  let server: Server;
  let base: string;
  const seen: string[] = [];
  beforeAll(async () => {
    server = createServer((req, res) => {
      seen.push(req.url!);
      const first = !req.url!.includes('cursor=');
      res.writeHead(200, { 'content-type': 'application/json', ...(first ? { link: `<${base}/items?cursor=a%20b~c&sig=x+y*>; rel="next"` } : {}) });
      res.end(JSON.stringify({ data: [{ id: first ? 1 : 2 }] }));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it('is sent with its own query as the source wrote it, the key added', async () => {
    const connector = connectorSpec(base, { auth: { kind: 'api-key', in: 'query', name: 'api_key', value_env: 'QUERY_KEY' } });
    const result = await readAll(connector, endpointSpec('/items', { kind: 'link-header', response_path: '$.data' }), engineContext({ QUERY_KEY: 'k-1' }));
    expect(result.error).toBeUndefined();
    expect(result.pages.flatMap((p) => p.items)).toEqual([{ id: 1 }, { id: 2 }]);
    expect(seen).toEqual(['/items?api_key=k-1', '/items?cursor=a%20b~c&sig=x+y*&api_key=k-1']);
  });
});
