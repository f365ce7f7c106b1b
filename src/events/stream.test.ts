import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { deferred } from '../../test/harness/deferred.js';
import { until } from '../../test/harness/until.js';
import type { Database } from '../db/database.js';
import { loadCatalog } from './catalog.js';
import { EventWriter } from './outbox.js';
import { LiveStream } from './stream.js';

let testDb: MigratedDatabase;
let db: Database;
let stream: LiveStream;
const events = new EventWriter(loadCatalog());

beforeAll(async () => {
  // Its own server: the outbox is read below the oldest transaction open on the whole server, and
  // these tests wait for events to become readable (see migratedDatabase).
  testDb = await migratedDatabase({ 301: 'x', 302: 'y' }, 4, { ownServer: true });
  db = testDb.db;
  stream = new LiveStream(db, { pollEvery: 30, batch: 500 });
  stream.start();
});

afterAll(async () => {
  await stream.stop();
  await testDb.close();
});

const emit = (orgId: number) => db.withTenant(301, (tx) => events.emit(tx, 'org.updated', { orgId, tenantId: 301 }));

/**
 * A subscription of tenant 301 resuming after `afterId` whose consumer is full after each event
 * while `state.full`, and waits for the test to make room (`release`, once `held`).
 */
async function pacedSubscription(own: LiveStream, afterId: number, topics: string[] = []) {
  const delivered: number[] = [];
  const state = { full: true };
  let waiting: (() => void) | undefined;
  const sub = await own.subscribe({
    tenantId: 301,
    topics,
    afterId,
    deliver: (event) => {
      delivered.push(event.id);
      return !state.full;
    },
    room: () => new Promise<void>((resolve) => (waiting = resolve)),
  });
  // Generous: the outbox is read up to the oldest transaction open on the server, and other
  // suites' transactions on the same server hold that back now and then.
  const patience = { timeoutMs: 45_000, detail: () => `delivered ${delivered.join(',')}; queued ${sub.queued}; drops ${sub.drops}` };
  return {
    sub,
    delivered,
    state,
    patience,
    held: () => until('the catch-up to wait for room', () => waiting !== undefined, patience),
    release: () => {
      const go = waiting!;
      waiting = undefined;
      go();
    },
  };
}

describe('live stream bounds', () => {
  it('a subscriber that cannot keep up is ended, not buffered without bound', async () => {
    const delivered: number[] = [];
    let ended = '';
    const sub = await stream.subscribe({
      tenantId: 301,
      topics: [],
      deliver: (event) => {
        delivered.push(event.payload.orgId as number);
        return delivered.length < 3; // the client's buffer is full after the third
      },
      onEnd: (reason) => {
        ended = reason;
      },
    });
    for (let i = 1; i <= 10; i++) await emit(i);
    await until('the subscriber ended', () => ended, 3000);
    expect(ended).toBe('client too slow');
    expect(sub.closed).toBe(true);
    expect(delivered).toEqual([1, 2, 3]);
    expect(stream.count()).toBe(0);
  });

  it('a catch-up paced by its consumer delivers the backlog and the live events meanwhile once each, in order, though more arrive than it may queue', async () => {
    const own = new LiveStream(db, { pollEvery: 20, batch: 7, catchUpQueue: 5 });
    own.start();
    try {
      const backlog: number[] = [];
      for (let i = 1; i <= 40; i++) backlog.push(await emit(5000 + i));
      const delivered: number[] = [];
      let waiting: (() => void) | undefined;
      const sub = await own.subscribe({
        tenantId: 301,
        topics: [],
        afterId: backlog[0]! - 1,
        // Full after every third event, until the test makes room.
        deliver: (event) => {
          delivered.push(event.id);
          return delivered.length % 3 !== 0;
        },
        room: () => new Promise<void>((resolve) => (waiting = resolve)),
      });
      // Live events while the catch-up waits: more than it may queue (5), so some are dropped.
      const live: number[] = [];
      const makeRoom = () =>
        until(
          'the catch-up to go live',
          () => {
            if (waiting) {
              const go = waiting;
              waiting = undefined;
              go();
            }
            return sub.live;
          },
          { everyMs: 5 },
        );
      for (let i = 1; i <= 30; i++) {
        live.push(await emit(6000 + i));
        if (i % 10 === 0) await until('the poller past them', () => own.polledThrough() >= live.at(-1)!, { everyMs: 5 });
      }
      expect(sub.live).toBe(false);
      expect(sub.drops).toBeGreaterThan(0);
      await makeRoom();
      await sub.caughtUp;
      // Live now: delivered directly.
      const after = await emit(7000);
      await until('the live event delivered', () => delivered.includes(after), 3000);
      expect(delivered).toEqual([...backlog, ...live, after]);
    } finally {
      await own.stop();
    }
  });

  it('live events dropped while the queued ones are handed over (too many) are read from the table: none lost, none twice', async () => {
    const own = new LiveStream(db, { pollEvery: 20, batch: 7, catchUpQueue: 5 });
    own.start();
    try {
      const backlog = [await emit(8001), await emit(8002)];
      const { sub, delivered, state, patience, held, release } = await pacedSubscription(own, backlog[0]! - 1);
      await held(); // after the first event of the backlog
      const live = [await emit(8003), await emit(8004), await emit(8005)];
      await until('the live events to be queued', () => sub.queued === 3, patience);
      release();
      await held(); // after the second: the table read is over
      release();
      await held(); // handing over the queued ones: after the first
      expect(delivered).toEqual([...backlog, live[0]]);
      for (let i = 6; i <= 15; i++) live.push(await emit(8000 + i));
      await until('some queued events to be dropped', () => sub.drops === 1 && sub.queued === 4, patience);
      state.full = false;
      release();
      await sub.caughtUp;
      expect(sub.live).toBe(true);
      expect(delivered).toEqual([...backlog, ...live]);
    } finally {
      await own.stop();
    }
  }, 120_000);

  it('a catch-up queues only the live events its topics want, and no more bytes of them than catchUpQueueBytes: beyond, they are read from the table, none lost or twice', async () => {
    const own = new LiveStream(db, { pollEvery: 20, batch: 7, catchUpQueueBytes: 40_000 });
    own.start();
    const archived = (id: number, size: number) => db.withTenant(301, (tx) => events.emit(tx, 'org.archived', { id, code: 'c'.repeat(size) }));
    try {
      const backlog = [await archived(1, 10), await archived(2, 10)];
      const { sub, delivered, state, patience, held, release } = await pacedSubscription(own, backlog[0]! - 1, ['org.archived']);
      await held();
      // Events its topics do not want are not queued for it.
      let unwanted = 0;
      for (let i = 0; i < 5; i++) unwanted = await emit(12_000 + i);
      await until('the poller past them', () => own.polledThrough() >= unwanted, patience);
      expect(sub.queued).toBe(0);
      // Ten of 8,000 bytes: more than 40,000 bytes, though far fewer than 10,000 events.
      const live: number[] = [];
      for (let i = 0; i < 10; i++) live.push(await archived(100 + i, 8_000));
      await until('the poller past them', () => own.polledThrough() >= live.at(-1)!, patience);
      expect(sub.drops).toBeGreaterThan(0);
      expect(sub.queued).toBeLessThan(5);
      state.full = false;
      release();
      await sub.caughtUp;
      expect(sub.live).toBe(true);
      expect(delivered).toEqual([...backlog, ...live]);
    } finally {
      await own.stop();
    }
  }, 120_000);

  it('the first subscriber of a process gets the events written after its read of the head, though the poller\'s own read of the head ended first', async () => {
    // The subscriber's read of the head runs first; its answer is held until the poller (polling
    // meanwhile, its position unset as nobody listened before) has read a later head and taken it.
    let calls = 0;
    const [headRead, answer] = [deferred(), deferred()];
    const held = Object.create(db) as Database;
    held.crossTenant = async (job, fn) => {
      const n = ++calls;
      const result = await db.crossTenant(job, fn);
      if (n === 1) {
        headRead.resolve();
        await answer.promise;
      }
      return result;
    };
    const own = new LiveStream(held, { pollEvery: 20, batch: 100 });
    own.start();
    const delivered: number[] = [];
    try {
      const subscribing = own.subscribe({ tenantId: 301, topics: [], deliver: (event) => delivered.push(event.payload.orgId as number) > 0 });
      await headRead.promise;
      // Written after the subscriber's read of the head.
      const written = await emit(13_001);
      await until('the poller to read a head past the event', () => own.polledThrough() >= written, { timeoutMs: 45_000 });
      answer.resolve();
      await subscribing;
      const marker = await emit(13_002);
      await until('the marker', () => delivered.includes(13_002), { timeoutMs: 45_000, detail: () => delivered.join(',') });
      // Was: [13002] (the subscription started at the poller's head, past the event).
      expect(delivered).toEqual([13_001, 13_002]);
      expect(marker).toBeGreaterThan(written);
    } finally {
      answer.resolve();
      await own.stop();
    }
  }, 120_000);

  it('hostile topics cost the poller no more than a plain one: each event type is matched against them once per subscriber, not at every event', async () => {
    // Not started: the test hands events to the live subscribers as the poller does (offer).
    const own = new LiveStream(db, { pollEvery: 60_000, batch: 500 });
    // The most a caller may send: 50 topics of 200 characters that match no type, each ending in
    // a literal after a run of stars, so every step of the type is tried.
    const hostile = Array.from({ length: 50 }, (_, i) => `${'*'.repeat(197)}${String(i).padStart(2, '0')}z`);
    const types = ['org.updated', 'org.created', 'connector.run.completed', 'data.row.changed'];
    const fanOut = async (topics: string[]) => {
      let delivered = 0;
      const subs = [];
      for (let i = 0; i < 100; i++) subs.push(await own.subscribe({ tenantId: 301, topics, deliver: () => ++delivered > 0 }));
      const started = process.hrtime.bigint();
      for (let i = 1; i <= 500; i++) {
        const event = { id: i, tenantId: 301, type: types[i % types.length]!, payload: {}, createdAt: new Date(), position: { txid: String(2n ** 62n), id: i } };
        for (const sub of subs) sub.offer(event, i);
      }
      const took = Number(process.hrtime.bigint() - started);
      for (const sub of subs) sub.close();
      return { took, delivered };
    };
    const plain = await fanOut(['org.*']);
    const attacked = await fanOut(hostile);
    expect([plain.delivered, attacked.delivered]).toEqual([100 * 250, 0]);
    // Matched at every event, the hostile topics took about 500 times the plain one's time (5 s).
    expect(attacked.took).toBeLessThan(10 * plain.took);
  });

  it('stop ends every subscription with a reason', async () => {
    const own = new LiveStream(db, { pollEvery: 30, batch: 10 });
    own.start();
    const reasons: string[] = [];
    await own.subscribe({ tenantId: 301, topics: [], deliver: () => true, onEnd: (r) => reasons.push(r) });
    await own.subscribe({ tenantId: 301, topics: [], deliver: () => true, onEnd: (r) => reasons.push(r) });
    await own.stop();
    expect(reasons).toEqual(['server stopping', 'server stopping']);
    expect(own.count()).toBe(0);
  });

  it('a subscription begun once the stream has stopped (a request that reached its handler during the stop) ends at once, with the same reason', async () => {
    const own = new LiveStream(db, { pollEvery: 30, batch: 10 });
    own.start();
    await own.stop();
    const reasons: string[] = [];
    const live = await own.subscribe({ tenantId: 301, topics: [], deliver: () => true, onEnd: (r) => reasons.push(r) });
    const resumed = await own.subscribe({ tenantId: 301, topics: [], afterId: 0, deliver: () => true, onEnd: (r) => reasons.push(r) });
    await resumed.caughtUp;
    expect(reasons).toEqual(['server stopping', 'server stopping']);
    expect([live.closed, resumed.closed]).toEqual([true, true]);
    expect(own.count()).toBe(0);
  });
});

describe('resuming after an event id (Last-Event-ID)', () => {
  /** A subscription's deliveries until `last` arrives. */
  async function resumed(afterId: number, last: number, tenantId = 301): Promise<number[]> {
    const seen: number[] = [];
    const sub = await stream.subscribe({ tenantId, topics: [], afterId, deliver: (event) => seen.push(event.payload.orgId as number) > 0 });
    try {
      await until(`event ${last} to arrive`, () => seen.includes(last), { timeoutMs: 20_000, detail: () => seen.join(',') });
      return seen;
    } finally {
      sub.close();
    }
  }

  it('an event whose transaction commits after a later one is not skipped, live or resumed from before it', async () => {
    const before = await emit(9000);
    const live: number[] = [];
    const sub = await stream.subscribe({ tenantId: 301, topics: [], deliver: (event) => live.push(event.payload.orgId as number) > 0 });
    const slow = await db.app.connect();
    try {
      await slow.query('begin');
      await slow.query("select set_config('svc.tenant_id', '301', true)");
      await slow.query(`insert into events.outbox (tenant_id, type, payload) values (301, 'org.updated', '{"orgId": 9001, "tenantId": 301}')`);
      await emit(9002);
      await slow.query('commit');
      await until('both events live', () => live.includes(9002) && live.includes(9001), { timeoutMs: 20_000, detail: () => live.join(',') });
      // In commit order: the late one first (its transaction is the older).
      expect(live.filter((n) => n >= 9000)).toEqual([9001, 9002]);
    } finally {
      slow.release();
      sub.close();
    }
    expect(await resumed(before, 9002)).toEqual([9001, 9002]);
  });

  it('an id of an event not readable yet (an older transaction still open) resumes from the readable head: the older event is not skipped', async () => {
    const slow = await db.app.connect();
    const seen: number[] = [];
    let sub: Awaited<ReturnType<typeof stream.subscribe>> | undefined;
    try {
      await slow.query('begin');
      await slow.query("select set_config('svc.tenant_id', '301', true)");
      await slow.query(`insert into events.outbox (tenant_id, type, payload) values (301, 'org.updated', '{"orgId": 9301, "tenantId": 301}')`);
      // Committed, but not readable while the older transaction is open: its id reached the client
      // some other way (as an inbox entry's eventId does).
      const later = await emit(9302);
      sub = await stream.subscribe({ tenantId: 301, topics: [], afterId: later, deliver: (event) => seen.push(event.payload.orgId as number) > 0 });
      await slow.query('commit');
    } finally {
      slow.release();
    }
    try {
      await emit(9303);
      await until('the marker event', () => seen.includes(9303), { timeoutMs: 20_000, detail: () => seen.join(',') });
      // The older transaction's event arrives; the one named comes again (at least once).
      expect(seen).toEqual([9301, 9302, 9303]);
    } finally {
      sub?.close();
    }
  });

  it("another tenant's event id resumes the caller's own events after it, and none of the other tenant's", async () => {
    const first = await emit(9100);
    const theirs = await db.withTenant(302, (tx) => events.emit(tx, 'org.updated', { orgId: 9101, tenantId: 302 }));
    await emit(9102);
    expect(first).toBeLessThan(theirs);
    expect(await resumed(theirs, 9102)).toEqual([9102]);
  });

  it('an id the outbox no longer holds (purged) resumes from the oldest event kept', async () => {
    const gone = [await emit(9200), await emit(9201)];
    await emit(9202);
    await testDb.owner.query('delete from events.outbox where id = any($1::int[]) or id < $2', [gone, gone[0]]);
    expect(await resumed(gone[1]!, 9202)).toEqual([9202]);
  });
});
