import { afterAll, beforeAll, expect, it } from '@jest/globals';
import pg from 'pg';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { type Receiver, startReceiver } from '../../test/harness/receiver.js';
import { client } from '../../test/harness/api-client.js';
import { until } from '../../test/harness/until.js';

/**
 * First attempts left to the retry sweep because their integration's queue was full (a burst to an
 * endpoint slower than the hub) go as soon as the queue has room, not at the next scheduled sweep:
 * the consumer wakes the sweep when it leaves them (services.ts, `onDeferred`). The scheduled sweep
 * here comes once an hour, so without the wake they would wait that long.
 */

let hub: TestHub;
let receiver: Receiver;
let owner: pg.Client;
/** The endpoint answers after this long (slow while the burst is written, then at once). */
let delayMs = 1_500;

beforeAll(async () => {
  receiver = await startReceiver(() => ({ status: 200, body: 'ok', delayMs }));
  hub = await startTestHub(
    {
      'svc.secret.master-key': Buffer.alloc(32, 7).toString('base64'),
      'svc.webhook.sweep-every': '1s',
      'svc.webhook.retry-every': '1h',
      'svc.leader.check-every': '500ms',
    },
    undefined,
    { background: true },
  );
  owner = new pg.Client({ connectionString: hub.ownerUrl });
  await owner.connect();
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
  await receiver?.close();
});

it('first attempts that found their queue full are sent once it has room, each once, without waiting for the next scheduled sweep', async () => {
  const c = client(hub.url, { 'X-Tenant-ID': '1' });
  const res = await c.post('/api/tenants/1/integrations', { name: 'burst', targetUrl: `${receiver.url}/burst`, eventTypes: ['org.updated'], authMode: 'NONE' });
  expect(res.status).toBe(201);
  const integrationId = (res.body as { id: number }).id;
  // More than the integration's queue (1,000) and its attempts under way (8) hold: the rest of the
  // burst finds no room for a second and is left to the retry sweep.
  const { rows } = await owner.query<{ id: number }>(
    `insert into events.outbox (tenant_id, type, payload)
     select 1, 'org.updated', jsonb_build_object('orgId', g, 'tenantId', 1) from generate_series(1, 1600) g returning id`,
  );
  const fired = rows.map((r) => Number(r.id));
  const leftToSweep = async () =>
    (await owner.query<{ n: number }>('select count(*)::int as n from hub.deliveries where integration_id = $1 and attempts = 0 and lease_token is null', [integrationId])).rows[0]!.n;
  await until('first attempts to be left to the retry sweep', async () => (await leftToSweep()) > 0, 20_000);
  // The endpoint speeds up: the queue drains, then the rows left to the sweep go.
  delayMs = 0;
  const got = await receiver.waitFor(fired.length, '/burst', 30_000);
  expect(got.map((r) => Number(r.headers['x-svc-event-id'])).sort((a, b) => a - b)).toEqual(fired.sort((a, b) => a - b));
  await until('every delivery to be recorded as succeeded', async () =>
    (await owner.query<{ n: number }>('select count(*)::int as n from hub.deliveries where integration_id = $1 and succeeded and attempts = 1', [integrationId])).rows[0]!.n === fired.length,
  );
}, 90_000);
