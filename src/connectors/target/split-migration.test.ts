import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import pg from 'pg';
import { createTestDatabase, TEST_ROLES } from '../../../test/harness/database.js';
import { Database } from '../../db/database.js';
import { MIGRATION_SETS, migrate } from '../../db/migrations.js';
import { roleUrl } from '../../db/roles.js';
import { packageRoot } from '../../package-root.js';
import { upsertChunk } from './writer.js';

/**
 * An install from before per-tenant tables: migrated up to connectors V3, with a shared ext.partners
 * written by two tenants (as the hub of that time created it). Migrating to the current version
 * splits it into ext_t1.partners and ext_t2.partners, each with its tenant's rows, its row policy,
 * a check constraint, grants for the application role and an identity that goes on counting.
 */

let ownerUrl: string;
let owner: pg.Client;
let db: Database;
let oldDir: string;

beforeAll(async () => {
  ownerUrl = await createTestDatabase();
  oldDir = mkdtempSync(join(tmpdir(), 'svc-connectors-v3-'));
  const current = resolve(packageRoot(), 'src/connectors/migrations/connectors');
  for (const file of ['V1__connectors.sql', 'V2__runs_dead_letters_tables.sql', 'V3__run_heartbeat.sql']) cpSync(join(current, file), join(oldDir, file));
  await migrate(
    ownerUrl,
    TEST_ROLES,
    MIGRATION_SETS.map((s) => (s.schema === 'connectors' ? { ...s, dir: oldDir } : s)),
  );
  owner = new pg.Client({ connectionString: ownerUrl });
  await owner.connect();
  await owner.query(`insert into core.tenants (id, code, name) values (1, 'one', 'One'), (2, 'two', 'Two')`);
  // The shared table as the hub created it before (src/connectors/target/ddl.ts of that time).
  await owner.query(`
    create table ext.partners (
      id           bigint generated always as identity primary key,
      tenant_id    bigint not null,
      external_id  text not null,
      row_hash     text not null,
      data         jsonb not null,
      indexed_at   timestamptz not null default now(),
      connector_id uuid not null,
      endpoint_id  uuid not null,
      unique (tenant_id, external_id)
    );
    create index partners_data on ext.partners using gin (data jsonb_path_ops);
    alter table ext.partners enable row level security;
    create policy tenant_isolation on ext.partners using (tenant_id = core.current_tenant()) with check (tenant_id = core.current_tenant());
    alter table ext.partners add column name text;
    grant usage on schema ext to svc_app, svc_worker;
    grant select, insert, update, delete on ext.partners to svc_app, svc_worker;
    insert into ext.partners (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, name)
      select t, 'k' || i, md5(t || ':' || i), jsonb_build_object('i', i), gen_random_uuid(), gen_random_uuid(), 'n' || i
        from generate_series(1, 2) t, generate_series(1, 5) i where t = 1 or i <= 3;
    insert into connectors.ext_tables (tenant_id, connector_id, endpoint_uuid, table_name)
      values (1, gen_random_uuid(), gen_random_uuid(), 'ext.partners'), (2, gen_random_uuid(), gen_random_uuid(), 'ext.partners');
  `);
  db = new Database({ appUrl: roleUrl(ownerUrl, TEST_ROLES.app), workerUrl: roleUrl(ownerUrl, TEST_ROLES.worker), poolSize: 2 });
});

afterAll(async () => {
  await owner?.end();
  await db?.close();
  rmSync(oldDir, { recursive: true, force: true });
});

describe('connectors V4: shared ext.* tables split per tenant', () => {
  it('moves each tenant\'s rows into ext_t<id>, drops the shared table and schema ext', async () => {
    expect(await migrate(ownerUrl, TEST_ROLES)).toBeGreaterThanOrEqual(1);
    const counts = await owner.query<{ one: number; two: number }>('select (select count(*)::int from ext_t1.partners) as one, (select count(*)::int from ext_t2.partners) as two');
    expect(counts.rows[0]).toEqual({ one: 5, two: 3 });
    expect((await owner.query(`select 1 from pg_namespace where nspname = 'ext'`)).rowCount).toBe(0);
    const stray = await owner.query<{ n: number }>(`select count(*)::int as n from ext_t2.partners where tenant_id <> 2`);
    expect(stray.rows[0]!.n).toBe(0);
    const security = await owner.query<{ table: string; rls: boolean; policies: number; checks: number }>(`
      select c.oid::regclass::text as table, c.relrowsecurity as rls,
             (select count(*)::int from pg_policy p where p.polrelid = c.oid) as policies,
             (select count(*)::int from pg_constraint k where k.conrelid = c.oid and k.contype = 'c') as checks
        from pg_class c join pg_namespace n on n.oid = c.relnamespace where n.nspname in ('ext_t1', 'ext_t2') and c.relkind = 'r' order by 1`);
    expect(security.rows).toEqual([
      { table: 'ext_t1.partners', rls: true, policies: 1, checks: 1 },
      { table: 'ext_t2.partners', rls: true, policies: 1, checks: 1 },
    ]);
    await expect(owner.query(`insert into ext_t1.partners (tenant_id, external_id, row_hash, data, connector_id, endpoint_id) values (2, 'x', 'h', '{}', gen_random_uuid(), gen_random_uuid())`)).rejects.toThrow(/check constraint/);
  });

  it('the application role reads and writes its tenant\'s moved table, and the identity goes on counting', async () => {
    const seen = await db.withTenant(2, (tx) => tx.query<{ name: string }>('select name from ext_t2.partners order by external_id'));
    expect(seen.rows.map((r) => r.name)).toEqual(['n1', 'n2', 'n3']);
    const other = await db.withTenant(2, (tx) => tx.query('select 1 from ext_t1.partners'));
    expect(other.rowCount).toBe(0);
    const ids = { tenantId: 1, connectorId: '00000000-0000-4000-8000-000000000001', endpointUuid: '00000000-0000-4000-8000-000000000002' };
    const target = { kind: 'hybrid' as const, table: 'ext.partners', unique_key: '$.id', promote: [{ name: 'name', path: '$.name', type: 'text' as const }] };
    const written = await db.withTenant(1, (tx) => upsertChunk(tx, target, [{ externalId: 'new', data: { id: 'new' }, json: '{"id":"new"}', rowHash: 'h-new', promoted: { name: 'fresh' }, rejects: [] }], ids));
    expect(written).toBe(1);
    const { rows } = await owner.query<{ fresh: number; max: number }>(`select (select id from ext_t1.partners where external_id = 'new')::int as fresh, (select max(id) from ext_t1.partners where external_id <> 'new')::int as max`);
    expect(rows[0]!.fresh).toBeGreaterThan(rows[0]!.max);
  });
});
