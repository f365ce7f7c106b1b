import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import type { PageReader } from './runner.js';
import { createRun, getRun, INTERRUPTED_MESSAGE } from './runs/ledger.js';
import { applyConnector } from './store.js';
import type { ConnectorSpec } from './types.js';
import { until } from '../../test/harness/until.js';

/**
 * Runs left Running by a process that died are failed by the interrupted-run sweep (leader-gated,
 * in `all` and `dispatch`) once their heartbeat is stale; runs of a live process, however long they
 * wait for a page or for an earlier endpoint, keep theirs fresh and are left alone. Clocks are
 * shortened through configuration.
 */

let hub: TestHub;
let owner: pg.Client;
let connector: ConnectorSpec;

/** Pages that take their time: one row, a pause longer than the stale limit, another row. */
const slowReader = (pauseMs: number): PageReader => ({
  async *read() {
    yield { number: 1, items: [{ id: 1 }] };
    await new Promise((r) => setTimeout(r, pauseMs));
    yield { number: 2, items: [{ id: 2 }] };
  },
});

beforeAll(async () => {
  hub = await startTestHub(
    {
      'svc.connectors.heartbeat-every': '100ms',
      'svc.connectors.run-stale-after': '600ms',
      'svc.connectors.interrupted-sweep-every': '100ms',
      'svc.leader.check-every': '200ms',
    },
    undefined,
    { background: true },
  );
  owner = new pg.Client({ connectionString: hub.ownerUrl });
  await owner.connect();
  const endpoint = (id: string) => ({ id, path: `/${id}`, target: { table: `ext.interrupted_${id}`, unique_key: '$.id' } });
  const manifest = { apiVersion: 'connectors.svc.io/v1', kind: 'Connector', metadata: { name: 'slow' }, connector_type: 'rest-generic', spec: { base_url: 'http://127.0.0.1:9', endpoints: [endpoint('a'), endpoint('b')] } };
  connector = (await hub.services.db.withTenant(1, (tx) => applyConnector(tx, manifest))).connector;
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

describe('the interrupted-run sweep', () => {
  it('fails a Running run nobody keeps alive, with its event, and only once', async () => {
    const endpoint = connector.endpoints[0]!;
    const orphan = await hub.services.db.withTenant(1, (tx) =>
      createRun(tx, { connectorId: connector.id, connectorName: connector.name, endpointUuid: endpoint.uuid, endpointId: endpoint.id, triggeredBy: 'manual', syncMode: 'full' }),
    );
    const failed = await until('the orphan to fail', async () => {
      const run = await hub.services.db.withTenant(1, (tx) => getRun(tx, orphan.id));
      return run.status === 'Failed' && run;
    });
    expect(failed.errorMessage).toBe(INTERRUPTED_MESSAGE);
    expect(failed.endedAt).not.toBeNull();
    const { rows } = await owner.query(`select tenant_id, payload from events.outbox where type = 'connector.run.failed' and payload->>'run_id' = $1`, [orphan.id]);
    expect(rows).toEqual([{ tenant_id: 1, payload: { run_id: orphan.id, connector_id: connector.id, error_message: INTERRUPTED_MESSAGE, retryable: true } }]);
  });

  it('leaves a live run alone while it waits longer than the stale limit, and the endpoint queued behind it', async () => {
    const triggered = await hub.services.connectors.runner.trigger(1, connector, { triggeredBy: 'manual', reader: slowReader(1_500) });
    expect(hub.services.connectors.runner.running).toHaveLength(2);
    const runs = await triggered.done;
    expect(runs.map((r) => [r.endpoint, r.status, r.recordsOut])).toEqual([
      ['a', 'Completed', 2],
      ['b', 'Completed', 2],
    ]);
    expect(hub.services.connectors.runner.running).toHaveLength(0);
  });

  it('fails the runs of a runner whose heartbeat stopped (the process as good as dead)', async () => {
    const runner = hub.services.connectors.runner;
    const triggered = await runner.trigger(1, connector, { endpoint: 'a', triggeredBy: 'manual', reader: slowReader(2_500) });
    runner.stopHeartbeat(); // what a killed process amounts to: no more heartbeats
    const id = triggered.runs[0]!.id;
    await until('the silent run to fail', async () => (await hub.services.db.withTenant(1, (tx) => getRun(tx, id))).status === 'Failed');
    // The run's own end comes later and must not overwrite the sweep's verdict (a run ends once).
    const [ended] = await triggered.done.catch(() => [undefined]);
    const stored = await hub.services.db.withTenant(1, (tx) => getRun(tx, id));
    expect(stored.status).toBe('Failed');
    expect(stored.errorMessage).toBe(INTERRUPTED_MESSAGE);
    void ended;
  });
});
