import type { Database, Tx } from '../db/database.js';
import { patternsMatch } from '../events/subscribers.js';
import { loggableMessage } from '../observability/database-errors.js';
import { logger } from '../observability/logger.js';
import { type Keys, UnsealError } from '../platform/secrets/crypto.js';
import { Batches } from './batches.js';
import { type ClaimedRow, closeRow, type HeldBatch, type IntegrationColumns, integrationColumns, materialiseRows, readIntegration, renewLease, takeLease } from './journal.js';
import { type AttemptOutcome, CLOSED_REASON, TENANT_INACTIVE_REASON } from './model.js';
import { OutcomeWriter } from './outcome-writer.js';
import type { Job, SlotPool } from '../concurrency/slot-pool.js';
import { inCurrentContext } from '../observability/context.js';
import { openIntegrationSecret } from './secret.js';
import type { WebhookSender } from './sender.js';
import { deliveryRequest } from './signing.js';

/**
 * Makes delivery attempts. Every attempt works on a row this worker holds under a lease (a token
 * written when the row was inserted or claimed): it renews the lease and reads the row with its
 * integration in one short statement, sends with no transaction open, and writes the outcome back
 * (through the OutcomeWriter, in batches). A deleted integration, or for event deliveries a
 * disabled or no longer matching one, closes the row instead (spec 1 Errors: the closing reason), as
 * does a deactivated tenant (TENANT_INACTIVE_REASON).
 * A worker that dies mid-attempt, or before the outcome was written, writes nothing back: its lease
 * runs out and the retry sweep claims the row again.
 *
 * A first attempt queued by the webhook consumer comes with a `Claim`: the statement that matched
 * it reserved its row's id, leased its batch (hub.delivery_batches) and read its integration. Its
 * row is written once, after the attempt, whole with its outcome (OutcomeWriter `addFirst`: no
 * update of the row); an attempt that will not send on the Claim (too old, below; left to the sweep;
 * dropped by a stop; a row to close) writes it as the consumer recorded rows before
 * (`materialise`), and one whose outcome is not written (a stop, a failure) leaves the batch row
 * for the retry sweep, which writes the rows still missing once the batch's lease runs out (the
 * batch's lease is renewed every half lease while this process holds the batch: `Batches`). It
 * does not renew the lease while the Claim is younger than a quarter of the lease (the attempt,
 * connect and exchange timeouts included, ends well inside the lease: older, its row is written
 * leased and the attempt goes on as a retry's), and it takes its integration from the newest read this worker has of it: the
 * Claim's, or a read again (one statement per integration, shared by the attempts starting
 * meanwhile) once that is `freshMs` old or an integration was changed through this process since.
 * So a change made through this process stops queued first attempts at once, one made elsewhere
 * (a tenant deactivated, too: its state is read with the integration) within `freshMs`, and a
 * backlog costs one read per integration and `freshMs`, not one per attempt.
 */

interface WorkerOptions {
  db: Database;
  /** The master keys integration secrets open with (current, then previous ones). */
  key: Keys;
  sender: WebhookSender;
  pool: SlotPool;
  leaseMs: number;
  /** How long a read of an integration stands for the first attempts of Claims; default the lesser of 1 s and a quarter of the lease. */
  freshMs?: number;
  /** Outcome batching (OutcomeWriter); defaults below. */
  outcomes?: { delayMs?: number; maxBatch?: number; maxPending?: number };
}

/**
 * A row the consumer has just recorded under a lease, with its integration read in the same
 * statement: the first attempt may use it instead of renewing the lease and reading (see
 * DeliveryWorker).
 */
export interface Claim {
  row: ClaimedRow;
  /** `DeliveryWorker.stamp()` taken before that statement started. */
  stamp: ClaimStamp;
  /**
   * The consumer's batch whose row stands for this first attempt's (hub.delivery_batches): the row
   * is not written yet, only its id reserved; the attempt's outcome writes it whole, or it is
   * materialised (`materialise`). None: the row exists, leased under the Claim's token.
   */
  batch?: HeldBatch;
}

/** Whose attempt: its integration (the pool's lane) and that integration's tenant (the lane's group, `svc.webhook.concurrency-per-tenant`). */
export interface AttemptTarget {
  tenantId: number;
  integrationId: number;
}

interface ClaimStamp {
  /** performance.now() */
  at: number;
  /** Integration changes this process had seen. */
  changes: number;
}

const FRESH_MS = 1_000;
/** Integrations whose reads are kept at most (beyond, the reads are dropped and made again). */
const SNAPSHOTS_MAX = 10_000;
/**
 * Outcomes: the longest wait for a batch while other attempts are under way, rows per statement,
 * and waiting at most before attempts wait for room.
 */
const OUTCOME_DELAY_MS = 20;
const OUTCOME_BATCH = 500;
const OUTCOME_PENDING = 2_000;

/** A read of an integration: when it started (performance.now()) and the integration changes seen then. */
interface Snapshot {
  columns: IntegrationColumns;
  at: number;
  changes: number;
  /** The Claims' statement it was read in, when it was. */
  stamp?: ClaimStamp;
}

type AttemptResult = { kind: 'attempted'; outcome: AttemptOutcome; attempts: number } | { kind: 'closed' } | { kind: 'lost' };

/** A pool's attempt whose request is under way (`pooledAttempt`). */
interface PooledSend {
  row: ClaimedRow;
  id: number;
  token: string;
  /** When its lease began at the latest (the Claim's statement, or its last renewal). */
  leasedAt: number;
  keeper: { stop(): number } | undefined;
  /** The pool's end of the job. */
  done: () => void;
  /** The request was handed to the sender (an answer before that came at once: no request made). */
  dispatched: boolean;
  /** A Claim's batch, its row not written yet (the outcome writes it whole). */
  batch: HeldBatch | undefined;
}

/** What an attempt does with its row: close it (and log why), record a fault without sending, or send these headers. */
type Step = { close: string; why: string } | { fault: AttemptOutcome } | { headers: Record<string, string>; secret: string | undefined };

/** An attempt that found its row no longer this worker's, or gave it back (stopping). */
const LOST: { result: AttemptResult } = Object.freeze({ result: Object.freeze({ kind: 'lost' as const }) });
/** The job of an attempt queued as the worker stopped: nothing to do. */
const NOTHING = Promise.resolve();

/** A fault recorded instead of sending (no secret for the mode, or one that cannot be opened). */
function faultStep(error: string): Step {
  return { fault: { ok: false, httpStatus: null, responseBody: null, error, durationMs: 0, attemptedAt: new Date() } };
}

/** `job` with `onDone` called once it ended, however it ends (its promise, or its `done`). */
function withEnd(job: Job, onDone: () => void): Job {
  return (done) => {
    const running = job(() => {
      onDone();
      done();
    });
    return running?.finally(onDone);
  };
}

/**
 * The logger of one attempt. A function of the module, not a closure made in each attempt: the
 * source checkout runs through tsx, whose transform names every such closure with a property
 * definition, a few microseconds per delivery in a drain's profile.
 */
function attemptLog(row: ClaimedRow, deliveryId: number) {
  return logger().child({ tenant: String(row.tenant_id), integrationId: row.integration_id, deliveryId, eventType: row.event_type });
}

export class DeliveryWorker {
  private stopping = false;
  private readonly abort = new AbortController();
  private readonly running = new Set<Promise<unknown>>();
  /** The pool's attempts under way (`run`, pooled), and who waits for there to be none (stop()). */
  private pooledRuns = 0;
  private pooledIdle: { promise: Promise<void>; resolve: () => void } | undefined;
  /**
   * Attempts queued in the pool and not started: delivery id → lease token (released on stop), or
   * the Claim of a first attempt whose row is not written yet (materialised on stop).
   */
  private readonly queued = new Map<number, string | Claim>();
  /** The consumer's batches this process holds. */
  readonly batches: Batches;

  /**
   * Single statements in autocommit as the worker role: each step of an attempt is one statement
   * (renew the lease and read, close, write back), so no transaction needs opening around it.
   */
  private readonly direct: Tx;
  private readonly outcomes: OutcomeWriter;
  private readonly freshMs: number;
  /** Integration changes made through this process (`integrationChanged`): older reads no longer stand. */
  private changes = 0;
  /** The newest read of each integration (for Claims), and the reads under way. */
  private readonly snapshots = new Map<number, Snapshot>();
  private readonly reading = new Map<number, { changes: number; read: Promise<Snapshot | undefined> }>();

  constructor(private readonly o: WorkerOptions) {
    this.direct = { tenantId: undefined, query: (text, values) => o.db.worker.query(text, values as unknown[]) };
    this.freshMs = o.freshMs ?? Math.min(FRESH_MS, o.leaseMs / 4);
    this.batches = new Batches(this.direct, o.leaseMs);
    this.outcomes = new OutcomeWriter({
      batches: this.batches,
      tx: this.direct,
      delayMs: o.outcomes?.delayMs ?? OUTCOME_DELAY_MS,
      maxBatch: o.outcomes?.maxBatch ?? OUTCOME_BATCH,
      maxPending: o.outcomes?.maxPending ?? OUTCOME_PENDING,
      // The pool's jobs running or queued, this attempt's own among them.
      othersUnderWay: () => o.pool.size() - 1,
      // An outcome waiting to be written keeps its row's lease, as the attempt did.
      leaseMs: o.leaseMs,
    });
  }

  /** Take before the statement that matches the events whose Claims go to `submit`. */
  stamp(): ClaimStamp {
    return { at: performance.now(), changes: this.changes };
  }

  /** An integration was changed or deleted through this process: Claims read before no longer stand. */
  integrationChanged(): void {
    this.changes++;
  }

  /**
   * Queues an attempt in its integration's lane of the pool (the tenant's cap applies: it starts
   * when its integration and its tenant both have a free slot); false when the integration's queue
   * is full (the row waits for its lease to run out and the retry sweep). `onDone` is called when
   * the queued attempt's job ends (not when it is dropped because the worker stops).
   */
  submit(target: AttemptTarget, deliveryId: number, token: string, claim?: Claim, onDone?: () => void): boolean {
    if (this.stopping) return false;
    const job = this.job(deliveryId, token, claim);
    // Noted before the offer: the pool may start the job at once, which forgets it again.
    this.queued.set(deliveryId, claim?.batch ? claim : token);
    const taken = this.o.pool.offer(target.integrationId, onDone ? withEnd(job, onDone) : job, target.tenantId);
    if (!taken) this.queued.delete(deliveryId);
    return taken;
  }

  isStopping(): boolean {
    return this.stopping;
  }

  /** Whether the integration's queue is full now (an attempt offered would be refused). */
  queueFull(integrationId: number): boolean {
    return this.o.pool.isFull(integrationId);
  }

  /**
   * Like `submit` for several first attempts of one integration, in order (each Claim's row), waiting
   * up to `waitMs` in all for room as its queue frees, unless it is stalled (SlotPool.offerEach).
   * Resolves with how many were queued: the first ones; the rest were not (nor, once the worker
   * stops, any more).
   */
  submitEach(target: AttemptTarget, claims: readonly Claim[], token: string, waitMs: number): Promise<number> {
    if (this.stopping) return Promise.resolve(0);
    const make = (index: number) => {
      if (this.stopping) return undefined;
      const claim = claims[index]!;
      // Noted before the offer, as in `submit`.
      this.queued.set(claim.row.id, claim.batch ? claim : token);
      return this.job(claim.row.id, token, claim);
    };
    return this.o.pool.offerEach(target.integrationId, claims.length, make, waitMs, target.tenantId);
  }

  /**
   * A job of the pool: the attempt, then the outcome handed to the writer (`pooledAttempt`: no
   * promise at all for a Claim's first attempt, otherwise `run`, the job's one async function). The job (and its slot of the integration)
   * ends when the answer came back, not when the outcome is written, unless the writer is full.
   */
  private job(deliveryId: number, token: string, claim?: Claim): Job {
    return (done) => {
      // Queued just as the worker stopped: its lease is released by stop() for the retry sweep.
      if (this.stopping) return NOTHING;
      // Forgotten only if the entry is this attempt's: the row may have been queued again meanwhile
      // under a newer lease (a later sweep's claim), whose lease a stop must still give back.
      const queued = this.queued.get(deliveryId);
      if (queued === token || (queued === claim && claim !== undefined)) this.queued.delete(deliveryId);
      return this.pooledAttempt(deliveryId, token, claim, done);
    };
  }

  /**
   * A pool's attempt. The usual one, a Claim's first attempt that sends, runs without a promise: its
   * row and request made at once, the answer a callback (`sendThen`, in the job's context), the
   * outcome handed to the writer, then `done` (after the writer has room). Every other (a retry, a
   * Claim read again or too old, a row to close, a fault to record) is `run`'s, as the job's promise.
   */
  private pooledAttempt(id: number, token: string, claim: Claim | undefined, done: () => void): Promise<unknown> | undefined {
    let row: ClaimedRow;
    let step: Step;
    try {
      const claimed = this.fromClaim(claim, id);
      if (claimed === undefined || claimed instanceof Promise) return this.run(id, token, claim, true, claimed);
      row = claimed;
      step = this.prepare(row, id);
    } catch (err) {
      this.runFailed(err, id, claim?.batch);
      return NOTHING;
    }
    if (!('headers' in step)) return this.run(id, token, claim, true, row);
    this.pooledRuns++;
    // Its state in one object and its steps methods, not closures made per attempt: the source
    // checkout's transform (tsx) names every closure assigned to a name with a property definition.
    const batch = claim!.batch;
    const sending: PooledSend = { row, id, token, leasedAt: claim!.stamp.at, keeper: undefined, done, dispatched: false, batch };
    // An exchange that may outlast half the lease renews it meanwhile (none with the defaults: 15 s of
    // 60); a row not written yet has its batch's lease, which its batch renews.
    if (!batch) sending.keeper = this.keepLease(id, token, sending.leasedAt);
    this.o.sender.sendThen(
      row.target_url,
      step.headers,
      row.body,
      this.abort.signal,
      step.secret ? [step.secret] : [],
      inCurrentContext((outcome: AttemptOutcome) => this.answered(sending, outcome)),
    );
    sending.dispatched = true;
    return undefined;
  }

  /** The answer (or failure) of a `pooledAttempt`'s request: the outcome to the writer, then the job's end. */
  private answered(sending: PooledSend, outcome: AttemptOutcome): void {
    let room: Promise<void> | undefined;
    let settled = false;
    try {
      if (sending.keeper) sending.leasedAt = sending.keeper.stop();
      // Stopping: the lease brings the row back to a live process; record nothing (as `run`).
      if (this.lostToStop(outcome, sending.row, sending.batch)) settled = true;
      else {
        settled = true;
        this.record(sending.row, sending.id, sending.token, outcome, sending.leasedAt, true, sending.batch);
        room = this.outcomes.room();
      }
    } catch (err) {
      this.runFailed(err, sending.id, settled ? undefined : sending.batch);
    }
    // The job ends here: it waits while the writer is full (backpressure on the attempts). An
    // outcome that came before any request went (a bad URL) ends it on a later turn: the pool
    // would start the next job from inside this one's start, and a queue of such attempts would
    // nest as deep as it is long.
    if (room) room.then(() => this.sent(sending), () => this.sent(sending));
    else if (sending.dispatched) this.sent(sending);
    else queueMicrotask(() => this.sent(sending));
  }

  /** A `pooledAttempt` is over. */
  private sent(sending: PooledSend): void {
    this.pooledEnded();
    sending.done();
  }

  /** An outcome of the pool's attempts that could not be written. */
  private writeFailed(err: unknown, deliveryId: number): void {
    // The row keeps its lease and comes back to the retry sweep (the attempt is made again).
    if (!this.stopping) logger().error({ err, deliveryId }, 'writing a delivery outcome failed; the retry sweep takes the row up after its lease');
  }

  /**
   * One attempt now, outside the pool and its caps, its outcome written (the test operation waits
   * for it: its caller's request holds it, one exchange timeout at most; it takes no slot of the pool).
   */
  async attempt(deliveryId: number, token: string): Promise<AttemptResult> {
    const { result, written } = await this.track(this.run(deliveryId, token));
    if (result.kind !== 'attempted' || !written) return result;
    const attempts = await written;
    return { ...result, attempts: attempts ?? result.attempts };
  }

  private track<T>(run: Promise<T>): Promise<T> {
    this.running.add(run);
    // One reaction for both ends (not finally + catch: every promise costs the process's
    // async-context hooks, several per delivery in a drain).
    const forget = () => {
      this.running.delete(run);
    };
    run.then(forget, forget);
    return run;
  }

  /**
   * The row of a Claim with its integration as fresh as `freshMs` (see the class comment);
   * undefined when the Claim is too old for its lease (renew and read instead).
   */
  private fromClaim(claim: Claim | undefined, id: number): ClaimedRow | Promise<ClaimedRow | undefined> | undefined {
    if (!claim || claim.row.id !== id) return undefined;
    if (performance.now() - claim.stamp.at >= this.o.leaseMs / 4) return undefined;
    const integrationId = claim.row.integration_id;
    let snapshot = this.snapshots.get(integrationId);
    if (claim.stamp.changes === this.changes && (!snapshot || claim.stamp.at > snapshot.at)) {
      snapshot = { columns: integrationColumns(claim.row), at: claim.stamp.at, changes: claim.stamp.changes, stamp: claim.stamp };
      this.remember(integrationId, snapshot);
    }
    if (!snapshot || snapshot.changes !== this.changes || performance.now() - snapshot.at >= this.freshMs) {
      return this.readAgain(integrationId).then((fresh) => (fresh ? { ...claim.row, ...fresh.columns } : undefined));
    }
    // The newest read is the one of the Claim's own statement: the row carries it already.
    if (snapshot.stamp === claim.stamp) return claim.row;
    return { ...claim.row, ...snapshot.columns };
  }

  /** Reads an integration again; the attempts that need it meanwhile share the read (one started after the last change). */
  private readAgain(integrationId: number): Promise<Snapshot | undefined> {
    const underWay = this.reading.get(integrationId);
    if (underWay && underWay.changes === this.changes) return underWay.read;
    const at = performance.now();
    const changes = this.changes;
    const read = readIntegration(this.direct, integrationId)
      .then((columns) => {
        if (!columns) return undefined;
        const snapshot = { columns, at, changes };
        this.remember(integrationId, snapshot);
        return snapshot;
      })
      .finally(() => {
        if (this.reading.get(integrationId)?.read === read) this.reading.delete(integrationId);
      });
    this.reading.set(integrationId, { changes, read });
    return read;
  }

  private remember(integrationId: number, snapshot: Snapshot): void {
    const current = this.snapshots.get(integrationId);
    if (current && current.at >= snapshot.at) return;
    if (!current && this.snapshots.size >= SNAPSHOTS_MAX) this.snapshots.clear();
    this.snapshots.set(integrationId, snapshot);
  }

  /**
   * One attempt. Its outcome goes to the writer: for the pool's attempts (`pooled`) without a promise
   * to wait on, otherwise as `written`. A pool's attempt that `pooledAttempt` leaves to it is its
   * job's one async function: it is
   * counted for stop() (`pooledRuns`), waits for room in the writer before it ends, and never
   * rejects (a database failure is logged; the row keeps its lease and comes back to the retry sweep).
   */
  private async run(
    id: number,
    token: string,
    claim?: Claim,
    pooled = false,
    /** `fromClaim(claim, id)`, which the pool's attempts made already (none without a Claim). */
    claimed?: ClaimedRow | Promise<ClaimedRow | undefined>,
  ): Promise<{ result: AttemptResult; written?: Promise<number | undefined> }> {
    if (pooled) this.pooledRuns++;
    // A Claim's first attempt whose row is not written yet (its batch's): settled once its row is
    // written or handed to the writer (then `batch` is undefined), or on failure (`runFailed`).
    let batch = claim?.row.id === id ? claim.batch : undefined;
    try {
      let row = claimed instanceof Promise ? await claimed : claimed;
      // When the lease this attempt holds began, at the latest: the Claim's statement, or the renewal here.
      let leasedAt: number;
      if (row) leasedAt = claim!.stamp.at;
      else {
        leasedAt = performance.now();
        if (batch) {
          // Too old to send on the Claim's read (or its integration gone): its row is written,
          // leased, and the attempt goes on as one of a row's.
          const last = this.batches.closesWith(batch, 1);
          await materialiseRows(this.direct, [claim!.row], { token, leaseMs: this.o.leaseMs }, null, last ? [batch.id] : []);
          this.batches.settle(batch, 1, true, last);
          batch = undefined;
        }
        row = await takeLease(this.direct, id, token, this.o.leaseMs);
      }
      if (!row) return LOST;
      const step = this.prepare(row, id);
      if ('close' in step) {
        if (batch) {
          const last = this.batches.closesWith(batch, 1);
          await materialiseRows(this.direct, [row], undefined, step.close, last ? [batch.id] : []);
          this.batches.settle(batch, 1, true, last);
          batch = undefined;
        } else await closeRow(this.direct, id, token, step.close);
        attemptLog(row, id).info(step.why);
        return { result: { kind: 'closed' } };
      }
      let outcome: AttemptOutcome;
      if ('fault' in step) outcome = step.fault;
      else {
        // An exchange that may outlast half the lease renews it meanwhile (none with the defaults: 15 s
        // of 60); a row not written yet has its batch's lease, which its batch renews.
        const keeper = batch ? undefined : this.keepLease(id, token, leasedAt);
        outcome = await this.o.sender.send(row.target_url, step.headers, row.body, this.abort.signal, step.secret ? [step.secret] : []);
        if (keeper) leasedAt = keeper.stop();
        if (this.lostToStop(outcome, row, batch)) {
          batch = undefined;
          return LOST;
        }
      }
      const first = batch;
      batch = undefined;
      const written = this.record(row, id, token, outcome, leasedAt, pooled, first);
      if (pooled) {
        // The pool's job ends here: it waits while the writer is full (backpressure on the attempts).
        const room = this.outcomes.room();
        if (room) await room;
      }
      return { result: { kind: 'attempted', outcome, attempts: row.attempts + 1 }, written };
    } catch (err) {
      if (!pooled) throw err;
      this.runFailed(err, id, batch);
      return LOST;
    } finally {
      if (pooled) this.pooledEnded();
    }
  }

  /**
   * What an attempt does with its row: a deactivated tenant, or a deleted, disabled or no longer
   * matching integration, closes it; a secret that cannot be opened or is missing for the mode is a
   * fault recorded without sending; otherwise the request's headers (signed), and the secret the
   * answer is masked for (an echo service quoting it: the journal and the test answer show `[REDACTED]`).
   */
  private prepare(row: ClaimedRow, id: number): Step {
    // A deactivated tenant sends nothing more: a row claimed or queued before it was deactivated closes instead.
    if (!row.tenant_active) return { close: TENANT_INACTIVE_REASON, why: 'delivery closed: its tenant was deactivated' };
    const gone = row.deleted || (row.kind === 'event' && (!row.enabled || !patternsMatch(row.event_types, row.event_type)));
    if (gone) return { close: CLOSED_REASON, why: 'delivery closed: the integration was deleted, disabled or no longer matches' };
    let secret: string | undefined;
    try {
      secret = openIntegrationSecret(this.o.key, row.tenant_id, row.integration_id, row);
    } catch (err) {
      if (!(err instanceof UnsealError)) throw err;
      return faultStep('the integration secret cannot be decrypted (was svc.secret.master-key changed without the earlier key in svc.secret.previous-master-keys?)');
    }
    const request = deliveryRequest({
      eventType: row.event_type,
      eventId: row.event_id,
      deliveryId: id,
      body: row.body,
      authMode: row.auth_mode,
      secret,
      standardWebhooks: row.standard_webhooks,
    });
    return 'fault' in request ? faultStep(request.fault) : { headers: request.headers, secret };
  }

  /**
   * Stopping, an attempt cut short (aborted, no answer): the lease brings the row back to a live
   * process, so nothing is recorded. Except a test, which is never retried: its attempt is recorded
   * as it ended (`aborted: the process is stopping`).
   */
  private lostToStop(outcome: AttemptOutcome, row: ClaimedRow, batch?: HeldBatch): boolean {
    if (!this.stopping || outcome.ok || outcome.httpStatus !== null || row.kind === 'test') return false;
    // A row not written yet: its batch row stays, and the retry sweep writes the row once its lease runs out.
    if (batch) this.batches.settle(batch, 1, false);
    return true;
  }

  /**
   * Hands an attempt's outcome to the writer (the pool's with callbacks; otherwise as the promise
   * returned) and logs it. The writer keeps the lease from `leasedAt` (renewed at half of it) until
   * the outcome is written.
   */
  private record(row: ClaimedRow, id: number, token: string, outcome: AttemptOutcome, leasedAt: number, pooled: boolean, batch?: HeldBatch): Promise<number | undefined> | undefined {
    let written: Promise<number | undefined> | undefined;
    if (batch) this.outcomes.addFirst(row, batch, outcome);
    else if (pooled) this.outcomes.add(id, token, outcome, undefined, (err) => this.writeFailed(err, id), leasedAt);
    else written = this.outcomes.write(id, token, outcome, leasedAt);
    if (outcome.ok) {
      if (logger().isLevelEnabled('debug')) attemptLog(row, id).debug({ status: outcome.httpStatus, ms: outcome.durationMs }, 'delivered');
    } else attemptLog(row, id).info({ status: outcome.httpStatus, error: outcome.error, attempt: row.attempts + 1 }, 'delivery attempt failed');
    return written;
  }

  /**
   * A pool's attempt that failed to run (a database failure): the row keeps its lease and comes back
   * to the retry sweep; a row not written yet (`batch`) is written by the sweep once its batch's lease runs out.
   */
  private runFailed(err: unknown, id: number, batch?: HeldBatch): void {
    if (batch) this.batches.settle(batch, 1, false);
    if (!this.stopping) logger().error({ err, deliveryId: id }, 'delivery attempt failed to run; the retry sweep takes it up after its lease');
  }

  /** A pool's attempt is over: stop() may be waiting for the last one. */
  private pooledEnded(): void {
    if (--this.pooledRuns === 0 && this.pooledIdle) {
      this.pooledIdle.resolve();
      this.pooledIdle = undefined;
    }
  }

  /**
   * While an attempt's exchange may outlast half of the lease it holds (from `leasedAt`: the
   * exchange timeouts together above half the lease, or a Claim already that old), its lease is
   * renewed every half lease until the answer comes, so that no retry sweep, here or in another
   * process, claims the row while its attempt is under way and sends it a second time at once.
   * Undefined (no timer) when the attempt ends within half the lease whatever happens: the default
   * configuration (an exchange of 15 s at most, a lease of 60 s) never needs one. `stop` answers
   * when the lease began at the latest (its last renewal that answered, or `leasedAt`): the outcome
   * writer keeps it from there.
   */
  private keepLease(id: number, token: string, leasedAt: number): { stop(): number } | undefined {
    const half = this.o.leaseMs / 2;
    const due = leasedAt + half - performance.now();
    if (this.o.sender.exchangeMs < due) return undefined;
    let timer: NodeJS.Timeout | undefined;
    let stopped = false;
    let renewedAt = leasedAt;
    const renew = () => {
      const issued = performance.now();
      renewLease(this.direct, id, token, this.o.leaseMs).then(
        () => {
          renewedAt = Math.max(renewedAt, issued);
          if (!stopped) timer = setTimeout(renew, Math.max(0, issued + half - performance.now()));
        },
        (err: unknown) => {
          if (stopped) return;
          logger().warn({ err: loggableMessage(err), deliveryId: id }, 'renewing the lease of a delivery attempt under way failed; trying again');
          timer = setTimeout(renew, half / 2);
        },
      );
    };
    timer = setTimeout(renew, Math.max(0, due));
    return {
      stop: () => {
        stopped = true;
        clearTimeout(timer);
        return renewedAt;
      },
    };
  }

  /**
   * Queued attempts are dropped and their leases released at once (the next retry sweep, here or in
   * the next leader, takes their rows up); running ones are aborted, their rows coming back when
   * their leases run out (the request may have reached the receiver). Outcomes of attempts made are
   * written first.
   */
  async stop(): Promise<void> {
    this.stopping = true;
    this.o.pool.clear();
    this.abort.abort(new Error('stopping'));
    await Promise.allSettled([...this.running, this.whenPooledIdle()]);
    await this.outcomes.flush().catch(() => undefined);
    await this.releaseQueued();
    await this.o.sender.close();
  }

  /** Resolves when none of the pool's attempts is under way (undefined: none is now). */
  private whenPooledIdle(): Promise<void> | undefined {
    if (this.pooledRuns === 0) return undefined;
    if (!this.pooledIdle) {
      let resolve!: () => void;
      const promise = new Promise<void>((r) => {
        resolve = r;
      });
      this.pooledIdle = { promise, resolve };
    }
    return this.pooledIdle.promise;
  }

  /**
   * Frees the leases of the attempts that were queued and never started (a database gone meanwhile:
   * they run out instead); the rows of first attempts not written yet are written with no lease.
   * Either way the next retry sweep takes them up at once.
   */
  private async releaseQueued(): Promise<void> {
    const entries: Array<[number, string]> = [];
    const claims: Claim[] = [];
    for (const [id, queued] of this.queued) {
      if (typeof queued === 'string') entries.push([id, queued]);
      else claims.push(queued);
    }
    this.queued.clear();
    await this.materialise(claims);
    if (entries.length === 0) return;
    try {
      await this.direct.query(
        `update hub.deliveries d set lease_until = null, lease_token = null
           from unnest($1::bigint[], $2::uuid[]) as q(id, token) where d.id = q.id and d.lease_token = q.token`,
        [entries.map(([id]) => id), entries.map(([, token]) => token)],
      );
    } catch (err) {
      logger().warn({ err: loggableMessage(err), deliveries: entries.length }, 'queued delivery attempts could not be released at stop; their leases run out instead');
    }
  }

  /**
   * Writes the rows of first attempts that will not be made here (Claims whose rows are not written
   * yet: left to the retry sweep, or dropped as the worker stops) with no lease, for the next retry
   * sweep; the batch rows whose last rows they are go in the same statement. A failure leaves them
   * to the sweep's expansion of their batches once the batches' leases run out.
   */
  async materialise(claims: readonly Claim[]): Promise<void> {
    if (claims.length === 0) return;
    const counts = new Map<HeldBatch, number>();
    for (const claim of claims) if (claim.batch) counts.set(claim.batch, (counts.get(claim.batch) ?? 0) + 1);
    const done: number[] = [];
    for (const [batch, n] of counts) if (this.batches.closesWith(batch, n)) done.push(batch.id);
    let written = false;
    try {
      await materialiseRows(this.direct, claims.map((c) => c.row), undefined, null, done);
      written = true;
    } catch (err) {
      logger().warn({ err: loggableMessage(err), deliveries: claims.length }, 'first delivery attempts left to the retry sweep could not be written; the sweep writes them once their batches\' leases run out');
    }
    for (const [batch, n] of counts) this.batches.settle(batch, n, written, written && done.includes(batch.id));
  }
}
