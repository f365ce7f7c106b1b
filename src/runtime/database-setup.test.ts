import { randomBytes } from 'node:crypto';
import { describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { Config } from '../config/config.js';
import { migrate } from '../db/migrations.js';
import { type RoleNames, roleUrl } from '../db/roles.js';
import { createTestDatabase, TEST_ROLES } from '../../test/harness/database.js';
import { captureLogs } from '../../test/harness/log-capture.js';
import { until } from '../../test/harness/until.js';
import { type DatabaseSetup, setupDatabase } from './database-setup.js';

describe('setupDatabase', () => {
  it('two hubs starting at once on a new database: the one that finds tenant default being created by the other starts too', async () => {
    const url = await createTestDatabase();
    await migrate(url, TEST_ROLES);
    const config = Config.load({ env: { SVC_CONFIG: '/dev/null', SVC_DATASOURCE_URL: url } });
    // The other hub, between its insert of tenant default and its commit.
    const other = new pg.Client({ connectionString: url });
    await other.connect();
    const watcher = new pg.Client({ connectionString: url });
    await watcher.connect();
    try {
      await other.query('begin');
      await other.query(`insert into core.tenants (code, name, description) values ('default', 'Default tenant', 'Created at first start')`);
      const starting = setupDatabase(config, { migrate: true });
      await until('the start to wait on the other hub’s insert', async () => {
        const waiting = await watcher.query(`select 1 from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`);
        return waiting.rowCount! > 0;
      }, 30_000);
      await other.query('commit');
      // Was: the start failed with 'duplicate key value violates unique constraint "tenants_code_key"'.
      const setup = await starting;
      await setup.close();
      const tenants = await watcher.query('select code from core.tenants order by id');
      expect(tenants.rows.map((r) => r.code)).toEqual(['system', 'default']);
    } finally {
      await other.end();
      await watcher.end();
    }
  });

  it('the owner password given as a query parameter: the roles are derived from it and connect; none at all in the URL: refused, the roles left as they were', async () => {
    const url = await createTestDatabase();
    await migrate(url, TEST_ROLES);
    const inQuery = new URL(url);
    const password = decodeURIComponent(inQuery.password);
    inQuery.password = '';
    inQuery.searchParams.set('password', password);
    const queryConfig = Config.load({ env: { SVC_CONFIG: '/dev/null', SVC_DATASOURCE_URL: inQuery.toString() } });
    // Was: the roles' passwords derived from no secret, and the role URLs kept the owner's
    // `?password=`, which node-postgres prefers: 'password authentication failed for user "svc_app"'.
    const setup = await setupDatabase(queryConfig, { migrate: true });
    try {
      expect((await setup.db.app.query('select current_user as who')).rows[0].who).toBe(TEST_ROLES.app);
      expect((await setup.db.worker.query('select current_user as who')).rows[0].who).toBe(TEST_ROLES.worker);
    } finally {
      await setup.close();
    }

    // The password from PGPASSWORD (or a password file): nothing secret in the URL to derive from.
    const bare = new URL(url);
    bare.password = '';
    const bareConfig = Config.load({ env: { SVC_CONFIG: '/dev/null', SVC_DATASOURCE_URL: bare.toString() } });
    const saved = process.env.PGPASSWORD;
    process.env.PGPASSWORD = password;
    try {
      // Was: started, with svc_app's and svc_worker's (BYPASSRLS) passwords computable from the user, host and port.
      await expect(setupDatabase(bareConfig, { migrate: true })).rejects.toThrow('svc.datasource.url holds no password');
      await expect(setupDatabase(bareConfig, { migrate: false })).rejects.toThrow('svc.datasource.url holds no password');
    } finally {
      if (saved === undefined) delete process.env.PGPASSWORD;
      else process.env.PGPASSWORD = saved;
    }
    // The roles keep the passwords derived from the owner's.
    const app = new pg.Client({ connectionString: roleUrl(url, TEST_ROLES.app) });
    await app.connect();
    await app.end();
  });

  it('roles an administrator made: a start without the analytic role, or without the application role able to take it, is refused saying what to run', async () => {
    const url = await createTestDatabase();
    await migrate(url, TEST_ROLES);
    // A name of this test's alone: roles are the server's, and other suites use svc_analytic.
    const analytic = `svc_analytic_${randomBytes(4).toString('hex')}`;
    const config = adminRolesConfig(url, { SVC_DATASOURCE_ANALYTIC_ROLE: analytic });
    const owner = new pg.Client({ connectionString: url });
    await owner.connect();
    try {
      await expect(setupDatabase(config, { migrate: false })).rejects.toThrow(
        `the database has no role ${analytic} (svc.datasource.analytic-role), which the analytic chat's SQL runs as: run "create role ${analytic} nologin; grant ${analytic} to svc_app" as an administrator (docs/operations.md, "Starting and stopping")`,
      );
      await owner.query(`create role ${analytic} nologin`);
      await expect(setupDatabase(config, { migrate: false })).rejects.toThrow(
        `the application role svc_app may not take the role ${analytic} (svc.datasource.analytic-role): run "grant ${analytic} to svc_app" as an administrator (docs/operations.md, "Starting and stopping")`,
      );
      await owner.query(`grant ${analytic} to svc_app`);
      const setup = await setupDatabase(config, { migrate: false });
      expect(setup.db.analyticRole).toBe(analytic);
      await setup.close();
    } finally {
      await owner.query(`drop role if exists ${analytic}`);
      await owner.end();
    }
  });

  it("a database an older hub migrated: the migration takes set_config from the analytic role (a superuser owner), the application and worker roles keep it, and a tenant's transaction still sets its tenant", async () => {
    const { url, owner } = await migratedWithOwner();
    try {
      // As PostgreSQL makes it, and as the database of a hub before this one was.
      await owner.query('grant execute on function pg_catalog.set_config(text, text, boolean) to public');
      const config = Config.load({ env: { SVC_CONFIG: '/dev/null', SVC_DATASOURCE_URL: url } });
      for (let start = 1; start <= 2; start++) {
        const warnings = await startWarnings(config, { migrate: true }, async (setup) => {
          expect(await setConfigRights(owner)).toEqual({ [TEST_ROLES.analytic]: false, [TEST_ROLES.app]: true, [TEST_ROLES.worker]: true, public: false });
          const tenant = await setup.db.withTenant(1, (tx) => tx.query<{ t: string }>("select current_setting('svc.tenant_id') as t"));
          expect(tenant.rows).toEqual([{ t: '1' }]);
          const worker = await setup.db.crossTenantQuery<{ s: string }>('test', "select set_config('statement_timeout', '5s', true) as s");
          expect(worker.rows).toEqual([{ s: '5s' }]);
        });
        expect(warnings.filter((m) => /set_config/.test(m))).toEqual([]);
      }
    } finally {
      await owner.end();
    }
  });

  it("roles an administrator made, set_config still PUBLIC's: the start warns naming what to run, and is quiet once it ran; a role of the hub without it is refused", async () => {
    const { url, owner } = await migratedWithOwner();
    const config = adminRolesConfig(url);
    const warnings = async () => (await startWarnings(config, { migrate: false })).filter((m) => /set_config/.test(m));
    try {
      await owner.query('grant execute on function pg_catalog.set_config(text, text, boolean) to public');
      // Was: nothing said; the analytic role could call set_config.
      const ownerRole = decodeURIComponent(new URL(url).username);
      const statements = `begin; grant execute on function pg_catalog.set_config(text, text, boolean) to ${ownerRole}, svc_app, svc_worker; revoke execute on function pg_catalog.set_config(text, text, boolean) from public, svc_analytic; commit`;
      expect(await warnings()).toEqual([
        `the analytic role svc_analytic may call set_config, with which SQL of the analytic chat that got past its guards could take another tenant's rows or the application role back: run "${statements}" in the hub's database as a superuser (docs/operations.md, "Starting and stopping")`,
      ]);
      await owner.query(statements);
      expect(await warnings()).toEqual([]);
      expect(await setConfigRights(owner)).toEqual({ [TEST_ROLES.analytic]: false, [TEST_ROLES.app]: true, [TEST_ROLES.worker]: true, public: false });
      // Half of it done: the worker role left without it would fail every background transaction.
      await owner.query('revoke execute on function pg_catalog.set_config(text, text, boolean) from svc_worker');
      await expect(setupDatabase(config, { migrate: false })).rejects.toThrow(
        `the role svc_worker may not call set_config, with which the hub sets each transaction's tenant: run "grant execute on function pg_catalog.set_config(text, text, boolean) to svc_worker" in the hub's database as a superuser (docs/operations.md, "Starting and stopping")`,
      );
    } finally {
      await owner.end();
    }
  });

  it('the application role unable to set temp_file_limit: the start warns once naming the grant and the setup says it is not settable; a migration as a superuser grants it', async () => {
    // Roles of this test's own: a parameter's grant is the server's, and another test file migrating a
    // database meanwhile (as a superuser) grants it again to the shared test roles.
    const suffix = randomBytes(4).toString('hex');
    const roles = { app: `svc_app_${suffix}`, worker: `svc_worker_${suffix}`, analytic: `svc_analytic_${suffix}` };
    const { url, owner } = await migratedWithOwner(roles);
    const config = adminRolesConfig(url, { SVC_DATASOURCE_APP_ROLE: roles.app, SVC_DATASOURCE_WORKER_ROLE: roles.worker, SVC_DATASOURCE_ANALYTIC_ROLE: roles.analytic }, roles);
    let settable: boolean[] = [];
    const warnings = async () => (await startWarnings(config, { migrate: false }, async (setup) => void settable.push(setup.tempFileLimitSettable))).filter((m) => /temp_file_limit/.test(m));
    try {
      // Taken back for this test, given back below (by the migration, as a superuser owner).
      await owner.query(`revoke set on parameter temp_file_limit from ${roles.app}`);
      expect(await warnings()).toEqual([
        `the application role ${roles.app} may not set temp_file_limit, so analytic chat queries run without svc.analytic.temp-file-limit: a sort or hash of one query may fill the database server's disk with temporary files up to the server's own temp_file_limit (none by default). On PostgreSQL 15 or later run "grant set on parameter temp_file_limit to ${roles.app}" in the hub's database as a superuser (docs/analytic-guards.md, "Resources of one statement")`,
      ]);
      expect(settable).toEqual([false]);
      await migrate(url, roles);
      settable = [];
      expect(await warnings()).toEqual([]);
      expect(settable).toEqual([true]);
    } finally {
      await owner.end();
    }
  });

  it('svc.datasource.idle-timeout: a pool closes a connection left unused that long (default 60 s, not pg-pool\'s 10 s)', async () => {
    const { url, owner } = await migratedWithOwner();
    try {
      const short = await setupDatabase(Config.load({ env: { SVC_CONFIG: '/dev/null', SVC_DATASOURCE_URL: url, SVC_DATASOURCE_IDLE_TIMEOUT: '200ms' } }), { migrate: false });
      try {
        for (const pool of [short.db.app, short.db.worker]) {
          const removed = new Promise<void>((resolve) => pool.once('remove', () => resolve()));
          const { rows } = await pool.query<{ pid: number }>('select pg_backend_pid() as pid');
          // Was: kept for pg-pool's 10 s whatever the setting (the test's own time limit is 5 s).
          await removed;
          await until('the backend gone', async () => (await owner.query('select 1 from pg_stat_activity where pid = $1', [rows[0]!.pid])).rowCount === 0, { everyMs: 10 });
        }
      } finally {
        await short.close();
      }
      const unset = await setupDatabase(Config.load({ env: { SVC_CONFIG: '/dev/null', SVC_DATASOURCE_URL: url } }), { migrate: false });
      try {
        // The default, read where pg-pool reads it (a minute cannot be waited for here).
        expect([unset.db.app, unset.db.worker].map((pool) => (pool as unknown as { options: { idleTimeoutMillis: number } }).options.idleTimeoutMillis)).toEqual([60_000, 60_000]);
      } finally {
        await unset.close();
      }
    } finally {
      await owner.end();
    }
  }, 5_000);

  it('svc.migrate.on-start false with migrations pending: the start says so, naming the schemas', async () => {
    const { url, owner } = await migratedWithOwner();
    // One not yet applied: as if this hub's build had one more than the database.
    await owner.query(`delete from public.svc_schema_history where schema = 'core' and version = (select max(version) from public.svc_schema_history where schema = 'core')`);
    await owner.end();
    const config = Config.load({ env: { SVC_CONFIG: '/dev/null', SVC_DATASOURCE_URL: url, SVC_MIGRATE_ON_START: 'false' } });
    // Was: nothing at start (only readiness, 503, said why).
    expect(await startWarnings(config, { migrate: false })).toContain(
      'svc.migrate.on-start is false and migrations are pending (core: 1): readiness answers 503, and requests that need them fail, until svc-hub migrate applies them',
    );
  });
});

/** Whether each of the test roles, and PUBLIC, may call set_config in the database of `owner`. */
async function setConfigRights(owner: pg.Client): Promise<Record<string, boolean>> {
  const { rows } = await owner.query<{ rolname: string; may: boolean }>(
    `select rolname, has_function_privilege(oid, 'pg_catalog.set_config(text, text, boolean)', 'execute') as may from pg_roles where rolname = any($1)
     union all select 'public', exists (select 1 from pg_proc p, aclexplode(p.proacl) a where p.oid = 'pg_catalog.set_config(text, text, boolean)'::regprocedure and a.grantee = 0 and a.privilege_type = 'EXECUTE')`,
    [[TEST_ROLES.app, TEST_ROLES.worker, TEST_ROLES.analytic]],
  );
  return Object.fromEntries(rows.map((r) => [r.rolname, r.may]));
}

/** A new migrated test database and a connected owner client of it (the caller ends it). */
async function migratedWithOwner(roles: RoleNames = TEST_ROLES): Promise<{ url: string; owner: pg.Client }> {
  const url = await createTestDatabase();
  await migrate(url, roles);
  const owner = new pg.Client({ connectionString: url });
  await owner.connect();
  return { url, owner };
}

/** The warnings a start logs (`during` runs while it is up), the start closed again. */
async function startWarnings(config: Config, options: { migrate: boolean }, during?: (setup: DatabaseSetup) => Promise<void>): Promise<string[]> {
  const logs = captureLogs('warn');
  try {
    const setup = await setupDatabase(config, options);
    try {
      await during?.(setup);
    } finally {
      await setup.close();
    }
  } finally {
    logs.restore();
  }
  return logs.lines().map((l) => String(l.msg));
}

/** A start on roles an administrator made (the test roles, through their own URLs), migrations not applied. */
function adminRolesConfig(url: string, env: Record<string, string> = {}, roles: RoleNames = TEST_ROLES): Config {
  return Config.load({
    env: {
      SVC_CONFIG: '/dev/null',
      SVC_DATASOURCE_URL: url,
      SVC_DATASOURCE_APP_URL: roleUrl(url, roles.app),
      SVC_DATASOURCE_WORKER_URL: roleUrl(url, roles.worker),
      SVC_MIGRATE_ON_START: 'false',
      ...env,
    },
  });
}
