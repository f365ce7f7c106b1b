import { loadModule, parse } from 'libpg-query';
import pg from 'pg';
import { exactNumbersAsText, parseJsonExact } from '../../connectors/engine/exact-json.js';
import { publicTableMessage } from '../../connectors/target/ddl.js';
import { type CommitHook, type Database, runWithCommitHook } from '../../db/database.js';
import { loggableMessage } from '../../observability/database-errors.js';
import { logger } from '../../observability/logger.js';
import { GuardRefusal } from './ast.js';
import { memoryParts } from './plan-memory.js';
import { AnalyticRefusal } from './refusal.js';
import { checkStatementShape } from './statement-shape.js';

export interface RunOptions {
  /** The statement timeout of the query, in milliseconds. */
  timeoutMs: number;
  /** Rows beyond this many are dropped (guard 4 already bounds the LIMIT; this is the second wall). */
  maxRows: number;
  /**
   * The answer's size at most, in bytes of its rows as JSON (`svc.analytic.max-answer-bytes`):
   * measured in PostgreSQL before any row is sent; a larger answer is refused (guard 5).
   */
  maxBytes: number;
  /**
   * The asking client went away: a statement not sent yet is not sent, and one running is cancelled
   * in PostgreSQL (`pg_cancel_backend` of its backend from another connection of the pool), so it
   * gives back its connection and its place among the held connections at once instead of at the
   * timeout. The run then rejects with the signal's reason.
   */
  signal?: AbortSignal;
  /**
   * PostgreSQL's `work_mem` of the statement, in kilobytes (`svc.analytic.work-mem`); default
   * DEFAULT_WORK_MEM_KB. Set for the transaction whatever the server's, with `hash_mem_multiplier` 1 and no
   * parallel workers (docs/analytic-guards.md, "Resources of one statement").
   */
  workMemKb?: number;
  /**
   * PostgreSQL's `temp_file_limit` of the statement, in kilobytes (`svc.analytic.temp-file-limit`), or
   * none where the application role may not set it (src/db/roles.ts, tempFileLimitCheck): the server's
   * own limit then holds alone. A lower limit of the server's holds too.
   */
  tempFileLimitKb?: number;
  /**
   * The most memory the statement's plan may hold at once, in kilobytes (`svc.analytic.statement-memory`); default
   * DEFAULT_STATEMENT_MEMORY_KB. Its sorts, hashes and buffers of rows (plan-memory.ts, memoryParts) each hold up to
   * `workMemKb`: a plan with more of them than fit is refused (guard 5) before it runs.
   */
  statementMemoryKb?: number;
}

/** hash_mem_multiplier 1 for the transaction: a hash holds work_mem, not twice it (PostgreSQL 13 and later have the setting; before, a hash held work_mem). */
const HASH_MEM_ONCE = "select pg_catalog.set_config(name, '1', true) from pg_catalog.pg_settings where name = 'hash_mem_multiplier'; ";

/** PostgreSQL's own default work_mem (4MB), set explicitly so that a server configured with a larger one does not multiply it. */
export const DEFAULT_WORK_MEM_KB = 4096;

/** `svc.analytic.statement-memory`'s default (512MB): 128 sorts and hashes at the default work_mem. */
export const DEFAULT_STATEMENT_MEMORY_KB = 512 * 1024;

/** The refusal of a plan holding more sorts, hashes and buffers of work_mem than the statement's memory takes. */
function planMemoryRefusal(parts: number, allowed: number, workMemKb: number, statementMemoryKb: number): string {
  return `The query's plan has ${parts} sorts, hashes and buffers of rows, each holding up to ${memoryText(workMemKb)} (svc.analytic.work-mem): more than the ${allowed} that fit in the ${memoryText(statementMemoryKb)} one query may hold (svc.analytic.statement-memory). Sort, group and join fewer times.`;
}

export interface RunResult {
  rows: Record<string, unknown>[];
  rowCount: number;
}

/** PostgreSQL's refusals that guard 5 answers as a refusal rather than a failure. */
const REFUSALS: Record<string, (timeoutMs: number) => string> = {
  '57014': (ms) => `The query ran longer than ${ms} ms and was stopped.`,
  '25006': () => 'The query tried to change data; analytic queries only read.',
  '42501': () => 'The query reached data it is not allowed to read.',
};

/**
 * The classes of SQLSTATE that say the statement itself failed, not the hub or the database: a data exception
 * (22: a division by zero, an overflow, a bad cast), a cardinality violation (21: a scalar subquery of several rows),
 * a feature not supported (0A), an undefined function or operator or another syntax or access rule (42), an SQL
 * routine's or an external routine's exception (2F, 38, 39), a program limit (54), and of class 53 (insufficient
 * resources) only 53400, a limit the server sets on one statement (`temp_file_limit`: a sort or hash over a cross
 * join spilling more than it allows). Guard 5 answers them as a refusal naming PostgreSQL's message (the question
 * may be put another way); any other error (a lost connection, a server out of memory or disk) is the hub's
 * failure and is thrown.
 */
const QUERY_FAILURE = /^((0A|21|22|2F|38|39|42|54)[0-9A-Z]{3}|53400)$/;

/** PostgreSQL's SQLSTATE for a limit of the configuration exceeded (`temp_file_limit`'s). */
const CONFIGURATION_LIMIT_EXCEEDED = '53400';

/**
 * The refusal of a statement stopped by temp_file_limit, naming the limit PostgreSQL applied (its message says
 * `temporary file size exceeds "temp_file_limit" (1048576kB)`), or undefined for another error.
 */
function tempFilesRefusal(code: unknown, message: string): string | undefined {
  if (code !== CONFIGURATION_LIMIT_EXCEEDED || !/temp_file_limit/.test(message)) return undefined;
  const kb = /\((\d+)kB\)/.exec(message)?.[1];
  const limit = kb === undefined ? 'the limit' : memoryText(Number(kb));
  return `The query needed more than ${limit} of temporary files in the database (temp_file_limit, svc.analytic.temp-file-limit) and was stopped: ask for fewer rows, or sort and join fewer of them.`;
}

/** Kilobytes as PostgreSQL writes memory, in the largest unit that divides them (1048576 → `1GB`). */
function memoryText(kb: number): string {
  if (kb > 0 && kb % (1024 * 1024) === 0) return `${kb / (1024 * 1024)}GB`;
  if (kb > 0 && kb % 1024 === 0) return `${kb / 1024}MB`;
  return `${kb}kB`;
}

/**
 * The read-only transaction has nothing to audit atomically with (it cannot write), and the
 * request's audit hook would try an INSERT in it, which a read-only transaction refuses: it runs
 * with this hook instead, and the call's audit entry is written when the call finishes.
 */
const NO_COMMIT_WORK: CommitHook = { beforeCommit: async () => undefined };

/** Carries the result out of withTenant, which then rolls the transaction back. */
class Done {
  constructor(readonly result: RunResult) {}
}

let loaded: Promise<void> | undefined;

/**
 * Guard 5: runs an already guarded SELECT in the tenant's transaction made read-only, with a
 * statement timeout, a search_path of pg_catalog alone (relations arrive resolved and
 * schema-qualified; unqualified functions and operators can only be the built-in ones), and as the
 * analytic role (`db.analyticRole`, src/db/roles.ts), which may read the tenants' ext tables under
 * row-level security and nothing of the hub's schemas, nor other sessions' query texts, nor signal
 * them. The transaction is always rolled back, which also undoes the role and any session setting a
 * function might have changed. So even a statement that slipped past guards 1-4 cannot write,
 * cannot run for long, and cannot see another tenant's rows: set_config, which could change the
 * tenant, or the role back to the application role, is refused to the analytic role by PostgreSQL
 * where the hub could take it from PUBLIC (src/db/roles.ts, keepSetConfigFromAnalytic; the start
 * warns where it could not), and by guard 2 everywhere (docs/analytic-guards.md).
 *
 * The text is parsed again first and must be one SELECT (guard 1): several statements would let
 * a COMMIT end the read-only transaction. A timeout, a write, a missing privilege or a failure of the statement
 * itself (QUERY_FAILURE) becomes an AnalyticRefusal of guard 5; any other error is thrown as it is.
 */
export async function runReadOnly(db: Database, tenantId: number, sql: string, options: RunOptions): Promise<RunResult> {
  const { timeoutMs, maxRows, maxBytes, signal, workMemKb = DEFAULT_WORK_MEM_KB, tempFileLimitKb, statementMemoryKb = DEFAULT_STATEMENT_MEMORY_KB } = options;
  if (!Number.isSafeInteger(timeoutMs) || timeoutMs <= 0) throw new Error(`timeoutMs must be a positive integer, not ${timeoutMs}`);
  if (!Number.isSafeInteger(workMemKb) || workMemKb < 64) throw new Error(`workMemKb must be an integer of at least 64, not ${workMemKb}`);
  if (!Number.isSafeInteger(statementMemoryKb) || statementMemoryKb < 64) throw new Error(`statementMemoryKb must be an integer of at least 64, not ${statementMemoryKb}`);
  if (tempFileLimitKb !== undefined && (!Number.isSafeInteger(tempFileLimitKb) || tempFileLimitKb < 0)) {
    throw new Error(`tempFileLimitKb must be a non-negative integer, not ${tempFileLimitKb}`);
  }
  if (!Number.isSafeInteger(maxRows) || maxRows < 0) throw new Error(`maxRows must be a non-negative integer, not ${maxRows}`);
  if (!Number.isSafeInteger(maxBytes) || maxBytes <= 0) throw new Error(`maxBytes must be a positive integer, not ${maxBytes}`);
  await oneSelect(sql);
  try {
    await runWithCommitHook(NO_COMMIT_WORK, () =>
      db.withTenant(tenantId, async (tx) => {
        // One round trip; timeoutMs is a checked integer, so inlining it is safe. The role last: the settings
        // are the application role's, the statement the analytic role's (it may read the tenants' ext tables
        // only; row-level security on the tenant set above applies to it as to the application role).
        // The backend's pid last, in the same message: what a cancel names (cancelledOnAbort).
        // The statement's resources (docs/analytic-guards.md, "Resources of one statement"): no parallel workers (one
        // connection and one core, as svc.analytic.concurrency counts), work_mem and hash_mem_multiplier 1 whatever the
        // server's, and temp_file_limit where the application role may set it (SET granted on it: the analytic role may
        // not), never above a lower limit of the server's (in kB in pg_settings, -1 for none; least skips a null).
        const tempFiles =
          tempFileLimitKb === undefined
            ? ''
            : `select pg_catalog.set_config('temp_file_limit', least(${tempFileLimitKb}, nullif(setting::bigint, -1))::text, true) from pg_catalog.pg_settings where name = 'temp_file_limit'; `;
        const opened = (await tx.query(
          `set transaction read only; set local statement_timeout = ${timeoutMs}; set local max_parallel_workers_per_gather = 0; set local work_mem = ${workMemKb}; ${HASH_MEM_ONCE}${tempFiles}set local search_path = pg_catalog; set local standard_conforming_strings = on; set local role ${pg.escapeIdentifier(db.analyticRole)}; select pg_backend_pid() as pid`,
        )) as unknown as pg.QueryResult<{ pid: number }>[];
        const pid = opened[opened.length - 1]!.rows[0]!.pid;
        const started = performance.now();
        let rows: Record<string, unknown>[];
        try {
          signal?.throwIfAborted();
          const statement = bounded(sql, maxRows, maxBytes);
          rows = await cancelledOnAbort(db, pid, timeoutMs, signal, async () => {
            // The plan first (EXPLAIN plans without running): past the statement's memory it never runs. Then the
            // statement, within what is left of the timeout, planning included.
            const explained = await tx.query<{ 'QUERY PLAN': { Plan: unknown }[] }>(`explain (verbose, format json) ${statement}`);
            const parts = memoryParts(explained.rows[0]!['QUERY PLAN'][0]!.Plan);
            const allowed = Math.max(1, Math.floor(statementMemoryKb / workMemKb));
            if (parts > allowed) throw new AnalyticRefusal(5, planMemoryRefusal(parts, allowed, workMemKb, statementMemoryKb), sql);
            const left = Math.ceil(timeoutMs - (performance.now() - started));
            if (left < 1) throw new AnalyticRefusal(5, REFUSALS['57014']!(timeoutMs), sql);
            signal?.throwIfAborted();
            const results = (await tx.query(`set local statement_timeout = ${left}; ${statement}`, undefined, { types: EXACT_TYPES })) as unknown as pg.QueryResult<
              Record<string, unknown>
            >[];
            return results[results.length - 1]!.rows;
          });
        } catch (err) {
          if (signal?.aborted) throw signal.reason;
          if (err instanceof AnalyticRefusal) throw err;
          const code = (err as { code?: unknown }).code;
          if (code === ANSWER_TOO_LARGE) throw new AnalyticRefusal(5, (err as Error).message, sql);
          const refusal = typeof code === 'string' ? REFUSALS[code] : undefined;
          if (refusal) throw new AnalyticRefusal(5, refusal(timeoutMs), sql);
          const tooMuchOnDisk = tempFilesRefusal(code, (err as Error).message);
          if (tooMuchOnDisk) throw new AnalyticRefusal(5, tooMuchOnDisk, sql);
          if (typeof code === 'string' && QUERY_FAILURE.test(code)) {
            // PostgreSQL names the tenant's tables as they run (`ext_t7.gone`, a card older than its table's
            // removal); the user knows them as the card does (`ext.gone`).
            const message = publicTableMessage(tenantId, (err as Error).message);
            throw new AnalyticRefusal(5, `The query failed in the database: ${message} (database error ${code}).`, sql);
          }
          throw err;
        }
        const kept = rows.slice(0, maxRows);
        throw new Done({ rows: kept, rowCount: kept.length });
      }),
    );
  } catch (err) {
    if (err instanceof Done) return err.result;
    throw err;
  }
  throw new Error('unreachable: the read-only transaction ended without a result');
}

/**
 * `statement()`, the statement running on backend `pid`, cancelled in PostgreSQL when `signal` aborts:
 * `pg_cancel_backend(pid)` from another connection of the application pool (the backend's session is
 * the application role's, which may signal its own sessions; the analytic role it took for the
 * statement may not). A cancel that cannot be sent within `timeoutMs` (no connection free) is given
 * up: the statement timeout ends the statement then. This settles only once the cancel sent has been
 * answered, while the transaction is still open: the signal has reached the backend before its
 * connection can go back to the pool, so it can never cancel another unit's statement there (an idle
 * backend ignores a cancel).
 */
export async function cancelledOnAbort<T>(db: Database, pid: number, timeoutMs: number, signal: AbortSignal | undefined, statement: () => Promise<T>): Promise<T> {
  if (!signal) return statement();
  if (!Number.isSafeInteger(pid) || pid <= 0) throw new Error(`not a backend pid: ${pid}`);
  let cancelling: Promise<unknown> | undefined;
  const cancel = () => {
    cancelling = db.answerWithin(`select pg_cancel_backend(${pid})`, timeoutMs).catch((err: unknown) => {
      logger().warn({ err: loggableMessage(err) }, 'a statement whose client went away (an analytic query, a rediscover) could not be cancelled: it runs on to its statement timeout');
    });
  };
  signal.addEventListener('abort', cancel, { once: true });
  try {
    return await statement();
  } finally {
    signal.removeEventListener('abort', cancel);
    await cancelling;
  }
}

const JSON_OID = 114;
const JSONB_OID = 3802;
const JSON_ARRAY_OID = 199;
const JSONB_ARRAY_OID = 3807;
const NUMERIC_ARRAY_OID = 1231;
const INT8_ARRAY_OID = 1016;
const TEXT_ARRAY_OID = 1009;
/**
 * Types node-postgres reads into a value that cannot hold every one of theirs, by their array types:
 * date, timestamp and timestamptz (a Date), float4 and float8 (a number), interval (an object of its
 * parts, which has no infinity: `infinity` came as `{}`, the zero interval).
 */
const HELD_BY_ARRAY: ReadonlyMap<number, number> = new Map([
  [1182, 1082],
  [1115, 1114],
  [1185, 1184],
  [1021, 700],
  [1022, 701],
  [1187, 1186],
]);
const HELD: ReadonlySet<number> = new Set(HELD_BY_ARRAY.values());

/** A bigint as the process reads one (src/db/database.ts): a number, or its digits past ±(2^53 − 1). */
const readInt8 = pg.types.getTypeParser(pg.types.builtins.INT8, 'text') as (text: string) => unknown;
/** A json or jsonb value read as a connector reads a source: a number a double cannot hold as its text in a string. */
const exactJson = (text: string): unknown => exactNumbersAsText(parseJsonExact(text));
/** PostgreSQL's array text as nested arrays of the elements' text (null for NULL), as node-postgres reads a text[]. */
const arrayOfText = pg.types.getTypeParser(TEXT_ARRAY_OID as never, 'text') as (text: string) => unknown;
const eachElement = (value: unknown, read: (text: string) => unknown): unknown =>
  Array.isArray(value) ? value.map((v) => eachElement(v, read)) : value === null ? null : read(value as string);
/**
 * A date, time, float or interval as node-postgres reads it (a Date, a number, an object of the
 * interval's parts), or PostgreSQL's text of it where that cannot hold it, which the answer's JSON
 * would write null or as another value: a time's `infinity` and `-infinity` (read as the numbers
 * ±Infinity), a year past JavaScript's 275760 (an invalid Date, on which the one-cell sentence
 * failed), a float's `NaN`, `Infinity` and `-Infinity`, an interval's `infinity` and `-infinity`
 * (read as no parts at all: the zero interval).
 */
const readHeld = (oid: number) => {
  const read = pg.types.getTypeParser(oid as never, 'text') as (text: string) => unknown;
  return (text: string): unknown => {
    const value = read(text);
    const held =
      value instanceof Date ? Number.isFinite(value.getTime()) : typeof value === 'number' ? Number.isFinite(value) : text !== 'infinity' && text !== '-infinity';
    return held ? value : text;
  };
};

/**
 * How the analytic query's values are read, where node-postgres's own parsers would change a number:
 * json and jsonb (JSON.parse: 1e400 as Infinity, written null in the answer; an integer beyond
 * ±(2^53 − 1) rounded) and their arrays are read with parseJsonExact, such numbers given as strings of
 * their text (as jsonb writes them: `1e400` in digits); a numeric[] (read as doubles) gives each element
 * as its text, as a numeric is given; a bigint[] (read as strings) each element as a bigint is given
 * (a number, or its digits past ±(2^53 − 1), src/db/database.ts); a date or time a Date cannot hold
 * (`infinity`, a year past 275760), a float JSON cannot (`NaN`, `Infinity`) and an infinite interval,
 * alone or in an array, as PostgreSQL's text. A numeric is node-postgres's text already (`NaN`,
 * `Infinity` included).
 * Every other type is read as node-postgres reads it.
 */
const EXACT_TYPES: pg.CustomTypesConfig = {
  getTypeParser: ((oid: number, format?: string) => {
    if (format !== 'binary') {
      if (oid === JSON_OID || oid === JSONB_OID) return exactJson;
      if (oid === JSON_ARRAY_OID || oid === JSONB_ARRAY_OID) return (text: string) => eachElement(arrayOfText(text), exactJson);
      if (oid === NUMERIC_ARRAY_OID) return arrayOfText;
      if (oid === INT8_ARRAY_OID) return (text: string) => eachElement(arrayOfText(text), readInt8);
      if (HELD.has(oid)) return readHeld(oid);
      const element = HELD_BY_ARRAY.get(oid);
      if (element !== undefined) {
        const read = readHeld(element);
        return (text: string) => eachElement(arrayOfText(text), read);
      }
    }
    return pg.types.getTypeParser(oid, format as 'text');
  }) as pg.CustomTypesConfig['getTypeParser'],
};

/** analytic_bound.analytic_answer_fits's SQLSTATE (made by src/retrieval/migrations/retrieval/V3__analytic_answer_bound.sql, moved by V7). */
const ANSWER_TOO_LARGE = 'SV001';

/**
 * The guarded SELECT as a subquery whose first `maxRows` rows are kept (materialized) and measured
 * (the length of each row as a JSON object, column names and nulls included: what the answer costs the
 * hub's memory and the response) before any is returned: an answer over `maxBytes` ends the
 * statement in PostgreSQL (ANSWER_TOO_LARGE), so it never reaches the hub's memory. Built-in names
 * are schema-qualified only where search_path (pg_catalog) would not find them. The rows come back
 * in the subquery's order, with its column names and types.
 */
function bounded(sql: string, maxRows: number, maxBytes: number): string {
  // `bounded_answer.*`, not the bare name: a column of the answer could carry that name.
  return `with bounded_answer as materialized (select * from (${sql}\n) as bounded_answer limit ${maxRows}),
     measured as materialized (select analytic_bound.analytic_answer_fits(coalesce(sum(octet_length(to_json(bounded_answer.*)::text)), 0), ${maxBytes}) as fits from bounded_answer)
select bounded_answer.* from bounded_answer where (select fits from measured)`;
}

async function oneSelect(sql: string): Promise<void> {
  loaded ??= loadModule();
  await loaded;
  let stmts: unknown[];
  try {
    stmts = (await parse(sql)).stmts ?? [];
  } catch (err) {
    throw new AnalyticRefusal(1, `The query is not valid SQL: ${err instanceof Error ? err.message : String(err)}.`, sql);
  }
  try {
    checkStatementShape(stmts);
  } catch (err) {
    if (err instanceof GuardRefusal) throw new AnalyticRefusal(err.guard, err.message, sql);
    throw err;
  }
}
