import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { ClockRunner } from '../clock/clock.js';
import type { QueryOptions } from '../db/database.js';
import { loadCatalog } from '../events/catalog.js';
import { advanceSql, advanceValues, OutboxConsumer } from '../events/consumer.js';
import { EventWriter } from '../events/outbox.js';
import { NO_ENABLED_RULES } from '../email/rules.js';
import { NO_PROCESSES } from '../processes/store.js';
import { OutboxLoop } from './outbox-loop.js';
import { until } from '../../test/harness/until.js';
import { untilEndedOrWaiting } from '../../test/harness/held-transaction.js';
import { captureLogs } from '../../test/harness/log-capture.js';

let t: MigratedDatabase;
const events = new EventWriter(loadCatalog());
const emit = (orgId: number) => t.db.withTenant(401, (tx) => events.emit(tx, 'org.updated', { orgId, tenantId: 401 }));
/** An event of another active tenant (403). */
const emitOther = (orgId: number) => t.db.withTenant(403, (tx) => events.emit(tx, 'org.updated', { orgId, tenantId: 403 }));
/** What a handler with a bug throws on a strange event, at every try. */
const bug = () => (undefined as unknown as { x: { y: number } }).x.y;
/** The "set aside" lines of a capture. */
const setAsideLines = (logs: ReturnType<typeof captureLogs>) => logs.lines().filter((l) => String(l.msg).includes('set aside'));

beforeAll(async () => {
  // Its own server: a consumer starts at the readable head, which a transaction of another suite
  // open on a shared server holds back, so an event emitted before the start would be handed over.
  t = await migratedDatabase({ 401: 'loop', 402: 'gone', 403: 'other' }, 4, { ownServer: true });
  await t.owner.query('update core.tenants set active = false where id = 402');
});

afterAll(async () => {
  await t.close();
});

/** Drains with pauses until `count` events were handed over; `drains` counts the drains that handed some over. */
async function drainUntil(loop: OutboxLoop, count: number, drains = { n: 0 }): Promise<number> {
  let total = 0;
  await until(
    `${count} events handed over`,
    async () => {
      const handed = await loop.drain();
      if (handed > 0) drains.n++;
      total += handed;
      return total >= count;
    },
    { everyMs: 50, detail: () => `${total} were` },
  );
  return total;
}

/** The last event id of a consumer's cursor. */
const cursorOf = (consumer: string) =>
  t.db.crossTenant('test', async (tx) => (await tx.query<{ last_id: number }>('select last_id from events.consumer_cursors where consumer = $1', [consumer])).rows[0]!.last_id);

/**
 * Drains an idle loop until its cursor is at the newest event (committed events become readable
 * once no older transaction is open), each drain handing nothing over.
 */
async function passesToHead(loop: OutboxLoop, consumer: string): Promise<void> {
  const newest = () => t.db.crossTenant('test', async (tx) => (await tx.query<{ id: number }>('select max(id)::int as id from events.outbox')).rows[0]!.id);
  await until(`${consumer} at the newest event`, async () => {
    if ((await cursorOf(consumer)) === (await newest())) return true;
    expect(await loop.drain()).toBe(0);
    return false;
  });
}

/** The test database, with every single statement of the worker role shown to `seen` first. */
function countingDb(seen: (text: string) => void): typeof t.db {
  return new Proxy(t.db, {
    get(target, prop, receiver) {
      if (prop === 'crossTenantQuery') {
        return (job: string, text: string, values?: unknown[], options?: QueryOptions) => {
          seen(text);
          return target.crossTenantQuery(job, text, values, options);
        };
      }
      const value = Reflect.get(target, prop, receiver);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

describe('outbox loop', () => {
  it('is not retroactive, hands events over in order across batches, and a failure is retried from that event', async () => {
    await emit(0); // before the consumer exists: never handed over
    const seen: number[] = [];
    let failOn: number | undefined = 3;
    const loop = new OutboxLoop(t.db, {
      name: 'loop-test',
      every: 60_000,
      batch: 2,
      handle: async (event) => {
        const orgId = event.payload.orgId as number;
        if (orgId === failOn) {
          failOn = undefined;
          throw new Error('receiver down');
        }
        seen.push(orgId);
      },
    });
    const clock = new ClockRunner();
    await loop.start(clock);
    for (let i = 1; i <= 5; i++) await emit(i);
    expect(await drainUntil(loop, 2)).toBe(2); // 1, 2, then 3 fails and stops the pass
    expect(await drainUntil(loop, 3)).toBe(3);
    expect(seen).toEqual([1, 2, 3, 4, 5]);
    expect(await loop.drain()).toBe(0);
    await clock.stop();
  });

  it('with handle, an event whose handling PostgreSQL refuses as data is set aside; the events after it go on', async () => {
    const logs = captureLogs('info');
    const seen: number[] = [];
    const loop = new OutboxLoop(t.db, {
      name: 'loop-refused',
      every: 60_000,
      batch: 10,
      handle: async (event) => {
        const orgId = event.payload.orgId as number;
        if (orgId === 62) await t.db.crossTenant('test', (tx) => tx.query(`select 'not a number'::integer`));
        seen.push(orgId);
      },
    });
    const clock = new ClockRunner();
    try {
      await loop.start(clock);
      for (const orgId of [61, 62, 63]) await emit(orgId);
      await drainUntil(loop, 3);
      expect(seen).toEqual([61, 63]);
      expect(logs.lines().filter((l) => String(l.msg).includes('set aside'))).toMatchObject([{ level: 'error', consumer: 'loop-refused', sqlstate: '22P02' }]);
      expect(await loop.drain()).toBe(0);
      expect(seen).toEqual([61, 63]);
    } finally {
      logs.restore();
      await clock.stop();
    }
  });

  it('with handle, an event whose handler throws for ever (a bug, not the database away) is set aside after 5 passes in a row; the events after it, of other tenants, go on', async () => {
    // A TypeError on one strange event stopped the consumer for every tenant, retried for ever.
    const logs = captureLogs('info');
    const seen: number[] = [];
    let tries = 0;
    const loop = new OutboxLoop(t.db, {
      name: 'loop-bug',
      setAsideAfter: 5,
      every: 60_000,
      batch: 10,
      handle: async (event) => {
        const orgId = event.payload.orgId as number;
        if (orgId === 101) {
          tries++;
          bug();
        }
        seen.push(orgId);
      },
    });
    const clock = new ClockRunner();
    try {
      await loop.start(clock);
      await emit(100);
      await emit(101);
      for (const orgId of [102, 103]) await emitOther(orgId);
      await drainUntil(loop, 4);
      expect(seen).toEqual([100, 102, 103]);
      expect(tries).toBe(5);
      const setAside = setAsideLines(logs);
      expect(setAside).toMatchObject([{ level: 'error', consumer: 'loop-bug', tenantId: 401, eventType: 'org.updated', passes: 5 }]);
      expect(setAside[0]!.msg).toMatch(/^outbox consumer loop-bug set aside event \d+ \(org\.updated, tenant 401\): its handling failed 5 passes in a row \(Cannot read properties of undefined \(reading 'x'\)\); the events after it go on$/);
      expect(await loop.drain()).toBe(0);
      expect(tries).toBe(5);
    } finally {
      logs.restore();
      await clock.stop();
    }
  });

  it('with handle, an event that fails as the database away or busy is never set aside; nor one whose failure meets the events after it too (the hub at fault, not the event)', async () => {
    const logs = captureLogs('info');
    const seen: number[] = [];
    const away = [
      Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' }),
      new Error('Connection terminated unexpectedly'),
      Object.assign(new Error('terminating connection due to administrator command'), { code: '57P01', severity: 'FATAL' }),
      Object.assign(new Error('could not serialize access'), { code: '40001', severity: 'ERROR' }),
      Object.assign(new Error('canceling statement due to lock timeout'), { code: '55P03', severity: 'ERROR' }),
      Object.assign(new Error('the pool is out of connections'), { cause: Object.assign(new Error('sorry, too many clients already'), { code: '53300' }) }),
      Object.assign(new Error('fetch failed'), { cause: Object.assign(new Error('connect ETIMEDOUT'), { code: 'ETIMEDOUT' }) }),
    ];
    // 111 meets each of those errors twice in turn; then the hub itself fails on every event for 12
    // passes (a grant revoked, say); then all goes well.
    let failures = 0;
    const loop = new OutboxLoop(t.db, {
      name: 'loop-away',
      setAsideAfter: 5,
      every: 60_000,
      batch: 10,
      handle: async (event) => {
        const orgId = event.payload.orgId as number;
        if (orgId === 111 && failures < away.length * 2) throw away[failures++ % away.length]!;
        if (failures < away.length * 2 + 12) {
          failures++;
          bug();
        }
        seen.push(orgId);
      },
    });
    const clock = new ClockRunner();
    try {
      await loop.start(clock);
      await emit(111);
      await emitOther(112);
      await emitOther(113);
      await drainUntil(loop, 3);
      expect(seen).toEqual([111, 112, 113]);
      expect(failures).toBe(away.length * 2 + 12);
      expect(setAsideLines(logs)).toEqual([]);
    } finally {
      logs.restore();
      await clock.stop();
    }
  });

  it('a failing event is tried again with the back-off, not at each wake-up: set aside after 10 + 20 + 40 + 80 ms at least', async () => {
    const logs = captureLogs('info');
    const seen: number[] = [];
    const tries: number[] = [];
    const loop = new OutboxLoop(t.db, {
      name: 'loop-bug-woken',
      setAsideAfter: 5,
      every: 60_000,
      batch: 10,
      handle: async (event) => {
        const orgId = event.payload.orgId as number;
        if (orgId === 121) {
          tries.push(performance.now());
          bug();
        }
        seen.push(orgId);
      },
    });
    const clock = new ClockRunner();
    try {
      await loop.start(clock);
      clock.start();
      await emit(121);
      await emitOther(122);
      // A busy outbox: a NOTIFY (a wake-up) every millisecond or so.
      await until('the event set aside', async () => {
        loop.wake();
        return setAsideLines(logs).length > 0;
      }, { everyMs: 1 });
      expect(seen).toEqual([122]);
      expect(tries).toHaveLength(5);
      const gaps = tries.slice(1).map((at, i) => at - tries[i]!);
      // Each try at least its back-off after the one before (a timer may fire up to 1 ms early by this clock).
      for (const [i, backoff] of [10, 20, 40, 80].entries()) expect(gaps[i]).toBeGreaterThanOrEqual(backoff - 1);
      expect(setAsideLines(logs)).toHaveLength(1);
      expect(tries).toHaveLength(5);
    } finally {
      logs.restore();
      loop.stop();
      await clock.stop();
    }
  });

  it('a stopping clock ends a pass after the batch in hand, not once a backlog is drained; the next start goes on from there', async () => {
    const seen: number[] = [];
    const loop = new OutboxLoop(t.db, {
      name: 'loop-stop',
      every: 60_000,
      batch: 5,
      handleBatch: async (batch) => {
        for (const event of batch) seen.push(event.payload.orgId as number);
        await new Promise((r) => setTimeout(r, 50)); // a batch takes its time (its deliveries)
      },
    });
    const clock = new ClockRunner();
    await loop.start(clock);
    clock.start();
    await t.db.withTenant(401, async (tx) => {
      for (let i = 0; i < 100; i++) await events.emit(tx, 'org.updated', { orgId: 1000 + i, tenantId: 401 });
    });
    const pass = clock.trigger(loop.job);
    await until('the pass to be under way', () => seen.length >= 10);
    await clock.stop();
    await pass;
    const handed = seen.length;
    // Twenty batches of 50 ms: drained to the end, it would have handed all 100 over.
    expect(handed).toBeLessThan(50);
    expect(handed % 5).toBe(0);
    // A new loop of the same consumer (the next leader) goes on after the last batch handed over.
    const next = new OutboxLoop(t.db, { name: 'loop-stop', every: 60_000, batch: 50, handleBatch: async (batch) => void seen.push(...batch.map((e) => e.payload.orgId as number)) });
    const clock2 = new ClockRunner();
    await next.start(clock2);
    expect(await drainUntil(next, 100 - handed)).toBe(100 - handed);
    expect(seen).toEqual(Array.from({ length: 100 }, (_, i) => 1000 + i));
    await clock2.stop();
  });

  it('a stopping clock ends a one-event-at-a-time pass after the event in hand, not at the end of its batch (e-mail: a batch of 100 sends); the next start goes on from the next event', async () => {
    const seen: number[] = [];
    const loop = new OutboxLoop(t.db, {
      name: 'loop-stop-each',
      every: 60_000,
      batch: 100,
      handle: async (event) => {
        seen.push(event.payload.orgId as number);
        await new Promise((r) => setTimeout(r, 20)); // a send takes its time
      },
    });
    const clock = new ClockRunner();
    await loop.start(clock);
    clock.start();
    await t.db.withTenant(401, async (tx) => {
      for (let i = 0; i < 100; i++) await events.emit(tx, 'org.updated', { orgId: 3000 + i, tenantId: 401 });
    });
    const pass = clock.trigger(loop.job);
    await until('the pass to be under way', () => seen.length >= 5);
    await clock.stop();
    await pass;
    const handed = seen.length;
    // One batch of a hundred 20 ms events: to its end, the stop would have waited for all 100.
    expect(handed).toBeLessThan(50);
    expect(await cursorOf('loop-stop-each')).toBe((await t.db.crossTenant('test', async (tx) => (await tx.query<{ id: number }>("select id from events.outbox where payload->>'orgId' = $1", [String(3000 + handed - 1)])).rows[0]!.id)));
    // A new loop of the same consumer (the next leader) goes on after the last event handed over.
    const next = new OutboxLoop(t.db, { name: 'loop-stop-each', every: 60_000, batch: 100, handle: async (event) => void seen.push(event.payload.orgId as number) });
    const clock2 = new ClockRunner();
    await next.start(clock2);
    expect(await drainUntil(next, 100 - handed)).toBe(100 - handed);
    expect(seen).toEqual(Array.from({ length: 100 }, (_, i) => 3000 + i));
    await clock2.stop();
  });

  it('with handle, a loop whose leadership is lost mid-batch hands no further event of the batch over; the next leader goes on from the event after the last one handed over', async () => {
    const seen: number[] = [];
    let leading = true;
    const loop = new OutboxLoop(t.db, {
      name: 'loop-lost',
      every: 60_000,
      batch: 50,
      handle: async (event) => {
        seen.push(event.payload.orgId as number);
        await new Promise((r) => setTimeout(r, 20)); // an event takes its time (an e-mail sent, a hook run)
      },
    });
    const clock = new ClockRunner();
    // The leadership's gate: the clock runs while this process leads (src/dispatch/leader.ts).
    await loop.start({ schedule: (n, c, task) => clock.schedule(n, c, task), trigger: (n) => clock.trigger(n), running: () => clock.running() && leading });
    clock.start();
    await t.db.withTenant(401, async (tx) => {
      for (let i = 0; i < 40; i++) await events.emit(tx, 'org.updated', { orgId: 2000 + i, tenantId: 401 });
    });
    try {
      const pass = clock.trigger(loop.job);
      await until('the pass to be under way', () => seen.length >= 5);
      leading = false;
      await pass;
      const handed = seen.length;
      // One batch of 40 events of 20 ms: handed over to its end, it would have been all 40 (e-mails sent twice, once by each leader).
      expect(handed).toBeLessThan(10);
      const next = new OutboxLoop(t.db, { name: 'loop-lost', every: 60_000, batch: 50, handle: async (event) => void seen.push(event.payload.orgId as number) });
      expect(await drainUntil(next, 40 - handed)).toBe(40 - handed);
      expect(seen).toEqual(Array.from({ length: 40 }, (_, i) => 2000 + i));
    } finally {
      await clock.stop();
    }
  });

  it('moves the cursor past events that needed nothing once per run of them, and never hands them over twice', async () => {
    let cursorWrites = 0;
    const counting = countingDb((text) => {
      if (/update events\.consumer_cursors/.test(text)) cursorWrites++;
    });
    const seen: number[] = [];
    let failOn: number | undefined = 17;
    const loop = new OutboxLoop(counting, {
      name: 'loop-skip-test',
      every: 60_000,
      batch: 100,
      handle: async (event) => {
        const orgId = event.payload.orgId as number;
        if (orgId === failOn) {
          failOn = undefined;
          throw new Error('mail server down');
        }
        seen.push(orgId);
        return orgId % 10 === 0; // only every tenth event needs anything
      },
    });
    const clock = new ClockRunner();
    await loop.start(clock);
    for (let i = 11; i <= 30; i++) await emit(i);
    // 11..16 need nothing, 17 fails: the cursor moves past 16 in one write, 17 comes again.
    expect(await drainUntil(loop, 6)).toBe(6);
    expect(cursorWrites).toBe(1);
    const drains = { n: 0 };
    expect(await drainUntil(loop, 14, drains)).toBe(14);
    expect(seen).toEqual([11, 12, 13, 14, 15, 16, ...Array.from({ length: 14 }, (_, i) => 17 + i)]);
    // 17..19 nothing, 20 acted (one write), 21..29 nothing, 30 acted (one write). When the events
    // became visible to the reader over several drains, a drain that ends on events that needed
    // nothing moves the cursor past them (one write more per such drain, never one per event).
    expect(cursorWrites).toBeGreaterThanOrEqual(3);
    expect(cursorWrites).toBeLessThanOrEqual(3 + drains.n - 1);
    expect(await loop.drain()).toBe(0);
    await clock.stop();
  });

  it('idle: a pass moves the cursor past what is readable without reading or handing it over; a held-back event is not passed', async () => {
    const seen: number[] = [];
    let idle = true;
    let reads = 0;
    const counting = countingDb((text) => {
      if (/from events\.outbox/.test(text) && !/update events\.consumer_cursors/.test(text)) reads++;
    });
    const loop = new OutboxLoop(counting, {
      name: 'loop-idle-test',
      every: 60_000,
      batch: 100,
      handle: async (event) => {
        seen.push(event.payload.orgId as number);
      },
      idle: () => idle,
    });
    const clock = new ClockRunner();
    await loop.start(clock);
    const cursor = () => cursorOf('loop-idle-test');
    for (let i = 51; i <= 55; i++) await emit(i);
    await passesToHead(loop, 'loop-idle-test');
    expect(seen).toEqual([]);
    expect(reads).toBe(0);

    // An event held back by a transaction still open, and one committed after it: neither is
    // readable yet (the outbox is read in commit order), so an idle pass must not move past them.
    const before = await cursor();
    const held = await t.db.app.connect();
    try {
      await held.query('begin');
      await held.query(`select set_config('svc.tenant_id', '401', true)`);
      await events.emit({ tenantId: 401, query: (text: string, values?: unknown[]) => held.query(text, values as unknown[]) } as never, 'org.updated', { orgId: 56, tenantId: 401 });
      await emit(57);
      await loop.drain();
      expect(await cursor()).toBe(before);
      await held.query('commit');
    } finally {
      held.release();
    }
    // Something to do again: the held-back events are handed over, in commit order.
    idle = false;
    expect(await drainUntil(loop, 2)).toBe(2);
    expect(seen).toEqual([56, 57]);
    expect(reads).toBeGreaterThan(0);
    await clock.stop();
  });

  it('idleWhen: events pass unread while the condition holds, in the statement that passes them; read as usual once it does not', async () => {
    const seen: number[] = [];
    // The condition: no cursor row named 'loop-idlewhen-flag' exists (a table the worker role reads).
    const flag = (on: boolean) =>
      t.db.crossTenant('test', (tx) =>
        on
          ? tx.query(`insert into events.consumer_cursors (consumer) values ('loop-idlewhen-flag') on conflict do nothing`)
          : tx.query(`delete from events.consumer_cursors where consumer = 'loop-idlewhen-flag'`),
      );
    const loop = new OutboxLoop(t.db, {
      name: 'loop-idlewhen-test',
      every: 60_000,
      batch: 100,
      handle: async (event) => {
        seen.push(event.payload.orgId as number);
      },
      idleWhen: `not exists (select 1 from events.consumer_cursors where consumer = 'loop-idlewhen-flag')`,
    });
    const clock = new ClockRunner();
    await loop.start(clock);
    for (let i = 61; i <= 63; i++) await emit(i);
    await passesToHead(loop, 'loop-idlewhen-test');
    expect(seen).toEqual([]);
    // The condition no longer holds: what is written now is handed over.
    await flag(true);
    try {
      await emit(64);
      await emit(65);
      expect(await drainUntil(loop, 2)).toBe(2);
      expect(seen).toEqual([64, 65]);
    } finally {
      await flag(false);
    }
    await clock.stop();
  });

  it('handleBatch that moves the cursor itself (returns true): the loop writes no cursor of its own', async () => {
    for (const own of [true, false]) {
      let loopCursorWrites = 0;
      const counting = countingDb((text) => {
        if (/update events\.consumer_cursors/.test(text)) loopCursorWrites++;
      });
      const seen: number[] = [];
      let batches = 0;
      const name = `loop-moves-${own}`;
      const loop = new OutboxLoop(counting, {
        name,
        every: 60_000,
        batch: 100,
        handleBatch: async (batch, cursor) => {
          batches++;
          seen.push(...batch.map((e) => e.payload.orgId as number));
          if (!own) return;
          // Its own statement (not through the loop's database), as the webhook consumer's.
          await t.db.crossTenantQuery('test', advanceSql(1), advanceValues(cursor));
          return true;
        },
      });
      const clock = new ClockRunner();
      await loop.start(clock);
      await emit(own ? 71 : 73);
      await emit(own ? 72 : 74);
      expect(await drainUntil(loop, 2)).toBe(2);
      expect(seen).toEqual(own ? [71, 72] : [73, 74]);
      // One batch or two: the second event may be held back by a transaction that began between the
      // two commits (any database of the cluster; the test suites share one), so it comes alone.
      expect(batches).toBeGreaterThanOrEqual(1);
      expect(loopCursorWrites).toBe(own ? 0 : batches);
      // Either way the cursor is past the batch: nothing is handed over again.
      expect(await loop.drain()).toBe(0);
      await clock.stop();
    }
  });

  it('handleBatchInTx: what the handler writes and the cursor commit together, or neither does', async () => {
    let fail = true;
    const loop = new OutboxLoop(t.db, {
      name: 'loop-tx-test',
      every: 60_000,
      batch: 100,
      handleBatchInTx: async (tx, batch) => {
        for (const event of batch) {
          if (event.type !== 'org.updated') continue;
          await events.emit(tx, 'decision.loop-test', { orgId: event.payload.orgId }, event.tenantId);
        }
        if (fail) {
          fail = false;
          throw new Error('crash after writing');
        }
      },
    });
    const clock = new ClockRunner();
    await loop.start(clock);
    await emit(41);
    await emit(42);
    const decisions = () => t.db.crossTenant('test', async (tx) => (await tx.query<{ n: number }>(`select count(*)::int as n from events.outbox where type = 'decision.loop-test'`)).rows[0]!.n);
    const inbox = () => t.db.crossTenant('test', async (tx) => (await tx.query<{ n: number }>(`select count(*)::int as n from events.inbox where type = 'decision.loop-test'`)).rows[0]!.n);
    // The first pass fails after writing: nothing of it stays, the batch comes again.
    await until('the batch handed over on its second try', async () => (await loop.drain()) > 0);
    expect(await decisions()).toBe(2);
    expect(await inbox()).toBe(2);
    // The decisions themselves pass through once (the handler ignores them); nothing is written twice.
    for (let i = 0; i < 10; i++) await loop.drain();
    expect(await decisions()).toBe(2);
    await clock.stop();
  });

  it('handleBatchInTx: an event whose writes PostgreSQL refuses as data is set aside, alone; the events around it are handled; another failure is retried', async () => {
    // One event's data that the database refuses (a decision's payload it cannot store, say) failed
    // the whole batch at every pass: no later event of any tenant was handled again.
    const logs = captureLogs('info');
    let plainFailures = 1;
    const loop = new OutboxLoop(t.db, {
      name: 'loop-tx-refused',
      every: 60_000,
      batch: 100,
      handleBatchInTx: async (tx, batch) => {
        for (const event of batch) {
          if (event.type !== 'org.updated') continue;
          const orgId = Number(event.payload.orgId);
          if (orgId === 52) await tx.query(`select 'not a number'::integer`);
          if (orgId === 54 && plainFailures-- > 0) throw new Error('the database went away');
          await events.emit(tx, 'decision.loop-refused', { orgId }, event.tenantId);
        }
      },
    });
    const clock = new ClockRunner();
    try {
      await loop.start(clock);
      for (const orgId of [51, 52, 53, 54, 55]) await emit(orgId);
      const decided = () =>
        t.db.crossTenant('test', async (tx) => (await tx.query<{ org: number }>(`select (payload->>'orgId')::int as org from events.outbox where type = 'decision.loop-refused' order by 1`)).rows.map((r) => r.org));
      // 51 and 53 handled, 52 set aside; 54's failure is no refusal of its data: it stays, and is retried.
      const drained = async (check: (orgs: number[]) => boolean) => {
        await loop.drain();
        return check(await decided());
      };
      await until('the events before the plain failure handled', () => drained((orgs) => orgs.includes(53)));
      expect(await decided()).toEqual([51, 53]);
      await until('the rest handled on a later pass', () => drained((orgs) => orgs.length === 4));
      expect(await decided()).toEqual([51, 53, 54, 55]);
      const setAside = logs.lines().filter((l) => String(l.msg).includes('set aside'));
      expect(setAside).toHaveLength(1);
      expect(setAside[0]).toMatchObject({ level: 'error', consumer: 'loop-tx-refused', sqlstate: '22P02' });
      expect(setAside[0]!.msg).toMatch(/^outbox consumer loop-tx-refused set aside event \d+ \(org\.updated, tenant 401\): a value is not valid for its type \(database error 22P02\); the events after it go on$/);
      // Nothing more: the event set aside is never handed over again.
      for (let i = 0; i < 3; i++) await loop.drain();
      expect(await decided()).toEqual([51, 53, 54, 55]);
    } finally {
      logs.restore();
      loop.stop();
      await clock.stop();
    }
  });

  it('handleBatchInTx and handleBatch: an event whose handling throws for ever (a bug) is found alone and set aside after 5 passes in a row; the events around it are handled', async () => {
    for (const form of ['handleBatchInTx', 'handleBatch'] as const) {
      const logs = captureLogs('info');
      const name = `loop-bug-${form}`;
      const seen: number[] = [];
      let tries = 0;
      // Handles a batch: the event 132 (first 142) meets a bug, every time.
      const handle = (batch: Array<{ payload: Record<string, unknown> }>) => {
        const orgs = batch.map((e) => Number(e.payload.orgId));
        if (orgs.some((o) => o % 10 === 2 && o > 130)) {
          tries += orgs.length === 1 ? 1 : 0;
          bug();
        }
        seen.push(...orgs.filter((o) => o > 130));
      };
      const loop = new OutboxLoop(t.db, {
        name,
        setAsideAfter: 5,
        every: 60_000,
        batch: 100,
        ...(form === 'handleBatchInTx' ? { handleBatchInTx: async (_tx, batch) => handle(batch) } : { handleBatch: async (batch) => handle(batch) }),
      });
      const clock = new ClockRunner();
      try {
        await loop.start(clock);
        const base = form === 'handleBatchInTx' ? 130 : 140;
        await emit(base + 1);
        await emit(base + 2);
        await emitOther(base + 3);
        await emitOther(base + 4);
        await until(`${name}: the events after the bug handled`, async () => {
          await loop.drain();
          return seen.includes(base + 4);
        });
        expect(seen).toEqual([base + 1, base + 3, base + 4]);
        expect(tries).toBe(5);
        expect(setAsideLines(logs)).toMatchObject([{ level: 'error', consumer: name, tenantId: 401, passes: 5 }]);
        expect(await loop.drain()).toBe(0);
        expect(tries).toBe(5);
      } finally {
        logs.restore();
        await clock.stop();
      }
    }
  });

  it('handleBatchInTx under two processes that each believe they lead: every event handled once', async () => {
    const consumer = 'loop-tx-overlap';
    const decisions = () =>
      t.db.crossTenant('test', async (tx) => (await tx.query<{ n: number; ids: number }>(`select count(*)::int as n, count(distinct payload->>'orgId')::int as ids from events.outbox where type = 'decision.overlap-test'`)).rows[0]!);
    let releaseFirst: () => void = () => undefined;
    const firstHolds = new Promise<void>((resolve) => {
      releaseFirst = resolve;
    });
    let firstIn: () => void = () => undefined;
    const firstEntered = new Promise<void>((resolve) => {
      firstIn = resolve;
    });
    const loopOf = (hold: boolean) =>
      new OutboxLoop(t.db, {
        name: consumer,
        every: 60_000,
        batch: 100,
        handleBatchInTx: async (tx, batch) => {
          for (const event of batch) {
            if (event.type !== 'org.updated') continue;
            await events.emit(tx, 'decision.overlap-test', { orgId: event.payload.orgId }, event.tenantId);
          }
          if (hold) {
            firstIn();
            await firstHolds; // a stalled database, a paused process: this leader's batch waits
          }
        },
      });
    const first = loopOf(true);
    const second = loopOf(false);
    await new OutboxConsumer(t.db, consumer).startAtHead();
    for (let i = 81; i <= 90; i++) await emit(i);
    const readable = () =>
      t.db.crossTenant('test', async (tx) => {
        const { rows } = await tx.query<{ n: number }>(
          `select count(*)::int as n from events.outbox o, events.consumer_cursors c
            where c.consumer = $1 and (o.txid, o.id) > (c.txid, c.last_id) and o.txid < pg_snapshot_xmin(pg_current_snapshot())`,
          [consumer],
        );
        return rows[0]!.n;
      });
    await until('the ten events readable after the cursor', async () => (await readable()) === 10);
    const firstDrain = first.drain();
    await firstEntered;
    // The second process reads the same batch (the cursor has not moved) while the first still holds it.
    let secondEnded = false;
    const secondDrain = second.drain().finally(() => {
      secondEnded = true;
    });
    // Released once the second has read the batch and met the first's locked cursor (or given up on it).
    await untilEndedOrWaiting(t.owner, () => secondEnded, 'the second drain');
    releaseFirst();
    const [a, b] = await Promise.all([firstDrain, secondDrain]);
    expect(a + b).toBe(10);
    expect(await decisions()).toEqual({ n: 10, ids: 10 });
    // The batch comes to nobody again: the cursor is past it (what follows are the decisions themselves, which the handler passes).
    await second.drain();
    await first.drain();
    expect(await decisions()).toEqual({ n: 10, ids: 10 });
  });

  it('hands no event of a deactivated tenant over, in any of its forms; the cursor moves past them all the same', async () => {
    const emitGone = (orgId: number) => t.db.withTenant(402, (tx) => events.emit(tx, 'org.updated', { orgId, tenantId: 402 }));
    const seen: Record<string, Array<[number, number]>> = { 'loop-gone-one': [], 'loop-gone-batch': [], 'loop-gone-tx': [] };
    const note = (name: string, batch: Array<{ tenantId: number; payload: Record<string, unknown> }>) => {
      for (const event of batch) seen[name]!.push([event.tenantId, event.payload.orgId as number]);
    };
    const loops = [
      new OutboxLoop(t.db, { name: 'loop-gone-one', every: 60_000, batch: 100, handle: async (event) => note('loop-gone-one', [event]) }),
      new OutboxLoop(t.db, { name: 'loop-gone-batch', every: 60_000, batch: 100, handleBatch: async (batch) => note('loop-gone-batch', batch) }),
      new OutboxLoop(t.db, { name: 'loop-gone-tx', every: 60_000, batch: 100, handleBatchInTx: async (_tx, batch) => note('loop-gone-tx', batch) }),
    ];
    const clock = new ClockRunner();
    for (const loop of loops) await loop.start(clock);
    /** Drains every loop until its cursor is at event `id` (readable once no older transaction is open). */
    const drainTo = async (id: number) => {
      for (const loop of loops) {
        const name = loop.job.replace('outbox:', '');
        await until(`${name} past event ${id}`, async () => {
          await loop.drain();
          return (await cursorOf(name)) >= id;
        });
      }
    };
    // A batch of the deactivated tenant's events alone; then its events around an active tenant's.
    await drainTo(await emitGone(1));
    await emitGone(2);
    await emit(3);
    await drainTo(await emitGone(4));
    expect(seen).toEqual({ 'loop-gone-one': [[401, 3]], 'loop-gone-batch': [[401, 3]], 'loop-gone-tx': [[401, 3]] });
    for (const loop of loops) expect(await loop.drain()).toBe(0);
    await clock.stop();
  });

  it('a running loop whose cursor is dropped goes on from the head: the events it had handed over are not handed over again', async () => {
    const seen: number[] = [];
    const loop = new OutboxLoop(t.db, { name: 'loop-dropped', every: 60_000, batch: 100, handle: async (event) => void seen.push(event.payload.orgId as number) });
    const clock = new ClockRunner();
    await loop.start(clock);
    try {
      for (let i = 91; i <= 93; i++) await emit(i);
      expect(await drainUntil(loop, 3)).toBe(3);
      // `svc-hub outbox drop-consumer` under a hub that still runs it.
      await t.owner.query(`delete from events.consumer_cursors where consumer = 'loop-dropped'`);
      await until('the cursor made again at the head', async () => {
        await loop.drain();
        return (await t.owner.query(`select 1 from events.consumer_cursors where consumer = 'loop-dropped'`)).rows.length === 1;
      });
      await emit(94);
      expect(await drainUntil(loop, 1)).toBe(1);
      expect(seen).toEqual([91, 92, 93, 94]);
    } finally {
      await clock.stop();
    }
  });

  it("the e-mail and process consumers' idle conditions count the rules and processes of active tenants only", async () => {
    // As the loop evaluates them: in a statement of the worker role.
    const idle = async () => {
      const { rows } = await t.db.crossTenantQuery<{ rules: boolean; processes: boolean }>('test', `select ${NO_ENABLED_RULES} as rules, ${NO_PROCESSES} as processes`);
      return rows[0];
    };
    const add = (tenant: number) =>
      Promise.all([
        t.owner.query(`insert into email.rules (tenant_id, name, event_types, recipient, subject, body) values ($1, 'r', '{org.updated}', 'a@example.com', 's', 'b')`, [tenant]),
        t.owner.query(`insert into processes.processes (tenant_id, name, event, decision, manifest) values ($1, 'p', 'org.updated', 'decision.x', '{}')`, [tenant]),
      ]);
    try {
      expect(await idle()).toEqual({ rules: true, processes: true });
      // Only the deactivated tenant has a rule and a process: its events are handed to no consumer, so still idle.
      await add(402);
      expect(await idle()).toEqual({ rules: true, processes: true });
      await add(401);
      expect(await idle()).toEqual({ rules: false, processes: false });
    } finally {
      await t.owner.query('delete from email.rules');
      await t.owner.query('delete from processes.processes');
    }
  });
});
