import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { type Receiver, startReceiver } from '../../test/harness/receiver.js';
import { until } from '../../test/harness/until.js';
import { SlotPool } from '../concurrency/slot-pool.js';
import type { Database } from '../db/database.js';
import { loadCatalog } from '../events/catalog.js';
import { EventWriter, type OutboxEvent } from '../events/outbox.js';
import { WebhookConsumer } from './consumer.js';
import { type ClaimedRow, writeBackAgain, writeFirstMany } from './journal.js';
import { createIntegration } from './integrations.js';
import { WebhookSender } from './sender.js';
import { DeliveryWorker } from './worker.js';

/**
 * A first attempt's row is written once, after the attempt, whole with its outcome: the consumer
 * writes one batch row for its batch instead of a row per delivery, and the retry sweep writes the
 * rows a batch's process never wrote once the batch's lease runs out. A real database, a real
 * receiver on loopback.
 */

const KEY = Buffer.alloc(32, 9);
const writer = new EventWriter(loadCatalog());
let t: MigratedDatabase;
let receiver: Receiver;

beforeAll(async () => {
  t = await migratedDatabase({ 1: 'acme' });
  // /stuck answers after a minute (cut short by a stop); everything else at once.
  receiver = await startReceiver((path) => (path === '/stuck' ? { status: 200, body: 'late', delayMs: 60_000 } : { status: 200, body: 'ok' }));
  // Every update of a delivery's row counted (the owner's table: nothing of the hub's).
  await t.owner.query(`create table public.delivery_updates (id bigint);
    create function public.count_delivery_update() returns trigger language plpgsql as $$
      begin insert into public.delivery_updates values (new.id); return new; end $$;
    create trigger deliveries_updated after update on hub.deliveries for each row execute function public.count_delivery_update();
    grant insert on public.delivery_updates to svc_worker`);
});

afterAll(async () => {
  await receiver.close();
  await t.close();
});

/** `db` whose worker-role statements (the worker's own: outcomes, batch rows) are noted in `statements`, and hang for ever once `dead()` says so (a process gone). */
function observed(dead: () => boolean = () => false): { db: Database; statements: string[] } {
  const statements: string[] = [];
  const worker = new Proxy(t.db.worker, {
    get(target, prop, receiver) {
      if (prop === 'query') {
        return (text: string, values?: unknown[]) => {
          if (dead()) return new Promise(() => undefined);
          statements.push(text);
          return target.query(text, values);
        };
      }
      const value = Reflect.get(target, prop, receiver);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  const db = new Proxy(t.db, {
    get(target, prop, receiver) {
      if (prop === 'worker') return worker;
      const value = Reflect.get(target, prop, receiver);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  return { db, statements };
}

function workerOn(db: Database, leaseMs: number, perIntegration = 8): DeliveryWorker {
  return new DeliveryWorker({ db, key: KEY, sender: new WebhookSender({ connectTimeoutMs: 1000, timeoutMs: 60_000, userAgent: 'test' }), pool: new SlotPool(16, perIntegration, 100), leaseMs });
}

const consumerOf = (db: Database, worker: DeliveryWorker, leaseMs: number) => new WebhookConsumer({ db, worker, leaseMs, maxAttempts: 3, perIntegrationClaim: 50, sweepBatch: 100 });

/** An integration of tenant 1 sent to `/<name>`, of the events `decision.<name>` only (`eventsFor`). */
async function integration(name: string) {
  return t.db.withTenant(1, (tx) => createIntegration(tx, { name, targetUrl: `${receiver.url}/${name}`, eventTypes: [`decision.${name}`], authMode: 'NONE' }, { key: KEY }));
}

/** `n` events of type `decision.<name>` (only the integration `name` matches them), as the consumer would hand them over. */
async function eventsFor(name: string, n: number): Promise<OutboxEvent[]> {
  const ids: number[] = [];
  for (let k = 0; k < n; k++) ids.push(await t.db.withTenant(1, (tx) => writer.emit(tx, `decision.${name}`, { orgId: k, tenantId: 1 })));
  const { rows } = await t.owner.query('select id, tenant_id, type, payload, created_at, txid::text as txid from events.outbox where id = any($1::bigint[]) order by id', [ids]);
  return rows.map((r) => ({ id: Number(r.id), tenantId: Number(r.tenant_id), type: r.type, payload: r.payload, createdAt: r.created_at, position: { txid: r.txid, id: Number(r.id) } }));
}

async function journalOf(integrationId: number) {
  const { rows } = await t.owner.query<{ event_id: number; attempts: number; succeeded: boolean; lease_token: string | null; logged: number; updates: number }>(
    `select d.event_id::int, d.attempts, d.succeeded, d.lease_token,
            (select count(*)::int from hub.delivery_attempts a where a.delivery_id = d.id) as logged,
            (select count(*)::int from public.delivery_updates u where u.id = d.id) as updates
       from hub.deliveries d where d.integration_id = $1 order by d.event_id`,
    [integrationId],
  );
  return rows;
}

const batchRows = async () => (await t.owner.query<{ n: number }>('select count(*)::int as n from hub.delivery_batches')).rows[0]!.n;

describe('first attempts', () => {
  it('each row is written once, by one statement with its outcome and attempt (no update), and the batch row goes with it', async () => {
    const i = await integration('once');
    const batch = await eventsFor('once', 20);
    const { db, statements } = observed();
    const w = workerOn(db, 60_000);
    try {
      expect(await consumerOf(db, w, 60_000).handleBatch(batch)).toBe(20);
      await until('the outcomes written', async () => (await journalOf(i.id)).length === 20 && (await batchRows()) === 0);
      expect(await journalOf(i.id)).toEqual(batch.map((e) => ({ event_id: e.id, attempts: 1, succeeded: true, lease_token: null, logged: 1, updates: 0 })));
      expect(receiver.on('/once')).toHaveLength(20);
      // The worker's statements: the rows and their attempts written, the batch row deleted, together; nothing else.
      expect(statements.length).toBeGreaterThanOrEqual(1);
      for (const text of statements) {
        expect(text).toMatch(/insert into hub\.deliveries/);
        expect(text).toMatch(/insert into hub\.delivery_attempts/);
      }
      expect(statements.filter((text) => /delete from hub\.delivery_batches/.test(text)).length).toBe(1);
    } finally {
      await w.stop();
    }
  });

  it('a process that dies before writing its outcomes: the sweep writes the rows once the batch lease runs out, every event delivered, none recorded twice', async () => {
    const i = await integration('dies');
    const batch = await eventsFor('dies', 10);
    let dead = false;
    const dying = observed(() => dead);
    const w = workerOn(dying.db, 1_000);
    const survivor = workerOn(t.db, 1_000);
    try {
      // Every attempt goes out; then the process is gone (its outcomes, and its batch's renewal, never reach the database).
      dying.statements.length = 0;
      const sent = consumerOf(dying.db, w, 1_000).handleBatch(batch);
      dead = true;
      expect(await sent).toBe(10);
      await receiver.waitFor(10, '/dies');
      expect(await journalOf(i.id)).toEqual([]);
      expect(await batchRows()).toBe(1);
      // Another process's sweep, once the batch's lease ran out: the rows written, claimed and sent.
      const sweeper = consumerOf(t.db, survivor, 1_000);
      await until('the batch expanded and its deliveries sent again', async () => {
        await sweeper.sweep();
        const journal = await journalOf(i.id);
        return journal.length === 10 && journal.every((row) => row.attempts === 1);
      });
      // Each row once, its one recorded attempt the sweep's (a row the sweep claims is updated as a retry is).
      expect((await journalOf(i.id)).map(({ updates: _, ...row }) => row)).toEqual(batch.map((e) => ({ event_id: e.id, attempts: 1, succeeded: true, lease_token: null, logged: 1 })));
      expect(await batchRows()).toBe(0);
      // At least once: each event reached the endpoint twice (the dead process's attempt was never recorded).
      const perEvent = new Map<string, number>();
      for (const r of receiver.on('/dies')) perEvent.set(String(r.headers['x-svc-event-id']), (perEvent.get(String(r.headers['x-svc-event-id'])) ?? 0) + 1);
      expect([...perEvent.values()]).toEqual(batch.map(() => 2));
      // Read again: nothing new recorded or sent.
      expect(await consumerOf(t.db, survivor, 1_000).handleBatch(batch)).toBe(0);
    } finally {
      await survivor.stop();
    }
  });

  it('a stop: queued first attempts are written for the next sweep at once, the aborted one by the sweep after the batch lease; nothing lost', async () => {
    const i = await integration('stuck');
    const batch = await eventsFor('stuck', 5);
    const w = workerOn(t.db, 1_000, 1);
    const survivor = workerOn(t.db, 1_000);
    try {
      expect(await consumerOf(t.db, w, 1_000).handleBatch(batch)).toBe(5);
      await receiver.waitFor(1, '/stuck');
      await w.stop();
      // The four queued ones: written, no lease, no attempt (the next sweep takes them at once).
      const written = await journalOf(i.id);
      expect(written).toHaveLength(4);
      expect(written.every((row) => row.attempts === 0 && row.lease_token === null && row.logged === 0)).toBe(true);
      expect(await batchRows()).toBe(1);
      // The aborted one's row is written by a sweep once the batch's lease runs out.
      const sweeper = consumerOf(t.db, survivor, 1_000);
      await until('every row written', async () => {
        await sweeper.sweep();
        return (await journalOf(i.id)).length === 5 && (await batchRows()) === 0;
      });
      expect((await journalOf(i.id)).map((row) => row.event_id)).toEqual(batch.map((e) => e.id));
    } finally {
      await survivor.stop();
    }
  });

  it('an outcome whose row the sweep wrote meanwhile (its batch lease ran out) is counted on that row; one written again under its id (writeBackAgain) is not counted twice', async () => {
    const i = await integration('late');
    const direct = { tenantId: undefined, query: (text: string, values?: unknown[]) => t.db.worker.query(text, values) };
    // The row as the sweep's expansion wrote it (its own id) and a retry then recorded: attempt 1, failed, later than the late outcome.
    const { rows } = await t.owner.query<{ id: string }>(
      `insert into hub.deliveries (tenant_id, integration_id, kind, event_id, event_type, body, attempts, http_status, attempted_at)
       values (1, $1, 'event', 9101, 'decision.late', '{}', 1, 500, now()) returning id`,
      [i.id],
    );
    const id = Number(rows[0]!.id);
    await t.owner.query(`insert into hub.delivery_attempts (delivery_id, attempt, tenant_id, http_status, duration_ms, attempted_at) values ($1, 1, 1, 500, 1, now())`, [id]);
    const reserved = Number((await t.owner.query<{ id: string }>(`select nextval(pg_get_serial_sequence('hub.deliveries', 'id')) as id`)).rows[0]!.id);
    const row = { id: reserved, tenant_id: 1, integration_id: i.id, event_id: 9101, event_type: 'decision.late', body: '{}' } as ClaimedRow;
    const outcome = { ok: true, httpStatus: 200, responseBody: 'ok', error: null, durationMs: 2, attemptedAt: new Date(Date.now() - 60_000) };
    await writeFirstMany(direct, [{ row, outcome }], []);
    const stored = await t.owner.query('select id::int, attempts, succeeded, http_status from hub.deliveries where integration_id = $1', [i.id]);
    // One row (the sweep's), the late attempt counted and logged with its own status; the latest attempt's fields kept.
    expect(stored.rows).toEqual([{ id, attempts: 2, succeeded: true, http_status: 500 }]);
    const log = await t.owner.query('select attempt, http_status from hub.delivery_attempts where delivery_id = $1 order by attempt', [id]);
    expect(log.rows).toEqual([{ attempt: 1, http_status: 500 }, { attempt: 2, http_status: 200 }]);
    // A statement whose outcome is written again under its id (its commit's answer lost) skips the row.
    const outcomeId = '00000000-0000-4000-8000-000000000042';
    await writeBackAgain(direct, id, '00000000-0000-4000-8000-000000000000', outcome, outcomeId);
    await writeFirstMany(direct, [{ row, outcome }], [], true, outcomeId);
    expect((await t.owner.query('select attempts from hub.deliveries where id = $1', [id])).rows).toEqual([{ attempts: 3 }]);
  });
});
