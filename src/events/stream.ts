import type { Caller } from '../admin/scope-access.js';
import { ClockRunner } from '../clock/clock.js';
import type { Database } from '../db/database.js';
import { logger } from '../observability/logger.js';
import { after, headPosition, type OutboxEvent, type Position, positionOf, readAfter, START } from './outbox.js';
import { type HeldObjects, streamHeld } from './stream-scopes.js';
import { matchesGlob } from './topics.js';

/**
 * The live event stream's source: one poller for every subscriber of the process. It reads the
 * outbox across tenants (every `pollEvery`, at once when NOTIFY says something was written, at most
 * `batch` rows a read) and fans each event out to the subscribers of that event's tenant whose
 * topics match. A subscriber resuming after an event id first catches up from the table, then joins
 * the live flow; nothing is delivered twice or skipped.
 */

interface StreamOptions {
  pollEvery: number;
  batch: number;
  /**
   * Live events one subscriber may hold while it catches up (default 10,000), and their bytes
   * (`catchUpQueueBytes`, default 16 MiB: an event's payload may hold tens of kilobytes, a decision's
   * message alone 16,384 characters). Beyond either they are dropped and the catch-up reads them
   * from the table instead: memory stays bounded, nothing is lost.
   */
  catchUpQueue?: number;
  catchUpQueueBytes?: number;
}

/** Event types whose verdict one subscription keeps (Subscription.wants). */
const MAX_VERDICTS = 1024;

/** The reason a subscription ends with when the stream stops (the hub stopping). */
export const SERVER_STOPPING = 'server stopping';

/** An event's size as a subscriber's queue counts it (its type and JSON payload), worked out once per event. */
const sizes = new WeakMap<OutboxEvent, number>();
function sizeOf(event: OutboxEvent): number {
  let size = sizes.get(event);
  if (size === undefined) {
    size = event.type.length + JSON.stringify(event.payload).length;
    sizes.set(event, size);
  }
  return size;
}

interface SubscribeOptions {
  tenantId: number;
  /** `*` globs against the full type; empty = everything. */
  topics: string[];
  /** Resume after this outbox id (SSE Last-Event-ID). */
  afterId?: number;
  /** Receives each event; returns false when the consumer cannot take more. */
  deliver: (event: OutboxEvent) => boolean;
  /**
   * While catching up: resolves when a consumer whose `deliver` said false can take more, so a
   * resume of any length is paced by the client instead of ended. Without it (and in the live flow,
   * which cannot wait for one subscriber) a full consumer ends the subscription ('client too slow').
   */
  room?: () => Promise<void>;
  /**
   * With `room`: how long the catch-up waits for a consumer that takes nothing (with `waiting`:
   * whose waiting bytes did not go down; without: that made no room) before it ends the
   * subscription ('client too slow'), as the live flow ends one; the client resumes with
   * Last-Event-ID and loses nothing. Without it the catch-up waits as long as it takes.
   */
  stallMs?: number;
  /**
   * Bytes still waiting for the live client, and how many it may have waiting when a poll starts
   * delivering. With them the live flow judges a client once per poll, on what earlier polls left
   * (a client that reads promptly is never ended for one poll's burst, however large); without
   * them a `deliver` that says false ends it at once.
   */
  waiting?: () => number;
  maxWaiting?: number;
  /**
   * A subscription without `afterId`: told the id of the outbox position it starts after, before
   * anything is delivered, so that the client can resume from there (SSE `id:`) should it lose
   * the connection before its first event.
   */
  onStart?: (afterId: number) => void;
  /** Called once when the subscription ends for any reason other than close() by its owner. */
  onEnd?: (reason: string) => void;
  /**
   * The client is gone: the subscription closes at once, a catch-up under way included (it reads
   * and delivers nothing more).
   */
  signal?: AbortSignal;
}

class Subscription {
  position: Position = START;
  live = false;
  closed = false;
  /** Settles when the catch-up after `afterId` is over (live, ended or closed); never rejects. */
  caughtUp: Promise<void> = Promise.resolve();
  /** How many times live events queued during the catch-up were dropped (the table has them). */
  drops = 0;
  private pending: OutboxEvent[] = [];
  /** sizeOf the pending events, together. */
  private pendingBytes = 0;

  /** Live events queued during the catch-up, not yet handed over. */
  get queued(): number {
    return this.pending.length;
  }

  constructor(
    readonly options: SubscribeOptions,
    private readonly stream: LiveStream,
    private readonly queueLimit: number,
    private readonly queueBytes: number,
  ) {
    options.signal?.addEventListener('abort', this, { once: true });
  }

  /** The owner's signal was aborted. */
  handleEvent(): void {
    this.close();
  }

  /**
   * Each event type's verdict against the topics, matched once: the poller serving every tenant
   * judges every event for every stream of its tenant, and 50 globs of 200 characters that match
   * nothing took some 10,000 steps an event (100 streams, 500 events: 5 s of the event loop).
   * Types are few (the catalog's, a workflow's decisions); past MAX_VERDICTS the map starts again.
   */
  private readonly verdicts = new Map<string, boolean>();

  wants(event: OutboxEvent): boolean {
    if (event.tenantId !== this.options.tenantId) return false;
    const topics = this.options.topics;
    if (topics.length === 0) return true;
    let wanted = this.verdicts.get(event.type);
    if (wanted === undefined) {
      wanted = topics.some((t) => matchesGlob(t, event.type));
      if (this.verdicts.size >= MAX_VERDICTS) this.verdicts.clear();
      this.verdicts.set(event.type, wanted);
    }
    return wanted;
  }

  /** The poll this subscriber was last judged at (the live flow, with `waiting`). */
  private judgedAt = -1;

  /** From the poller (its poll `seq`): in order, for this subscriber's tenant. */
  offer(event: OutboxEvent, seq = -1): void {
    if (this.closed) return;
    if (!this.live) {
      // Only what this subscriber wants waits: the others would be delivered to nobody.
      if (!this.wants(event)) return;
      this.pending.push(event);
      this.pendingBytes += sizeOf(event);
      if (this.pending.length > this.queueLimit || this.pendingBytes > this.queueBytes) {
        // Every event dropped here is in the table, and the catch-up reads on past it.
        this.pending = [];
        this.pendingBytes = 0;
        this.drops++;
      }
      return;
    }
    const { waiting, maxWaiting } = this.options;
    if (waiting && maxWaiting !== undefined) {
      // Judged once per poll, before its first event: what earlier polls left unread.
      if (this.judgedAt !== seq) {
        this.judgedAt = seq;
        if (waiting() > maxWaiting) {
          this.end('client too slow');
          return;
        }
      }
      this.push(event);
      return;
    }
    if (!this.push(event)) this.end('client too slow');
  }

  /** Delivers an event newer than the position; false when the consumer is full. */
  private push(event: OutboxEvent): boolean {
    if (this.closed || !after(event.position, this.position)) return true;
    this.position = event.position;
    if (!this.wants(event)) return true;
    return this.options.deliver(event);
  }

  /** Delivers during the catch-up, waiting for room when the consumer has it; false once closed. */
  async pace(event: OutboxEvent): Promise<boolean> {
    if (this.push(event)) return !this.closed;
    if (!this.options.room) {
      this.end('client too slow');
      return false;
    }
    if (!(await this.roomWithin(this.options.room, this.options.stallMs))) {
      this.end('client too slow');
      return false;
    }
    return !this.closed;
  }

  /** Waits for `room`; false when the consumer took nothing for `stallMs` first. */
  private async roomWithin(room: () => Promise<void>, stallMs: number | undefined): Promise<boolean> {
    if (stallMs === undefined) {
      await room();
      return true;
    }
    const waiting = this.options.waiting;
    let last = waiting?.() ?? 0;
    let timer: NodeJS.Timeout | undefined;
    const stalled = new Promise<false>((resolve) => {
      timer = setInterval(() => {
        // A client that reads, however slowly, takes bytes from what waits: it is waited for on.
        const now = waiting?.();
        if (now !== undefined && now < last) last = now;
        else resolve(false);
      }, stallMs);
      timer.unref();
    });
    try {
      return await Promise.race([room().then(() => true), stalled]);
    } finally {
      clearInterval(timer);
    }
  }

  /**
   * The queued live events, then live, unless queued events were dropped meanwhile (the table must
   * be read again first): 'live', 'reread' or 'closed'.
   */
  async flush(): Promise<'live' | 'reread' | 'closed'> {
    const drops = this.drops;
    while (this.pending.length > 0) {
      const queued = this.pending;
      this.pending = [];
      this.pendingBytes = 0;
      for (const event of queued) {
        if (!(await this.pace(event))) return 'closed';
        if (this.drops !== drops) return 'reread';
      }
    }
    if (this.drops !== drops) return 'reread';
    // Nothing queued and nothing awaited since: from here the poller delivers directly.
    this.live = true;
    return 'live';
  }

  /**
   * Live from the start (no resume): the poller is at this subscription's position, so nothing it
   * queued meanwhile is after it.
   */
  goLive(): void {
    this.live = true;
    this.pending = [];
    this.pendingBytes = 0;
  }

  end(reason: string): void {
    if (this.closed) return;
    this.close();
    this.options.onEnd?.(reason);
  }

  close(): void {
    this.closed = true;
    this.pending = [];
    this.pendingBytes = 0;
    this.options.signal?.removeEventListener('abort', this);
    this.stream.remove(this);
  }
}

export class LiveStream {
  private readonly subscribers = new Set<Subscription>();
  private readonly clock = new ClockRunner();
  private position: Position | undefined;
  private running = false;
  /** Stopped for good: a subscription begun since (its request reached the handler during the stop) ends at once. */
  private stopped = false;
  /** Polls that delivered events, counted: a subscriber is judged once per poll. */
  private polls = 0;

  constructor(
    private readonly db: Database,
    private readonly options: StreamOptions,
  ) {
    this.clock.schedule('event-stream', { every: options.pollEvery }, () => this.poll());
  }

  start(): void {
    this.running = true;
    this.clock.start();
  }

  /**
   * What a scope-bound caller holds of the tenant's objects (connectors, tables, workflows), read for
   * their stream's filter; undefined for a caller held to no scope (nothing is filtered).
   */
  held(tenantId: number, caller: Caller): Promise<HeldObjects | undefined> {
    return this.db.readWithTenant(tenantId, (tx) => streamHeld(tx, caller));
  }

  /** The id of the last event the poller read, or of the head it took; 0 without a position (nobody listens). */
  polledThrough(): number {
    return this.position?.id ?? 0;
  }

  /** Ends every subscription and stops polling. */
  async stop(): Promise<void> {
    this.running = false;
    this.stopped = true;
    for (const sub of [...this.subscribers]) sub.end(SERVER_STOPPING);
    await this.clock.stop();
  }

  /** A wake-up (NOTIFY): poll now unless a poll is already running. */
  wake(): void {
    if (this.running && this.subscribers.size > 0) void this.clock.trigger('event-stream');
  }

  count(): number {
    return this.subscribers.size;
  }

  /** Open subscriptions of one tenant. */
  countFor(tenantId: number): number {
    let n = 0;
    for (const sub of this.subscribers) if (sub.options.tenantId === tenantId) n++;
    return n;
  }

  /**
   * Places taken per tenant (svc.events.stream.max-per-tenant): a stream holds one from the moment
   * it is admitted until its connection is done, which may be after its subscription ended (what
   * was left for the client is still being sent).
   */
  private readonly places = new Map<number, number>();

  /**
   * Takes one of the tenant's `limit` places, checked and taken in one step (no other request can
   * come between): the function that gives it back (once; calling it again does nothing), or
   * undefined when all are taken.
   */
  takePlace(tenantId: number, limit: number): (() => void) | undefined {
    const taken = this.places.get(tenantId) ?? 0;
    if (taken >= limit) return undefined;
    this.places.set(tenantId, taken + 1);
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      const left = (this.places.get(tenantId) ?? 1) - 1;
      if (left > 0) this.places.set(tenantId, left);
      else this.places.delete(tenantId);
    };
  }

  /** Places one tenant holds (its streams whose connections are not done). */
  placesFor(tenantId: number): number {
    return this.places.get(tenantId) ?? 0;
  }

  /**
   * Resolves once the subscription's start is known (an unknown or purged `afterId` settled); a
   * catch-up after `afterId` then runs on (`caughtUp`), delivering at the consumer's pace.
   */
  async subscribe(options: SubscribeOptions): Promise<Subscription> {
    const sub = new Subscription(options, this, this.options.catchUpQueue ?? 10_000, this.options.catchUpQueueBytes ?? 16 * 1024 * 1024);
    if (options.signal?.aborted) {
      sub.close();
      return sub;
    }
    if (this.stopped) {
      // Nothing would ever be delivered to it, and its connection would hold the HTTP server's
      // close until the shutdown grace cut it.
      sub.end(SERVER_STOPPING);
      return sub;
    }
    this.subscribers.add(sub);
    try {
      const head = await this.startingHead();
      if (options.afterId === undefined) {
        sub.position = head;
        options.onStart?.(head.id);
        // The poller is at that head: it delivers every later event. It is past it when its own
        // first read of the head ended before this one's (nobody listened before): the events
        // between are read from the table first, as a resume's are.
        if (!this.position || !after(this.position, head)) {
          sub.goLive();
          return sub;
        }
      } else {
        sub.position = await this.resumePosition(options.afterId, head);
      }
    } catch (err) {
      sub.close();
      throw err;
    }
    sub.caughtUp = this.catchUp(sub).catch((err: unknown) => {
      if (sub.closed) return;
      logger().warn({ err, tenantId: options.tenantId }, 'event stream catch-up failed');
      sub.end('the outbox could not be read');
    });
    return sub;
  }

  /** Where a resume after `afterId` starts (`head`: where one with nothing after it starts). */
  private async resumePosition(afterId: number, head: Position): Promise<Position> {
    const from = await this.db.crossTenant('event-stream', async (tx) => {
      const found = await positionOf((t, v) => tx.query(t, v), afterId);
      if (found) {
        // An event not readable yet (a transaction older than its own is still open): the client
        // learnt its id elsewhere (an inbox entry). Resuming after it would pass over the events of
        // that older transaction for good, so the resume starts at the readable head instead: the
        // event itself, and what follows it, come again (at least once, never lost).
        const { rows } = await tx.query<{ readable: boolean }>('select $1::xid8 < pg_snapshot_xmin(pg_current_snapshot()) as readable', [found.txid]);
        return rows[0]?.readable ? found : headPosition((t) => tx.query(t));
      }
      // Above every id the outbox holds (a client of another database, a typo): nothing after it
      // exists yet, so it starts at the head instead of replaying the whole retention.
      const { rows } = await tx.query<{ newer: boolean }>('select exists (select 1 from events.outbox where id > $1) as newer', [afterId]);
      return rows[0]?.newer ? undefined : head;
    });
    // An id that is gone (purged) resumes from the oldest event still kept.
    return from ?? { txid: '0', id: afterId };
  }

  remove(sub: Subscription): void {
    this.subscribers.delete(sub);
  }

  /**
   * From the table after the subscription's position, in batches, at the consumer's pace; then the
   * live events queued meanwhile; then live. Queued events dropped (too many) send it back to the
   * table: a read that ends short after the last drop has passed every dropped event.
   */
  private async catchUp(sub: Subscription): Promise<void> {
    const tenantId = sub.options.tenantId;
    for (;;) {
      if (sub.closed) return;
      const drops = sub.drops;
      const events = await this.db.withTenant(tenantId, (tx) => readAfter((t, v) => tx.query(t, v), sub.position, this.options.batch, tenantId));
      for (const event of events) if (!(await sub.pace(event))) return;
      if (events.length === this.options.batch || sub.drops !== drops) continue;
      const next = await sub.flush();
      if (next !== 'reread') return;
    }
  }

  /** The poller's position; without one (nobody listened), the readable head becomes it. */
  private async currentPosition(): Promise<Position> {
    return this.position ?? (await this.readHead()).current;
  }

  /**
   * Where a new subscription starts: the poller's position, or without one the readable head as this
   * call read it, which may be before the poller's when the poller's own read ended first.
   */
  private async startingHead(): Promise<Position> {
    return this.position ?? (await this.readHead()).read;
  }

  /** Reads the readable head; it becomes the poller's position unless another read set one meanwhile. */
  private async readHead(): Promise<{ read: Position; current: Position }> {
    const read = await this.db.crossTenant('event-stream', (tx) => headPosition((t) => tx.query(t)));
    this.position ??= read;
    return { read, current: this.position };
  }

  private async poll(): Promise<void> {
    if (this.subscribers.size === 0) {
      this.position = undefined; // nobody listens: the next subscriber starts at the head
      return;
    }
    const from = await this.currentPosition();
    const events = await this.db.crossTenant('event-stream', (tx) => readAfter((t, v) => tx.query(t, v), from, this.options.batch));
    if (events.length === 0) return;
    this.position = events.at(-1)!.position;
    const seq = ++this.polls;
    for (const event of events) {
      for (const sub of this.subscribers) if (sub.options.tenantId === event.tenantId) sub.offer(event, seq);
    }
    if (events.length === this.options.batch) setImmediate(() => this.wake());
    logger().trace({ events: events.length }, 'event stream poll');
  }
}
