import { describe, expect, it } from '@jest/globals';
import { DEFAULT_BURST, DEFAULT_QPS, ReconcileQueue, TokenBucket } from './queue.js';

/** The reconcile queue's rate limiting, on a clock the test moves (no timers wait: `addRateLimited` only returns its delay). */

function clock() {
  let t = 1_000_000;
  return { now: () => t, advance: (ms: number) => (t += ms) };
}

describe('TokenBucket', () => {
  it('hands out the burst at once, then one token per 1/qps, as reservations', () => {
    const c = clock();
    const bucket = new TokenBucket(10, 3, c.now);
    expect([bucket.reserve(), bucket.reserve(), bucket.reserve()]).toEqual([0, 0, 0]);
    // Spent: the next ones wait 100 ms, 200 ms, … (each reserves the token after the previous).
    expect(bucket.reserve()).toBe(100);
    expect(bucket.reserve()).toBe(200);
    c.advance(200);
    // The two reserved tokens arrived meanwhile and are taken: the next waits a whole period again.
    expect(bucket.reserve()).toBe(100);
    c.advance(10_000);
    // Refilled to the burst, never beyond.
    expect([bucket.reserve(), bucket.reserve(), bucket.reserve(), bucket.reserve()]).toEqual([0, 0, 0, 100]);
  });

  it('with qps 0 limits nothing', () => {
    const bucket = new TokenBucket(0, 1, clock().now);
    expect([bucket.reserve(), bucket.reserve(), bucket.reserve()]).toEqual([0, 0, 0]);
  });
});

describe('ReconcileQueue.get', () => {
  it('hands keys out group by group in turn (the operator groups them by namespace), first in first out within a group: a flood of keys in one does not hold up another', async () => {
    const queue = new ReconcileQueue({ backoffBase: 5, backoffMax: 10, groupOf: (key) => key.split('/')[1]! });
    try {
      for (let i = 0; i < 1_000; i++) queue.add(`w/flood/f${i}`);
      queue.add('w/quiet/q1');
      queue.add('w/other/o1');
      queue.add('w/quiet/q2');
      expect(queue.length).toBe(1_003);
      const handed: string[] = [];
      for (let i = 0; i < 6; i++) {
        const key = (await queue.get())!;
        handed.push(key);
        queue.done(key);
      }
      expect(handed).toEqual(['w/flood/f0', 'w/quiet/q1', 'w/other/o1', 'w/flood/f1', 'w/quiet/q2', 'w/flood/f2']);
      // A key added again while handed out waits at the end of its group's line.
      const key = (await queue.get())!;
      queue.add(key);
      queue.done(key);
      expect(key).toBe('w/flood/f3');
      expect(queue.length).toBe(997);
      const rest: string[] = [];
      while (queue.length) {
        const next = (await queue.get())!;
        rest.push(next);
        queue.done(next);
      }
      expect(rest.at(-1)).toBe('w/flood/f3');
      expect(queue.idle).toBe(true);
    } finally {
      queue.close();
    }
  });
});

describe('ReconcileQueue.addRateLimited', () => {
  it("defaults to client-go's controller rate limiter: 10 qps, burst 100", () => {
    expect([DEFAULT_QPS, DEFAULT_BURST]).toEqual([10, 100]);
  });

  it('waits the larger of the key’s exponential backoff and the shared bucket', () => {
    const c = clock();
    const queue = new ReconcileQueue({ backoffBase: 5, backoffMax: 1_000, qps: 10, burst: 100, now: c.now });
    try {
      // A mass failure: 100 keys fail at once and take the burst, each with its own 5 ms backoff.
      const first = Array.from({ length: 100 }, (_, i) => queue.addRateLimited(`k${i}`));
      expect(new Set(first)).toEqual(new Set([5]));
      // The next keys are held to 10 a second overall, however short their own backoff.
      const next = Array.from({ length: 20 }, (_, i) => queue.addRateLimited(`m${i}`));
      expect(next).toEqual(Array.from({ length: 20 }, (_, i) => (i + 1) * 100));
      // Later, with tokens back, one key's backoff doubles per failure up to its cap.
      c.advance(60_000);
      expect(Array.from({ length: 10 }, () => queue.addRateLimited('k0'))).toEqual([10, 20, 40, 80, 160, 320, 640, 1_000, 1_000, 1_000]);
      queue.forget('k0');
      expect(queue.addRateLimited('k0')).toBe(5);
    } finally {
      queue.close();
    }
  });

  it('a retry that a change requeued at once gives its token back: one resource failing on every change of a storm does not hold up the retries of the others', async () => {
    const c = clock();
    const queue = new ReconcileQueue({ backoffBase: 1_000, backoffMax: 300_000, qps: 10, burst: 100, now: c.now });
    try {
      // A resource patched in a loop: each reconcile meets a newer version (409) and fails, and the
      // watch event of the next patch, come meanwhile, requeues it at once: its delay never runs out.
      queue.add('storm');
      for (let i = 0; i < 5_000; i++) {
        const key = (await queue.get())!;
        queue.add('storm');
        queue.addRateLimited(key);
        queue.done(key);
        c.advance(10);
      }
      // 50 s of it took no token: another resource failing now waits its own backoff, not 5,000 - 100 - 500 tokens at 10 a second.
      expect(queue.addRateLimited('other')).toBe(1_000);
      // A failure that waits out its delay still takes a token: the burst and the rate hold as before.
      const next = Array.from({ length: 110 }, (_, i) => queue.addRateLimited(`m${i}`));
      expect(next.at(-2)).toBe(1_000);
      expect(next.at(-1)).toBe(1_100);
    } finally {
      queue.close();
    }
  });

  it('a closed queue (an ended term) hands out nothing and takes nothing', async () => {
    const queue = new ReconcileQueue({ backoffBase: 5, backoffMax: 10 });
    queue.add('a');
    queue.close();
    expect(queue.isClosed).toBe(true);
    queue.add('b');
    expect(await queue.get()).toBeUndefined();
  });
});
