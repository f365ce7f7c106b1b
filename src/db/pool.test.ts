import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { endPool, resilientPool } from './pool.js';

/**
 * The server ends a connection while the hub holds it in a transaction (PostgreSQL restarted, an
 * administrator's pg_terminate_backend). pg then emits `error` on the checked-out client, which
 * pg-pool does not listen to: without the pool's own listener the process would die.
 */
describe('a connection ended by the server while checked out', () => {
  let t: MigratedDatabase;
  beforeAll(async () => {
    t = await migratedDatabase({ 1: 'one' });
  });
  afterAll(async () => t.close());

  it('fails only its own transaction; the process lives and the pool serves the next one', async () => {
    const uncaught: Error[] = [];
    const onUncaught = (err: Error) => uncaught.push(err);
    process.on('uncaughtException', onUncaught);
    try {
      const failed = t.db.withTenant(1, async (tx) => {
        const { rows } = await tx.query<{ pid: number }>('select pg_backend_pid() as pid');
        // Killed between two statements: no query in flight, the client idle but checked out.
        await t.owner.query('select pg_terminate_backend($1)', [rows[0]!.pid]);
        await new Promise((r) => setTimeout(r, 200));
        await tx.query('select 1');
      });
      await expect(failed).rejects.toThrow();
      const { rows } = await t.db.withTenant(1, (tx) => tx.query<{ one: number }>('select 1 as one'));
      expect(rows[0]!.one).toBe(1);
      expect(uncaught).toEqual([]);
    } finally {
      process.off('uncaughtException', onUncaught);
    }
  });
});

describe('ending a pool', () => {
  let t: MigratedDatabase;
  beforeAll(async () => {
    t = await migratedDatabase({ 1: 'one' });
  });
  afterAll(async () => t.close());

  it('endPool resolves once the server has no session of the pool left (pg-pool alone resolves before)', async () => {
    for (let round = 0; round < 5; round++) {
      const name = `svc-hub end-test ${round}`;
      const pool = resilientPool({ connectionString: t.ownerUrl, max: 4, application_name: name });
      // Four idle connections, as a hub has when it stops.
      await Promise.all(Array.from({ length: 4 }, () => pool.query('select pg_sleep(0.01)')));
      await endPool(pool);
      const { rows } = await t.owner.query<{ n: number }>('select count(*)::int as n from pg_stat_activity where application_name = $1', [name]);
      expect({ round, sessions: rows[0]!.n }).toEqual({ round, sessions: 0 });
    }
  });
});
