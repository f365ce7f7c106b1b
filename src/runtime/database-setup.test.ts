import { randomBytes } from 'node:crypto';
import { describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { Config } from '../config/config.js';
import { migrate } from '../db/migrations.js';
import { roleUrl } from '../db/roles.js';
import { createTestDatabase, TEST_ROLES } from '../../test/harness/database.js';
import { captureLogs } from '../../test/harness/log-capture.js';
import { until } from '../../test/harness/until.js';
import { setupDatabase } from './database-setup.js';

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

  it('roles an administrator made: a start without the analytic role, or without the application role able to take it, is refused saying what to run', async () => {
    const url = await createTestDatabase();
    await migrate(url, TEST_ROLES);
    // A name of this test's alone: roles are the server's, and other suites use svc_analytic.
    const analytic = `svc_analytic_${randomBytes(4).toString('hex')}`;
    const config = Config.load({
      env: {
        SVC_CONFIG: '/dev/null',
        SVC_DATASOURCE_URL: url,
        SVC_DATASOURCE_APP_URL: roleUrl(url, TEST_ROLES.app),
        SVC_DATASOURCE_WORKER_URL: roleUrl(url, TEST_ROLES.worker),
        SVC_DATASOURCE_ANALYTIC_ROLE: analytic,
        SVC_MIGRATE_ON_START: 'false',
      },
    });
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

  it('svc.migrate.on-start false with migrations pending: the start says so, naming the schemas', async () => {
    const url = await createTestDatabase();
    await migrate(url, TEST_ROLES);
    const owner = new pg.Client({ connectionString: url });
    await owner.connect();
    // One not yet applied: as if this hub's build had one more than the database.
    await owner.query(`delete from public.svc_schema_history where schema = 'core' and version = (select max(version) from public.svc_schema_history where schema = 'core')`);
    await owner.end();
    const config = Config.load({ env: { SVC_CONFIG: '/dev/null', SVC_DATASOURCE_URL: url, SVC_MIGRATE_ON_START: 'false' } });
    const logs = captureLogs('warn');
    try {
      const setup = await setupDatabase(config, { migrate: false });
      await setup.close();
    } finally {
      logs.restore();
    }
    // Was: nothing at start (only readiness, 503, said why).
    expect(logs.lines().map((l) => l.msg)).toContain(
      'svc.migrate.on-start is false and migrations are pending (core: 1): readiness answers 503, and requests that need them fail, until svc-hub migrate applies them',
    );
  });
});
