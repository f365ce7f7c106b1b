import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { migratedDatabase, TEST_ROLES } from '../../test/harness/database.js';
import type { Database } from '../db/database.js';
import { until } from '../../test/harness/until.js';
import { roleUrl } from '../db/roles.js';
import { loadCatalog, parseModule } from './catalog.js';
import { captureLogs } from '../../test/harness/log-capture.js';
import { registry } from '../observability/metrics.js';
import { consumerStates, dropConsumer, OutboxConsumer, outboxRetention, purgeOutbox } from './consumer.js';
import { OutboxListener } from './listener.js';
import { EventRejected, EventWriter } from './outbox.js';

let ownerUrl: string;
let db: Database;
let owner: pg.Client;
let close: () => Promise<void>;
const catalog = loadCatalog();
const events = new EventWriter(catalog);

beforeAll(async () => {
  // Its own server: a new consumer starts at the readable head, which a transaction of another suite
  // open on a shared server holds back, so events written before the start would be handed over.
  ({ ownerUrl, db, owner, close } = await migratedDatabase({ 201: 'a', 202: 'b' }, 4, { ownServer: true }));
});

afterAll(async () => {
  // Ends the owner's client and the pools, then stops the suite's own server and removes its directory.
  await close();
});

/**
 * Reads until `count` events are visible. Visibility waits for the oldest transaction running on the
 * whole server (other test files share it), so an event may take a moment to appear.
 */
async function nextUntil(consumer: OutboxConsumer, count: number) {
  let events: Awaited<ReturnType<OutboxConsumer['next']>> = [];
  await until(
    `${count} events`,
    async () => {
      events = await consumer.next(100);
      return events.length >= count;
    },
    { everyMs: 50 },
  ).catch(() => undefined);
  return events;
}

const orgCreated = (orgId: number) => ({ orgId, tenantId: 201, name: `org ${orgId}` });

describe('the catalog', () => {
  it('module core 0.1 declares exactly the spec table, with connector_id on every run event', () => {
    expect(catalog.versions()).toEqual({ core: '0.1' });
    const table = Object.fromEntries(catalog.entries().map((e) => [e.type, e.payload]));
    expect(table).toEqual({
      'org.created': { orgId: 'long', tenantId: 'long', name: 'string' },
      'org.updated': { orgId: 'long', tenantId: 'long' },
      'org.moved': { orgId: 'long', tenantId: 'long', newParentId: 'long' },
      'org.archived': { id: 'long', code: 'string' },
      'connector.run.started': { run_id: 'string', connector_id: 'string', endpoint_id: 'string', sync_mode: 'string', trigger: 'string' },
      'connector.run.completed': { run_id: 'string', connector_id: 'string', endpoint_id: 'string', records_in: 'long', records_out: 'long', duration_ms: 'long', tables: 'map' },
      'connector.run.partial': {
        run_id: 'string', connector_id: 'string', endpoint_id: 'string', records_in: 'long', records_out: 'long', duration_ms: 'long', tables: 'map', error_message: 'string',
      },
      'connector.run.cancelled': { run_id: 'string', connector_id: 'string' },
      'connector.run.failed': { run_id: 'string', connector_id: 'string', error_message: 'string', retryable: 'boolean' },
      'platform.secret.created': { name: 'string', by: 'string', at: 'string' },
      'platform.secret.updated': { name: 'string', by: 'string', at: 'string', previousRotatedAt: 'string' },
      'platform.secret.deleted': { name: 'string', by: 'string', at: 'string' },
      'platform.secret.read': { name: 'string', by: 'string', at: 'string' },
      'data.row.changed': { entity: 'string', entity_key: 'string', op: 'string', run_id: 'string' },
      'annotation.decision.acked': { decision_id: 'long', by: 'string' },
    });
    expect(catalog.entries().every((e) => e.module === 'core' && e.description.length > 0)).toBe(true);
  });

  it('refuses malformed declarations with the file and field', () => {
    expect(() => parseModule('x.yaml', 'module: x\nversion: "1"\nevents:\n  - type: a.b\n    payload: { n: int }\n')).toThrow(/x.yaml: events\[0\].payload.n: int is not one of/);
    expect(() => parseModule('x.yaml', 'version: "1"\nevents: []\n')).toThrow(/module \(a name\) is required/);
    expect(() => parseModule('x.yaml', 'module: x\nversion: "1"\nevents:\n  - type: decision.x\n')).toThrow(/decision/);
  });
});

describe('emitting', () => {
  it('writes the event in the transaction of the change, with its tenant', async () => {
    const id = await db.withTenant(201, (tx) => events.emit(tx, 'org.created', orgCreated(1)));
    const { rows } = await owner.query('select tenant_id, type, payload from events.outbox where id = $1', [id]);
    expect(rows[0]).toEqual({ tenant_id: 201, type: 'org.created', payload: orgCreated(1) });
  });

  it('a rolled-back change leaves no event', async () => {
    const before = (await owner.query('select count(*)::int as n from events.outbox')).rows[0].n;
    await expect(
      db.withTenant(201, async (tx) => {
        await events.emit(tx, 'org.created', orgCreated(2));
        throw new Error('the change failed');
      }),
    ).rejects.toThrow('the change failed');
    expect((await owner.query('select count(*)::int as n from events.outbox')).rows[0].n).toBe(before);
  });

  it('a payload that does not match its declaration fails loudly', async () => {
    await expect(db.withTenant(201, (tx) => events.emit(tx, 'org.created', { orgId: 1, tenantId: 201 }))).rejects.toThrow(
      new EventRejected('event org.created does not match its declaration: missing field name (string)'),
    );
    await expect(db.withTenant(201, (tx) => events.emit(tx, 'org.created', { orgId: '1', tenantId: 201, name: 'x' }))).rejects.toThrow(/orgId must be long/);
    await expect(db.withTenant(201, (tx) => events.emit(tx, 'org.updated', { orgId: 1, tenantId: 201, extra: true }))).rejects.toThrow(/undeclared field/);
    await expect(db.withTenant(201, (tx) => events.emit(tx, 'org.exploded', {}))).rejects.toThrow(/not in the catalog/);
  });

  it('decision.* types pass without being catalogued', async () => {
    const id = await db.withTenant(201, (tx) => events.emit(tx, 'decision.dormant.onboarding', { anything: ['goes'] }));
    expect(id).toBeGreaterThan(0);
  });

  it('emitAll writes several events of one type in order, in one statement, checked like emit', async () => {
    const ids = await db.withTenant(201, (tx) => events.emitAll(tx, 'decision.dormant.batch', [{ key: 'a' }, { key: 'b' }, { key: 'c' }]));
    expect(ids).toHaveLength(3);
    expect([...ids].sort((x, y) => x - y)).toEqual(ids);
    const { rows } = await db.crossTenantQuery<{ payload: { key: string } }>('test', 'select payload from events.outbox where id = any($1) order by id', [ids]);
    expect(rows.map((r) => r.payload.key)).toEqual(['a', 'b', 'c']);
    expect(await db.withTenant(201, (tx) => events.emitAll(tx, 'decision.dormant.batch', []))).toEqual([]);
    await expect(db.withTenant(201, (tx) => events.emitAll(tx, 'org.created', [orgCreated(4), { orgId: 1, tenantId: 201 }]))).rejects.toThrow(/does not match its declaration/);
  });

  it('puts every decision in its tenant\'s inbox, whether written one at a time or in a batch', async () => {
    const one = await db.withTenant(202, (tx) => events.emit(tx, 'decision.inbox.one', { message: 'one' }));
    const many = await db.withTenant(202, (tx) => events.emitAll(tx, 'decision.inbox.many', [{ key: 'x' }, { key: 'y' }]));
    const { rows } = await owner.query('select tenant_id, event_id, type, payload from events.inbox where event_id = any($1) order by event_id', [[one, ...many]]);
    expect(rows).toEqual([
      { tenant_id: 202, event_id: one, type: 'decision.inbox.one', payload: { message: 'one' } },
      { tenant_id: 202, event_id: many[0], type: 'decision.inbox.many', payload: { key: 'x' } },
      { tenant_id: 202, event_id: many[1], type: 'decision.inbox.many', payload: { key: 'y' } },
    ]);
    const org = await db.withTenant(202, (tx) => events.emit(tx, 'org.created', orgCreated(202)));
    expect((await owner.query('select 1 from events.inbox where event_id = $1', [org])).rows).toEqual([]);
  });

  it('a tenant cannot write an event for another tenant', async () => {
    await expect(db.withTenant(201, (tx) => events.emit(tx, 'org.created', orgCreated(3), 202))).rejects.toThrow(/row-level security/);
  });
});

describe('consumers', () => {
  it('keep independent cursors and see every event once, in commit order, across tenants', async () => {
    const a = new OutboxConsumer(db, 'test-a');
    const b = new OutboxConsumer(db, 'test-b');
    await a.startAtHead();
    await b.startAtHead();
    await db.withTenant(201, (tx) => events.emit(tx, 'org.updated', { orgId: 10, tenantId: 201 }));
    await db.withTenant(202, (tx) => events.emit(tx, 'org.updated', { orgId: 11, tenantId: 202 }));
    const seenA = await nextUntil(a, 2);
    expect(seenA.map((e) => [e.tenantId, e.payload.orgId])).toEqual([
      [201, 10],
      [202, 11],
    ]);
    await a.advance(seenA.at(-1)!.position);
    expect(await a.next(100)).toEqual([]);
    expect((await nextUntil(b, 2)).length).toBe(2);
  });

  it('never skip an event whose transaction commits after a later one (smaller id, later commit)', async () => {
    const consumer = new OutboxConsumer(db, 'test-order');
    await consumer.startAtHead();
    // Transaction 1 takes an id first but commits last.
    const slow = await db.app.connect();
    await slow.query('begin');
    await slow.query("select set_config('svc.tenant_id', '201', true)");
    await slow.query(`insert into events.outbox (tenant_id, type, payload) values (201, 'org.updated', '{"orgId": 20, "tenantId": 201}')`);
    await db.withTenant(201, (tx) => events.emit(tx, 'org.updated', { orgId: 21, tenantId: 201 }));
    // While the first is open, nothing after it may be handed out (it could still appear before).
    const early = await consumer.next(100);
    expect(early).toEqual([]);
    await slow.query('commit');
    slow.release();
    const later = await nextUntil(consumer, 2);
    expect(later.map((e) => e.payload.orgId)).toEqual([20, 21]);
  });

  it('a consumer started while a transaction holds an uncommitted event gets that event once it commits', async () => {
    // The older transaction takes its transaction id and event first, a later one commits past it,
    // and only then does the consumer start: the newest committed event is not its start, or the
    // older event, committed after the start but before it in the outbox's order, is skipped for ever.
    const slow = await db.app.connect();
    try {
      await slow.query('begin');
      await slow.query("select set_config('svc.tenant_id', '201', true)");
      await slow.query(`insert into events.outbox (tenant_id, type, payload) values (201, 'org.updated', '{"orgId": 50, "tenantId": 201}')`);
      await db.withTenant(201, (tx) => events.emit(tx, 'org.updated', { orgId: 51, tenantId: 201 }));
      const consumer = new OutboxConsumer(db, 'test-start-in-flight');
      await consumer.startAtHead();
      await slow.query('commit');
      const seen = await nextUntil(consumer, 2);
      expect(seen.map((e) => e.payload.orgId)).toEqual([50, 51]);
    } finally {
      slow.release();
    }
  });

  it('an insert wakes a listener at commit', async () => {
    const listener = new OutboxListener(roleUrl(ownerUrl, TEST_ROLES.worker));
    await listener.start();
    try {
      const woken = new Promise<string>((resolve) => {
        listener.onEvent(() => resolve('woken'));
      });
      await db.withTenant(201, (tx) => events.emit(tx, 'org.updated', { orgId: 30, tenantId: 201 }));
      // No time bound: the listener has no poll of its own, so being woken at all is the NOTIFY of
      // the commit (a missing one times the test out).
      expect(await woken).toBe('woken');
    } finally {
      await listener.stop();
    }
  });

  it('the retention purge never deletes past what the slowest consumer has seen', async () => {
    const slowest = new OutboxConsumer(db, 'test-slowest');
    await owner.query('delete from events.consumer_cursors');
    await owner.query('delete from events.outbox');
    await slowest.startAtHead();
    const ids: number[] = [];
    for (let i = 0; i < 4; i++) ids.push(await db.withTenant(201, (tx) => events.emit(tx, 'org.updated', { orgId: 40 + i, tenantId: 201 })));
    await owner.query(`update events.outbox set created_at = now() - interval '40 days'`);
    await nextUntil(slowest, 4);
    const seen = await slowest.next(2);
    await slowest.advance(seen.at(-1)!.position);
    expect(await purgeOutbox(db, 30)).toBe(2);
    const left = await owner.query('select id from events.outbox order by id');
    expect(left.rows.map((r) => r.id)).toEqual(ids.slice(2));
    await owner.query(`update events.outbox set created_at = now() - interval '10 days'`);
    await slowest.advance((await nextUntil(slowest, 2)).at(-1)!.position);
    expect(await purgeOutbox(db, 30)).toBe(0);
  });
  it('the retention purge deletes in short transactions: the batches before a row it waits on are committed already', async () => {
    await owner.query('delete from events.consumer_cursors');
    await owner.query('delete from events.outbox');
    const ids: number[] = [];
    for (let i = 0; i < 5; i++) ids.push(await db.withTenant(201, (tx) => events.emit(tx, 'org.updated', { orgId: 60 + i, tenantId: 201 })));
    await owner.query(`update events.outbox set created_at = now() - interval '40 days'`);
    // Another transaction holds the newest of them: the purge, two rows a transaction, waits on it in its third.
    const holder = new pg.Client({ connectionString: ownerUrl });
    await holder.connect();
    let purge: Promise<number> | undefined;
    try {
      await holder.query('begin');
      await holder.query('select id from events.outbox where id = $1 for update', [ids[4]]);
      purge = purgeOutbox(db, 30, 2);
      await until('the purge to wait on the held row', async () => {
        const { rows } = await owner.query("select 1 from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query ilike '%delete from events.outbox%'");
        return rows.length > 0;
      });
      // What it deleted before is gone for every reader: no transaction of the purge is held open over it.
      expect((await owner.query('select id from events.outbox order by id')).rows.map((r) => r.id)).toEqual([ids[4]]);
    } finally {
      await holder.query('commit');
      await holder.end();
    }
    expect(await purge).toBe(5);
    expect((await owner.query('select count(*)::int as n from events.outbox')).rows[0].n).toBe(0);
  });

  it('the retention names once each consumer holding the purge back by more than the threshold, sets the lag gauge, and a dropped cursor no longer holds it', async () => {
    await owner.query('delete from events.consumer_cursors');
    await owner.query('delete from events.outbox');
    await new OutboxConsumer(db, 'test-stale').startAtHead();
    await new OutboxConsumer(db, 'test-stale-too').startAtHead();
    const ids: number[] = [];
    for (let i = 0; i < 3; i++) ids.push(await db.withTenant(201, (tx) => events.emit(tx, 'org.updated', { orgId: 70 + i, tenantId: 201 })));
    await owner.query(`update events.outbox set created_at = now() - interval '2 days'`);
    const live = new OutboxConsumer(db, 'test-live');
    await live.startAtHead();
    await until('the live consumer at the newest event', async () => {
      await live.skipVisible();
      return (await owner.query(`select last_id::int as id from events.consumer_cursors where consumer = 'test-live'`)).rows[0].id === ids[2];
    });
    const states = await consumerStates(db, { countEvents: true });
    expect(states.map((s) => [s.consumer, s.lagEvents, s.lagSeconds > 47 * 3600 && s.lagSeconds < 49 * 3600])).toEqual([
      ['test-stale', 3, true],
      ['test-stale-too', 3, true],
      ['test-live', 0, false],
    ]);
    expect(states[2]!.lagSeconds).toBe(0);
    const gauge = async () =>
      Object.fromEntries(((await registry.getSingleMetric('svc_outbox_consumer_lag_seconds')?.get())?.values ?? []).map((v) => [v.labels.consumer, v.value > 0]));
    const logs = captureLogs('info');
    try {
      // Retention 1 day: the events are 2 days old, but the stale cursors keep them all.
      expect(await outboxRetention(db, 1, ['test-live', 'test-stale-too'])).toMatchObject({ purged: 0 });
      const warnings = logs.lines().filter((l) => l.level === 'warn');
      expect(warnings).toHaveLength(1);
      expect(warnings[0]!.msg).toMatch(/test-stale \(2 d behind, not run by this version of the hub\), test-stale-too \(2 d behind\)/);
      expect(warnings[0]!.msg).not.toMatch(/test-live/);
      expect(await gauge()).toEqual({ 'test-stale': true, 'test-stale-too': true, 'test-live': false });
      // A threshold above their lag: no warning.
      expect(await outboxRetention(db, 1, [], { laggingAfter: 3 * 86_400 })).toEqual({ purged: 0, lagging: [] });
      expect(logs.lines().filter((l) => l.level === 'warn')).toHaveLength(1);
      // Both dropped: the purge deletes the three, nothing is named, and the gauge forgets them.
      expect(await dropConsumer(db, 'test-stale')).toEqual({ position: { txid: expect.any(String), id: expect.any(Number) } });
      expect(await dropConsumer(db, 'test-stale-too')).toBeDefined();
      expect(await dropConsumer(db, 'test-stale')).toBeUndefined();
      expect(await outboxRetention(db, 1, ['test-live'])).toEqual({ purged: 3, lagging: [] });
      expect(logs.lines().filter((l) => l.level === 'warn')).toHaveLength(1);
      expect(await gauge()).toEqual({ 'test-live': false });
    } finally {
      logs.restore();
    }
  });
});
