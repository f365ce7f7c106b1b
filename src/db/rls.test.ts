import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import type { Database } from './database.js';

let testDb: MigratedDatabase;
let ownerUrl: string;
let db: Database;

beforeAll(async () => {
  testDb = await migratedDatabase({ 101: 'acme', 102: 'globex' }, 2);
  ({ ownerUrl, db } = testDb);
  const owner = testDb.owner;
  await owner.query(`insert into core.users (tenant_id, login) values (101, 'ann'), (101, 'bob'), (102, 'carl')`);
});

afterAll(async () => {
  await testDb.close();
});

describe('row-level security through the application role', () => {
  it('a query with no tenant filter sees only the current tenant', async () => {
    const acme = await db.withTenant(101, (tx) => tx.query<{ login: string }>('select login from core.users order by login'));
    expect(acme.rows.map((r) => r.login)).toEqual(['ann', 'bob']);
    const globex = await db.withTenant(102, (tx) => tx.query<{ login: string }>('select login from core.users order by login'));
    expect(globex.rows.map((r) => r.login)).toEqual(['carl']);
  });

  it('sees nothing when no tenant is set', async () => {
    const none = await db.withoutTenant((tx) => tx.query('select * from core.users'));
    expect(none.rowCount).toBe(0);
  });

  it('cannot write a row into another tenant', async () => {
    await expect(db.withTenant(101, (tx) => tx.query(`insert into core.users (tenant_id, login) values (102, 'mallory')`))).rejects.toThrow(
      /row-level security/,
    );
    await expect(db.withTenant(101, (tx) => tx.query(`update core.users set tenant_id = 102 where login = 'ann'`))).rejects.toThrow(/row-level security/);
  });

  it('the tenant setting does not leak past its transaction', async () => {
    await db.withTenant(101, (tx) => tx.query('select 1'));
    const client = await db.app.connect();
    try {
      const { rows } = await client.query(`select current_setting('svc.tenant_id', true) as t`);
      expect(rows[0].t === null || rows[0].t === '').toBe(true);
    } finally {
      client.release();
    }
  });

  it('the application role cannot turn row-level security off', async () => {
    await expect(db.withTenant(101, (tx) => tx.query('alter table core.users disable row level security'))).rejects.toThrow(/must be owner/);
    await expect(db.withTenant(101, (tx) => tx.query('drop policy tenant_isolation on core.users'))).rejects.toThrow(/must be owner/);
    await expect(db.withTenant(101, (tx) => tx.query('set role postgres'))).rejects.toThrow(/permission denied/);
    // row_security = off makes PostgreSQL refuse a query that policies would filter, rather than show everything.
    await expect(
      db.withTenant(101, async (tx) => {
        await tx.query('set local row_security = off');
        return tx.query('select * from core.users');
      }),
    ).rejects.toThrow(/row-level security/);
    const attrs = await db.withoutTenant((tx) =>
      tx.query<{ rolbypassrls: boolean; rolsuper: boolean }>('select rolbypassrls, rolsuper from pg_roles where rolname = current_user'),
    );
    expect(attrs.rows[0]).toEqual({ rolbypassrls: false, rolsuper: false });
  });

  it('the worker role sees every tenant, and says so in its name', async () => {
    const all = await db.crossTenant('test-sweep', (tx) => tx.query<{ login: string }>('select login from core.users order by login'));
    expect(all.rows.map((r) => r.login)).toEqual(['ann', 'bob', 'carl']);
  });

  it('every table with a tenant_id column has row-level security and a policy', async () => {
    const owner = new pg.Client({ connectionString: ownerUrl });
    await owner.connect();
    try {
      const { rows } = await owner.query<{ table: string; rls: boolean; policies: number }>(`
        select c.oid::regclass::text as table, c.relrowsecurity as rls,
               (select count(*)::int from pg_policy p where p.polrelid = c.oid) as policies
          from pg_class c join pg_attribute a on a.attrelid = c.oid and a.attname = 'tenant_id' and not a.attisdropped
          join pg_namespace n on n.oid = c.relnamespace
         where c.relkind in ('r', 'p') and n.nspname not in ('pg_catalog', 'information_schema')`);
      expect(rows.length).toBeGreaterThan(0);
      for (const row of rows) expect({ table: row.table, rls: row.rls, hasPolicy: row.policies > 0 }).toEqual({ table: row.table, rls: true, hasPolicy: true });
    } finally {
      await owner.end();
    }
  });
});
