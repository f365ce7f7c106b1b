import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { ClockRunner } from '../clock/clock.js';
import { roleUrl } from '../db/roles.js';
import { loadCatalog } from '../events/catalog.js';
import { OutboxListener } from '../events/listener.js';
import type { OutboxConsumer } from '../events/consumer.js';
import { EventWriter, type OutboxEvent } from '../events/outbox.js';
import { OutboxLoop, Postpone } from './outbox-loop.js';
import { captureLogs } from '../../test/harness/log-capture.js';
import { until } from '../../test/harness/until.js';
import { deferred } from '../../test/harness/deferred.js';

/**
 * The loop's wake-ups with a sweep far away (60 s): NOTIFY during a pass makes the pass go round
 * again, and an event held back by an older transaction is picked up soon after that transaction
 * ends, with no NOTIFY and no sweep. Also the batch handler.
 */

let t: MigratedDatabase;
let listener: OutboxListener;
const writer = new EventWriter(loadCatalog());
const emit = (orgId: number) => t.db.withTenant(501, (tx) => writer.emit(tx, 'org.updated', { orgId, tenantId: 501 }));

/** Counts the calls of one statement of a loop's consumer once answered (a marker that a pass has read or skipped; the consumer is private to the loop). */
function countCalls(loop: OutboxLoop, method: 'read' | 'skipVisible'): { count: number } {
  const counter = { count: 0 };
  const consumer = (loop as unknown as { consumer: OutboxConsumer }).consumer;
  const original = consumer[method].bind(consumer) as (arg?: never) => Promise<unknown>;
  (consumer as unknown as Record<string, (arg?: never) => Promise<unknown>>)[method] = async (arg) => {
    const result = await original(arg);
    counter.count++;
    return result;
  };
  return counter;
}

/** A batch handler that fails its first call and records the events of the later ones. */
function failingOnce(): { failures: number; seen: number[]; handleBatch: (events: OutboxEvent[]) => Promise<void> } {
  const state = {
    failures: 0,
    seen: [] as number[],
    handleBatch: async (events: OutboxEvent[]) => {
      if (state.failures === 0) {
        state.failures++;
        throw new Error('down');
      }
      state.seen.push(...events.map((e) => e.payload.orgId as number));
    },
  };
  return state;
}

beforeAll(async () => {
  t = await migratedDatabase({ 501: 'wake' });
  listener = new OutboxListener(roleUrl(t.ownerUrl, 'svc_worker'));
  await listener.start();
});

afterAll(async () => {
  await listener.stop();
  await t.close();
});

describe('outbox loop wake-ups', () => {
  it('an event written during a pass is handled right after it, not at the next sweep', async () => {
    const seen: number[] = [];
    // The first event is handled until the second's NOTIFY has reached the listener: it comes during the pass.
    const notified = deferred();
    const clock = new ClockRunner();
    const loop = new OutboxLoop(t.db, {
      name: 'wake-during-pass',
      every: 60_000,
      batch: 10,
      handle: async (event) => {
        seen.push(event.payload.orgId as number);
        if (event.payload.orgId === 1) await notified.promise;
      },
    });
    await loop.start(clock, listener);
    clock.start();
    await emit(1);
    await until('the first event', () => seen.length === 1);
    const off = listener.onEvent(() => notified.resolve());
    try {
      await emit(2); // NOTIFY arrives while the first is still being handled
      await until('the second event', () => seen.length === 2, 2_000);
    } finally {
      off();
    }
    expect(seen).toEqual([1, 2]);
    loop.stop();
    await clock.stop();
  });

  it('a Postpone thrown for an event: no pass until its time (NOTIFYs and triggers meanwhile read nothing), then that event and the later ones, in order, with no sweep', async () => {
    const seen: number[] = [];
    let postponeUntil = 0;
    const clock = new ClockRunner();
    const loop = new OutboxLoop(t.db, {
      name: 'postponed',
      every: 60_000,
      batch: 10,
      handle: async (event) => {
        const orgId = event.payload.orgId as number;
        if (orgId === 21 && postponeUntil === 0) {
          postponeUntil = performance.now() + 1_500;
          throw new Postpone(postponeUntil, 'server away');
        }
        seen.push(orgId);
      },
    });
    await loop.start(clock, listener);
    clock.start();
    const reads = countCalls(loop, 'read');
    const logs = captureLogs('info');
    try {
      await emit(20);
      await emit(21);
      await until('the postponed event', () => postponeUntil > 0);
      const readsWhenPostponed = reads.count;
      // NOTIFYs and a trigger during the pause: no pass reads the outbox.
      await emit(22);
      await emit(23);
      await clock.trigger(loop.job);
      expect(performance.now()).toBeLessThan(postponeUntil);
      expect(reads.count).toBe(readsWhenPostponed);
      await until('the events after the pause', () => seen.length === 4, 10_000);
      expect(performance.now()).toBeGreaterThanOrEqual(postponeUntil);
      expect(seen).toEqual([20, 21, 22, 23]);
      expect(logs.lines().filter((l) => l.level === 'error')).toEqual([]);
    } finally {
      logs.restore();
    }
    loop.stop();
    await clock.stop();
  });

  it('an event held back by an older open transaction is handled soon after it ends', async () => {
    const seen: OutboxEvent[][] = [];
    const clock = new ClockRunner();
    const loop = new OutboxLoop(t.db, {
      name: 'held-back',
      every: 60_000,
      batch: 10,
      handleBatch: async (events) => {
        seen.push(events);
      },
    });
    // No listener: after the wake-up below, only the loop's own look-again can bring the events
    // before the sweep (60 s).
    await loop.start(clock);
    clock.start();
    const reads = countCalls(loop, 'read');
    // An older transaction with an id, still open: later commits are not readable in order yet.
    await t.owner.query('begin');
    await t.owner.query('select pg_current_xact_id()');
    await emit(10);
    await emit(11);
    // Marker: a pass that read after both were written (a NOTIFY would wake the loop so).
    const before = reads.count;
    loop.wake();
    await until('a pass read while the events were held back', () => reads.count > before);
    expect(seen).toEqual([]);
    await t.owner.query('commit'); // no NOTIFY: nothing was written
    const ended = Date.now();
    await until('the held-back events', () => seen.flat().length === 2, 4_000);
    expect(Date.now() - ended).toBeLessThan(60_000 / 20); // the back-off (at most 1 s), far below the loop's sweep (\`every\`)
    expect(seen.flat().map((e) => e.payload.orgId)).toEqual([10, 11]);
    loop.stop();
    await clock.stop();
  });

  it('a loop that can act on nothing passes the outbox at most once a second for NOTIFYs, and hands over again once it can act', async () => {
    let idle = true;
    const seen: number[] = [];
    const clock = new ClockRunner();
    const loop = new OutboxLoop(t.db, {
      name: 'idle-wake',
      every: 60_000,
      batch: 10,
      handle: async (event) => {
        seen.push(event.payload.orgId as number);
      },
      idle: () => idle,
    });
    const skips = countCalls(loop, 'skipVisible');
    await loop.start(clock, listener);
    clock.start();
    const started = Date.now();
    // Twenty commits, twenty NOTIFYs, within far less than a second on any machine we run on.
    for (let i = 0; i < 20; i++) await emit(40 + i);
    const written = Date.now() - started;
    const cursorAt = async () => (await t.owner.query(`select last_id::int as id from events.consumer_cursors where consumer = 'idle-wake'`)).rows[0]!.id as number;
    const { rows } = await t.owner.query(`select max(id)::int as id from events.outbox`);
    await until('the cursor past the twentieth event', async () => (await cursorAt()) >= rows[0]!.id, 5_000);
    // The first NOTIFY's pass, then one per second of NOTIFYs at most (a slow machine may spread the commits over more seconds).
    expect(skips.count).toBeLessThanOrEqual(2 + Math.ceil((Date.now() - started) / 1_000));
    expect(written).toBeLessThan(1_000); // what the bound above assumes of the commits
    expect(seen).toEqual([]);
    // Something to do again: the next event is handed over (after at most a second of spacing).
    idle = false;
    await emit(99);
    await until('the event after the loop can act', () => seen.includes(99), 5_000);
    loop.stop();
    await clock.stop();
  });

  it('a batch whose handler failed is handed over again soon, with no NOTIFY and no sweep', async () => {
    const batches = failingOnce();
    const clock = new ClockRunner();
    const loop = new OutboxLoop(t.db, { name: 'batch-retry-soon', every: 60_000, batch: 10, handleBatch: batches.handleBatch });
    await loop.start(clock, listener);
    clock.start();
    await emit(30);
    await until('the first, failing, hand-over', () => batches.failures === 1);
    const failed = Date.now();
    await until('the batch handed over again', () => batches.seen.length === 1, 4_000);
    expect(Date.now() - failed).toBeLessThan(60_000 / 20); // the back-off, far below the sweep
    expect(batches.seen).toEqual([30]);
    loop.stop();
    await clock.stop();
  });

  it('a failing batch handler leaves the cursor before the batch; the next pass hands it over again', async () => {
    const batches = failingOnce();
    const loop = new OutboxLoop(t.db, { name: 'batch-retry', every: 60_000, batch: 10, handleBatch: batches.handleBatch });
    await loop.start(new ClockRunner());
    await emit(20);
    await emit(21);
    // Other suites' transactions on the server may hold the events back for a moment: drain until both came.
    let handled = 0;
    await until(
      'both events handed over',
      async () => {
        handled += await loop.drain();
        return handled >= 2;
      },
      { timeoutMs: 5_000, everyMs: 20 },
    ).catch(() => undefined);
    expect(batches.failures).toBe(1);
    expect(batches.seen).toEqual([20, 21]);
    expect(await loop.drain()).toBe(0);
  });
});
