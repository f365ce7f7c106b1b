import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { ownerClient } from '../../test/harness/api-client.js';
import { appliedConnector, hubRunner, storedKeys } from '../../test/harness/connector-runner.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { holdAfter, untilEndedOrWaiting } from '../../test/harness/held-transaction.js';
import type { PageReader } from './runner.js';
import { deleteConnector } from './store.js';
import type { ExtSchema } from './target/ddl.js';

/**
 * A run of a connector sharing a table with another connector being deleted, on the real
 * PostgreSQL, in a fixed interleaving: the delete is held once it has dropped the tables nothing
 * registered (uncommitted), the run is triggered meanwhile, and the delete let go once the run
 * waits on a lock. The run's registration takes the tenant's DDL lock (shared), so it waits for the
 * delete and then creates the table again; it used to find the table still there, and fail on
 * `relation "ext_t1.…" does not exist` once the delete committed.
 */

let hub: TestHub;
let owner: pg.Client;

const items = (...ids: string[]): PageReader => ({
  async *read() {
    yield { number: 1, items: ids.map((id) => ({ id })) };
  },
});

const runner = (ext: ExtSchema = hub.services.connectors.ext) => hubRunner(hub, { ext, reader: items(), chunkSize: 10 });

const applied = (name: string, table: string) => appliedConnector(hub, name, table);

beforeAll(async () => {
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

describe("a run into a table another connector's delete drops", () => {
  it('waits for the delete, creates the table again and writes its rows', async () => {
    const cleaner = await applied('cleaner', 'ext.s1');
    const [first] = await (await runner().trigger(1, cleaner, { triggeredBy: 'manual', reader: items('c1') })).done;
    expect(first).toMatchObject({ status: 'Completed' });
    const dyer = await applied('dyer', 'ext.s1');

    // The delete has removed the cleaner's row and registration and dropped ext.s1, which nothing
    // else registered yet; it is held there, uncommitted.
    const hold = holdAfter(/drop_unused_ext_tables/);
    const removed = hub.services.db.withTenant(1, (tx) => deleteConnector(hold.wrap(tx), 'cleaner'));
    await hold.held;

    let ended = false;
    const triggered = await runner().trigger(1, dyer, { triggeredBy: 'manual', reader: items('d1', 'd2') });
    const done = triggered.done.finally(() => {
      ended = true;
    });
    await untilEndedOrWaiting(owner, () => ended, 'the run');
    hold.go();

    expect(await removed).toBe(true);
    const [run] = await done;
    expect(run).toMatchObject({ status: 'Completed', errorMessage: null, recordsOut: 2 });
    expect(await storedKeys(owner, 's1')).toEqual(['d1', 'd2']);
    const registered = await owner.query('select table_name from connectors.ext_tables where connector_id = $1', [dyer.id]);
    expect(registered.rows).toEqual([{ table_name: 'ext.s1' }]);
  }, 30_000);

  it('a delete leaves a table being read (an export, a sweep) for a later delete, instead of waiting for the reader', async () => {
    const source = await applied('source', 'ext.s3');
    const [first] = await (await runner().trigger(1, source, { triggeredBy: 'manual', reader: items('r1', 'r2') })).done;
    expect(first).toMatchObject({ status: 'Completed' });
    // A long read of the table (an export's snapshot of an entity over it), still open.
    const reading = await ownerClient(hub.ownerUrl);
    try {
      await reading.query('begin');
      await reading.query('select count(*) from ext_t1.s3');
      let ended = false;
      const removed = hub.services.db.withTenant(1, (tx) => deleteConnector(tx, 'source')).finally(() => {
        ended = true;
      });
      removed.catch(() => undefined);
      await untilEndedOrWaiting(owner, () => ended, 'the delete');
      expect(ended).toBe(true);
      expect(await removed).toBe(true);
      // Left there, empty and registered by nothing.
      expect(await storedKeys(owner, 's3')).toEqual([]);
    } finally {
      await reading.query('commit');
      await reading.end();
    }
    // The next delete of the tenant drops it.
    await applied('bystander', 'ext.s3_other');
    expect(await hub.services.db.withTenant(1, (tx) => deleteConnector(tx, 'bystander'))).toBe(true);
    expect(await storedKeys(owner, 's3')).toEqual(['(no table)']);
  }, 30_000);

  it("fails naming the missing table as the tenant knows it (ext.<name>), never the tenant's schema", async () => {
    await hub.services.connectors.ext.ensureTable(1, 'ext.s2', []);
    const lost = await applied('lost', 'ext.never_made');
    // A table the run finds missing when it writes (as one dropped under it was).
    const noDdl = { ensureTable: async (_t: number, _table: string, promote: unknown[]) => ({ promote, unpromoted: [] }) } as unknown as ExtSchema;
    const [run] = await (await runner(noDdl).trigger(1, lost, { triggeredBy: 'manual', reader: items('x1') })).done;
    expect(run).toMatchObject({ status: 'Failed', errorMessage: 'relation "ext.never_made" does not exist' });
    const event = await owner.query<{ message: string }>(
      `select payload->>'error_message' as message from events.outbox where type = 'connector.run.failed' and payload->>'run_id' = $1`,
      [run!.id],
    );
    expect(event.rows).toEqual([{ message: 'relation "ext.never_made" does not exist' }]);
  }, 30_000);
});
