import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { generatePartners, type Partner } from './data.js';
import { type DemoSource, startDemoSource } from './server.js';
import { until } from '../../test/harness/until.js';

const N = 2400;
const ALL_IDS = Array.from({ length: N }, (_, i) => i + 1);
const BASIC = { Authorization: `Basic ${Buffer.from('demo:demo-password').toString('base64')}` };
const BEARER = { Authorization: 'Bearer demo-bearer-token' };
const API_KEY = { 'X-API-Key': 'demo-api-key' };

let source: DemoSource;
const lines: string[] = [];

beforeAll(async () => {
  source = await startDemoSource({ port: 0, host: '127.0.0.1', rows: N, log: (line) => lines.push(line) });
});
afterAll(async () => {
  await source.close();
});

async function getJson(path: string, headers: Record<string, string> = {}) {
  const res = await fetch(path.startsWith('http') ? path : `${source.url}${path}`, { headers });
  return { status: res.status, headers: res.headers, body: (await res.json()) as Record<string, unknown> & unknown[] };
}

function ids(rows: unknown): number[] {
  return (rows as Partner[]).map((p) => p.id);
}

describe('REST dialects page through every row exactly once', () => {
  it('spring: page (0-based) and size until totalPages', async () => {
    const seen: number[] = [];
    let requests = 0;
    let totalPages = 1;
    for (let page = 0; page < totalPages; page++) {
      const { status, body } = await getJson(`/spring/partners?page=${page}&size=100`, BASIC);
      requests++;
      expect(status).toBe(200);
      expect(body).toMatchObject({ totalElements: N, number: page, size: 100, first: page === 0 });
      totalPages = body.totalPages as number;
      seen.push(...ids(body.content));
    }
    expect(totalPages).toBe(24);
    expect(requests).toBe(24);
    expect(seen).toEqual(ALL_IDS);
    const past = await getJson('/spring/partners?page=24&size=100', BASIC);
    expect(past.body).toMatchObject({ content: [], empty: true, last: true });
  });

  it('v1: Stripe cursor starting_after = last id, until has_more is false', async () => {
    const seen: number[] = [];
    let after: number | undefined;
    let requests = 0;
    for (;;) {
      const { status, body } = await getJson(`/v1/partners?limit=100${after ? `&starting_after=${after}` : ''}`, BEARER);
      requests++;
      expect(status).toBe(200);
      expect(body.object).toBe('list');
      const page = ids(body.data);
      seen.push(...page);
      if (!body.has_more) break;
      after = page.at(-1);
    }
    expect(requests).toBe(24);
    expect(seen).toEqual(ALL_IDS);
    expect((await getJson('/v1/partners?starting_after=2400', BEARER)).body).toMatchObject({ data: [], has_more: false });
    expect((await getJson('/v1/partners?starting_after=9999', BEARER)).status).toBe(400);
    expect((await getJson('/v1/partners?starting_after=abc', BEARER)).status).toBe(400);
  });

  it('drf: follows the absolute next URL in the body until null; count is the total', async () => {
    const seen: number[] = [];
    let next: string | null = `${source.url}/drf/partners/?limit=100`;
    let requests = 0;
    let previous: unknown = 'unset';
    while (next) {
      const { status, body } = await getJson(next, BEARER);
      requests++;
      expect(status).toBe(200);
      expect(body.count).toBe(N);
      if (requests === 1) previous = body.previous;
      seen.push(...ids(body.results));
      next = body.next as string | null;
      if (next) expect(next).toMatch(new RegExp(`^${source.url}/drf/partners/\\?`));
    }
    expect(previous).toBeNull();
    expect(requests).toBe(24);
    expect(seen).toEqual(ALL_IDS);
  });

  it('link: bare array, Link rel="next" with an absolute URL until the last page', async () => {
    const seen: number[] = [];
    let next: string | undefined = `${source.url}/link/partners?limit=100`;
    let requests = 0;
    while (next) {
      const { status, headers, body } = await getJson(next, API_KEY);
      requests++;
      expect(status).toBe(200);
      expect(Array.isArray(body)).toBe(true);
      seen.push(...ids(body));
      const link = headers.get('link');
      next = link ? /^<([^>]+)>;\s*rel="next"$/.exec(link)?.[1] : undefined;
      if (link) expect(next).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/link\/partners\?limit=100&offset=\d+$/);
    }
    expect(requests).toBe(24);
    expect(seen).toEqual(ALL_IDS);
  });

  it.each([
    ['offset', BASIC],
    ['open', {}],
    ['hdr', { ...BASIC, 'X-Api-Version': '2' }],
  ])('%s: offset and limit until offset reaches total', async (dialect, headers) => {
    const seen: number[] = [];
    let requests = 0;
    for (let offset = 0, total = 1; offset < total; offset += 100) {
      const { status, body } = await getJson(`/${dialect}/partners?offset=${offset}&limit=100`, headers);
      requests++;
      expect(status).toBe(200);
      expect(body).toMatchObject({ total: N, offset, limit: 100 });
      total = body.total as number;
      seen.push(...ids(body.data));
    }
    expect(requests).toBe(24);
    expect(seen).toEqual(ALL_IDS);
  });

  it('every dialect serves the same records', async () => {
    const expected = generatePartners(N).slice(0, 3);
    expect((await getJson('/spring/partners?size=3', BASIC)).body.content).toEqual(expected);
    expect((await getJson('/v1/partners?limit=3', BEARER)).body.data).toEqual(expected);
    expect((await getJson('/drf/partners?limit=3', BEARER)).body.results).toEqual(expected);
    expect((await getJson('/link/partners?limit=3', API_KEY)).body).toEqual(expected);
    expect((await getJson('/open/partners?limit=3')).body.data).toEqual(expected);
  });
});

describe('page sizes', () => {
  it('default 50 and capped at 500', async () => {
    const dflt = await getJson('/open/partners');
    expect(dflt.body).toMatchObject({ offset: 0, limit: 50 });
    expect(dflt.body.data).toHaveLength(50);
    const capped = await getJson('/open/partners?limit=1000');
    expect(capped.body.limit).toBe(500);
    expect(capped.body.data).toHaveLength(500);
    expect((await getJson('/spring/partners', BASIC)).body).toMatchObject({ size: 50, totalPages: 48 });
    expect((await getJson('/spring/partners?size=999', BASIC)).body).toMatchObject({ size: 500, totalPages: 5 });
    expect((await getJson('/v1/partners', BEARER)).body.data).toHaveLength(50);
    expect((await getJson('/v1/partners?limit=501', BEARER)).body.data).toHaveLength(500);
    expect((await getJson('/drf/partners', BEARER)).body.results).toHaveLength(50);
    expect((await getJson('/link/partners', API_KEY)).body).toHaveLength(50);
    expect((await getJson('/link/partners?limit=600', API_KEY)).body).toHaveLength(500);
  });

  it('refuses malformed paging parameters with 400', async () => {
    for (const query of ['limit=0', 'limit=abc', 'offset=-1', 'limit=1.5']) {
      const res = await getJson(`/open/partners?${query}`);
      expect(res.status).toBe(400);
      expect(res.body.error).toBe('bad_request');
    }
    expect((await getJson('/spring/partners?page=x', BASIC)).status).toBe(400);
  });
});

describe('authentication', () => {
  const wrongBasic = { Authorization: `Basic ${Buffer.from('demo:nope').toString('base64')}` };
  it.each([
    ['/spring/partners', {}, 'Basic'],
    ['/spring/partners', wrongBasic, 'Basic'],
    ['/spring/partners', BEARER, 'Basic'],
    ['/offset/partners', {}, 'Basic'],
    ['/offset/partners', wrongBasic, 'Basic'],
    ['/v1/partners', {}, 'Bearer'],
    ['/v1/partners', { Authorization: 'Bearer wrong' }, 'Bearer'],
    ['/drf/partners', BASIC, 'Bearer'],
    ['/link/partners', {}, undefined],
    ['/link/partners', { 'X-API-Key': 'wrong' }, undefined],
    ['/hdr/partners', { 'X-Api-Version': '1' }, 'Basic'],
  ])('%s refuses %j with 401', async (path, headers, scheme) => {
    const res = await getJson(path, headers as Record<string, string>);
    expect(res.status).toBe(401);
    expect(res.body.error).toBe('unauthorized');
    if (scheme) expect(res.headers.get('www-authenticate')).toMatch(new RegExp(`^${scheme} `));
  });

  it('open needs nothing; the api key is also accepted as ?api_key=', async () => {
    expect((await getJson('/open/partners')).status).toBe(200);
    expect((await getJson('/link/partners?api_key=demo-api-key')).status).toBe(200);
  });

  it('credentials can be replaced', async () => {
    const other = await startDemoSource({
      port: 0,
      host: '127.0.0.1',
      rows: 10,
      log: () => {},
      credentials: { username: 'u', password: 'p', bearerToken: 't', apiKey: 'k' },
    });
    try {
      const basic = { Authorization: `Basic ${Buffer.from('u:p').toString('base64')}` };
      expect((await fetch(`${other.url}/offset/partners`, { headers: basic })).status).toBe(200);
      expect((await fetch(`${other.url}/offset/partners`, { headers: BASIC })).status).toBe(401);
      expect((await fetch(`${other.url}/v1/partners`, { headers: { Authorization: 'Bearer t' } })).status).toBe(200);
      expect((await fetch(`${other.url}/link/partners`, { headers: { 'X-API-Key': 'k' } })).status).toBe(200);
      expect((await fetch(`${other.url}/link/partners`, { headers: API_KEY })).status).toBe(401);
    } finally {
      await other.close();
    }
  });
});

describe('behaviours', () => {
  it('hdr: 400 without X-Api-Version, even without credentials', async () => {
    for (const headers of [{}, BASIC]) {
      const res = await getJson('/hdr/partners', headers);
      expect(res.status).toBe(400);
      expect(res.body.message).toMatch(/X-Api-Version/);
    }
    expect((await getJson('/hdr/partners', { ...BASIC, 'X-Api-Version': '1' })).status).toBe(200);
  });

  it('liar: declares 2400 but serves only 2300 rows', async () => {
    const seen: number[] = [];
    for (let offset = 0; ; offset += 100) {
      const { status, body } = await getJson(`/liar/partners?offset=${offset}&limit=100`);
      expect(status).toBe(200);
      expect(body.total).toBe(N);
      const page = ids(body.data);
      if (page.length === 0) break;
      seen.push(...page);
    }
    expect(seen).toEqual(ALL_IDS.slice(0, N - 100));
  });

  it('down: 500 forever with a JSON body, whatever the method', async () => {
    for (let i = 0; i < 3; i++) {
      const res = await getJson('/down/partners', BASIC);
      expect(res.status).toBe(500);
      expect(res.body.error).toBe('internal_error');
    }
    expect((await fetch(`${source.url}/down/partners`, { method: 'POST' })).status).toBe(500);
  });

  it('flaky: 429 (Retry-After: 0) then 503 then 200 per distinct query string; /admin/reset starts over', async () => {
    await fetch(`${source.url}/admin/reset`, { method: 'POST' });
    const path = '/flaky/partners?offset=0&limit=10';
    const first = await getJson(path);
    expect(first.status).toBe(429);
    expect(first.headers.get('retry-after')).toBe('0');
    const second = await getJson(path);
    expect(second.status).toBe(503);
    expect(second.headers.get('retry-after')).toBe('0');
    const third = await getJson(path);
    expect(third.status).toBe(200);
    expect(ids(third.body.data)).toEqual(ALL_IDS.slice(0, 10));
    expect((await getJson(path)).status).toBe(200);
    expect((await getJson('/flaky/partners?offset=10&limit=10')).status).toBe(429);

    const reset = await getJson('/admin/reset');
    expect(reset.status).toBe(200);
    expect(reset.body.reset).toBe(true);
    expect((await getJson(path)).status).toBe(429);
  });

  it('flaky: a retrying client reads every row, three requests per page', async () => {
    await fetch(`${source.url}/admin/reset`, { method: 'POST' });
    const seen: number[] = [];
    let requests = 0;
    for (let offset = 0, total = 1; offset < total; offset += 200) {
      for (let attempt = 1; ; attempt++) {
        const { status, body } = await getJson(`/flaky/partners?offset=${offset}&limit=200`);
        requests++;
        if (status === 429 || status === 503) {
          expect(attempt).toBeLessThan(3);
          continue;
        }
        expect(status).toBe(200);
        total = body.total as number;
        seen.push(...ids(body.data));
        break;
      }
    }
    expect(requests).toBe(36);
    expect(seen).toEqual(ALL_IDS);
  });

  it('updated_since filters inclusively before paging; total reflects the filter', async () => {
    const rows = generatePartners(N);
    const pivot = [...rows].sort((a, b) => a.updated_at.localeCompare(b.updated_at))[1800]!.updated_at;
    const expected = rows.filter((p) => p.updated_at >= pivot).map((p) => p.id);
    expect(expected.length).toBeGreaterThanOrEqual(600);
    const seen: number[] = [];
    for (let offset = 0, total = 1; offset < total; offset += 100) {
      const { status, body } = await getJson(`/offset/partners?updated_since=${encodeURIComponent(pivot)}&offset=${offset}&limit=100`, BASIC);
      expect(status).toBe(200);
      expect(body.total).toBe(expected.length);
      total = body.total as number;
      for (const p of body.data as Partner[]) expect(p.updated_at >= pivot).toBe(true);
      seen.push(...ids(body.data));
    }
    expect(seen).toEqual(expected);
    expect(seen).toContain(rows.find((p) => p.updated_at === pivot)!.id);
    // Other ISO-8601 forms of the same instant filter the same way.
    const offsetForm = new Date(Date.parse(pivot)).toISOString();
    expect((await getJson(`/open/partners?updated_since=${offsetForm}`)).body.total).toBe(expected.length);
    expect((await getJson('/open/partners?updated_since=2026-06-01T00:00:00Z')).body).toMatchObject({ total: 0, data: [] });
    expect((await getJson('/open/partners?updated_since=yesterday')).status).toBe(400);
  });

  it('unknown paths are 404 JSON; other methods on a dialect 405', async () => {
    for (const path of ['/', '/nope/partners', '/offset/customers', '/offset', '/unknown/start.swe']) {
      const res = await getJson(path, BASIC);
      expect(res.status).toBe(404);
      expect(res.body.error).toBe('not_found');
    }
    const post = await fetch(`${source.url}/offset/partners`, { method: 'POST', headers: BASIC });
    expect(post.status).toBe(405);
    expect(post.headers.get('allow')).toBe('GET');
  });

  it('logs one line per request and counts requests', async () => {
    const before = source.requests();
    lines.length = 0;
    await getJson('/open/partners?offset=0&limit=2');
    await getJson('/offset/partners');
    expect(source.requests()).toBe(before + 2);
    await until('the two request lines', () => lines.length >= 2); // logged when each response has finished
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(/^GET \/open\/partners\?offset=0&limit=2 200 \d+\.\dms$/);
    expect(lines[1]).toMatch(/^GET \/offset\/partners 401 \d+\.\dms$/);
  });
});

describe('starts', () => {
  it('two starts serve identical data', async () => {
    const other = await startDemoSource({ port: 0, host: '127.0.0.1', rows: N, log: () => {} });
    try {
      const a = await getJson('/open/partners?limit=500&offset=1500');
      const b = await getJson(`${other.url}/open/partners?limit=500&offset=1500`);
      expect(b.body).toEqual(a.body);
    } finally {
      await other.close();
    }
  });

  it('rows scale the record count (option or DEMO_ROWS); the liar stays 100 short; default 2400', async () => {
    const big = await startDemoSource({ port: 0, host: '127.0.0.1', rows: 5000, log: () => {} });
    const saved = process.env.DEMO_ROWS;
    process.env.DEMO_ROWS = '1234';
    const fromEnv = await startDemoSource({ port: 0, host: '127.0.0.1', log: () => {} });
    if (saved === undefined) delete process.env.DEMO_ROWS;
    else process.env.DEMO_ROWS = saved;
    try {
      expect((await getJson(`${big.url}/spring/partners?size=500`, BASIC)).body).toMatchObject({ totalElements: 5000, totalPages: 10 });
      const last = await getJson(`${big.url}/open/partners?offset=4999`);
      expect(ids(last.body.data)).toEqual([5000]);
      const liar = await getJson(`${big.url}/liar/partners?offset=4800&limit=500`);
      expect(liar.body.total).toBe(5000);
      expect(ids(liar.body.data)).toEqual(Array.from({ length: 100 }, (_, i) => 4801 + i));
      expect((await getJson(`${fromEnv.url}/open/partners`)).body.total).toBe(1234);
      expect((await getJson('/open/partners')).body.total).toBe(2400);
    } finally {
      await big.close();
      await fromEnv.close();
    }
  });

  it('refuses a malformed DEMO_ROWS', async () => {
    const saved = process.env.DEMO_ROWS;
    process.env.DEMO_ROWS = 'lots';
    try {
      await expect(startDemoSource({ port: 0, host: '127.0.0.1', log: () => {} })).rejects.toThrow(/DEMO_ROWS/);
    } finally {
      if (saved === undefined) delete process.env.DEMO_ROWS;
      else process.env.DEMO_ROWS = saved;
    }
  });
});
