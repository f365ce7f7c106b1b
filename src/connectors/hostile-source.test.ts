import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { until } from '../../test/harness/until.js';
import { getRun } from './runs/ledger.js';
import { applyConnector } from './store.js';
import { tenantTableSql } from './target/ddl.js';

/**
 * A tenant's source that misbehaves, through a hub (its configuration, runner and database): each
 * run ends, Failed with the cause named, in bounded time, and the rows of the pages before the
 * fault are kept. The source is a loopback server; the hub's limits are shortened.
 */

const H = { 'X-Tenant-ID': '1' };
/** A key of 10,000 characters that do not compress: past what a btree index entry holds (about 2,700 bytes). */
const LONG_KEY = randomBytes(5_000).toString('hex');
/**
 * A page of 2 MB holding 100,001 distinct keys in records of 50 (what JSON.parse builds slowest per
 * byte: a table entry and hidden classes per key); 64 MiB of one object's distinct keys held the hub's
 * event loop for a minute. As a GraphQL answer, the keys beside the records.
 */
const MANY_KEYS = (() => {
  const records: string[] = [];
  for (let k = 0; k < 100_001; k += 50) records.push(`{"id":${k},${Array.from({ length: Math.min(50, 100_001 - k) }, (_, j) => `"k${k + j}":0`).join(',')}}`);
  return Buffer.from(`[${records.join(',')}]`);
})();
const GRAPHQL_MANY_KEYS = Buffer.from(`{"data": {"items": {"edges": [{"node": {"id": 1}}], "pageInfo": {"endCursor": null, "hasNextPage": false}}, "more": ${MANY_KEYS}}}`);
let hub: TestHub;
let source: Server;
let sourceUrl: string;
/** The requests the endless source was sent, in order. */
const endless: string[] = [];
/** The GraphQL request bodies sent, in order. */
const graphql: string[] = [];
/** The requests the Link header source was sent, as their request lines give them. */
const headerBytes: string[] = [];

beforeAll(async () => {
  source = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    switch (url.pathname) {
      // A body trickling in without end: a space every 20 ms, never silent for the body timeout.
      case '/trickle': {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.write('[');
        const drip = setInterval(() => res.write(' '), 20);
        res.on('close', () => clearInterval(drip));
        return;
      }
      // Knows no offset parameter: the same three records whatever is asked.
      case '/same-page':
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ data: [{ id: 1 }, { id: 2 }, { id: 3 }] }));
        return;
      // One page of records a store cannot all take: not objects, keys null, too long to index, beyond a double.
      case '/odd-records':
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(`[1, "x", null, [1], {"id": null}, {"id": "${LONG_KEY}"}, {"id": "ok"}, {"id": 12345678901234567890}, {"id": 12345678901234567891}]`);
        return;
      // A page whose bytes are not all UTF-8 (Latin-1 written into two records): inside a string
      // value, inside a key; the other records are well formed.
      case '/latin1-rows':
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(Buffer.concat([Buffer.from('[{"id": 1, "name": "Ann"}, {"id": 2, "name": "Jos'), Buffer.from([0xe9]), Buffer.from('"}, {"id": 3, "n'), Buffer.from([0xe9, 0xff]), Buffer.from('": "x"}, {"id": 4, "name": "Zo\u00eb \ufffd"}]')]));
        return;
      // A cursor and a next link holding a byte that is not UTF-8: the next request must carry it back as written.
      case '/latin1-cursor':
        res.writeHead(200, { 'content-type': 'application/json' });
        if (url.searchParams.size === 0) res.end(Buffer.from('{"data": [{"id": 1}], "next": "c\xe9 1"}', 'latin1'));
        else res.end(JSON.stringify({ data: req.url === '/latin1-cursor?cursor=c%E9%201' ? [{ id: 2 }] : [], next: null }));
        return;
      case '/latin1-link':
        res.writeHead(200, { 'content-type': 'application/json' });
        if (url.searchParams.size === 0) res.end(Buffer.from('{"data": [{"id": 1}], "next": "/latin1-link?p=\xe9&q=%E9"}', 'latin1'));
        else res.end(JSON.stringify({ data: req.url === '/latin1-link?p=%E9&q=%E9' ? [{ id: 2 }] : [], next: null }));
        return;
      // Ids beyond 2^53 written with a fraction or an exponent: a double holds none of them exactly, and each pair is one double.
      case '/float-ids':
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('[{"id": 9007199254740993.0, "n": 9007199254740993.0}, {"id": 9007199254740992.0, "n": 9007199254740992.0}, {"id": 1.2345678901234567891e18, "n": 1.2345678901234567891e18}, {"id": 1.2345678901234567892e18}, {"id": 12345678901234567.5}, {"id": 12345678901234567.7}, {"id": 1e21, "n": 9.3e18}]');
        return;
      // GraphQL whose node ids and cursor are integers beyond 2^53 (JSON.parse makes each pair one number).
      case '/graphql': {
        const chunks: Buffer[] = [];
        req.on('data', (c: Buffer) => chunks.push(c));
        req.on('end', () => {
          const sent = Buffer.concat(chunks).toString();
          graphql.push(sent);
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(
            sent.includes('"after":9007199254740993')
              ? '{"data": {"items": {"edges": [{"node": {"id": 9007199254740995}}], "pageInfo": {"endCursor": null, "hasNextPage": false}}}}'
              : '{"data": {"items": {"edges": [{"node": {"id": 9007199254740993}}, {"node": {"id": 9007199254740992}}], "pageInfo": {"endCursor": 9007199254740993, "hasNextPage": true}}}}',
          );
        });
        return;
      }
      // A Link header whose next link holds bytes beyond ASCII: Latin-1 é (E9), and é in UTF-8 (C3 A9).
      case '/header-bytes':
        headerBytes.push(req.url ?? '');
        if (url.searchParams.size === 0) {
          const socket = res.socket!;
          socket.write(Buffer.concat([Buffer.from('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 12\r\nconnection: close\r\nlink: </header-bytes?p='), Buffer.from([0xe9]), Buffer.from('&q='), Buffer.from([0xc3, 0xa9]), Buffer.from('>; rel="next"\r\n\r\n[{"id": 1}]\n')]));
          socket.end();
          return;
        }
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('[{"id": 2}]');
        return;
      // A watermark read from a record PostgreSQL cannot store (a NUL, half a surrogate pair, a byte not UTF-8 in its watermark value).
      case '/nul-watermark':
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(Buffer.concat([Buffer.from('[{"id": 1, "seq": "2024-01-01"}, {"id": 2, "seq": "2024-09-0\\u0000"}, {"id": 3, "seq": "2024-06-0\\ud800"}, {"id": 4, "seq": "2024-07-0'), Buffer.from([0xe9]), Buffer.from('"}, {"id": 5, "seq": "2024-02-01"}]')]));
        return;
      // Watermark values the hub cannot send back: one far longer than any mark (5,001 characters), an object and an array.
      case '/long-watermark':
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify([{ id: 1, seq: '2024-03-01' }, { id: 2, seq: `9${'z'.repeat(5_000)}` }, { id: 3, seq: '2024-01-01' }]));
        return;
      case '/object-watermark':
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify([{ id: 1, seq: '2024-03-01' }, { id: 2, seq: { at: '2025-01-01' } }, { id: 3, seq: ['2026-01-01'] }]));
        return;
      // A GraphQL error whose message holds a NUL (escaped, as JSON writes it).
      case '/graphql-nul':
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{"errors": [{"message": "bad\\u0000input"}], "data": null}');
        return;
      // New records for ever: every page full, always a next cursor.
      case '/endless': {
        endless.push(req.url ?? '');
        const at = Number(url.searchParams.get('cursor') ?? '0');
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ data: [{ id: 2 * at }, { id: 2 * at + 1 }], next: String(at + 1), has_more: true }));
        return;
      }
      // An invalid byte between two records, outside any string: no record holds it.
      case '/latin1-structure':
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(Buffer.concat([Buffer.from('[{"id": 1}'), Buffer.from([0xe9]), Buffer.from(', {"id": 2}]')]));
        return;
      case '/many-keys':
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(MANY_KEYS);
        return;
      case '/graphql-many-keys':
        req.resume();
        req.on('end', () => {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(GRAPHQL_MANY_KEYS);
        });
        return;
      default:
        res.writeHead(404).end();
    }
  });
  await new Promise<void>((resolve) => source.listen(0, '127.0.0.1', resolve));
  sourceUrl = `http://127.0.0.1:${(source.address() as AddressInfo).port}`;
  hub = await startTestHub({
    'svc.connectors.http.response-timeout': '600ms',
    'svc.connectors.http.body-timeout': '5s',
    'svc.connectors.retry.base-delay': '10ms',
    'svc.connectors.retry.max-delay': '20ms',
    'svc.connectors.max-pages': '3',
  });
  const manifest = (name: string, path: string, pagination: Record<string, unknown>) => ({
    apiVersion: 'connectors.svc.io/v1',
    kind: 'Connector',
    metadata: { name },
    connector_type: 'rest-generic',
    spec: { base_url: sourceUrl, endpoints: [{ id: 'items', path, pagination, target: { table: `ext.hostile_${name.replace(/-/g, '_')}`, unique_key: '$.id' } }] },
  });
  /** A GraphQL connector reading `items` with relay pagination from `graphqlPath`, into ext.hostile_<name>. */
  const graphqlManifest = (name: string, graphqlPath: string) => ({
    ...manifest(name, graphqlPath, { kind: 'none' }),
    spec: {
      base_url: sourceUrl,
      graphql_path: graphqlPath,
      endpoints: [
        {
          id: 'items',
          kind: 'graphql',
          query: 'query($after: ID) { items(after: $after) { edges { node { id } } pageInfo { endCursor hasNextPage } } }',
          pagination: { kind: 'relay', cursor_binding: 'variable', cursor_var: 'after', cursor_path: '$.data.items.pageInfo.endCursor', has_more_path: '$.data.items.pageInfo.hasNextPage', response_path: '$.data.items.edges[*].node' },
          target: { table: `ext.hostile_${name.replace(/-/g, '_')}`, unique_key: '$.id' },
        },
      ],
    },
  });
  await hub.services.db.withTenant(1, async (tx) => {
    await applyConnector(tx, manifest('trickle', '/trickle', { kind: 'none', response_path: '$' }));
    await applyConnector(tx, manifest('odd-records', '/odd-records', { kind: 'none', response_path: '$' }));
    await applyConnector(tx, manifest('latin1-rows', '/latin1-rows', { kind: 'none', response_path: '$' }));
    await applyConnector(tx, manifest('latin1-cursor', '/latin1-cursor', { kind: 'cursor', cursor_param: 'cursor', cursor_path: '$.next', response_path: '$.data' }));
    await applyConnector(tx, manifest('latin1-link', '/latin1-link', { kind: 'body-link', link_path: '$.next', response_path: '$.data' }));
    await applyConnector(tx, {
      ...manifest('float-ids', '/float-ids', { kind: 'none', response_path: '$' }),
      spec: { base_url: sourceUrl, endpoints: [{ id: 'items', path: '/float-ids', pagination: { kind: 'none', response_path: '$' }, target: { table: 'ext.hostile_float_ids', unique_key: '$.id', promote: [{ name: 'n', path: '$.n', type: 'bigint' }] } }] },
    });
    await applyConnector(tx, manifest('endless', '/endless', { kind: 'cursor', cursor_param: 'cursor', cursor_path: '$.next', has_more_path: '$.has_more', response_path: '$.data' }));
    await applyConnector(tx, graphqlManifest('graphql-ids', '/graphql'));
    await applyConnector(tx, manifest('header-bytes', '/header-bytes', { kind: 'link-header', response_path: '$' }));
    await applyConnector(tx, {
      ...manifest('nul-watermark', '/nul-watermark', { kind: 'none' }),
      spec: { base_url: sourceUrl, endpoints: [{ id: 'items', path: '/nul-watermark', pagination: { kind: 'none', response_path: '$' }, incremental: { mode: 'watermark', param: 'since', watermark_path: '$.seq' }, target: { table: 'ext.hostile_nul_watermark', unique_key: '$.id' } }] },
    });
    for (const name of ['long-watermark', 'object-watermark']) {
      await applyConnector(tx, {
        ...manifest(name, `/${name}`, { kind: 'none' }),
        spec: { base_url: sourceUrl, endpoints: [{ id: 'items', path: `/${name}`, pagination: { kind: 'none', response_path: '$' }, incremental: { mode: 'watermark', param: 'since', watermark_path: '$.seq' }, target: { table: `ext.hostile_${name.replace(/-/g, '_')}`, unique_key: '$.id' } }] },
      });
    }
    await applyConnector(tx, graphqlManifest('graphql-nul', '/graphql-nul'));
    await applyConnector(tx, manifest('latin1-structure', '/latin1-structure', { kind: 'none', response_path: '$' }));
    await applyConnector(tx, manifest('many-keys', '/many-keys', { kind: 'none', response_path: '$' }));
    await applyConnector(tx, graphqlManifest('graphql-many-keys', '/graphql-many-keys'));
    await applyConnector(tx, manifest('same-page', '/same-page', { kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit: 3, response_path: '$.data' }));
  });
}, 120_000);

afterAll(async () => {
  await hub?.stop();
  await new Promise((resolve) => {
    source?.close(resolve);
    source?.closeAllConnections();
  });
});

async function runToEnd(name: string, timeoutMs: number) {
  const res = await fetch(`${hub.url}/api/connectors/${name}/runs`, { method: 'POST', headers: { ...H, 'Content-Type': 'application/json' }, body: '{}' });
  expect(res.status).toBe(202);
  const [{ id }] = ((await res.json()) as { runs: Array<{ id: string }> }).runs as [{ id: string }];
  const run = await until(
    `run ${id} to end`,
    async () => {
      const r = await hub.services.db.withTenant(1, (tx) => getRun(tx, id));
      return r.status !== 'Running' && r;
    },
    { timeoutMs },
  );
  const answer = await fetch(`${hub.url}/api/platform/runs/${id}`, { headers: H });
  expect(answer.status).toBe(200);
  return run;
}

describe('a hostile source through the hub', () => {
  it('a body trickling in without end: the run fails after its attempts, naming svc.connectors.http.response-timeout', async () => {
    const run = await runToEnd('trickle', 20_000);
    expect(run.status).toBe('Failed');
    expect(run.errorMessage).toBe('upstream could not be reached after 5 attempt(s): timeout: the answer took longer than 600 ms as a whole (svc.connectors.http.response-timeout)');
  }, 30_000);

  it('records that are not objects, keys null or too long: each dead-lettered, the others stored, keys beyond a double kept apart', async () => {
    const run = await runToEnd('odd-records', 20_000);
    expect(run).toMatchObject({ status: 'Completed', recordsIn: 9, recordsOut: 3, recordsSkipped: 6, deadLetterCount: 6 });
    const keys = await hub.services.db.withTenant(1, async (tx) => (await tx.query<{ external_id: string }>(`select external_id from ${tenantTableSql(1, 'ext.hostile_odd_records')} order by external_id`)).rows.map((r) => r.external_id));
    expect(keys).toEqual(['12345678901234567890', '12345678901234567891', 'ok']);
  }, 30_000);

  it('the same page at every offset: the run fails on the second page naming it, the first page stored once', async () => {
    const run = await runToEnd('same-page', 20_000);
    expect(run.status).toBe('Failed');
    expect(run.errorMessage).toMatch(/^pagination did not advance: the source answered offset 3 with the same 3 record\(s\) as the page before it/);
    expect(run.recordsOut).toBe(3);
  }, 30_000);

  it('bytes that are not UTF-8 inside a record\'s string or key: that record dead-lettered naming the field, the others stored, the run Completed', async () => {
    const run = await runToEnd('latin1-rows', 20_000);
    expect(run).toMatchObject({ status: 'Completed', recordsIn: 4, recordsOut: 2, recordsSkipped: 2, deadLetterCount: 2, errorMessage: null });
    const stored = await hub.services.db.withTenant(1, async (tx) => (await tx.query<{ external_id: string; name: string }>(`select external_id, data->>'name' as name from ${tenantTableSql(1, 'ext.hostile_latin1_rows')} order by external_id`)).rows);
    // A U+FFFD the source wrote itself (valid UTF-8) is text like any other.
    expect(stored).toEqual([{ external_id: '1', name: 'Ann' }, { external_id: '4', name: 'Zoë \ufffd' }]);
    const letters = await hub.services.db.withTenant(1, async (tx) => (await tx.query<{ skip_reason: string; error_message: string; payload: unknown }>(`select skip_reason, error_message, payload from connectors.dead_letters where run_id = $1 order by id`, [run.id])).rows);
    expect(letters).toEqual([
      { skip_reason: 'unstorable', error_message: 'the row cannot be stored: $.name holds bytes that are not valid UTF-8 (read as unpaired surrogates U+DC80 to U+DCFF)', payload: { id: 2, name: 'Jos\ufffd' } },
      { skip_reason: 'unstorable', error_message: 'the row cannot be stored: $["n\\udce9\\udcff"] has a key that holds bytes that are not valid UTF-8 (read as unpaired surrogates U+DC80 to U+DCFF)', payload: { id: 3, 'n\ufffd\ufffd': 'x' } },
    ]);
  }, 30_000);

  it('bytes that are not UTF-8 inside a record\'s string or key: a pre-flight warns of the records a run dead-letters, naming the field as the run does', async () => {
    const res = await fetch(`${hub.url}/api/connectors/latin1-rows/preflight`, { method: 'POST', headers: { ...H, 'Content-Type': 'application/json' }, body: '{}' });
    expect(res.status).toBe(200);
    const report = (await res.json()) as { ok: boolean; endpoints: Array<{ verdict: string; items: number; warnings?: string[] }> };
    expect(report.ok).toBe(true);
    expect(report.endpoints).toMatchObject([{ verdict: 'ok', items: 4 }]);
    expect(report.endpoints[0]!.warnings).toEqual([
      '2 of the 4 records read cannot be stored: a run dead-letters them (unstorable): record 2: $.name holds bytes that are not valid UTF-8 (read as unpaired surrogates U+DC80 to U+DCFF); ' +
        'record 3: $["n\\udce9\\udcff"] has a key that holds bytes that are not valid UTF-8 (read as unpaired surrogates U+DC80 to U+DCFF)',
    ]);
  });

  it('bytes that are not UTF-8 outside any string: the page is unreadable, the run Failed naming the offset', async () => {
    const run = await runToEnd('latin1-structure', 20_000);
    expect(run).toMatchObject({ status: 'Failed', recordsOut: 0, errorMessage: 'upstream answered HTTP 200 with a body that is not valid utf-8: an invalid byte sequence at byte offset 11' });
  }, 30_000);

  it('a cursor or next link holding bytes that are not UTF-8 is sent back with those bytes as the source wrote them (%E9)', async () => {
    for (const name of ['latin1-cursor', 'latin1-link']) {
      const run = await runToEnd(name, 20_000);
      expect(run).toMatchObject({ status: 'Completed', recordsIn: 2, recordsOut: 2 });
    }
  }, 30_000);

  it('ids beyond 2^53 written with a fraction or an exponent are kept apart, not rounded into one row; a promoted bigint takes their exact value', async () => {
    const run = await runToEnd('float-ids', 20_000);
    expect(run).toMatchObject({ status: 'Completed', recordsIn: 7, recordsOut: 7 });
    const rows = await hub.services.db.withTenant(1, async (tx) => (await tx.query<{ external_id: string; id: string; n: string | null }>(`select external_id, data->>'id' as id, n::text as n from ${tenantTableSql(1, 'ext.hostile_float_ids')} order by external_id`)).rows);
    expect(rows).toEqual([
      { external_id: '1.2345678901234567891e18', id: '1234567890123456789.1', n: null },
      { external_id: '1.2345678901234567892e18', id: '1234567890123456789.2', n: null },
      { external_id: '12345678901234567.5', id: '12345678901234567.5', n: null },
      { external_id: '12345678901234567.7', id: '12345678901234567.7', n: null },
      { external_id: '1e+21', id: '1000000000000000000000', n: null },
      { external_id: '9007199254740992', id: '9007199254740992', n: '9007199254740992' },
      { external_id: '9007199254740993.0', id: '9007199254740993.0', n: '9007199254740993' },
    ]);
  }, 30_000);

  it('a source with new records for ever: each run ends Partial at the page budget, naming it, and the next reads on from where it stopped', async () => {
    const first = await runToEnd('endless', 20_000);
    expect(first).toMatchObject({ status: 'Partial', recordsIn: 6, recordsOut: 6 });
    expect(first.errorMessage).toMatch(/^the 3-page budget of one run was reached while the source still had pages; the rows of those pages were read, the rest were not/);
    const second = await runToEnd('endless', 20_000);
    expect(second).toMatchObject({ status: 'Partial', recordsIn: 6, recordsOut: 6 });
    expect(endless).toEqual(['/endless', '/endless?cursor=1', '/endless?cursor=2', '/endless?cursor=3', '/endless?cursor=4', '/endless?cursor=5']);
    const count = await hub.services.db.withTenant(1, async (tx) => (await tx.query<{ n: number }>(`select count(*)::int as n from ${tenantTableSql(1, 'ext.hostile_endless')}`)).rows[0]!.n);
    expect(count).toBe(12);
  }, 30_000);

  it('GraphQL node ids and a cursor beyond 2^53: rows kept apart, the cursor sent back exactly as a JSON number', async () => {
    const run = await runToEnd('graphql-ids', 20_000);
    expect(run).toMatchObject({ status: 'Completed', recordsIn: 3, recordsOut: 3 });
    const keys = await hub.services.db.withTenant(1, async (tx) => (await tx.query<{ external_id: string }>(`select external_id from ${tenantTableSql(1, 'ext.hostile_graphql_ids')} order by external_id`)).rows.map((r) => r.external_id));
    expect(keys).toEqual(['9007199254740992', '9007199254740993', '9007199254740995']);
    expect(graphql.map((body) => /"variables":(\{[^}]*\})/.exec(body)?.[1])).toEqual(['{}', '{"after":9007199254740993}']);
  }, 30_000);

  it('a Link header\'s next link holding bytes beyond ASCII is followed with those bytes (%E9, %C3%A9), not re-encoded', async () => {
    const run = await runToEnd('header-bytes', 20_000);
    expect(run).toMatchObject({ status: 'Completed', recordsIn: 2, recordsOut: 2 });
    expect(headerBytes).toEqual(['/header-bytes', '/header-bytes?p=%E9&q=%C3%A9']);
  }, 30_000);

  it('a watermark value PostgreSQL cannot store (a NUL, half a surrogate pair, a byte not UTF-8), its record dead-lettered for it: the run ends (it never did: the mark failed its end), the watermark the greatest storable one', async () => {
    const run = await runToEnd('nul-watermark', 20_000);
    expect(run).toMatchObject({ status: 'Completed', recordsIn: 5, recordsOut: 2, recordsSkipped: 3 });
    const watermark = await hub.services.db.withTenant(1, async (tx) => (await tx.query<{ watermark: string }>(`select e.watermark from connectors.endpoints e join connectors.connectors c on c.id = e.connector_id where c.name = 'nul-watermark'`)).rows[0]!.watermark);
    expect(watermark).toBe('2024-02-01');
  }, 30_000);

  it.each([
    ['longer than 4,096 characters', 'long-watermark'],
    ['an object or an array (no text of the source\'s: it was taken as "[object Object]")', 'object-watermark'],
  ])('a watermark value %s is not taken: its record is stored, the watermark the greatest other one', async (_what, name) => {
    const run = await runToEnd(name, 20_000);
    expect(run).toMatchObject({ status: 'Completed', recordsIn: 3, recordsOut: 3, recordsSkipped: 0 });
    const watermark = await hub.services.db.withTenant(1, async (tx) => (await tx.query<{ watermark: string }>(`select e.watermark from connectors.endpoints e join connectors.connectors c on c.id = e.connector_id where c.name = $1`, [name])).rows[0]!.watermark);
    expect(watermark).toBe('2024-03-01');
  }, 30_000);

  it('a page of more distinct keys than a page may hold (100,001 in records of 50, 2 MB; 64 MiB of one object\'s held the event loop for a minute): the run fails naming the bound, nothing read; a GraphQL answer alike', async () => {
    const refused = 'upstream answered HTTP 200 with a page of more than 100,000 distinct JSON object keys; refusing to build it in memory (ask the source for smaller pages)';
    expect(await runToEnd('many-keys', 20_000)).toMatchObject({ status: 'Failed', recordsIn: 0, recordsOut: 0, errorMessage: refused });
    expect(await runToEnd('graphql-many-keys', 20_000)).toMatchObject({ status: 'Failed', recordsIn: 0, recordsOut: 0, errorMessage: refused });
  }, 30_000);

  it('an error message holding a NUL (a GraphQL error\'s): the run ends Failed with it, the NUL shown as U+FFFD', async () => {
    const run = await runToEnd('graphql-nul', 20_000);
    expect(run).toMatchObject({ status: 'Failed', errorMessage: 'GraphQL response carried 1 error(s); first: bad\ufffdinput' });
  }, 30_000);
});
