import type pg from 'pg';
import { endClient, ownClient } from '../db/pool.js';
import { loggableMessage } from '../observability/database-errors.js';
import { logger } from '../observability/logger.js';

/**
 * One LISTEN connection per process on channel `svc_outbox`: an outbox insert wakes every
 * registered consumer at commit. It reconnects after a failure; the consumers' sweeps cover the gap.
 */
export class OutboxListener {
  private client: pg.Client | undefined;
  private readonly wakers = new Set<() => void>();
  private stopped = false;
  private retry: NodeJS.Timeout | undefined;

  constructor(private readonly url: string) {}

  onEvent(wake: () => void): () => void {
    this.wakers.add(wake);
    return () => this.wakers.delete(wake);
  }

  async start(): Promise<void> {
    this.stopped = false;
    await this.connect();
  }

  private async connect(): Promise<void> {
    // TCP keepalive (the pools', KEEPALIVE): a connection that died without a word (a NAT or a failover that forgot it) is
    // noticed by the kernel's probes after KEEPALIVE_IDLE_MS of silence instead of never (it only waits: no query would find out).
    const client = ownClient({ connectionString: this.url, application_name: 'svc-hub outbox listener' });
    client.on('notification', () => {
      for (const wake of this.wakers) wake();
    });
    client.on('error', (err) => {
      logger().warn({ err: loggableMessage(err) }, 'outbox listener lost its connection; reconnecting');
      this.reconnectLater();
    });
    try {
      await client.connect();
      await client.query('listen svc_outbox');
      this.client = client;
    } catch (err) {
      logger().warn({ err: loggableMessage(err) }, 'outbox listener could not connect; retrying');
      await client.end().catch(() => undefined);
      this.reconnectLater();
    }
  }

  private reconnectLater(): void {
    const old = this.client;
    this.client = undefined;
    old?.end().catch(() => undefined);
    if (this.stopped || this.retry) return;
    this.retry = setTimeout(() => {
      this.retry = undefined;
      if (!this.stopped) void this.connect();
    }, 1000);
    this.retry.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.retry) clearTimeout(this.retry);
    const client = this.client;
    this.client = undefined;
    // Bounded: a database that does not answer would hold the hub's stop for ever.
    if (client) await endClient(client);
  }
}
