import { describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { Config } from '../config/config.js';
import { migrate } from '../db/migrations.js';
import { createTestDatabase, TEST_ROLES } from '../../test/harness/database.js';
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
});
