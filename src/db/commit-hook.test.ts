import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { SlotPool } from '../concurrency/slot-pool.js';
import { type CommitHook, runWithCommitHook } from './database.js';

/**
 * The request's commit hook (the audit entry's) and the slot pool: a job queued for a slot starts
 * when another job ends, in that job's continuation; its transactions are committed under the hook
 * of whoever offered it (none when offered outside a request), never under the hook of the job
 * whose end started it.
 */

let t: MigratedDatabase;

beforeAll(async () => {
  t = await migratedDatabase({ 1: 'acme' });
});

afterAll(async () => {
  await t.close();
});

/** A hook that counts the transactions it was called for. */
function countingHook(): CommitHook & { calls: number } {
  return {
    calls: 0,
    async beforeCommit() {
      this.calls++;
      return undefined;
    },
  };
}

describe('commit hook of queued work', () => {
  it('a queued job commits under the hook it was offered under, or none, not the hook of the job before it', async () => {
    const pool = new SlotPool(1, 1, 10);
    const first = countingHook();
    const other = countingHook();
    let release!: () => void;
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    const commit = () => t.db.withTenant(1, async (tx) => void (await tx.query('select 1')));
    runWithCommitHook(first, () =>
      pool.offer('a', async () => {
        await commit();
        await held;
      }),
    );
    pool.offer('b', commit); // outside any request
    runWithCommitHook(other, () => pool.offer('c', commit));
    release();
    await pool.idle();
    expect(first.calls).toBe(1); // its own transaction only
    expect(other.calls).toBe(1);
  });
});
