import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { captureLogs } from '../test/harness/log-capture.js';
import { type MigratedDatabase, migratedDatabase } from '../test/harness/database.js';
import { testConfig } from '../test/harness/hub.js';
import { until } from '../test/harness/until.js';
import { ClockRunner } from '../src/clock/clock.js';
import type { Config } from '../src/config/config.js';
import { roleUrl } from '../src/db/roles.js';
import { AdvisoryLockElector, Leadership } from '../src/dispatch/leader.js';
import { loadCatalog } from '../src/events/catalog.js';
import { OutboxConsumer } from '../src/events/consumer.js';
import { EventWriter } from '../src/events/outbox.js';
import { scheduleHousekeeping } from './housekeeping.js';

/**
 * The background roles' housekeeping with two dispatch processes on one database (each its clocks
 * and leadership, as cmd/compose.ts starts them): the daily purges run in the leader only, the
 * lagging-consumer warning is logged once, nothing runs at an election, and after a leader change
 * the new leader runs the next purge. They used to run in every background process: with N
 * replicas, N purges a day and N warnings.
 */

const DAILY = [
  'outbox-retention',
  'audit-retention',
  'schedule-slot-retention',
  'webhook-journal-retention',
  'connector-dead-letter-retention',
  'connector-run-retention',
  'export-run-retention',
  'inbox-retention',
  'email-send-claim-retention',
];
const PURGED = [
  'outbox retention purge',
  'audit retention purge',
  'schedule slot retention purge',
  'webhook journal retention purge',
  'connector dead letter retention purge',
  'connector run retention purge',
  'export run retention purge',
  'inbox retention purge',
  'e-mail send claim retention purge',
];

let t: MigratedDatabase;
let config: Config;

beforeAll(async () => {
  t = await migratedDatabase({ 301: 'a' });
  config = await testConfig({ 'svc.datasource.url': t.ownerUrl });
  // A cursor two days behind: the outbox purge warns of it.
  await new OutboxConsumer(t.db, 'test-stale').startAtHead();
  await t.db.withTenant(301, (tx) => new EventWriter(loadCatalog()).emit(tx, 'org.updated', { orgId: 1, tenantId: 301 }));
  await t.owner.query(`update events.outbox set created_at = now() - interval '2 days'`);
});

afterAll(async () => {
  await t?.close();
});

async function dispatcher() {
  const leadership = new Leadership(new AdvisoryLockElector(roleUrl(t.ownerUrl, 'svc_worker'), 'test:housekeeping'), { checkEvery: 100 });
  const clock = new ClockRunner();
  scheduleHousekeeping(clock, leadership.gate(clock), { db: t.db, config });
  clock.start();
  await leadership.start();
  return { leadership, clock };
}

describe('housekeeping with two dispatch processes', () => {
  it('runs each daily purge and its warning once, in the leader, not at an election, and in the new leader after a change', async () => {
    const logs = captureLogs('info');
    const a = await dispatcher();
    const b = await dispatcher();
    try {
      expect([a.leadership.isLeader(), b.leadership.isLeader()]).toEqual([true, false]);
      // Becoming the leader ran none of them (a restart or a leader change is not a purge time).
      for (const job of DAILY) expect(a.clock.stats(job).runs).toBe(0);
      const count = (msg: string) => logs.lines().filter((l) => l.msg === msg).length;
      const warnings = () => logs.lines().filter((l) => String(l.msg).startsWith('outbox consumers behind by more than')).length;

      // The daily time comes in both processes.
      for (const job of DAILY) await Promise.all([a.clock.trigger(job), b.clock.trigger(job)]);
      expect(PURGED.map(count)).toEqual(PURGED.map(() => 1));
      expect(warnings()).toBe(1);
      // The lag gauge is set in every background process.
      await b.clock.trigger('outbox-consumer-lag');
      expect(b.clock.stats('outbox-consumer-lag').failures).toBe(0);

      // The leader stops: the other one leads, and runs the next purges (and only it).
      await a.leadership.stop();
      await until('b to lead', () => b.leadership.isLeader());
      for (const job of DAILY) expect(b.clock.stats(job).runs).toBe(1);
      for (const job of DAILY) await Promise.all([a.clock.trigger(job), b.clock.trigger(job)]);
      expect(PURGED.map(count)).toEqual(PURGED.map(() => 2));
      expect(warnings()).toBe(2);
    } finally {
      logs.restore();
      for (const x of [a, b]) {
        await x.clock.stop();
        await x.leadership.stop();
      }
    }
  });
});
