import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { type Receiver, startReceiver } from '../../test/harness/receiver.js';
import { until } from '../../test/harness/until.js';
import { SlotPool } from '../concurrency/slot-pool.js';
import { createIntegration } from './integrations.js';
import { WebhookSender } from './sender.js';
import { DeliveryWorker } from './worker.js';

/**
 * What a worker that stops cleanly gives back: the leases of the attempts it had queued and not
 * started, so the next retry sweep (in the next leader) takes those rows up at once. A real database
 * and a real receiver on loopback.
 */

const KEY = Buffer.alloc(32, 9);
let t: MigratedDatabase;
let receiver: Receiver;

beforeAll(async () => {
  t = await migratedDatabase({ 1: 'acme' });
  receiver = await startReceiver();
});

afterAll(async () => {
  await receiver.close();
  await t.close();
});

describe('a worker stopping', () => {
  it('releases the lease of a row queued again under a new lease, even after its older queued attempt (lost) started first', async () => {
    const i = await t.db.withTenant(1, (tx) =>
      createIntegration(tx, { name: 'requeued', targetUrl: `${receiver.url}/requeued`, eventTypes: ['org.updated'], authMode: 'NONE' }, { key: KEY }),
    );
    // The row as a retry sweep left it: claimed again (token B) while an attempt under its earlier
    // lease (token A, run out) still waited in the queue.
    const [older, newer] = ['00000000-0000-4000-8000-00000000000a', '00000000-0000-4000-8000-00000000000b'];
    const { rows } = await t.owner.query(
      `insert into hub.deliveries (tenant_id, integration_id, kind, event_id, event_type, body, lease_until, lease_token)
       values (1, $1, 'event', 8001, 'org.updated', '{"orgId":1}', now() + interval '1 minute', $2) returning id`,
      [i.id, newer],
    );
    const id = Number(rows[0].id);
    // One slot, held by another lane's job; that lane has a second job waiting for its turn.
    const pool = new SlotPool(1, 1, 10);
    const releases: Array<() => void> = [];
    let secondStarted = false;
    pool.offer('other', () => new Promise<void>((resolve) => releases.push(resolve)));
    pool.offer('other', () => {
      secondStarted = true;
      return new Promise<void>((resolve) => releases.push(resolve));
    });
    const w = new DeliveryWorker({ db: t.db, key: KEY, sender: new WebhookSender({ connectTimeoutMs: 1000, timeoutMs: 1000, userAgent: 'test' }), pool, leaseMs: 60_000 });
    const target = { tenantId: 1, integrationId: i.id };
    expect(w.submit(target, id, older)).toBe(true);
    expect(w.submit(target, id, newer)).toBe(true);
    // The slot goes to the older attempt (lost: its lease is gone), then to the other lane's second
    // job: the newer attempt stays queued.
    releases.shift()!();
    await until('the other lane\'s second job to hold the slot', () => secondStarted);
    try {
      await w.stop();
      const { rows: after } = await t.owner.query('select attempts, lease_token, lease_until from hub.deliveries where id = $1', [id]);
      expect(after[0]).toEqual({ attempts: 0, lease_token: null, lease_until: null });
      expect(receiver.on('/requeued')).toEqual([]);
    } finally {
      for (const release of releases) release();
    }
  });
});
