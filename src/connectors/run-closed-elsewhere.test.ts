import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { ownerClient } from '../../test/harness/api-client.js';
import { appliedConnector, hubRunner, storedKeys } from '../../test/harness/connector-runner.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { until } from '../../test/harness/until.js';
import type { PageReader } from './runner.js';
import { INTERRUPTED_MESSAGE } from './runs/ledger.js';
import { applyConnector, deleteConnector } from './store.js';

/**
 * A run its process still drives after another process closed it (the interrupted-run sweep, or a
 * cancel, failing it as `interrupted` once its heartbeat had been silent for
 * svc.connectors.run-stale-after: a process paused, or cut off from the database, and then resumed),
 * on the real PostgreSQL. Once closed, nothing holds off a delete of its connector (no run of it is
 * Running); the run must not write on, leaving rows of a connector that no longer exists in a table
 * another connector keeps.
 */

let hub: TestHub;
let owner: pg.Client;

/** Page 1 at once; page 2 once `open` is called. */
function gated(): { reader: PageReader; asked: () => boolean; open: () => void } {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  let asked = false;
  return {
    reader: {
      async *read() {
        yield { number: 1, items: [{ id: 'z1' }] };
        asked = true;
        await opened;
        yield { number: 2, items: [{ id: 'z2' }] };
      },
    },
    asked: () => asked,
    open,
  };
}

const applied = (name: string, table: string) => appliedConnector(hub, name, table);

const runner = (reader: PageReader) => hubRunner(hub, { reader, chunkSize: 1 });

beforeAll(async () => {
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

describe('a run closed by another process while its own still drives it', () => {
  it('writes no more rows: its connector deleted meanwhile leaves none in a table another connector keeps', async () => {
    const keeper = await applied('keeper', 'ext.closed_shared');
    const [kept] = await (await runner({ async *read() { yield { number: 1, items: [{ id: 'k1' }] }; } }).trigger(1, keeper, { triggeredBy: 'manual' })).done;
    expect(kept).toMatchObject({ status: 'Completed' });

    const zombie = await applied('zombie', 'ext.closed_shared');
    const gate = gated();
    const triggered = await runner(gate.reader).trigger(1, zombie, { triggeredBy: 'manual' });
    const runId = triggered.runs[0]!.id;
    await until('page 1 written', async () => gate.asked() && (await owner.query("select 1 from ext_t1.closed_shared where external_id = 'z1'")).rowCount === 1);

    // What the sweep does to a run whose heartbeat went silent (runs/ledger.ts failInterrupted).
    await owner.query("update connectors.runs set status = 'Failed', ended_at = now(), error_message = $2 where id = $1", [runId, INTERRUPTED_MESSAGE]);
    expect(await hub.services.db.withTenant(1, (tx) => deleteConnector(tx, 'zombie'))).toBe(true);
    expect(await storedKeys(owner, 'closed_shared')).toEqual(['k1']);

    gate.open();
    const [run] = await triggered.done;
    // The first end stands; page 2 was not written for a connector that is gone.
    expect(run).toMatchObject({ status: 'Failed', errorMessage: INTERRUPTED_MESSAGE });
    expect(await storedKeys(owner, 'closed_shared')).toEqual(['k1']);
    const orphans = await owner.query('select count(*)::int as n from ext_t1.closed_shared where connector_id = $1', [zombie.id]);
    expect(orphans.rows).toEqual([{ n: 0 }]);
    const counted = await owner.query('select records_out as "out" from connectors.runs where id = $1', [runId]);
    expect(counted.rows).toEqual([{ out: 1 }]);
  }, 30_000);

  it('a run queued behind an earlier endpoint, closed meanwhile, neither registers nor makes its table for a deleted connector', async () => {
    const spec = {
      base_url: 'http://127.0.0.1:9',
      endpoints: [
        { id: 'first', path: '/first', target: { table: 'ext.queued_first', unique_key: '$.id' } },
        { id: 'second', path: '/second', target: { table: 'ext.queued_second', unique_key: '$.id' } },
      ],
    };
    const manifest = { apiVersion: 'connectors.svc.io/v1', kind: 'Connector', metadata: { name: 'queued' }, connector_type: 'rest-generic', spec };
    const connector = (await hub.services.db.withTenant(1, (tx) => applyConnector(tx, manifest))).connector;
    const gate = gated();
    const triggered = await runner(gate.reader).trigger(1, connector, { triggeredBy: 'manual' });
    expect(triggered.runs).toHaveLength(2);
    await until('page 1 of the first endpoint written', async () => gate.asked() && (await owner.query("select 1 from ext_t1.queued_first where external_id = 'z1'")).rowCount === 1);

    // Both runs closed as the sweep closes runs whose heartbeat went silent; the connector deleted.
    await owner.query("update connectors.runs set status = 'Failed', ended_at = now(), error_message = $2 where id = any($1::uuid[])", [triggered.runs.map((r) => r.id), INTERRUPTED_MESSAGE]);
    expect(await hub.services.db.withTenant(1, (tx) => deleteConnector(tx, 'queued'))).toBe(true);

    gate.open();
    const runs = await triggered.done;
    expect(runs.map((r) => r.status)).toEqual(['Failed', 'Failed']);
    const registered = await owner.query('select table_name from connectors.ext_tables where connector_id = $1', [connector.id]);
    expect(registered.rows).toEqual([]);
    expect(await storedKeys(owner, 'queued_second')).toEqual(['(no table)']);
  }, 30_000);
});
