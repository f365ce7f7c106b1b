import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { brotliCompressSync, deflateRawSync, deflateSync, gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { draftEndpoint } from '../draft.js';
import type { Pagination } from '../types.js';
import { UnreadableResponseError } from './errors.js';
import type { RetryEvent } from './http.js';
import { firstPage } from './read.js';
import { connectorSpec, endpointSpec, engineContext, readAll } from './testing/specs.js';

/**
 * A loopback source answering what a proxy or a careless server may answer for a page: an empty
 * 200, 204, a compressed body nobody asked for (probe 31 H4, L2, L3). Each route counts its hits.
 */
const ROWS = Array.from({ length: 12 }, (_, i) => ({ id: `r${i}` }));
const hits = new Map<string, number>();
let server: Server;
let base: string;

function page(res: ServerResponse, offset: number, limit: number): void {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ data: ROWS.slice(offset, offset + limit) }));
}

/** JSON of `count` distinct keys named by `name`, in objects of 50 (each with an id). */
function manyKeys(count: number, name: (k: number) => string): string {
  const objects: string[] = [];
  for (let k = 0; k < count; k += 50) {
    const members = Array.from({ length: Math.min(50, count - k) }, (_, j) => `"${name(k + j)}":0`);
    objects.push(`{"id":${k},${members.join(',')}}`);
  }
  return `[${objects.join(',')}]`;
}

function route(req: IncomingMessage, res: ServerResponse): void {
  const url = new URL(req.url ?? '/', 'http://x');
  const key = `${url.pathname}?${url.searchParams}`;
  const hit = (hits.get(key) ?? 0) + 1;
  hits.set(key, hit);
  const offset = Number(url.searchParams.get('offset') ?? 0);
  const limit = Number(url.searchParams.get('limit') ?? 2);
  const emptyOnce = url.searchParams.get('tag') === 'once';
  switch (url.pathname) {
    // offset 4 answers 200 with a zero-length JSON body (always, or only the first time with tag=once).
    case '/off-emptybody':
      if (offset === 4 && (!emptyOnce || hit === 1)) {
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': '0' });
        res.end();
        return;
      }
      page(res, offset, limit);
      return;
    // offset 4 answers 204 No Content: nothing more.
    case '/off-204':
      if (offset === 4) {
        res.writeHead(204);
        res.end();
        return;
      }
      page(res, offset, limit);
      return;
    // A page far under the byte limit that would build millions of objects: 1,000,001 empty objects
    // (3 MB of `{},`), or as many braces inside strings (text, nothing built).
    case '/many-objects':
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(`[${'{},'.repeat(1_000_000)}{}]`);
      return;
    // Text JSON.parse keeps one copy of per distinct value (a hash-table entry each; a key also a
    // hidden class per object): 100,001 distinct keys in objects of 50 (2 MB), 500,001 distinct short
    // strings (3 MB). As many keys repeated, or integer keys, or long strings, cost no such entry.
    case '/many-keys':
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(manyKeys(100_001, (k) => `k${k}`));
      return;
    case '/many-escaped-keys':
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(manyKeys(100_001, (k) => `\\u006b${k}`));
      return;
    case '/many-short-strings':
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(`[{"id":"s1","v":[${Array.from({ length: 500_001 }, (_, i) => `"${i.toString(36)}"`).join(',')}]}]`);
      return;
    case '/many-escaped-strings':
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(`[{"id":"s1","v":[${Array.from({ length: 500_001 }, (_, i) => `"\\u0041\\u0042${i.toString(36)}"`).join(',')}]}]`);
      return;
    case '/repeated-keys':
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(`[${Array.from({ length: 300_000 }, (_, i) => `{"id":${i},"name":"n${i % 7}","status":"active","email":"customer${i}@example.com"}`).join(',')}]`);
      return;
    case '/integer-keys':
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(`[{"id":"m1","by_id":{${Array.from({ length: 400_000 }, (_, i) => `"${i + 1}":"record number ${i}"`).join(',')}}}]`);
      return;
    case '/braces-in-strings':
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify([{ id: 'b1', text: '{['.repeat(1_000_000) }]));
      return;
    case '/html':
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end('<html><body>maintenance</body></html>');
      return;
    case '/gzip':
      res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'gzip' });
      res.end(gzipSync(JSON.stringify([{ id: 1 }])));
      return;
    case '/mislabelled':
      // Codings some servers send by mistake: nothing is compressed.
      res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': url.searchParams.get('as') ?? 'utf-8' });
      res.end(JSON.stringify([{ id: 1 }]));
      return;
    case '/gzip-204':
      res.writeHead(204, { 'content-encoding': 'gzip' });
      res.end();
      return;
    // offset 4 answers 205 Reset Content, which has no body either.
    case '/off-205':
      if (offset === 4) {
        res.writeHead(205);
        res.end();
        return;
      }
      page(res, offset, limit);
      return;
    case '/gzip-205':
      res.writeHead(205, { 'content-encoding': 'gzip' });
      res.end();
      return;
    // An error page compressed in the coding asked for (`raw`: deflate without its zlib wrapper).
    case '/error': {
      const as = url.searchParams.get('as') ?? 'gzip';
      const text = url.searchParams.get('big') ? 'a'.repeat(10 * 1024 * 1024) : '{"error": "quota exceeded",\n "tenant": "acme"}';
      const compress: Record<string, (b: Buffer) => Buffer> = { gzip: gzipSync, 'x-gzip': gzipSync, deflate: deflateSync, raw: deflateRawSync, br: brotliCompressSync };
      const bytes = compress[as] ? compress[as](Buffer.from(text)) : Buffer.from([0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x58, 0x61, 0x00, 0xff, 0x13]);
      res.writeHead(Number(url.searchParams.get('status') ?? 400), { 'content-type': 'application/json', 'content-encoding': as === 'raw' ? 'deflate' : as, 'content-length': bytes.length });
      res.end(bytes);
      return;
    }
    case '/error-binary':
      res.writeHead(400, { 'content-type': 'application/octet-stream' });
      res.end(Buffer.from(Array.from({ length: 300 }, (_, i) => (i * 37) % 256)));
      return;
    case '/latin1':
      res.writeHead(200, { 'content-type': 'application/json; charset=iso-8859-1' });
      res.end(Buffer.from('[{"id":"1","name":"Jos\xe9 M\xfcller"}]', 'latin1'));
      return;
    case '/bad-utf8':
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(Buffer.from('[{"id":"1","name":"Jos\xe9"}]', 'latin1'));
      return;
    case '/bad-utf8-outside':
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(Buffer.from('[{"id":"1","name":"Jos"}\xe9]', 'latin1'));
      return;
    case '/klingon':
      res.writeHead(200, { 'content-type': 'application/json; charset=x-klingon' });
      res.end('[]');
      return;
    // Headers and the start of a page, then silence; or no answer at all.
    case '/stall':
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('[{"id":"s1"},');
      return;
    case '/stall-headers':
      return;
    // A body that never ends nor goes silent: a space (JSON whitespace) every 20 ms, never past the idle timeout.
    case '/trickle': {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('[');
      const drip = setInterval(() => res.write(' '), 20);
      res.on('close', () => clearInterval(drip));
      return;
    }
    // A redirect, to an address whose query carries a signed token; a 304 is no redirect.
    case '/moved':
      res.writeHead(Number(url.searchParams.get('status') ?? 302), { location: 'https://elsewhere.example/v2/partners?sig=tok-signed-abc', 'content-type': 'text/plain' });
      res.end('Found. Redirecting to https://elsewhere.example/v2/partners');
      return;
    case '/not-modified':
      res.writeHead(304);
      res.end();
      return;
    default:
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end('{"error":"not_found"}');
  }
}

beforeAll(async () => {
  server = createServer(route);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(
  () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    }),
);

const offset: Pagination = { kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit: 2, response_path: '$.data' };
const ids = (items: unknown[]) => items.map((i) => (i as { id: string }).id);

describe('an empty 2xx body is unreadable, not a page of nothing (probe 31 H4)', () => {
  it('mid-read, answered empty every time: retried per policy, then Failed naming it, never Completed with rows missing', async () => {
    const retries: RetryEvent[] = [];
    const result = await readAll(connectorSpec(base), endpointSpec('/off-emptybody', offset), engineContext({}, { onRetry: (e) => retries.push(e) }));
    expect(ids(result.items)).toEqual(['r0', 'r1', 'r2', 'r3']);
    expect(result.error).toBeInstanceOf(UnreadableResponseError);
    expect(result.error?.message).toBe(
      'upstream answered HTTP 200 with an empty body (content-type application/json) after 5 attempt(s): only HTTP 204 or 205 may answer no content, so the page is unreadable rather than empty',
    );
    expect(result.error).toMatchObject({ runStatus: 'Failed', status: 200 });
    expect(hits.get('/off-emptybody?offset=4&limit=2')).toBe(5);
    expect(retries.map((r) => [r.attempt, r.status, r.error])).toEqual([1, 2, 3, 4].map((n) => [n, 200, 'empty body']));
  });

  it('answered empty once: the retry reads the page and every row arrives', async () => {
    const result = await readAll(connectorSpec(base), endpointSpec('/off-emptybody?tag=once', offset), engineContext());
    expect(result.error).toBeUndefined();
    expect(ids(result.items)).toEqual(ROWS.map((r) => r.id));
  });

  it('204 No Content still means no records: the read ends there', async () => {
    const result = await readAll(connectorSpec(base), endpointSpec('/off-204', offset), engineContext());
    expect(result.error).toBeUndefined();
    expect(ids(result.items)).toEqual(['r0', 'r1', 'r2', 'r3']);
    expect(hits.get('/off-204?offset=4&limit=2')).toBe(1);
  });

  it('205 Reset Content has no body either: no records, the read ends there, whatever its Content-Encoding', async () => {
    const retries: RetryEvent[] = [];
    const result = await readAll(connectorSpec(base), endpointSpec('/off-205', offset), engineContext({}, { onRetry: (e) => retries.push(e) }));
    expect(result.error).toBeUndefined();
    expect(ids(result.items)).toEqual(['r0', 'r1', 'r2', 'r3']);
    expect(hits.get('/off-205?offset=4&limit=2')).toBe(1);
    expect(retries).toEqual([]);
    const empty = await readAll(connectorSpec(base), endpointSpec('/gzip-205', { kind: 'none', response_path: '$' }), engineContext());
    expect(empty.error).toBeUndefined();
    expect(empty.items).toEqual([]);
  });

  it('the pre-flight of an empty 200 is no `ok` with 0 items, and shows the 200', async () => {
    const report = await firstPage(connectorSpec(base), endpointSpec('/off-emptybody', { ...offset, start_offset: 4 } as const), engineContext());
    expect(report).toMatchObject({ status: 200, items: [] });
    expect(report.verdict).toBe(
      'upstream answered HTTP 200 with an empty body (content-type application/json) after 1 attempt(s): only HTTP 204 or 205 may answer no content, so the page is unreadable rather than empty',
    );
  });
});

describe('a page of more objects and arrays than a page may build', () => {
  const none = { kind: 'none', response_path: '$' } as const;

  it('is refused before it is parsed, naming the bound, not built into millions of objects (1.5 GB of heap for 64 MiB of `{},`)', async () => {
    const result = await readAll(connectorSpec(base), endpointSpec('/many-objects', none), engineContext());
    expect(result.error).toBeInstanceOf(UnreadableResponseError);
    expect(result.error?.message).toBe('upstream answered HTTP 200 with a page of more than 1,000,000 JSON objects and arrays; refusing to build it in memory (ask the source for smaller pages)');
    expect(result.pages).toHaveLength(0);
    expect(hits.get('/many-objects?')).toBe(1);
  });

  it('a page of more than 100,000 distinct keys, or 500,000 distinct strings of up to 10 characters, is refused before it is parsed (JSON.parse keeps a shared copy of each, and hidden classes for keys: 7 million keys held the event loop for seconds), escaped ones counted alike', async () => {
    const over = (what: string) => `upstream answered HTTP 200 with a page of more than ${what}; refusing to build it in memory (ask the source for smaller pages)`;
    const cases: Array<[string, string]> = [
      ['/many-keys', over('100,000 distinct JSON object keys')],
      ['/many-escaped-keys', over('100,000 distinct JSON object keys')],
      ['/many-short-strings', over('500,000 distinct JSON strings of up to 10 characters')],
      ['/many-escaped-strings', over('500,000 distinct JSON strings of up to 10 characters')],
    ];
    for (const [path, message] of cases) {
      const result = await readAll(connectorSpec(base), endpointSpec(path, none), engineContext());
      expect(result.error).toBeInstanceOf(UnreadableResponseError);
      expect(result.error?.message).toBe(message);
      expect(result.pages).toHaveLength(0);
      expect(hits.get(`${path}?`)).toBe(1);
    }
  });

  it('reads a page of as many keys repeated (300,000 records of the same four), and a map keyed by 400,000 integers', async () => {
    const repeated = await readAll(connectorSpec(base), endpointSpec('/repeated-keys', none), engineContext());
    expect(repeated.error).toBeUndefined();
    expect(repeated.items).toHaveLength(300_000);
    const integers = await readAll(connectorSpec(base), endpointSpec('/integer-keys', none), engineContext());
    expect(integers.error).toBeUndefined();
    expect(Object.keys((integers.items[0] as { by_id: object }).by_id)).toHaveLength(400_000);
  });

  it('counts no brace inside a string', async () => {
    const result = await readAll(connectorSpec(base), endpointSpec('/braces-in-strings', none), engineContext());
    expect(result.error).toBeUndefined();
    expect(ids(result.items)).toEqual(['b1']);
  });
});

describe('an unreadable 200 keeps its status (probe 31 L2)', () => {
  it('the pre-flight of a 200 that is not JSON reports status 200, not 0', async () => {
    const report = await firstPage(connectorSpec(base), endpointSpec('/html', { kind: 'none', response_path: '$' }), engineContext());
    expect(report).toMatchObject({ status: 200, items: [], verdict: 'upstream answered HTTP 200 with a body that is not JSON (content-type text/html): <html><body>maintenance</body></html>' });
  });
});

describe('a compressed body the hub did not ask for (probe 31 L3)', () => {
  const GZIP = 'upstream answered HTTP 200 with a gzip-compressed body (Content-Encoding: gzip), which the hub did not ask for and does not decode';

  it('fails the read naming the encoding, without quoting binary noise', async () => {
    const result = await readAll(connectorSpec(base), endpointSpec('/gzip', { kind: 'none', response_path: '$' }), engineContext());
    expect(result.error).toBeInstanceOf(UnreadableResponseError);
    expect(result.error?.message).toBe(GZIP);
  });

  it('says so when the connector asked for it in a declared header', async () => {
    const connector = connectorSpec(base, { headers: [{ name: 'Accept-Encoding', value: 'gzip' }] });
    const result = await readAll(connector, endpointSpec('/gzip', { kind: 'none', response_path: '$' }), engineContext());
    expect(result.error?.message).toBe(
      'upstream answered HTTP 200 with a gzip-compressed body (Content-Encoding: gzip), which the hub does not decode: remove the Accept-Encoding header the connector declares',
    );
  });

  it('reads a body whose Content-Encoding names no compression (utf-8, none, identity), and a 204 whatever it says', async () => {
    for (const as of ['utf-8', 'none', 'Identity']) {
      const result = await readAll(connectorSpec(base), endpointSpec(`/mislabelled?as=${as}`, { kind: 'none', response_path: '$' }), engineContext());
      expect(result.error).toBeUndefined();
      expect(result.items).toEqual([{ id: 1 }]);
    }
    const empty = await readAll(connectorSpec(base), endpointSpec('/gzip-204', { kind: 'none', response_path: '$' }), engineContext());
    expect(empty.error).toBeUndefined();
    expect(empty.items).toEqual([]);
  });

  it('draft says the source answered 200 and why its answer is unreadable, not that it did not answer', async () => {
    const err = await draftEndpoint(connectorSpec(base), { path: '/gzip' }, engineContext()).catch((e: unknown) => e);
    expect((err as Error).message).toBe(`GET /gzip: ${GZIP}`);
  });
});

describe('a compressed error page', () => {
  const failed = async (path: string) => (await readAll(connectorSpec(base), endpointSpec(path, { kind: 'none', response_path: '$' }), engineContext())).error?.message;
  const HTTP_400 = 'upstream returned HTTP 400 (permanent) — refusing to ingest its body as data: ';

  it('is decompressed before it is quoted (gzip, deflate with or without its zlib wrapper, br)', async () => {
    for (const as of ['gzip', 'x-gzip', 'deflate', 'raw', 'br']) expect({ as, message: await failed(`/error?as=${as}`) }).toEqual({ as, message: `${HTTP_400}{"error": "quota exceeded", "tenant": "acme"}` });
  });

  it('a transient one too, after its retries', async () => {
    expect(await failed('/error?as=gzip&status=503')).toBe('upstream returned HTTP 503 (transient) — refusing to ingest its body as data: {"error": "quota exceeded", "tenant": "acme"}');
  });

  it('one that expands past 64 KiB (10 MB of text from 10 KB) is decompressed no further, and quoted as any long page is', async () => {
    const message = await failed('/error?as=gzip&big=1');
    expect(message).toBe(`${HTTP_400}${'a'.repeat(500)}…`);
  });

  it('in a coding the hub does not decode, it is named with its size, never quoted', async () => {
    expect(await failed('/error?as=zstd')).toBe(`${HTTP_400}(a zstd-compressed body of 10 bytes, not shown)`);
  });

  it('a body that is not text is described, not quoted', async () => {
    expect(await failed('/error-binary')).toBe(`${HTTP_400}(a body of 300 bytes that is not text, content-type application/octet-stream, not shown)`);
  });
});

describe('charsets (probe 31 M4)', () => {
  const none = { kind: 'none', response_path: '$' } as const;

  it('a declared ISO-8859-1 page is decoded as declared, not into U+FFFD', async () => {
    const result = await readAll(connectorSpec(base), endpointSpec('/latin1', none), engineContext());
    expect(result.error).toBeUndefined();
    expect(result.items).toEqual([{ id: '1', name: 'José Müller' }]);
  });

  it('bytes that are not UTF-8 outside any string of an undeclared page fail the read naming the offset; the pre-flight says so with its 200', async () => {
    const message = 'upstream answered HTTP 200 with a body that is not valid utf-8: an invalid byte sequence at byte offset 25';
    const result = await readAll(connectorSpec(base), endpointSpec('/bad-utf8-outside', none), engineContext());
    expect(result.error).toBeInstanceOf(UnreadableResponseError);
    expect(result.error?.message).toBe(message);
    expect(hits.get('/bad-utf8-outside?')).toBe(1); // not retried: the same bytes would come again
    expect(await firstPage(connectorSpec(base), endpointSpec('/bad-utf8-outside', none), engineContext())).toMatchObject({ status: 200, items: [], verdict: message });
  });

  it('bytes that are not UTF-8 inside a string are read as unpaired surrogates U+DC80 to U+DCFF (the run dead-letters that record alone)', async () => {
    const result = await readAll(connectorSpec(base), endpointSpec('/bad-utf8', none), engineContext());
    expect(result.error).toBeUndefined();
    expect(result.items).toEqual([{ id: '1', name: 'Jos\udce9' }]);
  });

  it('a charset the hub cannot decode is named', async () => {
    const result = await readAll(connectorSpec(base), endpointSpec('/klingon', none), engineContext());
    expect(result.error?.message).toBe(
      'upstream answered HTTP 200 with a body in charset x-klingon, which the hub cannot decode (declare UTF-8 or another charset of the WHATWG Encoding Standard)',
    );
  });
});

describe('a redirect (probe 34 L5)', () => {
  const none = { kind: 'none', response_path: '$' } as const;

  it('fails saying redirects are not followed, naming where it points without its query, and calling no 302 permanent', async () => {
    for (const status of [301, 302, 303, 307, 308]) {
      const result = await readAll(connectorSpec(base), endpointSpec(`/moved?status=${status}`, none), engineContext());
      expect(result.error?.message).toBe(
        `upstream answered HTTP ${status}, a redirect to https://elsewhere.example/v2/partners…; redirects are not followed (point spec.base_url or the endpoint path at the address it names) — its body is not ingested as data: Found. Redirecting to https://elsewhere.example/v2/partners`,
      );
      expect(result.error?.message).not.toContain('tok-signed-abc');
    }
  });

  it('another 3xx is not a success, not permanent', async () => {
    const result = await readAll(connectorSpec(base), endpointSpec('/not-modified', none), engineContext());
    expect(result.error?.message).toBe('upstream returned HTTP 304 (not a success) — refusing to ingest its body as data: ');
  });
});

describe('a stalled source (probe 31 M7)', () => {
  const none = { kind: 'none', response_path: '$' } as const;
  const timeouts = { headersMs: 150, bodyMs: 150 };

  it('a body that stalls after its headers times out per attempt and is retried per policy, then fails naming it and its setting', async () => {
    const retries: RetryEvent[] = [];
    const started = Date.now();
    const result = await readAll(connectorSpec(base), endpointSpec('/stall', none), engineContext({}, { timeouts, retry: { attempts: 3, baseDelayMs: 5, maxDelayMs: 20 }, onRetry: (e) => retries.push(e) }));
    expect(result.error?.message).toBe('upstream could not be reached after 3 attempt(s): timeout: the response body stalled for 150 ms (svc.connectors.http.body-timeout)');
    expect(retries.map((r) => [r.attempt, r.status, r.error])).toEqual([
      [1, 200, 'UND_ERR_BODY_TIMEOUT'],
      [2, 200, 'UND_ERR_BODY_TIMEOUT'],
    ]);
    expect(hits.get('/stall?')).toBe(3);
    expect(Date.now() - started).toBeLessThan(10_000); // relative to undici's 300 s default
  });

  it('a body trickling in without end (slowloris) is cut off once the whole answer takes longer than the response timeout, retried, then fails naming it', async () => {
    const retries: RetryEvent[] = [];
    const started = Date.now();
    // Headers and body timeouts far past the drip (20 ms), so that under load only the whole-answer limit can end an attempt.
    const slow = { headersMs: 5_000, bodyMs: 5_000, responseMs: 400 };
    const result = await readAll(connectorSpec(base), endpointSpec('/trickle', none), engineContext({}, { timeouts: slow, retry: { attempts: 2, baseDelayMs: 5, maxDelayMs: 20 }, onRetry: (e) => retries.push(e) }));
    expect(result.error?.message).toBe('upstream could not be reached after 2 attempt(s): timeout: the answer took longer than 400 ms as a whole (svc.connectors.http.response-timeout)');
    expect(retries.map((r) => [r.attempt, r.status, r.error])).toEqual([[1, 200, 'SVC_RESPONSE_TIMEOUT']]);
    expect(hits.get('/trickle?')).toBe(2);
    expect(Date.now() - started).toBeLessThan(10_000);
    const report = await firstPage(connectorSpec(base), endpointSpec('/trickle', none), engineContext({}, { timeouts: slow }));
    expect(report).toMatchObject({ status: 0, items: [], verdict: 'upstream could not be reached after 1 attempt(s): timeout: the answer took longer than 400 ms as a whole (svc.connectors.http.response-timeout)' });
  }, 20_000);

  it('no headers at all: the headers timeout, retried likewise, then fails naming it and its setting; the pre-flight names it after one attempt', async () => {
    const result = await readAll(connectorSpec(base), endpointSpec('/stall-headers', none), engineContext({}, { timeouts, retry: { attempts: 2, baseDelayMs: 5, maxDelayMs: 20 } }));
    expect(result.error?.message).toBe('upstream could not be reached after 2 attempt(s): timeout: no response within 150 ms (svc.connectors.http.headers-timeout)');
    const report = await firstPage(connectorSpec(base), endpointSpec('/stall-headers', none), engineContext({}, { timeouts }));
    expect(report).toMatchObject({ status: 0, items: [], verdict: 'upstream could not be reached after 1 attempt(s): timeout: no response within 150 ms (svc.connectors.http.headers-timeout)' });
  });
});
