import { DigestStream } from './csv/digest.js';
import { type CredentialSources, createCredentialResolver } from '../connectors/auth/resolver.js';
import { CredentialUnreadableError } from '../connectors/engine/errors.js';
import type { Database, TenantId, Tx } from '../db/database.js';
import type { EgressPolicy } from '../egress/policy.js';
import { entityRelation, EntityDefinitionError } from '../entities/relation.js';
import { loadEntity } from '../entities/store.js';
import { ConflictError } from '../errors.js';
import { dataErrorCode, describeDataError, END_NOT_STORED } from '../db/data-errors.js';
import { isDatabaseUnavailable } from '../db/unavailable.js';
import { runForTenant } from '../observability/context.js';
import { loggableMessage } from '../observability/database-errors.js';
import { logger, storableMessage } from '../observability/logger.js';
import { SlotPool } from '../concurrency/slot-pool.js';
import { type CsvSnapshot, csvSnapshot } from './csv/writer.js';
import type { Destination } from './destinations/destination.js';
import { LeftBehind, PublishError } from './destinations/destination.js';
import { shapeOf } from './entity-shape.js';
import { bareHost, checkAgainstEntity, storedIssue } from './manifest/validate.js';
import {
  ALREADY_DELIVERED,
  type Claim,
  type ClaimTarget,
  CLEANED_UP,
  claimRun,
  completeRun,
  type ExportRun,
  failRun,
  type FailureOrigin,
  getRun,
  heartbeat,
  lockRunning,
  type Receipt,
  wasSwept,
  runById,
  runStart,
  slotDelivered,
  type StopRequest,
} from './runs/ledger.js';
import { type ExportDetail, getExportById } from './store.js';
import { objectKey, resolveTokens } from './tokens.js';
import type { ExportSpec, FailureCode } from './types.js';

/**
 * Executes export runs (spec 3 "Export run"): a run is claimed (one in flight per export), then,
 * in the background, its definition is checked again before any byte moves (the entity, its
 * scope, its columns, its source tables), the credentials are resolved from the tenant's secret
 * store, and the snapshot is streamed from PostgreSQL through the CSV writer and a digest straight
 * to the destination, which publishes it atomically without overwriting. Exactly one of Completed
 * (with the receipt) or Failed (with a failure code and a reason a person can act on, never a
 * credential or a raw third-party message) ends each run. While it runs, a heartbeat records the
 * rows and bytes so far and proves the process alive; a run whose process dies is failed as
 * `interrupted` by the sweep (services.ts).
 */

export interface ExportRunnerOptions {
  db: Database;
  sources: CredentialSources;
  egress: EgressPolicy;
  heartbeatEveryMs: number;
  /** Snapshot generation time limit (spec 3: 30 minutes). */
  timeoutMs: number;
  /** Test hook: the S3 part size (default 8 MiB). */
  s3PartSize?: number;
  /**
   * Runs streaming at once in this process (each holds a database connection of the pool for its
   * snapshot), in all and per tenant (`svc.export.concurrency`, `svc.export.concurrency-per-tenant`);
   * further runs wait, tenants taking turns. Defaults 4 and 2.
   */
  concurrency?: { total: number; perTenant: number };
}

/** How a run ended, as this process saw it; `origin` decides how the reason is masked (ledger.ts, `FailureOrigin`). */
type Failure = { code: FailureCode; reason: string; origin: FailureOrigin };
type RunOutcome = Failure | { receipt: Receipt };

/** Records a run's end; a run that has ended already (swept meanwhile) keeps its record. */
async function record(tx: Tx, runId: string, outcome: RunOutcome): Promise<void> {
  if ('receipt' in outcome) await completeRun(tx, runId, outcome.receipt);
  else await failRun(tx, runId, outcome.code, outcome.reason, outcome.origin);
}

/**
 * The end to write instead of `outcome`, which PostgreSQL refused for a value it holds (SQLSTATE
 * `sqlState`, class 22 or 23: the same statement would be refused again); undefined when nothing is
 * left to leave out. A published file stays Completed as long as its receipt can be stored: first
 * without the ETag and version id (the only texts of the receipt the destination chose); the run's
 * rows, bytes, digest and location are the hub's own. Else the run ends Failed `record`, with a
 * reason quoting nothing of what was refused, and saying so when the file was published (a retry then
 * meets a collision) or which failure it had.
 */
function storableEnd(outcome: RunOutcome, sqlState: string): RunOutcome | undefined {
  const refused = `${END_NOT_STORED}: ${describeDataError(sqlState)}`;
  if ('receipt' in outcome) {
    const { etag, versionId, ...kept } = outcome.receipt;
    if (etag !== undefined || versionId !== undefined) return { receipt: kept };
    return { code: 'record', reason: `${refused}; its file was published at the destination, so a retry ends in collision`, origin: 'hub' };
  }
  if (outcome.code === 'record') return undefined;
  return { code: 'record', reason: `${refused}; the run had failed ${outcome.code}`, origin: 'hub' };
}

/** Why a run stops when its record says it has ended (only logged: the record keeps its own reason). */
const ENDED_ELSEWHERE = 'the run was failed as interrupted while it ran (its heartbeats were held up past svc.export.run-stale-after); it stopped and published nothing';

/**
 * The run's publication lock (`lockRunning`) held from just before its file appears until its end
 * is recorded, in one transaction: the interrupted-run sweep skips a run whose lock is held, so it
 * cannot fail a run that is publishing, and a run it failed before (its heartbeats held up by a stalled database or a full
 * pool) finds its record ended here and publishes nothing. Without it, a run failed as
 * `interrupted` could still publish its file, its receipt lost. A crash between the publication and
 * the commit releases the lock with the run still Running: the sweep then fails it, file published
 * (what `interrupted` warns of: a retry meets a collision).
 */
class PublicationFence {
  /** True: locked and Running; false: the run had ended; an Error: the check could not be made. */
  readonly admitted: Promise<boolean | Error>;
  /** Admitted, and the transaction waits for the run's end. */
  holding = false;
  private readonly done: Promise<ExportRun | undefined>;
  private settle: (outcome: RunOutcome) => void = () => undefined;

  constructor(db: Database, runId: string) {
    const outcome = new Promise<RunOutcome>((resolve) => {
      this.settle = resolve;
    });
    let admit: (value: boolean | Error) => void = () => undefined;
    this.admitted = new Promise((resolve) => {
      admit = resolve;
    });
    // On the worker pool (the run's row by id), beside the snapshot's own connection: the export
    // slots leave the application pool's connections to requests, and this transaction must not
    // wait behind them.
    this.done = db.crossTenant('export-publication', async (tx) => {
      if (!(await lockRunning(tx, runId))) {
        admit(false);
        return undefined;
      }
      this.holding = true;
      admit(true);
      await record(tx, runId, await outcome);
      return runById(tx, runId);
    });
    // A failure before the admission refuses it (a later one has admitted already: no effect).
    this.done.catch((err: unknown) => admit(err instanceof Error ? err : new Error(String(err))));
  }

  /** Records the run's end in the locked transaction and commits; undefined when that failed (the caller records it again). */
  async end(outcome: RunOutcome): Promise<ExportRun | undefined> {
    this.settle(outcome);
    return this.done.catch((err: unknown) => {
      logger().warn({ err }, 'export run end could not be recorded under its lock');
      return undefined;
    });
  }
}

/** Runs waiting for a slot per tenant at most (beyond, a run fails at once rather than queue without bound). */
const WAITING_PER_TENANT = 1_000;

/** A refusal found before any byte moved. */
class RunFailure extends Error {
  constructor(
    readonly code: FailureCode,
    readonly reason: string,
    /** `tenant` when the reason quotes only what the tenant chose (a secret's name) around the hub's wording. */
    readonly origin: FailureOrigin = 'hub',
  ) {
    super(reason);
  }
}

/** The streams of a run in progress, read by its heartbeat. */
interface Progress {
  csv?: CsvSnapshot;
  digest?: DigestStream;
  /**
   * Every byte has gone to the destination and the fence admitted the publication (the run's
   * publication lock held, its record still Running): the destination is making the file appear (an S3 upload's last request,
   * an SFTP rename). Nothing stops the run from then on (a cancel, the hub stopping, the time limit):
   * it ends as the publication does. Cut there, the file could be published with the run recorded Failed.
   */
  committing?: boolean;
}

export interface Started {
  run: ExportRun;
  /** Resolves with the run as it ended. */
  done: Promise<ExportRun>;
}


/**
 * The failure a stop asked for ends a run with: its reason is the hub's wording around what the
 * tenant chose (the name of the user who cancelled), masked as tenant text (`FailureOrigin`), as
 * the other failures quoting the tenant's names are: masked with the hub's own credentials, a user
 * named after a guess at one showed `[REDACTED]` when the guess was right.
 */
function stopFailure(stop: StopRequest): RunFailure {
  return new RunFailure(stop.code, stop.reason, 'tenant');
}

/** A run's snapshot to stream and publish (`generateAndPublish`); `callerScope` as `launch` has it. */
interface StreamJob {
  tenantId: number;
  run: ExportRun;
  progress: Progress;
  signal: AbortSignal;
  beforeCommit: () => Promise<void>;
  callerScope: string | undefined;
}

/** Reads the export in the claim's transaction and checks that the caller holds its scope (services.ts). */
type CheckedForCaller = (tx: Tx) => Promise<ExportDetail>;

/** What a claim records of the export it is for. */
function claimTarget(exp: ExportDetail): ClaimTarget {
  return { exportId: exp.id, exportName: exp.name, entity: exp.entity, scope: exp.scope, destination: exp.destination };
}

export class ExportRunner {
  private readonly running = new Map<string, { controller: AbortController; progress: Progress; done: Promise<ExportRun> }>();
  private closed = false;
  /** The streaming slots (see ExportRunnerOptions.concurrency). */
  private readonly slots: SlotPool;
  private readonly slotCount: number;

  constructor(private readonly options: ExportRunnerOptions) {
    this.slotCount = options.concurrency?.total ?? 4;
    this.slots = new SlotPool(this.slotCount, options.concurrency?.perTenant ?? 2, WAITING_PER_TENANT);
  }

  /**
   * `work` once a slot is free for the tenant. A run waiting for one is Running with no rows yet
   * (its heartbeat goes on); its time limit starts with the work.
   */
  private inSlot<T>(tenantId: number, runId: string, signal: AbortSignal, work: () => Promise<T>): Promise<T> {
    const refused = new RunFailure('generation', `more than ${WAITING_PER_TENANT} export runs of this tenant are waiting to start in this process; nothing was published. Retry it later`);
    const turn = whenTurn(signal, (job) => this.slots.offer(tenantId, job), work, refused);
    if (this.slots.size() > this.slotCount) logger().info({ runId }, 'export run waiting for a slot (svc.export.concurrency)');
    return turn;
  }

  /**
   * `work` once the run has its place among the process's units holding a connection for long
   * (Database.holdConnection): stopped while it waits for it (a connector's chunk writes or analytic
   * queries holding every place), it ends at once, as a run waiting for a slot does.
   */
  private withHeldConnection<T>(tenantId: number, signal: AbortSignal, work: () => Promise<T>): Promise<T> {
    return whenTurn(signal, (job) => {
      void this.options.db.holdConnection(tenantId, job);
      return true;
    }, work);
  }

  /**
   * Stops a run of this process now (POST …/cancel, its export deleted): it ends Failed with this
   * code and reason, unless it has published already. False when the run is not running here.
   */
  stop(runId: string, stop: StopRequest): boolean {
    const running = this.running.get(runId);
    if (!running) return false;
    // Publishing already, the abort does not reach the publication (execute's gate): the run ends as it does.
    running.controller.abort(stopFailure(stop));
    return true;
  }

  /** Whether this process runs the run (waiting for a slot included): its process lives. */
  runsHere(runId: string): boolean {
    return this.running.has(runId);
  }

  /** Not closed: a scheduler claims a slot only while its runner will run it. */
  get accepting(): boolean {
    return !this.closed;
  }

  /**
   * Claims a run of `exp` and starts it; 409 when one is in flight. undefined: a scheduled slot already
   * claimed. A caller's run gives `exp` as a function, which reads it and checks the caller's scope in
   * the claim's transaction: the run then streams a definition of that scope only (`callerScope`).
   */
  async start(tenantId: number, exp: ExportDetail | CheckedForCaller, claim: Claim): Promise<Started | undefined> {
    const run = await this.options.db.withTenant(tenantId, async (tx) => claimRun(tx, claimTarget(typeof exp === 'function' ? await exp(tx) : exp), claim));
    if (!run) return undefined;
    return { run, done: this.launch(tenantId, run, typeof exp === 'function' ? run.scope : undefined) };
  }

  /**
   * A new attempt of a Failed run: retryOf set, attempt plus 1, the same artifact time (so the same
   * file name: a collision then means the earlier attempt did publish). 409 for a run that is not
   * Failed, or whose scheduled slot another attempt delivered.
   */
  async retry(tenantId: number, checked: ExportDetail | CheckedForCaller, runId: string, requestedBy?: string): Promise<Started> {
    const run = await this.options.db.withTenant(tenantId, async (tx) => {
      const exp = typeof checked === 'function' ? await checked(tx) : checked;
      const previous = await getRun(tx, exp.name, runId);
      if (previous.status !== 'Failed') throw notRetryable(runId, previous.status);
      // A run of an export deleted since (the name applied again, perhaps with another destination):
      // its retry would not aim at the file it was for.
      if ((await runStart(tx, previous.id))?.exportId !== exp.id) throw deletedSince(runId, exp.name);
      if (previous.slot && (await slotDelivered(tx, exp.id, new Date(previous.slot)))) {
        throw new ConflictError(ALREADY_DELIVERED, undefined, `the slot ${previous.slot} of export ${exp.name} was delivered by another attempt`);
      }
      return claimRun(tx, claimTarget(exp), {
        trigger: previous.trigger,
        artifactTime: new Date(previous.artifactTime),
        ...(previous.slot ? { slot: new Date(previous.slot) } : {}),
        retryOf: previous.id,
        attempt: previous.attempt + 1,
        requestedBy,
      });
    });
    return { run: run!, done: this.launch(tenantId, run!, typeof checked === 'function' ? run!.scope : undefined) };
  }

  /** Aborts the runs of this process (they end Failed `interrupted`) and waits for them. */
  async close(): Promise<void> {
    this.closed = true;
    for (const { controller } of this.running.values()) controller.abort(new RunFailure('interrupted', `the hub stopped during the run; nothing was published${CLEANED_UP}. Retry it`));
    await Promise.allSettled([...this.running.values()].map((r) => r.done));
  }

  /** `callerScope`: the scope the caller who started the run held at its claim (its definition must still be of it). */
  private launch(tenantId: number, run: ExportRun, callerScope?: string): Promise<ExportRun> {
    const controller = new AbortController();
    if (this.closed) controller.abort(new RunFailure('interrupted', 'the hub was stopping when the run was claimed. Retry it'));
    const progress: Progress = {};
    // The run as its tenant's unit of work (the scheduler's job serves every tenant): see runForTenant.
    const done = runForTenant(tenantId, () => this.execute(tenantId, run, progress, controller.signal, callerScope)).finally(() => this.running.delete(run.id));
    // Whoever starts a run need not wait for it (a request, the scheduler): a run whose end could not
    // be recorded is logged here, and is never an unhandled rejection, which would end the process.
    done.catch((err: unknown) =>
      logger().error({ runId: run.id, export: run.exportName, err: loggableMessage(err) }, 'export run: its end could not be recorded; the interrupted-run sweep will fail it'),
    );
    this.running.set(run.id, { controller, progress, done });
    return done;
  }

  private async execute(tenantId: number, run: ExportRun, progress: Progress, signal: AbortSignal, callerScope: string | undefined): Promise<ExportRun> {
    const { db } = this.options;
    // The run's end as this process sees it, when its record says it ended already (the sweep failed
    // it while its beats were held up): whatever it was doing stops and nothing is published.
    const ended = new AbortController();
    const endedElsewhere = () => {
      if (!ended.signal.aborted) ended.abort(new RunFailure('interrupted', ENDED_ELSEWHERE));
    };
    // One beat at a time: a slow beat is not overtaken by the next. Beats go through the worker
    // pool (a single statement on the run's id), so requests that take every connection of the
    // application pool do not hold them up.
    let beating = false;
    const beat = setInterval(() => {
      if (beating) return;
      beating = true;
      db.crossTenant('export-heartbeat', (tx) => heartbeat(tx, run.id, { rows: progress.csv?.rows ?? 0, bytes: progress.digest?.bytes ?? 0 }))
        .then((beaten) => {
          if (!beaten.running) endedElsewhere();
          // Asked to stop by a request another process served.
          else if (beaten.stop) this.stop(run.id, beaten.stop);
        })
        .catch((err: unknown) => logger().warn({ err, runId: run.id }, 'export run heartbeat failed'))
        .finally(() => {
          beating = false;
        });
    }, this.options.heartbeatEveryMs);
    beat.unref();
    const timeout = new AbortController();
    let timer: NodeJS.Timeout | undefined;
    // What stops the run (a cancel, the hub stopping, the time limit, its record ended elsewhere)
    // reaches its work only until the publication is admitted (progress.committing): from then on the
    // file may appear at any moment, so the publication is never cut, and the run ends as it does.
    const stopping = AbortSignal.any([signal, timeout.signal, ended.signal]);
    const work = new AbortController();
    const forward = () => {
      if (work.signal.aborted) return;
      if (!progress.committing) work.abort(stopping.reason);
      else {
        const stop = stopping.reason instanceof RunFailure ? stopping.reason.code : undefined;
        logger().info({ runId: run.id, export: run.exportName, stop }, 'export run asked to stop while it publishes: the publication is not cut, the run ends as it does');
      }
    };
    if (stopping.aborted) forward();
    else stopping.addEventListener('abort', forward, { once: true });
    let fence: PublicationFence | undefined;
    const beforeCommit = async () => {
      const admitted = await this.admit(run, work.signal, (opened) => {
        fence = opened;
      });
      if (admitted === true) {
        if (!work.signal.aborted) progress.committing = true;
      } else if (admitted === false) endedElsewhere();
      // The hub's own failure (its database): masked with the hub's credentials.
      else ended.abort(new RunFailure('publication', `the run's record could not be checked before publishing (${admitted.message}); nothing was published. Retry it`, 'hub'));
    };
    let outcome: RunOutcome;
    try {
      // The snapshot's transaction is open for the whole stream: a unit holding its connection for long
      // (Database.holdConnection), counted with connector chunk writes and analytic queries; the time
      // limit starts once it has its place.
      const waiting = AbortSignal.any([signal, ended.signal]);
      const receipt = await this.inSlot(tenantId, run.id, waiting, () =>
        this.withHeldConnection(tenantId, waiting, () => {
          timer = setTimeout(() => timeout.abort(new RunFailure('generation', this.timeLimitReason())), this.options.timeoutMs);
          timer.unref();
          return this.generateAndPublish({ tenantId, run, progress, signal: work.signal, beforeCommit, callerScope });
        }),
      );
      outcome = { receipt };
    } catch (err) {
      outcome = this.classify(err, work.signal, run);
    } finally {
      stopping.removeEventListener('abort', forward);
      clearInterval(beat);
      clearTimeout(timer);
    }
    // Past the fence, the end is recorded under its lock (the sweep cannot have failed the run).
    const fenced = fence?.holding ? await fence.end(outcome) : undefined;
    const final =
      fenced ??
      (await this.untilRecorded(run, outcome, (ending) =>
        db.withTenant(tenantId, async (tx) => {
          // The fence's connection lost while the file was published (its lock went with it): the sweep
          // may have failed the run meanwhile; a receipt corrects such a record (see completeRun).
          if ('receipt' in ending && fence?.holding && (await wasSwept(tx, run.id))) {
            logger().warn({ runId: run.id, export: run.exportName }, 'export run published its file after the sweep had failed it as interrupted (its lock was lost with its connection); its record now says Completed');
          }
          await record(tx, run.id, ending);
          return (await runById(tx, run.id))!;
        }),
      ));
    logger().info({ runId: run.id, export: run.exportName, status: final.status, failureCode: final.failureCode, rows: final.rowCount, bytes: final.byteCount }, `export run ${final.status}`);
    return final;
  }

  /**
   * `write`, which records a run's end (`outcome`), tried again once a second while the database
   * cannot be reached (stopped, restarting, no connection to be had): a run that failed because the
   * database went away (its snapshot cut) or published meanwhile has its end recorded once it is
   * back. A stopping hub gives up at the next failure: the run is left Running, and the
   * interrupted-run sweep fails it. Recording twice is harmless (a run's end is written only over a
   * Running record, or a receipt over the sweep's `interrupted`). An end PostgreSQL refuses for a
   * value it holds (SQLSTATE class 22 or 23), which the same statement would meet again, is written
   * as `storableEnd` has it instead, down to the last end that holds no value of its own (then left
   * to the sweep should that be refused too).
   */
  private async untilRecorded<T>(run: ExportRun, outcome: RunOutcome, write: (outcome: RunOutcome) => Promise<T>): Promise<T> {
    for (let warned = false; ; ) {
      try {
        return await write(outcome);
      } catch (err) {
        const sqlState = dataErrorCode(err);
        const instead = sqlState === undefined ? undefined : storableEnd(outcome, sqlState);
        if (instead) {
          // A failure's reason is not kept in the record (only its code): logged here, masked as the
          // hub masks what it logs, so that what it said (a file that may have been published, a
          // partial file left behind) is not lost.
          const was = 'receipt' in outcome ? '' : `; it was to fail ${outcome.code}: ${storableMessage(outcome.reason)}`;
          logger().error(
            { runId: run.id, export: run.exportName, sqlstate: sqlState, ended: 'receipt' in outcome ? 'Completed' : outcome.code },
            `export run ${run.id}: its end was refused (${describeDataError(sqlState!)}); it is written again ${'receipt' in instead ? 'Completed without the ETag and version id the destination answered' : `as Failed ${instead.code}`}${was}`,
          );
          outcome = instead;
          continue;
        }
        if (!isDatabaseUnavailable(err) || this.closed) throw err;
        if (!warned) logger().warn({ runId: run.id, export: run.exportName, err: loggableMessage(err) }, 'export run: its end could not be recorded (the database is unavailable); trying again every second');
        warned = true;
        await new Promise((resolve) => setTimeout(resolve, 1_000));
      }
    }
  }

  /**
   * The publication fence for `run`, opened (handed to `opened` as soon as it is) when a connection
   * is to be had: a busy worker pool (its connections all taken, each wait cut by
   * svc.datasource.connect-timeout) is waited out, one try a second, for as long as the run may go
   * on (its time limit, a cancel, the hub stopping abort `signal`); nothing has been published yet.
   */
  private async admit(run: ExportRun, signal: AbortSignal, opened: (fence: PublicationFence) => void): Promise<boolean | Error> {
    for (;;) {
      const fence = new PublicationFence(this.options.db, run.id);
      opened(fence);
      const admitted = await fence.admitted;
      if (!(admitted instanceof Error) || !isDatabaseUnavailable(admitted) || signal.aborted) return admitted;
      logger().warn({ runId: run.id, export: run.exportName, err: loggableMessage(admitted) }, 'export run: no database connection to check its record before publishing; trying again');
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, 1_000);
        function done() {
          clearTimeout(timer);
          signal.removeEventListener('abort', done);
          resolve();
        }
        signal.addEventListener('abort', done, { once: true });
      });
      if (signal.aborted) return admitted;
    }
  }

  private timeLimitReason(): string {
    return `snapshot generation exceeded the time limit of ${Math.round(this.options.timeoutMs / 1000)} s (svc.export.snapshot.timeout-seconds); nothing was published`;
  }

  private classify(err: unknown, signal: AbortSignal, run: ExportRun): Failure {
    // The cleanup after a stop or a failed generation left something at the destination: the reason
    // names it instead of claiming the cleanup.
    // A stop that came while the destination closed its connection, after a failure whose cleanup
    // left something: the stop's reason, with what was left.
    if (signal.aborted && signal.reason instanceof RunFailure && err instanceof PublishError && err.leftover) {
      return this.classify(new LeftBehind(signal.reason, err.leftover), signal, run);
    }
    if (err instanceof LeftBehind) {
      const failure = this.classify(err.cause, signal, run);
      const reason = failure.reason.includes(CLEANED_UP) ? failure.reason.replace(CLEANED_UP, `; ${err.leftover}`) : `${failure.reason}; ${err.leftover}`;
      return { code: failure.code, reason, origin: failure.origin };
    }
    const cause = signal.aborted && signal.reason instanceof RunFailure ? signal.reason : err;
    if (cause instanceof RunFailure) return { code: cause.code, reason: cause.reason, origin: cause.origin };
    // What the tenant's own destination answered (or the exchange with it).
    if (cause instanceof PublishError) return { code: cause.code, reason: cause.reason, origin: 'tenant' };
    // The hub's wording around names the tenant chose (its entity, tables, columns, mappings): no oracle for them.
    if (cause instanceof EntityDefinitionError) return { code: 'definition', reason: cause.message, origin: 'tenant' };
    if (cause instanceof GenerationError) return { code: 'generation', reason: cause.message, origin: 'hub' };
    if ((cause as { code?: string }).code === QUERY_CANCELED) return { code: 'generation', reason: this.timeLimitReason(), origin: 'hub' };
    logger().error({ err, runId: run.id, export: run.exportName }, 'export run failed unexpectedly');
    return { code: 'generation', reason: `the snapshot could not be produced: ${(err as Error).message ?? String(err)}; nothing was published`, origin: 'hub' };
  }

  /** The snapshot streamed out and published (streamInTransaction): the receipt once the destination gave it. */
  private async generateAndPublish(job: StreamJob): Promise<Receipt> {
    const { run } = job;
    let published: Receipt | undefined;
    try {
      return await this.streamInTransaction(job, (receipt) => {
        published = receipt;
      });
    } catch (err) {
      // The destination published the file, the snapshot read whole: the end of its read-only
      // transaction failing (its connection lost while the publication answered: the database
      // restarted, an idle-in-transaction timeout) changes nothing of either. The run is Completed.
      if (!published) throw err;
      logger().warn({ runId: run.id, export: run.exportName, err: loggableMessage(err) }, 'export run: its snapshot transaction could not be ended after the file was published; the run is recorded with its receipt');
      return published;
    }
  }

  /** Inside one tenant transaction: the definition checked again, then the bytes streamed out; `onPublished` as soon as the destination answered. */
  private async streamInTransaction(job: StreamJob, onPublished: (receipt: Receipt) => void): Promise<Receipt> {
    const { tenantId, run, progress, signal, beforeCommit, callerScope } = job;
    return this.options.db.withTenant(tenantId, async (tx) => {
      signal.throwIfAborted();
      // The time limit holds inside PostgreSQL too: a statement that waits (a lock held on a source
      // table) or runs too long is cancelled there, not only abandoned here.
      await tx.query("select set_config('statement_timeout', $1, true)", [String(this.options.timeoutMs)]);
      // The export the run was claimed for, by id: under its name there may now be another one,
      // applied after a delete, with another destination. A stop asked for meanwhile (a cancel or a
      // delete served by another process) holds even before this process's heartbeat reads it.
      const start = await runStart(tx, run.id);
      if (start?.stop) throw stopFailure(start.stop);
      const exp = start && (await getExportById(tx, start.exportId));
      if (!exp) throw new RunFailure('definition', `export ${run.exportName} was deleted before the run started`, 'tenant');
      // Running an export needs its scope: a caller's run streams a definition of the scope checked at
      // its claim, not one re-applied since to a scope the caller may not hold. (A scheduled run has no
      // caller: it streams the definition stored, as spec 3 says.)
      if (callerScope !== undefined && exp.scope !== callerScope) {
        throw new RunFailure('definition', `export ${run.exportName} was re-applied to scope ${exp.scope} after the run was claimed under scope ${callerScope}: nothing was published; run it again`, 'tenant');
      }
      // A re-apply committed since the claim (another scope, entity or destination): the run streams the
      // definition stored now, and its record says so (the scope decides who may read it). One statement
      // on the run's id through the worker pool, as a heartbeat: the snapshot holds no lock on the record.
      if (exp.scope !== run.scope || exp.entity !== run.entity || exp.destination !== run.destination) {
        await this.options.db.crossTenantQuery('export-definition', `update exports.runs set scope = $2, entity = $3, destination = $4 where id = $1 and status = 'Running'`, [
          run.id,
          exp.scope,
          exp.entity,
          exp.destination,
        ]);
      }
      const spec = exp.spec;
      const entity = await loadEntity(tx, spec.entity);
      const problem = checkAgainstEntity(spec, entity && shapeOf(entity))[0];
      if (problem || !entity) throw new RunFailure('definition', `${problem?.message ?? `entity ${spec.entity} does not exist`}: fix the entity or the export, then retry`, 'tenant');
      const relation = await entityRelation(tx, entity);
      const destination = await this.destination(tenantId, spec, new Date(run.artifactTime));
      signal.throwIfAborted();
      const csv = csvSnapshot(tx, { relation, columns: spec.columns, order: spec.order, delimiter: spec.format.delimiter, header: spec.format.header });
      const digest = new DigestStream();
      progress.csv = csv;
      progress.digest = digest;
      // A failure of the snapshot stream (the query, the encoding) is a generation failure; the
      // destination rethrows that very error object after cleaning up.
      csv.on('error', (err: Error & { code?: string }) =>
        digest.destroy(new GenerationError(err.code === QUERY_CANCELED ? this.timeLimitReason() : `reading or encoding the snapshot failed: ${err.message}; nothing was published`)),
      );
      const onAbort = () => csv.destroy(signal.reason instanceof Error ? signal.reason : new Error(String(signal.reason)));
      signal.addEventListener('abort', onAbort, { once: true });
      try {
        const published = await destination.publish(csv.pipe(digest), { digest: () => digest.sha256(), signal, beforeCommit });
        const receipt = { rowCount: csv.rows, byteCount: digest.bytes, sha256: digest.sha256(), ...published };
        onPublished(receipt);
        return receipt;
      } finally {
        signal.removeEventListener('abort', onAbort);
        // A destination that gave up before reading everything (a collision found by its pre-check)
        // leaves the COPY half read: ending the stream cuts it, or the transaction would wait on it forever.
        if (!csv.readableEnded) csv.destroy();
      }
    });
  }

  /** The destination, its credentials resolved from the tenant's secret store (a publication failure when one is missing). */
  private async destination(tenantId: number, spec: ExportSpec, artifactTime: Date): Promise<Destination> {
    const resolve = createCredentialResolver(this.options.sources, tenantId, `export:${spec.name}`);
    const need = async (field: string, name: string): Promise<string> => {
      const value = await resolve(name).catch((err: unknown) => {
        // The hub's wording around the secret's name, which the tenant chose: masked as such (a
        // secret named after a guess at a hub credential must not come back [REDACTED]).
        if (err instanceof CredentialUnreadableError) throw new RunFailure('publication', `${err.message} (spec.destination.${field})`, 'tenant');
        throw err;
      });
      if (value === undefined) throw new RunFailure('publication', `no secret named ${name} is stored in this tenant (spec.destination.${field}): store it (POST /api/platform/secrets), then retry`, 'tenant');
      return value;
    };
    const d = spec.destination;
    // Stored before apply refused it (a user, a port or a query in the address, a U+FEFF delimiter):
    // fails before any secret is read or connection made, naming the field, never quoting the address.
    const refused = storedIssue(spec);
    if (refused) throw new RunFailure('definition', `${refused.message}; it was stored before apply refused it, and nothing was sent: fix the export and apply it again`, 'tenant');
    // The SSH and S3 clients load on first use: a process that never exports does not pay for them at start.
    if (d.kind === 'sftp') {
      const { SftpDestination } = await import('./destinations/sftp.js');
      const credential = d.password_env ? { password: await need('password_env', d.password_env) } : { privateKey: await need('key_env', d.key_env!) };
      return new SftpDestination({ host: bareHost(d.host), port: d.port, user: d.user, path: resolveTokens(d.path, artifactTime), hostKeyFingerprint: d.host_key_fingerprint, egress: this.options.egress, ...credential });
    }
    const { S3Destination } = await import('./destinations/s3.js');
    const key = objectKey(d.prefix, d.filename, artifactTime);
    if (key.startsWith('/')) throw new RunFailure('definition', `the object key ${key} starts with /: fix spec.destination.prefix`, 'tenant');
    return new S3Destination({
      bucket: d.bucket,
      key,
      region: d.region,
      ...(d.endpoint ? { endpoint: d.endpoint } : {}),
      accessKeyId: await need('access_key_env', d.access_key_env),
      secretAccessKey: await need('secret_key_env', d.secret_key_env),
      egress: this.options.egress,
      ...(this.options.s3PartSize ? { partSize: this.options.s3PartSize } : {}),
    });
  }
}

/**
 * `work` when the job handed to `offer` is started (a slot, a held connection's place). Stopped while
 * it waits (cancelled, its export deleted, the hub stopping), the run ends now, and when its turn
 * comes the job gives it straight back. `offer` answers false when it refuses the job: `refused` then.
 */
function whenTurn<T>(signal: AbortSignal, offer: (job: () => Promise<void>) => boolean, work: () => Promise<T>, refused?: Error): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    // Stopped before it asks (claimed as the hub began to stop): an abort listener added now would never be called.
    if (signal.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    const job = () => {
      signal.removeEventListener('abort', onAbort);
      return signal.aborted ? Promise.resolve() : work().then(resolve, reject);
    };
    if (!offer(job)) {
      signal.removeEventListener('abort', onAbort);
      reject(refused);
    }
  });
}

/** PostgreSQL's SQLSTATE for a statement cancelled (here: by statement_timeout). */
const QUERY_CANCELED = '57014';

/** The snapshot stream failed (read or encoding): failure code `generation`. */
export class GenerationError extends Error {}

export type { TenantId };

/** The 409 for the retry of a run that is not Failed. */
export function notRetryable(runId: string, status: string): ConflictError {
  return new ConflictError(`run ${runId} is ${status}: only a Failed run can be retried`);
}

/** The 409 for the retry of a run whose export was deleted since (applied again or not). */
export function deletedSince(runId: string, exportName: string): ConflictError {
  return new ConflictError(`run ${runId} is of an export named ${exportName} that was deleted since: start a new run instead (POST /api/exports/${exportName}/runs)`);
}
