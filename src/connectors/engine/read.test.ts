import { type AddressInfo, createServer as createNetServer, type Socket } from 'node:net';
import { createServer as createHttpServer } from 'node:http';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { TokenBucket } from '../rate-limit.js';
import type { Pagination } from '../types.js';
import {
  CancelledError,
  DeclaredTotalMismatchError,
  GraphQLErrorsError,
  GraphQLMalformedError,
  PageCapError,
  StalePositionError,
  UnreadableResponseError,
  UpstreamHttpError,
  UpstreamNetworkError,
} from './errors.js';
import type { RetryEvent } from './http.js';
import { firstPage, readEndpoint } from './read.js';
import type { DemoSource } from '../../demo-source/server.js';
import { connectorSpec, DEMO_AUTH, endpointSpec, engineContext, ids, range, readAll, startFixtureSource } from './testing/specs.js';

let source: DemoSource;
/** 150 rows: the demo source's /liar serves ids up to 150 − 100 = 50 and declares 150. */
let liar: DemoSource;
beforeAll(async () => {
  source = await startFixtureSource(95);
  liar = await startFixtureSource(150);
});
afterAll(async () => {
  await source.close();
  await liar.close();
});

/** The demo source's offset dialects (/offset, /hdr) ask for basic auth. */
const basic = { auth: DEMO_AUTH.basic };

const offset = (limit = 20, total = true): Pagination => ({ kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit, response_path: '$.data', ...(total ? { total_path: '$.total' } : {}) });
const relay = (query: string) =>
  endpointSpec('/graphql', { kind: 'relay', cursor_binding: 'variable', cursor_var: 'after', cursor_path: '$.data.partners.pageInfo.endCursor', has_more_path: '$.data.partners.pageInfo.hasNextPage', response_path: '$.data.partners.edges[*].node' }, { graphql: true, method: 'POST', query });

describe('retry policy', () => {
  it('500 forever: 5 attempts, then Failed with the transient text', async () => {
    const before = source.count('/down/');
    const retries: RetryEvent[] = [];
    const result = await readAll(connectorSpec(source.url), endpointSpec('/down/partners', offset()), engineContext({}, { onRetry: (e) => retries.push(e) }));
    expect(source.count('/down/') - before).toBe(5);
    expect(result.pages).toHaveLength(0);
    expect(result.error).toBeInstanceOf(UpstreamHttpError);
    expect(result.error?.message).toBe('upstream returned HTTP 500 (transient) — refusing to ingest its body as data: {"error":"internal_error","message":"the demo source is down (this dialect always fails)"}');
    expect(result.error).toMatchObject({ runStatus: 'Failed', retryable: true, status: 500 });
    // Exponential from the (shortened) base: 5, 10, 20 (cap), 20 (cap), each ±10 %.
    expect(retries.map((r) => r.attempt)).toEqual([1, 2, 3, 4]);
    retries.forEach((r, i) => {
      const expected = [5, 10, 20, 20][i]!;
      expect(r.delayMs).toBeGreaterThanOrEqual(Math.floor(expected * 0.9));
      expect(r.delayMs).toBeLessThanOrEqual(Math.ceil(expected * 1.1));
    });
  });

  it('a permanent status is not retried and is Failed, not retryable', async () => {
    const before = source.count('/hdr/');
    const result = await readAll(connectorSpec(source.url, basic), endpointSpec('/hdr/partners', offset()), engineContext());
    expect(source.count('/hdr/') - before).toBe(1);
    expect(result.error?.message).toBe('upstream returned HTTP 400 (permanent) — refusing to ingest its body as data: {"error":"bad_request","message":"header X-Api-Version is required"}');
    expect(result.error).toMatchObject({ runStatus: 'Failed', retryable: false });
  });

  it('429 then 503 then 200 on every page: every row once, 3 requests per page, Retry-After honoured', async () => {
    const before = source.count('/flaky/');
    const retries: RetryEvent[] = [];
    const limiter = new CountingBucket();
    const result = await readAll(connectorSpec(source.url), endpointSpec('/flaky/partners', offset(50)), engineContext({}, { limiter, onRetry: (e) => retries.push(e) }));
    expect(result.error).toBeUndefined();
    expect(ids(result.items)).toEqual(range(95));
    expect(source.count('/flaky/') - before).toBe(6);
    // A token before every request, retries included.
    expect(limiter.taken).toBe(6);
    expect(retries.map((r) => [r.attempt, r.status])).toEqual([
      [1, 429],
      [2, 503],
      [1, 429],
      [2, 503],
    ]);
    // The demo source's /flaky sends Retry-After: 0 with the 429 and the 503: it wins over the computed 5 and 10 ms.
    expect(retries.map((r) => r.delayMs)).toEqual([0, 0, 0, 0]);
  });

  it('a numeric Retry-After overrides the computed delay in both directions', async () => {
    // /retry-after: per query string a 429 with `Retry-After: <retry_after>`, a 503 without one, then the page.
    const retries: RetryEvent[] = [];
    let started = Date.now();
    let result = await readAll(
      connectorSpec(source.url),
      endpointSpec('/retry-after/partners?tag=longer&retry_after=0.3', offset(100)),
      engineContext({}, { retry: { attempts: 5, baseDelayMs: 5, maxDelayMs: 1000 }, onRetry: (e) => retries.push(e) }),
    );
    expect(result.error).toBeUndefined();
    expect(ids(result.items)).toEqual(range(95));
    expect(retries[0]).toMatchObject({ status: 429, delayMs: 300 });
    expect(Date.now() - started).toBeGreaterThanOrEqual(290);
    // The 503 without Retry-After waits the computed delay of a second attempt (10 ms ± 10 %).
    expect(retries[1]).toMatchObject({ attempt: 2, status: 503 });
    expect(retries[1]!.delayMs).toBeGreaterThanOrEqual(9);
    expect(retries[1]!.delayMs).toBeLessThanOrEqual(11);

    // With a 5 s base delay, a Retry-After of 0 still retries at once (the 503 after it would wait 10 s: one attempt budget of 2 stops there).
    retries.length = 0;
    started = Date.now();
    const baseDelayMs = 5000;
    result = await readAll(connectorSpec(source.url), endpointSpec('/retry-after/partners?tag=shorter&retry_after=0', offset(100)), engineContext({}, { retry: { attempts: 2, baseDelayMs, maxDelayMs: 60_000 }, onRetry: (e) => retries.push(e) }));
    expect(retries).toEqual([expect.objectContaining({ status: 429, delayMs: 0 })]);
    expect(Date.now() - started).toBeLessThan(baseDelayMs / 5); // relative to the delay it did not wait
    expect(result.error?.message).toMatch(/^upstream returned HTTP 503 \(transient\)/);
  });

  it('a Retry-After longer than the cap waits the cap, and one past what a timer holds is no immediate retry (probe 31 M8)', async () => {
    const warnings: Error[] = [];
    const onWarning = (w: Error) => warnings.push(w);
    process.on('warning', onWarning);
    try {
      for (const [tag, seconds] of [['cap', '120'], ['overflow', '2147484']] as const) {
        const retries: RetryEvent[] = [];
        const started = Date.now();
        const result = await readAll(
          connectorSpec(source.url),
          endpointSpec(`/retry-after/partners?tag=${tag}&retry_after=${seconds}`, offset(100)),
          engineContext({}, { retry: { attempts: 5, baseDelayMs: 5, maxDelayMs: 200 }, onRetry: (e) => retries.push(e) }),
        );
        expect(result.error).toBeUndefined();
        expect(ids(result.items)).toEqual(range(95));
        expect(retries[0]).toMatchObject({ status: 429, delayMs: 200 });
        expect(Date.now() - started).toBeGreaterThanOrEqual(190);
      }
      expect(warnings.filter((w) => w.name === 'TimeoutOverflowWarning')).toEqual([]);
    } finally {
      process.off('warning', onWarning);
    }
  });

  it('an HTTP-date Retry-After is waited for (up to the cap), not replaced by the computed delay', async () => {
    // An hour from now, as a source's 429 may say it: the wait is the cap (200 ms here), where 5 ms was waited.
    const date = new Date(Date.now() + 3_600_000).toUTCString();
    const retries: RetryEvent[] = [];
    const started = Date.now();
    const result = await readAll(
      connectorSpec(source.url),
      endpointSpec(`/retry-after/partners?tag=date&retry_after=${encodeURIComponent(date)}`, offset(100)),
      engineContext({}, { retry: { attempts: 5, baseDelayMs: 5, maxDelayMs: 200 }, onRetry: (e) => retries.push(e) }),
    );
    expect(result.error).toBeUndefined();
    expect(ids(result.items)).toEqual(range(95));
    expect(retries[0]).toMatchObject({ status: 429, delayMs: 200 });
    expect(Date.now() - started).toBeGreaterThanOrEqual(190);
  });

  it('network errors are retried, then Failed and retryable', async () => {
    const before = source.count('/reset/');
    const result = await readAll(connectorSpec(source.url), endpointSpec('/reset/partners', offset()), engineContext());
    expect(source.count('/reset/') - before).toBe(5);
    expect(result.error).toBeInstanceOf(UpstreamNetworkError);
    expect(result.error?.message).toMatch(/^upstream could not be reached after 5 attempt\(s\): /);
    expect(result.error).toMatchObject({ runStatus: 'Failed', retryable: true });
  });

  it('a connection refused is a network error too', async () => {
    const result = await readAll(connectorSpec('http://127.0.0.1:1'), endpointSpec('/x', offset()), engineContext({}, { retry: { attempts: 2, baseDelayMs: 1, maxDelayMs: 1 } }));
    expect(result.error).toBeInstanceOf(UpstreamNetworkError);
    expect(result.error?.message).toMatch(/ECONNREFUSED/);
  });

  it('an answer that is not valid HTTP/1.1 (garbage, a bad status or header, a bad chunk, headers past the limit, a body shorter than its Content-Length) is a network error: retried, then Failed naming it; the pre-flight names it too', async () => {
    const answers: Record<string, string> = {
      garbage: 'garbage\r\n\r\n',
      status: 'HTTP/1.1 999999 X\r\nContent-Length: 2\r\n\r\n[]',
      header: 'HTTP/1.1 200 OK\r\nX-A\x01: b\r\nContent-Length: 2\r\n\r\n[]',
      chunk: 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n[]\r\n0\r\n\r\n',
      overflow: `HTTP/1.1 200 OK\r\nX-Big: ${'a'.repeat(1 << 20)}\r\nContent-Length: 2\r\n\r\n[]`,
      short: 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n[]\r\n0\r\n\r\n',
    };
    let answer = '';
    let requests = 0;
    const sockets = new Set<Socket>();
    const raw = createNetServer((socket) => {
      sockets.add(socket);
      socket.on('error', () => undefined);
      socket.once('data', () => {
        requests++;
        socket.end(answer);
      });
    });
    await new Promise<void>((resolve) => raw.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(raw.address() as AddressInfo).port}`;
    try {
      for (const [name, text] of Object.entries(answers)) {
        answer = text;
        requests = 0;
        const result = await readAll(connectorSpec(url), endpointSpec('/x', offset()), engineContext());
        expect([name, result.error]).toEqual([name, expect.any(UpstreamNetworkError)]);
        expect(result.error?.message).toMatch(/^upstream could not be reached after 5 attempt\(s\): /);
        expect(result.error).toMatchObject({ runStatus: 'Failed', retryable: true });
        expect(requests).toBe(5);
        const report = await firstPage(connectorSpec(url), endpointSpec('/x', offset()), engineContext());
        expect([name, report.status, report.verdict]).toEqual([name, 0, expect.stringMatching(/^upstream could not be reached after 1 attempt\(s\): /)]);
      }
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => raw.close(resolve));
    }
  });

  it('interim answers (103 Early Hints) sent without end never give the status: the headers timeout ends each attempt all the same', async () => {
    // The HTTP client restarts its headers timer at each 1xx answer: a source sending one every 20 ms held each
    // attempt until the whole-answer timeout (10 minutes by default), and for ever without one.
    const sockets = new Set<Socket>();
    let requests = 0;
    const raw = createNetServer((socket) => {
      sockets.add(socket);
      socket.on('error', () => undefined);
      socket.once('data', () => {
        requests++;
        const hints = setInterval(() => socket.write('HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n'), 20);
        socket.on('close', () => clearInterval(hints));
      });
    });
    await new Promise<void>((resolve) => raw.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(raw.address() as AddressInfo).port}`;
    try {
      const ctx = engineContext({}, { retry: { attempts: 2, baseDelayMs: 1, maxDelayMs: 1 }, timeouts: { headersMs: 300, bodyMs: 300 } });
      const result = await readAll(connectorSpec(url), endpointSpec('/x', offset()), ctx);
      expect(result.error).toBeInstanceOf(UpstreamNetworkError);
      expect(result.error?.message).toBe('upstream could not be reached after 2 attempt(s): timeout: no response within 300 ms (svc.connectors.http.headers-timeout)');
      expect(requests).toBe(2);
      const report = await firstPage(connectorSpec(url), endpointSpec('/x', offset()), ctx);
      expect(report.verdict).toBe('upstream could not be reached after 1 attempt(s): timeout: no response within 300 ms (svc.connectors.http.headers-timeout)');
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => raw.close(resolve));
    }
  }, 10_000);

  it('a 2xx body that is not JSON fails the run, quoting it', async () => {
    const result = await readAll(connectorSpec(source.url), endpointSpec('/html/partners', offset()), engineContext());
    expect(result.error).toBeInstanceOf(UnreadableResponseError);
    expect(result.error?.message).toBe('upstream answered HTTP 200 with a body that is not JSON (content-type text/html): <html><body>maintenance</body></html>');
  });

  it('quotes at most 200 characters of the content type or charset, whatever the header holds', async () => {
    // undici takes header blocks of up to 16 KiB: quoted whole, one header made as long a run error, event and log line.
    const long = 'x'.repeat(10_000);
    const types: Record<string, string> = { '/json': `text/html; p=${long}`, '/empty': `text/html; p=${long}`, '/charset': `application/json; charset=${long}` };
    const server = createHttpServer((req, res) => {
      const path = (req.url ?? '').replace(/\?.*/, '');
      res.writeHead(200, { 'content-type': types[path] ?? 'text/plain' });
      res.end(path === '/empty' ? '' : '<html>maintenance</html>');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      const shown = `text/html; p=${long}`.slice(0, 200);
      const json = await readAll(connectorSpec(url), endpointSpec('/json', offset()), engineContext());
      expect(json.error?.message).toBe(`upstream answered HTTP 200 with a body that is not JSON (content-type ${shown}…): <html>maintenance</html>`);
      const empty = await readAll(connectorSpec(url), endpointSpec('/empty', offset()), engineContext({}, { retry: { attempts: 1, baseDelayMs: 1, maxDelayMs: 1 } }));
      expect(empty.error?.message).toContain(`(content-type ${shown}…)`);
      const charset = await readAll(connectorSpec(url), endpointSpec('/charset', offset()), engineContext());
      expect(charset.error?.message).toBe(
        `upstream answered HTTP 200 with a body in charset ${long.slice(0, 200)}…, which the hub cannot decode (declare UTF-8 or another charset of the WHATWG Encoding Standard)`,
      );
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });
});

describe('page cap', () => {
  it('reaching maxPages while the source has more ends Partial, after yielding those pages', async () => {
    const result = await readAll(connectorSpec(source.url, basic), endpointSpec('/offset/partners', offset(10)), engineContext({}, { maxPages: 3 }));
    expect(result.pages.map((p) => p.number)).toEqual([1, 2, 3]);
    expect(ids(result.items)).toEqual(range(30));
    expect(result.error).toBeInstanceOf(PageCapError);
    expect(result.error).toMatchObject({ runStatus: 'Partial' });
    expect(result.error?.message).toMatch(/the 3-page budget of one run was reached/);
  });

  it('a read that ends exactly on the cap completes', async () => {
    const result = await readAll(connectorSpec(source.url, basic), endpointSpec('/offset/partners', offset(19)), engineContext({}, { maxPages: 5 }));
    expect(result.error).toBeUndefined();
    expect(ids(result.items)).toEqual(range(95));
  });

  it('the default budget is 10,000 pages and says so', () => {
    expect(new PageCapError(10_000).message).toMatch(/^the 10,000-page budget of one run was reached/);
  });
});

describe('declared total (total_path)', () => {
  it('more declared than returned: Failed naming both figures, after every page was yielded', async () => {
    const result = await readAll(connectorSpec(liar.url), endpointSpec('/liar/partners', offset(20)), engineContext());
    expect(ids(result.items)).toEqual(range(50));
    expect(result.error).toBeInstanceOf(DeclaredTotalMismatchError);
    expect(result.error?.message).toBe('the source declared 150 rows but this run returned 50 — refusing to report a partial extract as a complete one');
    expect(result.error).toMatchObject({ runStatus: 'Failed', retryable: false });
  });

  it('fewer declared than returned: Failed too', async () => {
    const result = await readAll(connectorSpec(source.url), endpointSpec('/drf-low/partners?limit=20', { kind: 'body-link', link_path: '$.next', response_path: '$.results', total_path: '$.count' }), engineContext());
    expect(result.items).toHaveLength(95);
    expect(result.error?.message).toBe('the source declared 90 rows but this run returned 95 — refusing to report a partial extract as a complete one');
  });

  it('fewer declared (offset stops at the declared total) is caught as well', async () => {
    const result = await readAll(connectorSpec(source.url), endpointSpec('/liar-low/partners', offset(20)), engineContext());
    expect(result.items).toHaveLength(95);
    expect(result.error?.message).toBe('the source declared 90 rows but this run returned 95 — refusing to report a partial extract as a complete one');
  });

  it('the declared total is handed over on each page', async () => {
    const result = await readAll(connectorSpec(source.url, basic), endpointSpec('/offset/partners', offset(50)), engineContext());
    expect(result.pages.map((p) => p.declaredTotal)).toEqual([95, 95]);
  });

  it('exemption: no total_path', async () => {
    const result = await readAll(connectorSpec(liar.url), endpointSpec('/liar/partners', offset(20, false)), engineContext());
    expect(result.error).toBeUndefined();
    expect(result.items).toHaveLength(50);
  });

  it('exemption: watermark endpoints', async () => {
    const result = await readAll(connectorSpec(liar.url), endpointSpec('/liar/partners', offset(20), { incremental: { mode: 'watermark', param: 'updated_since', watermark_path: '$.updated_at' } }), engineContext());
    expect(result.error).toBeUndefined();
    expect(result.items).toHaveLength(50);
  });

  it('exemption: the declared total changes between pages', async () => {
    const result = await readAll(connectorSpec(source.url), endpointSpec('/drift/partners', offset(20)), engineContext());
    expect(result.error).toBeUndefined();
    expect(result.items).toHaveLength(90);
    expect(new Set(result.pages.map((p) => p.declaredTotal)).size).toBeGreaterThan(1);
  });
});

describe('stale positions (404/410 for a cursor carried from an earlier page)', () => {
  const cursor = (path: string) => endpointSpec(path, { kind: 'cursor', cursor_param: 'starting_after', cursor_path: '$.data[-1:].id', has_more_path: '$.has_more', response_path: '$.data' });

  it('404 on the second page: Partial, saying which position', async () => {
    const result = await readAll(connectorSpec(source.url), cursor('/stale/partners?limit=10'), engineContext());
    expect(result.pages).toHaveLength(1);
    expect(result.error).toBeInstanceOf(StalePositionError);
    expect(result.error).toMatchObject({ runStatus: 'Partial' });
    expect(result.error?.message).toBe('the source answered HTTP 404 for cursor "10": it no longer has the records past that position; the run stopped after 1 page(s) read');
  });

  it('410 likewise', async () => {
    const result = await readAll(connectorSpec(source.url), cursor('/gone/partners?limit=10'), engineContext());
    expect(result.error).toMatchObject({ runStatus: 'Partial', status: 410 });
  });

  it('404 on the first request is an ordinary permanent failure', async () => {
    const result = await readAll(connectorSpec(source.url), cursor('/no-such/partners'), engineContext());
    expect(result.error).toBeInstanceOf(UpstreamHttpError);
    expect(result.error?.message).toBe('upstream returned HTTP 404 (permanent) — refusing to ingest its body as data: {"error":"not_found","message":"no route for GET /no-such/partners; see docs/demo-source.md"}');
  });
});

describe('GraphQL envelopes', () => {
  it('an errors array fails the read with the count and the first message', async () => {
    // A fault route answering two errors; the demo source's own `boom` carries one.
    const result = await readAll(connectorSpec(source.url, { graphqlPath: '/errors/graphql' }), relay('{ partners(first: 10) { edges { node { id } } } }'), engineContext());
    expect(result.pages).toHaveLength(0);
    expect(result.error).toBeInstanceOf(GraphQLErrorsError);
    expect(result.error?.message).toBe('GraphQL response carried 2 error(s); first: boom: the first of two errors');
  });

  it('null data without errors is a malformed envelope', async () => {
    const result = await readAll(connectorSpec(source.url, { auth: DEMO_AUTH.apiKey }), relay('{ partners(first: 10) { nullData } }'), engineContext());
    expect(result.error).toBeInstanceOf(GraphQLMalformedError);
    expect(result.error?.message).toBe('GraphQL response has no errors and null/absent data (malformed envelope): {"data":null}');
  });
});

describe('watermark', () => {
  it('is sent as incremental.param on every request of the read, so every page is filtered alike', async () => {
    const start = source.seen().length;
    const endpoint = endpointSpec('/offset/partners', offset(20, false), { incremental: { mode: 'watermark', param: 'updated_since', watermark_path: '$.updated_at' } });
    const result = await readAll(connectorSpec(source.url, basic), endpoint, engineContext({}, { watermark: '2025-03-01T00:00:00.000Z' }));
    const queries = source.seen().slice(start).map((r) => Object.fromEntries(r.url.searchParams));
    expect(queries[0]).toEqual({ offset: '0', limit: '20', updated_since: '2025-03-01T00:00:00.000Z' });
    expect(queries.length).toBeGreaterThan(1);
    for (const q of queries.slice(1)) expect(q.updated_since).toBe('2025-03-01T00:00:00.000Z');
    // The source filtered every page alike: only rows updated since the mark, none twice.
    expect(result.items.length).toBeLessThan(95);
    expect(result.items.every((p) => (p as { updated_at: string }).updated_at >= '2025-03-01')).toBe(true);
    expect(new Set(ids(result.items)).size).toBe(result.items.length);
  });

  it('is not sent by a full endpoint, nor without a stored mark', async () => {
    const start = source.seen().length;
    await readAll(connectorSpec(source.url, basic), endpointSpec('/offset/partners', offset(50)), engineContext({}, { watermark: '2025-12-01' }));
    await readAll(connectorSpec(source.url, basic), endpointSpec('/offset/partners', offset(50), { incremental: { mode: 'watermark', param: 'updated_since', watermark_path: '$.updated_at' } }), engineContext());
    expect(source.seen().slice(start).every((r) => !r.url.searchParams.has('updated_since'))).toBe(true);
  });
});

describe('cancellation', () => {
  it('stops at the next page boundary with a CancelledError', async () => {
    const controller = new AbortController();
    const before = source.count('/offset/');
    const pages: number[] = [];
    let error: unknown;
    try {
      for await (const page of readEndpoint(connectorSpec(source.url, basic), endpointSpec('/offset/partners', offset(10)), engineContext({}, { signal: controller.signal }))) {
        pages.push(page.number);
        if (page.number === 2) controller.abort();
      }
    } catch (err) {
      error = err;
    }
    expect(pages).toEqual([1, 2]);
    expect(source.count('/offset/') - before).toBe(2);
    expect(error).toBeInstanceOf(CancelledError);
    expect(error).toMatchObject({ runStatus: 'Cancelled' });
  });

  it('interrupts a retry wait', async () => {
    const controller = new AbortController();
    const started = Date.now();
    setTimeout(() => controller.abort(), 50);
    const baseDelayMs = 10_000;
    const result = await readAll(connectorSpec(source.url), endpointSpec('/down/partners', offset()), engineContext({}, { signal: controller.signal, retry: { attempts: 5, baseDelayMs, maxDelayMs: 60_000 } }));
    expect(result.error).toBeInstanceOf(CancelledError);
    expect(Date.now() - started).toBeLessThan(baseDelayMs / 5); // the wait was cut, not served
  });

  it('an already aborted signal sends nothing', async () => {
    const before = source.seen().length;
    const result = await readAll(connectorSpec(source.url, basic), endpointSpec('/offset/partners', offset()), engineContext({}, { signal: AbortSignal.abort() }));
    expect(result.error).toBeInstanceOf(CancelledError);
    expect(source.seen().length).toBe(before);
  });
});

/** A full collection, through V8's own `gc` (exposed at run time: jest's workers start without --expose-gc). */
function collectGarbage(): void {
  setFlagsFromString('--expose-gc');
  (runInNewContext('gc') as () => void)();
}

describe('streaming, page by page', () => {
  it('a 2,000-page read never runs ahead of its consumer', async () => {
    const big = await startFixtureSource(2000);
    try {
      let checked = 0;
      // Garbage is collected before both readings, so the difference is what the read retained, not
      // what the collector had not got round to yet (which depends on the machine's load).
      collectGarbage();
      const heapBefore = process.memoryUsage().heapUsed;
      const warnings: Error[] = [];
      const onWarning = (w: Error) => warnings.push(w);
      process.on('warning', onWarning);
      const controller = new AbortController();
      for await (const page of readEndpoint(connectorSpec(big.url, basic), endpointSpec('/offset/partners', offset(1)), engineContext({}, { signal: controller.signal }))) {
        // Page N is handed over before page N+1 is requested (let alone N+2).
        expect(big.count('/offset/')).toBe(page.number);
        checked += 1;
      }
      expect(checked).toBe(2000);
      process.off('warning', onWarning);
      // No abort listener piles up on the run's signal.
      expect(warnings.filter((w) => w.name === 'MaxListenersExceededWarning')).toEqual([]);
      // Loose: nothing accumulates per page (2,000 pages held would be far above this).
      collectGarbage();
      expect(process.memoryUsage().heapUsed - heapBefore).toBeLessThan(32 * 1024 * 1024);
    } finally {
      await big.close();
    }
  });
});

describe('rate limit through the engine', () => {
  it('a 20/s bucket bounds the request rate', async () => {
    const limiter = new TokenBucket({ count: 10, windowMs: 500 });
    const before = source.seen().length;
    const started = Date.now();
    // 95 rows by 3 = 32 requests: 10 from the full bucket, 22 more at 20/s ≥ 1.1 s.
    const result = await readAll(connectorSpec(source.url, basic), endpointSpec('/offset/partners', offset(3)), engineContext({}, { limiter }));
    const elapsed = Date.now() - started;
    expect(result.error).toBeUndefined();
    expect(source.seen().length - before).toBe(32);
    const paced = (22 / 20) * 1000; // 22 requests past the full bucket at 20/s
    expect(elapsed).toBeGreaterThanOrEqual(paced - 50);
    expect(elapsed).toBeLessThan(paced * 5); // relative to the pace: the limiter does not hold back much more
  });
});

class CountingBucket extends TokenBucket {
  taken = 0;
  constructor() {
    super({ count: 1000, windowMs: 1000 });
  }
  override take(signal?: AbortSignal): Promise<void> {
    this.taken += 1;
    return super.take(signal);
  }
}
