import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { ownerClient } from '../../test/harness/api-client.js';
import { appliedConnector, hubRunner } from '../../test/harness/connector-runner.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { until } from '../../test/harness/until.js';
import type { PageReader } from './runner.js';
import { deleteConnector } from './store.js';
import type { ConnectorSpec } from './types.js';

/**
 * Two writers of one ext table (two connectors sharing it, as two sources an Entity fuses may) meet
 * on the same rows, on the real PostgreSQL, in a fixed interleaving: a third session holds the
 * middle row locked until both writers wait, then lets go. A chunk is written in key order and a
 * delete removes its rows in key order, whatever order the source gave them in or the table stores
 * them in: the later writer waits for the earlier, both succeed. Written in the source's order (a
 * chunk of keys 1..n beside another of n..1) or deleted in the table's order, each held one end of
 * the keys and waited for the other: a deadlock, and a run failed on `deadlock detected`.
 */

let hub: TestHub;
let owner: pg.Client;
let a: ConnectorSpec;
let b: ConnectorSpec;
const N = 400;
const key = (n: number) => String(n).padStart(4, '0');
const MIDDLE = key(N / 2);
const ascending = Array.from({ length: N }, (_, i) => key(i + 1));
const descending = [...ascending].reverse();

const items = (ids: string[], tag: string): PageReader => ({
  async *read() {
    yield { number: 1, items: ids.map((id) => ({ id, tag })) };
  },
});

const runner = () => hubRunner(hub, { reader: items([], '') });

const applied = (name: string) => appliedConnector(hub, name, 'ext.shared_order');

/** Waits until `n` sessions of the test's database wait on a lock. */
const waiting = (n: number, what: string) =>
  until(what, async () => {
    const { rows } = await owner.query<{ n: number }>(`select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`);
    return rows[0]!.n >= n;
  });

/** Holds the middle row locked in a session of its own until the returned function commits it. */
async function holdMiddle(): Promise<() => Promise<void>> {
  const holder = await ownerClient(hub.ownerUrl);
  await holder.query('begin');
  const { rowCount } = await holder.query('select 1 from ext_t1.shared_order where external_id = $1 for update', [MIDDLE]);
  expect(rowCount).toBe(1);
  return async () => {
    await holder.query('commit');
    await holder.end();
  };
}

beforeAll(async () => {
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
  a = await applied('order-a');
  b = await applied('order-b');
  const [first] = await (await runner().trigger(1, a, { triggeredBy: 'manual', reader: items(ascending, 'load') })).done;
  expect(first).toMatchObject({ status: 'Completed', recordsOut: N });
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

describe('two writers of one shared ext table', () => {
  it('two runs writing the same keys in opposite orders both complete', async () => {
    const release = await holdMiddle();
    const first = (await runner().trigger(1, a, { triggeredBy: 'manual', reader: items(ascending, 'a') })).done;
    await waiting(1, 'the first run to wait on the middle row');
    const second = (await runner().trigger(1, b, { triggeredBy: 'manual', reader: items(descending, 'b') })).done;
    await waiting(2, 'the second run to wait too');
    await release();
    const [[runA], [runB]] = await Promise.all([first, second]);
    expect(runA).toMatchObject({ status: 'Completed', errorMessage: null, recordsOut: N });
    expect(runB).toMatchObject({ status: 'Completed', errorMessage: null, recordsOut: N });
    const { rows } = await owner.query(`select data->>'tag' as tag, count(*)::int as n from ext_t1.shared_order group by 1`);
    // Each row is one run's (the later writer of each key); every key is there once.
    expect(rows.reduce((sum: number, r: { n: number }) => sum + r.n, 0)).toBe(N);
  }, 30_000);

  it("a delete of one connector beside the other's run over the same rows: both succeed", async () => {
    // The delete's connector owns every row, stored in the reverse of key order.
    await owner.query('truncate ext_t1.shared_order');
    await owner.query(
      `insert into ext_t1.shared_order (tenant_id, external_id, row_hash, data, connector_id, endpoint_id)
       select 1, lpad(g::text, 4, '0'), 'h', jsonb_build_object('id', lpad(g::text, 4, '0')), $1, $2 from generate_series(${N}, 1, -1) g`,
      [a.id, a.endpoints[0]!.uuid],
    );
    const release = await holdMiddle();
    const run = (await runner().trigger(1, b, { triggeredBy: 'manual', reader: items(ascending, 'b') })).done;
    await waiting(1, 'the run to wait on the middle row');
    const removed = hub.services.db.withTenant(1, (tx) => deleteConnector(tx, 'order-a'));
    removed.catch(() => undefined);
    await waiting(2, 'the delete to wait too');
    await release();
    const [outcome] = await run;
    expect(outcome).toMatchObject({ status: 'Completed', errorMessage: null, recordsOut: N });
    expect(await removed).toBe(true);
    // The run wrote every key after the delete's connector: nothing of it is left to delete.
    const { rows } = await owner.query(`select connector_id, count(*)::int as n from ext_t1.shared_order group by 1`);
    expect(rows).toEqual([{ connector_id: b.id, n: N }]);
  }, 30_000);
});
