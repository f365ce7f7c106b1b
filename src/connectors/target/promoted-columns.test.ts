import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { ownerClient } from '../../../test/harness/api-client.js';
import { appliedConnector, runnerOverHub } from '../../../test/harness/connector-runner.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import type { PageReader } from '../runner.js';
import type { ConnectorSpec } from '../types.js';

/**
 * A row's promoted columns are what the writer of its `data` projects from it, on the real
 * PostgreSQL, through the runner (first load inserted, later runs merged; chunks of 64 rows and more
 * staged with COPY, smaller ones sent as JSON): a column the writer of a row does not promote (a
 * promote a re-apply dropped, a column another writer of the table promotes) is emptied when the row
 * is written again, never left holding a value its `data` no longer has. And a CSV ingest into a
 * table a connector made with typed columns writes those columns as their type (a value that is not
 * one is NULL, the row kept), where the run failed whole on the type clash.
 */

let hub: TestHub;
let owner: pg.Client;
const TENANT = 1;

const pages = (items: unknown[]): PageReader => ({
  async *read() {
    yield { number: 1, items };
  },
});

const apply = (name: string, table: string, promote: unknown[]) => appliedConnector(hub, name, table, { promote });

async function run(connector: ConnectorSpec, items: unknown[]) {
  const [record] = await (await runnerOverHub(hub, 0).trigger(TENANT, connector, { triggeredBy: 'manual', reader: pages(items) })).done;
  return record!;
}

const ingest = (connector: string, table: string, csv: string) => hub.services.connectors.runs.ingestCsv(TENANT, undefined, { connector, table, key: 'id', csv, triggeredBy: 'test' });

async function rowsOf(table: string, columns: string): Promise<Array<Record<string, unknown>>> {
  return (await owner.query(`select external_id as id, ${columns} from ext_t${TENANT}.${table} order by external_id collate "C"`)).rows;
}

const ids = (n: number) => Array.from({ length: n }, (_v, i) => `k${String(i).padStart(3, '0')}`);

beforeAll(async () => {
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

describe('promoted columns no writer of a row promotes', () => {
  it.each([
    ['staged with COPY', 100],
    ['sent as JSON', 3],
  ])('a promote a re-apply dropped is emptied on every row the next run writes (%s)', async (_how, n) => {
    const table = `dropped_${n}`;
    const keys = ids(n);
    const first = await apply(`dropped-${n}`, `ext.${table}`, [
      { name: 'city', path: '$.city', type: 'text' },
      { name: 'n', path: '$.n', type: 'bigint' },
    ]);
    expect(await run(first, keys.map((id, i) => ({ id, city: 'Lyon', n: i })))).toMatchObject({ status: 'Completed', recordsOut: n });
    // The re-apply drops `city`: the source's rows now say Oslo, and the column is no longer theirs.
    const second = await apply(`dropped-${n}`, `ext.${table}`, [{ name: 'n', path: '$.n', type: 'bigint' }]);
    expect(await run(second, keys.slice(1).map((id, i) => ({ id, city: 'Oslo', n: 100 + i })))).toMatchObject({ status: 'Completed', recordsOut: n - 1 });
    const stored = await rowsOf(table, `city, n::int as n, data->>'city' as said`);
    // The row the second run did not read keeps what its writer projected from its (unchanged) data.
    expect(stored[0]).toEqual({ id: keys[0], city: 'Lyon', n: 0, said: 'Lyon' });
    for (const [i, row] of stored.slice(1).entries()) expect(row).toEqual({ id: keys[i + 1], city: null, n: 100 + i, said: 'Oslo' });
  }, 60_000);

  it('a row another writer of the table writes loses the columns only the first writer promotes, on the row-by-row path too', async () => {
    const table = 'two_writers';
    const keys = ids(80);
    const a = await apply('writer-a', `ext.${table}`, [{ name: 'city', path: '$.city', type: 'text' }]);
    expect(await run(a, keys.map((id) => ({ id, city: 'Lyon' })))).toMatchObject({ status: 'Completed' });
    // The other writer promotes `amount`; one row of its chunk holds a value the column refuses, so the
    // chunk is written again row by row, each row under a savepoint.
    const b = await apply('writer-b', `ext.${table}`, [{ name: 'amount', path: '$.amount', type: 'numeric' }]);
    const items = keys.map((id, i) => ({ id, amount: i === 7 ? '1e-20000' : String(i) }));
    expect(await run(b, items)).toMatchObject({ status: 'Completed', recordsOut: 79, recordsSkipped: 1 });
    const stored = await rowsOf(table, `city, amount::text as amount, connector_id::text as owner`);
    expect(stored[7]).toEqual({ id: keys[7], city: 'Lyon', amount: null, owner: a.id }); // refused: as writer-a left it
    for (const [i, row] of stored.entries()) if (i !== 7) expect(row).toEqual({ id: keys[i], city: null, amount: String(i), owner: b.id });
    // A CSV ingest over the same rows: its header names neither column.
    expect(await ingest('sheet', table, `id,note\n${keys[0]},hello\n${keys[7]},there\n`)).toMatchObject({ status: 'Completed', recordsOut: 2 });
    expect((await rowsOf(table, 'city, amount::text as amount, note')).slice(0, 8).filter((r) => r.note !== null)).toEqual([
      { id: keys[0], city: null, amount: null, note: 'hello' },
      { id: keys[7], city: null, amount: null, note: 'there' },
    ]);
  }, 60_000);
});

describe('a CSV ingest into a table a connector typed', () => {
  it('writes each column as the table types it: a value that is not one is NULL, its row kept', async () => {
    const table = 'typed_by_rest';
    const rest = await apply('typed-rest', `ext.${table}`, [
      { name: 'n', path: '$.n', type: 'bigint' },
      { name: 'at', path: '$.at', type: 'timestamptz' },
      { name: 'ok', path: '$.ok', type: 'boolean' },
      { name: 'price', path: '$.price', type: 'numeric' },
    ]);
    expect(await run(rest, [{ id: 'r1', n: 1, at: '2024-01-01T00:00:00Z', ok: true, price: 1.5 }])).toMatchObject({ status: 'Completed' });
    const csv = ['id,n,at,ok,price,note', 'c1,12,2024-03-05T10:00:00+02:00,yes,3.25,first', 'c2,twelve,yesterday,maybe,cheap,second', 'c3, 7 ,,false,,third', 'r1,2,2024-06-01,true,9,over'].join('\n');
    const record = await ingest('sheet-typed', table, `${csv}\n`);
    expect(record).toMatchObject({ status: 'Completed', errorMessage: null, recordsIn: 4, recordsOut: 4, recordsSkipped: 0 });
    const stored = await rowsOf(table, `n::int as n, to_char(at at time zone 'UTC', 'YYYY-MM-DD HH24:MI') as at, ok, price::text as price, note, data`);
    expect(stored).toEqual([
      { id: 'c1', n: 12, at: '2024-03-05 08:00', ok: true, price: '3.25', note: 'first', data: { id: 'c1', n: '12', at: '2024-03-05T10:00:00+02:00', ok: 'yes', price: '3.25', note: 'first' } },
      { id: 'c2', n: null, at: null, ok: null, price: null, note: 'second', data: { id: 'c2', n: 'twelve', at: 'yesterday', ok: 'maybe', price: 'cheap', note: 'second' } },
      { id: 'c3', n: 7, at: null, ok: false, price: null, note: 'third', data: { id: 'c3', n: ' 7 ', at: '', ok: 'false', price: '', note: 'third' } },
      { id: 'r1', n: 2, at: '2024-06-01 00:00', ok: true, price: '9', note: 'over', data: { id: 'r1', n: '2', at: '2024-06-01', ok: 'true', price: '9', note: 'over' } },
    ]);
    // The columns keep their types; the CSV's own column is text.
    const types = await owner.query<{ column_name: string; data_type: string }>(
      `select column_name, data_type from information_schema.columns where table_schema = $1 and table_name = $2 and column_name in ('n', 'at', 'ok', 'price', 'note') order by 1`,
      [`ext_t${TENANT}`, table],
    );
    expect(types.rows).toEqual([
      { column_name: 'at', data_type: 'timestamp with time zone' },
      { column_name: 'n', data_type: 'bigint' },
      { column_name: 'note', data_type: 'text' },
      { column_name: 'ok', data_type: 'boolean' },
      { column_name: 'price', data_type: 'numeric' },
    ]);
  }, 60_000);
});

describe("a table's columns past PostgreSQL's limit", () => {
  it('a run whose promotes do not fit beside the columns its table has numbered fails before it reads anything, naming the limit and what is left', async () => {
    const promotes = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => ({ name: `${prefix}${i}`, path: `$.${prefix}${i}`, type: 'text' }));
    const a = await apply('full-a', 'ext.rest_full', promotes('p', 1_500));
    expect(await run(a, [{ id: 'a1', p0: 'kept' }])).toMatchObject({ status: 'Completed', recordsOut: 1 });
    // Another writer of the table: 100 new columns, 92 left (1,500 promoted and the 8 of every ext table).
    const b = await apply('full-b', 'ext.rest_full', [...promotes('p', 1), ...promotes('q', 100)]);
    let read = false;
    const reader: PageReader = {
      async *read() {
        read = true;
        yield { number: 1, items: [{ id: 'a1', p0: 'overwritten' }] };
      },
    };
    const [failed] = await (await runnerOverHub(hub, 0).trigger(TENANT, b, { triggeredBy: 'manual', reader })).done;
    expect(failed).toMatchObject({
      status: 'Failed',
      recordsIn: 0,
      errorMessage:
        "the run promotes 100 columns ext.rest_full does not have: at most 92 more fit (a table holds at most 1,600 columns, PostgreSQL's limit, and ext.rest_full takes 1,508: " +
        'the 8 every ext table has, its promoted columns and any dropped since, which still count)',
    });
    expect(read).toBe(false);
    expect(await rowsOf('rest_full', 'p0')).toEqual([{ id: 'a1', p0: 'kept' }]);
    expect((await owner.query(`select relnatts::int as n from pg_class where oid = 'ext_t${TENANT}.rest_full'::regclass`)).rows).toEqual([{ n: 1_508 }]);
    // A new table of more than fit: not made, and not left registered.
    const c = await apply('full-c', 'ext.rest_new', promotes('p', 1_593));
    expect(await run(c, [{ id: 'c1' }])).toMatchObject({ status: 'Failed', errorMessage: expect.stringMatching(/^the run promotes 1,593 columns ext\.rest_new does not have: at most 1,592 more fit /) });
    const { rows } = await owner.query(`select to_regclass('ext_t${TENANT}.rest_new') as made, (select count(*)::int from connectors.ext_tables where table_name = 'ext.rest_new') as registered`);
    expect(rows).toEqual([{ made: null, registered: 0 }]);
  }, 60_000);
});
