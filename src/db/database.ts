import { AsyncLocalStorage } from 'node:async_hooks';
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { finished, type Readable } from 'node:stream';
import { setImmediate as turn } from 'node:timers/promises';
import pg, { type Submittable } from 'pg';
import { type CopyStreamQuery, from as copyFromStdin } from 'pg-copy-streams';
import { SlotPool } from '../concurrency/slot-pool.js';
import { CopyRecords } from './copy-records.js';
import { NoTenantError } from '../errors.js';
import { annotateContext, carryIntoQueuedJobs, currentContext, runWithContext } from '../observability/context.js';
import { inSpan, SpanKind, tracingOn } from '../observability/tracing.js';
import { type Opening, queryAfterOpening } from './opening-query.js';
import { endPool, resilientPool } from './pool.js';
import { DEFAULT_ANALYTIC_ROLE } from './roles.js';

// The `COPY … TO STDOUT` half of pg-copy-streams, beside the `from` that types/pg-copy-streams.d.ts declares.
declare module 'pg-copy-streams' {
  /** A `COPY … TO STDOUT` statement as a readable stream, for `client.query()`. */
  export interface CopyToStreamQuery extends Readable, Submittable {}
  export function to(text: string): CopyToStreamQuery;
}

// Identifiers and counters are bigint columns far below 2^53: hand them out as numbers. A value
// beyond ±(2^53 − 1) (an analytic query's bigint, a sum) stays its digits: as a number it would be
// another number, silently.
pg.types.setTypeParser(pg.types.builtins.INT8, (value: string) => {
  const n = Number(value);
  return Number.isSafeInteger(n) ? n : value;
});

/** How a statement is sent. */
export interface QueryOptions {
  /**
   * As a named (prepared) statement: each connection parses and analyses it once, and PostgreSQL
   * plans it per execution until, after five, it may settle on one generic plan; never as the
   * worker role, which plans every execution afresh (src/db/roles.ts, `WORKER_PLAN_CACHE_MODE`),
   * so a worker's named statement saves its parsing only. For short statements sent very often whose plan does not depend on
   * their values (an event's insert, an outbox consumer's cursor reads and moves), where planning
   * is much of the work. Not for statements whose best plan depends on their values (arrays of
   * varying size, selective filters): a generic plan can be slower than the planning it saves.
   * The name is derived from the text (`statementName`) and the connection: one text, one statement per connection.
   */
  prepare?: boolean;
  /**
   * How this statement's result values are read (node-postgres's per-query `types`), instead of the
   * process's parsers: for one statement whose values must be read otherwise (the analytic chat's
   * query reads json and jsonb numbers exactly, src/retrieval/analytic/run.ts).
   */
  types?: pg.CustomTypesConfig;
}

/**
 * How the last statement of a message is sent (Tx.queryAfter, Tx.copyThen): as any statement (QueryOptions), and
 * with `commit`, the transaction's COMMIT in the same message, after it (one round trip fewer), where no commit hook
 * is in force (runWithCommitHook: its work must run after the transaction's writes and before its COMMIT); with a hook,
 * the transaction commits at the end of its unit of work, as any other. Either way the statement is then the unit's
 * last: one sent after it fails. A failure of the message (of any of its statements, or of the COMMIT itself) fails
 * the unit, and the transaction is rolled back. Test doubles ignore it (their transaction commits at its end).
 */
export interface LastStatementOptions extends QueryOptions {
  commit?: boolean;
}

/** A statement to send (Tx.queryAfter): its text, its parameters' values, and whether it is a named statement (QueryOptions.prepare). */
export interface Statement {
  text: string;
  values?: unknown[];
  prepare?: boolean;
}

/**
 * `before` and then `text` in one message where the transaction can (Tx.queryAfter), one after the
 * other where it cannot (test doubles); either way `text`'s result.
 */
export async function queryAfter<R extends pg.QueryResultRow = pg.QueryResultRow>(
  tx: Tx,
  before: readonly Statement[],
  text: string,
  values?: unknown[],
  options?: LastStatementOptions,
): Promise<pg.QueryResult<R>> {
  if (tx.queryAfter) return tx.queryAfter<R>(before, text, values, options);
  for (const statement of before) await tx.query(statement.text, statement.values, { prepare: statement.prepare });
  return tx.query<R>(text, values, options);
}

/** A `COPY … FROM STDIN` (Tx.copyThen): its data made ahead, and statements without parameters to run before it. */
export interface CopyIn {
  sql: string;
  data: readonly Buffer[];
  before?: readonly string[];
}

/**
 * `copy`, then `after` and `text`, in one message where the transaction can (Tx.copyThen), one after the other
 * where it cannot (test doubles with copyFrom only); either way `text`'s result.
 */
export async function copyThen<R extends pg.QueryResultRow = pg.QueryResultRow>(
  tx: Tx,
  copy: CopyIn,
  after: readonly Statement[],
  text: string,
  values?: unknown[],
  options?: LastStatementOptions,
): Promise<pg.QueryResult<R>> {
  if (tx.copyThen) return tx.copyThen<R>(copy, after, text, values, options);
  if (!tx.copyFrom) throw new Error('this transaction cannot COPY');
  await tx.copyFrom(copy.sql, copy.data, { before: copy.before });
  return queryAfter<R>(tx, after, text, values, options);
}

/** What a unit of work may do with its transaction. */
export interface Tx {
  /** One statement in the transaction; test doubles may ignore `options` (`prepare` changes how, not what; `types` how values are read). */
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(text: string, values?: unknown[], options?: QueryOptions): Promise<pg.QueryResult<R>>;
  /**
   * `before`, then the statement `text`, sent in one message (one round trip for all of them, where
   * each statement alone costs one): run in order, as if sent one after the other; answers `text`'s
   * result (those of `before` are dropped). An error in any of them fails the call, and the
   * statements after it are not run (the transaction is then aborted, as after any failed
   * statement). With `commit`, the transaction's COMMIT may go in the message too (LastStatementOptions).
   * Absent on test doubles: `queryAfter` (below) sends them one after the other there.
   */
  queryAfter?<R extends pg.QueryResultRow = pg.QueryResultRow>(before: readonly Statement[], text: string, values?: unknown[], options?: LastStatementOptions): Promise<pg.QueryResult<R>>;
  /**
   * `COPY … FROM STDIN` on the transaction's own connection: `rows` is the text-format data (lines
   * already escaped), whole or in pieces; each piece is taken from `rows` only once the one before it
   * was sent, with a turn of the event loop between two, so that a large COPY is made and sent a piece
   * at a time (a piece may end inside a line, never between the two halves of a surrogate pair).
   * Returns how many rows were copied. `before`: statements without parameters (fixed SQL, checked
   * values inlined) run first, in the COPY's own message (no round trip of their own; their results
   * are dropped, an error in one fails the COPY). Absent on test doubles.
   */
  copyFrom?(sql: string, rows: string | Iterable<string | Buffer>, options?: { before?: readonly string[] }): Promise<number>;
  /**
   * A `COPY … FROM STDIN` (`copy.before` first), its data, then `after` and `text`, all in one message (one round
   * trip; the transaction's opening with them when not sent yet): the statements after the COPY are sent without
   * waiting for it to finish, and run once it has. Answers `text`'s result; a failure of any fails the call (the
   * transaction is then aborted), none after it runs; with `commit`, the COMMIT may go in the message too
   * (LastStatementOptions). Absent on test doubles (`copyThen`, above, sends them one after the other there).
   */
  copyThen?<R extends pg.QueryResultRow = pg.QueryResultRow>(copy: CopyIn, after: readonly Statement[], text: string, values?: unknown[], options?: LastStatementOptions): Promise<pg.QueryResult<R>>;
  /**
   * `COPY … TO STDOUT` on the transaction's own connection: the bytes, read from the server only as
   * fast as they are consumed. Consume it to its end before the next statement. Destroying it
   * earlier closes the connection (a half-read COPY cannot be left behind), so the transaction
   * fails and the connection is discarded. Each chunk holds whole or partial records (one per row
   * PostgreSQL sent); `records` counts them; with `crlf` each record ends with `\r\n` instead of
   * PostgreSQL's `\n` (src/db/copy-records.ts). Absent on test doubles.
   */
  copyTo?(sql: string, options?: { crlf?: boolean }): CopyOut;
  /** The tenant the transaction is bound to (undefined for cross-tenant work). */
  readonly tenantId: number | undefined;
}

/** The bytes of a `COPY … TO STDOUT`, and the records read so far. */
export interface CopyOut extends Readable {
  readonly records: number;
}

export type TenantId = number | string | bigint;

/**
 * Work that must commit with whatever a unit of work writes (the request's audit entry): called
 * just before COMMIT of every transaction started inside `runWithCommitHook`, it may write in that
 * transaction. It answers what to do once that transaction committed, or was abandoned.
 */
export interface CommitHook {
  beforeCommit(tx: Tx, role: 'app' | 'worker'): Promise<CommitFollowUp | undefined>;
}

export interface CommitFollowUp {
  committed(): void;
  abandoned(): void;
}

const commitHooks = new AsyncLocalStorage<CommitHook>();
// A job queued in a slot pool writes under the hook of whoever offered it (none, outside a request),
// not under that of the job whose end started it.
carryIntoQueuedJobs(commitHooks);

/** Runs fn with `hook` called before the commit of every transaction it (and work it starts) opens. */
export function runWithCommitHook<T>(hook: CommitHook, fn: () => T): T {
  return commitHooks.run(hook, fn);
}

/**
 * Runs fn (and work it starts) outside any commit hook: for background work a request only started (a
 * connector run), whose transactions are not the request's and carry none of its work (its audit entry).
 */
export function outsideCommitHooks<T>(fn: () => T): T {
  return commitHooks.exit(fn);
}

/** `svc.datasource.idle-timeout`'s default. */
export const DEFAULT_IDLE_TIMEOUT_MS = 60_000;

interface DatabaseOptions {
  appUrl: string;
  workerUrl: string;
  poolSize: number;
  /**
   * How long a unit of work waits for a connection (a free one of its pool, or a new one to open)
   * before it fails as the database being unavailable; unset: as long as it takes.
   */
  connectTimeoutMs?: number;
  /** How long its close waits for each pool's connections before cutting them (`svc.datasource.close-timeout`); unset: 5 s. */
  closeTimeoutMs?: number;
  /** How long a pool's connection may stay unused before the pool closes it (`svc.datasource.idle-timeout`); unset: 60 s. */
  idleTimeoutMs?: number;
  /** The role the analytic chat's SQL runs as (`svc.datasource.analytic-role`); unset: `svc_analytic`. */
  analyticRole?: string;
}

/**
 * The application's connections. `withTenant` is how request handlers reach tenant data: one
 * transaction, as the application role, with the tenant set locally, so row-level security
 * filters every statement even when it forgets its WHERE clause. `crossTenant` is for background
 * work that must see every tenant and says so in its name.
 */
export class Database {
  readonly app: pg.Pool;
  readonly worker: pg.Pool;
  /** Units holding an application connection for long, at once at most (see `holdConnection`). */
  readonly heldLimit: number;
  private readonly held: SlotPool;
  /** The role the analytic chat's SQL takes with `SET LOCAL ROLE` (src/retrieval/analytic/run.ts). */
  readonly analyticRole: string;
  private readonly closeTimeoutMs: number | undefined;

  constructor(options: DatabaseOptions) {
    this.analyticRole = options.analyticRole ?? DEFAULT_ANALYTIC_ROLE;
    this.closeTimeoutMs = options.closeTimeoutMs;
    // No connection within the timeout: pg-pool's "timeout exceeded when trying to connect", which
    // `isDatabaseUnavailable` reads as unavailable (a 503). Nothing of the unit was sent yet, so
    // giving up leaves no outcome unknown: a hung database, or a pool whose connections all wait
    // on one, fails further work instead of queueing it without end.
    const connectionTimeoutMillis = options.connectTimeoutMs ?? 0;
    // Kept for a while when unused (pg-pool's own default is 10 s): a new connection pays its setup
    // again, and its session's temporary staging tables and parsed statements, on first use.
    const idleTimeoutMillis = options.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS;
    const pools = { max: options.poolSize, connectionTimeoutMillis, idleTimeoutMillis };
    this.app = resilientPool({ connectionString: options.appUrl, ...pools, application_name: 'svc-hub' });
    this.worker = resilientPool({ connectionString: options.workerUrl, ...pools, application_name: 'svc-hub worker' });
    this.heldLimit = Math.max(1, options.poolSize - 2);
    this.held = new SlotPool(this.heldLimit, this.heldLimit, Number.POSITIVE_INFINITY);
  }

  /**
   * Runs `work`, which holds one application connection for long (a connector run's chunk
   * transaction, an export's streaming snapshot, an analytic query), once a place among such units
   * is free: at most the pool less two of them run at once in the process, whatever their kind, so
   * the API and the rest of the hub always find two connections of the pool (`heldLimit`; one place
   * at least, with the smallest pool of three). Further units wait, tenants taking turns. `work`
   * must open one connection at a time, and never wait for another held unit.
   */
  holdConnection<T>(tenantId: number, work: () => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      // The pool starts a queued unit in the context it was asked for in, not in that of the unit whose end frees the place.
      this.held.offer(tenantId, () => {
        try {
          return work().then(resolve, reject);
        } catch (err) {
          reject(err); // thrown before it returned a promise: the place is free again at once
          return Promise.resolve();
        }
      });
    });
  }

  /**
   * One transaction as the application role with `svc.tenant_id` set for its duration. With
   * `asyncCommit` its COMMIT does not wait for its WAL to reach the disk (`synchronous_commit` off for
   * the transaction): see TenantTxOptions.
   */
  async withTenant<T>(tenantId: TenantId | undefined | null, fn: (tx: Tx) => Promise<T>, options?: TenantTxOptions): Promise<T> {
    const id = checkedTenant(tenantId);
    // `begin` and the settings travel with the transaction's first statement (see `transaction`):
    // `id` is a checked non-negative safe integer, so inlining it is safe.
    const settings = options?.asyncCommit ? `${tenantSetting(id)}, ${ASYNC_COMMIT}` : tenantSetting(id);
    return inTenantContext(id, () => this.transaction(this.app, id, fn, ['begin', `select ${settings}`]));
  }

  /**
   * Reads of one tenant as the application role, without a transaction around them: each statement
   * travels in one message with the tenant setting and read-only mode
   * (`select set_config(…, true), …` then the statement, then Sync), and that message is its own
   * implicit transaction, which the server ends at the Sync. One round trip per statement: no
   * `begin`, no `commit`. What the unit sees is what a READ COMMITTED transaction sees (there too
   * each statement takes its own snapshot); the settings end with each statement, so nothing is
   * left on the pooled connection; a write is refused by the server ("read-only transaction").
   * For request handlers that only read. The request's audit hook has nothing to add to a unit
   * that writes nothing, so none is called.
   */
  async readWithTenant<T>(tenantId: TenantId | undefined | null, fn: (tx: Tx) => Promise<T>): Promise<T> {
    const id = checkedTenant(tenantId);
    const text = `select ${tenantSetting(id)}, set_config('transaction_read_only', 'on', true)`;
    const work = async () => {
      const client = await this.app.connect();
      // Through the extended protocol, the settings are a named statement of the connection's, bound with the tenant.
      const opening = [{ text, prepared: { name: nameFor(client, READ_OPENING, { prepare: true })!, text: READ_OPENING, values: [String(id)] } }];
      let broken = false;
      try {
        return await fn({
          tenantId: id,
          query: <R extends pg.QueryResultRow>(text: string, values?: unknown[], options?: QueryOptions) =>
            traced<R>(client, text, values, opening, nameFor(client, text, options), options?.types).catch((err: unknown) => {
              // A statement that failed on the wire (not in the server) may have left the connection mid-message.
              if (!(err instanceof pg.DatabaseError)) broken = true;
              throw err;
            }),
        });
      } finally {
        client.release(broken);
      }
    };
    return inTenantContext(id, work);
  }

  /** One transaction as the application role with no tenant: tenant tables show no rows. */
  async withoutTenant<T>(fn: (tx: Tx) => Promise<T>): Promise<T> {
    return this.transaction(this.app, undefined, fn);
  }

  /** One transaction as the worker role, which sees every tenant. For background work only. */
  async crossTenant<T>(job: string, fn: (tx: Tx) => Promise<T>): Promise<T> {
    return runWithContext({ job }, () => this.transaction(this.worker, undefined, fn));
  }

  /**
   * One statement as the worker role in autocommit: `crossTenant` without the transaction around
   * it (two round trips fewer), for background work whose unit is a single statement.
   */
  async crossTenantQuery<R extends pg.QueryResultRow = pg.QueryResultRow>(job: string, text: string, values?: unknown[], options?: QueryOptions): Promise<pg.QueryResult<R>> {
    if (!options?.prepare) return runWithContext({ job }, () => traced<R>(this.worker, text, values, undefined, undefined, options?.types));
    // A named statement's name is its connection's own (`nameFor`): the connection is taken here.
    return runWithContext({ job }, async () => {
      const client = await this.worker.connect();
      let failure: Error | undefined;
      try {
        return await traced<R>(client, text, values, undefined, nameFor(client, text, options), options?.types);
      } catch (err) {
        // As pool.query does, but a connection whose statement the server refused stays usable.
        if (!(err instanceof pg.DatabaseError)) failure = err instanceof Error ? err : new Error(String(err));
        throw err;
      } finally {
        client.release(failure);
      }
    });
  }

  /** The ping under way, which callers arriving meanwhile share. */
  private pinging: Promise<void> | undefined;

  /**
   * `select 1` on the application pool, given up after `timeoutMs`: a database that accepts
   * connections but does not answer (a hung server, a network path lost without a reset) fails the
   * ping instead of holding it. Callers that ask while a ping is under way take its answer (and its
   * timeout) instead of sending their own: a burst of health requests (`GET /api/platform/health`)
   * takes one connection and wakes the server once, not once per request.
   */
  ping(timeoutMs = 2_000): Promise<void> {
    this.pinging ??= this.answerWithin('select 1', timeoutMs)
      .then(() => undefined)
      .finally(() => {
        this.pinging = undefined;
      });
    return this.pinging;
  }

  /**
   * A read on the application pool, given up after `timeoutMs` (the wait for a connection
   * included), as the health checks need: the connection of a statement that timed out is dropped,
   * not reused.
   */
  async answerWithin(text: string, timeoutMs: number): Promise<pg.QueryResult> {
    let timer: NodeJS.Timeout | undefined;
    const answered = this.app.query({ text, query_timeout: timeoutMs } as pg.QueryConfig);
    answered.catch(() => undefined);
    try {
      return await Promise.race([
        answered,
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error(`the database did not answer within ${timeoutMs} ms`)), timeoutMs);
        }),
      ]);
    } finally {
      clearTimeout(timer);
    }
  }

  async close(): Promise<void> {
    await Promise.allSettled([endPool(this.app, this.closeTimeoutMs), endPool(this.worker, this.closeTimeoutMs)]);
  }

  /**
   * One transaction on a connection of `pool`. The statements that open it (`opening`) are not sent
   * on their own: they travel in one message with the transaction's first statement
   * (`queryAfterOpening`), which saves a round trip per transaction (a read route's transaction is
   * often one statement: two round trips instead of three). A COPY FROM as the first statement takes
   * them in its own message too (a COPY TO has them sent before it), and a unit of work that runs no
   * statement opens nothing and commits nothing.
   */
  private async transaction<T>(pool: pg.Pool, tenantId: number | undefined, fn: (tx: Tx) => Promise<T>, opening: readonly string[] = ['begin']): Promise<T> {
    const client = await pool.connect();
    // Set once the opening statements have been sent (alone, or with the first statement).
    let opened: Promise<unknown> | undefined;
    const openAlone = () => {
      opened ??= client.query(opening.join(';\n'));
      return opened;
    };
    const hook = commitHooks.getStore();
    /** The message that carried the COMMIT (LastStatementOptions.commit), once sent. */
    let committing: Promise<unknown> | undefined;
    /** `text` after `before` (none: alone), in one message; the transaction's opening first when not sent yet. */
    const send = <R extends pg.QueryResultRow>(before: readonly Opening[], text: string, values?: unknown[], options?: LastStatementOptions) => {
      if (committing) return Promise.reject(new Error(AFTER_COMMIT));
      const name = nameFor(client, text, options);
      // Without a commit hook only: the hook's work must come between the unit's writes and the COMMIT.
      const closing = options?.commit && !hook ? COMMIT : undefined;
      if (opened) {
        const sent = traced<R>(client, text, values, before.length > 0 ? before : undefined, name, options?.types, closing);
        if (closing) committing = sent;
        return sent;
      }
      const first = traced<R>(client, text, values, [...opening, ...before], name, options?.types, closing);
      if (closing) committing = first;
      // The first statement's own failure is the caller's to handle (as any statement's); what
      // matters from here on is only that the transaction was opened.
      opened = first.then(
        () => undefined,
        () => undefined,
      );
      return first;
    };
    /** Statements sent ahead of another in its message: each with its values, named when it asks to be prepared. */
    const sentAhead = (statements: readonly Statement[]): Opening[] => statements.map((s) => ({ text: s.text, values: s.values ?? [], name: nameFor(client, s.text, s) }));
    const tx: Tx = {
      tenantId,
      query: <R extends pg.QueryResultRow>(text: string, values?: unknown[], options?: QueryOptions) => send<R>([], text, values, options),
      queryAfter: <R extends pg.QueryResultRow>(before: readonly Statement[], text: string, values?: unknown[], options?: LastStatementOptions) =>
        send<R>(sentAhead(before), text, values, options),
      copyThen: <R extends pg.QueryResultRow>(copy: CopyIn, after: readonly Statement[], text: string, values?: unknown[], options?: LastStatementOptions) =>
        send<R>([...(copy.before ?? []), { copy: copy.sql, data: copy.data }, ...sentAhead(after)], text, values, options),
      copyFrom: (sql, rows, options) => {
        if (committing) return Promise.reject(new Error(AFTER_COMMIT));
        const before = options?.before ?? [];
        if (opened) return copyInto(client, sql, rows, before);
        // The opening goes in the COPY's message too (one round trip fewer); its failure is the COPY's.
        const copied = copyInto(client, sql, rows, [...opening, ...before]);
        opened = copied.then(
          () => undefined,
          () => undefined,
        );
        return copied;
      },
      copyTo: (sql, options) => {
        // Queued behind the opening statements: node-postgres runs a connection's queries in order.
        void openAlone().catch(() => undefined);
        return copyOut(client, sql, options?.crlf === true);
      },
    };
    let followUp: CommitFollowUp | undefined;
    let broken = false;
    try {
      const result = await fn(tx);
      if (committing) {
        // Committed in the message of the unit's last statement (no hook in force): a failure of that message
        // the unit did not pass on still fails it (and rolls the transaction back, below).
        await committing;
        return result;
      }
      if (hook) followUp = await hook.beforeCommit(tx, pool === this.app ? 'app' : 'worker');
      if (opened) {
        // A failed opening (the COPY path does not await it) must fail the transaction here.
        await opened;
        await client.query('commit');
      }
      followUp?.committed();
      return result;
    } catch (err) {
      followUp?.abandoned();
      if (opened) {
        try {
          await client.query('rollback');
        } catch {
          broken = true;
        }
      }
      throw err;
    } finally {
      client.release(broken);
    }
  }
}

/** A tenant id as a non-negative safe integer (safe to inline in SQL), or NoTenantError. */
function checkedTenant(tenantId: TenantId | undefined | null): number {
  if (tenantId === undefined || tenantId === null || tenantId === '') throw new NoTenantError();
  const id = Number(tenantId);
  if (!Number.isSafeInteger(id) || id < 0) throw new NoTenantError();
  return id;
}

/** How a tenant transaction commits (Database.withTenant). */
export interface TenantTxOptions {
  /**
   * COMMIT returns once the commit is recorded in PostgreSQL's WAL buffers, without waiting for the
   * WAL to be flushed to disk (`synchronous_commit = off` for this transaction only; the WAL writer
   * flushes it within a few hundred milliseconds). What it wrote is visible to others at once and
   * is never seen half-written, but a crash of PostgreSQL or of its machine in that window loses
   * the transaction as if it had rolled back. Any later transaction that commits synchronously
   * flushes the WAL up to its own commit, this one's included: its durability covers this one's.
   * For work that is only done once such a later commit says so (a connector run's chunks: the
   * run's end commits synchronously, docs/connector-runs.md), never for work whose effects leave the
   * database before that (an event a consumer may deliver, an answer a client acts on).
   */
  asyncCommit?: boolean;
}

/** What ends a message that commits its transaction (LastStatementOptions.commit). */
const COMMIT = ['commit'] as const;
const AFTER_COMMIT = 'the transaction was committed with its last statement: nothing can be sent after it';

/** The setting that makes a transaction's COMMIT asynchronous (TenantTxOptions.asyncCommit). */
const ASYNC_COMMIT = `set_config('synchronous_commit', 'off', true)`;

/** The expression that sets the tenant until the transaction ends; `id` comes from `checkedTenant`, so inlining it is safe. */
const tenantSetting = (id: number) => `set_config('svc.tenant_id', '${id}', true)`;
/** `readWithTenant`'s settings as a named statement: the tenant id its parameter. */
const READ_OPENING = `select set_config('svc.tenant_id', $1, true), set_config('transaction_read_only', 'on', true)`;

/**
 * Runs `work` with the tenant in the logging context: a request's context is annotated with it
 * (the request acts for that tenant throughout); anywhere else (background work, which may serve
 * several tenants in turn) the transaction's lines carry its tenant in a context of their own,
 * sharing the caller's credentials, and the caller's context is left as it is. Background work
 * gives each tenant's unit a context of its own with `runForTenant`.
 */
function inTenantContext<T>(id: number, work: () => Promise<T>): Promise<T> {
  const ctx = currentContext();
  if (ctx?.tenantId === String(id)) return work();
  if (ctx && ctx.tenantId === undefined && ctx.requestId !== undefined) {
    annotateContext({ tenantId: String(id) });
    return work();
  }
  return runWithContext({ tenantId: String(id) }, work);
}

const NO_ATTRIBUTES = {};

/**
 * One statement in a span; with `opening`, the statements that open its transaction go with it (one
 * round trip), with `closing`, the statements that end it (its COMMIT) after it; with `types`, its
 * values are read by those parsers (QueryOptions.types).
 */
function traced<R extends pg.QueryResultRow>(
  client: pg.PoolClient | pg.Pool,
  text: string,
  values?: unknown[],
  opening?: readonly Opening[],
  name?: string,
  types?: pg.CustomTypesConfig,
  closing?: readonly string[],
): Promise<pg.QueryResult<R>> {
  const run = () =>
    opening || closing
      ? queryAfterOpening<R>(client as pg.PoolClient, opening ?? [], text, values, name, types, closing)
      : name || types
        ? client.query<R>({ name, text, values: values as unknown[], types })
        : client.query<R>(text, values as unknown[]);
  // With tracing off, no span's name and attributes are made from the text (every statement of every request).
  if (!tracingOn()) return inSpan('', NO_ATTRIBUTES, run);
  const operation = /^\s*(\w+)/.exec(text)?.[1]?.toUpperCase() ?? 'SQL';
  return inSpan(
    `db ${operation}`,
    { 'db.system.name': 'postgresql', 'db.query.text': text.length > 2000 ? `${text.slice(0, 2000)}…` : text, 'db.operation.name': operation },
    run,
    SpanKind.CLIENT,
  );
}

/**
 * The name of a named statement on one connection: the text's (`statementName`) and the
 * connection's own number. Names are never shared between connections: a server that runs several
 * client connections in one session (PGlite's socket server, test/harness/pgvector.ts) would
 * otherwise refuse the second connection's `Parse` of a name the first one prepared.
 */
function nameFor(client: pg.PoolClient, text: string, options: QueryOptions | undefined): string | undefined {
  if (!options?.prepare) return undefined;
  let number = connectionNumbers.get(client);
  if (number === undefined) {
    number = ++connectionsNumbered;
    connectionNumbers.set(client, number);
  }
  return `${statementName(text)}_${number}`;
}

const connectionNumbers = new WeakMap<pg.PoolClient, number>();
let connectionsNumbered = 0;

/** The text part of prepared statements' names: `svc_` and the start of the text's SHA-256 (one text, one name). */
const statementNames = new Map<string, string>();

export function statementName(text: string): string {
  let name = statementNames.get(text);
  if (!name) {
    name = `svc_${createHash('sha256').update(text).digest('hex').slice(0, 24)}`;
    statementNames.set(text, name);
  }
  return name;
}

/**
 * Streams `rows` (COPY text format) through `sql` (a `COPY … FROM STDIN`) on `client`, a piece at a time: the
 * next piece is asked for once the last one is taken (the connection drained, or a turn of the event loop
 * later). Sent as one string, a chunk of 1,000 rows of 1,600 columns (18 MB) was encoded in one go and held
 * the event loop 0.14 to 0.24 s. A piece left untaken by an error is never asked for.
 */
function copyInto(client: pg.PoolClient, sql: string, rows: string | Iterable<string | Buffer>, before: readonly string[] = []): Promise<number> {
  return inSpan(
    'db COPY',
    { 'db.system.name': 'postgresql', 'db.query.text': sql, 'db.operation.name': 'COPY' },
    async () => {
      // `before` and the COPY as one multi-statement text (the simple protocol runs them in order, the
      // COPY taking its data once they are done); the rows those statements answer are dropped.
      const query = sentAtOnce(copyFromStdin(before.length > 0 ? [...before, sql].join(';\n') : sql));
      if (before.length > 0) Object.assign(query, { handleRowDescription: () => undefined, handleDataRow: () => undefined });
      const stream = client.query(query);
      let failed = false;
      const done = new Promise<number>((resolve, reject) => {
        stream.on('error', (err) => {
          failed = true;
          reject(err);
        });
        stream.on('finish', () => resolve(stream.rowCount));
      });
      done.catch(() => undefined); // awaited below
      for (const piece of typeof rows === 'string' ? [rows] : rows) {
        if (failed) break;
        if (stream.write(piece)) await turn();
        else await Promise.race([once(stream, 'drain'), done]);
      }
      // Ended only when nothing failed: after the server's error the stream has no connection to end on.
      if (!failed) stream.end();
      return done;
    },
    SpanKind.CLIENT,
  );
}

/** The parts of pg-copy-streams' COPY FROM query that sentAtOnce changes. */
interface CopyFromInternals {
  connection: pg.Connection | null;
  submit(connection: pg.Connection): void;
  handleCopyInResponse(connection: pg.Connection): void;
  flushChunk(chunk: Buffer): boolean;
}

/**
 * `query` (pg-copy-streams' COPY FROM) sending its data as soon as its statement is sent, not once the
 * server's CopyInResponse has come back: the server reads the data from the connection when the COPY
 * starts, and the round trip in between (the server idle, waiting for data, until the hub's event loop
 * turns to its answer) is saved. Should the statement fail before the COPY starts (a statement before it
 * in the same text, a COPY refused), the server ignores the CopyData and CopyDone messages that arrive
 * outside a COPY (the protocol provides for a client still sending after a failed COPY), and the failure
 * is the query's as before; nothing is written on the connection once the query has failed.
 */
function sentAtOnce<Q extends CopyStreamQuery>(query: Q): Q {
  const copy = query as unknown as CopyFromInternals;
  const submit = copy.submit.bind(copy);
  const flushChunk = copy.flushChunk.bind(copy);
  copy.submit = (connection) => {
    submit(connection);
    // As on the server's CopyInResponse: what was written so far is sent, what follows goes as written.
    copy.handleCopyInResponse(connection);
  };
  // Failed (the server's error came): the query has let go of its connection; what is left is not sent.
  copy.flushChunk = (chunk) => (copy.connection ? flushChunk(chunk) : true);
  return query;
}

/** `sql` (a `COPY … TO STDOUT`) on `client` as a stream of records; its span lasts until the stream is done. */
function copyOut(client: pg.PoolClient, sql: string, crlf: boolean): CopyOut {
  let stream!: CopyRecords;
  // startActiveSpan runs its callback at once: `stream` is set before inSpan returns.
  void inSpan(
    'db COPY',
    { 'db.system.name': 'postgresql', 'db.query.text': sql, 'db.operation.name': 'COPY' },
    () => {
      stream = client.query(new CopyRecords(sql, { crlf }));
      return new Promise<void>((resolve, reject) => finished(stream, (err) => (err ? reject(err) : resolve())));
    },
    SpanKind.CLIENT,
  ).catch(() => undefined);
  let ended = false;
  stream.once('end', () => {
    ended = true;
  });
  stream.once('close', () => {
    if (ended) return;
    // Closed before its end (abandoned, or failed): the server may still be sending, and the
    // connection can run nothing else until it has read it all. Cut it instead: its queries fail,
    // and the pool discards it. (After an error the transaction is lost anyway.)
    stream.on('error', () => undefined);
    client.connection.stream.destroy();
  });
  return stream;
}
