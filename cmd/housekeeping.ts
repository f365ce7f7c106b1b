import { purgeAudit } from '../src/audit/recorder.js';
import type { ClockRunner } from '../src/clock/clock.js';
import type { Config } from '../src/config/config.js';
import { purgeScheduleSlots } from '../src/connectors/scheduler.js';
import type { Database } from '../src/db/database.js';
import type { LeaderClock } from '../src/dispatch/leader.js';
import { consumerStates, outboxRetention, recordConsumerLags } from '../src/events/consumer.js';
import { logger } from '../src/observability/logger.js';
import { purgeJournal } from '../src/webhooks/retention.js';
import { HUB_CONSUMERS } from './outbox.js';

/**
 * The background roles' housekeeping (spec 1 Clocks, UTC; docs/operations.md, "Which process does
 * what"). The daily purges run on the leader only (`leaderClocks`): each is one pass over the whole
 * database, and the outbox purge's warning about lagging consumers would otherwise be logged once
 * per dispatch replica. They are not run at an election (a leader change, every restart), only at
 * their time: whichever process leads then runs it. The lag gauge is set every minute in every
 * background process (`clocks`), so each one's /q/metrics shows it; it warns of nothing.
 */
export function scheduleHousekeeping(clocks: ClockRunner, leaderClocks: LeaderClock, deps: { db: Database; config: Config }): void {
  const { db, config } = deps;
  leaderClocks.schedule(
    'outbox-retention',
    { dailyAt: '04:30' },
    async () => {
      // The purge, then one warning naming the consumers that hold it back (docs/operations.md).
      await outboxRetention(db, config.int('svc.events.retention-days'), Object.values(HUB_CONSUMERS));
    },
    { atElection: false },
  );
  clocks.schedule('outbox-consumer-lag', { every: 60_000 }, async () => {
    recordConsumerLags(await consumerStates(db));
  });
  // Wherever slots are claimed (the in-process scheduler, or `svc-hub run --scheduled` CronJobs): one purge a day.
  leaderClocks.schedule(
    'schedule-slot-retention',
    { dailyAt: '04:15' },
    async () => {
      const purged = await purgeScheduleSlots(db);
      logger().info({ purged }, 'schedule slot retention purge');
    },
    { atElection: false },
  );
  leaderClocks.schedule(
    'webhook-journal-retention',
    { dailyAt: '04:40' },
    async () => {
      const purged = await purgeJournal(db, config.int('svc.webhook.journal-retention-days'));
      logger().info({ purged }, 'webhook journal retention purge');
    },
    { atElection: false },
  );
  leaderClocks.schedule(
    'audit-retention',
    { dailyAt: '04:45' },
    async () => {
      const purged = await purgeAudit(db, config.int('svc.audit.retention-days'));
      logger().info({ purged }, 'audit retention purge');
    },
    { atElection: false },
  );
}
