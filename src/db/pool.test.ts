import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';

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
