import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { startDemoSource } from '../demo-source/server.js';
import { ownerClient } from '../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { until } from '../../test/harness/until.js';
import { runnerOverHub as overHub } from '../../test/harness/connector-runner.js';
import { createRun, getRun, INTERRUPTED_MESSAGE, type RunRecord } from './runs/ledger.js';
import { applyConnector } from './store.js';
import type { ConnectorSpec } from './types.js';

/**
 * Stopping a run that waits on its source: a cancel (served by this process or by another) and a
 * clean stop of the hub end it at once, even while a request waits out its retry back-off. The
 * source is the demo source's outage (/down/partners answers 500 forever); the back-off is 20 s
 * (svc.connectors.retry.base-delay), so a run that did not listen would go on for minutes.
 */

const BACKOFF = { 'svc.connectors.retry.base-delay': '20s', 'svc.connectors.retry.max-delay': '60s' };
/** How long a stop may take here (the back-off it interrupts is 20 s). */
const PROMPTLY_MS = 3_000;
const H = { 'X-Tenant-ID': '1' };

let demo: Awaited<ReturnType<typeof startDemoSource>>;
let hub: TestHub;
let owner: pg.Client;

beforeAll(async () => {
  demo = await startDemoSource({ port: 0, host: '127.0.0.1', rows: 10, log: () => undefined, record: true });
  hub = await startTestHub(BACKOFF);
  owner = await ownerClient(hub.ownerUrl);
  const endpoint = (id: string) => ({ id, path: '/down/partners', target: { table: `ext.down_${id}`, unique_key: '$.id' } });
  const manifest = (name: string, ids: string[]) => ({
    apiVersion: 'connectors.svc.io/v1',
    kind: 'Connector',
    metadata: { name },
    connector_type: 'rest-generic',
    spec: { base_url: demo.url, endpoints: ids.map(endpoint) },
  });
  await hub.services.db.withTenant(1, async (tx) => {
    await applyConnector(tx, manifest('down', ['partners']));
    await applyConnector(tx, manifest('down-two', ['first', 'second']));
  });
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
  await demo?.close();
});

const stored = (id: string) => hub.services.db.withTenant(1, (tx) => getRun(tx, id));
const ended = (id: string, timeoutMs = PROMPTLY_MS) =>
  until(
    `run ${id} to end`,
    async () => {
      const run = await stored(id);
      return run.status !== 'Running' && run;
    },
    { timeoutMs, detail: () => `the source was asked ${demo.count('/down/')} times` },
  );
const eventsOf = async (type: string, runId: string) =>
  (await owner.query<{ payload: Record<string, unknown> }>(`select payload from events.outbox where type = $1 and payload->>'run_id' = $2`, [type, runId])).rows.map((r) => r.payload);
/** The source has answered the run's first request with a 500: the run now waits out its back-off. */
const backingOff = (before: number) => until('the first 500', () => demo.count('/down/') > before);
const cancel = (id: string) => fetch(`${hub.url}/api/platform/runs/${id}/cancel`, { method: 'POST', headers: H });

/** A runner of its own (as another process has) over the hub's database and engine. */
const runnerOverHub = (heartbeatEvery: number) => overHub(hub, heartbeatEvery);

async function startRun(url: string, name: string): Promise<string[]> {
  const res = await fetch(`${url}/api/connectors/${name}/runs`, { method: 'POST', headers: { ...H, 'Content-Type': 'application/json' }, body: '{}' });
  expect(res.status).toBe(202);
  return ((await res.json()) as { runs: Array<{ id: string }> }).runs.map((r) => r.id);
}

describe('stopping a run that waits out a retry back-off', () => {
  it('a cancel served by the process running it ends it Cancelled at once, with its event', async () => {
    const before = demo.count('/down/');
    const [id] = await startRun(hub.url, 'down');
    await backingOff(before);
    const asked = Date.now();
    const res = await cancel(id!);
    expect(res.status).toBe(202);
    const run = await ended(id!);
    expect(Date.now() - asked).toBeLessThan(PROMPTLY_MS);
    expect(run).toMatchObject({ status: 'Cancelled', errorMessage: 'cancelled on request' });
    expect(demo.count('/down/')).toBe(before + 1); // no retry was sent
    const { id: connectorId } = (await hub.services.connectors.byName(1, 'down')) as ConnectorSpec;
    expect(await eventsOf('connector.run.cancelled', id!)).toEqual([{ run_id: id, connector_id: connectorId }]);
    expect(await eventsOf('connector.run.failed', id!)).toEqual([]);
  });

  it('a cancel served by another process (the flag in the database) reaches the run at its next heartbeat', async () => {
    // "Another process": a runner of its own over the same database, beating every 100 ms; the
    // hub's API serves the cancel, and its own runner does not have the run.
    const elsewhere = runnerOverHub(100);
    const connector = (await hub.services.connectors.byName(1, 'down')) as ConnectorSpec;
    const before = demo.count('/down/');
    const triggered = await elsewhere.trigger(1, connector, { triggeredBy: 'manual:test' });
    const id = triggered.runs[0]!.id;
    await backingOff(before);
    expect(hub.services.connectors.runner.running).not.toContain(id);
    const asked = Date.now();
    expect((await cancel(id)).status).toBe(202);
    const run = await ended(id);
    expect(Date.now() - asked).toBeLessThan(PROMPTLY_MS);
    expect(run.status).toBe('Cancelled');
    expect(await eventsOf('connector.run.cancelled', id)).toEqual([{ run_id: id, connector_id: connector.id }]);
    expect(((await triggered.done) as RunRecord[]).map((r) => r.status)).toEqual(['Cancelled']);
    await elsewhere.close();
  });

  it('a clean stop of the hub fails its runs `interrupted` at once (the one waiting and the one queued behind it), retryable', async () => {
    const stopping = await startTestHub({ ...BACKOFF, 'svc.datasource.url': hub.ownerUrl });
    let stopped = false;
    try {
      const before = demo.count('/down/');
      const ids = await startRun(stopping.url, 'down-two');
      const { id: connectorId } = (await hub.services.connectors.byName(1, 'down-two')) as ConnectorSpec;
      expect(ids).toHaveLength(2);
      await backingOff(before);
      const asked = Date.now();
      await stopping.stop();
      stopped = true;
      expect(Date.now() - asked).toBeLessThan(PROMPTLY_MS);
      for (const id of ids) {
        // Ended by the stop itself: nothing is left for the stale-run sweep.
        expect(await stored(id)).toMatchObject({ status: 'Failed', errorMessage: INTERRUPTED_MESSAGE });
        expect(await eventsOf('connector.run.failed', id)).toEqual([{ run_id: id, connector_id: connectorId, error_message: INTERRUPTED_MESSAGE, retryable: true }]);
      }
      expect(demo.count('/down/')).toBe(before + 1); // the queued endpoint never asked
    } finally {
      if (!stopped) await stopping.stop();
    }
  });

  it('a run triggered after the runner closed ends at once, failed `interrupted`', async () => {
    const closed = runnerOverHub(0);
    await closed.close();
    const connector = (await hub.services.connectors.byName(1, 'down')) as ConnectorSpec;
    const before = demo.count('/down/');
    const [run] = await (await closed.trigger(1, connector, { triggeredBy: 'manual:test' })).done;
    expect(run).toMatchObject({ status: 'Failed', errorMessage: INTERRUPTED_MESSAGE });
    expect(demo.count('/down/')).toBe(before);
  });
});

describe('cancelling a run whose process died (kill -9: no heartbeat, no clean stop)', () => {
  /**
   * The run row a killed hub leaves: Running, its heartbeat older than svc.connectors.run-stale-after
   * (45 s here; this hub runs no interrupted-run sweep, so only the cancel can end it).
   */
  async function orphan(connector: ConnectorSpec, heartbeatAge: string): Promise<string> {
    const endpoint = connector.endpoints[0]!;
    const run = await hub.services.db.withTenant(1, (tx) =>
      createRun(tx, { connectorId: connector.id, connectorName: connector.name, endpointUuid: endpoint.uuid, endpointId: endpoint.id, triggeredBy: 'manual:test', syncMode: 'full' }),
    );
    await owner.query(`update connectors.runs set heartbeat_at = now() - $2::interval where id = $1`, [run.id, heartbeatAge]);
    return run.id;
  }
  const trigger = (name: string) => fetch(`${hub.url}/api/connectors/${name}/runs`, { method: 'POST', headers: { ...H, 'Content-Type': 'application/json' }, body: '{}' });

  it('the cancel the 409 suggests ends it at once as the sweep would (Failed, interrupted, retryable), and the endpoint is free', async () => {
    const connector = (await hub.services.connectors.byName(1, 'down')) as ConnectorSpec;
    const id = await orphan(connector, '1 minute');
    const blocked = await trigger('down');
    expect(blocked.status).toBe(409);
    expect(((await blocked.json()) as { hint: string }).hint).toContain(`cancel it (POST /api/platform/runs/${id}/cancel)`);

    const res = await cancel(id);
    expect(res.status).toBe(202);
    expect(await res.json()).toMatchObject({ id, status: 'Failed', errorMessage: INTERRUPTED_MESSAGE, endedAt: expect.any(String) });
    expect(await stored(id)).toMatchObject({ status: 'Failed', errorMessage: INTERRUPTED_MESSAGE });
    expect(await eventsOf('connector.run.failed', id)).toEqual([{ run_id: id, connector_id: connector.id, error_message: INTERRUPTED_MESSAGE, retryable: true }]);
    expect(await eventsOf('connector.run.cancelled', id)).toEqual([]);
    // ended once: a second cancel finds it over
    expect((await cancel(id)).status).toBe(409);

    // the endpoint takes a run again (this process's: cancelled at once, to leave the source alone)
    const before = demo.count('/down/');
    const again = await trigger('down');
    expect(again.status).toBe(202);
    const [next] = ((await again.json()) as { runs: Array<{ id: string }> }).runs;
    await backingOff(before);
    expect((await cancel(next!.id)).status).toBe(202);
    expect(await ended(next!.id)).toMatchObject({ status: 'Cancelled' });
  });

  it('a run whose heartbeat is fresh (its process alive elsewhere) is only asked to stop, as before', async () => {
    const connector = (await hub.services.connectors.byName(1, 'down-two')) as ConnectorSpec;
    const id = await orphan(connector, '10 seconds');
    const res = await cancel(id);
    expect(res.status).toBe(202);
    expect(await res.json()).toMatchObject({ id, status: 'Running' });
    const { rows } = await owner.query<{ status: string; cancel_requested: boolean }>('select status, cancel_requested from connectors.runs where id = $1', [id]);
    expect(rows).toEqual([{ status: 'Running', cancel_requested: true }]);
    expect(await eventsOf('connector.run.failed', id)).toEqual([]);
    await owner.query(`update connectors.runs set status = 'Cancelled', ended_at = now() where id = $1`, [id]);
  });
});
