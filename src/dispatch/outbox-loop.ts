import type { ClockRunner } from '../clock/clock.js';
import type { Database, Tx } from '../db/database.js';
import { type CursorMove, OutboxConsumer } from '../events/consumer.js';
import type { OutboxListener } from '../events/listener.js';
import type { OutboxEvent, Position } from '../events/outbox.js';
import { isUnavailableOrBusy } from '../db/unavailable.js';
import { runForTenant } from '../observability/context.js';
import { loggableMessage } from '../observability/database-errors.js';
import { logger } from '../observability/logger.js';
import { lazyCounter } from '../observability/metrics.js';
import { describeRefusal, refusedValueCode } from '../validation/database-refusals.js';

interface OutboxLoopOptions {
  /** The consumer's name: its cursor row and its clock job (`outbox:<name>`). */
  name: string;
  /** Sweep cadence (the safety net; NOTIFY wakes the loop sooner). */
  every: number;
  batch: number;
  /**
   * Handles one event. A throw stops the batch there; the event is read again on the next pass,
   * unless PostgreSQL refused as data what the handler wrote (refusedValueCode): every try would
   * meet that again, so the event is set aside (passed, logged at error, counted) and the rest go on.
   * An event that failed otherwise `setAsideAfter` passes in a row is set aside too, once an event
   * after it is handled (`failedTooOften`).
   * A `Postpone` thrown says the event cannot be handled before a given time (the server it needs is
   * away): the loop then makes no pass until then, and logs nothing (the handler says why).
   * Returning `false` says the event needed nothing (no rule, no hook matched): the cursor then
   * moves past it with the next event that did need something, or at the end of the batch, so a
   * run of such events costs one cursor write instead of one each (a crash re-reads them, harmlessly).
   */
  // biome-ignore lint/suspicious/noConfusingVoidType: a handler that returns nothing counts as having acted
  handle?: (event: OutboxEvent) => Promise<boolean | void>;
  /**
   * Instead of `handle`: handles a whole batch at once (the cursor then advances past the batch). A
   * throw leaves the cursor before the batch, which is read again on the next pass, so the handler
   * must be idempotent per event. A handler that moves the cursor itself, to `cursor`, in the
   * statement that records what it did (`advanceSql` of src/events/consumer.ts), returns true: the
   * loop then writes no cursor of its own (one statement per batch fewer).
   */
  // biome-ignore lint/suspicious/noConfusingVoidType: a handler that returns nothing leaves the cursor to the loop
  handleBatch?: (events: OutboxEvent[], cursor: CursorMove) => Promise<boolean | void>;
  /**
   * Instead of `handle`: handles a whole batch inside one cross-tenant transaction that also
   * advances the cursor past the batch, so what the handler writes there (events it emits) and the
   * cursor commit together: nothing is lost or done twice across a crash. A throw rolls both back;
   * the batch is read again on the next pass; refused as data (refusedValueCode), it is handled
   * again one event at a time and the event refused alone is set aside (`oneAtATime`).
   */
  handleBatchInTx?: (tx: Tx, events: OutboxEvent[]) => Promise<void>;
  /**
   * True when the handler can act on no event at all (no hook is declared, say): a pass then moves
   * the cursor past every event readable now without reading them. Asked at every pass, so a
   * handler that gains something to do reads the events written after that.
   */
  idle?: () => boolean;
  /**
   * An SQL condition under which the handler can act on no event (no enabled e-mail rule in any
   * tenant, say): a pass first moves the cursor past every event readable then if it holds, in one
   * statement, so the condition and the events it lets pass are read in the same snapshot (a rule
   * committed before an event was written is seen). When it does not hold, the pass reads as usual.
   * A constant of the code, never built from input.
   */
  idleWhen?: string;
  /**
   * Passes in a row in which an event's handling, alone, may fail (not as the database or the network
   * away or busy: isUnavailableOrBusy) before the event is set aside (svc.events.set-aside-after;
   * 0: never). Default 10.
   */
  setAsideAfter?: number;
}

/** What the loop needs of a clock: the process's ClockRunner, or one gated by leadership. */
export type LoopClock = Pick<ClockRunner, 'schedule' | 'trigger' | 'running'>;

/** First delay of the re-poll for events committed but not yet readable in order; doubles up to VISIBILITY_POLL_MAX_MS (or `every`). */
const VISIBILITY_POLL_MS = 10;
const VISIBILITY_POLL_MAX_MS = 1_000;
/** While a loop can act on nothing, wake-ups run at most one pass per this long (or `every`, if shorter). */
const IDLE_WAKE_MS = 1_000;

/**
 * An outbox consumer on the clock: reads a batch after its cursor, hands each event over in order,
 * and advances the cursor after each handled event (or after each batch with `handleBatch`), so a
 * crash re-reads at most one event that did something (one batch); events the handler says needed
 * nothing are passed with the next cursor write instead of one write each. Woken at once by NOTIFY, swept every `every`
 * regardless. A wake-up that arrives while a pass runs makes the pass go round once more, and
 * events already committed but held back by an older transaction still running (the outbox is
 * read in commit order, docs/operations.md; the read that ends a pass also says whether there are
 * any) are polled for with a short back-off instead of waiting for the sweep, as is a batch whose
 * handler failed. Starts at the head: a new consumer is not retroactive. The events of a deactivated
 * tenant are never handed over (its background work stops, docs/admin.md); the cursor moves past
 * them with the batch they were read in.
 */
export class OutboxLoop {
  private readonly consumer: OutboxConsumer;
  private clock: LoopClock | undefined;
  private unsubscribe: (() => void) | undefined;
  private again = false;
  private stopped = false;
  private pollTimer: NodeJS.Timeout | undefined;
  private pollDelay = 0;
  /** The last pass left events to look at again soon: held back by an older transaction, or in a failed batch. */
  private pending = false;
  /** The last pass could act on nothing (`idle`, `idleWhen`): wake-ups are spaced (`wake`). */
  private dormant = false;
  private dormantTimer: NodeJS.Timeout | undefined;
  /** performance.now() when the last pass ended. */
  private lastPassEnded = 0;
  /** performance.now() before which no pass runs (the handler threw a Postpone); 0: none. */
  private pausedUntil = 0;
  /**
   * Events (by id) whose handling alone failed in the last passes, with how many passes in a row
   * (`failedTooOften`): the one at the cursor, and those after it that failed as often. Emptied
   * when an event is handled.
   */
  private readonly failures = new Map<number, number>();
  /** The last pass ended on an event that failed (`failedTooOften`): wake-ups wait for the back-off's look-again. */
  private backingOff = false;

  constructor(
    private readonly db: Database,
    private readonly options: OutboxLoopOptions,
  ) {
    if ([options.handle, options.handleBatch, options.handleBatchInTx].filter(Boolean).length !== 1) {
      throw new Error(`outbox loop ${options.name}: give exactly one of handle, handleBatch and handleBatchInTx`);
    }
    this.consumer = new OutboxConsumer(db, options.name);
  }

  get job(): string {
    return `outbox:${this.options.name}`;
  }

  async start(clock: LoopClock, listener?: OutboxListener): Promise<void> {
    await this.consumer.startAtHead();
    this.clock = clock;
    this.stopped = false;
    clock.schedule(this.job, { every: this.options.every }, () => this.pass());
    this.unsubscribe = listener?.onEvent(() => this.wake());
  }

  /**
   * Runs a pass now, or once more after the one running. A loop whose last pass found it could act
   * on nothing (`idle`, `idleWhen`) runs at most one pass per IDLE_WAKE_MS for wake-ups: NOTIFYs of
   * a busy outbox would otherwise make it pass the events a few at a time, one statement each.
   */
  wake(): void {
    // A postponed loop is woken by its own timer when the time comes (lookAgainSoon), as is one
    // whose last pass failed on an event: that event is tried again after the back-off, not at
    // every NOTIFY of a busy outbox.
    if (this.halted || !this.clock || this.paused || (this.backingOff && this.pollTimer)) return;
    if (this.dormant) {
      if (this.dormantTimer) return;
      const wait = this.lastPassEnded + Math.min(IDLE_WAKE_MS, this.options.every) - performance.now();
      if (wait > 0) {
        this.dormantTimer = setTimeout(() => {
          this.dormantTimer = undefined;
          this.again = true;
          if (!this.halted) void this.clock?.trigger(this.job);
        }, wait);
        this.dormantTimer.unref();
        return;
      }
    }
    this.again = true;
    void this.clock.trigger(this.job);
  }

  private get paused(): boolean {
    return this.pausedUntil > performance.now();
  }

  /** Stopped, or its clock is (a pass already running ends after the batch in hand). */
  private get halted(): boolean {
    return this.stopped || this.clock?.running() === false;
  }

  /** No more wake-ups (the clock's own stop ends the ticks). */
  stop(): void {
    this.stopped = true;
    this.unsubscribe?.();
    this.unsubscribe = undefined;
    if (this.pollTimer) clearTimeout(this.pollTimer);
    this.pollTimer = undefined;
    if (this.dormantTimer) clearTimeout(this.dormantTimer);
    this.dormantTimer = undefined;
  }

  private async pass(): Promise<void> {
    if (this.halted || this.paused) return;
    // A NOTIFY that arrives while this pass runs sets `again`; its trigger was skipped because the
    // job was running, so the pass goes round again.
    do {
      this.again = false;
      await this.drain();
    } while (this.again && !this.stopped && !this.dormant && !this.paused && !this.backingOff);
    this.lastPassEnded = performance.now();
    this.lookAgainSoon();
  }

  /**
   * Events after the cursor that were not readable yet (the last read said so), or a batch that
   * failed: look again soon, with a back-off, instead of waiting for the sweep.
   */
  private lookAgainSoon(): void {
    if (this.stopped) return;
    if (this.paused) {
      // The time the handler asked for replaces a shorter look-again (its wake would be ignored).
      if (this.pollTimer) clearTimeout(this.pollTimer);
      this.pollTimer = setTimeout(() => {
        this.pollTimer = undefined;
        this.pausedUntil = 0;
        this.wake();
      }, this.pausedUntil - performance.now());
      this.pollTimer.unref();
      return;
    }
    if (this.pollTimer) return;
    if (!this.pending) {
      this.pollDelay = 0;
      return;
    }
    this.pollDelay = Math.min(this.pollDelay ? this.pollDelay * 2 : VISIBILITY_POLL_MS, VISIBILITY_POLL_MAX_MS, this.options.every);
    this.pollTimer = setTimeout(() => {
      this.pollTimer = undefined;
      this.wake();
    }, this.pollDelay);
    this.pollTimer.unref();
  }

  /**
   * Runs `handle` in one cross-tenant transaction that also moves the cursor from `from` to `to`.
   * The cursor is locked and checked first: a process that believed it led a moment too long (its
   * leadership lost while it read) finds it moved and handles nothing (CursorMoved).
   */
  private async commitBatch(from: Position, to: Position, handle: (tx: Tx) => Promise<void>): Promise<void> {
    await this.db.crossTenant(this.job, async (tx) => {
      if (!(await this.consumer.claimIn(tx, from))) throw new CursorMoved();
      await handle(tx);
      await this.consumer.advanceIn(tx, to);
    });
  }

  /** Logs why a batch from `first` was not handled (it is read again on a later pass, or left to the process that moved the cursor). */
  private batchFailed(err: unknown, first: OutboxEvent): void {
    const { name } = this.options;
    if (err instanceof CursorMoved) {
      logger().warn({ consumer: name, fromEventId: first.id }, `outbox consumer ${name}: another process holds or moved its cursor since this one read a batch from event ${first.id}; the batch was left to it`);
    } else {
      logger().error({ err, consumer: name, fromEventId: first.id }, `outbox consumer ${name} failed on a batch from event ${first.id}; it will be retried`);
    }
  }

  /**
   * Counts a pass in which `event`, handled alone, failed with `err` (neither a Postpone nor a
   * CursorMoved); true once it has failed `setAsideAfter` passes in a row, so that it is to be set
   * aside once an event after it is handled (a failure that meets the events after it too is the
   * hub's or the database's, not the event's: nothing is set aside for it). A failure that means
   * the database or the network is unavailable or busy (isUnavailableOrBusy) never counts, and
   * starts the count again.
   */
  private failedTooOften(event: OutboxEvent, err: unknown): boolean {
    if (isUnavailableOrBusy(err)) {
      this.failures.delete(event.id);
      return false;
    }
    const passes = (this.failures.get(event.id) ?? 0) + 1;
    this.failures.set(event.id, passes);
    this.backingOff = true;
    const after = this.options.setAsideAfter ?? SET_ASIDE_AFTER;
    return after > 0 && passes >= after;
  }

  /**
   * A batch that failed with `err`, handled again one event at a time when the failure may be one
   * event's: refused as data, or (unless `setAsideAfter` is 0) anything but the database or the
   * network away or busy (isUnavailableOrBusy) and the cursor moved; else left to a later pass.
   * `attempt` handles one event and moves the cursor from `from` to `to`, `pass` moves it with
   * nothing handled. An event refused as data alone (refusedValueCode: class 22 or
   * 54, which the same writes meet again at every try) is set aside at once: the cursor moves past
   * it with nothing of it written, logged at error (its id, type, tenant and the refusal's code, not
   * the database's text, which may quote the data) and counted (`svc_outbox_events_set_aside_total`).
   * An event that failed otherwise `setAsideAfter` passes in a row (`failedTooOften`) is set aside
   * likewise once an event after it is handled. So one event no retry can change does not hold back
   * every later event of every tenant. Any other failure stops there; the rest is read again on a
   * later pass (`done` false). The last event's move goes to `to` (past the events of deactivated
   * tenants read with the batch).
   */
  private async oneAtATime(
    failure: unknown,
    { attempt, pass }: { attempt: (event: OutboxEvent, from: Position, to: Position) => Promise<unknown>; pass: (from: Position, to: Position) => Promise<unknown> },
    events: OutboxEvent[],
    from: Position,
    to: Position,
  ): Promise<{ handled: number; done: boolean }> {
    const alone =
      !(failure instanceof CursorMoved) && (refusedValueCode(failure) !== undefined || ((this.options.setAsideAfter ?? SET_ASIDE_AFTER) > 0 && !isUnavailableOrBusy(failure)));
    if (!alone) {
      this.batchFailed(failure, events[0]!);
      return { handled: 0, done: false };
    }
    let at = from;
    let handled = 0;
    const blamed: Failed[] = [];
    for (const [i, event] of events.entries()) {
      const last = i === events.length - 1;
      const past = last ? to : event.position;
      try {
        await attempt(event, at, past);
      } catch (err) {
        const code = refusedValueCode(err);
        if (code === undefined) {
          const tooOften = !(err instanceof CursorMoved) && this.failedTooOften(event, err);
          this.batchFailed(err, event);
          if (!tooOften || last) return { handled, done: false };
          blamed.push({ event, err, passes: this.failures.get(event.id)! });
          continue;
        }
        try {
          await pass(at, past);
        } catch (passing) {
          this.batchFailed(passing, event);
          return { handled, done: false };
        }
        handled += this.setAsideFailed(blamed);
        this.setAside(event, { sqlstate: code }, describeRefusal(code));
      }
      handled += this.setAsideFailed(blamed);
      handled++;
      at = past;
    }
    return { handled, done: true };
  }

  /** Says that `event` was passed with nothing of it done (`why`, never the database's text, which may quote the data): logged at error and counted. */
  private setAside(event: OutboxEvent, fields: Record<string, unknown>, why: string): void {
    const { name } = this.options;
    setAsideEvents().inc({ consumer: name });
    logger().error(
      { consumer: name, eventId: event.id, eventType: event.type, tenantId: event.tenantId, ...fields },
      `outbox consumer ${name} set aside event ${event.id} (${event.type}, tenant ${event.tenantId}): ${why}; the events after it go on`,
    );
  }

  /** Sets aside the events that failed too often (`failedTooOften`), the cursor now past them (an event after them handled); empties `blamed` and the counts. Returns how many. */
  private setAsideFailed(blamed: Failed[]): number {
    if (this.failures.size === 0) return 0;
    this.failures.clear();
    const n = blamed.length;
    for (const { event, err, passes } of blamed.splice(0)) {
      this.setAside(event, { err, passes }, `its handling failed ${passes} passes in a row (${loggableMessage(err)})`);
    }
    return n;
  }

  /** Handles everything visible now (several batches when the outbox is busy). Returns the count. */
  async drain(): Promise<number> {
    if (this.options.idle?.()) {
      this.pending = (await this.consumer.skipVisible()).heldBack;
      this.dormant = true;
      return 0;
    }
    if (this.options.idleWhen) {
      // When the condition held, every event readable then was passed; one committed after that
      // statement wakes the loop again (NOTIFY), one held back shows in `heldBack`.
      const skip = await this.consumer.skipVisible(this.options.idleWhen);
      if (skip.passed) {
        this.pending = skip.heldBack;
        this.dormant = true;
        return 0;
      }
    }
    this.dormant = false;
    this.backingOff = false;
    // A failed batch is read again soon (`lookAgainSoon`), as are events held back.
    this.pending = true;
    let handled = 0;
    for (;;) {
      // Events of deactivated tenants are read but not handed over (`read`): the cursor moves past them all the same, to `to`.
      const { events, heldBack, from, read, to } = await this.consumer.read(this.options.batch);
      if (events.length === 0) {
        if (to) await this.consumer.advance(to);
      } else if (this.options.handleBatchInTx) {
        const handleInTx = this.options.handleBatchInTx;
        try {
          await this.commitBatch(from, to!, (tx) => handleInTx(tx, events));
        } catch (err) {
          // The event to blame is found by handling the batch again one event at a time, each
          // event in a transaction of its own that moves the cursor past it.
          const alone = await this.oneAtATime(err, {
            attempt: (event, at, past) => this.commitBatch(at, past, (tx) => handleInTx(tx, [event])),
            pass: (at, past) => this.commitBatch(at, past, async () => {}),
          }, events, from, to!);
          handled += alone.handled;
          if (!alone.done) return handled;
          continue;
        }
        if (this.failures.size !== 0) this.failures.clear();
        handled += events.length;
      } else if (this.options.handleBatch) {
        const handleBatch = this.options.handleBatch;
        // biome-ignore lint/suspicious/noConfusingVoidType: what `handleBatch` returns
        let moved: boolean | void;
        try {
          moved = await handleBatch(events, { consumer: this.options.name, to: to! });
        } catch (err) {
          // As for handleBatchInTx: each event alone, the cursor moved past it (by the handler, or here).
          const alone = await this.oneAtATime(err, {
            attempt: async (event, _at, past) => {
              if ((await handleBatch([event], { consumer: this.options.name, to: past })) !== true) await this.consumer.advance(past);
            },
            pass: (_at, past) => this.consumer.advance(past),
          }, events, from, to!);
          handled += alone.handled;
          if (!alone.done) return handled;
          continue;
        }
        if (moved !== true) await this.consumer.advance(to!);
        if (this.failures.size !== 0) this.failures.clear();
        handled += events.length;
      } else {
        // The position of handled events that needed nothing, not yet written to the cursor.
        let skipped: OutboxEvent['position'] | undefined;
        const haltedAtStart = this.halted;
        // Events that failed too often (`failedTooOften`), set aside once an event after them is handled.
        const blamed: Failed[] = [];
        for (let i = 0; i < events.length; i++) {
          const event = events[i]!;
          // biome-ignore lint/suspicious/noConfusingVoidType: what `handle` returns
          let acted: boolean | void;
          try {
            // Each event as its tenant's unit of work: its lines carry that tenant (runForTenant).
            acted = await runForTenant(event.tenantId, () => this.options.handle!(event));
          } catch (err) {
            const code = refusedValueCode(err);
            if (code !== undefined) {
              // Refused as data, which every try meets again: passed (with the events before it that
              // needed nothing), so the events after it go on.
              await this.consumer.advance(event.position);
              handled += this.setAsideFailed(blamed);
              this.setAside(event, { sqlstate: code }, describeRefusal(code));
              skipped = undefined;
              handled++;
              if (this.halted && !haltedAtStart) return handled;
              continue;
            }
            const tooOften = !(err instanceof Postpone) && this.failedTooOften(event, err);
            if (!(err instanceof Postpone)) {
              const passes = this.failures.get(event.id);
              logger().error({ err, consumer: this.options.name, eventId: event.id, eventType: event.type, passes }, `outbox consumer ${this.options.name} failed on event ${event.id}; it will be retried`);
            }
            // Tried again after the events after it: set aside once one of them is handled.
            if (tooOften && i < events.length - 1) {
              blamed.push({ event, err, passes: this.failures.get(event.id)! });
              continue;
            }
            if (skipped) await this.consumer.advance(skipped);
            if (err instanceof Postpone) {
              this.pausedUntil = err.until;
              this.pending = false;
            }
            return handled;
          }
          handled++;
          if (acted === false) {
            skipped = event.position;
          } else {
            await this.consumer.advance(event.position);
            skipped = undefined;
          }
          if (this.failures.size !== 0) {
            // The cursor past the events to set aside first, whatever this one needed.
            if (blamed.length > 0) {
              if (skipped) await this.consumer.advance(skipped);
              skipped = undefined;
            }
            handled += this.setAsideFailed(blamed);
          }
          // A stopping loop ends after the event in hand, not at the end of its batch: each event
          // may take a send (e-mail: up to 100 a batch), and the stop would wait for them all, or
          // be cut off by the process's end, the event then in hand sent again by the next leader.
          // (A drain run by hand on a clock never started goes on.)
          if (this.halted && !haltedAtStart) {
            if (skipped) await this.consumer.advance(skipped);
            return handled;
          }
        }
        // Past the last event handed over too: events of deactivated tenants read after it.
        if (skipped || to!.id !== events.at(-1)!.id) await this.consumer.advance(to!);
      }
      if (read < this.options.batch) {
        this.pending = heldBack;
        return handled;
      }
      // A stopping loop (its clock stopped, or stop()) ends after the batch in hand, not once the
      // outbox is drained: under a backlog that could take minutes.
      if (this.halted) return handled;
    }
  }
}

/** Events set aside by outbox consumers: their data refused by PostgreSQL, or their handling failed too often (OutboxLoop, `setAside`). */
const setAsideEvents = lazyCounter({
  name: 'svc_outbox_events_set_aside_total',
  help: 'Outbox events a consumer set aside: PostgreSQL refused as data what handling them wrote, or their handling failed svc.events.set-aside-after passes in a row (each logged at error)',
  labelNames: ['consumer'],
});

/** Passes in a row an event's handling may fail before it is set aside, unless told (svc.events.set-aside-after's default). */
const SET_ASIDE_AFTER = 10;

/** An event that failed too often (`failedTooOften`): what it failed with last, and how many passes in a row. */
interface Failed {
  event: OutboxEvent;
  err: unknown;
  passes: number;
}

/**
 * Thrown by a `handle` that cannot handle its event before `until` (performance.now() time): the
 * event stays unhandled, and the loop makes no pass before then.
 */
export class Postpone extends Error {
  constructor(
    readonly until: number,
    reason: string,
  ) {
    super(reason);
  }
}

/** The cursor was moved by another process between a batch's read and its transaction. */
class CursorMoved extends Error {
  constructor() {
    super('the consumer cursor moved since the batch was read');
  }
}
