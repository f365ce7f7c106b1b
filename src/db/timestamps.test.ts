import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { serverUrl } from '../../test/harness/database.js';
import { isoTimestampSql } from './timestamps.js';

/**
 * `isoTimestampSql` gives, from the server, the text that node-postgres's `Date` and
 * `toISOString()` give for the same timestamptz: the API's lists switched from one to the other.
 * Compared on fixed edge cases and on random instants, in a session whose time zone is not UTC.
 */

let client: pg.Client;

beforeAll(async () => {
  client = new pg.Client({ connectionString: serverUrl() });
  await client.connect();
  await client.query(`set time zone 'America/St_Johns'`);
});

afterAll(async () => {
  await client.end();
});

async function bothWays(values: string[]): Promise<Array<{ server: string; client: string }>> {
  const { rows } = await client.query<{ server: string; t: Date }>(`select ${isoTimestampSql('v::timestamptz')} as server, v::timestamptz as t from unnest($1::text[]) as v`, [values]);
  return rows.map((r) => ({ server: r.server, client: r.t.toISOString() }));
}

describe('isoTimestampSql', () => {
  it('matches Date.toISOString on edge cases: microseconds cut off, offsets, day and year boundaries', async () => {
    const cases = [
      '2026-11-28 21:37:16.633+00',
      '2026-11-28 21:37:16.633999+00',
      '2026-11-28 21:37:16.000001+00',
      '2026-11-28 21:37:16.1+00',
      '2026-11-28 21:37:16+00',
      '2026-03-01 00:30:00.5-05',
      '1999-12-31 23:59:59.999999+00',
      '2000-02-29 12:00:00.057+13:45',
      '1970-01-01 00:00:00+00',
      '0900-06-15 10:00:00.25+00',
      '9999-12-31 23:59:59.999999+00',
    ];
    const rows = await bothWays(cases);
    for (const row of rows) expect(row.server).toBe(row.client);
    expect(rows[1]!.server).toBe('2026-11-28T21:37:16.633Z');
    expect(rows[5]!.server).toBe('2026-03-01T05:30:00.500Z');
  });

  it('matches it on random instants with microseconds (1970 to 2100)', async () => {
    const values = Array.from({ length: 2000 }, () => {
      const ms = Math.floor(Math.random() * 4_102_444_800_000);
      const micros = String(Math.floor(Math.random() * 1000)).padStart(3, '0');
      return `${new Date(ms).toISOString().replace('Z', micros)}+00`;
    });
    const rows = await bothWays(values);
    expect(rows).toHaveLength(values.length);
    const differing = rows.filter((r) => r.server !== r.client);
    expect(differing).toEqual([]);
  });

  it('keeps null as null', async () => {
    const { rows } = await client.query(`select ${isoTimestampSql('null::timestamptz')} as t`);
    expect(rows).toEqual([{ t: null }]);
  });
});
