import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase, TEST_ROLES } from '../../test/harness/database.js';
import { OutboxConsumer } from '../events/consumer.js';
import { EventWriter } from '../events/outbox.js';
import { loadCatalog } from '../events/catalog.js';
import { Config } from '../config/config.js';
import { setupDatabase, workerPlanCacheWarning } from '../runtime/database-setup.js';
import { captureLogs } from '../../test/harness/log-capture.js';
import { until } from '../../test/harness/until.js';
import { Database } from './database.js';
import { roleUrl, WORKER_PLAN_CACHE_MODE } from './roles.js';

/**
 * The worker role plans every statement for the moment (src/db/roles.ts, `WORKER_PLAN_CACHE_MODE`):
 * a named statement of an outbox consumer, run again and again while the outbox is nearly empty (a
 * new hub, before its first burst), never settles on a generic plan, which would scan the outbox
 * whole for every read once the burst has filled it. Its own database: the outbox starts empty.
 */

const writer = new EventWriter(loadCatalog());
let t: MigratedDatabase;

beforeAll(async () => {
  // One connection per pool: every named statement lives in the one session looked at. A server of its own:
  // transaction ids are the cluster's, so a transaction another suite holds open on the shared test server holds
  // outbox events back (the first three events too, which a read then found in the burst's place).
  t = await migratedDatabase({ 2: 'globex' }, 1, { ownServer: true });
});

afterAll(async () => {
  await t.close();
});

/** The worker session's prepared statements whose text contains `marker`, with how PostgreSQL planned them. */
async function planned(marker: string) {
  const { rows } = await t.db.crossTenantQuery<{ generic_plans: number; custom_plans: number }>(
    'test',
    'select generic_plans::int, custom_plans::int from pg_prepared_statements where strpos(statement, $1) > 0',
    [marker],
  );
  return rows;
}

describe('the worker role’s plan cache', () => {
  it('is set on the role the hub manages, for every session of it', async () => {
    const { rows } = await t.db.crossTenantQuery<{ mode: string; role: string }>('test', `select current_setting('plan_cache_mode') as mode, current_user as role`);
    expect(rows).toEqual([{ mode: WORKER_PLAN_CACHE_MODE, role: TEST_ROLES.worker }]);
    expect(await workerPlanCacheWarning(t.db)).toBeUndefined();
  });

  it('keeps an outbox consumer’s named read on plans made for the moment, however often it runs on a nearly empty outbox', async () => {
    for (let orgId = 1; orgId <= 3; orgId++) await t.db.withTenant(2, (tx) => writer.emit(tx, 'org.updated', { orgId, tenantId: 2 }));
    // The statistics of a new hub's outbox, as autovacuum leaves them after its first few events.
    await t.owner.query('analyze events.outbox, events.consumer_cursors');
    const consumer = new OutboxConsumer(t.db, 'plan-cache');
    for (let i = 0; i < 12; i++) await consumer.read(100);
    // Past the five executions after which PostgreSQL may keep a generic plan (the first read, with
    // no cursor row yet, reads twice): still none.
    const [before] = await planned('held_back');
    expect(before).toEqual({ generic_plans: 0, custom_plans: 13 });

    // The burst: the next read is planned for the outbox as it is now, so it reads by the index.
    await t.owner.query(`insert into events.outbox (tenant_id, type, payload) select 2, 'org.updated', '{}' from generate_series(1, 20000)`);
    // Read until it passes (a transaction open on the server holds it back until it ends).
    let reads = 0;
    const events = await until('the burst to be read', async () => {
      reads += 1;
      const read = await consumer.read(100);
      return read.events.length ? read.events : undefined;
    });
    expect(events).toHaveLength(100);
    // One more plan made for the moment per read, none generic (a held-back read plans the same statement).
    const after = await planned('held_back');
    expect(after.map((p) => p.generic_plans)).toEqual(after.map(() => 0));
    expect(after.reduce((sum, p) => sum + p.custom_plans, 0)).toBeGreaterThanOrEqual(13 + reads);
  });

  it('is warned about when a hub starts with a worker role made outside it that lacks it', async () => {
    const logs = captureLogs('warn');
    const app = roleUrl(t.ownerUrl, TEST_ROLES.app);
    const setup = await setupDatabase(
      Config.load({ env: {}, overrides: { 'svc.datasource.url': t.ownerUrl, 'svc.datasource.app-url': app, 'svc.datasource.worker-url': app } }),
      { migrate: false },
    );
    try {
      await until('the warning', () => logs.lines().some((l) => String(l.msg).startsWith(`the worker role ${TEST_ROLES.app} plans with plan_cache_mode = auto`)), {
        detail: () => logs.raw(),
      });
    } finally {
      logs.restore();
      await setup.close();
    }
  });

  it('is reported at start when a role managed outside the hub lacks it', async () => {
    // The application role has no such setting: as the worker's connection, it is what a role made by an operator would be.
    const unset = new Database({ appUrl: roleUrl(t.ownerUrl, TEST_ROLES.app), workerUrl: roleUrl(t.ownerUrl, TEST_ROLES.app), poolSize: 1 });
    try {
      expect(await workerPlanCacheWarning(unset)).toBe(
        `the worker role ${TEST_ROLES.app} plans with plan_cache_mode = auto: run "alter role ${TEST_ROLES.app} set plan_cache_mode = force_custom_plan" as an administrator (docs/operations.md, "Starting and stopping"); without it an outbox consumer's read may keep scanning the outbox after a burst`,
      );
    } finally {
      await unset.close();
    }
  });
});
