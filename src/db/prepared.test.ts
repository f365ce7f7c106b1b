import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase, TEST_ROLES } from '../../test/harness/database.js';
import { Database, statementName } from './database.js';
import { roleUrl } from './roles.js';

/**
 * Named (prepared) statements (`{prepare: true}`): one name per text, prepared on the server, and the
 * same answers as the unnamed statement, also once PostgreSQL may have switched to a generic plan
 * (after five executions); in autocommit as the worker, and in tenant transactions, where the first
 * statement travels with the transaction's opening (one message) and a later one alone.
 */

let t: MigratedDatabase;
const PREPARED = { prepare: true };
/** A statement that finds itself among its session's prepared statements when it is one (named from its text and its connection). */
const SELF = 'select name from pg_prepared_statements where name like $1';
const own = (text: string) => `${statementName(text)}\\_%`;
const ofConnection = (text: string) => expect.stringMatching(new RegExp(`^${statementName(text)}_\\d+$`));

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

  it('autocommit: the statement is prepared on the server under a name of its text and connection (and unnamed, it is not)', async () => {
    for (let i = 0; i < 4; i++) expect((await t.db.crossTenantQuery<{ name: string }>('test', SELF, [own(SELF)], PREPARED)).rows).toEqual([{ name: ofConnection(SELF) }]);
    const other = `${SELF} and true`;
    expect((await t.db.crossTenantQuery<{ name: string }>('test', other, [own(other)])).rows).toEqual([]);
  });

  it('in a tenant transaction: first (with the opening) and later statements, each time it runs', async () => {
    for (let i = 0; i < 7; i++) {
      const [first, later, tenant] = await t.db.withTenant(1, async (tx) => [
        (await tx.query<{ name: string }>(SELF, [own(SELF)], PREPARED)).rows,
        (await tx.query<{ name: string }>(SELF, [own(SELF)], PREPARED)).rows,
        (await tx.query<{ tenant: string }>(`select current_setting('svc.tenant_id') as tenant`)).rows,
      ]);
      expect(first).toEqual([{ name: ofConnection(SELF) }]);
      expect(later).toEqual(first);
      // The opening still ran before the named first statement: the tenant is set.
      expect(tenant).toEqual([{ tenant: '1' }]);
    }
  });

  it('without parameters: named too, the opening still before it (a read with the tenant setting, and a tenant transaction)', async () => {
    const text = `select current_setting('svc.tenant_id') as tenant, current_setting('transaction_read_only') as read_only`;
    for (let i = 0; i < 7; i++) {
      const [read, named] = await t.db.readWithTenant(1, async (tx) => [
        (await tx.query<{ tenant: string; read_only: string }>(text, [], PREPARED)).rows,
        // The same connection: the statement before was prepared under its name.
        (await tx.query<{ name: string }>(SELF, [own(text)])).rows,
      ]);
      expect(read).toEqual([{ tenant: '1', read_only: 'on' }]);
      expect(named).toEqual([{ name: ofConnection(text) }]);
      const [written] = await t.db.withTenant(1, async (tx) => [(await tx.query<{ tenant: string; read_only: string }>(text, undefined, PREPARED)).rows]);
      expect(written).toEqual([{ tenant: '1', read_only: 'off' }]);
    }
  });

  it('a failed transaction leaves the connection usable for the named statement', async () => {
    const text = 'select $1::int / $2::int as q';
    await expect(t.db.withTenant(1, (tx) => tx.query(text, [1, 0], PREPARED))).rejects.toThrow(/division by zero/);
    for (let i = 0; i < 4; i++) expect((await t.db.withTenant(1, (tx) => tx.query<{ q: number }>(text, [6, 3], PREPARED))).rows).toEqual([{ q: 2 }]);
  });

  it("a read's settings are a named statement of the connection, bound with each read's tenant", async () => {
    const text = `select current_setting('svc.tenant_id') as tenant, current_setting('transaction_read_only') as read_only,
      (select count(*) from pg_prepared_statements where statement like 'select set_config(''svc.tenant_id'', $1, true)%')::int as openings`;
    // One connection, new: its first read a statement without parameters nor name (simple protocol),
    // which carries the settings' text instead and prepares nothing.
    const db = new Database({ appUrl: roleUrl(t.ownerUrl, TEST_ROLES.app), workerUrl: roleUrl(t.ownerUrl, TEST_ROLES.worker), analyticRole: TEST_ROLES.analytic, poolSize: 1 });
    try {
      for (const tenant of [1, 2, 1]) {
        expect((await db.readWithTenant(tenant, (tx) => tx.query(`select current_setting('svc.tenant_id') as tenant`))).rows).toEqual([{ tenant: String(tenant) }]);
        const { rows } = await db.readWithTenant(tenant, (tx) => tx.query(text, [], PREPARED));
        expect(rows).toEqual([{ tenant: String(tenant), read_only: 'on', openings: 1 }]);
      }
    } finally {
      await db.close();
    }
  });

  it('a named statement the server refused to parse is parsed again next time, with or without an opening before it', async () => {
    // The opening's own ParseComplete came first and was taken for the statement's: the connection
    // then bound the name without parsing it ('prepared statement … does not exist') for as long as it lived.
    for (const [run, fn] of [
      ['read', (text: string) => t.db.readWithTenant(1, (tx) => tx.query<{ n: number }>(text, [2], PREPARED))],
      ['transaction', (text: string) => t.db.withTenant(1, (tx) => tx.query<{ n: number }>(text, [2], PREPARED))],
      ['autocommit', (text: string) => t.db.crossTenantQuery<{ n: number }>('test', text, [2], PREPARED)],
    ] as const) {
      const text = `select public.later_${run}($1::int) as n`;
      await expect(fn(text)).rejects.toThrow(/function public\.later_\w+\(integer\) does not exist/);
      await t.owner.query(`create function public.later_${run}(int) returns int language sql immutable as 'select $1 * 21'`);
      for (let i = 0; i < 3; i++) expect((await fn(text)).rows).toEqual([{ n: 42 }]);
    }
  });

  it('answers as the unnamed statement, before and after a generic plan may be chosen', async () => {
    const text = 'select g::int as n from generate_series(1, $1::int) g where g % $2::int = 0 order by g';
    for (let i = 1; i <= 8; i++) {
      const prepared = await t.db.crossTenantQuery<{ n: number }>('test', text, [i * 10, i], PREPARED);
      const plain = await t.db.crossTenantQuery<{ n: number }>('test', text, [i * 10, i]);
      expect(prepared.rows).toEqual(plain.rows);
      expect(prepared.rows).toHaveLength(10);
    }
  });
});
