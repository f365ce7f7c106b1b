import type { Keys } from '../platform/secrets/crypto.js';
import type { Config } from '../config/config.js';
import type { Database } from '../db/database.js';
import { egressPolicy } from '../egress/config.js';
import type { EgressPolicy } from '../egress/policy.js';
import { type LoopClock, OutboxLoop } from '../dispatch/outbox-loop.js';
import type { Catalog } from '../events/catalog.js';
import type { OutboxListener } from '../events/listener.js';
import { WebhookConsumer } from './consumer.js';
import { SlotPool } from '../concurrency/slot-pool.js';
import { WebhookSender } from './sender.js';
import { IntegrationService } from './service.js';
import { DeliveryWorker } from './worker.js';

/**
 * The webhook area of one process, built from configuration: the integration service (every role
 * that serves the API: replays and tests are sent from there), and the webhook consumer and retry
 * sweep that the background roles start on a leader-gated clock.
 */
/** The webhook consumer's name: its cursor in events.consumer_cursors. */
export const WEBHOOK_CONSUMER = 'webhooks';

export interface WebhookServices {
  integrations: IntegrationService;
  worker: DeliveryWorker;
  consumer: WebhookConsumer;
  /** Registers the outbox consumer (`webhooks` cursor) and the retry sweep on `clock`. */
  start(clock: LoopClock, listener?: OutboxListener): Promise<void>;
  /** Stops wake-ups, drops queued attempts, aborts running ones (their leases bring them back). */
  stop(): Promise<void>;
}

/** Queued attempts per integration at most (beyond: left to the retry sweep). */
const QUEUE_PER_INTEGRATION = 1_000;
const CONSUMER_BATCH = 500;
const SWEEP_BATCH = 500;

export function createWebhookServices(config: Config, deps: { db: Database; catalog: Catalog; key: Keys; version: string; egress?: EgressPolicy }): WebhookServices {
  const leaseMs = config.duration('svc.webhook.lease');
  const egress = deps.egress ?? egressPolicy(config);
  const perIntegration = config.int('svc.webhook.concurrency-per-integration');
  const total = config.int('svc.webhook.concurrency');
  // Above the pool, no cap beyond the pool's.
  const perTenant = Math.min(config.int('svc.webhook.concurrency-per-tenant'), total);
  const sender = new WebhookSender({
    connectTimeoutMs: config.duration('svc.webhook.connect-timeout'),
    timeoutMs: config.duration('svc.webhook.timeout'),
    egress,
    userAgent: `svc-hub-webhooks/${deps.version}`,
  });
  const pool = new SlotPool(total, perIntegration, QUEUE_PER_INTEGRATION, perTenant);
  const worker = new DeliveryWorker({ db: deps.db, key: deps.key, sender, pool, leaseMs });
  const consumer = new WebhookConsumer({
    db: deps.db,
    worker,
    leaseMs,
    maxAttempts: config.int('svc.webhook.max-attempts'),
    perIntegrationClaim: perIntegration * 2,
    perTenantClaim: perTenant * 2,
    sweepBatch: SWEEP_BATCH,
    refillWaitMs: config.duration('svc.webhook.retry-every'),
    // Retries at least half a sweep apart, whatever the phase of the attempt before (docs/integrations.md).
    minGapMs: config.duration('svc.webhook.retry-every') / 2,
    // The next batch is recorded while this one's attempts wait for room: the pool keeps work.
    handOverAhead: true,
    // First attempts left to the sweep (their queue full for QUEUE_WAIT_MS) go once it has room, not
    // at the next sweep: a sweep is started (one under way is told by the consumer itself).
    onDeferred: () => void sweepClock?.trigger('webhook-retry'),
  });
  const integrations = new IntegrationService({
    db: deps.db,
    catalog: deps.catalog,
    worker,
    leaseMs,
    rules: { key: deps.key, egress },
  });
  const loop = new OutboxLoop(deps.db, {
    name: WEBHOOK_CONSUMER,
    every: config.duration('svc.webhook.sweep-every'),
    setAsideAfter: config.int('svc.events.set-aside-after'),
    batch: CONSUMER_BATCH,
    // The statement that matches the batch and records its batch row also moves the cursor past it.
    handleBatch: async (events, cursor) => {
      await consumer.handleBatch(events, cursor);
      return true;
    },
  });
  let started = false;
  /** The clock the retry sweep runs on, once started. */
  let sweepClock: LoopClock | undefined;
  return {
    integrations,
    worker,
    consumer,
    async start(clock, listener) {
      await loop.start(clock, listener);
      clock.schedule('webhook-retry', { every: config.duration('svc.webhook.retry-every') }, async () => {
        await consumer.sweep(() => clock.running());
      });
      sweepClock = clock;
      started = true;
    },
    async stop() {
      if (started) loop.stop();
      await worker.stop();
      // A batch's first attempts still being handed over (handOverAhead): those not queued give their leases back.
      await consumer.handedOver();
    },
  };
}
