import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { ownerClient } from '../../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
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
const H = { 'X-Tenant-ID': '1', 'Content-Type': 'application/json' };

// Written by hand: JSON.stringify cannot write these numbers.
const BODY = `[
  {"id": 1234567890123456789, "seq": 1234567890123456795, "account": 9223372036854775807, "amount": 123456789012345678901234567890, "nested": {"ids": [9007199254740993, -9007199254740993]}, "ratio": 0.12345678901234567},
  {"id": 1234567890123456790, "seq": 1234567890123456791, "account": -9223372036854775808, "amount": 2, "nested": {"ids": []}, "ratio": 1e21}
]`;

beforeAll(async () => {
  source = await startReceiver(() => ({ headers: { 'Content-Type': 'application/json' }, body: BODY }));
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
  const manifest = {
    apiVersion: 'connectors.svc.io/v1',
    kind: 'Connector',
    metadata: { name: 'snowflakes' },
    connector_type: 'rest-generic',
    spec: {
      base_url: source.url,
      endpoints: [
        {
          id: 'items',
          path: '/items',
          incremental: { mode: 'watermark', param: 'since', watermark_path: '$.seq' },
          target: {
            kind: 'hybrid',
            table: 'ext.snowflakes',
            unique_key: '$.id',
            promote: [
              { name: 'account', path: '$.account', type: 'bigint' },
              { name: 'amount', path: '$.amount', type: 'numeric' },
              { name: 'seq_text', path: '$.seq', type: 'text' },
            ],
          },
        },
      ],
    },
  };
  const applied = await fetch(`${hub.url}/api/connectors/apply`, { method: 'POST', headers: H, body: JSON.stringify(manifest) });
  expect([200, 201]).toContain(applied.status);
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
  await source?.close();
});

async function run(): Promise<{ status: string; recordsIn: number; recordsOut: number; recordsSkipped: number; errorMessage: string | null }> {
  const started = await fetch(`${hub.url}/api/connectors/snowflakes/runs`, { method: 'POST', headers: H, body: '{}' });
  expect(started.status).toBe(202);
  const { runs } = (await started.json()) as { runs: Array<{ id: string }> };
  const deadline = Date.now() + 30_000;
  for (;;) {
    const record = (await (await fetch(`${hub.url}/api/platform/runs/${runs[0]!.id}`, { headers: H })).json()) as Awaited<ReturnType<typeof run>>;
    if (record.status !== 'Running') return record;
    if (Date.now() > deadline) throw new Error('run still running');
    await new Promise((r) => setTimeout(r, 50));
  }
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
