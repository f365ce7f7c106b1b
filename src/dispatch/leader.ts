import type pg from 'pg';
import type { Cadence, ClockRunner } from '../clock/clock.js';
import { CLOSE_WAIT_MS, endClient, ownClient, startInterrupt } from '../db/pool.js';
import { loggableMessage } from '../observability/database-errors.js';
import { logger } from '../observability/logger.js';

/**
 * Leader election for the cursor consumers and sweeps (CONTRACTS.md section 6): they run in one
 * process at a time. The port is what any elector offers; outside Kubernetes a PostgreSQL advisory
 * lock plays the part (AdvisoryLockElector), in Kubernetes a `coordination.k8s.io/v1` Lease
 * (operator/lease.ts; cmd/leader.ts picks one).
 * `Leadership` drives an elector on a cadence and gates clock jobs so they tick only while this
 * process leads.
 */

/** The leader-election port. */
export interface LeaderElector {
  /** A name for logs (`postgres advisory lock svc-hub:dispatch`). */
  readonly description: string;
  /** Tries once to become the leader; true when this process leads now (also when it already did). */
  acquire(): Promise<boolean>;
  /** Confirms the leadership this process holds; false (and `onLost` listeners called) when it is gone. */
  renew(): Promise<boolean>;
  /** Gives the leadership up (on stop), so another process takes over at once. */
  release(): Promise<void>;
  isLeader(): boolean;
  /** Called when leadership is lost other than by `release` (connection or lease gone). Returns an unsubscribe. */
  onLost(listener: () => void): () => void;
  /**
   * Optional: the stop has begun (Leadership.stop, before it waits for the check under way): that
   * check may be cut at once, so that the release does not wait for it (a Lease's request to an API
   * server that does not answer).
   */
  stopping?(): void;
}

/** The bound on the advisory lock's connect and statements: no answer within it counts as lost. */
export const ELECTOR_TIMEOUT_MS = 5_000;

/**
 * A session-level advisory lock held on a dedicated connection: the lock lives exactly as long as
 * that session, so a process that dies (or whose connection dies) gives it up as soon as the server
 * notices; the others try again on their next check. A connection that stops answering within
 * `timeoutMs` counts as lost.
 */
export class AdvisoryLockElector implements LeaderElector {
  private client: pg.Client | undefined;
  private leader = false;
  private readonly listeners = new Set<() => void>();
  readonly description: string;

  constructor(
    private readonly url: string,
    private readonly key = 'svc-hub:dispatch',
    private readonly timeoutMs = ELECTOR_TIMEOUT_MS,
    /** How long closing its connection waits before cutting it (`svc.datasource.close-timeout`). */
    private readonly closeTimeoutMs = CLOSE_WAIT_MS,
  ) {
    this.description = `postgres advisory lock ${key}`;
  }

  isLeader(): boolean {
    return this.leader;
  }

  onLost(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  async acquire(): Promise<boolean> {
    if (this.leader) return this.renew();
    const client = await this.connection();
    const { rows } = await client.query<{ ok: boolean }>('select pg_try_advisory_lock(hashtext($1)) as ok', [this.key]);
    this.leader = rows[0]?.ok === true;
    return this.leader;
  }

  async renew(): Promise<boolean> {
    if (!this.leader) return false;
    try {
      const { rows } = await this.client!.query<{ held: boolean }>(
        `select exists (
           select 1 from pg_locks
            where locktype = 'advisory' and pid = pg_backend_pid() and granted and objsubid = 1
              and ((classid::bigint << 32) | objid::bigint) = hashtext($1)::bigint
         ) as held`,
        [this.key],
      );
      if (rows[0]?.held) return true;
      this.lost('the advisory lock is no longer held');
    } catch (err) {
      this.lost((err as Error).message);
    }
    return false;
  }

  async release(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    const wasLeader = this.leader;
    this.leader = false;
    if (!client) return;
    if (wasLeader) await client.query('select pg_advisory_unlock(hashtext($1))', [this.key]).catch(() => undefined);
    // Bounded (endClient: its socket cut after closeTimeoutMs): a plain end() waits for the server to close its
    // side, for ever on a database that does not answer, and the hub's stop with it.
    await endClient(client, this.closeTimeoutMs).catch(() => undefined);
  }

  private async connection(): Promise<pg.Client> {
    if (this.client) return this.client;
    // The pools' TCP keepalive (pool.ts: KEEPALIVE, first probe after 10 s of silence), not the OS default delay (two hours on Linux).
    // The connect bounded as the statements are: one to a database that accepts the connection and
    // answers nothing would hold the check, and the start or stop that waits for it, for ever.
    const client = ownClient({ connectionString: this.url, application_name: `svc-hub leader (${this.key})`, query_timeout: this.timeoutMs, connectionTimeoutMillis: this.timeoutMs });
    const onGone = (err?: Error) => {
      if (this.client !== client) return;
      this.client = undefined;
      client.end().catch(() => undefined);
      if (this.leader) this.lost(err?.message ?? 'connection closed');
    };
    client.on('error', onGone);
    client.on('end', () => onGone());
    try {
      await client.connect();
    } catch (err) {
      await client.end().catch(() => undefined);
      throw err;
    }
    this.client = client;
    return client;
  }

  private lost(reason: string): void {
    if (!this.leader) return;
    this.leader = false;
    const client = this.client;
    this.client = undefined;
    client?.end().catch(() => undefined);
    logger().warn({ reason }, `leadership lost (${this.description})`);
    for (const listener of this.listeners) listener();
  }
}

/** Clock jobs that tick only while this process leads (what OutboxLoop and the sweeps are given). */
export interface LeaderClock {
  /**
   * A job that runs on its cadence only while this process leads, and at once each time this
   * process becomes the leader (catching up what the outbox holds), unless `atElection` is false
   * (the daily purges: the new leader runs the next one at its time).
   */
  schedule(name: string, cadence: Cadence, task: () => Promise<void>, options?: { atElection?: boolean }): void;
  trigger(name: string): Promise<boolean>;
  /** The clock ticks and this process leads (a long job checks it to give up early). */
  running(): boolean;
}

interface LeadershipOptions {
  /** How often a follower tries to take over and the leader confirms it still leads. */
  checkEvery: number;
}

/**
 * Keeps trying to lead (at once, then every `checkEvery`), confirms leadership on the same cadence,
 * and runs the gated jobs only meanwhile: when this process becomes the leader every gated job runs
 * at once (catching up what the outbox holds), but those scheduled with `atElection: false`; when
 * it stops leading, gated ticks and wake-ups do nothing (a pass already running ends after the event or batch in hand; the
 * cursors and leases keep the work consistent).
 */
export class Leadership {
  private timer: NodeJS.Timeout | undefined;
  private readonly gated: Array<{ clock: ClockRunner; name: string }> = [];
  private stopped = false;
  private checking: Promise<void> | undefined;
  private readonly electedListeners = new Set<() => void>();

  constructor(
    readonly elector: LeaderElector,
    private readonly options: LeadershipOptions,
  ) {
    elector.onLost(() => {
      // Try again soon: a dropped connection (not a rival) should not cost a whole check period.
      if (!this.stopped) this.schedule(Math.min(1_000, this.options.checkEvery));
    });
  }

  isLeader(): boolean {
    return this.elector.isLeader();
  }

  /** Called each time this process becomes the leader. */
  onElected(listener: () => void): () => void {
    this.electedListeners.add(listener);
    return () => this.electedListeners.delete(listener);
  }

  /** A view of `clock` whose jobs run only while this process leads. */
  gate(clock: ClockRunner): LeaderClock {
    return {
      schedule: (name, cadence, task, options) => {
        if (options?.atElection !== false) this.gated.push({ clock, name });
        clock.schedule(name, cadence, async () => {
          if (this.elector.isLeader()) await task();
        });
      },
      trigger: (name) => (this.elector.isLeader() ? clock.trigger(name) : Promise.resolve(false)),
      running: () => clock.running() && this.elector.isLeader(),
    };
  }

  /** First attempt now (so a lone process leads before it returns), then on the cadence. */
  async start(): Promise<void> {
    this.stopped = false;
    await this.check();
    if (!this.stopped) this.schedule(this.options.checkEvery);
  }

  /**
   * No check begins any more; one under way is waited for, then the leadership is given up. A check
   * that wins the leadership while the stop waits for it neither calls the `onElected` listeners
   * nor runs the gated jobs: what stops has stopped its work already (the hub's clocks, the
   * operator's term), which would otherwise begin again, unawaited, after the leadership was given
   * up and while the process closes its database.
   */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.elector.stopping?.();
    await this.checking;
    await this.elector.release();
  }

  private schedule(delay: number): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.check().finally(() => {
        if (!this.stopped && !this.timer) this.schedule(this.options.checkEvery);
      });
    }, delay);
    this.timer.unref();
  }

  private check(): Promise<void> {
    this.checking ??= (async () => {
      try {
        if (this.elector.isLeader()) {
          await this.elector.renew();
          return;
        }
        if (await this.elector.acquire()) {
          // Won while stopping: given up again by stop(), which waits for this check.
          if (this.stopped) return;
          logger().info(`leadership acquired (${this.elector.description}): running the outbox consumers and sweeps`);
          for (const listener of this.electedListeners) listener();
          for (const { clock, name } of this.gated) void clock.trigger(name);
        }
      } catch (err) {
        // Cut by a signal during the start (src/db/pool.ts): the start ends, saying so itself.
        if (startInterrupt()?.aborted) logger().debug({ err: loggableMessage(err) }, `leader election cut by the start's interruption (${this.elector.description})`);
        else if (this.stopped) logger().debug({ err: loggableMessage(err) }, `leader election cut by the stop (${this.elector.description})`);
        else logger().warn({ err: loggableMessage(err) }, `leader election failed (${this.elector.description}); trying again`);
      }
    })().finally(() => {
      this.checking = undefined;
    });
    return this.checking;
  }
}
