import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import type { QueryOptions, Tx } from '../db/database.js';
import { type Behaviour, type Received, type Receiver, startReceiver } from '../../test/harness/receiver.js';
import { loadCatalog } from '../events/catalog.js';
import { EventWriter, type OutboxEvent } from '../events/outbox.js';
import { Config } from '../config/config.js';
import { WebhookConsumer } from './consumer.js';
import { Batches } from './batches.js';
import { listForTenant, materialiseRows, writeBack, writeBackMany } from './journal.js';
import { registerSecret } from '../observability/logger.js';
import { createIntegration, integrationSubscriber, updateIntegration } from './integrations.js';
import { CLOSED_REASON, type IntegrationPatch, RETRIES_EXHAUSTED_REASON, TENANT_INACTIVE_REASON, TEST_INTERRUPTED_REASON } from './model.js';
import { PROGRESS_FACTOR, SlotPool } from '../concurrency/slot-pool.js';
import { WebhookSender } from './sender.js';
import { IntegrationService } from './service.js';
import { createWebhookServices } from './services.js';
import { type AttemptTarget, type Claim, DeliveryWorker } from './worker.js';
import { until } from '../../test/harness/until.js';

/**
 * The consumer's matching and the retry sweep's claims, below HTTP: a real database, a recording
 * worker (or a real one against a loopback receiver).
 */

const KEY = Buffer.alloc(32, 9);
const rules = { key: KEY };
const writer = new EventWriter(loadCatalog());
let t: MigratedDatabase;
let receiver: Receiver;

const submitted: Array<{ integrationId: number; deliveryId: number; token: string }> = [];
/**
 * The first attempts handed to the recording workers whose rows are not written yet (`writeClaims`
 * writes them as a worker that leaves them leased would: `rowsOf` sees what the consumer matched).
 */
const unwritten: Claim[] = [];
const recordingBatches = new Batches({ tenantId: undefined, query: (text, values) => t.db.worker.query(text, values as unknown[]) }, 60_000);
const recording = {
  submit: ({ integrationId }: AttemptTarget, deliveryId: number, token: string, claim?: Claim) => {
    submitted.push({ integrationId, deliveryId, token });
    if (claim?.batch) unwritten.push(claim);
    return true;
  },
  submitEach: async ({ integrationId }: AttemptTarget, claims: Claim[], token: string) => {
    for (const claim of claims) {
      submitted.push({ integrationId, deliveryId: claim.row.id, token });
      if (claim.batch) unwritten.push(claim);
    }
    return claims.length;
  },
  stamp: () => ({ at: performance.now(), changes: 0 }),
  batches: recordingBatches,
} as unknown as DeliveryWorker;

/** Writes the rows of the first attempts handed over (`unwritten`, or `claims`) leased under their batches' tokens, as the consumer recorded them before the worker wrote them whole. */
async function writeClaims(claims: Claim[] = unwritten.splice(0)): Promise<void> {
  const direct: Tx = { tenantId: undefined, query: (text, values) => t.db.worker.query(text, values as unknown[]) };
  for (const claim of claims) {
    await materialiseRows(direct, [claim.row], { token: claim.batch!.token, leaseMs: 60_000 }, null, []);
    recordingBatches.settle(claim.batch!, 1, true);
  }
}

const consumer = (worker: DeliveryWorker = recording, maxAttempts = 3) =>
  new WebhookConsumer({ db: t.db, worker, leaseMs: 60_000, maxAttempts, perIntegrationClaim: 2, sweepBatch: 100 });

beforeAll(async () => {
  t = await migratedDatabase({ 1: 'acme', 2: 'globex' });
  receiver = await startReceiver((path) => (path === '/fail' ? { status: 500 } : { status: 200, body: 'ok' }));
});

afterAll(async () => {
  await receiver.close();
  await t.close();
});

beforeEach(() => {
  submitted.length = 0;
  unwritten.length = 0;
});

const emit = (tenant: number, orgId: number, type = 'org.updated') => t.db.withTenant(tenant, (tx) => writer.emit(tx, type, { orgId, tenantId: tenant }));
const integration = (tenant: number, name: string, extra: Record<string, unknown> = {}) =>
  t.db.withTenant(tenant, (tx) => createIntegration(tx, { name, targetUrl: `${receiver.url}/${name}`, eventTypes: ['org.updated'], authMode: 'NONE', ...extra }, rules));

/** The events as the consumer would hand them over (read directly: other suites' open transactions on the server must not hide them). */
async function events(ids: number[]): Promise<OutboxEvent[]> {
  const { rows } = await t.owner.query('select id, tenant_id, type, payload, created_at, txid::text as txid from events.outbox where id = any($1::bigint[]) order by id', [ids]);
  return rows.map((r) => ({ id: Number(r.id), tenantId: Number(r.tenant_id), type: r.type, payload: r.payload, createdAt: r.created_at, position: { txid: r.txid, id: Number(r.id) } }));
}

async function rowsOf(integrationId: number) {
  await writeClaims();
  const { rows } = await t.owner.query('select id, event_id, kind, attempts, lease_token, lease_until, closed_reason from hub.deliveries where integration_id = $1 order by id', [integrationId]);
  return rows as Array<{ id: number; event_id: number; kind: string; attempts: number; lease_token: string | null; lease_until: Date | null; closed_reason: string | null }>;
}

/** Tenant 2's events for orgs `from`, `from + 1`, … (`n` of them), as the consumer would hand them over. */
async function emitBatch(n: number, from: number): Promise<OutboxEvent[]> {
  const ids: number[] = [];
  for (let k = 0; k < n; k++) ids.push(await emit(2, from + k));
  return events(ids);
}

/** Rows of the batch's events left to the retry sweep (lease given back, never attempted) for one integration. */
async function leftToSweep(batch: OutboxEvent[], integrationId: number): Promise<number> {
  await writeClaims();
  const { rows } = await t.owner.query<{ n: number }>(
    'select count(*)::int as n from hub.deliveries where integration_id = $1 and event_id = any($2::bigint[]) and lease_token is null and attempts = 0',
    [integrationId, batch.map((e) => e.id)],
  );
  return rows[0]!.n;
}

let drained = 0;

/** One `offerEach` of the worker's pool (RecordingPool). */
interface Offer {
  key: string | number;
  count: number;
  taken?: number;
  /** A timer of the wait's length, set as the call began, had fired when it resolved: it waited a whole wait. */
  waitedOut: boolean;
  /** It resolved before a setImmediate set as it began ran: at once, no wait for room at all. */
  atOnce: boolean;
  /** The order its start and its end came in, among every call's (overlapping waits: each began before any ended). */
  began: number;
  ended?: number;
}

/**
 * A SlotPool that records its `offerEach` calls: what they took, and whether they waited, told by
 * timers started alongside (no bound on the wall clock): timers of one length fire in the order they
 * were set, so a timer of the wait's length set just before the call's own has fired once the call
 * waited its wait out, however slow the machine; a call that took the rows or refused them at once
 * resolves before it.
 */
class RecordingPool extends SlotPool {
  readonly offers: Offer[] = [];
  private seq = 0;

  override offerEach(...args: Parameters<SlotPool['offerEach']>): Promise<number> {
    const [key, count, , waitMs] = args;
    const offer: Offer = { key, count, waitedOut: false, atOnce: true, began: this.seq++ };
    this.offers.push(offer);
    const alongside = setTimeout(() => {
      offer.waitedOut = true;
    }, waitMs);
    const turn = setImmediate(() => {
      offer.atOnce = false;
    });
    return super.offerEach(...args).then((taken) => {
      clearTimeout(alongside);
      clearImmediate(turn);
      Object.assign(offer, { taken, ended: this.seq++ });
      return taken;
    });
  }
}

/** Whether the calls' waits overlapped: each began before any of them ended. */
const overlapping = (offers: Offer[]) => Math.max(...offers.map((o) => o.began)) < Math.min(...offers.map((o) => o.ended!));

/**
 * A drain against real endpoints: tenant 2's integrations `names` (cliff-<path>, the only ones of
 * tenant 2 matching its events) sending to a receiver that answers path /<path> as `behave` says,
 * a real worker (one attempt at a time per integration, 30 queued at most) and a consumer waiting
 * `waitMs` per batch for room. Batches of `sizes` events are read before the first is handled
 * (nothing but the consumer between them); `check` gets the integrations, the batches and the
 * pool's `offerEach` calls of each (RecordingPool), while the worker still runs.
 */
async function drain(
  names: string[],
  behave: (path: string) => Behaviour,
  waitMs: number,
  sizes: number[],
  check: (integrations: Array<{ id: number }>, batches: OutboxEvent[][], offers: Offer[][]) => Promise<void>,
): Promise<void> {
  // Only this drain's integrations match its events.
  await t.owner.query('update hub.integrations set enabled = false where tenant_id = 2');
  const endpoints = await startReceiver(behave);
  const pool = new RecordingPool(8, 1, 30);
  const worker = new DeliveryWorker({ db: t.db, key: KEY, sender: new WebhookSender({ connectTimeoutMs: 1000, timeoutMs: 60_000, userAgent: 'test' }), pool, leaseMs: 60_000 });
  const consumer = new WebhookConsumer({ db: t.db, worker, leaseMs: 60_000, maxAttempts: 3, perIntegrationClaim: 2, sweepBatch: 100, queueWaitMs: waitMs });
  try {
    const integrations = await Promise.all(
      names.map((name) => t.db.withTenant(2, (tx) => createIntegration(tx, { name, targetUrl: `${endpoints.url}/${name.slice(6)}`, eventTypes: ['org.updated'], authMode: 'NONE' }, rules))),
    );
    const batches: OutboxEvent[][] = [];
    for (const n of sizes) {
      batches.push(await emitBatch(n, 300 + drained));
      drained += n;
    }
    const offers: Offer[][] = [];
    for (const b of batches) {
      const from = pool.offers.length;
      expect(await consumer.handleBatch(b)).toBe(names.length * b.length);
      offers.push(pool.offers.slice(from));
    }
    await check(integrations, batches, offers);
  } finally {
    await worker.stop();
    await endpoints.close();
    // Nothing of this drain for the sweeps of the next tests.
    await t.owner.query('update hub.integrations set enabled = false where tenant_id = 2 and name = any($1)', [names]);
    await t.owner.query('delete from hub.deliveries where integration_id in (select id from hub.integrations where tenant_id = 2 and name = any($1))', [names]);
  }
}

describe('the consumer', () => {
  it('matches only integrations active when the event was written, even when it reads late', async () => {
    const before = await emit(1, 1);
    const i = await integration(1, 'late-reader');
    const afterCreate = await emit(1, 2);
    expect(await consumer().handleBatch(await events([before, afterCreate]))).toBe(1);
    await t.db.withTenant(1, (tx) => updateIntegration(tx, i.id, { enabled: false }, rules));
    const whileDisabled = await emit(1, 3);
    await t.db.withTenant(1, (tx) => updateIntegration(tx, i.id, { enabled: true }, rules));
    const afterEnable = await emit(1, 4);
    expect(await consumer().handleBatch(await events([whileDisabled, afterEnable]))).toBe(1);
    expect((await rowsOf(i.id)).map((r) => r.event_id)).toEqual([afterCreate, afterEnable]);
    expect(submitted.map((s) => s.integrationId)).toEqual([i.id, i.id]);
    await t.db.withTenant(1, (tx) => updateIntegration(tx, i.id, { enabled: false }, rules));
  });

  it('an event written after the integration became active, by a transaction that began before, is delivered (events are timed when written, not when their transaction began)', async () => {
    const [i, e] = await t.db.withTenant(1, async (tx) => {
      await tx.query('select 1');
      // The integration is created and committed while this transaction is open; the event is written after.
      const created = await integration(1, 'began-before');
      return [created, await writer.emit(tx, 'org.updated', { orgId: 30, tenantId: 1 })] as const;
    });
    expect(await consumer().handleBatch(await events([e]))).toBe(1);
    expect((await rowsOf(i.id)).map((r) => r.event_id)).toEqual([e]);
    await t.owner.query('update hub.integrations set enabled = false where id = $1', [i.id]);
  });

  it('given a cursor, moves it past the batch in the statement that records the rows (never back), one statement in all', async () => {
    const i = await integration(1, 'moves-cursor');
    const batch = await events([await emit(1, 7), await emit(1, 8)]);
    await t.owner.query(`insert into events.consumer_cursors (consumer) values ('webhooks-cursor-test')`);
    const statements: string[] = [];
    const counting = new Proxy(t.db, {
      get(target, prop, receiver) {
        if (prop === 'crossTenantQuery') {
          return (job: string, text: string, values?: unknown[], options?: QueryOptions) => {
            statements.push(text);
            return target.crossTenantQuery(job, text, values, options);
          };
        }
        const value = Reflect.get(target, prop, receiver);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    const moving = new WebhookConsumer({ db: counting, worker: recording, leaseMs: 60_000, maxAttempts: 3, perIntegrationClaim: 2, sweepBatch: 100 });
    const cursorAt = async () =>
      (await t.owner.query(`select txid::text as txid, last_id::int as id from events.consumer_cursors where consumer = 'webhooks-cursor-test'`)).rows[0] as { txid: string; id: number };
    await moving.handleBatch(batch, { consumer: 'webhooks-cursor-test', to: batch[1]!.position });
    expect(statements).toHaveLength(1);
    expect(await cursorAt()).toEqual(batch[1]!.position);
    expect((await rowsOf(i.id)).map((r) => r.event_id)).toEqual(batch.map((e) => e.id));
    // Read again from an older position (a crash before): nothing recorded twice, the cursor not moved back.
    expect(await moving.handleBatch(batch.slice(0, 1), { consumer: 'webhooks-cursor-test', to: batch[0]!.position })).toBe(0);
    expect(await cursorAt()).toEqual(batch[1]!.position);
    expect(await rowsOf(i.id)).toHaveLength(2);
    // Out of the way of the tests below (they count the rows their events make in tenant 1).
    await t.owner.query('update hub.integrations set enabled = false where id = $1', [i.id]);
  });

  it('a slow endpoint holds a batch a second at most: the other integration gets every first attempt, the slow one\'s overflow goes to the sweep', async () => {
    // Only this test's integrations match its events.
    await t.owner.query('update hub.integrations set enabled = false where tenant_id = 2');
    const slowReceiver = await startReceiver(() => ({ status: 200, body: 'ok', delayMs: 400 }));
    const pool = new RecordingPool(8, 2, 4);
    const worker = new DeliveryWorker({ db: t.db, key: KEY, sender: new WebhookSender({ connectTimeoutMs: 1000, timeoutMs: 5000, userAgent: 'test' }), pool, leaseMs: 60_000 });
    try {
      const slow = await t.db.withTenant(2, (tx) => createIntegration(tx, { name: 'lane-slow', targetUrl: `${slowReceiver.url}/slow`, eventTypes: ['org.updated'], authMode: 'NONE' }, rules));
      const fast = await integration(2, 'lane-fast');
      const ids: number[] = [];
      for (let n = 0; n < 40; n++) ids.push(await emit(2, 100 + n));
      // The process is told how many it left to the sweep (it wakes its sweep: services.ts).
      const deferrals: number[] = [];
      const deferring = new WebhookConsumer({ db: t.db, worker, leaseMs: 60_000, maxAttempts: 3, perIntegrationClaim: 2, sweepBatch: 100, onDeferred: (n) => deferrals.push(n) });
      expect(await deferring.handleBatch(await events(ids))).toBe(80);
      // One wait for room per integration, all at the same time: the slow one's ran out (a second).
      // Row after row at the slow endpoint's pace (room every 200 ms) this batch took 7 s.
      const slowOffers = pool.offers.filter((o) => o.key === slow.id);
      expect(slowOffers.map((o) => o.waitedOut)).toEqual([true]);
      expect(pool.offers.filter((o) => o.key === fast.id).length).toBeLessThanOrEqual(1);
      expect(overlapping(pool.offers)).toBe(true);
      await receiver.waitFor(40, '/lane-fast', 5_000);
      const fastRows = await rowsOf(fast.id);
      expect(fastRows.map((r) => r.event_id)).toEqual(ids);
      // The slow integration's rows that found no room are left to the retry sweep (lease freed).
      const freed = (await rowsOf(slow.id)).filter((r) => r.lease_token === null && r.attempts === 0);
      expect(freed.length).toBeGreaterThan(20);
      expect(deferrals).toEqual([freed.length]);
    } finally {
      await worker.stop();
      await slowReceiver.close();
      // Nothing of this test for the sweeps of the next ones.
      await t.owner.query("update hub.integrations set enabled = false where tenant_id = 2 and name in ('lane-slow', 'lane-fast')");
      await t.owner.query("delete from hub.deliveries where integration_id in (select id from hub.integrations where tenant_id = 2 and name in ('lane-slow', 'lane-fast'))");
    }
  });

  it('handing over ahead: a batch returns once recorded, its attempts still waiting for room, and the next one once that batch is handed over, whose own wait begins only then; every attempt queued in event order', async () => {
    // Only this test's integration matches its events.
    await t.owner.query('update hub.integrations set enabled = false where tenant_id = 2');
    // The first request is answered late: meanwhile the integration's one slot is taken and its queue (2) full.
    let first = true;
    const endpoint = await startReceiver(() => {
      const late = first;
      first = false;
      return { status: 200, body: 'ok', delayMs: late ? 3_000 : 0 };
    });
    const pool = new RecordingPool(8, 1, 2);
    const worker = new DeliveryWorker({ db: t.db, key: KEY, sender: new WebhookSender({ connectTimeoutMs: 1000, timeoutMs: 30_000, userAgent: 'test' }), pool, leaseMs: 60_000 });
    const ahead = new WebhookConsumer({ db: t.db, worker, leaseMs: 60_000, maxAttempts: 3, perIntegrationClaim: 2, sweepBatch: 100, queueWaitMs: 30_000, handOverAhead: true });
    try {
      const target = await t.db.withTenant(2, (tx) => createIntegration(tx, { name: 'ahead', targetUrl: `${endpoint.url}/ahead`, eventTypes: ['org.updated'], authMode: 'NONE' }, rules));
      const a = await emitBatch(6, 700);
      const b = await emitBatch(3, 710);
      // One sent, two queued, three waiting for room: the batch returns with them still waiting.
      expect(await ahead.handleBatch(a)).toBe(6);
      expect(pool.offers.map((o) => [o.key, o.count, o.ended])).toEqual([[target.id, 3, undefined]]);
      // The next batch returns only once the one before is handed over (its waiting offer ended, all taken).
      expect(await ahead.handleBatch(b)).toBe(3);
      expect(pool.offers[0]!.ended).toBeDefined();
      expect(pool.offers[0]!.taken).toBe(3);
      await ahead.handedOver();
      // The later batch's wait for room began once the earlier one's had ended: its second is its own.
      expect(pool.offers.map((o) => o.key)).toEqual([target.id, target.id]);
      expect(pool.offers[1]!.began).toBeGreaterThan(pool.offers[0]!.ended!);
      expect(await leftToSweep([...a, ...b], target.id)).toBe(0);
      // One slot: the requests came in the order they were queued, the events' order.
      const got = await endpoint.waitFor(9, '/ahead', 10_000);
      expect(got.map((r) => JSON.parse(r.body).orgId)).toEqual([...a, ...b].map((e) => (e.payload as { orgId: number }).orgId));
    } finally {
      await worker.stop();
      await endpoint.close();
      await t.owner.query("update hub.integrations set enabled = false where tenant_id = 2 and name = 'ahead'");
      await t.owner.query("delete from hub.deliveries where integration_id in (select id from hub.integrations where tenant_id = 2 and name = 'ahead')");
    }
  });

  it('an endpoint whose attempts end fast during the wait stays on the fast path batch after batch (a process short of CPU is not a stuck endpoint); one that hangs costs one wait, then none', async () => {
    // Each answer a tenth of the wait (well within the 1/PROGRESS_FACTOR of it that counts as
    // progress): the endpoint keeps answering, but fewer rows than a batch brings fit in one wait (as
    // in a drain on a machine short of CPU); the other never answers.
    const waitMs = 600;
    expect(waitMs / 10).toBeLessThan(waitMs / PROGRESS_FACTOR / 2);
    await drain(['cliff-steady', 'cliff-stuck'], (path) => (path === '/stuck' ? 'hang' : { status: 200, body: 'ok', delayMs: waitMs / 10 }), waitMs, [60, 2, 2], async ([steady, stuck], batches, offers) => {
      // The first batch waited for both (neither fits): a wait and no more (one per integration, both
      // at the same time), rows of each left to the sweep.
      expect(offers[0]!.map((o) => o.key).sort()).toEqual([steady!.id, stuck!.id].sort());
      expect(offers[0]!.map((o) => o.waitedOut)).toEqual([true, true]);
      expect(overlapping(offers[0]!)).toBe(true);
      expect(await leftToSweep(batches[0]!, steady!.id)).toBeGreaterThan(0);
      expect(await leftToSweep(batches[0]!, stuck!.id)).toBeGreaterThan(0);
      // The next ones: the steady endpoint's rows are all queued (its queue full when the batch came,
      // room freed as it answered); the stuck one's all left to the sweep at once, without a wait.
      for (const b of batches.slice(1)) {
        expect(await leftToSweep(b, steady!.id)).toBe(0);
        expect(await leftToSweep(b, stuck!.id)).toBe(2);
      }
      // No wait ran out; the stuck one's rows were refused at once.
      const later = offers.slice(1).flat();
      expect(later.filter((o) => o.waitedOut)).toEqual([]);
      expect(later.filter((o) => o.key === stuck!.id).map((o) => o.atOnce)).toEqual([true, true]);
    });
  });

  it('an endpoint that answers, but takes half the wait per attempt, costs the consumer one wait, then none while its queue stays full: its rows go to the retry sweep', async () => {
    // Two attempts end per wait, fewer than the PROGRESS_FACTOR it must start to count as progressing.
    const waitMs = 600;
    await drain(['cliff-slow'], () => ({ status: 200, body: 'ok', delayMs: waitMs / 2 }), waitMs, [60, 5, 5, 5], async ([slow], batches, offers) => {
      // One wait, run out.
      expect(offers[0]!.map((o) => [o.key, o.waitedOut])).toEqual([[slow!.id, true]]);
      expect(await leftToSweep(batches[0]!, slow!.id)).toBeGreaterThan(0);
      // The next batches wait for it no more, though it answers: what finds no room goes to the sweep at once.
      for (const b of batches.slice(1)) expect(await leftToSweep(b, slow!.id)).toBeGreaterThan(0);
      expect(offers.slice(1).map((each) => each.map((o) => o.atOnce))).toEqual([[true], [true], [true]]);
    });
  });

  it('records each (event, integration) once, however often the batch is read again', async () => {
    const i = await integration(1, 'idempotent');
    const e = await emit(1, 5);
    expect(await consumer().handleBatch(await events([e]))).toBe(1);
    // Read again while its first attempt's row is not written yet (its batch row held): not matched again.
    expect(await consumer().handleBatch(await events([e]))).toBe(0);
    expect((await rowsOf(i.id)).length).toBe(1);
    // Read again once its row is written: not matched again.
    expect(await consumer().handleBatch(await events([e]))).toBe(0);
    expect((await rowsOf(i.id)).length).toBe(1);
  });

  it('two processes that both believed they led read the same batch at once: only the one whose statement moved the cursor sends it', async () => {
    const i = await integration(1, 'two-leaders');
    const batch = await events([await emit(1, 41), await emit(1, 42)]);
    await t.owner.query(`insert into events.consumer_cursors (consumer) values ('webhooks-two-leaders')`);
    const move = { consumer: 'webhooks-two-leaders', to: batch[1]!.position };
    // The cursor row locked: both statements start (their snapshots see no batch of the other) and wait for it.
    const locker = new pg.Client({ connectionString: t.ownerUrl });
    await locker.connect();
    try {
      await locker.query('begin');
      await locker.query(`select 1 from events.consumer_cursors where consumer = 'webhooks-two-leaders' for update`);
      const both = Promise.all([consumer().handleBatch(batch, move), consumer().handleBatch(batch, move)]);
      await until('both statements to wait for the cursor', async () => {
        const { rows } = await t.owner.query<{ n: number }>(
          `select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and position('with batch as materialized' in query) > 0`,
        );
        return rows[0]!.n === 2;
      });
      await locker.query('commit');
      // The other integrations of tenant 1 still enabled match too: one statement sent them all, the other nothing.
      const [fewer, more] = (await both).sort((x, y) => x - y);
      expect(fewer).toBe(0);
      expect(more).toBeGreaterThanOrEqual(2);
      expect(submitted.filter((x) => x.integrationId === i.id)).toHaveLength(2);
    } finally {
      await locker.end();
    }
    expect((await rowsOf(i.id)).map((r) => r.event_id)).toEqual(batch.map((e) => e.id));
    await t.owner.query('update hub.integrations set enabled = false where id = $1', [i.id]);
  });

  it('records each body as the very text sent: quotes, backslashes, escapes, non-ASCII and spacing kept', async () => {
    const i = await integration(2, 'body-text');
    // Written directly (the catalog declares org.updated's payload): the text any payload makes.
    const payloads = [{ q: 'a "quoted" \\ back\\slash', nl: 'x\ny', u: 'é ✓ 𝄞 \u2028' }, { nested: { arr: [1, 'two', null, true], s: '{,}' } }];
    const ids: number[] = [];
    for (const payload of payloads) {
      const { rows } = await t.owner.query<{ id: string }>(`insert into events.outbox (tenant_id, type, payload) values (2, 'org.updated', $1::jsonb) returning id`, [JSON.stringify(payload)]);
      ids.push(Number(rows[0]!.id));
    }
    const batch = await events(ids);
    const claims: Claim[] = [];
    const claiming = {
      ...recording,
      submit: (_i: AttemptTarget, _d: number, _t: string, claim: Claim) => claims.push(claim) > 0,
    } as unknown as DeliveryWorker;
    await consumer(claiming).handleBatch(batch);
    await writeClaims(claims);
    const { rows } = await t.owner.query<{ body: string }>('select body from hub.deliveries where integration_id = $1 order by id', [i.id]);
    expect(rows.map((r) => r.body)).toEqual(batch.map((e) => JSON.stringify(e.payload)));
    expect(claims.filter((c) => c.row.integration_id === i.id).map((c) => c.row.body)).toEqual(rows.map((r) => r.body));
    // Out of the next tests' way (they count their tenant's deliveries).
    await t.owner.query('update hub.integrations set deleted_at = now() where id = $1', [i.id]);
  });

  it('hands each first attempt its own event\'s body and its own integration\'s columns (read once per integration)', async () => {
    const a = await integration(2, 'claims-a', { eventTypes: ['org.*'] });
    const b = await integration(2, 'claims-b', { eventTypes: ['org.updated'], authMode: 'HMAC', secret: 's3cret' });
    const ids = [await emit(2, 11), await emit(2, 12), await emit(2, 13)];
    const claims: Claim[] = [];
    const claiming = {
      ...recording,
      submit: (_i: AttemptTarget, _d: number, _t: string, claim: Claim) => claims.push(claim) > 0,
      submitEach: async (_i: AttemptTarget, each: Claim[]) => {
        claims.push(...each);
        return each.length;
      },
    } as unknown as DeliveryWorker;
    expect(await consumer(claiming).handleBatch(await events(ids))).toBe(6);
    expect(claims.map((c) => c.row.id)).toEqual([...claims.map((c) => c.row.id)].sort((x, y) => x - y));
    const orgOf = new Map(ids.map((id, k) => [id, 11 + k]));
    for (const { row } of claims) {
      expect(JSON.parse(row.body)).toEqual({ orgId: orgOf.get(row.event_id!), tenantId: 2 });
      const mine = row.integration_id === a.id ? a : b;
      expect(row.integration_id).toBe(mine.id);
      expect(row.target_url).toBe(`${receiver.url}/${mine.name}`);
      expect(row.auth_mode).toBe(mine === a ? 'NONE' : 'HMAC');
      expect(row.secret_ciphertext === null).toBe(mine === a);
      expect(row.event_types).toEqual(mine === a ? ['org.*'] : ['org.updated']);
      expect([row.enabled, row.deleted, row.tenant_id, row.kind, row.attempts]).toEqual([true, false, 2, 'event', 0]);
    }
    expect(claims.filter((c) => c.row.integration_id === a.id).map((c) => c.row.event_id)).toEqual(ids);
    expect(claims.filter((c) => c.row.integration_id === b.id).map((c) => c.row.event_id)).toEqual(ids);
  });

  it('records rows and writes their outcomes without locking the tenant\'s or the integration\'s row (no key to a row every delivery shares)', async () => {
    const i = await integration(2, 'no-parent-lock');
    const batch = await events([await emit(2, 7)]);
    const holder = new pg.Client({ connectionString: t.ownerUrl });
    await holder.connect();
    const within = <T>(work: Promise<T>) =>
      Promise.race([work, new Promise<never>((_, reject) => setTimeout(() => reject(new Error('blocked by a lock on the tenant or the integration row')), 3_000).unref())]);
    try {
      // The strongest row locks: a foreign key check's FOR KEY SHARE on either row would wait for them.
      await holder.query('begin');
      await holder.query('select 1 from core.tenants where id = 2 for update');
      await holder.query('select 1 from hub.integrations where id = $1 for update', [i.id]);
      expect(await within(consumer().handleBatch(batch))).toBeGreaterThanOrEqual(1); // the tenant's other integrations match too
      const recorded = await rowsOf(i.id);
      expect(recorded.length).toBe(1);
      const [row] = recorded;
      const direct: Tx = { tenantId: undefined, query: (text, values) => t.db.worker.query(text, values as unknown[]) };
      const outcome = { ok: true, httpStatus: 200, responseBody: 'ok', error: null, durationMs: 3, attemptedAt: new Date() };
      const written = await within(writeBackMany(direct, [{ id: row!.id, token: row!.lease_token!, outcome }]));
      expect(written.get(row!.id)).toBe(1);
    } finally {
      await holder.query('rollback');
      await holder.end();
    }
    const { rows } = await t.owner.query('select succeeded, attempts from hub.deliveries where integration_id = $1', [i.id]);
    expect(rows).toEqual([{ succeeded: true, attempts: 1 }]);
  });

  it('an outcome written late, of an attempt older than the one recorded (its lease lost meanwhile), is counted and logged but leaves the latest attempt\'s fields', async () => {
    const k = await integration(1, 'late-outcome');
    const direct: Tx = { tenantId: undefined, query: (text, values) => t.db.worker.query(text, values as unknown[]) };
    for (const write of ['many', 'one'] as const) {
      const { rows } = await t.owner.query<{ id: string }>(`insert into hub.deliveries (tenant_id, integration_id, kind, event_id, event_type, body) values (1, $1, 'event', $2, 'org.updated', '{}') returning id`, [k.id, write === 'many' ? 7201 : 7202]);
      const id = Number(rows[0]!.id);
      const older = { ok: false, httpStatus: 500, responseBody: 'late', error: null, durationMs: 9_000, attemptedAt: new Date(Date.now() - 60_000) };
      const newer = { ok: true, httpStatus: 200, responseBody: 'ok', error: null, durationMs: 3, attemptedAt: new Date() };
      const put = (outcome: typeof older) => (write === 'many' ? writeBackMany(direct, [{ id, token: randomUUID(), outcome }]) : writeBack(direct, id, randomUUID(), outcome));
      await put(newer);
      await put(older);
      const stored = await t.owner.query('select succeeded, attempts, http_status, response_body, duration_ms, attempted_at from hub.deliveries where id = $1', [id]);
      expect(stored.rows[0]).toEqual({ succeeded: true, attempts: 2, http_status: 200, response_body: 'ok', duration_ms: 3, attempted_at: newer.attemptedAt });
      const log = await t.owner.query('select attempt, http_status from hub.delivery_attempts where delivery_id = $1 order by attempt', [id]);
      expect(log.rows).toEqual([{ attempt: 1, http_status: 200 }, { attempt: 2, http_status: 500 }]);
    }
    await t.owner.query("update hub.deliveries set closed_reason = 'test over' where integration_id = $1", [k.id]);
  });

  it('an attempt\'s error is stored as the endpoint made it but for its credentials: the hub\'s own secret as a wrong guess (no oracle), a Bearer credential masked', async () => {
    const secret = 'hub-own-secret-a1b2c3d4';
    registerSecret(secret);
    const sent: unknown[][] = [];
    const capturing: Tx = {
      tenantId: undefined,
      query: async (_text: string, values?: unknown[]) => {
        sent.push(values ?? []);
        return { rows: [] } as never;
      },
    };
    const error = `TLS: Host: hooks.example is not in the cert's altnames: DNS:hub-own-secret-a1b2c3d5, DNS:${secret} (Authorization: Bearer abcdefgh12345678)`;
    const outcome = { ok: false, httpStatus: null, responseBody: null, error, durationMs: 1, attemptedAt: new Date() };
    await writeBackMany(capturing, [{ id: 1, token: randomUUID(), outcome }]);
    // The sixth parameter: the errors, one array literal.
    expect(String(sent[0]![5])).toContain(`DNS:hub-own-secret-a1b2c3d5, DNS:${secret} (Authorization: Bearer [REDACTED])`);
  });

  it('the journal keeps no foreign key at all: not to the rows every delivery shares, nor to its own rows (an attempt to its delivery, a replay to its original)', async () => {
    const { rows } = await t.owner.query(
      `select c.conrelid::regclass::text as "table", c.conname as name from pg_constraint c
        where c.contype = 'f' and c.conrelid in ('hub.deliveries'::regclass, 'hub.delivery_attempts'::regclass)`,
    );
    expect(rows).toEqual([]);
  });

  it('an outcome written back leaves its delivery on the page it was recorded on (room kept by the journal\'s fillfactor): the update is logged against the old version, not as a whole row elsewhere', async () => {
    const i = await integration(2, 'same-page');
    const { rows: filled } = await t.owner.query<{ id: number }>(
      `insert into events.outbox (tenant_id, type, payload)
       select 2, 'org.updated', jsonb_build_object('orgId', g, 'tenantId', 2) from generate_series(1, 400) g returning id`,
    );
    const batch = await events(filled.map((r) => Number(r.id)));
    await consumer().handleBatch(batch);
    // The rows as a retry finds them: written without an outcome (the update below is a retry's).
    await writeClaims();
    const pages = async () => {
      const { rows } = await t.owner.query<{ id: number; page: string }>(
        `select id, (ctid::text::point)[0]::text as page from hub.deliveries where integration_id = $1 order by id`,
        [i.id],
      );
      return new Map(rows.map((r) => [Number(r.id), r.page]));
    };
    const before = await pages();
    expect(before.size).toBe(400);
    const recorded = await rowsOf(i.id);
    const direct: Tx = { tenantId: undefined, query: (text, values) => t.db.worker.query(text, values as unknown[]) };
    const outcome = { ok: true, httpStatus: 200, responseBody: 'ok', error: null, durationMs: 3, attemptedAt: new Date() };
    const written = await writeBackMany(direct, recorded.map((r) => ({ id: r.id, token: r.lease_token!, outcome })));
    expect(written.size).toBe(400);
    const after = await pages();
    const moved = [...before].filter(([id, page]) => after.get(id) !== page).length;
    // Every page filled at the insert moved nearly all of its rows (the last page, partly filled, kept some).
    expect(moved).toBeLessThanOrEqual(400 / 20);
  });

  it('writing outcomes back finds its rows by key on a journal of a few thousand rows, where a join to the batch alone scanned the table', async () => {
    const i = await integration(2, 'by-key');
    const { rows: made } = await t.owner.query<{ id: number }>(
      `insert into hub.deliveries (tenant_id, integration_id, kind, event_type, body)
       select 2, $1, 'test', 'org.updated', '{}' from generate_series(1, 6000) returning id`,
      [i.id],
    );
    await t.owner.query('analyze hub.deliveries');
    const plans: string[] = [];
    // The statement as writeBackMany sends it, planned (explain does not run it).
    const explaining: Tx = {
      tenantId: undefined,
      query: async (text: string, values?: unknown[]) => {
        const { rows } = await t.owner.query(`explain ${text}`, values);
        plans.push(rows.map((r: Record<string, string>) => r['QUERY PLAN']).join('\n'));
        return { rows: [] } as never;
      },
    };
    const outcome = { ok: true, httpStatus: 200, responseBody: 'ok', error: null, durationMs: 1, attemptedAt: new Date() };
    await writeBackMany(explaining, made.slice(0, 70).map((r) => ({ id: Number(r.id), token: randomUUID(), outcome })));
    expect(plans).toHaveLength(1);
    expect(plans[0]).toMatch(/deliveries_pkey/);
    expect(plans[0]).not.toMatch(/Seq Scan on deliveries/);
  });

  it('matches against the event\'s own tenant only, exact types and prefixes', async () => {
    const mine = await integration(1, 'mine-prefix', { eventTypes: ['org.*'] });
    const theirs = await integration(2, 'theirs', { eventTypes: ['org.*'] });
    const exact = await integration(1, 'exact-created', { eventTypes: ['org.created'] });
    const e = await emit(1, 6);
    await consumer().handleBatch(await events([e]));
    expect((await rowsOf(mine.id)).length).toBe(1);
    expect((await rowsOf(theirs.id)).length).toBe(0);
    expect((await rowsOf(exact.id)).length).toBe(0);
  });

  it('the subscriber check: an active matching integration of the tenant counts', async () => {
    const check = (tenant: number, type: string) => t.db.withTenant(tenant, (tx) => integrationSubscriber(tx, type));
    expect(await check(2, 'data.row.changed')).toBe(false);
    const i = await integration(2, 'rows', { eventTypes: ['data.*'] });
    expect(await check(2, 'data.row.changed')).toBe(true);
    expect(await check(1, 'data.row.changed')).toBe(false);
    await t.db.withTenant(2, (tx) => updateIntegration(tx, i.id, { enabled: false }, rules));
    expect(await check(2, 'data.row.changed')).toBe(false);
  });
});

describe('the retry sweep', () => {
  let i: { id: number };
  let j: { id: number };

  beforeAll(async () => {
    i = await integration(1, 'sweep-i');
    j = await integration(1, 'sweep-j');
    const insert = (integrationId: number, values: string) =>
      t.owner.query(
        `insert into hub.deliveries (tenant_id, integration_id, kind, event_id, event_type, body, attempts, succeeded, lease_until, closed_reason)
         select 1, $1, v.kind, v.event_id, 'org.updated', '{}', v.attempts, v.succeeded, v.lease_until, v.closed_reason
           from (values ${values}) as v (kind, event_id, attempts, succeeded, lease_until, closed_reason)`,
        [integrationId],
      );
    await insert(
      i.id,
      `('event', 1001, 1, false, null::timestamptz, null::text),
       ('event', 1002, 0, false, now() - interval '1 second', null),
       ('event', 1003, 2, false, null, null),
       ('event', 1004, 3, false, null, null),
       ('event', 1005, 1, true, null, null),
       ('event', 1006, 1, false, now() + interval '1 minute', null),
       ('event', 1007, 1, false, null, 'closed'),
       ('test', null, 1, false, null, null)`,
    );
    await insert(j.id, `('event', 2001, 1, false, null::timestamptz, null::text)`);
  });

  it('claims unsuccessful open rows with attempts left whose lease is free or ran out, at most a few per integration, under a lease', async () => {
    const first = await consumer().sweep();
    // i: 1001, 1002 (its lease ran out), 1003 qualify, but at most 2 per integration per sweep; j: 2001.
    expect(first).toBe(3);
    const claimed = (await rowsOf(i.id)).filter((r) => r.lease_token && r.lease_until! > new Date());
    expect(claimed.map((r) => r.event_id)).toEqual([1001, 1002]);
    const second = await consumer().sweep();
    expect(second).toBe(1); // 1003
    expect(await consumer().sweep()).toBe(0);
    expect(new Set(submitted.map((s) => s.deliveryId)).size).toBe(4);
    expect(submitted.every((s) => s.token)).toBe(true);
  });

  it('closes the rows that failed every attempt allowed (their lease free), so claims no longer read past them; a leased one is left to its attempt', async () => {
    const k = await integration(1, 'exhausted');
    await t.owner.query(
      `insert into hub.deliveries (tenant_id, integration_id, kind, event_id, event_type, body, attempts, succeeded, lease_until, lease_token)
       values (1, $1, 'event', 7001, 'org.updated', '{}', 3, false, null, null),
              (1, $1, 'replay', null, 'org.updated', '{}', 4, false, now() - interval '1 second', gen_random_uuid()),
              (1, $1, 'event', 7003, 'org.updated', '{}', 3, false, now() + interval '1 minute', gen_random_uuid()),
              (1, $1, 'event', 7004, 'org.updated', '{}', 2, false, null, null)`,
      [k.id],
    );
    await consumer().sweep();
    const rows = await rowsOf(k.id);
    expect(rows.map((r) => [r.attempts, r.closed_reason])).toEqual([
      [3, RETRIES_EXHAUSTED_REASON],
      [4, RETRIES_EXHAUSTED_REASON],
      [3, null],
      [2, null],
    ]);
    expect(rows.slice(0, 2).every((r) => r.lease_token === null && r.lease_until === null)).toBe(true);
    await t.owner.query("update hub.deliveries set closed_reason = 'test over' where integration_id = $1", [k.id]);
  });

  it('a replay the worker does not queue (its integration\'s queue full, the process stopping) gives its lease back: the next sweep sends it', async () => {
    const k = await integration(1, 'replayed');
    await t.owner.query(`insert into hub.deliveries (tenant_id, integration_id, kind, event_id, event_type, body, attempts, succeeded) values (1, $1, 'event', 7101, 'org.updated', '{}', 1, true)`, [k.id]);
    const original = (await rowsOf(k.id))[0]!;
    const refusing = { submit: () => false } as unknown as DeliveryWorker;
    const service = new IntegrationService({ db: t.db, catalog: loadCatalog(), worker: refusing, rules, leaseMs: 60_000 });
    const replay = await service.replay(1, undefined, String(original.id));
    const row = (await rowsOf(k.id)).find((r) => r.id === Number(replay.id))!;
    expect(row).toMatchObject({ kind: 'replay', attempts: 0, lease_token: null, lease_until: null });
    // The sweep takes it up at once.
    submitted.length = 0;
    await consumer().sweep();
    expect(submitted.map((s) => s.deliveryId)).toContain(Number(replay.id));
    await t.owner.query("update hub.deliveries set closed_reason = 'test over' where integration_id = $1", [k.id]);
  });

  it('a row attempted moments ago waits minGapMs after that attempt ended: a receiver that fails at once is not asked again at once', async () => {
    const k = await integration(1, 'gap');
    const { rows } = await t.owner.query(
      `insert into hub.deliveries (tenant_id, integration_id, kind, event_id, event_type, body, attempts, attempted_at, duration_ms)
       values (1, $1, 'event', 6001, 'org.updated', '{}', 1, now() - interval '1 second', 10),
              (1, $1, 'event', 6002, 'org.updated', '{}', 1, now() - interval '20 seconds', 8000),
              (1, $1, 'event', 6003, 'org.updated', '{}', 1, now() - interval '20 seconds', 10)
       returning id`,
      [k.id],
    );
    const gapped = new WebhookConsumer({ db: t.db, worker: recording, leaseMs: 60_000, maxAttempts: 3, perIntegrationClaim: 10, sweepBatch: 100, minGapMs: 15_000 });
    submitted.length = 0;
    await gapped.sweep();
    // 6001 failed a second ago; 6002's attempt ended 12 s ago (it took 8 s); 6003's 20 s ago.
    expect(submitted.filter((s) => s.integrationId === k.id).map((s) => s.deliveryId)).toEqual([rows[2].id]);
    await t.owner.query(`update hub.deliveries set closed_reason = 'test over' where integration_id = $1`, [k.id]);
  });

  it('two sweepers at once never claim the same row (FOR UPDATE SKIP LOCKED)', async () => {
    const k = await integration(1, 'contended');
    await t.owner.query(
      `insert into hub.deliveries (tenant_id, integration_id, kind, event_id, event_type, body, attempts)
       select 1, $1, 'event', 5000 + g, 'org.updated', '{}', 1 from generate_series(1, 40) g`,
      [k.id],
    );
    const wide = () => new WebhookConsumer({ db: t.db, worker: recording, leaseMs: 60_000, maxAttempts: 3, perIntegrationClaim: 100, sweepBatch: 15 });
    submitted.length = 0;
    const counts = await Promise.all([wide().sweep(), wide().sweep(), wide().sweep(), wide().sweep()]);
    expect(counts.reduce((a, b) => a + b, 0)).toBe(40);
    const ids = submitted.map((s) => s.deliveryId);
    expect(new Set(ids).size).toBe(ids.length);
  });
});

describe('the retry sweep, refilling', () => {
  /** Rows a dispatcher that died had leased for first attempts: attempts 0, their lease run out. */
  async function orphaned(integrationId: number, count: number, firstEvent: number, attempts = 0): Promise<void> {
    await t.owner.query(
      `insert into hub.deliveries (tenant_id, integration_id, kind, event_id, event_type, body, attempts, lease_until, lease_token)
       select 1, $1, 'event', $2 + g, 'org.updated', '{"orgId":1}', $4, now() - interval '1 second', gen_random_uuid() from generate_series(1, $3) g`,
      [integrationId, firstEvent, count, attempts],
    );
  }
  const succeeded = async (integrationId: number) =>
    (await t.owner.query<{ n: number }>('select count(*)::int as n from hub.deliveries where integration_id = $1 and succeeded', [integrationId])).rows[0]!.n;
  /** Its rows under a lease now (claimed, their attempt not over). */
  const leased = async (integrationId: number) =>
    (await t.owner.query<{ n: number }>('select count(*)::int as n from hub.deliveries where integration_id = $1 and lease_until > now()', [integrationId])).rows[0]!.n;
  const refilling = (worker: DeliveryWorker, refillWaitMs = 10_000) =>
    new WebhookConsumer({ db: t.db, worker, leaseMs: 60_000, maxAttempts: 3, perIntegrationClaim: 4, sweepBatch: 100, refillWaitMs });
  const realWorker = (timeoutMs: number, pool = new SlotPool(4, 2, 1_000)) =>
    new DeliveryWorker({ db: t.db, key: KEY, sender: new WebhookSender({ connectTimeoutMs: 1000, timeoutMs, userAgent: 'test' }), pool, leaseMs: 60_000 });

  it('a sweep whose worker is stopping claims once and ends (its refused claims would only lease the rows again, for ever)', async () => {
    const i = await integration(1, 'refill-stopping');
    await orphaned(i.id, 40, 40_000);
    const w = realWorker(5_000);
    await w.stop();
    const ended = await Promise.race([refilling(w).sweep(), new Promise<string>((resolve) => setTimeout(() => resolve('still sweeping after 3 s'), 3_000).unref())]);
    expect(ended).toBe(4); // one claim of perIntegrationClaim rows, refused by the worker; no refill
    const attempted = (await rowsOf(i.id)).filter((r) => r.attempts > 0);
    expect(attempted).toEqual([]);
    // The claim's leases given back at once: the next leader's sweep takes the rows up without waiting for them.
    expect((await rowsOf(i.id)).filter((r) => r.lease_until !== null && r.lease_until > new Date())).toEqual([]);
    await t.owner.query('delete from hub.deliveries where integration_id = $1', [i.id]);
  });

  it('one sweep drains a backlog at the endpoint\'s pace, a claim at a time, each row once', async () => {
    const i = await integration(1, 'refill-backlog');
    await orphaned(i.id, 60, 20_000);
    const w = realWorker(5_000);
    try {
      // Without the refill: one claim of 4.
      expect(await new WebhookConsumer({ db: t.db, worker: w, leaseMs: 60_000, maxAttempts: 3, perIntegrationClaim: 4, sweepBatch: 100 }).sweep()).toBe(4);
      await until('the claim to be delivered', async () => (await succeeded(i.id)) === 4);
      // With it: the rest, in one sweep (other suites' rows in this database are leased meanwhile).
      expect(await refilling(w).sweep()).toBe(56);
      await until('every row to be delivered', async () => (await succeeded(i.id)) === 60);
      const sent = receiver.on('/refill-backlog').map((r) => Number(r.headers['x-svc-event-id']));
      expect(sent.sort((a, b) => a - b)).toEqual(Array.from({ length: 60 }, (_, k) => 20_001 + k));
    } finally {
      await w.stop();
    }
  });

  it('attempts each row at most once per sweep: a failing endpoint\'s rows are not taken back by the refill', async () => {
    const i = await t.db.withTenant(1, (tx) =>
      createIntegration(tx, { name: 'refill-failing', targetUrl: `${receiver.url}/fail`, eventTypes: ['org.updated'], authMode: 'NONE' }, rules),
    );
    await orphaned(i.id, 40, 50_000, 1); // each failed once already; 3 attempts at most
    const w = realWorker(5_000);
    try {
      expect(await refilling(w).sweep()).toBe(40);
      await until('every outcome to be written', async () => {
        const { rows } = await t.owner.query<{ n: number }>('select count(*)::int as n from hub.deliveries where integration_id = $1 and lease_until is null', [i.id]);
        return rows[0]!.n === 40;
      });
      const { rows } = await t.owner.query<{ attempts: number; n: number }>('select attempts, count(*)::int as n from hub.deliveries where integration_id = $1 group by attempts', [i.id]);
      expect(rows).toEqual([{ attempts: 2, n: 40 }]);
    } finally {
      await w.stop();
      // Out of the later sweeps' way.
      await t.owner.query("update hub.deliveries set closed_reason = 'test over' where integration_id = $1", [i.id]);
    }
  });

  it('an integration busy with other attempts (first attempts, say) still gets its retries, all of them', async () => {
    const i = await integration(1, 'refill-busy');
    await orphaned(i.id, 10, 40_000);
    const pool = new SlotPool(4, 2, 1_000);
    let release: () => void = () => undefined;
    pool.offer(i.id, () => new Promise<void>((resolve) => (release = resolve))); // holds one of its two slots
    const w = new DeliveryWorker({ db: t.db, key: KEY, sender: new WebhookSender({ connectTimeoutMs: 1000, timeoutMs: 5_000, userAgent: 'test' }), pool, leaseMs: 60_000 });
    try {
      expect(await refilling(w).sweep()).toBe(10);
      await until('every row to be delivered', async () => (await succeeded(i.id)) === 10);
    } finally {
      release();
      await w.stop();
    }
  });

  it('an integration whose queue is full (a drain\'s first attempts, say): the sweep\'s claim gives its leases back at once, no refill leases its other rows, and the same sweep sends them all once the queue has room', async () => {
    const i = await integration(1, 'refill-queue-full');
    await orphaned(i.id, 40, 60_000);
    // Its two slots taken and its queue of two full, as by a consumer's first attempts.
    const pool = new SlotPool(4, 2, 2);
    const releases: Array<() => void> = [];
    let freed = false;
    const free = () => {
      freed = true;
      for (const release of releases) release();
    };
    for (let k = 0; k < 4; k++) expect(pool.offer(i.id, () => (freed ? Promise.resolve() : new Promise<void>((resolve) => releases.push(resolve))), 1)).toBe(true);
    const w = new DeliveryWorker({ db: t.db, key: KEY, sender: new WebhookSender({ connectTimeoutMs: 1000, timeoutMs: 5_000, userAgent: 'test' }), pool, leaseMs: 60_000 });
    // How often the sweep has looked for room: each look while the queue is full claims nothing.
    let looks = 0;
    const queueFull = w.queueFull.bind(w);
    w.queueFull = (integrationId) => {
      looks++;
      return queueFull(integrationId);
    };
    const rows = () => rowsOf(i.id);
    try {
      const sweeping = refilling(w).sweep();
      // The first claim (4 rows) refused by the full queue: its leases given back at once.
      await until('the refused claim given back', async () => (await rows()).filter((r) => r.lease_token === null).length === 4);
      const looked = looks;
      await until('the sweep to look for room twice more', async () => looks >= looked + 2);
      expect((await rows()).filter((r) => r.lease_until !== null && r.lease_until > new Date())).toEqual([]);
      expect((await rows()).filter((r) => r.attempts > 0)).toEqual([]);
      // The queue frees: the same sweep sends every row, a claim at a time.
      free();
      expect(await sweeping).toBe(44); // the 4 refused, then the 40
      await until('every row to be delivered', async () => (await succeeded(i.id)) === 40);
    } finally {
      free();
      await w.stop();
    }
  });

  it('an endpoint that hangs holds its own claim only: another integration drains meanwhile, and the sweep gives up when told', async () => {
    const hanging = await startReceiver(() => 'hang');
    try {
      const stuck = await t.db.withTenant(1, (tx) =>
        createIntegration(tx, { name: 'refill-stuck', targetUrl: `${hanging.url}/stuck`, eventTypes: ['org.updated'], authMode: 'NONE' }, rules),
      );
      const healthy = await integration(1, 'refill-healthy');
      await orphaned(stuck.id, 20, 30_000);
      await orphaned(healthy.id, 40, 31_000);
      const w = realWorker(60_000);
      let going = true;
      try {
        const sweeping = refilling(w).sweep(() => going);
        await until('the healthy integration to be drained', async () => (await succeeded(healthy.id)) === 40, 20_000);
        // The stuck one got one claim, and no more while its attempts hang.
        expect(hanging.received).toHaveLength(2); // its two slots; the other two claimed rows wait behind them
        expect(await leased(stuck.id)).toBe(4);
        going = false;
        expect(await sweeping).toBe(44);
      } finally {
        await w.stop();
      }
    } finally {
      await hanging.close();
      // Its rows (their receiver gone) out of the later sweeps' way.
      await t.owner.query("update hub.deliveries set closed_reason = 'test over' where integration_id in (select id from hub.integrations where name = 'refill-stuck')");
    }
  });

  it('first attempts left to the sweep while a sweep waits in its refill for something else are claimed by that sweep at once, not after its wait', async () => {
    const hanging = await startReceiver(() => 'hang');
    // Slow while the batch is handed over (its queue stays full: rows left to the sweep), then at once.
    let delayMs = 400;
    const slow = await startReceiver(() => ({ status: 200, body: 'ok', delayMs }));
    // Only this test's integration of tenant 2 matches its events.
    await t.owner.query('update hub.integrations set enabled = false where tenant_id = 2');
    // Two queued per integration at most: the burst's queue fills.
    const w = realWorker(60_000, new SlotPool(8, 2, 2));
    let going = true;
    try {
      const stuck = await t.db.withTenant(1, (tx) =>
        createIntegration(tx, { name: 'refill-deferred-stuck', targetUrl: `${hanging.url}/stuck`, eventTypes: ['org.updated'], authMode: 'NONE' }, rules),
      );
      const burst = await t.db.withTenant(2, (tx) =>
        createIntegration(tx, { name: 'refill-deferred-burst', targetUrl: `${slow.url}/burst`, eventTypes: ['org.updated'], authMode: 'NONE' }, rules),
      );
      await orphaned(stuck.id, 4, 80_000);
      // The sweep's refill waits (up to a minute) for the stuck integration's claim, which hangs.
      const consumer = refilling(w, 60_000);
      const sweeping = consumer.sweep(() => going);
      await until('the stuck claim to hang', async () => hanging.received.length === 2);
      const batch = await emitBatch(12, 900 + drained);
      drained += 12;
      expect(await consumer.handleBatch(batch)).toBe(12);
      expect(await leftToSweep(batch, burst.id)).toBeGreaterThan(0);
      delayMs = 0;
      // The waiting sweep claims them (as their queue frees): every event once, well inside its minute.
      const got = await slow.waitFor(12, '/burst', 20_000);
      expect(got.map((r) => Number(r.headers['x-svc-event-id'])).sort((a, b) => a - b)).toEqual(batch.map((e) => Number(e.id)).sort((a, b) => a - b));
      going = false;
      await sweeping;
    } finally {
      going = false;
      await w.stop();
      await hanging.close();
      await slow.close();
      await t.owner.query("update hub.deliveries set closed_reason = 'test over' where integration_id in (select id from hub.integrations where name like 'refill-deferred-%')");
      await t.owner.query("update hub.integrations set enabled = false where name like 'refill-deferred-%'");
    }
  });

  it('an integration whose claim has one slow attempt: the next claim comes once half of the claim is done, not all of it, so the rest of its backlog drains while the slow one goes on', async () => {
    // Its first request hangs (a slow attempt), every other one is answered at once.
    let held = false;
    const endpoint = await startReceiver((path) => {
      if (held || path !== '/half') return { status: 200, body: 'ok' };
      held = true;
      return 'hang';
    });
    try {
      const i = await t.db.withTenant(1, (tx) =>
        createIntegration(tx, { name: 'refill-half', targetUrl: `${endpoint.url}/half`, eventTypes: ['org.updated'], authMode: 'NONE' }, rules),
      );
      await orphaned(i.id, 20, 70_000);
      const w = realWorker(60_000);
      let going = true;
      try {
        const sweeping = refilling(w, 60_000).sweep(() => going);
        // Every row but the slow one's is sent while it still hangs: claims of up to perIntegrationClaim
        // (4) less the attempts of the sweep still going, the slow one among them.
        await until('the rest of the backlog to be delivered while one attempt hangs', async () => (await succeeded(i.id)) === 19, 20_000);
        expect(await leased(i.id)).toBe(1); // the slow one's row alone
        const sent = endpoint.on('/half').map((r) => Number(r.headers['x-svc-event-id']));
        expect(sent.sort((a, b) => a - b)).toEqual(Array.from({ length: 20 }, (_, k) => 70_001 + k));
        going = false;
        // Its 20 rows, and any other test's rows still open.
        expect(await sweeping).toBeGreaterThanOrEqual(20);
      } finally {
        await w.stop();
      }
    } finally {
      await endpoint.close();
    }
  });
});

describe('the worker', () => {
  const worker = () =>
    new DeliveryWorker({
      db: t.db,
      key: KEY,
      sender: new WebhookSender({ connectTimeoutMs: 1000, timeoutMs: 1000, userAgent: 'test' }),
      pool: new SlotPool(4, 2, 10),
      leaseMs: 5_000,
    });

  async function leased(integrationId: number, token: string, eventId: number): Promise<number> {
    const { rows } = await t.owner.query(
      `insert into hub.deliveries (tenant_id, integration_id, kind, event_id, event_type, body, lease_until, lease_token)
       values (1, $1, 'event', $3, 'org.updated', '{"orgId":1}', now() + interval '1 minute', $2) returning id`,
      [integrationId, token, eventId],
    );
    return rows[0].id;
  }

  it('sends under its lease and writes back; a row whose lease another worker took is left alone', async () => {
    const i = await integration(1, 'worked');
    const token = randomUUID();
    const id = await leased(i.id, token, 9001);
    const w = worker();
    expect(await w.attempt(id, randomUUID())).toEqual({ kind: 'lost' });
    expect(receiver.on('/worked').length).toBe(0);
    const result = await w.attempt(id, token);
    expect(result).toMatchObject({ kind: 'attempted', attempts: 1, outcome: { ok: true, httpStatus: 200 } });
    expect(receiver.on('/worked').length).toBe(1);
    const [row] = await rowsOf(i.id);
    expect(row).toMatchObject({ attempts: 1, lease_token: null, lease_until: null });
    expect(await w.attempt(id, token)).toEqual({ kind: 'lost' }); // done: succeeded
    await w.stop();
  });

  describe('first attempts queued by the consumer (claims)', () => {
    const sender = () => new WebhookSender({ connectTimeoutMs: 1000, timeoutMs: 1000, userAgent: 'test' });
    /** A worker on a one-slot pool held by another job until `release()`. */
    function heldWorker(freshMs?: number) {
      const pool = new SlotPool(1, 1, 10);
      let release: () => void = () => undefined;
      pool.offer('blocker', () => new Promise<void>((resolve) => (release = resolve)));
      const w = new DeliveryWorker({ db: t.db, key: KEY, sender: sender(), pool, leaseMs: 5_000, ...(freshMs === undefined ? {} : { freshMs }) });
      return { w, release: () => release() };
    }
    // Only the integration of each test matches its event.
    beforeEach(async () => {
      await t.owner.query('update hub.integrations set enabled = false where tenant_id = 1');
    });
    const renewals = (statements: string[]) => statements.filter((q) => /^\s*update hub\.deliveries d set lease_until/.test(q)).length;

    it('send on the statement that recorded and leased them, without renewing the lease; the outcome is written', async () => {
      const i = await integration(1, 'claimed');
      const statements: string[] = [];
      const original = t.db.worker.query.bind(t.db.worker);
      const spy = ((text: string, values?: unknown[]) => {
        statements.push(text);
        return original(text, values);
      }) as typeof t.db.worker.query;
      t.db.worker.query = spy;
      const w = new DeliveryWorker({ db: t.db, key: KEY, sender: sender(), pool: new SlotPool(4, 2, 10), leaseMs: 5_000 });
      try {
        const e = await emit(1, 20);
        expect(await consumer(w).handleBatch(await events([e]))).toBe(1);
        await receiver.waitFor(1, '/claimed');
        // The answer arrives after the receiver saw the request; stopping before would abort the attempt.
        await until('the outcome written', async () => (await rowsOf(i.id))[0]?.attempts === 1);
        await w.stop();
      } finally {
        t.db.worker.query = original;
      }
      expect(renewals(statements)).toBe(0);
      expect((await rowsOf(i.id))[0]).toMatchObject({ attempts: 1, lease_token: null });
    });

    it('an integration disabled through this process meanwhile: read again, the row closes, nothing is sent', async () => {
      const i = await integration(1, 'claimed-disabled');
      const { w, release } = heldWorker();
      const e = await emit(1, 21);
      expect(await consumer(w).handleBatch(await events([e]))).toBe(1);
      await t.db.withTenant(1, (tx) => updateIntegration(tx, i.id, { enabled: false }, rules));
      w.integrationChanged(); // what IntegrationService.update does once the change committed
      release();
      await until('the row closed', async () => (await rowsOf(i.id))[0]?.closed_reason, 5_000);
      expect((await rowsOf(i.id))[0]).toMatchObject({ attempts: 0, closed_reason: CLOSED_REASON, lease_token: null });
      expect(receiver.on('/claimed-disabled').length).toBe(0);
      await w.stop();
    });

    it('a backlog of claims older than freshMs: their integration is read again once, the leases are not renewed one by one', async () => {
      const i = await integration(1, 'claimed-backlog');
      const statements: string[] = [];
      const original = t.db.worker.query.bind(t.db.worker);
      t.db.worker.query = ((text: string, values?: unknown[]) => {
        statements.push(text);
        return original(text, values);
      }) as typeof t.db.worker.query;
      const { w, release } = heldWorker(300);
      try {
        const ids: number[] = [];
        for (let n = 0; n < 5; n++) ids.push(await emit(1, 30 + n));
        expect(await consumer(w).handleBatch(await events(ids))).toBe(5);
        // Kept: the claims' read must grow older than freshMs (300, set above); a shorter one could go stale again within the five attempts on a loaded machine.
        await new Promise((r) => setTimeout(r, 400));
        release();
        await receiver.waitFor(5, '/claimed-backlog');
        await until('the outcomes written', async () => (await rowsOf(i.id)).every((r) => r.attempts === 1));
        await w.stop();
      } finally {
        t.db.worker.query = original;
      }
      expect(renewals(statements)).toBe(0);
      expect(statements.filter((q) => q.includes('from hub.integrations i where i.id = $1')).length).toBe(1);
      expect((await rowsOf(i.id)).map((r) => r.attempts)).toEqual([1, 1, 1, 1, 1]);
    });

    it('a claim that waited longer than freshMs: read again (an integration disabled by another process closes the row)', async () => {
      const i = await integration(1, 'claimed-stale');
      const { w, release } = heldWorker(0);
      const e = await emit(1, 22);
      expect(await consumer(w).handleBatch(await events([e]))).toBe(1);
      await t.db.withTenant(1, (tx) => updateIntegration(tx, i.id, { enabled: false }, rules)); // not through this worker
      release();
      await until('the row closed', async () => (await rowsOf(i.id))[0]?.closed_reason, 5_000);
      expect((await rowsOf(i.id))[0]).toMatchObject({ attempts: 0, closed_reason: CLOSED_REASON });
      expect(receiver.on('/claimed-stale').length).toBe(0);
      await w.stop();
    });
  });

  it('a deleted, disabled or no longer matching integration closes the row with the spec\'s reason, sending nothing', async () => {
    const w = worker();
    const cases: Array<[string, IntegrationPatch]> = [
      ['closing-disabled', { enabled: false }],
      ['closing-types', { eventTypes: ['org.created'] }],
    ];
    for (const [name, patch] of cases) {
      const i = await integration(1, name);
      const token = randomUUID();
      const id = await leased(i.id, token, 9100);
      await t.db.withTenant(1, (tx) => updateIntegration(tx, i.id, patch, rules));
      expect(await w.attempt(id, token)).toEqual({ kind: 'closed' });
      expect((await rowsOf(i.id))[0]).toMatchObject({ attempts: 0, closed_reason: CLOSED_REASON, lease_token: null });
      expect(receiver.on(`/${name}`).length).toBe(0);
    }
    await w.stop();
  });

  /** A test delivery as the test operation records it: leased to `token`, not attempted; `leaseMs` from now (negative: run out). */
  async function testRow(integrationId: number, token: string, leaseMs = 60_000): Promise<number> {
    const { rows } = await t.owner.query(
      `insert into hub.deliveries (tenant_id, integration_id, kind, event_id, event_type, body, lease_until, lease_token)
       values (1, $1, 'test', null, 'org.updated', '{"orgId":1}', now() + make_interval(secs => $3::double precision / 1000), $2) returning id`,
      [integrationId, token, leaseMs],
    );
    return rows[0].id;
  }

  it('a test send under way when the worker stops: its attempt is recorded as it ended (tests are never retried), not left open', async () => {
    const hanging = await startReceiver(() => 'hang');
    try {
      const i = await t.db.withTenant(1, (tx) => createIntegration(tx, { name: 'test-stopped', targetUrl: `${hanging.url}/t`, eventTypes: ['org.updated'], authMode: 'NONE' }, rules));
      const token = randomUUID();
      const id = await testRow(i.id, token);
      const w = new DeliveryWorker({ db: t.db, key: KEY, sender: new WebhookSender({ connectTimeoutMs: 1000, timeoutMs: 30_000, userAgent: 'test' }), pool: new SlotPool(4, 2, 10), leaseMs: 60_000 });
      const attempt = w.attempt(id, token);
      await hanging.waitFor(1);
      await w.stop();
      expect(await attempt).toMatchObject({ kind: 'attempted', attempts: 1, outcome: { ok: false, httpStatus: null, error: 'aborted: the process is stopping' } });
      const [row] = await rowsOf(i.id);
      expect(row).toMatchObject({ kind: 'test', attempts: 1, lease_token: null, closed_reason: null });
    } finally {
      await hanging.close();
    }
  });

  it('a test delivery whose process died before recording its outcome: the retry sweep closes it once its lease has run out, sending nothing', async () => {
    const i = await integration(1, 'test-orphaned');
    const orphan = await testRow(i.id, randomUUID(), -1_000);
    const underWay = await testRow(i.id, randomUUID());
    submitted.length = 0;
    await consumer().sweep();
    const rows = await rowsOf(i.id);
    expect(rows.find((r) => r.id === orphan)).toMatchObject({ attempts: 0, closed_reason: TEST_INTERRUPTED_REASON, lease_token: null });
    // A test still within its lease is its process's (which records its outcome).
    expect(rows.find((r) => r.id === underWay)).toMatchObject({ attempts: 0, closed_reason: null });
    expect(submitted.filter((s) => s.integrationId === i.id)).toEqual([]);
    expect(receiver.on('/test-orphaned')).toEqual([]);
    await t.owner.query(`update hub.deliveries set closed_reason = 'test over' where id = $1`, [underWay]);
  });
});

describe('the tenant cap (svc.webhook.concurrency-per-tenant)', () => {
  // A small pool, set through configuration: 6 attempts in the process, 2 per integration, 3 per
  // tenant. Tenant A's four integrations at a receiver that never answers within the test could
  // hold 8 attempts without the tenant cap: the whole pool, and tenant B would wait for their
  // exchange timeout (30 s).
  const CAP = 3;
  const config = () =>
    Config.load({
      env: {},
      overrides: {
        'svc.webhook.concurrency': 6,
        'svc.webhook.concurrency-per-integration': 2,
        'svc.webhook.concurrency-per-tenant': CAP,
        'svc.webhook.timeout': '30s',
        'svc.webhook.connect-timeout': '1s',
        'svc.webhook.lease': '60s',
        'svc.webhook.retry-every': '10s',
        'svc.egress.deny-private': false,
      },
    });
  let hanging: Receiver;
  let healthy: Receiver;
  let tenantA: number;
  let tenantB: number;

  beforeAll(async () => {
    hanging = await startReceiver(() => 'hang');
    healthy = await startReceiver(() => ({ status: 200, body: 'ok' }));
    tenantA = (await t.owner.query(`insert into core.tenants (id, code, name) values (901, 'cap-a', 'Cap A') returning id`)).rows[0].id;
    tenantB = (await t.owner.query(`insert into core.tenants (id, code, name) values (902, 'cap-b', 'Cap B') returning id`)).rows[0].id;
  });

  afterAll(async () => {
    await hanging.close();
    await healthy.close();
  });

  const at = (tenant: number, name: string, url: string) =>
    t.db.withTenant(tenant, (tx) => createIntegration(tx, { name, targetUrl: `${url}/${name}`, eventTypes: ['org.updated'], authMode: 'NONE' }, rules));

  /** Out of the other sweeps' way: every row of the two tenants closed, their integrations disabled. */
  async function closeAll(): Promise<void> {
    await t.owner.query("update hub.deliveries set closed_reason = 'test over', lease_until = null, lease_token = null where tenant_id = any($1::bigint[])", [[tenantA, tenantB]]);
    await t.owner.query('update hub.integrations set enabled = false where tenant_id = any($1::bigint[])', [[tenantA, tenantB]]);
  }

  /**
   * The marker for "no request over the cap arrives": one more request to the hanging receiver, sent
   * now, has arrived. Attempts over the cap would have started when they were offered (before tenant
   * B's, which all went through), so their requests would have come before it. Returns the requests
   * that came before the marker.
   */
  async function beforeMarker(receiver: Receiver): Promise<Received[]> {
    const path = `/marker-${randomUUID()}`;
    const gone = new AbortController();
    const sent = fetch(`${receiver.url}${path}`, { signal: gone.signal }).catch(() => undefined);
    try {
      await receiver.waitFor(1, path);
    } finally {
      gone.abort();
      await sent;
    }
    return receiver.received.slice(0, receiver.received.findIndex((r) => r.path === path));
  }

  const delivered = async (integrationId: number) =>
    (await t.owner.query<{ n: number }>('select count(*)::int as n from hub.deliveries where integration_id = $1 and succeeded', [integrationId])).rows[0]!.n;

  it('first attempts: a tenant whose endpoints hang holds its cap only; another tenant\'s deliveries go through meanwhile', async () => {
    const services = createWebhookServices(config(), { db: t.db, catalog: loadCatalog(), key: KEY, version: 'test' });
    try {
      for (let k = 0; k < 4; k++) await at(tenantA, `cap-hang-${k}`, hanging.url);
      const b = await at(tenantB, 'cap-healthy', healthy.url);
      const fromA: number[] = [];
      for (let k = 0; k < 4; k++) fromA.push(await emit(tenantA, 100 + k));
      expect(await services.consumer.handleBatch(await events(fromA))).toBe(16);
      await hanging.waitFor(CAP);
      const fromB: number[] = [];
      for (let k = 0; k < 10; k++) fromB.push(await emit(tenantB, 200 + k));
      expect(await services.consumer.handleBatch(await events(fromB))).toBe(10);
      // Without the tenant cap they waited for tenant A's attempts to time out (30 s): here they are
      // done while every attempt of tenant A still hangs (none counted, below).
      await until('tenant B\'s deliveries', async () => (await delivered(b.id)) === 10, 10_000);
      // Tenant A never held more than its cap; its other attempts wait queued, none counted.
      expect(await beforeMarker(hanging)).toHaveLength(CAP);
      // Their rows are not written yet (first attempts: written with their outcome); their batch's row stands for them.
      const { rows } = await t.owner.query<{ n: number }>(
        `select (select count(*)::int from hub.deliveries where tenant_id = $1) + (select count(*)::int from hub.delivery_attempts where tenant_id = $1) as n`,
        [tenantA],
      );
      expect(rows).toEqual([{ n: 0 }]);
      const held = await t.owner.query('select 1 from hub.delivery_batches where event_ids @> $1::bigint[]', [fromA]);
      expect(held.rows).toHaveLength(1);
    } finally {
      await services.stop();
      await closeAll();
      hanging.received.length = 0;
    }
  });

  it('the retry sweep: a tenant is claimed twice its cap at most and holds its cap only; another tenant\'s retries drain meanwhile', async () => {
    const services = createWebhookServices(config(), { db: t.db, catalog: loadCatalog(), key: KEY, version: 'test' });
    const insert = (tenant: number, integrationId: number, count: number, firstEvent: number) =>
      t.owner.query(
        `insert into hub.deliveries (tenant_id, integration_id, kind, event_id, event_type, body, attempts, lease_until, lease_token)
         select $1, $2, 'event', $3 + g, 'org.updated', '{"orgId":1}', 1, now() - interval '1 second', gen_random_uuid() from generate_series(1, $4) g`,
        [tenant, integrationId, firstEvent, count],
      );
    let going = true;
    try {
      // The earlier tests' open rows (of tenants 1 and 2, some at receivers closed since) out of this sweep's way.
      await t.owner.query("update hub.deliveries set closed_reason = 'test over' where not succeeded and closed_reason is null and tenant_id <> all($1::bigint[])", [[tenantA, tenantB]]);
      for (let k = 0; k < 4; k++) await insert(tenantA, (await at(tenantA, `cap-sweep-hang-${k}`, hanging.url)).id, 10, 60_000 + 100 * k);
      const b = await at(tenantB, 'cap-sweep-healthy', healthy.url);
      await insert(tenantB, b.id, 30, 61_000);
      const sweeping = services.consumer.sweep(() => going);
      await until('tenant B\'s retries', async () => (await delivered(b.id)) === 30, 15_000);
      await hanging.waitFor(CAP);
      expect(await beforeMarker(hanging)).toHaveLength(CAP);
      // Leased at most twice the tenant's cap (its queue never outgrows what a lease covers).
      const { rows } = await t.owner.query<{ n: number }>('select count(*)::int as n from hub.deliveries where tenant_id = $1 and lease_until > now()', [tenantA]);
      expect(rows[0]!.n).toBe(2 * CAP);
      going = false;
      await sweeping;
    } finally {
      going = false;
      await services.stop();
      await closeAll();
    }
  });
});

/**
 * A deactivated tenant sends nothing more (docs/admin.md): the retry sweep closes its open
 * deliveries instead of claiming them, and an attempt already queued closes when it starts.
 */
describe('a deactivated tenant', () => {
  const GONE = 903;
  let gone: { id: number };
  let live: { id: number };

  beforeAll(async () => {
    await t.owner.query(`insert into core.tenants (id, code, name) values ($1, 'gone', 'Gone')`, [GONE]);
    gone = await integration(GONE, 'gone');
    live = await integration(1, 'live');
    // Earlier suites' open rows are done with: only this suite's rows are claimed here.
    await t.owner.query("update hub.deliveries set closed_reason = 'test over', lease_until = null, lease_token = null where not succeeded and closed_reason is null");
  });

  const insert = (tenantId: number, integrationId: number, values: string) =>
    t.owner.query(
      `insert into hub.deliveries (tenant_id, integration_id, kind, event_id, event_type, body, attempts, succeeded, lease_until, lease_token)
       select $1, $2, v.kind, v.event_id, 'org.updated', '{}', v.attempts, v.succeeded, v.lease_until, v.lease_token
         from (values ${values}) as v (kind, event_id, attempts, succeeded, lease_until, lease_token)`,
      [tenantId, integrationId],
    );

  it('the retry sweep closes its open rows with attempts left (pending, retrying, a lease run out) and claims none; an exhausted row closes as exhausted, succeeded and leased rows stay as they were', async () => {
    await insert(
      GONE,
      gone.id,
      `('event', 9101, 0, false, null::timestamptz, null::uuid),
       ('event', 9102, 1, false, null, null),
       ('replay', null, 2, false, now() - interval '1 second', gen_random_uuid()),
       ('event', 9104, 3, false, null, null),
       ('event', 9105, 1, true, null, null),
       ('event', 9106, 1, false, now() + interval '1 minute', gen_random_uuid())`,
    );
    await insert(1, live.id, `('event', 9201, 1, false, null::timestamptz, null::uuid)`);
    await t.owner.query('update core.tenants set active = false where id = $1', [GONE]);
    submitted.length = 0;
    expect(await consumer().sweep()).toBe(1);
    expect(submitted.map((s) => s.integrationId)).toEqual([live.id]);
    const rows = await rowsOf(gone.id);
    expect(rows.map((r) => [r.kind, r.attempts, r.closed_reason])).toEqual([
      ['event', 0, TENANT_INACTIVE_REASON],
      ['event', 1, TENANT_INACTIVE_REASON],
      ['replay', 2, TENANT_INACTIVE_REASON],
      ['event', 3, RETRIES_EXHAUSTED_REASON],
      ['event', 1, null],
      ['event', 1, null],
    ]);
    expect(rows.slice(0, 3).every((r) => r.lease_token === null && r.lease_until === null)).toBe(true);
    // Listed as failed, with the reason.
    const listed = await t.db.withTenant(GONE, (tx) => listForTenant(tx, { limit: 100 }, { failedOnly: true, caller: undefined }));
    expect((JSON.parse(listed.page.items.text) as Array<{ closedReason: string | null }>).filter((d) => d.closedReason === TENANT_INACTIVE_REASON)).toHaveLength(3);
  });

  it('an attempt queued before the deactivation closes when it starts: nothing is sent', async () => {
    const token = randomUUID();
    await t.owner.query('update core.tenants set active = true where id = $1', [GONE]);
    await insert(GONE, gone.id, `('event', 9301, 1, false, now() + interval '1 minute', '${token}'::uuid)`);
    await t.owner.query('update core.tenants set active = false where id = $1', [GONE]);
    const w = new DeliveryWorker({ db: t.db, key: KEY, sender: new WebhookSender({ connectTimeoutMs: 1000, timeoutMs: 1000, userAgent: 'test' }), pool: new SlotPool(4, 2, 10), leaseMs: 5_000 });
    try {
      const [row] = (await rowsOf(gone.id)).filter((r) => r.event_id === 9301);
      expect(await w.attempt(row!.id, token)).toEqual({ kind: 'closed' });
    } finally {
      await w.stop();
    }
    expect(receiver.on('/gone')).toEqual([]);
    expect((await rowsOf(gone.id)).find((r) => r.event_id === 9301)).toMatchObject({ attempts: 1, closed_reason: TENANT_INACTIVE_REASON, lease_token: null });
  });

  it('a first attempt the consumer queued before the deactivation: its integration read again (freshMs), the row closes, nothing is sent', async () => {
    await t.owner.query('update core.tenants set active = true where id = $1', [GONE]);
    const pool = new SlotPool(1, 1, 10);
    let release: () => void = () => undefined;
    pool.offer('blocker', () => new Promise<void>((resolve) => (release = resolve)));
    const w = new DeliveryWorker({ db: t.db, key: KEY, sender: new WebhookSender({ connectTimeoutMs: 1000, timeoutMs: 1000, userAgent: 'test' }), pool, leaseMs: 5_000, freshMs: 0 });
    try {
      const e = await emit(GONE, 23);
      expect(await consumer(w).handleBatch(await events([e]))).toBe(1);
      await t.owner.query('update core.tenants set active = false where id = $1', [GONE]);
      release();
      const closed = await until('the row closed', async () => (await rowsOf(gone.id)).find((r) => Number(r.event_id) === e && r.closed_reason));
      expect(closed).toMatchObject({ attempts: 0, closed_reason: TENANT_INACTIVE_REASON, lease_token: null });
    } finally {
      await w.stop();
    }
    expect(receiver.on('/gone')).toEqual([]);
  });
});
