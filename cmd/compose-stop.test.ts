import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { applyConnector } from '../src/connectors/store.js';
import { startDemoSource } from '../src/demo-source/server.js';
import { devClient, ownerClient } from '../test/harness/api-client.js';
import { itemS3Export, seedItemExports } from '../test/harness/export-manifests.js';
import { startTestHub, type TestHub } from '../test/harness/hub.js';
import { until } from '../test/harness/until.js';

/**
 * A clean stop and the schedulers: while the hub waits out the requests' grace (a request still in
 * flight), its connector and export schedulers claim no slot, so a slot falling due then is left to
 * the next hub instead of being claimed and failed `interrupted` at once by the closed runners.
 * The schedulers tick every 100 ms here; a control connector and export applied before the stop
 * show that they do claim slots while the hub runs.
 */

const GRACE_MS = 3_000;
/** Tens of ticks: long enough for a ticking scheduler to claim. */
const WATCH_MS = 1_500;

let demo: Awaited<ReturnType<typeof startDemoSource>>;
let hub: TestHub;
let owner: pg.Client;
let held: Socket | undefined;

const connectorManifest = (name: string) => ({
  apiVersion: 'connectors.svc.io/v1',
  kind: 'Connector',
  metadata: { name },
  connector_type: 'rest-generic',
  spec: { base_url: demo.url, schedule: '* * * * *', endpoints: [{ id: 'partners', path: '/partners', target: { table: `ext.${name.replaceAll('-', '_')}`, unique_key: '$.id' } }] },
});
/** Every minute, to a closed port: a run started would fail at the destination, quickly. */
const exportManifest = (name: string) => {
  const manifest = itemS3Export(name, 'http://127.0.0.1:9');
  return { ...manifest, spec: { ...manifest.spec, schedule: '* * * * *' } };
};

const slotsOf = async (connector: string) =>
  Number((await owner.query<{ n: string }>(`select count(*) as n from connectors.schedule_slots s join connectors.connectors c on c.id = s.connector_id where c.name = $1`, [connector])).rows[0]!.n);
const scheduledRunsOf = async (exportName: string) =>
  Number((await owner.query<{ n: string }>(`select count(*) as n from exports.runs where export_name = $1 and trigger = 'scheduled'`, [exportName])).rows[0]!.n);

beforeAll(async () => {
  demo = await startDemoSource({ port: 0, host: '127.0.0.1', rows: 5, log: () => undefined });
  hub = await startTestHub({ 'svc.scheduler.tick': '100ms', 'svc.http.shutdown-grace': `${GRACE_MS}ms` }, undefined, { background: true });
  owner = await ownerClient(hub.ownerUrl);
  await seedItemExports(hub, owner, devClient(hub.url, 1), { accessKeyId: 'key-id', secretAccessKey: 'secret-key' }, 1);
});

afterAll(async () => {
  held?.destroy();
  await hub?.stop();
  await owner?.end();
  await demo?.close();
});

describe('a clean stop', () => {
  it('claims no scheduled slot during the requests grace, while the schedulers claimed them before', async () => {
    // Control: the schedulers claim a due slot while the hub runs.
    await hub.services.db.withTenant(1, (tx) => applyConnector(tx, connectorManifest('before-stop')));
    await hub.services.exports.manifests.apply(1, undefined, exportManifest('before-stop'), 'test');
    await until('the schedulers to claim the control slots', async () => (await slotsOf('before-stop')) === 1 && (await scheduledRunsOf('before-stop')) === 1);

    // A request whose body never comes holds the server open for the grace.
    held = connect(Number(new URL(hub.url).port), '127.0.0.1');
    await new Promise((resolve) => held!.once('connect', resolve));
    held.write('POST /api/platform/secrets HTTP/1.1\r\nHost: hub\r\nX-Tenant-ID: 1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{');
    await new Promise((r) => setTimeout(r, 100));

    const began = Date.now();
    const stopped = hub.stop();
    // Due at once (the latest slot of `* * * * *` is within a minute of the apply).
    await hub.services.db.withTenant(1, (tx) => applyConnector(tx, connectorManifest('during-grace')));
    await hub.services.exports.manifests.apply(1, undefined, exportManifest('during-grace'), 'test');
    await new Promise((r) => setTimeout(r, WATCH_MS));
    expect(Date.now() - began).toBeLessThan(GRACE_MS); // still in the grace: the pools are open
    expect(await slotsOf('during-grace')).toBe(0);
    expect(await scheduledRunsOf('during-grace')).toBe(0);
    await stopped;
    expect(await slotsOf('during-grace')).toBe(0);
    expect(await scheduledRunsOf('during-grace')).toBe(0);
  });
});
