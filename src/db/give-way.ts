import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';

/**
 * How the owner's schema changes on a live database wait for what they need without holding up the
 * statements of the live pods (docs/operations.md, "Upgrades: two versions side by side"): the
 * migrations (src/db/migrations.ts) and the pgvector preparation (src/retrieval/pgvector.ts).
 */

/**
 * Tries `attempt` until it returns true, pausing between tries: `firstMs`, doubled after each pause
 * up to `maxMs`. `beforePause(ms)` is called before each pause (to say it). A pause is cut short by
 * `signal` (a start's interrupt): the next try then fails on the cut connection.
 */
export async function untilDone(
  attempt: () => Promise<boolean>,
  options: { firstMs: number; maxMs: number; signal?: AbortSignal | undefined; beforePause?: (ms: number) => void },
): Promise<void> {
  for (let pause = options.firstMs; !(await attempt()); pause = Math.min(pause * 2, options.maxMs)) {
    options.beforePause?.(pause);
    await sleep(pause, undefined, { signal: options.signal }).catch(() => undefined);
  }
}

/** PostgreSQL's `lock_not_available`: a lock not granted within `lock_timeout`. */
export const LOCK_NOT_AVAILABLE = '55P03';
/** The pause after a first giving way; doubled after each up to GIVE_WAY_MAX_MS. */
export const GIVE_WAY_FIRST_MS = 1_000;
const GIVE_WAY_MAX_MS = 30_000;

export interface GiveWay {
  /** How long each lock is waited for (`lock_timeout`). */
  lockTimeoutMs: number;
  /** Said before each pause: the error (55P03) and the pause that follows. */
  gaveWay(err: unknown, pauseMs: number): void;
  signal?: AbortSignal | undefined;
  /** The pause after a first giving way (default GIVE_WAY_FIRST_MS); tests set one longer than themselves. */
  firstPauseMs?: number;
}

/** A `lock_timeout` of `ms` (at least 1: 0 would wait for ever). */
function lockTimeout(ms: number): string {
  return String(Math.max(1, Math.round(ms)));
}

function gaveWayNow(err: unknown, signal: AbortSignal | undefined): boolean {
  return (err as { code?: string }).code === LOCK_NOT_AVAILABLE && !signal?.aborted;
}

/**
 * `body` in a transaction whose every lock is waited for `lockTimeoutMs` at most. PostgreSQL queues
 * every later request for a table behind a lock requested and not yet granted, so a schema change
 * that waited for a long transaction would stall every statement of the live pods on that table for
 * as long; given way (rolled back), they run on, and the change is tried again after a pause (1, 2,
 * 4 … up to 30 s) until it gets its locks. Any other error is thrown after the rollback.
 */
export async function inTransactionGivingWay(client: pg.ClientBase, body: () => Promise<void>, options: GiveWay): Promise<void> {
  let failed: unknown;
  await untilDone(
    async () => {
      await client.query('begin');
      try {
        await client.query(`set local lock_timeout = ${lockTimeout(options.lockTimeoutMs)}`);
        await body();
        await client.query('commit');
        return true;
      } catch (err) {
        await client.query('rollback');
        if (gaveWayNow(err, options.signal)) {
          failed = err;
          return false;
        }
        throw err;
      }
    },
    { firstMs: options.firstPauseMs ?? GIVE_WAY_FIRST_MS, maxMs: GIVE_WAY_MAX_MS, signal: options.signal, beforePause: (ms) => options.gaveWay(failed, ms) },
  );
}

/**
 * `drop index concurrently if exists <schema>.<index>`, each of its lock waits bounded by
 * `lockTimeoutMs` and given way to as above. It holds none of the table's reads or writes, but
 * waits for every transaction using the table and then takes the index itself exclusively, which
 * queues the planning of every statement on the table while it waits. A drop given way leaves the
 * index invalid (no longer used), and the next try drops it.
 */
export async function dropIndexGivingWay(client: pg.ClientBase, schema: string, index: string, options: GiveWay): Promise<void> {
  let failed: unknown;
  await untilDone(
    async () => {
      // Outside a transaction (a concurrent drop cannot be in one): the session's setting, for this statement only.
      await client.query(`set lock_timeout = ${lockTimeout(options.lockTimeoutMs)}`);
      try {
        await client.query(`drop index concurrently if exists ${pg.escapeIdentifier(schema)}.${pg.escapeIdentifier(index)}`);
        return true;
      } catch (err) {
        if (gaveWayNow(err, options.signal)) {
          failed = err;
          return false;
        }
        throw err;
      } finally {
        await client.query('reset lock_timeout').catch(() => undefined);
      }
    },
    { firstMs: options.firstPauseMs ?? GIVE_WAY_FIRST_MS, maxMs: GIVE_WAY_MAX_MS, signal: options.signal, beforePause: (ms) => options.gaveWay(failed, ms) },
  );
}

/** Whether `<schema>.<index>` is there and valid (`undefined`: there is no such index). */
export async function indexValid(client: pg.ClientBase, schema: string, index: string): Promise<boolean | undefined> {
  const { rows } = await client.query<{ valid: boolean }>(
    `select i.indisvalid as valid from pg_index i join pg_class c on c.oid = i.indexrelid join pg_namespace n on n.oid = c.relnamespace
      where n.nspname = $1 and c.relname = $2`,
    [schema, index],
  );
  return rows[0]?.valid;
}

/**
 * Runs `statement`, a `create [unique] index concurrently if not exists <schema>.<index> …`, outside
 * a transaction: an invalid index of that name (a build cut short: the process stopped, a unique
 * index meeting duplicates) is first dropped (dropIndexGivingWay, `leftInvalid` said), since `if not
 * exists` would keep it. The build holds none of the table's reads or writes, and its own lock on the
 * table (share update exclusive) queues none of them while it waits; it waits for the transactions
 * open when it starts, and at its end for those older than its snapshot, without a `lock_timeout`:
 * giving way there would throw the whole build away while any long transaction runs. A stop between
 * the build and what follows leaves a valid index, which the next try's `if not exists` finds.
 */
export async function buildIndexConcurrently(client: pg.ClientBase, schema: string, index: string, statement: string, options: GiveWay & { leftInvalid(): void }): Promise<void> {
  if ((await indexValid(client, schema, index)) === false) {
    options.leftInvalid();
    await dropIndexGivingWay(client, schema, index, options);
  }
  await client.query(statement);
}
