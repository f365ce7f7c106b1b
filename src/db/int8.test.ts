import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { serverUrl } from '../../test/harness/database.js';
import './database.js'; // the hub's type parsers

/** bigint (int8) columns as the hub reads them: numbers while exact, their digits beyond ±(2^53 − 1). */

let client: pg.Client;

beforeAll(async () => {
  client = new pg.Client({ connectionString: serverUrl() });
  await client.connect();
});

afterAll(async () => {
  await client.end();
});

describe('int8', () => {
  it('is a number within ±(2^53 − 1), its exact digits beyond (a number there would be another number)', async () => {
    const { rows } = await client.query(
      `select 42::int8 as small, 9007199254740991::int8 as edge, -9007199254740991::int8 as low, 9007199254740993::int8 as big,
              1234567890123456789::int8 as snowflake, (-9223372036854775807 - 1)::int8 as least, null::int8 as none`,
    );
    expect(rows[0]).toEqual({ small: 42, edge: 9007199254740991, low: -9007199254740991, big: '9007199254740993', snowflake: '1234567890123456789', least: '-9223372036854775808', none: null });
  });
});
