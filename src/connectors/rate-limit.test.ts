import { describe, expect, it, jest } from '@jest/globals';
import { MAX_TIMER_MS } from './engine/retry.js';
import { TokenBucket } from './rate-limit.js';

describe('TokenBucket', () => {
  it('starts full, then refills at count per window', () => {
    let now = 0;
    const bucket = new TokenBucket({ count: 20, windowMs: 1000 }, () => now);
    for (let i = 0; i < 20; i++) expect(bucket.tryTake()).toBe(true);
    expect(bucket.tryTake()).toBe(false);
    now += 49;
    expect(bucket.tryTake()).toBe(false);
    now += 1;
    expect(bucket.tryTake()).toBe(true);
    now += 10_000;
    for (let i = 0; i < 20; i++) expect(bucket.tryTake()).toBe(true);
    expect(bucket.tryTake()).toBe(false);
  });

  it('bounds a burst of waiters to the rate (20/s)', async () => {
    const windowMs = 200;
    const bucket = new TokenBucket({ count: 4, windowMs });
    const started = performance.now();
    const times: number[] = [];
    // Alongside, the pace itself: 8 timers of 50 ms one after the other, late as the machine makes the bucket's.
    const pace = (async () => {
      for (let i = 0; i < 8; i++) await new Promise((resolve) => setTimeout(resolve, windowMs / 4));
      return performance.now() - started;
    })();
    await Promise.all(Array.from({ length: 12 }, () => bucket.take().then(() => times.push(performance.now() - started))));
    // 4 at once, then 8 more at one per 50 ms: the first four within 40 ms of the first (counted from it, not from the
    // start, which a stall of the machine before the first may delay).
    const first = Math.min(...times);
    expect(times.filter((t) => t - first < 40)).toHaveLength(4);
    expect(Math.max(...times)).toBeGreaterThanOrEqual(390);
    // The bucket catches up on a late timer, so it keeps the pace of the timers (half a window of slack for jitter: a timer that fires a millisecond early costs the bucket one more).
    expect(Math.max(...times)).toBeLessThan((await pace) + windowMs / 2);
  });

  it('a waiter leaves when its signal aborts, without blocking the others', async () => {
    const bucket = new TokenBucket({ count: 1, windowMs: 100 });
    await bucket.take();
    const controller = new AbortController();
    const aborted = bucket.take(controller.signal);
    const next = bucket.take();
    controller.abort(new Error('stop'));
    await expect(aborted).rejects.toThrow('stop');
    await expect(next).resolves.toBeUndefined();
  });

  it('a waiter queued behind another leaves as soon as its signal aborts (a cancelled run does not wait for the others\' turns)', async () => {
    const bucket = new TokenBucket({ count: 1, windowMs: 60_000 });
    await bucket.take();
    // Ahead of it: a waiter whose token comes in a minute (given up after a second, to end the test).
    const ahead = new AbortController();
    const first = bucket.take(ahead.signal);
    const giveUp = setTimeout(() => ahead.abort(new Error('given up')), 1_000);
    const mine = new AbortController();
    const queued = bucket.take(mine.signal);
    let firstSettled = false;
    void first.catch(() => {}).finally(() => {
      firstSettled = true;
    });
    mine.abort(new Error('cancelled'));
    await expect(queued).rejects.toThrow('cancelled');
    // Before the waiter ahead of it leaves (its turn, or the give-up after a second, whatever the load).
    expect(firstSettled).toBe(false);
    await expect(first).rejects.toThrow('given up');
    clearTimeout(giveUp);
  });

  it('waitMs: how long a take() made now would wait, counting the waiters ahead (a cancelled one no longer)', async () => {
    let now = 0;
    const bucket = new TokenBucket({ count: 1, windowMs: 3_600_000 }, () => now);
    expect(bucket.waitMs()).toBe(0);
    await bucket.take();
    now = 600_000;
    expect(bucket.waitMs()).toBeCloseTo(3_000_000, -1);
    const ahead = new AbortController();
    const waiting = bucket.take(ahead.signal);
    expect(bucket.waitMs()).toBeCloseTo(6_600_000, -1);
    ahead.abort(new Error('gone'));
    await expect(waiting).rejects.toThrow('gone');
    expect(bucket.waitMs()).toBeCloseTo(3_000_000, -1);
  });

  it('a clock that goes back refills nothing and takes nothing away', () => {
    let now = 1_000_000;
    const bucket = new TokenBucket({ count: 20, windowMs: 1000 }, () => now);
    for (let i = 0; i < 20; i++) expect(bucket.tryTake()).toBe(true);
    now -= 3_600_000;
    expect(bucket.tryTake()).toBe(false);
    // 50 ms on from where it went back: one token, as 50 ms anywhere.
    now += 50;
    expect(bucket.tryTake()).toBe(true);
    expect(bucket.tryTake()).toBe(false);
  });

  it('a limit slower than a timer holds (1/999999h) waits in timers node can hold, not in a 1 ms poll', async () => {
    let reads = 0;
    let thirdRead = () => {};
    const waiting = new Promise<void>((resolve) => {
      thirdRead = resolve;
    });
    // Read at construction, at the first take, then at the second take before it waits.
    const bucket = new TokenBucket({ count: 1, windowMs: 999_999 * 3_600_000 }, () => {
      if (++reads === 3) thirdRead();
      return performance.now();
    });
    await bucket.take();
    const timers = jest.spyOn(global, 'setTimeout');
    try {
      const controller = new AbortController();
      const second = bucket.take(controller.signal);
      await waiting;
      await new Promise((resolve) => setImmediate(resolve));
      const delays = timers.mock.calls.map((call) => call[1] ?? 0);
      expect(delays.length).toBeGreaterThan(0);
      expect(Math.max(...delays)).toBeLessThanOrEqual(MAX_TIMER_MS);
      controller.abort(new Error('stop'));
      await expect(second).rejects.toThrow('stop');
    } finally {
      timers.mockRestore();
    }
  });

  it('refuses a nonsense limit', () => {
    expect(() => new TokenBucket({ count: 0, windowMs: 1000 })).toThrow(RangeError);
    expect(() => new TokenBucket({ count: 1, windowMs: 0 })).toThrow(RangeError);
  });
});
