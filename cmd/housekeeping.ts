import { purgeAudit } from '../src/audit/recorder.js';
import type { ClockRunner } from '../src/clock/clock.js';
import type { Config } from '../src/config/config.js';
import { purgeScheduleSlots } from '../src/connectors/scheduler.js';
import type { Database } from '../src/db/database.js';
import type { LeaderClock } from '../src/dispatch/leader.js';
import { consumerStates, outboxRetention, recordConsumerLags } from '../src/events/consumer.js';
import { logger } from '../src/observability/logger.js';
import { OUTBOX_KEPT_FOR_BATCHES } from '../src/webhooks/journal.js';
import { purgeJournal } from '../src/webhooks/retention.js';
import { purgeConnectorRuns, purgeDeadLetters } from '../src/connectors/runs/retention.js';
import { purgeExportRuns } from '../src/exports/runs/retention.js';
import { purgeInbox } from '../src/processes/inbox.js';
import { purgeSendClaims, SEND_CLAIMS_KEPT_DAYS } from '../src/email/retention.js';
import { HUB_CONSUMERS } from './outbox.js';

/**
 * The daily purges of the history tables (docs/operations.md, "How long history is kept"), each a
 * clock job of the leader at its time (UTC), its retention in days read from `setting` at each run
 * (or a fixed `days`). The dead letters go before the runs: a run an entry still names is kept.
 */
export const HISTORY_PURGES: ReadonlyArray<{
  job: string;
  dailyAt: string;
  /** The retention: a setting's days, read at each run, or a fixed number of days. */
  setting: string | { days: number };
  /** The log line's subject: `<what> retention purge`. */
  what: string;
  purge(db: Database, retentionDays: number): Promise<number>;
}> = [
  { job: 'webhook-journal-retention', dailyAt: '04:40', setting: 'svc.webhook.journal-retention-days', what: 'webhook journal', purge: purgeJournal },
  { job: 'audit-retention', dailyAt: '04:45', setting: 'svc.audit.retention-days', what: 'audit', purge: purgeAudit },
  { job: 'connector-dead-letter-retention', dailyAt: '04:50', setting: 'svc.connectors.dead-letter-retention-days', what: 'connector dead letter', purge: purgeDeadLetters },
  { job: 'connector-run-retention', dailyAt: '04:55', setting: 'svc.connectors.run-retention-days', what: 'connector run', purge: purgeConnectorRuns },
  { job: 'export-run-retention', dailyAt: '05:00', setting: 'svc.export.run-retention-days', what: 'export run', purge: purgeExportRuns },
  { job: 'inbox-retention', dailyAt: '05:05', setting: 'svc.process.inbox-retention-days', what: 'inbox', purge: purgeInbox },
  { job: 'email-send-claim-retention', dailyAt: '05:10', setting: { days: SEND_CLAIMS_KEPT_DAYS }, what: 'e-mail send claim', purge: purgeSendClaims },
];

/**
 * The background roles' housekeeping (spec 1 Clocks, UTC; docs/operations.md, "Roles of the
 * executable"). The daily purges run on the leader only (`leaderClocks`): each is one pass over the whole
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
      await outboxRetention(db, config.int('svc.events.retention-days'), Object.values(HUB_CONSUMERS), { keep: [OUTBOX_KEPT_FOR_BATCHES] });
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
  // The history tables' purges: each deletes what is over and older than its days (a setting's: 0 keeps all).
  for (const history of HISTORY_PURGES) {
    leaderClocks.schedule(
      history.job,
      { dailyAt: history.dailyAt },
      async () => {
        const days = typeof history.setting === 'string' ? config.int(history.setting) : history.setting.days;
        const purged = await history.purge(db, days);
        logger().info({ purged }, `${history.what} retention purge`);
      },
      { atElection: false },
    );
  }
}
