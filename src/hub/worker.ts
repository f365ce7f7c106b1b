import type { Database, Tx } from '../db/database.js';
import { patternsMatch } from '../events/subscribers.js';
import { logger } from '../observability/logger.js';
import { UnsealError } from '../platform/secrets/crypto.js';
import { closeRow, takeLease, writeBack } from './journal.js';
import { type AttemptOutcome, CLOSED_REASON } from './model.js';
import type { AttemptPool } from './pool.js';
import { openIntegrationSecret } from './secret.js';
import type { WebhookSender } from './sender.js';
import { deliveryRequest } from './signing.js';

/**
 * Makes delivery attempts. Every attempt works on a row this worker holds under a lease (a token
 * written when the row was inserted or claimed): it renews the lease and reads the row with its
 * integration in one short transaction, sends with no transaction open, and writes the outcome
 * back in another. A deleted integration, or for event deliveries a disabled or no longer matching
 * one, closes the row instead (spec 1 Errors: the closing reason). A worker that dies mid-attempt
 * writes nothing back: its lease runs out and the retry sweep claims the row again.
 */

export interface WorkerOptions {
  db: Database;
  /** The master key integration secrets are sealed with. */
  key: Buffer;
  sender: WebhookSender;
  pool: AttemptPool;
  leaseMs: number;
}

export type AttemptResult = { kind: 'attempted'; outcome: AttemptOutcome; attempts: number } | { kind: 'closed' } | { kind: 'lost' };

export class DeliveryWorker {
  private stopping = false;
  private readonly abort = new AbortController();
  private readonly running = new Set<Promise<unknown>>();

  /**
   * Single statements in autocommit as the worker role: each step of an attempt is one statement
   * (renew the lease and read, close, write back), so no transaction needs opening around it.
   */
  private readonly direct: Tx;

  constructor(private readonly o: WorkerOptions) {
    this.direct = { tenantId: undefined, query: (text, values) => o.db.worker.query(text, values as unknown[]) };
  }

  /** Queues an attempt; false when the integration's queue is full (the row waits for its lease to run out and the retry sweep). */
  submit(integrationId: number, deliveryId: number, token: string): boolean {
    if (this.stopping) return false;
    return this.o.pool.offer(integrationId, this.job(deliveryId, token));
  }

  /** Like `submit`, waiting a moment for room when the integration's queue is full and not stalled. */
  async submitWait(integrationId: number, deliveryId: number, token: string, waitMs: number): Promise<boolean> {
    if (this.stopping) return false;
    return this.o.pool.offerWait(integrationId, this.job(deliveryId, token), waitMs);
  }

  private job(deliveryId: number, token: string): () => Promise<void> {
    return async () => {
      try {
        await this.attempt(deliveryId, token);
      } catch (err) {
        // A database failure: the row keeps its lease and comes back to the retry sweep.
        if (!this.stopping) logger().error({ err, deliveryId }, 'delivery attempt failed to run; the retry sweep takes it up after its lease');
      }
    };
  }

  /** One attempt now, outside the pool (the test operation waits for it). */
  attempt(deliveryId: number, token: string): Promise<AttemptResult> {
    const run = this.run(deliveryId, token);
    this.running.add(run);
    void run.finally(() => this.running.delete(run)).catch(() => undefined);
    return run;
  }

  private async run(id: number, token: string): Promise<AttemptResult> {
    const row = await takeLease(this.direct, id, token, this.o.leaseMs);
    if (!row) return { kind: 'lost' };
    const log = logger().child({ tenant: String(row.tenant_id), integrationId: row.integration_id, deliveryId: id, eventType: row.event_type });
    const gone = row.deleted || (row.kind === 'event' && (!row.enabled || !patternsMatch(row.event_types, row.event_type)));
    if (gone) {
      await closeRow(this.direct, id, token, CLOSED_REASON);
      log.info('delivery closed: the integration was deleted, disabled or no longer matches');
      return { kind: 'closed' };
    }
    let outcome: AttemptOutcome;
    let secret: string | undefined;
    let unsealFailure: string | undefined;
    try {
      secret = openIntegrationSecret(this.o.key, row.tenant_id, row.integration_id, row);
    } catch (err) {
      if (!(err instanceof UnsealError)) throw err;
      unsealFailure = 'the integration secret cannot be decrypted (was svc.secret.master-key changed?)';
    }
    const request = unsealFailure
      ? { fault: unsealFailure }
      : deliveryRequest({
          eventType: row.event_type,
          eventId: row.event_id,
          deliveryId: id,
          body: row.body,
          authMode: row.auth_mode,
          secret,
          standardWebhooks: row.standard_webhooks,
        });
    if ('fault' in request) {
      outcome = { ok: false, httpStatus: null, responseBody: null, error: request.fault, durationMs: 0, attemptedAt: new Date() };
    } else {
      outcome = await this.o.sender.send(row.target_url, request.headers, row.body, this.abort.signal);
      // Stopping: the lease brings the row back to a live process; record nothing.
      if (this.stopping && !outcome.ok && outcome.httpStatus === null) return { kind: 'lost' };
    }
    const attempts = await writeBack(this.direct, id, token, outcome);
    if (outcome.ok) log.debug({ status: outcome.httpStatus, ms: outcome.durationMs }, 'delivered');
    else log.info({ status: outcome.httpStatus, error: outcome.error, attempts }, 'delivery attempt failed');
    return { kind: 'attempted', outcome, attempts: attempts ?? row.attempts + 1 };
  }

  /** Queued attempts are dropped, running ones aborted; their rows come back when their leases run out. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.o.pool.clear();
    this.abort.abort(new Error('stopping'));
    await Promise.allSettled([...this.running]);
    await this.o.sender.close();
  }
}
