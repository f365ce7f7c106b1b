import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase, TEST_ROLES } from '../../test/harness/database.js';
import { DiscoveryTimedOut, discoverCard } from './discovery.js';

/**
 * Discovery's time bound against a real PostgreSQL: the scope's one table is a view whose every read
 * sleeps 150 ms, so each column's group-by (six of them) takes 150 ms at least, each well within the
 * timeout and all of them together past it.
 */
describe('discoverCard with a timeout', () => {
  let t: MigratedDatabase;
  const columns = ['a', 'b', 'c', 'd', 'e', 'f'];

  beforeAll(async () => {
    t = await migratedDatabase({ 7: 'seven' }, 2);
    const { app } = TEST_ROLES;
    await t.owner.query(`
      create schema ext_t7;
      grant usage on schema ext_t7 to ${app};
      create table ext_t7.base (${columns.map((c) => `${c} text`).join(', ')});
      insert into ext_t7.base values (${columns.map((c) => `'${c}1'`).join(', ')});
      create view ext_t7.slow as select ${columns.join(', ')} from ext_t7.base where pg_sleep(0.15) is not null;
      grant select on ext_t7.slow to ${app};
      insert into connectors.connectors (id, tenant_id, name, connector_type, scopes, manifest, spec)
        values ('00000000-0000-4000-8000-0000000000c1', 7, 'slow', 'rest', '{s}', '{}', '{}');
      insert into connectors.ext_tables (tenant_id, connector_id, endpoint_uuid, table_name)
        values (7, '00000000-0000-4000-8000-0000000000c1', '00000000-0000-4000-8000-0000000000e1', 'ext.slow');
    `);
  });
  afterAll(async () => t.close());

  const stored = async () => (await t.owner.query("select count(*)::int as n from retrieval.schema_cards where tenant_id = 7 and scope = 's'")).rows[0]!.n as number;

  it('holds the whole discovery to the timeout, not each statement: many statements each within it stop it there', async () => {
    const err = await t.db.withTenant(7, (tx) => discoverCard(tx, 's', 600)).catch((e: unknown) => e);
    // Each statement alone took 150 ms of its 600: without a bound on the whole, all six ran (900 ms at least) and the card was stored.
    // Cut in the statement running when the 600 ms are up: the fifth at the latest (five take 750 ms at least,
    // more on a loaded machine), never the sixth, which only a check between statements would stop.
    expect(err).toBeInstanceOf(DiscoveryTimedOut);
    expect((err as Error).message).toMatch(/^discovery stopped: it took longer than 600 ms in all, the time a whole discovery may take \(reading the values of column [a-e] of ext\.slow\)$/);
    expect(await stored()).toBe(0);
    // The connection serves again (the transaction rolled back).
    expect((await t.db.withTenant(7, (tx) => tx.query('select 1 as one'))).rows).toEqual([{ one: 1 }]);
  });

  it('discovers every column within a timeout that holds them all', async () => {
    const summary = await t.db.withTenant(7, (tx) => discoverCard(tx, 's', 10_000));
    expect(summary).toMatchObject({ scope: 's', tableCount: 1, columnCount: columns.length });
    expect(await stored()).toBe(1);
  });
});
