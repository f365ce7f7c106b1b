import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { ownerClient } from '../../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { runEnded } from '../../../test/harness/runs.js';
import { type Receiver, startReceiver } from '../../../test/harness/receiver.js';

/**
 * A source whose ids are integers beyond ±(2^53 − 1) (snowflake ids, as many APIs hand out): read as
 * JSON.parse reads them, 1234567890123456789 and 1234567890123456790 are one number, and the second
 * record would overwrite the first under one key. The hub keeps them exact: two rows, their keys,
 * their stored JSON, promoted columns and the watermark all as the source wrote them.
 */

let hub: TestHub;
let owner: pg.Client;
let source: Receiver;
let huge: Receiver;
const H = { 'X-Tenant-ID': '1', 'Content-Type': 'application/json' };

// Written by hand: JSON.stringify cannot write these numbers.
const BODY = `[
  {"id": 1234567890123456789, "seq": 1234567890123456795, "account": 9223372036854775807, "amount": 123456789012345678901234567890, "nested": {"ids": [9007199254740993, -9007199254740993]}, "ratio": 0.12345678901234567},
  {"id": 1234567890123456790, "seq": 1234567890123456791, "account": -9223372036854775808, "amount": 2, "nested": {"ids": []}, "ratio": 1e21}
]`;

/**
 * Numbers past a double's range, which JSON.parse reads as ±Infinity or 0: ids 1e400 and 2e400 were
 * one key ("Infinity"), the stored JSON held null for them. The third record's number is past what a
 * jsonb number holds. The cursor page gives 1e400 as its cursor, the next page none.
 */
const HUGE_BODY = `[
  {"id": 1e400, "seq": 1e400, "amount": 1e400, "count": 1e400, "tiny": 1e-400, "label": 1e400},
  {"id": 2e400, "seq": 2.5E+400, "amount": -2E+400, "count": 2, "tiny": -1e-400, "label": 2e400},
  {"id": 3, "seq": 7, "amount": 1e200000, "ref": 1e400, "snowflake": 1234567890123456789}
]`;

beforeAll(async () => {
  source = await startReceiver(() => ({ headers: { 'Content-Type': 'application/json' }, body: BODY }));
  huge = await startReceiver((path) => {
    const cursor = new URL(path, 'http://x').searchParams.get('cursor');
    if (path.startsWith('/pages')) return { headers: { 'Content-Type': 'application/json' }, body: cursor ? '{"data":[],"more":false}' : '{"data":[{"id":1}],"next":1e400,"more":true}' };
    return { headers: { 'Content-Type': 'application/json' }, body: HUGE_BODY };
  });
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
  await apply('snowflakes', source.url, [
    watermarked('ext.snowflakes', [
      { name: 'account', path: '$.account', type: 'bigint' },
      { name: 'amount', path: '$.amount', type: 'numeric' },
      { name: 'seq_text', path: '$.seq', type: 'text' },
    ]),
  ]);
  await apply('huge-numbers', huge.url, [
    watermarked('ext.huge_numbers', [
      { name: 'amount', path: '$.amount', type: 'numeric' },
      { name: 'count', path: '$.count', type: 'bigint' },
      { name: 'label', path: '$.label', type: 'text' },
    ]),
    {
      id: 'pages',
      path: '/pages',
      pagination: { kind: 'cursor', cursor_param: 'cursor', cursor_path: '$.next', has_more_path: '$.more', response_path: '$.data' },
      target: { kind: 'hybrid', table: 'ext.huge_pages', unique_key: '$.id' },
    },
  ]);
});

/** Endpoint `items` at /items, a watermark on `$.seq` sent as `since`, rows keyed by `$.id` into `table`. */
function watermarked(table: string, promote: Array<{ name: string; path: string; type: string }>) {
  return { id: 'items', path: '/items', incremental: { mode: 'watermark', param: 'since', watermark_path: '$.seq' }, target: { kind: 'hybrid', table, unique_key: '$.id', promote } };
}

async function apply(name: string, baseUrl: string, endpoints: unknown[]): Promise<void> {
  const manifest = { apiVersion: 'connectors.svc.io/v1', kind: 'Connector', metadata: { name }, connector_type: 'rest-generic', spec: { base_url: baseUrl, endpoints } };
  const applied = await fetch(`${hub.url}/api/connectors/apply`, { method: 'POST', headers: H, body: JSON.stringify(manifest) });
  expect([200, 201]).toContain(applied.status);
}

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
  await source?.close();
  await huge?.close();
});

async function run(
  connector = 'snowflakes',
  endpoint?: string,
): Promise<{ status: string; recordsIn: number; recordsOut: number; recordsSkipped: number; errorMessage: string | null }> {
  const started = await fetch(`${hub.url}/api/connectors/${connector}/runs`, { method: 'POST', headers: H, body: JSON.stringify(endpoint ? { endpoint } : {}) });
  expect(started.status).toBe(202);
  const { runs } = (await started.json()) as { runs: Array<{ id: string }> };
  return runEnded(hub.url, runs[0]!.id, H);
}

describe('integers beyond ±(2^53 − 1) from a source', () => {
  it('are stored exactly: two records two rows, keys, JSON and promoted columns as the source wrote them', async () => {
    expect(await run()).toMatchObject({ status: 'Completed', recordsIn: 2, recordsOut: 2, recordsSkipped: 0, errorMessage: null });
    const { rows } = await owner.query(
      `select external_id, data::text as data, account::text as account, amount::text as amount, seq_text,
              data->'nested'->'ids' #>> '{}' as nested
         from ext_t1.snowflakes order by external_id`,
    );
    expect(rows.map((r) => r.external_id)).toEqual(['1234567890123456789', '1234567890123456790']);
    expect(rows.map((r) => [r.account, r.amount, r.seq_text])).toEqual([
      ['9223372036854775807', '123456789012345678901234567890', '1234567890123456795'],
      ['-9223372036854775808', '2', '1234567890123456791'],
    ]);
    // jsonb keeps the numbers exactly (PostgreSQL's numeric), as the source wrote them.
    expect(rows[0].data).toContain('"id": 1234567890123456789');
    expect(rows[0].nested).toBe('[9007199254740993, -9007199254740993]');
    // A fraction is a double, as JSON.parse reads it (0.12345678901234567 is 0.12345678901234566 there).
    expect(rows[0].data).toContain('"ratio": 0.12345678901234566');
    expect(rows[1].data).toContain('"ratio": 1000000000000000000000');
    // Read back through the API as a citation's row: the same digits.
    const { rows: hashed } = await owner.query(`select row_hash from ext_t1.snowflakes where external_id = '1234567890123456789'`);
    const cited = (await (await fetch(`${hub.url}/api/platform/data/row/${hashed[0].row_hash}`, { headers: H })).json()) as Record<string, string>;
    expect(cited).toMatchObject({ id: '1234567890123456789', seq: '1234567890123456795', 'nested.ids': '[9007199254740993,-9007199254740993]' });
  });

  it('a watermark beyond 2^53 is the exact maximum, and the next run sends it exactly', async () => {
    const endpoint = (await (await fetch(`${hub.url}/api/connectors/snowflakes`, { headers: H })).json()) as { endpoints: Array<{ watermark: string | null }> };
    expect(endpoint.endpoints[0]!.watermark).toBe('1234567890123456795');
    const before = source.received.length;
    expect(await run()).toMatchObject({ status: 'Completed', recordsOut: 2 });
    expect(source.received.slice(before).map((r) => new URL(r.path, 'http://x').searchParams.get('since'))).toEqual(['1234567890123456795']);
    // The same records again: the same two rows, nothing doubled.
    expect((await owner.query('select count(*)::int as n from ext_t1.snowflakes')).rows[0].n).toBe(2);
  });

  it('a draft from the path suggests them as bigint columns (numeric beyond bigint\'s range)', async () => {
    const res = await fetch(`${hub.url}/api/connectors/snowflakes/draft`, { method: 'POST', headers: H, body: JSON.stringify({ path: '/items' }) });
    expect(res.status).toBe(200);
    const fragment = (await res.json()) as { target: { unique_key: string; promote: Array<{ name: string; type: string }> } };
    expect(fragment.target.unique_key).toBe('$.id');
    expect(Object.fromEntries(fragment.target.promote.map((p) => [p.name, p.type]))).toEqual({ seq: 'bigint', account: 'bigint', amount: 'numeric', ratio: 'numeric' });
  });

  it('preflight shows them exactly too, as text in its JSON answer', async () => {
    const res = await fetch(`${hub.url}/api/connectors/snowflakes/preflight`, { method: 'POST', headers: H, body: '{}' });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { endpoints: Array<{ items: number; sample: { id: unknown; nested: { ids: unknown[] } } }> };
    expect(body.endpoints[0]).toMatchObject({ items: 2, sample: { id: '1234567890123456789', nested: { ids: ['9007199254740993', '-9007199254740993'] } } });
  });
});

describe('numbers past a double\'s range from a source (1e400, read by JSON.parse as Infinity)', () => {
  it('keep their text: ids 1e400 and 2e400 are two rows, the stored JSON holds the numbers, promoted columns take what fits', async () => {
    // The third record's 1e200000 is past what a jsonb number holds: that row alone is dead-lettered.
    expect(await run('huge-numbers', 'items')).toMatchObject({ status: 'Completed', recordsIn: 3, recordsOut: 2, recordsSkipped: 1 });
    const { rows } = await owner.query(
      `select external_id, data->>'id' as id, data->>'tiny' as tiny, amount::text as amount, count::text as count, label
         from ext_t1.huge_numbers order by external_id`,
    );
    expect(rows.map((r) => r.external_id)).toEqual(['1e400', '2e400']);
    // jsonb holds them exactly, as PostgreSQL's numeric writes them: all digits.
    expect(rows.map((r) => r.id)).toEqual([`1${'0'.repeat(400)}`, `2${'0'.repeat(400)}`]);
    expect(rows.map((r) => r.tiny)).toEqual([`0.${'0'.repeat(399)}1`, `-0.${'0'.repeat(399)}1`]);
    expect(rows.map((r) => r.amount)).toEqual([`1${'0'.repeat(400)}`, `-2${'0'.repeat(400)}`]);
    // Far past a bigint: NULL, the payload intact; a count that fits is stored.
    expect(rows.map((r) => r.count)).toEqual([null, '2']);
    expect(rows.map((r) => r.label)).toEqual(['1e400', '2e400']);
    // The dead letter keeps the record, the number jsonb cannot hold as its text.
    const { rows: letters } = await owner.query(`select skip_reason, error_message, payload->>'amount' as amount, payload->'id' as id from connectors.dead_letters where payload->>'id' = '3'`);
    expect(letters).toEqual([{ skip_reason: 'unstorable', error_message: 'the row cannot be stored: a number is out of range (database error 22003)', amount: '1e200000', id: 3 }]);
    // Shown through the API with its numbers exact, as text (as JSON numbers they would read as Infinity and rounded).
    const { rows: ids } = await owner.query(`select id from connectors.dead_letters where payload->>'id' = '3'`);
    const letter = (await (await fetch(`${hub.url}/api/platform/dlq/${ids[0].id}`, { headers: H })).json()) as { payload: unknown };
    expect(letter.payload).toEqual({ id: 3, seq: 7, amount: '1e200000', ref: `1${'0'.repeat(400)}`, snowflake: '1234567890123456789' });
    // Read back through the API as a citation's row: the same values.
    const { rows: hashed } = await owner.query(`select row_hash from ext_t1.huge_numbers where external_id = '1e400'`);
    const cited = (await (await fetch(`${hub.url}/api/platform/data/row/${hashed[0].row_hash}`, { headers: H })).json()) as Record<string, string>;
    expect(cited).toMatchObject({ id: `1${'0'.repeat(400)}`, tiny: `0.${'0'.repeat(399)}1` });
  });

  it('a watermark past a double is the exact maximum, and the next run sends it as the source wrote it', async () => {
    const connector = (await (await fetch(`${hub.url}/api/connectors/huge-numbers`, { headers: H })).json()) as { endpoints: Array<{ id: string; watermark: string | null }> };
    expect(connector.endpoints.find((e) => e.id === 'items')!.watermark).toBe('2.5E+400');
    const before = huge.received.length;
    expect(await run('huge-numbers', 'items')).toMatchObject({ status: 'Completed', recordsOut: 2 });
    expect(huge.received.slice(before).map((r) => new URL(r.path, 'http://x').searchParams.get('since'))).toEqual(['2.5E+400']);
    expect((await owner.query('select count(*)::int as n from ext_t1.huge_numbers')).rows[0].n).toBe(2);
  });

  it('a cursor past a double is sent back as the source wrote it', async () => {
    const before = huge.received.length;
    expect(await run('huge-numbers', 'pages')).toMatchObject({ status: 'Completed', recordsIn: 1, recordsOut: 1 });
    expect(huge.received.slice(before).map((r) => new URL(r.path, 'http://x').searchParams.get('cursor'))).toEqual([null, '1e400']);
  });

  it('a draft suggests numeric columns for them (1e-400 is no whole number, 1e400 past a bigint)', async () => {
    const res = await fetch(`${hub.url}/api/connectors/huge-numbers/draft`, { method: 'POST', headers: H, body: JSON.stringify({ path: '/items' }) });
    expect(res.status).toBe(200);
    const fragment = (await res.json()) as { target: { promote: Array<{ name: string; type: string }> } };
    expect(Object.fromEntries(fragment.target.promote.map((p) => [p.name, p.type]))).toEqual({ seq: 'numeric', amount: 'numeric', count: 'numeric', tiny: 'numeric', label: 'numeric' });
  });

  it('preflight shows them as their text', async () => {
    const res = await fetch(`${hub.url}/api/connectors/huge-numbers/preflight`, { method: 'POST', headers: H, body: JSON.stringify({ endpoint: 'items' }) });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { endpoints: Array<{ id: string; items: number; sample: unknown }> };
    expect(body.endpoints.find((e) => e.id === 'items')).toMatchObject({ items: 3, sample: { id: '1e400', seq: '1e400', tiny: '1e-400' } });
  });
});
