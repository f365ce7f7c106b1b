import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A small HTTP source for the engine's tests (127.0.0.1, a free port), imitating the dialects of the
 * spec 3 demo source over `rows` generated records: Spring pages, Stripe cursors, DRF next links,
 * Link headers, offset with a total, a liar (both directions), a drifting total, 500 forever, a flaky
 * path (429 then 503 then 200 per query string), GraphQL Relay with boom/nullData envelopes, cursors
 * that went stale (404/410), a connection reset, a non-JSON body, and an echo of the request.
 */
export interface FakeRecord {
  id: number;
  name: string;
  updated_at: string;
}

export interface SeenRequest {
  method: string;
  path: string;
  url: URL;
  headers: IncomingMessage['headers'];
  body: string;
}

export interface FakeSource {
  url: string;
  rows: number;
  requests: SeenRequest[];
  /** Requests whose path starts with `prefix`. */
  count(prefix: string): number;
  /** `Retry-After` sent with the flaky path's 429 (default `0`); undefined sends none. */
  flakyRetryAfter: string | undefined;
  close(): Promise<void>;
}

export function fakeRecord(id: number): FakeRecord {
  const day = (id * 7919) % 365;
  return { id, name: `Partner ${id}`, updated_at: new Date(Date.UTC(2024, 0, 1) + day * 86_400_000).toISOString() };
}

export async function startFakeSource(options: { rows?: number } = {}): Promise<FakeSource> {
  const rows = options.rows ?? 95;
  const all = Array.from({ length: rows }, (_, i) => fakeRecord(i + 1));
  const flakyCounts = new Map<string, number>();
  const requests: SeenRequest[] = [];
  let base = '';

  const source: FakeSource = {
    url: '',
    rows,
    requests,
    count: (prefix) => requests.filter((r) => r.path.startsWith(prefix)).length,
    flakyRetryAfter: '0',
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const url = new URL(req.url ?? '/', base);
      const seen: SeenRequest = { method: req.method ?? 'GET', path: url.pathname, url, headers: req.headers, body: Buffer.concat(chunks).toString('utf8') };
      requests.push(seen);
      try {
        route(seen, res);
      } catch (err) {
        json(res, 500, { error: String(err) });
      }
    });
  });

  const int = (url: URL, name: string, fallback: number) => {
    const v = url.searchParams.get(name);
    return v === null ? fallback : Number(v);
  };

  function offsetDialect(url: URL, res: ServerResponse, data: FakeRecord[], declare: (offset: number, filtered: number) => number) {
    const since = url.searchParams.get('updated_since');
    const filtered = since ? data.filter((r) => r.updated_at >= since) : data;
    const offset = int(url, 'offset', 0);
    const limit = Math.min(int(url, 'limit', 10), 500);
    json(res, 200, { data: filtered.slice(offset, offset + limit), total: declare(offset, filtered.length) });
  }

  function route(r: SeenRequest, res: ServerResponse) {
    const { url } = r;
    switch (r.path) {
      case '/spring/partners': {
        const page = int(url, 'page', 0);
        const size = int(url, 'size', 50);
        json(res, 200, { content: all.slice(page * size, page * size + size), totalPages: Math.ceil(rows / size), totalElements: rows, number: page });
        return;
      }
      case '/v1/partners':
      case '/stale/partners':
      case '/gone/partners':
      case '/stuck/partners': {
        const after = url.searchParams.get('starting_after');
        if (after !== null && r.path === '/stale/partners') return json(res, 404, { error: { message: `No such partner: ${after}` } });
        if (after !== null && r.path === '/gone/partners') return json(res, 410, { error: 'cursor expired' });
        const limit = int(url, 'limit', 10);
        const start = r.path === '/stuck/partners' || after === null ? 0 : all.findIndex((p) => p.id === Number(after)) + 1;
        const data = all.slice(start, start + limit);
        json(res, 200, { object: 'list', data, has_more: start + limit < rows });
        return;
      }
      case '/drf/partners': {
        const page = int(url, 'page', 1);
        const size = int(url, 'page_size', 10);
        const relative = url.searchParams.get('relative') === '1';
        const more = page * size < rows;
        const next = new URL(url);
        next.searchParams.set('page', String(page + 1));
        json(res, 200, {
          count: Number(url.searchParams.get('declare') ?? rows),
          next: more ? (relative ? `${next.pathname}${next.search}` : next.href) : null,
          previous: null,
          results: all.slice((page - 1) * size, page * size),
        });
        return;
      }
      case '/link/partners': {
        const page = int(url, 'page', 1);
        const size = int(url, 'per_page', 10);
        const relative = url.searchParams.get('relative') === '1';
        const last = Math.ceil(rows / size);
        const link = (n: number) => {
          const u = new URL(url);
          u.searchParams.set('page', String(n));
          return relative ? `${u.pathname}${u.search}` : u.href;
        };
        const parts = [`<${link(1)}>; rel="first"`, `<${link(last)}>; rel="last"`];
        if (page < last) parts.unshift(`<${link(page + 1)}>; rel="next"`);
        res.setHeader('Link', parts.join(', '));
        json(res, 200, all.slice((page - 1) * size, page * size));
        return;
      }
      case '/elsewhere/partners':
        json(res, 200, { results: all.slice(0, 1), next: 'http://example.invalid/elsewhere/partners?page=2' });
        return;
      case '/offset/partners':
        return offsetDialect(url, res, all, (_o, n) => n);
      case '/liar/partners':
        return offsetDialect(url, res, all.slice(0, rows - 5), () => rows);
      case '/liar-low/partners':
        return offsetDialect(url, res, all, () => rows - 5);
      case '/drift/partners':
        return offsetDialect(url, res, all.slice(0, rows - 5), (offset) => rows + offset);
      case '/down/partners':
        return json(res, 500, { error: 'down' });
      case '/flaky/partners': {
        const key = url.search;
        const seen = (flakyCounts.get(key) ?? 0) + 1;
        flakyCounts.set(key, seen);
        if (seen === 1) {
          if (source.flakyRetryAfter !== undefined) res.setHeader('Retry-After', source.flakyRetryAfter);
          return json(res, 429, { error: 'slow down' });
        }
        if (seen === 2) return json(res, 503, { error: 'unavailable' });
        return offsetDialect(url, res, all, (_o, n) => n);
      }
      case '/reset/partners':
        res.socket?.destroy();
        return;
      case '/html/partners':
        res.writeHead(200, { 'content-type': 'text/html' });
        res.end('<html><body>maintenance</body></html>');
        return;
      case '/bad-request/partners':
        return json(res, 400, { error: 'missing header X-Api-Version', echo: r.headers.authorization ?? null });
      case '/secure/partners':
        if (r.headers.authorization !== 'Bearer good-token') return json(res, 401, { error: 'unauthorized' });
        return json(res, 200, { data: all.slice(0, 3) });
      case '/echo':
        return json(res, 200, { data: [{ method: r.method, url: r.url.href, query: Object.fromEntries(r.url.searchParams), headers: r.headers, body: r.body }] });
      case '/graphql':
        return graphql(r, res);
      default:
        return json(res, 404, { error: 'not found' });
    }
  }

  function graphql(r: SeenRequest, res: ServerResponse) {
    if (r.method !== 'POST') return json(res, 405, { error: 'POST only' });
    const { query, variables } = JSON.parse(r.body || '{}') as { query?: string; variables?: Record<string, unknown> };
    if (!query) return json(res, 400, { errors: [{ message: 'no query' }] });
    if (query.includes('boom')) return json(res, 200, { errors: [{ message: 'boom requested' }, { message: 'second' }], data: null });
    if (query.includes('nullData')) return json(res, 200, { data: null });
    const first = Number(/first:\s*(\d+)/.exec(query)?.[1] ?? 10);
    const after = typeof variables?.after === 'string' ? Number(Buffer.from(variables.after, 'base64').toString('utf8').split(':')[1]) : 0;
    const start = all.findIndex((p) => p.id > after);
    const slice = start < 0 ? [] : all.slice(start, start + first);
    const cursor = (id: number) => Buffer.from(`cursor:${id}`).toString('base64');
    const edges = slice.map((node) => ({ cursor: cursor(node.id), node }));
    const last = slice[slice.length - 1];
    json(res, 200, {
      data: {
        partners: {
          edges,
          pageInfo: { endCursor: last ? cursor(last.id) : null, hasNextPage: last ? last.id < rows : false },
        },
      },
    });
  }

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  source.url = base;
  return source;
}

function json(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}
