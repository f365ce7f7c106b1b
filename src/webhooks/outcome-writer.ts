import { randomUUID } from 'node:crypto';
import type { Tx } from '../db/database.js';
import { loggableMessage } from '../observability/database-errors.js';
import { logger } from '../observability/logger.js';
import type { Batches } from './batches.js';
import { type ClaimedRow, type HeldBatch, materialiseRows, type Outcome, renewLeases, writeBackAgain, writeBackMany, writeFirstMany } from './journal.js';
import type { AttemptOutcome } from './model.js';

/**
 * Writes attempt outcomes back in batches (group commit): one flush runs at a time, and the
 * outcomes that arrive while it runs go together in the next statement (journal.ts
 * `writeBackMany`), so a busy worker costs one round trip per batch instead of one per attempt,
 * and an idle one writes an outcome at once. `delayMs` > 0 makes an outcome wait up to that long
 * for company while other attempts are still under way (`othersUnderWay`): their outcomes are
 * coming, so a burst of deliveries is written in one or two statements instead of one per round
 * trip; the outcome of the last attempt under way goes at once with everything waiting. That holds
 * after a flush too: what came in meanwhile waits for more while attempts are under way, so a
 * backlog is written in batches of up to `delayMs` worth of outcomes rather than of one round trip's
 * worth. A full batch (`maxBatch`) goes at once.
 *
 * What it changes for the guarantees: nothing. An outcome is only ever written after its attempt
 * was made, and until it is written the row keeps the lease it was sent under, so a process that
 * dies with outcomes still waiting here loses only the record of those attempts: their leases run
 * out and the retry sweep sends them again (at least once), exactly as for a process that dies
 * mid-attempt. In a live process the lease holds while the outcome waits: given `leaseMs`, the
 * leases of outcomes waiting here (or in a statement under way) half a lease after their lease began
 * are renewed together, one statement for all that are due, so a slow database never lets a retry
 * sweep claim and send again a delivery whose outcome is still to be written. A batch the database
 * refuses is written again row by row, so one bad row fails alone; each outcome carries its id in
 * the journal, so a batch that did commit (its answer lost with the connection) is not counted twice,
 * and the row is marked with it before it is written again, so a batch that commits only later (it
 * reached the server after the connection was given up, or waited there for a lock) skips the row
 * (journal.ts, `writeBackAgain`).
 */

interface OutcomeWriterOptions {
  /** Where the statements go (autocommit as the worker role). */
  tx: Tx;
  /**
   * Longest wait of an outcome for others before its batch is written, while `othersUnderWay` says
   * more are coming; 0 (or nothing under way): the next turn of the event loop.
   */
  delayMs: number;
  /** Attempts under way besides the one whose outcome is being written (none when not given). */
  othersUnderWay?: () => number;
  /** Outcomes per statement at most; a full batch is written at once. */
  maxBatch: number;
  /** Outcomes waiting at most before `room()` makes callers wait for a flush (backpressure). */
  maxPending: number;
  /** The lease a waiting outcome's row holds (renewed every half of it while the outcome waits); none: no renewal. */
  leaseMs?: number;
  /** The consumer's batches held (`addFirst`'s outcomes are theirs); needed for `addFirst` only. */
  batches?: Batches;
}

interface Pending extends Outcome {
  /** When the row's lease began at the latest (performance.now(), taken before the statement that set it); a first outcome's never runs out (its batch's lease is renewed). */
  leasedAt: number;
  /** A first attempt's outcome (`addFirst`): its row, written whole, and the batch it is of. */
  first: ClaimedRow | undefined;
  batch: HeldBatch | undefined;
  /** None: nobody waits for the attempt number (the statement need not return it). */
  resolve: ((attempt: number | undefined) => void) | undefined;
  reject(err: unknown): void;
}

/** A first outcome's failure is its batch's (`settle`, not written): nobody else is told. */
function NO_REJECT(): void {}

export class OutcomeWriter {
  private pending: Pending[] = [];
  /** Cancels the scheduled flush, when one is. */
  private scheduled: (() => void) | undefined;
  /** The scheduled flush is the `delayMs` timer (not the next turn of the event loop). */
  private waitingForCompany = false;
  private flushing: Promise<void> | undefined;
  private roomWaiters: Array<() => void> = [];
  /** The outcomes of the statement(s) under way (`writeBatch`): waiting still, their leases are kept too. */
  private writing: Pending[] = [];
  /** The next renewal of waiting outcomes' leases, while any wait (`leaseMs`), and when it is due (performance.now()). */
  private leaseTimer: NodeJS.Timeout | undefined;
  private leaseDue = Number.POSITIVE_INFINITY;
  private renewing = false;

  constructor(private readonly o: OutcomeWriterOptions) {}

  /** Queues an outcome; resolves with the attempt's number once written (undefined: the row is gone). */
  write(id: number, token: string, outcome: AttemptOutcome, leasedAt = performance.now()): Promise<number | undefined> {
    return new Promise((resolve, reject) => this.add(id, token, outcome, resolve, reject, leasedAt));
  }

  /**
   * `write` with callbacks instead of a promise (the pool's attempts: no promise per outcome);
   * `resolve` undefined when nobody needs the attempt number (a batch of only such outcomes is written
   * without reading the numbers back). `leasedAt`: when the row's lease began at the latest
   * (performance.now()); default now.
   */
  add(
    id: number,
    token: string,
    outcome: AttemptOutcome,
    resolve: ((attempt: number | undefined) => void) | undefined,
    reject: (err: unknown) => void,
    leasedAt = performance.now(),
  ): void {
    this.pending.push({ id, token, outcome, leasedAt, first: undefined, batch: undefined, resolve, reject });
    this.added(leasedAt);
  }

  /**
   * The outcome of a first attempt made on a Claim whose row is not written yet (`batch` holds it):
   * written as the whole row with its outcome (journal.ts `writeFirstMany`). Its lease is the
   * batch's (renewed by `Batches`); one that cannot be written leaves its batch row to the sweep.
   */
  addFirst(row: ClaimedRow, batch: HeldBatch, outcome: AttemptOutcome): void {
    this.pending.push({ id: row.id, token: batch.token, outcome, leasedAt: Number.POSITIVE_INFINITY, first: row, batch, resolve: undefined, reject: NO_REJECT });
    this.added(Number.POSITIVE_INFINITY);
  }

  private added(leasedAt: number): void {
    // The renewal armed for the first lease due: an outcome whose lease is due before re-arms it.
    if (this.o.leaseMs !== undefined && leasedAt + this.o.leaseMs / 2 < this.leaseDue) this.watchLeases();
    if (this.pending.length >= this.o.maxBatch) this.kick();
    else if (!this.scheduled) this.schedule();
    else if (this.waitingForCompany && !this.moreComing()) this.kick();
  }

  /** Outcomes not written yet. */
  size(): number {
    return this.pending.length;
  }

  /** Resolves when fewer than `maxPending` outcomes wait; undefined when there is room now (nothing to wait for). */
  room(): Promise<void> | undefined {
    if (this.pending.length < this.o.maxPending) return undefined;
    return new Promise((resolve) => this.roomWaiters.push(resolve));
  }

  /** Writes everything queued now (and what arrives meanwhile). */
  async flush(): Promise<void> {
    while (this.pending.length > 0 || this.flushing) {
      this.kick();
      await this.flushing;
    }
  }

  private moreComing(): boolean {
    return (this.o.othersUnderWay?.() ?? 0) > 0;
  }

  /** Whether what is pending should wait (up to `delayMs`) for the outcomes of attempts still under way. */
  private worthWaiting(): boolean {
    return this.o.delayMs > 0 && this.moreComing();
  }

  private schedule(): void {
    if (this.worthWaiting()) {
      const timer = setTimeout(() => this.kick(), this.o.delayMs);
      this.waitingForCompany = true;
      this.scheduled = () => clearTimeout(timer);
    } else {
      const immediate = setImmediate(() => this.kick());
      this.scheduled = () => clearImmediate(immediate);
    }
  }

  private kick(): void {
    this.scheduled?.();
    this.scheduled = undefined;
    this.waitingForCompany = false;
    if (this.flushing || this.pending.length === 0) return;
    this.flushing = this.writeBatch().finally(() => {
      this.flushing = undefined;
      this.watchLeases();
      // Outcomes that came in while the batch was written: the next batch. It too waits for
      // company while more attempts are under way (a backlog: larger batches, fewer statements);
      // a full batch, or nothing more coming, goes at once.
      if (this.pending.length === 0) return;
      if (this.pending.length >= this.o.maxBatch || !this.worthWaiting()) this.kick();
      else if (!this.waitingForCompany) {
        // A turn of the event loop scheduled meanwhile becomes the wait for company.
        this.scheduled?.();
        this.schedule();
      }
    });
  }

  private async writeBatch(): Promise<void> {
    // A row appears once per statement (an UPDATE … FROM updates a row once); a second outcome of
    // the same row, should one ever wait here, goes with the next batch.
    const batch: Pending[] = [];
    const rest: Pending[] = [];
    const ids = new Set<number>();
    for (const p of this.pending) {
      if (batch.length < this.o.maxBatch && !ids.has(p.id)) {
        ids.add(p.id);
        batch.push(p);
      } else rest.push(p);
    }
    this.pending = rest;
    this.writing = batch;
    this.wakeRoom();
    try {
      // Every outcome of the batch's statements under one id, and written again under it (writeBackMany, writeFirstMany).
      const outcomeId = randomUUID();
      let updates = batch;
      let firsts: Pending[] | undefined;
      if (batch.some((p) => p.first !== undefined)) {
        updates = batch.filter((p) => p.first === undefined);
        firsts = batch.filter((p) => p.first !== undefined);
      }
      if (updates.length > 0) await this.writeUpdates(updates, outcomeId);
      if (firsts) await this.writeFirsts(firsts, outcomeId);
    } finally {
      this.writing = [];
    }
  }

  /** Outcomes of rows written already (`writeBackMany`), and again one by one if their statement fails. */
  private async writeUpdates(batch: Pending[], outcomeId: string): Promise<void> {
    try {
      const attempts = await writeBackMany(this.o.tx, batch, batch.some((p) => p.resolve !== undefined), outcomeId);
      for (const p of batch) p.resolve?.(attempts.get(p.id));
    } catch (err) {
      if (batch.length === 1) {
        batch[0]!.reject(err);
        return;
      }
      logger().warn({ err, outcomes: batch.length }, 'writing a batch of delivery outcomes failed; writing them one by one');
      await Promise.all(
        batch.map(async (p) => {
          try {
            // Under the batch's outcome id: one the failed batch did write (its commit's answer lost) is not
            // counted again, nor is one the batch writes later (still on its way, or waiting for a lock).
            const attempt = await writeBackAgain(this.o.tx, p.id, p.token, p.outcome, outcomeId);
            p.resolve?.(attempt);
          } catch (e) {
            p.reject(e);
          }
        }),
      );
    }
  }

  /**
   * First attempts' outcomes, each row written whole (`writeFirstMany`), the batch rows whose last
   * rows they are deleted in the same statement. If it fails, each row is written as the consumer
   * recorded rows before (leased, no attempt) and its outcome as `writeBackAgain` writes one (the
   * failed statement may have committed, or may commit later); one that fails again leaves its
   * batch row to the retry sweep.
   */
  private async writeFirsts(batch: Pending[], outcomeId: string): Promise<void> {
    const batches = this.o.batches!;
    // Each batch's outcomes in this statement (one map per statement, a handful of batches).
    const counts = new Map<HeldBatch, number>();
    for (const p of batch) counts.set(p.batch!, (counts.get(p.batch!) ?? 0) + 1);
    const done: number[] = [];
    for (const [held, n] of counts) if (batches.closesWith(held, n)) done.push(held.id);
    const outcomes = batch.map((p) => ({ row: p.first!, outcome: p.outcome }));
    try {
      await writeFirstMany(this.o.tx, outcomes, done, false, outcomeId);
      for (const [held, n] of counts) batches.settle(held, n, true, done.includes(held.id));
    } catch (err) {
      logger().warn({ err, outcomes: batch.length }, 'writing first delivery outcomes failed; writing them one by one');
      await Promise.all(
        batch.map(async (p) => {
          let written = false;
          try {
            await materialiseRows(this.o.tx, [p.first!], { token: p.token, leaseMs: this.o.leaseMs ?? 60_000 }, null, []);
            await writeBackAgain(this.o.tx, p.id, p.token, p.outcome, outcomeId);
            written = true;
          } catch (e) {
            logger().error({ err: e, deliveryId: p.id }, 'writing a first delivery outcome failed; the retry sweep writes its row after its batch\'s lease');
          }
          batches.settle(p.batch!, 1, written);
        }),
      );
    }
  }

  /**
   * Arms the renewal of waiting outcomes' leases for the first one due (half a lease after its lease
   * began), or disarms it when nothing waits. One timer for the writer, not one per outcome.
   */
  private watchLeases(): void {
    const leaseMs = this.o.leaseMs;
    if (leaseMs === undefined || this.renewing) return;
    clearTimeout(this.leaseTimer);
    this.leaseTimer = undefined;
    this.leaseDue = Number.POSITIVE_INFINITY;
    let first = Number.POSITIVE_INFINITY;
    for (const p of this.writing) if (p.leasedAt < first) first = p.leasedAt;
    for (const p of this.pending) if (p.leasedAt < first) first = p.leasedAt;
    if (first === Number.POSITIVE_INFINITY) return;
    this.leaseDue = first + leaseMs / 2;
    this.leaseTimer = setTimeout(() => void this.renewDue(), Math.max(0, this.leaseDue - performance.now()));
    // Holds no process open: outcomes not written when it ends are lost with it, leases and all.
    this.leaseTimer.unref();
  }

  /**
   * Renews, in one statement, the leases of the waiting outcomes half a lease old or more, and of
   * those that will be within a quarter lease (fewer statements for a backlog); their tokens checked.
   */
  private async renewDue(): Promise<void> {
    const leaseMs = this.o.leaseMs!;
    this.leaseTimer = undefined;
    this.leaseDue = Number.POSITIVE_INFINITY;
    const now = performance.now();
    const due = [...this.writing, ...this.pending].filter((p) => p.leasedAt + leaseMs / 4 <= now);
    if (due.length === 0) return this.watchLeases();
    this.renewing = true;
    try {
      await renewLeases(this.o.tx, due, leaseMs);
      for (const p of due) p.leasedAt = now;
    } catch (err) {
      logger().warn({ err: loggableMessage(err), deliveries: due.length }, 'renewing the leases of delivery outcomes waiting to be written failed; trying again');
      // Tried again a quarter of a lease later (the leases still have that long at least).
      for (const p of due) p.leasedAt = Math.max(p.leasedAt, now - leaseMs / 4);
    } finally {
      this.renewing = false;
    }
    this.watchLeases();
  }

  private wakeRoom(): void {
    if (this.pending.length >= this.o.maxPending || this.roomWaiters.length === 0) return;
    const waiters = this.roomWaiters;
    this.roomWaiters = [];
    for (const wake of waiters) wake();
  }
}
