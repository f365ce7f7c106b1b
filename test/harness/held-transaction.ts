import type pg from 'pg';
import type { Tx } from '../../src/db/database.js';
import { until } from './until.js';

/**
 * Two transactions interleaved at a chosen point, for lock-order tests on the real PostgreSQL: a transaction is held
 * once its first statement matching `at` has answered (`held` resolves then, `go` lets it on), while another is sent.
 */
export interface Hold {
  /** The transaction `tx`, held after its first statement matching `at`. */
  wrap(tx: Tx): Tx;
  held: Promise<void>;
  go(): void;
}

export function holdAfter(at: RegExp): Hold {
  let reached = () => {};
  let go = () => {};
  const held = new Promise<void>((resolve) => {
    reached = resolve;
  });
  const released = new Promise<void>((resolve) => {
    go = resolve;
  });
  let stopped = false;
  return {
    held,
    go: () => go(),
    wrap: (tx) => ({
      tenantId: tx.tenantId,
      query: async (text, values, options) => {
        const result = await tx.query(text, values, options);
        if (!stopped && at.test(text)) {
          stopped = true;
          reached();
          await released;
        }
        return result as never;
      },
    }),
  };
}

/** How work ended, as text: `committed` (with what it gave, when `withValue`) or `failed: <message>`. */
export function outcome(work: Promise<unknown>, withValue = false): Promise<string> {
  return work.then(
    (value) => `committed${withValue && value !== undefined ? `: ${String(value)}` : ''}`,
    (err: unknown) => `failed: ${err instanceof Error ? err.message : String(err)}`,
  );
}

/** Waits until `ended()` or until a session of the database waits on a lock: the second transaction met the first. */
export async function untilEndedOrWaiting(owner: pg.Client, ended: () => boolean, what: string): Promise<void> {
  await until(`${what} to end or wait on a lock`, async () => {
    if (ended()) return true;
    const { rows } = await owner.query<{ n: number }>(`select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`);
    return rows[0]!.n > 0;
  });
}
