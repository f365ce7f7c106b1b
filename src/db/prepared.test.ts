import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { statementName } from './database.js';

/**
 * Named (prepared) statements of the worker role (`Database.crossTenantPrepared`): one name per text,
 * prepared on the server, and the same answers as the unnamed statement, also once PostgreSQL may
 * have switched to a generic plan (after five executions).
 */

let t: MigratedDatabase;

beforeAll(async () => {
  t = await migratedDatabase({ 1: 'acme' });
});

afterAll(async () => {
  await t.close();
});

describe('prepared statements', () => {
  it('one text has one name, another text another', () => {
    expect(statementName('select 1')).toBe(statementName('select 1'));
    expect(statementName('select 1')).not.toBe(statementName('select 2'));
    expect(statementName('select 1')).toMatch(/^svc_[0-9a-f]{24}$/);
  });

  it('is prepared on the server: the statement finds itself among the session prepared statements', async () => {
    const text = 'select name from pg_prepared_statements where name = $1';
    const name = statementName(text);
    expect((await t.db.crossTenantPrepared<{ name: string }>('test', text, [name])).rows).toEqual([{ name }]);
    // The same text unnamed is not a prepared statement of its session.
    const other = 'select name from pg_prepared_statements where name = $1 and true';
    expect((await t.db.crossTenantQuery<{ name: string }>('test', other, [statementName(other)])).rows).toEqual([]);
  });

  it('answers as the unnamed statement, before and after a generic plan may be chosen', async () => {
    const text = 'select g::int as n from generate_series(1, $1::int) g where g % $2::int = 0 order by g';
    for (let i = 1; i <= 8; i++) {
      const prepared = await t.db.crossTenantPrepared<{ n: number }>('test', text, [i * 10, i]);
      const plain = await t.db.crossTenantQuery<{ n: number }>('test', text, [i * 10, i]);
      expect(prepared.rows).toEqual(plain.rows);
      expect(prepared.rows).toHaveLength(10);
    }
  });
});
