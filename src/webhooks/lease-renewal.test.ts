import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { type Receiver, startReceiver } from '../../test/harness/receiver.js';
import { until } from '../../test/harness/until.js';
import { SlotPool } from '../concurrency/slot-pool.js';
import { loadCatalog } from '../events/catalog.js';
import { EventWriter, type OutboxEvent } from '../events/outbox.js';
import { WebhookConsumer } from './consumer.js';
import { createIntegration } from './integrations.js';
import { WebhookSender } from './sender.js';
import { type AttemptTarget, DeliveryWorker } from './worker.js';

/**
 * An attempt that may outlast half of its lease (the exchange timeouts above it) keeps its lease
 * while it waits for the answer: a retry sweep, in this process or another, never claims a delivery
 * whose attempt is still under way, so a live process never has it sent twice at once. A real
 * database, a real receiver on loopback that answers after 2.5 s, a lease of 1 s. The same holds
 * for an outcome waiting to be written while the database is slow to take it.
 */

const KEY = Buffer.alloc(32, 9);
const LEASE_MS = 1_000;
const ANSWER_AFTER_MS = 2_500;
const writer = new EventWriter(loadCatalog());
let t: MigratedDatabase;
let receiver: Receiver;

beforeAll(async () => {
  t = await migratedDatabase({ 1: 'acme' });
  // Every path answers after 2.5 s but /slow-outcome, which answers at once.
  receiver = await startReceiver((path) => ({ status: 200, body: 'ok', delayMs: path === '/slow-outcome' ? 0 : ANSWER_AFTER_MS }));
});

afterAll(async () => {
  await receiver.close();
  await t.close();
});

/** A worker whose exchange may take 1 s to connect and 3 s more (longer than its lease), or given times. */
const worker = (connectTimeoutMs = 1_000, timeoutMs = 3_000) =>
  new DeliveryWorker({
    db: t.db,
    key: KEY,
    sender: new WebhookSender({ connectTimeoutMs, timeoutMs, userAgent: 'test' }),
    pool: new SlotPool(4, 2, 10),
    leaseMs: LEASE_MS,
  });

/** Another process's retry sweep (or this one's next): it only records what it claims. */
function otherSweeper() {
  const claimed: number[] = [];
  const recording = {
    submit: (_target: AttemptTarget, deliveryId: number) => {
      claimed.push(deliveryId);
      return true;
    },
    isStopping: () => false,
  } as unknown as DeliveryWorker;
  const sweeper = new WebhookConsumer({ db: t.db, worker: recording, leaseMs: LEASE_MS, maxAttempts: 3, perIntegrationClaim: 2, sweepBatch: 100 });
  return { sweeper, claimed };
}

const integration = (name: string, eventTypes: string[]) =>
  t.db.withTenant(1, (tx) => createIntegration(tx, { name, targetUrl: `${receiver.url}/${name}`, eventTypes, authMode: 'NONE' }, { key: KEY }));

/** A delivery of an event to `integrationId`, not leased (the next sweep claims it). */
async function openDelivery(integrationId: number, eventId: number): Promise<number> {
  const { rows } = await t.owner.query(
    `insert into hub.deliveries (tenant_id, integration_id, kind, event_id, event_type, body) values (1, $1, 'event', $2, 'org.deleted', '{"orgId":1}') returning id`,
    [integrationId, eventId],
  );
  return Number(rows[0].id);
}

async function rowOf(integrationId: number) {
  const { rows } = await t.owner.query('select id, attempts, succeeded, lease_token from hub.deliveries where integration_id = $1', [integrationId]);
  return rows[0] as { id: number; attempts: number; succeeded: boolean; lease_token: string | null };
}

/** Sweeps from another process while the attempt to `name` is under way, past its first lease. */
async function sweepDuringAttempt(name: string): Promise<number[]> {
  await receiver.waitFor(1, `/${name}`);
  // Past the lease the attempt started with, the answer still 1 s away.
  await new Promise((resolve) => setTimeout(resolve, LEASE_MS + 500));
  expect(receiver.on(`/${name}`).length).toBe(1);
  const other = otherSweeper();
  await other.sweeper.sweep();
  return other.claimed;
}

describe('an attempt longer than half its lease', () => {
  it('a retry: the lease taken at the start is renewed while the answer is awaited; no sweep claims the row meanwhile', async () => {
    const i = await integration('retried', ['org.deleted']);
    const id = await openDelivery(i.id, 7001);
    const w = worker();
    const sweep = new WebhookConsumer({ db: t.db, worker: w, leaseMs: LEASE_MS, maxAttempts: 3, perIntegrationClaim: 2, sweepBatch: 100 });
    try {
      expect(await sweep.sweep()).toBe(1);
      expect(await sweepDuringAttempt('retried')).toEqual([]);
      await until('the outcome written', async () => (await rowOf(i.id))?.attempts === 1);
      expect(await rowOf(i.id)).toMatchObject({ id, attempts: 1, succeeded: true, lease_token: null });
      expect(receiver.on('/retried').length).toBe(1);
    } finally {
      await w.stop();
    }
  }, 15_000);

  it('a first attempt sent on the consumer\'s statement (not renewed at its start): renewed while the answer is awaited', async () => {
    const i = await integration('first', ['org.updated']);
    const eventId = await t.db.withTenant(1, (tx) => writer.emit(tx, 'org.updated', { orgId: 1, tenantId: 1 }));
    const { rows } = await t.owner.query('select id, tenant_id, type, payload, created_at, txid::text as txid from events.outbox where id = $1', [eventId]);
    const events: OutboxEvent[] = rows.map((r) => ({ id: Number(r.id), tenantId: Number(r.tenant_id), type: r.type, payload: r.payload, createdAt: r.created_at, position: { txid: r.txid, id: Number(r.id) } }));
    const w = worker();
    const consumer = new WebhookConsumer({ db: t.db, worker: w, leaseMs: LEASE_MS, maxAttempts: 3, perIntegrationClaim: 2, sweepBatch: 100 });
    try {
      expect(await consumer.handleBatch(events)).toBe(1);
      expect(await sweepDuringAttempt('first')).toEqual([]);
      await until('the outcome written', async () => (await rowOf(i.id))?.attempts === 1);
      expect(await rowOf(i.id)).toMatchObject({ attempts: 1, succeeded: true, lease_token: null });
      expect(receiver.on('/first').length).toBe(1);
    } finally {
      await w.stop();
    }
  }, 15_000);
});

describe('an outcome waiting to be written', () => {
  it('keeps its lease while the database is slow to take it: no sweep claims the row and sends it again meanwhile', async () => {
    const i = await integration('slow-outcome', ['org.deleted']);
    const id = await openDelivery(i.id, 7002);
    // The receiver answers at once, and the exchange can never outlast half the lease: the attempt itself renews nothing.
    const w = worker(100, 200);
    const sweep = new WebhookConsumer({ db: t.db, worker: w, leaseMs: LEASE_MS, maxAttempts: 3, perIntegrationClaim: 2, sweepBatch: 100 });
    // The journal locked against writes (reads and the deliveries table go on): the outcome's statement waits in the database.
    const locker = new pg.Client({ connectionString: t.ownerUrl });
    await locker.connect();
    try {
      await locker.query('begin');
      await locker.query('lock table hub.delivery_attempts in share mode');
      expect(await sweep.sweep()).toBe(1);
      expect(await sweepDuringAttempt('slow-outcome')).toEqual([]);
      expect((await rowOf(i.id)).attempts).toBe(0);
      await locker.query('commit');
      await until('the outcome written', async () => (await rowOf(i.id))?.attempts === 1);
      expect(await rowOf(i.id)).toMatchObject({ id, attempts: 1, succeeded: true, lease_token: null });
      expect(receiver.on('/slow-outcome').length).toBe(1);
    } finally {
      await locker.end();
      await w.stop();
    }
  }, 15_000);
});
