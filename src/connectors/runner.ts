import { type Database, outsideCommitHooks, type Tx } from '../db/database.js';
import { dataErrorCode, describeDataError, END_NOT_STORED } from '../db/data-errors.js';
import { ConflictError, NotFoundError, ValidationError } from '../errors.js';
import type { EventWriter } from '../events/outbox.js';
import type { Subscribers } from '../events/subscribers.js';
import { runForTenant } from '../observability/context.js';
import { unlessAborted } from '../abortable.js';
import { logger, storableMessage, storableUpstreamMessage } from '../observability/logger.js';
import { loggableMessage } from '../observability/database-errors.js';
import { lockCsvSource } from './csv-source.js';
import type { RowIndexer } from './indexer.js';
import { deadLettersTotal, runsTotal } from './metrics.js';
import { type DeadLetterInput, deadLettersStatement, insertDeadLetters } from './runs/dead-letters.js';
import { addChunk, cancelRequested, type ChunkAnswer, chunkAdded, chunkStatement, createRun, runClosed, finishRun, heartbeat, holdRunning, INTERRUPTED_MESSAGE, inFlightError, ONE_IN_FLIGHT, RunClosedError, type RunRecord, runInFlight, type RunStatus } from './runs/ledger.js';
import { advanceWatermark, readWatermark } from './store.js';
import { type ExtSchema, publicTableMessage, tableRegclassSql, tenantTableText } from './target/ddl.js';
import { SlotWithdrawn, slotWithdrawn } from './schedule.js';
import { registerTargetTable } from './target/register.js';
import { queryFirst as readPath, TooDeepForPath } from './jsonpath.js';
import { externalIdOf, missingKeyReason, type PreparedRow, prepareRow, unstorableRow } from './target/rows.js';
import { ISO_DATE_START, parseIsoTimestamp } from './target/timestamp.js';
import { inKeyOrder, isKeyConflict, upsertChanged, upsertChunk, upsertChunkThen, type WriteOptions } from './target/writer.js';
import { isDatabaseUnavailable, isOutOfResources } from '../db/unavailable.js';
import { describeRefusal, isUniqueViolation, refusedValueCode } from '../validation/database-refusals.js';
import { EngineError, StalePositionError } from './engine/errors.js';
import { type ReadPosition, stoppedAtOf } from './engine/read.js';
import { clearResume, readFingerprint, resumableFrom, type StoredResume, storeResume } from './resume.js';
import { compareNumbers, ExactNumber } from './engine/exact-json.js';
import { cutDeeperThan, MAX_JSON_DEPTH, toStorable, unstorableText } from '../validation/input-limits.js';
import type { ConnectorSpec, EndpointSpec, Page } from './types.js';

/** What the runner needs from the HTTP engine: the pages of one endpoint. */
export interface PageReader {
  /** `resume`: where an earlier run of the endpoint stopped at the page budget (resume.ts); the read starts there. */
  read(connector: ConnectorSpec, endpoint: EndpointSpec, options: { signal: AbortSignal; watermark?: string; resume?: ReadPosition }): AsyncIterable<Page>;
  /**
   * Rows per chunk of a run of this reader when fewer than `chunkSize` (svc.connectors.chunk-size): a reader that
   * knows its rows are wide (a CSV body's, by its header) bounds what a run holds of them (up to four chunks).
   */
  chunkRows?: number;
}

export interface RunnerOptions {
  db: Database;
  events: EventWriter;
  ext: ExtSchema;
  reader: PageReader;
  indexer: RowIndexer;
  /** Rows per transactional chunk. */
  chunkSize: number;
  /**
   * Dead letters one run may leave (`svc.connectors.max-dead-letters-per-run`): past it the run
   * fails (DeadLetterCapError) instead of filling the table with a source or manifest gone wrong.
   */
  maxDeadLetters?: number;
  /** Who listens to `data.row.changed` (only asked for sources that emit it). */
  subscribers: Subscribers;
  /**
   * How often the runs of this process are marked alive (runs/ledger.ts heartbeat), which is also
   * when a cancel served by another process reaches them; 0: never (tests).
   */
  heartbeatEvery?: number;
}

export interface TriggerOptions {
  /** Kebab-case endpoint id; all enabled endpoints when absent. */
  endpoint?: string;
  triggeredBy: string;
  /**
   * The schedule slot of a scheduled run. Its runs are recorded only if the connector as stored then
   * still names the slot (schedule, cron and window); otherwise SlotWithdrawn and no run.
   */
  slot?: Date;
  /**
   * A source whose new or changed rows emit `data.row.changed` when something subscribes (CSV,
   * relational, message streams; never REST, GraphQL or SOAP: spec 1 Events rule 2).
   */
  emitsRowChanges?: boolean;
  /** Where the pages come from, when not the HTTP engine (the CSV ingest path). */
  reader?: PageReader;
  /**
   * With `reader`: the connector is one found stored (a CSV ingest naming it), whose row must still be
   * there when the runs are recorded, as for the engine's runs (404 once its delete has committed).
   * Without it, a connector given with a reader may be one that is not stored (a CSV source's name).
   */
  connectorStored?: boolean;
  /**
   * Without `endpoint`: endpoints of `connector` that are no longer stored (a re-apply removed them
   * after the caller read the connector) are left out, each logged, and the others run, instead of
   * refusing the trigger (409). The scheduler's runs: its claim read the connector before.
   */
  leaveOutRemoved?: boolean;
  /**
   * Run in the transaction that records the runs, once the connector's row is locked and before
   * anything is recorded, with the scopes of the connector as stored then (none for a CSV source
   * with no manifest): refuses the trigger by throwing (a scope-bound caller outside them), or
   * takes what the runs need (a CSV ingest's place for a new table).
   */
  admit?: (tx: Tx, storedScopes: readonly string[]) => Promise<void>;
}

export interface Triggered {
  runs: Array<{ id: string; endpointId: string; endpoint: string }>;
  /** Settles when every run has reached a terminal status. */
  done: Promise<RunRecord[]>;
}

class CancelledByRequest extends Error {
  readonly runStatus = 'Cancelled' as const;
  constructor() {
    super('cancelled on request');
  }
}

/** The hub stopping cleanly (close()) with the run in flight: it fails at once, retryable, as the sweep would fail it later. */
class HubStopped extends Error {
  readonly runStatus = 'Failed' as const;
  readonly retryable = true;
  constructor() {
    super(INTERRUPTED_MESSAGE);
  }
}

type EngineFailure = Error & { runStatus?: RunStatus; retryable?: boolean };

/** Dead letters one run may leave when svc.connectors.max-dead-letters-per-run is not given. */
const DEFAULT_MAX_DEAD_LETTERS = 10_000;

/** More rows dead-lettered in one run than `svc.connectors.max-dead-letters-per-run` allows. */
class DeadLetterCapError extends Error {
  readonly runStatus = 'Failed' as const;
  readonly retryable = false;
  constructor(cap: number) {
    // No count here: chunks already being written go on, so the run's deadLetterCount is the one that holds.
    super(
      `more than ${cap} rows of this run were dead-lettered (svc.connectors.max-dead-letters-per-run; deadLetterCount says how many): the run stopped there, the rows before it are written. ` +
        'Read its dead letters (GET /api/platform/dlq?run=<id>): a unique_key that resolves to nothing, or values the table refuses. Fix the manifest or the source, then run it again',
    );
    this.name = 'DeadLetterCapError';
  }
}

/**
 * ASYNC_CHUNKS: a run's chunk transactions that emit no event commit asynchronously
 * (Database.withTenant's `asyncCommit`): their COMMIT does not wait for the disk, the few
 * milliseconds of a WAL flush each (the flush of a chunk that used the staging table waited for its
 * truncation's file-system journal too). Nothing of a chunk leaves the database before the run's
 * end (no event; the retrieval hand-off is read by transactions that commit synchronously), and
 * the end commits synchronously, which flushes every chunk committed before it. A chunk that a
 * crash of PostgreSQL lost is found missing at the end (chunksKept): the run fails with LOST_CHUNKS.
 */
const LOST_CHUNKS = 'interrupted: the database restarted during the run and lost chunks the run had written (they were not yet on disk); run it again';

/**
 * How many chunks of the run the database holds: one row each in connectors.run_chunk_counts, or
 * already folded into the run's `chunk_count` (a run closed elsewhere), read in one snapshot.
 */
async function chunksKept(tx: Tx, runId: string): Promise<number> {
  const { rows } = await tx.query<{ n: number }>(
    'select (r.chunk_count + (select count(*) from connectors.run_chunk_counts k where k.run_id = r.id))::int as n from connectors.runs r where r.id = $1',
    [runId],
  );
  return rows[0]?.n ?? 0;
}

/** The longest wait between two tries of writing a run's end while the database is unavailable. */
const END_RETRY_MAX_MS = 2_000;

/** Chunks of one run written at once, each in its own transaction (see execute). */
const WRITES_IN_FLIGHT = 3;
/** Rows prepared between two turns of the event loop (≈ 1 ms of work for rows of a few fields). */
const PREPARE_SLICE = 100;
/**
 * And at most this long: a wide row takes longer (100 CSV rows of 1,600 columns held the event loop 0.25 s), so a
 * slice also ends once it has run this long.
 */
const PREPARE_SLICE_MS = 10;

/**
 * Runs connector endpoints: one run per endpoint, one after the other (they share the connector's
 * rate limit). Each run streams pages from the engine, writes rows in transactional chunks (counters
 * in the same transaction as the rows), dead-letters rows that cannot be stored, and ends in exactly
 * one terminal status with its event. A failed run is not rolled back: chunks already written stay.
 */
export class ConnectorRunner {
  /**
   * Runs of this process not yet ended (queued behind an earlier endpoint included), kept alive by
   * the heartbeat, each with the controller that stops it (a cancel, the hub stopping).
   */
  private readonly active = new Map<string, AbortController>();
  /** The triggers of this process not yet settled (close() waits for them). */
  private readonly pending = new Set<Promise<unknown>>();
  private beat: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(private readonly o: RunnerOptions) {}

  /**
   * `work` (a chunk's transaction) once the database has a place for it among the units that hold a
   * connection for long (Database.holdConnection: the chunk transactions of every run of the process,
   * export streams and analytic queries together at most the pool less two), tenants taking turns.
   */
  private inWriteSlot<T>(tenantId: number, work: () => Promise<T>): Promise<T> {
    return this.o.db.holdConnection(tenantId, work);
  }

  /** Not closed: a scheduler claims a slot only while its runner will run it. */
  get accepting(): boolean {
    return !this.closed;
  }

  /** Run ids this process has started and not yet ended. */
  get running(): readonly string[] {
    return [...this.active.keys()];
  }

  /**
   * Stops a run of this process now (its cancel was requested): a retry back-off, a rate-limit wait
   * or a request in flight is interrupted and the run ends Cancelled. False when it does not run here.
   */
  cancel(runId: string): boolean {
    const controller = this.active.get(runId);
    if (!controller) return false;
    if (!controller.signal.aborted) controller.abort(new CancelledByRequest());
    return true;
  }

  /**
   * The hub stopping cleanly: the runs of this process (queued ones included) end Failed
   * `interrupted: the hub stopped during the run` (retryable) at once, the rows read so far written;
   * resolves once every one has ended. A run triggered afterwards ends the same way.
   */
  async close(): Promise<void> {
    this.closed = true;
    for (const controller of this.active.values()) if (!controller.signal.aborted) controller.abort(new HubStopped());
    await Promise.allSettled([...this.pending]);
    this.stopHeartbeat();
  }

  /** Stops the heartbeat (its runs then look interrupted once stale, as a process gone silent's do). */
  stopHeartbeat(): void {
    if (this.beat) clearInterval(this.beat);
    this.beat = undefined;
  }

  private track(ids: string[]): void {
    for (const id of ids) {
      const controller = new AbortController();
      if (this.closed) controller.abort(new HubStopped());
      this.active.set(id, controller);
    }
    if (!this.beat && this.o.heartbeatEvery && this.active.size > 0) {
      this.beat = setInterval(() => void this.pulse(), this.o.heartbeatEvery);
      this.beat.unref();
    }
  }

  private untrack(ids: string[]): void {
    for (const id of ids) this.active.delete(id);
    if (this.active.size === 0) this.stopHeartbeat();
  }

  /** One heartbeat: the runs of this process marked alive, those whose cancel was requested (anywhere) stopped. */
  private async pulse(): Promise<void> {
    const ids = [...this.active.keys()];
    try {
      const cancelled = await this.o.db.crossTenant('run-heartbeat', (tx) => heartbeat(tx, ids));
      for (const id of cancelled) this.cancel(id);
    } catch (err) {
      logger().warn({ err: loggableMessage(err), runs: ids.length }, 'run heartbeat failed; trying again');
    }
  }

  async trigger(tenantId: number, asked: ConnectorSpec, options: TriggerOptions): Promise<Triggered> {
    // The connector the runs run: for the engine's runs, the connector as stored when they are
    // recorded (read below, under the row lock); for a trigger with its own reader, the one given.
    let connector = asked;
    // Chosen here from the given connector only for a trigger with its own reader (a CSV ingest):
    // the engine's endpoints are chosen from the connector as stored (endpointsNow).
    let endpoints: EndpointSpec[] = [];
    if (options.reader) endpoints = chooseEndpoints(asked, options.endpoint, () => `connector ${asked.name} has no endpoint ${options.endpoint}`);
    // One run in flight per endpoint (probe 31 M1): two at once would write over each other's rows and
    // the slower would move the watermark back. The unique index runs_one_in_flight holds it across
    // processes; a trigger finding one is a 409 naming it, and records none of its runs.
    const runs = await this.o.db.withTenant(tenantId, async (tx) => {
      // A delete of the connector waits for this transaction, then finds its runs (deleteConnector's
      // 409); a delete that came first leaves no row: its runs would write for a deleted connector.
      // (A CSV source needs no stored connector: its runs have their own reader. One that named a
      // stored connector does: it found the connector before this lock waited for its delete, and
      // wrote rows and registrations carrying the deleted connector's id that nothing removed.)
      // `for share`, not `for key share`: a re-apply's upsert of the row (applyConnector, `for no key
      // update`) waits for this transaction too, and then finds its runs in flight before it drops an
      // endpoint; a re-apply that came first is waited for, and its endpoints read below. Triggers of
      // one connector share the lock and do not wait for each other here. Nothing is held before it.
      // The row as it is once the lock is granted (a re-apply waited for included): its spec is the
      // connector as applied now, which no re-apply changes until this transaction ends.
      // A CSV source with no manifest has no row to lock: its own lock stands in (its delete, deleteCsvSource).
      if (options.reader && !options.connectorStored) await lockCsvSource(tx, asked.id, 'shared');
      const stored = await tx.query<{ spec: ConnectorSpec }>('select spec from connectors.connectors where id = $1 for share', [asked.id]);
      const row = stored.rows[0];
      // A scheduled slot of a connector deleted since its claim: withdrawn, as one whose schedule a re-apply removed.
      if (!row && options.slot && !options.reader) throw new SlotWithdrawn(`connector ${asked.name} was deleted after its slot ${options.slot.toISOString()} was claimed: the slot is not run`);
      if (!row && (!options.reader || options.connectorStored)) throw new NotFoundError(`connector ${asked.name} not found`);
      // The engine's runs run the connector as stored now, not the caller's spec: one read before a
      // re-apply (the scheduler's claim, the route's lookup) may name an endpoint it removed, whose run
      // would write rows tagged with an endpoint that is gone (nothing purges them) and whose id
      // applied again (a new endpoint) could run beside it; one it disabled; and, of all enabled
      // endpoints, miss one it added or enabled (and run with the base URL, auth and headers it
      // replaced). A CSV ingest's endpoint is none a manifest declares (its own reader; a UUID derived
      // from its name and table): not looked up.
      if (!options.reader && row) {
        connector = { ...row.spec, id: asked.id, tenantId };
        // A scheduled slot is run only if the schedule as stored now still names it: a re-apply
        // committed since the claim that removed the schedule, changed its cron or moved its window
        // withdrew it (under this lock: a re-apply that comes after waits for these runs).
        const withdrawn = options.slot && slotWithdrawn(`connector ${connector.name} was re-applied after its slot ${options.slot.toISOString()} was claimed`, connector, options.slot);
        if (withdrawn) throw new SlotWithdrawn(withdrawn);
        endpoints = endpointsNow(asked, connector, options);
        // Asked for all its endpoints and none is enabled: a refusal saying so, not a trigger that records no run and
        // looks started (a 202 with an empty list). A scheduled slot of it just runs nothing.
        if (endpoints.length === 0 && !options.slot) {
          throw new ConflictError(
            `connector ${connector.name} has no enabled endpoint: every endpoint of it is disabled (enabled: false in its manifest); no run was started`,
            undefined,
            'enable an endpoint (enabled: true) and apply the manifest again',
          );
        }
      }
      if (options.admit) await options.admit(tx, row ? row.spec.scopes : []);
      const running = await runInFlight(tx, uuidsOf(endpoints));
      if (running) throw inFlightError(connector.name, running);
      const created: Array<{ run: RunRecord; endpoint: EndpointSpec }> = [];
      for (const endpoint of endpoints) {
        const run = await createRun(tx, {
          connectorId: connector.id,
          connectorName: connector.name,
          endpointUuid: endpoint.uuid,
          endpointId: endpoint.id,
          triggeredBy: options.triggeredBy,
          syncMode: endpoint.incremental.mode,
          slot: options.slot,
        });
        await this.o.events.emit(tx, 'connector.run.started', {
          run_id: run.id,
          connector_id: connector.id,
          endpoint_id: endpoint.uuid,
          sync_mode: endpoint.incremental.mode,
          trigger: options.triggeredBy,
        });
        created.push({ run, endpoint });
      }
      return created;
    }).catch(async (err: unknown) => {
      // A run of the same endpoint recorded meanwhile by another trigger (any process).
      if (!isUniqueViolation(err, ONE_IN_FLIGHT)) throw err;
      throw inFlightError(connector.name, await this.o.db.withTenant(tenantId, (tx) => runInFlight(tx, uuidsOf(endpoints))));
    });
    const ids = runs.map(({ run }) => run.id);
    this.track(ids);
    // The runs as the tenant's unit of work (a scheduler's job serves every tenant): their lines carry
    // the tenant, the credentials they resolve are scrubbed from their lines only.
    const reader = options.reader ?? this.o.reader;
    // Outside the commit hook of the request that triggered them (or cancelled one queued): their transactions are
    // not the request's (its audit entry commits with the runs' records, above), and a chunk's COMMIT then goes in
    // the message of its last statement (writeChunk).
    const executeRun = (run: RunRecord, endpoint: EndpointSpec, controller: AbortController) =>
      outsideCommitHooks(() => runForTenant(tenantId, () => this.execute(tenantId, connector, endpoint, run, options.emitsRowChanges ?? false, reader, controller)));
    // A run waiting for the earlier endpoints of its trigger that is stopped (a cancel, the hub
    // stopping) ends at once rather than when its turn comes: its endpoint is free again meanwhile.
    const begun = new Map<string, Promise<RunRecord>>();
    for (const { run, endpoint } of runs.slice(1)) {
      const controller = this.active.get(run.id);
      controller?.signal.addEventListener('abort', () => {
        if (!begun.has(run.id)) begun.set(run.id, executeRun(run, endpoint, controller).finally(() => this.untrack([run.id])));
      }, { once: true });
    }
    const done = runForTenant(tenantId, async () => {
      const results: RunRecord[] = [];
      try {
        for (const { run, endpoint } of runs) {
          let execution = begun.get(run.id);
          if (!execution) {
            execution = executeRun(run, endpoint, this.active.get(run.id) ?? new AbortController());
            begun.set(run.id, execution);
          }
          results.push(await execution);
          this.untrack([run.id]);
        }
      } finally {
        // A run this process could not end stops being kept alive: the interrupted-run sweep closes it.
        this.untrack(ids);
      }
      return results;
    });
    this.pending.add(done);
    const forget = () => this.pending.delete(done);
    done.then(forget, forget);
    return { runs: runs.map(({ run, endpoint }) => ({ id: run.id, endpointId: endpoint.uuid, endpoint: endpoint.id })), done };
  }

  /**
   * One run. Its controller stops it (a cancel, the hub stopping: the abort's reason says which and
   * is the run's end): whatever the run is waiting on (a page, a retry back-off, the rate limit)
   * gives up at once.
   */
  private async execute(
    tenantId: number,
    connector: ConnectorSpec,
    endpoint: EndpointSpec,
    run: RunRecord,
    emitsRowChanges: boolean,
    reader: PageReader,
    controller: AbortController,
  ): Promise<RunRecord> {
    const started = Date.now();
    /** Why the run was stopped (CancelledByRequest, HubStopped), once it was. */
    const stopped = () => (controller.signal.aborted ? (controller.signal.reason as EngineFailure) : undefined);
    const watermarking = endpoint.incremental.mode === 'watermark' ? endpoint.incremental : undefined;
    let candidate: Watermark | undefined;
    // The watermark as read at the start (value and when it was last set), for the compare-and-set at the end.
    let watermarkRead: { value?: string; at: string | null; resume?: string } | undefined;
    /** The stored position this run reads on from (resume.ts), if any. */
    let resumed: StoredResume | undefined;
    /** The watermark this run sends (the stored one, or the one its chain was started with). */
    let sent: string | undefined;
    /** Where the read stopped at the page budget, when it did. */
    let stoppedAt: ReadPosition | undefined;
    /** Whether the source answered 404/410 for a position the read carried (StalePositionError). */
    let stale = false;
    let written = 0;
    /** Chunk transactions of this run committed (each left one row in connectors.run_chunk_counts). */
    let chunksCommitted = 0;
    /** Rows of this run dead-lettered by the chunks committed so far. */
    let deadLettered = 0;
    let buffer: unknown[] = [];
    let cancelCheckedAt = Date.now();
    const chunkSize = Math.max(1, Math.min(this.o.chunkSize, reader.chunkRows ?? this.o.chunkSize));

    // Writing overlaps reading: while chunks are written the reader fetches and prepares the next
    // pages. Up to WRITES_IN_FLIGHT chunks are written at once, each in its own transaction (so
    // PostgreSQL works on more than one core); a chunk sharing a key with one in flight waits for it,
    // so a key's last version always lands last. Memory holds WRITES_IN_FLIGHT + 1 chunks at most;
    // a write error surfaces at the next flush (or at the end) and fails the run as before.
    const inFlight: Array<{ done: Promise<void>; keys: Set<string> }> = [];
    /** The chunk in hand when an earlier chunk's failure surfaced as it waited for room: written on the way out. */
    let held: unknown[] = [];
    // Every run starts by inserting (cheaper than merging) until a chunk meets a stored key: see store().
    let expectNew = true;
    /** The table's promoted columns this endpoint does not promote (set by ensureTable below). */
    let unpromoted: readonly string[] = [];
    const write = async (items: unknown[], prepared: PreparedRow[]) => {
      // A chunk's rows go as one statement, with no savepoint around it (one round trip fewer each
      // way). When that statement fails on a stored key (an insert) or on a value PostgreSQL refuses,
      // the chunk's transaction is rolled back and the chunk written again in a new one: merged, or
      // row by row. Nothing of a rolled-back attempt remains (its events and counters included).
      let how: ChunkWriting = { expectNew, rowByRow: false, unpromoted };
      // A chunk that can emit no event commits without waiting for its WAL to reach the disk
      // (ASYNC_CHUNKS, above LOST_CHUNKS): chunks emitting `data.row.changed`, which a consumer may deliver at
      // once, wait for the disk as before.
      const commit = { asyncCommit: !emitsRowChanges };
      for (;;) {
        try {
          const { cancelRequested, deadLetters } = await this.inWriteSlot(tenantId, () =>
            this.o.db.withTenant(tenantId, (tx) => this.writeChunk(tx, tenantId, connector, endpoint, run, items, emitsRowChanges, prepared, how), commit),
          );
          written += items.length;
          chunksCommitted += 1;
          // The run's dead letters so far, its chunks committed: this process writes all of them.
          deadLettered += deadLetters;
          const cap = this.o.maxDeadLetters ?? DEFAULT_MAX_DEAD_LETTERS;
          if (deadLettered > cap) throw new DeadLetterCapError(cap);
          if (cancelRequested && !controller.signal.aborted) controller.abort(new CancelledByRequest());
          return;
        } catch (err) {
          if (how.expectNew && isKeyConflict(err)) {
            expectNew = false;
            how = { ...how, expectNew: false };
          } else if (!how.rowByRow && refusedValueCode(err)) how = { ...how, expectNew: false, rowByRow: true };
          else throw err;
        }
      }
    };
    /** Waits for the oldest chunk in flight; throws its error. */
    const settleOne = async () => {
      const oldest = inFlight.shift();
      await oldest?.done;
    };
    /** Waits for every chunk in flight; throws the first error once all have settled. */
    const settle = async () => {
      const pending = inFlight.splice(0).map((w) => w.done);
      const results = await Promise.allSettled(pending);
      const failed = results.find((r) => r.status === 'rejected');
      if (failed) throw (failed as PromiseRejectedResult).reason;
    };
    const flush = async (items: unknown[]) => {
      if (items.length === 0) return;
      // Prepared (canonical JSON, row_hash, promoted values) while earlier chunks are still being
      // written: this CPU work overlaps PostgreSQL's instead of holding the next transaction open.
      // In slices, letting the event loop in between: the transactions in flight wait for it to send
      // their next statement, and a chunk's preparation would otherwise hold them for its whole length.
      const prepared: PreparedRow[] = [];
      let sliceRows = 0;
      let sliceStarted = performance.now();
      for (let i = 0; i < items.length; i++) {
        prepared.push(prepareRow(items[i], endpoint.target));
        if (++sliceRows >= PREPARE_SLICE || performance.now() - sliceStarted >= PREPARE_SLICE_MS) {
          if (i < items.length - 1) await new Promise((resolve) => setImmediate(resolve));
          sliceRows = 0;
          sliceStarted = performance.now();
        }
      }
      const keys = new Set<string>();
      for (const row of prepared) if (row.externalId !== undefined) keys.add(row.externalId);
      const overlaps = () => inFlight.some((w) => [...keys].some((k) => w.keys.has(k)));
      try {
        while (inFlight.length >= WRITES_IN_FLIGHT || (inFlight.length > 0 && overlaps())) await settleOne();
      } catch (err) {
        held = items;
        throw err;
      }
      const done = write(items, prepared);
      done.catch(() => undefined); // awaited by a later settle; no unhandled rejection meanwhile
      inFlight.push({ done, keys });
    };

    let outcome: { status: Exclude<RunStatus, 'Running'>; error?: EngineFailure };
    try {
      try {
        // Stopped while queued behind an earlier endpoint (or the hub stopping as it was triggered).
        controller.signal.throwIfAborted();
        // Registered before it exists, under the tenant's DDL lock (shared): a delete of another
        // connector either commits before (ensureTable then finds a table it dropped missing, and
        // creates it) or sees the registration and keeps the table (registerTargetTable).
        // A run closed meanwhile by another process (RunClosedError) registers nothing.
        await this.o.db.withTenant(tenantId, async (tx) => {
          await holdRunning(tx, run.id);
          await registerTargetTable(tx, connector.id, endpoint.uuid, endpoint.target.table);
        });
        const made = await this.o.ext.ensureTable(tenantId, endpoint.target.table, endpoint.target.promote, { typesFromTable: endpoint.target.typesFromTable });
        // The promotes as the table types them (a CSV ingest's text columns read as a connector made
        // them), and the table's other promoted columns, emptied on every row this run writes.
        if (made.promote !== endpoint.target.promote) endpoint = { ...endpoint, target: { ...endpoint.target, promote: made.promote } };
        unpromoted = made.unpromoted;
      } catch (err) {
        // A table that could not be made (more columns than PostgreSQL allows, a type clash on a
        // new table), or a run stopped before it made it, leaves no registration of a table that is
        // not there: it was only for this run (a CSV ingest's, made when the run was recorded, held its
        // place among the tenant's tables: tenant-cap.ts takeTablePlace).
        await this.o.db
          .withTenant(tenantId, (tx) =>
            tx.query(`delete from connectors.ext_tables where connector_id = $1 and endpoint_uuid = $2 and table_name = $3 and ${tableRegclassSql('$4')} is null`, [
              connector.id,
              endpoint.uuid,
              endpoint.target.table,
              tenantTableText(tenantId, endpoint.target.table),
            ]),
          )
          .catch(() => undefined);
        throw err;
      }
      // Read for every endpoint: a full read may have a stored position too (resume.ts).
      const read = await this.o.db.withTenant(tenantId, (tx) => readWatermark(tx, endpoint.uuid));
      watermarkRead = read;
      resumed = resumableFrom(read.resume, connector, endpoint);
      // A run reading on from a stored position sends the watermark its chain started with, and carries its maximum on.
      sent = watermarking ? (resumed ? resumed.watermark : read.value) : undefined;
      if (watermarking && resumed) candidate = resumed.max;
      const watermark = sent;
      for await (const page of untilAborted(reader.read(connector, endpoint, { signal: controller.signal, watermark, resume: resumed?.read }), controller.signal)) {
        for (const item of page.items) buffer.push(item);
        if (watermarking) candidate = maxOf(candidate, page.items.map((item) => watermarkOf(item, watermarking.watermark_path)));
        while (buffer.length >= chunkSize) await flush(buffer.splice(0, chunkSize));
        // Besides the heartbeat (and a cancel served by this process, at once), the flag is looked
        // up at page boundaries, at most twice a second.
        if (!controller.signal.aborted && Date.now() - cancelCheckedAt > 500) {
          cancelCheckedAt = Date.now();
          if (await this.o.db.withTenant(tenantId, (tx) => cancelRequested(tx, run.id))) controller.abort(new CancelledByRequest());
        }
        controller.signal.throwIfAborted();
      }
      const rest = buffer;
      buffer = [];
      await flush(rest);
      await settle();
      // Every page read and written: a cancel that came meanwhile still ends it Cancelled; the hub
      // stopping as its last chunks were written lost nothing, and the run is complete.
      const stop = stopped();
      outcome = stop instanceof CancelledByRequest ? { status: 'Cancelled', error: stop } : { status: 'Completed' };
    } catch (err) {
      // A stop (a cancel, the hub stopping) aborts the reader wherever it is: its reason is the run's end.
      const failure = stopped() ?? (err as EngineFailure);
      stoppedAt = stoppedAtOf(failure);
      stale = failure instanceof StalePositionError;
      // Whatever was read before the failure is written: a failed run is not rolled back. But past
      // the dead-letter cap, what is left would only add dead letters: once the failure is the cap,
      // or a chunk in flight crosses it, nothing more is written. So the chunks left are written one
      // after the other, each settled before the next.
      // A run another process closed meanwhile (RunClosedError) writes nothing more either.
      let capped = failure instanceof DeadLetterCapError || failure instanceof RunClosedError;
      /** Some rows read were not written (a chunk failed, or the cap left them): where the read stopped is then no place to resume from. */
      let unwritten = false;
      /** Waits for every chunk in flight; notes a crossed cap, logs any other write failure. */
      const settleAfterFailure = async () => {
        for (const result of await Promise.allSettled(inFlight.splice(0).map((w) => w.done))) {
          if (result.status === 'fulfilled') continue;
          unwritten = true;
          if (result.reason instanceof DeadLetterCapError || result.reason instanceof RunClosedError) capped = true;
          else logger().error({ err: result.reason, runId: run.id }, 'a chunk write failed');
        }
      };
      try {
        await settleAfterFailure();
        const left = [held, buffer];
        held = [];
        buffer = [];
        for (const [i, items] of left.entries()) {
          if (capped) {
            if (left.slice(i).some((rest) => rest.length > 0)) unwritten = true;
            break;
          }
          await flush(items);
          await settleAfterFailure();
        }
      } catch (flushErr) {
        unwritten = true;
        logger().error({ err: flushErr, runId: run.id }, 'could not write the rows read before a run failure');
      }
      // The next run would read on past rows this one read and did not write: it starts from the first page instead.
      if (unwritten) stoppedAt = undefined;
      const status = failure.runStatus && failure.runStatus !== 'Running' ? failure.runStatus : 'Failed';
      // What the run's record and events say names the tenant's tables as the tenant does (ext.<name>),
      // never by the schema that holds them (a `relation "ext_t5.s1" does not exist` from PostgreSQL),
      // and is masked as a log line is (a credential in an address, the hub's and this run's secrets).
      // A failure of the exchange with the source (EngineError) quotes what the tenant's own source sent: masked
      // without the hub's own secrets, which the source cannot have been sent (storableUpstreamMessage).
      // A NUL or half a surrogate pair the source put in what the message quotes (a GraphQL error's text,
      // a cursor) is U+FFFD: PostgreSQL refuses it, and the statement that ends the run failed, leaving it Running.
      const message = toStorable(publicTableMessage(tenantId, failure instanceof EngineError ? storableUpstreamMessage(failure) : storableMessage(failure))) as string;
      outcome = { status, error: message === failure.message ? failure : Object.assign(new Error(message), { runStatus: failure.runStatus, retryable: failure.retryable }) };
      if (status === 'Failed') logger().warn({ runId: run.id, connector: connector.name, endpoint: endpoint.id, err: loggableMessage(failure) }, 'connector run failed');
    }

    const finished = await this.untilWritten(run.id, outcome.status, () => this.o.db.withTenant(tenantId, async (tx) => {
      // Chunks committed asynchronously that PostgreSQL no longer has (it crashed, or its machine did,
      // before they reached the disk): the run did not store what it read. It fails, retryable, and
      // neither advances the watermark nor keeps where it stopped, so the next run reads those rows
      // again. (This end commits synchronously: once it has, every chunk before it is on disk.)
      if (!emitsRowChanges && (outcome.status === 'Completed' || outcome.status === 'Partial') && (await chunksKept(tx, run.id)) < chunksCommitted) {
        logger().error({ runId: run.id, connector: connector.name, endpoint: endpoint.id, chunksCommitted }, `run ${run.id} lost chunks it had written (the database restarted during the run): it ends Failed`);
        outcome = { status: 'Failed', error: Object.assign(new Error(LOST_CHUNKS), { retryable: true }) };
      }
      if (outcome.status === 'Partial' && stoppedAt && watermarkRead) {
        // Cut by the page budget: the next run reads on from here, with this run's watermark and maximum (resume.ts).
        const stored = { read: stoppedAt, ...(sent !== undefined ? { watermark: sent } : {}), ...(candidate !== undefined ? { max: candidate } : {}), fingerprint: readFingerprint(connector, endpoint) };
        if (!(await storeResume(tx, endpoint.uuid, watermarkRead, endpoint.target, stored, run.id))) {
          logger().warn(
            { runId: run.id, connector: connector.name, endpoint: endpoint.id },
            `the watermark of ${connector.name}/${endpoint.id} was set or cleared during run ${run.id}, or the endpoint no longer writes ${endpoint.target.table} keyed by ${endpoint.target.unique_key}: where the run stopped is not stored, the next run starts from the first page`,
          );
        }
      } else if (watermarkRead?.resume !== undefined && (outcome.status === 'Completed' || stale)) {
        // A chain that completed (its watermark, if any, promoted below with the position cleared), or whose
        // position the source no longer has (404/410): the next run starts from the first page.
        if (!(outcome.status === 'Completed' && watermarking && candidate !== undefined)) await clearResume(tx, endpoint.uuid, watermarkRead, endpoint.target);
      }
      if (outcome.status === 'Completed' && watermarking && candidate !== undefined && watermarkRead) {
        if (!(await advanceWatermark(tx, endpoint.uuid, watermarkRead, String(candidate), endpoint.target))) {
          logger().warn(
            { runId: run.id, connector: connector.name, endpoint: endpoint.id },
            `the watermark of ${connector.name}/${endpoint.id} was set or cleared during run ${run.id} (a delete or purge of rows of its table, or a re-apply), or the endpoint no longer writes ${endpoint.target.table} keyed by ${endpoint.target.unique_key} as this run did (a re-apply): left as it is, not advanced to what this run read`,
          );
        }
      }
      const { ended, ...record } = await finishRun(tx, run.id, outcome.status, outcome.error?.message);
      if (ended) await this.emitEnd(tx, record, endpoint, Date.now() - started, written, outcome);
      else logger().warn({ runId: run.id, status: record.status }, `run ${run.id} ended ${outcome.status} after it had been closed as ${record.status}; the first end stands`);
      return record;
    }), async (code) => {
      // The end as written above was refused for a value it holds (a text the source sent, a number out
      // of range): the run ends Failed with a text that quotes none of them, its counts as its chunks left them.
      const failure = Object.assign(new Error(`${END_NOT_STORED}: ${describeDataError(code)}`), { retryable: false });
      logger().error({ runId: run.id, connector: connector.name, endpoint: endpoint.id, status: outcome.status, sqlstate: code }, `run ${run.id} ended ${outcome.status} but its end was refused (${describeDataError(code)}); it ends Failed instead`);
      return this.o.db.withTenant(tenantId, async (tx) => {
        const { ended, ...record } = await finishRun(tx, run.id, 'Failed', failure.message);
        if (ended) await this.emitEnd(tx, record, endpoint, Date.now() - started, written, { status: 'Failed', error: failure });
        return record;
      });
    });
    runsTotal().inc({ status: finished.status });
    return finished;
  }

  /**
   * A run's end, written once the database takes it: while the database is unavailable (stopped,
   * restarting, out of disk) the write is tried again, every END_RETRY_MAX_MS at most, with the run
   * still kept alive by the heartbeat, so that its own end (the database error that failed it, say)
   * is recorded rather than the interrupted-run sweep's. A stopping process gives up (the sweep of
   * the next start closes the run). A refusal of a value the end holds (SQLSTATE class 22 or 23: a
   * NUL in a text, a number out of range), which the same statement would meet again, writes
   * `refused(code)` instead, once: the run's end as Failed with a fixed text.
   */
  private async untilWritten<T>(runId: string, status: RunStatus, write: () => Promise<T>, refused: (code: string) => Promise<T>): Promise<T> {
    let delay = 250;
    let told = false;
    let fallenBack = false;
    for (;;) {
      try {
        return await write();
      } catch (err) {
        const code = dataErrorCode(err);
        if (code !== undefined && !fallenBack) {
          fallenBack = true;
          write = () => refused(code);
          continue;
        }
        if (this.closed || !(isDatabaseUnavailable(err) || isOutOfResources(err))) throw err;
        if (!told) {
          told = true;
          logger().warn({ runId, status, err: loggableMessage(err) }, `run ${runId} ended ${status} but the database cannot take its end yet; trying again until it does`);
        }
        await new Promise((resolve) => setTimeout(resolve, delay));
        delay = Math.min(delay * 2, END_RETRY_MAX_MS);
      }
    }
  }

  private async writeChunk(
    tx: Tx,
    tenantId: number,
    connector: ConnectorSpec,
    endpoint: EndpointSpec,
    run: RunRecord,
    items: unknown[],
    emitsRowChanges: boolean,
    prepared: PreparedRow[],
    how: ChunkWriting,
  ) {
    const ids = { tenantId, connectorId: connector.id, endpointUuid: endpoint.uuid };
    const losses: DeadLetterInput[] = [];
    const storable: PreparedRow[] = [];
    for (const row of prepared) {
      if (row.tooDeep !== undefined) {
        losses.push(tooDeep(endpoint, row));
        continue;
      }
      if (row.externalId === undefined) {
        losses.push({
          skipReason: 'missing_key',
          errorMessage: missingKeyReason(row.data, endpoint.target.unique_key, endpoint.soap !== undefined),
          payload: row.data,
          skipDetail: { unique_key: endpoint.target.unique_key, table: endpoint.target.table },
        });
        continue;
      }
      const why = unstorableRow(row);
      if (why) losses.push(unstorable(endpoint, row, why));
      else storable.push(row);
    }
    const changes = emitsRowChanges && (await this.o.subscribers.any(tx, 'data.row.changed'));
    const handOff = this.o.indexer.rowsWrittenStatement;
    if (!changes && !how.rowByRow && storable.length > 0 && handOff) {
      // The common chunk (one statement for its rows, no change to tell): its hand-off entry, its dead
      // letters, its counts row and the COMMIT go in the same message as its rows' statement (one round
      // trip for the chunk's transaction). Every storable row is written (a refusal fails the statement,
      // and the chunk is written again row by row), so its counts are known before. A run closed
      // elsewhere fails the counts row's statement (RunClosedError), and the COMMIT after it is skipped.
      const entry = handOff({ ...ids, connectorName: connector.name, table: endpoint.target.table, scopes: connector.scopes, rows: storable });
      const dead = deadLettersStatement({ runId: run.id, connectorId: connector.id, endpointUuid: endpoint.uuid }, losses);
      const counts = chunkStatement(run.id, { in: items.length, out: storable.length, skipped: losses.length, deadLetters: losses.length });
      const after = [...(entry ? [entry] : []), ...(dead ? [dead] : []), counts] as const;
      let last: { rows: ChunkAnswer[] };
      try {
        ({ last } = await upsertChunkThen<ChunkAnswer>(tx, endpoint.target, storable, ids, { expectNew: how.expectNew, unpromoted: how.unpromoted }, after, { commit: true }));
      } catch (err) {
        throw runClosed(err, run.id);
      }
      const { cancelRequested } = chunkAdded(last.rows);
      this.countDeadLetters(losses);
      return { cancelRequested, deadLetters: losses.length };
    }
    const stored = await this.store(tx, endpoint, storable, ids, changes, how);
    for (const { row, message } of stored.refused) losses.push(unstorable(endpoint, row, message));
    // Inside the ingestion transaction: the events exist exactly when the rows do. One statement for
    // the chunk's changes, in the order of its rows (one per row cost a round trip each).
    await this.o.events.emitAll(
      tx,
      'data.row.changed',
      stored.changed.map((change) => ({ entity: endpoint.target.table, entity_key: change.externalId, op: change.op, run_id: run.id })),
    );
    await insertDeadLetters(tx, { runId: run.id, connectorId: connector.id, endpointUuid: endpoint.uuid }, losses);
    this.countDeadLetters(losses);
    await this.o.indexer.rowsWritten(tx, { ...ids, connectorName: connector.name, table: endpoint.target.table, scopes: connector.scopes, rows: stored.rows });
    const { cancelRequested } = await addChunk(tx, run.id, { in: items.length, out: stored.written, skipped: losses.length, deadLetters: losses.length });
    return { cancelRequested, deadLetters: losses.length };
  }

  /** The dead letters of a chunk's transaction, in the metrics (by reason). */
  private countDeadLetters(losses: readonly DeadLetterInput[]): void {
    for (const reason of new Set(losses.map((l) => l.skipReason))) deadLettersTotal().inc({ reason }, losses.filter((l) => l.skipReason === reason).length);
  }

  /**
   * Writes the rows as one statement: a plain INSERT while `how.expectNew` holds (cheaper for
   * PostgreSQL than the merge; a run starts so, since a first load meets no stored key), a merge
   * otherwise. A stored key or a refused value (a datetime or number out of range for its column, a
   * key too long to index) fails it, and with it the transaction: the caller writes the chunk again,
   * merged, or with `how.rowByRow`: row by row, each under a savepoint, the rows PostgreSQL refuses
   * coming back to be dead-lettered.
   */
  private async store(tx: Tx, endpoint: EndpointSpec, rows: PreparedRow[], ids: { tenantId: number; connectorId: string; endpointUuid: string }, changes: boolean, how: ChunkWriting) {
    const write = async (batch: PreparedRow[], expectNew = false) => {
      const options: WriteOptions = { expectNew, unpromoted: how.unpromoted };
      return changes
        ? upsertChanged(tx, endpoint.target, batch, ids, options)
        : { written: await upsertChunk(tx, endpoint.target, batch, ids, options), changed: [] as Array<{ externalId: string; op: 'insert' | 'update' }> };
    };
    if (!how.rowByRow) return { ...(await write(rows, how.expectNew)), rows, refused: [] as Array<{ row: PreparedRow; message: string }> };
    const result = { written: 0, changed: [] as Array<{ externalId: string; op: 'insert' | 'update' }>, rows: [] as PreparedRow[], refused: [] as Array<{ row: PreparedRow; message: string }> };
    // Written in KEY_ORDER, as a whole chunk is (a run beside this one writing the same table waits
    // for it, never deadlocks with it); told in the order read.
    const attempt = (row: PreparedRow) => underSavepoint(tx, () => write([row]));
    const outcomes = new Map<PreparedRow, Awaited<ReturnType<typeof attempt>>>();
    for (const row of inKeyOrder(rows)) outcomes.set(row, await attempt(row));
    for (const row of rows) {
      const one = outcomes.get(row)!;
      if (one.ok) {
        result.written += one.value.written;
        result.changed.push(...one.value.changed);
        result.rows.push(row);
      } else result.refused.push({ row, message: describeRefusal(one.code) });
    }
    return result;
  }

  private async emitEnd(tx: Tx, run: RunRecord, endpoint: EndpointSpec, durationMs: number, written: number, outcome: { status: RunStatus; error?: EngineFailure }) {
    // Every end names the connector as `connector.run.started` does: a scope-bound caller's live
    // stream lets a run's end through by it (src/events/stream-scopes.ts).
    const counters = {
      run_id: run.id,
      connector_id: run.connectorId,
      endpoint_id: endpoint.uuid,
      records_in: run.recordsIn,
      records_out: run.recordsOut,
      duration_ms: durationMs,
      tables: { [endpoint.target.table]: run.recordsOut },
    };
    void written;
    switch (outcome.status) {
      case 'Completed':
        await this.o.events.emit(tx, 'connector.run.completed', counters);
        break;
      case 'Partial':
        await this.o.events.emit(tx, 'connector.run.partial', { ...counters, error_message: outcome.error?.message ?? '' });
        break;
      case 'Cancelled':
        await this.o.events.emit(tx, 'connector.run.cancelled', { run_id: run.id, connector_id: run.connectorId });
        break;
      default:
        await this.o.events.emit(tx, 'connector.run.failed', { run_id: run.id, connector_id: run.connectorId, error_message: outcome.error?.message ?? 'failed', retryable: outcome.error?.retryable ?? false });
    }
  }
}

const uuidsOf = (endpoints: readonly EndpointSpec[]) => endpoints.map((e) => e.uuid);

/**
 * The endpoint `named` of `connector` ([that one]), or all its enabled endpoints when none is named.
 * An id it does not have is a 404 (`missing` says it), a disabled endpoint named a 400.
 */
function chooseEndpoints(connector: ConnectorSpec, named: string | undefined, missing: () => string): EndpointSpec[] {
  if (named === undefined) return connector.endpoints.filter((e) => e.enabled);
  const chosen = connector.endpoints.find((e) => e.id === named);
  if (!chosen) throw new NotFoundError(missing());
  if (!chosen.enabled) throw new ValidationError(`endpoint ${named} is disabled`, 'endpoint');
  return [chosen];
}

/**
 * The endpoints a trigger of the engine runs, chosen from `stored`, the connector as stored now (read
 * in the trigger's transaction, which holds its row `for share`, so no re-apply changes it until it
 * ends), as a trigger asked from it would choose them: one disabled since the caller read `asked` is
 * not run (named, a 400 as for any disabled endpoint), and of all enabled endpoints one added or
 * enabled since is run. An endpoint of `asked` a re-apply removed: named, a 404 saying so; of all
 * enabled endpoints, a 409 (asked again, the trigger runs the connector as applied now), or, with
 * `leaveOutRemoved` (the scheduler), left out and logged, the others run.
 */
function endpointsNow(asked: ConnectorSpec, stored: ConnectorSpec, options: TriggerOptions): EndpointSpec[] {
  const named = options.endpoint;
  const removedNamed = named !== undefined && asked.endpoints.some((e) => e.id === named);
  const chosen = chooseEndpoints(stored, named, () =>
    removedNamed
      ? `connector ${stored.name} has no endpoint ${named}: a re-apply of the connector removed it after this run was asked for (no run started)`
      : `connector ${stored.name} has no endpoint ${named}`,
  );
  if (named !== undefined) return chosen;
  const kept = new Set(stored.endpoints.map((e) => e.id));
  const gone = asked.endpoints.filter((e) => e.enabled && !kept.has(e.id));
  if (gone.length === 0) return chosen;
  const names = gone.map((e) => e.id).join(', ');
  if (!options.leaveOutRemoved) {
    throw new ConflictError(
      `connector ${stored.name} was re-applied while its runs were being started`,
      undefined,
      `endpoint${gone.length > 1 ? 's' : ''} ${names} ${gone.length > 1 ? 'are' : 'is'} no longer in its manifest (a re-apply removed ${gone.length > 1 ? 'them' : 'it'}); no run was started: ask again to run its endpoints as applied now`,
    );
  }
  logger().warn(
    { connector: stored.name, endpoints: gone.map((e) => e.id) },
    `endpoint${gone.length > 1 ? 's' : ''} ${names} of connector ${stored.name} ${gone.length > 1 ? 'were' : 'was'} removed by a re-apply after this trigger read the connector: not run`,
  );
  return chosen;
}

/** How a chunk is written (see ConnectorRunner.store). */
interface ChunkWriting {
  expectNew: boolean;
  rowByRow: boolean;
  /** The table's promoted columns the endpoint does not promote: NULL on every row written (WriteOptions.unpromoted). */
  unpromoted: readonly string[];
}

/**
 * Runs `fn` under a savepoint: its result, or the code of a PostgreSQL refusal of a value (the
 * transaction goes on as it was before `fn`). Any other error is thrown.
 */
async function underSavepoint<T>(tx: Tx, fn: () => Promise<T>): Promise<{ ok: true; value: T } | { ok: false; code: string }> {
  await tx.query('savepoint row_write');
  try {
    const value = await fn();
    await tx.query('release savepoint row_write');
    return { ok: true, value };
  } catch (err) {
    const code = refusedValueCode(err);
    if (!code) throw err;
    await tx.query('rollback to savepoint row_write');
    return { ok: false, code };
  }
}

function unstorable(endpoint: EndpointSpec, row: PreparedRow, why: string): DeadLetterInput {
  return {
    skipReason: 'unstorable',
    errorMessage: `the row cannot be stored: ${why}`,
    payload: row.data,
    skipDetail: { table: endpoint.target.table, external_id: row.externalId ?? null },
  };
}

/**
 * The longest watermark value taken, in characters of its text: a mark is sent back in the query of
 * every request of the next run and shown by every connectors list, and a source's value has no
 * length of its own (a page holds up to 64 MiB). A timestamp, a number or a change feed's sequence
 * is far shorter.
 */
export const MAX_WATERMARK_CHARS = 4_096;

/**
 * A record's watermark value; none from a record nested too deep for its path (it is dead-lettered,
 * prepareRow's tooDeep), and none that is text PostgreSQL cannot store (a NUL, half a surrogate pair,
 * bytes that are not UTF-8): its record is dead-lettered for it (unstorableRow), and as the mark it
 * failed the statement that ends the run, which then never ended. Nor an object or an array (no
 * text of the source's: taken, it was compared and stored as `[object Object]`), nor a value
 * longer than MAX_WATERMARK_CHARS: their records are stored, the mark is the greatest other value
 * (a lower mark reads more again next time, never less).
 */
function watermarkOf(item: unknown, path: string): unknown {
  let value: unknown;
  try {
    value = readPath(item, path);
  } catch (err) {
    if (err instanceof TooDeepForPath) return undefined;
    throw err;
  }
  if (typeof value === 'string') return value.length > MAX_WATERMARK_CHARS || unstorableText(value) !== undefined ? undefined : value;
  if (typeof value === 'bigint' || value instanceof ExactNumber) return String(value).length > MAX_WATERMARK_CHARS ? undefined : value;
  return typeof value === 'object' ? undefined : value;
}

/** What a dead letter keeps of a record nesting deeper than MAX_JSON_DEPTH in place of what is below it. */
const CUT_MARKER = `(nested deeper than ${MAX_JSON_DEPTH} levels: not kept)`;

/**
 * A record nesting deeper than MAX_JSON_DEPTH (prepareRow stopped there): dead-lettered
 * `unstorable`, its payload kept down to that depth (the whole of it would overflow the stack of the
 * walks that keep it, and PostgreSQL's of its jsonb parser). Its key is read from the same levels,
 * so the dead letter names the record when the key stands above the cut (`$.id`); one below it, or
 * a path that reaches a cut subtree, reads as none (null), the deep part never walked.
 */
function tooDeep(endpoint: EndpointSpec, row: PreparedRow): DeadLetterInput {
  // A cut subtree is an empty object here: no key reads through it or as it (externalIdOf takes no object).
  const kept = cutDeeperThan(row.data, MAX_JSON_DEPTH, {});
  const externalId = externalIdOf(kept, endpoint.target.unique_key);
  return {
    skipReason: 'unstorable',
    errorMessage: `the row cannot be stored: $ ${row.tooDeep}`,
    payload: cutDeeperThan(row.data, MAX_JSON_DEPTH, CUT_MARKER),
    skipDetail: { table: endpoint.target.table, external_id: externalId ?? null, max_depth: MAX_JSON_DEPTH },
  };
}

/**
 * The pages of `pages`, given up on as soon as `signal` aborts (rejecting with its reason): a stop
 * never waits for a reader that is slow to notice it (the engine's does at once; a reader given by
 * a caller may not).
 *
 * Each wait for a page listens for the abort only while it lasts (`unlessAborted`): a run keeps no
 * page it has written.
 */
async function* untilAborted<T>(pages: AsyncIterable<T>, signal: AbortSignal): AsyncGenerator<T> {
  const iterator = pages[Symbol.asyncIterator]();
  let done = false;
  let waiting = false;
  try {
    for (;;) {
      signal.throwIfAborted();
      waiting = true;
      const next = await unlessAborted(iterator.next(), signal);
      waiting = false;
      if (next.done) {
        done = true;
        return;
      }
      yield next.value;
    }
  } finally {
    // Left early, the reader is told to finish, as `for await` would: at once when it is idle; a reader
    // still busy with a page finishes after it, and nobody waits for that.
    if (!done && waiting) void Promise.resolve(iterator.return?.()).catch(() => undefined);
    else if (!done) await iterator.return?.();
  }
}

/**
 * The running maximum of watermark values, taken over one page's values at a time: numbers
 * numerically; ISO-8601 timestamps (as promoted columns read them, target/timestamp.ts) as instants
 * when both the held maximum and the value are one (`2024-03-01T10:00:00+02:00` is before
 * `2024-03-01T09:00:00.500Z`), keeping the greatest one's own text; anything else as text. An
 * integer beyond ±(2^53 − 1), read exactly as a bigint (engine/exact-json.ts), is a number too,
 * held as its digits; so is a number past a double's range (an ExactNumber, `1e400`), compared
 * exactly and held as it is (its text is what is stored and sent back).
 */
export function maxOf(current: Watermark | undefined, values: readonly unknown[]): Watermark | undefined {
  let max = current;
  // The instant of `max` when it is a timestamp (undefined when it is not), read once it is needed.
  let maxInstant: string | undefined;
  let instantRead = false;
  const take = (next: Watermark) => {
    max = next;
    instantRead = false;
  };
  for (const value of values) {
    if (value === undefined || value === null || value === '') continue;
    if (typeof value === 'number' || typeof value === 'bigint' || value instanceof ExactNumber) {
      const next = typeof value === 'bigint' ? String(value) : value;
      if (max === undefined) {
        take(next);
        continue;
      }
      // A held text is a number when it is a bigint's digits.
      const numeric = typeof max !== 'string' || ((typeof value !== 'number' || /^-?\d{16,}$/.test(max)) && /^-?\d+$/.test(max));
      if (numeric && (compareNumbers(value, max) ?? 0) > 0) take(next);
      continue;
    }
    const text = String(value);
    if (max === undefined) {
      take(text);
      continue;
    }
    if (typeof max === 'string') {
      if (!instantRead) {
        maxInstant = instantOf(max);
        instantRead = true;
      }
      const instant = maxInstant === undefined ? undefined : instantOf(text);
      if (maxInstant !== undefined && instant !== undefined) {
        if (instant > maxInstant) {
          max = text;
          maxInstant = instant;
        }
        continue;
      }
    }
    if (String(max) < text) take(text);
  }
  return max;
}

/** The instant of an ISO-8601 timestamp in one fixed form (`2024-03-01T08:00:00.000Z`, which orders as text), or undefined. */
function instantOf(text: string): string | undefined {
  return ISO_DATE_START.test(text) ? parseIsoTimestamp(text) : undefined;
}

/** A running watermark: a number, a bigint's digits or other text, or a number past a double's range. */
type Watermark = string | number | ExactNumber;
