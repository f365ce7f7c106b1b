import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { applyConnector } from '../src/connectors/store.js';
import { startDemoSource } from '../src/demo-source/server.js';
import { devClient, ownerClient } from '../test/harness/api-client.js';
import { itemS3Export, seedItemExports } from '../test/harness/export-manifests.js';
import { startTestHub, type TestHub } from '../test/harness/hub.js';
import { startReceiver } from '../test/harness/receiver.js';
import { until } from '../test/harness/until.js';

/**
 * A clean stop. While the hub waits out the requests' grace (a request still in flight), its
 * connector and export schedulers claim no slot, so a slot falling due then is left to the next hub
 * instead of being claimed and failed `interrupted` at once by the closed runners (the schedulers
 * tick every 100 ms here; a control connector and export applied before the stop show that they do
 * claim slots while the hub runs). And a backlog of deliveries to a slow endpoint does not keep a
 * stopping hub delivering: its consumers end after the batch in hand.
 */

const GRACE_MS = 3_000;

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
    // The ticks each scheduler has ended (the hub's clocks call them on these objects).
    const ticks = { connectors: 0, exports: 0 };
    for (const area of ['connectors', 'exports'] as const) {
      const scheduler = hub.services[area].scheduler;
      const tick = scheduler.tick.bind(scheduler);
      scheduler.tick = async () => {
        try {
          return await tick();
        } finally {
          ticks[area]++;
        }
      };
    }
    // Control: the schedulers claim a due slot while the hub runs.
    await hub.services.db.withTenant(1, (tx) => applyConnector(tx, connectorManifest('before-stop')));
    await hub.services.exports.manifests.apply(1, undefined, exportManifest('before-stop'), 'test');
    await until('the schedulers to claim the control slots', async () => (await slotsOf('before-stop')) === 1 && (await scheduledRunsOf('before-stop')) === 1);

    // A request whose body never comes holds the server open for the grace.
    held = connect(Number(new URL(hub.url).port), '127.0.0.1');
    await new Promise((resolve) => held!.once('connect', resolve));
    // Marker of a request in flight: the server parsed its head (its 100 Continue), then the body begins.
    const continued = new Promise<void>((resolve) => held!.on('data', (chunk: Buffer) => chunk.toString('latin1').includes('100 Continue') && resolve()));
    held.write('POST /api/platform/secrets HTTP/1.1\r\nHost: hub\r\nX-Tenant-ID: 1\r\nContent-Type: application/json\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n');
    await continued;
    held.write('{');

    const began = Date.now();
    const stopped = hub.stop();
    // Due at once (the latest slot of `* * * * *` is within a minute of the apply).
    await hub.services.db.withTenant(1, (tx) => applyConnector(tx, connectorManifest('during-grace')));
    await hub.services.exports.manifests.apply(1, undefined, exportManifest('during-grace'), 'test');
    // Marker: each scheduler has ended a tick begun after the apply (two ticks ended from now).
    const from = { ...ticks };
    await until('a tick of each scheduler after the apply', () => ticks.connectors >= from.connectors + 2 && ticks.exports >= from.exports + 2, GRACE_MS);
    expect(Date.now() - began).toBeLessThan(GRACE_MS); // still in the grace: the pools are open
    expect(await slotsOf('during-grace')).toBe(0);
    expect(await scheduledRunsOf('during-grace')).toBe(0);
    await stopped;
    expect(await slotsOf('during-grace')).toBe(0);
    expect(await scheduledRunsOf('during-grace')).toBe(0);
  });
});

describe('a clean stop with a delivery backlog', () => {
  it('ends within the grace and a few seconds, not once a slow endpoint has had every event; nothing delivered is lost from the journal', async () => {
    const slow = await startReceiver(() => ({ status: 200, body: 'ok', delayMs: 500 }));
    const own = await startTestHub({ 'svc.http.shutdown-grace': '1s' }, undefined, { background: true });
    const ownOwner = await ownerClient(own.ownerUrl);
    try {
      const created = await devClient(own.url, 1).post('/api/tenants/1/integrations', { name: 'slow', targetUrl: `${slow.url}/slow`, eventTypes: ['org.updated'], authMode: 'NONE' });
      expect(created.status).toBe(201);
      // 10,000 events for an endpoint that takes 16 a second (8 at once, half a second each): ten minutes of work.
      await own.services.db.withTenant(1, async (tx) => {
        for (let n = 0; n < 10_000; n++) await own.services.events.emit(tx, 'org.updated', { orgId: n, tenantId: 1 });
      });
      await slow.waitFor(16, '/slow', 10_000);
      const began = Date.now();
      await own.stop();
      // Not the minutes the backlog would take, nor an embedding batch of the search index in
      // progress (seconds on a busy machine; the stop drops it): 0.2 s here on a quiet machine, the
      // bound leaves room for a loaded one.
      expect(Date.now() - began).toBeLessThan(5_000);
      // Deliveries the endpoint answered are recorded succeeded (the ones it was still holding were
      // aborted: received there, not answered); the rest stay open for the next leader.
      const { rows } = await ownOwner.query<{ succeeded: number; open: number }>(
        'select count(*) filter (where succeeded)::int as succeeded, count(*) filter (where not succeeded and closed_reason is null)::int as open from hub.deliveries',
      );
      expect(rows[0]!.succeeded).toBeGreaterThan(0);
      expect(rows[0]!.succeeded).toBeLessThanOrEqual(slow.received.length);
      expect(rows[0]!.succeeded + rows[0]!.open).toBeLessThanOrEqual(10_000);
      // Attempts queued and never started gave their leases back (the next leader's retry sweep
      // takes them at once); only the ones aborted in flight (8 at once for one integration: the
      // request may have reached the endpoint) wait for theirs to run out.
      const leased = await ownOwner.query<{ queued: number; held: number }>(
        'select count(*) filter (where attempts = 0)::int as queued, count(*) filter (where lease_until > now())::int as held from hub.deliveries where not succeeded and closed_reason is null',
      );
      expect(leased.rows[0]!.queued).toBeGreaterThan(8); // there was a queue to give back
      expect(leased.rows[0]!.held).toBeLessThanOrEqual(8);
    } finally {
      await own.stop();
      await ownOwner.end();
      await slow.close();
    }
  }, 60_000);
});
