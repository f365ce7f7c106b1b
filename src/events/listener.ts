import type pg from 'pg';
import { CLOSE_WAIT_MS, endClient, ownClient, startInterrupt } from '../db/pool.js';
import { loggableMessage } from '../observability/database-errors.js';
import { logger } from '../observability/logger.js';

/** The bound on the listener's connect and its LISTEN (as the leadership's connection has). */
export const LISTENER_CONNECT_TIMEOUT_MS = 5_000;
/** The first wait before a reconnect, doubled after each failure up to RECONNECT_MAX_MS. */
export const RECONNECT_FIRST_MS = 1_000;
export const RECONNECT_MAX_MS = 30_000;

/**
 * One LISTEN connection per process on channel `svc_outbox`: an outbox insert wakes every
 * registered consumer at commit. It reconnects after a failure; the consumers' sweeps cover the gap.
 * A connect (and its LISTEN) is bounded by LISTENER_CONNECT_TIMEOUT_MS: one to a database that
 * accepts the connection and answers nothing fails and is tried again, after a wait that doubles
 * with each failure (from RECONNECT_FIRST_MS up to RECONNECT_MAX_MS, back to the first once
 * connected), rather than holding the listener, and the wake-ups, for ever.
 */
export class OutboxListener {
  private client: pg.Client | undefined;
  /** The connection being opened (cut by stop()). */
  private connecting: pg.Client | undefined;
  private readonly wakers = new Set<() => void>();
  private stopped = false;
  private retry: NodeJS.Timeout | undefined;
  private backoff = RECONNECT_FIRST_MS;

  constructor(
    private readonly url: string,
    private readonly connectTimeoutMs = LISTENER_CONNECT_TIMEOUT_MS,
    /** How long closing its connection waits before cutting it (`svc.datasource.close-timeout`). */
    private readonly closeTimeoutMs = CLOSE_WAIT_MS,
  ) {}

  onEvent(wake: () => void): () => void {
    this.wakers.add(wake);
    return () => this.wakers.delete(wake);
  }

  /** Connected and listening. */
  listening(): boolean {
    return this.client !== undefined;
  }

  async start(): Promise<void> {
    this.stopped = false;
    await this.connect();
  }

  private async connect(): Promise<void> {
    // TCP keepalive (the pools', KEEPALIVE): a connection that died without a word (a NAT or a failover that forgot it) is
    // noticed by the kernel's probes after KEEPALIVE_IDLE_MS of silence instead of never (it only waits: no query would find out).
    const client = ownClient({
      connectionString: this.url,
      application_name: 'svc-hub outbox listener',
      connectionTimeoutMillis: this.connectTimeoutMs,
      query_timeout: this.connectTimeoutMs,
    });
    client.on('notification', () => {
      for (const wake of this.wakers) wake();
    });
    client.on('error', (err) => {
      // Only the connection in use: one given up already (a failed connect) has been replaced.
      if (client !== this.client) return;
      logger().warn({ err: loggableMessage(err) }, 'outbox listener lost its connection; reconnecting');
      this.reconnectLater();
    });
    this.connecting = client;
    try {
      await client.connect();
      await client.query('listen svc_outbox');
      if (this.stopped) {
        // Stopped while connecting: this connection is not kept.
        await endClient(client, this.closeTimeoutMs);
        return;
      }
      this.client = client;
      this.backoff = RECONNECT_FIRST_MS;
    } catch (err) {
      if (this.stopped) return;
      // Cut by a signal during the start (src/db/pool.ts): the start ends, saying so itself, and stops this listener.
      if (startInterrupt()?.aborted) logger().debug({ err: loggableMessage(err) }, "outbox listener's connect cut by the start's interruption");
      else logger().warn({ err: loggableMessage(err) }, `outbox listener could not connect; retrying in ${this.backoff} ms`);
      void endClient(client, this.closeTimeoutMs).catch(() => undefined);
      this.reconnectLater();
    } finally {
      if (this.connecting === client) this.connecting = undefined;
    }
  }

  private reconnectLater(): void {
    const old = this.client;
    this.client = undefined;
    if (old) void endClient(old, this.closeTimeoutMs).catch(() => undefined);
    if (this.stopped || this.retry) return;
    const wait = this.backoff;
    this.backoff = Math.min(this.backoff * 2, RECONNECT_MAX_MS);
    this.retry = setTimeout(() => {
      this.retry = undefined;
      if (!this.stopped) void this.connect();
    }, wait);
    this.retry.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.retry) clearTimeout(this.retry);
    this.retry = undefined;
    // A connect under way is cut (its socket destroyed), not waited for: its connect fails at once.
    this.connecting?.connection.stream.destroy();
    this.connecting = undefined;
    const client = this.client;
    this.client = undefined;
    // Bounded: a database that does not answer would hold the hub's stop for ever.
    if (client) await endClient(client, this.closeTimeoutMs);
  }
}
