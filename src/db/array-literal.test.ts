import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import fc from 'fast-check';
import pg from 'pg';
import { serverUrl } from '../../test/harness/database.js';
import './database.js'; // the hub's type parsers (int8 as a number)
import { arrayLiteral } from './array-literal.js';

/**
 * `arrayLiteral` is read by PostgreSQL as the array it was made of, as node-postgres's own literal
 * of the same JS array is: on every character PostgreSQL can store in text (quotes, backslashes,
 * braces, commas, spaces, the word NULL, empty strings, non-BMP characters), on nulls, booleans,
 * whole and large numbers and times.
 */

let client: pg.Client;

beforeAll(async () => {
  client = new pg.Client({ connectionString: serverUrl() });
  await client.connect();
});

afterAll(async () => {
  await client.end();
});

/** The array PostgreSQL reads from `param` as `type`, as text of its elements (null kept). */
async function read(param: unknown, type: string): Promise<Array<string | null>> {
  const { rows } = await client.query<{ v: string | null }>(`select v::text from unnest($1::${type}) with ordinality as t (v, n) order by n`, [param]);
  return rows.map((r) => r.v);
}

const storable = fc.string({ unit: 'grapheme', maxLength: 20 }).map((s) => s.replaceAll('\u0000', ''));

describe('arrayLiteral', () => {
  it('text: any string, null, and the words and characters an array literal treats specially', async () => {
    const tricky = ['', 'NULL', 'null', ' ', ' a b ', '{', '}', '{a,b}', ',', '"', '\\', '\\"', 'a"b\\c', "it's", '\t\n\r', '😀', 'é'];
    const values = [...tricky, null, undefined];
    expect(await read(arrayLiteral(values), 'text[]')).toEqual(await read(values, 'text[]'));
    await fc.assert(
      fc.asyncProperty(fc.array(fc.option(storable, { nil: null }), { maxLength: 12 }), async (strings) => {
        expect(await read(arrayLiteral(strings), 'text[]')).toEqual(strings);
      }),
      { numRuns: 50 },
    );
  });

  it('numbers, booleans, uuids and times read as node-postgres sends the same arrays', async () => {
    const cases: Array<[unknown[], string]> = [
      [[1, 0, -7, 2 ** 53 - 1, null], 'bigint[]'],
      [[200, null, 503], 'integer[]'],
      [[true, false, null], 'boolean[]'],
      [['b3f4c1c2-8a6e-4d38-9b0a-0a1b2c3d4e5f', null], 'uuid[]'],
      [[new Date(Date.UTC(2026, 11, 5, 9, 1, 2, 345)).toISOString(), null], 'timestamptz[]'],
      [[], 'bigint[]'],
    ];
    for (const [values, type] of cases) expect(await read(arrayLiteral(values as never), type)).toEqual(await read(values, type));
  });
});
