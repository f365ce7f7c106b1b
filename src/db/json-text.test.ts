import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import fc from 'fast-check';
import pg from 'pg';
import { serverUrl } from '../../test/harness/database.js';
import './database.js'; // the hub's type parsers (int8 as a number), as the API reads rows
import { jsonArraySql } from './json-text.js';
import { isoTimestampSql } from './timestamps.js';

/**
 * A list the database serialises (`jsonArraySql`) is the text `JSON.stringify` gives for the same
 * rows read as objects, byte for byte: the API's list answers switched from one to the other. Held
 * to each other on every character PostgreSQL can store (control characters, quotes, backslashes,
 * slashes, line and paragraph separators, non-BMP characters), nulls, booleans, whole numbers and
 * times, and on the order and the limit.
 */

let client: pg.Client;

const SELECT = `select id, label, flag, amount, ${isoTimestampSql('at')} as "atText" from json_text_probe`;

beforeAll(async () => {
  client = new pg.Client({ connectionString: serverUrl() });
  await client.connect();
  await client.query(`set time zone 'America/St_Johns'`);
  await client.query('create temporary table json_text_probe (id bigint primary key, label text, flag boolean, amount int, at timestamptz)');
});

afterAll(async () => {
  await client.end();
});

async function load(rows: Array<{ label: string | null; flag: boolean | null; amount: number | null }>): Promise<void> {
  await client.query('truncate json_text_probe');
  await client.query(
    `insert into json_text_probe (id, label, flag, amount, at)
     select n, l, f, a, timestamptz '2026-12-04 03:25:04.123456+00' + n * interval '1 second 7 microseconds'
       from unnest($1::text[], $2::boolean[], $3::int[]) with ordinality as t (l, f, a, n)`,
    [rows.map((r) => r.label), rows.map((r) => r.flag), rows.map((r) => r.amount)],
  );
}

async function both(order: string, orderBy: string, limit?: number): Promise<{ database: string; stringified: string }> {
  const objects = await client.query(`${SELECT} ${order}${limit === undefined ? '' : ` limit ${limit}`}`);
  const sql = jsonArraySql(`${SELECT} ${order}`, orderBy, limit === undefined ? undefined : '$1');
  const { rows } = await client.query<{ body: string }>(sql, limit === undefined ? [] : [limit]);
  return { database: rows[0]!.body, stringified: JSON.stringify(objects.rows) };
}

/** Every character PostgreSQL stores in text (no NUL, no lone surrogate), the awkward ones often. */
const storable = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom('"', '\\', '/', '\b', '\f', '\n', '\r', '\t', '\u0001', '\u001f', '\u007f', '\u2028', '\u2029', 'é', '😀', '<', '&', "'") },
  { weight: 2, arbitrary: fc.integer({ min: 1, max: 0x1f }).map((c) => String.fromCharCode(c)) },
  { weight: 3, arbitrary: fc.string({ unit: 'grapheme', maxLength: 1 }) },
);

describe('jsonArraySql', () => {
  it('gives the text JSON.stringify gives for the rows read as objects, on any storable text', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc.record({
            label: fc.option(fc.string({ unit: storable, maxLength: 12 }), { nil: null }),
            flag: fc.option(fc.boolean(), { nil: null }),
            amount: fc.option(fc.integer(), { nil: null }),
          }),
          { minLength: 1, maxLength: 8 },
        ),
        async (rows) => {
          await load(rows);
          const { database, stringified } = await both('order by id desc', 'r.id desc');
          expect(database).toBe(stringified);
        },
      ),
      { numRuns: 150 },
    );
  });

  it('keeps the order given and, with a limit, the first rows in that order', async () => {
    await load(Array.from({ length: 300 }, (_, i) => ({ label: `row ${i}`, flag: i % 3 === 0, amount: (i * 7919) % 101 })));
    const ordered = await both('order by flag, amount desc, id', 'r.flag, r.amount desc, r.id');
    expect(ordered.database).toBe(ordered.stringified);
    expect(JSON.parse(ordered.database)).toHaveLength(300);
    const limited = await both('order by flag, amount desc, id', 'r.flag, r.amount desc, r.id', 17);
    expect(limited.database).toBe(limited.stringified);
    expect(JSON.parse(limited.database)).toHaveLength(17);
    // Times as text of one width sort, byte by byte, as their instants do.
    const byTime = await both('order by at desc, id', 'r."atText" collate "C" desc, r.id', 40);
    expect(byTime.database).toBe(byTime.stringified);
  });

  it('answers [] for no rows', async () => {
    await client.query('truncate json_text_probe');
    expect((await both('order by id', 'r.id')).database).toBe('[]');
    expect((await both('order by id', 'r.id', 5)).database).toBe('[]');
  });
});
