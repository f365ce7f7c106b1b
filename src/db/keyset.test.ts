import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { serverUrl } from '../../test/harness/database.js';
import { statementName } from './database.js';
import { jsonPageSql, type PageKey, pageOfRows, textOfShape } from './keyset.js';

describe('textOfShape', () => {
  it('builds a text once per shape and answers that same string afterwards', () => {
    const texts = new Map<string, string>();
    let built = 0;
    const build = (where: string) => () => {
      built += 1;
      return `select * from t where ${where} ${'and true '.repeat(200)}`;
    };
    const first = textOfShape(texts, 'a = $1', build('a = $1'));
    const again = textOfShape(texts, 'a = $1', build('a = $1'));
    const other = textOfShape(texts, 'b = $1', build('b = $1'));
    expect(again).toBe(first);
    expect(other).not.toBe(first);
    expect(built).toBe(2);
    // The name of the statement follows the text, whichever call made it.
    expect(statementName(again)).toBe(statementName(build('a = $1')()));
  });
});

/**
 * `jsonPageSql` over a table: each page's body and next key are what `pageOfRows` makes of the same
 * rows read as objects (the first `limit` in the list's order; the last one's key only when a row
 * follows), for every limit from 1 to past the table's size and after every key, the empty list
 * included; and the rows are read once (one scan, no CTE read three times).
 */
describe('jsonPageSql', () => {
  let client: pg.Client;

  beforeAll(async () => {
    client = new pg.Client({ connectionString: serverUrl() });
    await client.connect();
    await client.query('create temporary table page_probe (id bigint primary key, grp boolean not null, label text)');
  });

  afterAll(async () => {
    await client.end();
  });

  const ORDER = 'grp, id desc';
  const KEY = 'array[grp::text, id::text]';
  function pageSql(after: boolean): string {
    const rows = `select * from page_probe ${after ? 'where grp >= $2::boolean and (grp > $2::boolean or id < $3::bigint)' : ''} order by ${ORDER} limit $1::integer + 1`;
    return jsonPageSql({ rows, order: ORDER, limit: '$1::integer', record: 'p.id, p.label as "text"', alias: 'p', key: KEY });
  }

  async function pageOf(limit: number, after?: PageKey): Promise<{ body: string; next: string[] | null }> {
    const { rows } = await client.query<{ body: string; next: string[] | null }>(pageSql(after !== undefined), after ? [limit, ...after] : [limit]);
    expect(rows).toHaveLength(1);
    return rows[0]!;
  }

  it('answers the first limit rows in order, and the last one\'s key only when more follow', async () => {
    for (const size of [0, 1, 3, 7]) {
      await client.query('truncate page_probe');
      await client.query(`insert into page_probe select n, n % 3 = 0, case when n % 2 = 0 then 'l"' || n end from generate_series(1, $1::integer) n`, [size]);
      const all = (await client.query<{ id: string; grp: boolean; label: string | null }>(`select id::text, grp, label from page_probe order by ${ORDER}`)).rows;
      const keys: Array<PageKey | undefined> = [undefined, ...all.map((r) => [String(r.grp), r.id])];
      for (const after of keys) {
        const rest = after ? all.slice(all.findIndex((r) => r.id === after[1]) + 1) : all;
        for (let limit = 1; limit <= size + 2; limit++) {
          const expected = pageOfRows(rest.slice(0, limit + 1), limit, (r) => [String(r.grp), r.id], (r) => ({ id: Number(r.id), text: r.label }));
          const page = await pageOf(limit, after);
          expect(page.body).toBe(JSON.stringify(expected.items));
          expect(page.next).toEqual(expected.next ?? null);
        }
      }
    }
  });

  it('reads the rows once', async () => {
    await client.query('truncate page_probe');
    await client.query(`insert into page_probe select n, n % 3 = 0, 'x' from generate_series(1, 20) n`);
    const plan = (await client.query<{ 'QUERY PLAN': string }>(`explain ${pageSql(false).replaceAll('$1::integer', '5')}`)).rows.map((r) => r['QUERY PLAN']).join('\n');
    expect(plan).not.toMatch(/CTE/);
    expect(plan.match(/Scan on page_probe/g)).toHaveLength(1);
  });
});
