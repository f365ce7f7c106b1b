import { describe, expect, it } from '@jest/globals';
import { PROGRESS_FACTOR, SlotPool } from './slot-pool.js';
import { currentContext, runForTenant } from '../observability/context.js';
import { trace } from '@opentelemetry/api';
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-node';
import { startTracing, stopTracing } from '../observability/tracing.js';

const tick = (ms = 5) => new Promise((r) => setTimeout(r, ms));

/** A job that runs until released, recording concurrency per key. */
function gate() {
  const running = new Map<string, number>();
  let peak = 0;
  const peaks = new Map<string, number>();
  const releases: Array<() => void> = [];
  const order: string[] = [];
  const job = (key: string) => () =>
    new Promise<void>((resolve) => {
      order.push(key);
      running.set(key, (running.get(key) ?? 0) + 1);
      peaks.set(key, Math.max(peaks.get(key) ?? 0, running.get(key)!));
      peak = Math.max(peak, [...running.values()].reduce((a, b) => a + b, 0));
      releases.push(() => {
        running.set(key, running.get(key)! - 1);
        resolve();
      });
    });
  return { job, releases, order, peak: () => peak, peaks };
}

/** One job offered to key k's full queue with a long wait, then its `release`-th job released: how many the wait took. */
async function offerOneAsRoomFrees(pool: SlotPool, g: ReturnType<typeof gate>, release: number): Promise<number> {
  const next = pool.offerEach('k', 1, () => g.job('k'), 5_000);
  await tick();
  g.releases[release]!();
  return next;
}

describe('slot pool', () => {
  it('bounds the total and each key; keys take turns', async () => {
    const pool = new SlotPool(4, 2, 100);
    const g = gate();
    for (let i = 0; i < 6; i++) pool.offer('slow', g.job('slow'));
    for (let i = 0; i < 3; i++) pool.offer('a', g.job('a'));
    for (let i = 0; i < 3; i++) pool.offer('b', g.job('b'));
    await tick();
    expect(g.peaks.get('slow')).toBe(2);
    expect(g.order.slice(0, 4).sort()).toEqual(['a', 'a', 'slow', 'slow']);
    // Release every job but the slow key's, as they start; slow never finishes.
    const released = new Set<number>();
    for (let round = 0; round < 20; round++) {
      g.order.forEach((k, i) => {
        if (k !== 'slow' && !released.has(i)) {
          released.add(i);
          g.releases[i]!();
        }
      });
      await tick();
    }
    expect(g.order.filter((k) => k === 'b').length).toBe(3); // b ran although slow never finished
    expect(g.peak()).toBeLessThanOrEqual(4);
    expect(pool.size()).toBe(6); // 2 slow running + 4 queued
  });

  it('bounds each group (a tenant) across its keys; a group at its cap waits and the others go first', async () => {
    const pool = new SlotPool(6, 2, 100, 3);
    const g = gate();
    // Group A: four keys that never finish; alone they would take the whole pool.
    for (const key of ['a1', 'a2', 'a3', 'a4']) for (let i = 0; i < 3; i++) pool.offer(key, g.job(key), 'A');
    await tick();
    expect(g.order.length).toBe(3);
    // Group B's jobs start at once, taking turns with nobody: A is at its cap.
    for (let i = 0; i < 5; i++) pool.offer('b1', g.job('b1'), 'B');
    await tick();
    expect(g.order.filter((k) => k === 'b1').length).toBe(2); // its key's cap
    for (let round = 0; round < 10; round++) {
      g.order.forEach((k, i) => {
        if (k === 'b1') g.releases[i]!();
      });
      await tick();
    }
    expect(g.order.filter((k) => k === 'b1').length).toBe(5);
    expect(g.order.filter((k) => k.startsWith('a')).length).toBe(3);
    // One of A's jobs ends: exactly one more of A's starts (another key's turn), none counted lost.
    const firstA = g.order.findIndex((k) => k.startsWith('a'));
    g.releases[firstA]!();
    await tick();
    expect(g.order.filter((k) => k.startsWith('a')).length).toBe(4);
    expect(pool.size()).toBe(12 - 1); // A: 3 running + 8 queued
  });

  it('a group cap above the total is no cap beyond the total; keys without a group have none', async () => {
    const pool = new SlotPool(4, 4, 100, 10);
    const g = gate();
    for (let i = 0; i < 6; i++) pool.offer('k', g.job('k'), 'A');
    for (let i = 0; i < 2; i++) pool.offer('n', g.job('n'));
    await tick();
    expect(g.peak()).toBe(4);
  });

  it('refuses a job when the key\'s queue is full; offerEach marks a key that never frees a slot as stalled', async () => {
    const pool = new SlotPool(10, 1, 2);
    const g = gate();
    expect(pool.offer('k', g.job('k'))).toBe(true); // runs
    expect(pool.offer('k', g.job('k'))).toBe(true); // queued
    expect(pool.offer('k', g.job('k'))).toBe(true); // queued
    expect(pool.offer('k', g.job('k'))).toBe(false);
    const started = Date.now();
    expect(await pool.offerEach('k', 2, () => g.job('k'), 100)).toBe(0);
    expect(Date.now() - started).toBeGreaterThanOrEqual(90);
    const again = Date.now();
    const patience = 2_000;
    expect(await pool.offerEach('k', 1, () => g.job('k'), patience)).toBe(0); // stalled: refused at once
    expect(Date.now() - again).toBeLessThan(patience / 4); // relative to the wait it was allowed
    expect(pool.offer('other', g.job('other'))).toBe(true);
  });

  it('offerEach marks no key stalled whose jobs end fast during the wait (PROGRESS_FACTOR times as many start as it runs), however full its queue stays: the next wait waits for room again', async () => {
    // A process short of CPU: the key's jobs end, but too slowly for the whole offer to fit in the wait.
    const pool = new SlotPool(10, 1, 2);
    const g = gate();
    for (let i = 0; i < 3; i++) pool.offer('k', g.job('k')); // 1 running, 2 queued
    const waiting = pool.offerEach('k', 2 * PROGRESS_FACTOR, () => g.job('k'), 400);
    // PROGRESS_FACTOR of its jobs end during the wait, one after the other: as many taken.
    for (let i = 0; i < PROGRESS_FACTOR; i++) {
      await tick();
      g.releases[i]!();
    }
    expect(await waiting).toBe(PROGRESS_FACTOR);
    // Full again at the end of the wait, but it made progress: not stalled, this call waits for room.
    expect(await offerOneAsRoomFrees(pool, g, PROGRESS_FACTOR)).toBe(1);
  });

  it('offerEach marks a key stalled whose jobs end during the wait but fewer than PROGRESS_FACTOR times as many as it runs (a slow endpoint): the next waits are refused at once', async () => {
    // Each job takes a good share of the wait: the key answers, but would hold every wait whole.
    const pool = new SlotPool(10, 1, 2);
    const g = gate();
    for (let i = 0; i < 3; i++) pool.offer('k', g.job('k')); // 1 running, 2 queued
    const waiting = pool.offerEach('k', 2 * PROGRESS_FACTOR, () => g.job('k'), 400);
    for (let i = 0; i < PROGRESS_FACTOR - 1; i++) {
      await tick();
      g.releases[i]!();
    }
    expect(await waiting).toBe(PROGRESS_FACTOR - 1);
    // Stalled: the next wait is refused at once, though its jobs go on ending.
    const patience = 2_000;
    const again = Date.now();
    const next = pool.offerEach('k', 1, () => g.job('k'), patience);
    g.releases[PROGRESS_FACTOR - 1]!();
    expect(await next).toBe(0);
    expect(Date.now() - again).toBeLessThan(patience / 4);
  });

  it('a stalled key is waited for again as soon as it progresses, though its queue is kept full; a trickle keeps it stalled', async () => {
    const pool = new SlotPool(10, 2, 8);
    const g = gate();
    for (let i = 0; i < 10; i++) pool.offer('k', g.job('k')); // 2 running, 8 queued
    const windowMs = 300;
    expect(await pool.offerEach('k', 1, () => g.job('k'), windowMs)).toBe(0); // nothing ended: stalled
    const refused = async () => {
      const again = Date.now();
      expect(await pool.offerEach('k', 1, () => g.job('k'), 5_000)).toBe(0);
      expect(Date.now() - again).toBeLessThan(1_000);
    };
    await refused();
    /** Its `i`-th job ends and its place is refilled at once (as the consumer's next batches do): the queue is never half empty. */
    const endAndRefill = async (i: number) => {
      g.releases[i]!();
      await tick();
      expect(pool.offer('k', g.job('k'))).toBe(true);
    };
    // One of its two jobs ends, then another more than a wait later: still stalled.
    await endAndRefill(0);
    await tick(windowMs * 1.5);
    await endAndRefill(1);
    await refused();
    // More than a wait later, PROGRESS_FACTOR × 2 (it ran two) end within a wait: one short of them, still stalled.
    await tick(windowMs * 1.5);
    const needed = PROGRESS_FACTOR * 2;
    for (let i = 2; i < 2 + needed - 1; i++) await endAndRefill(i);
    await refused();
    // The last of them: it answers fast again, and the next wait waits for room.
    await endAndRefill(2 + needed - 1);
    expect(pool.offer('k', g.job('k'))).toBe(false); // full
    expect(await offerOneAsRoomFrees(pool, g, 2 + needed)).toBe(1);
  });

  it('offerEach takes its jobs in order, each as soon as a queued job of the key starts, making none before there is room for it', async () => {
    const pool = new SlotPool(10, 1, 1);
    const g = gate();
    pool.offer('k', g.job('k'));
    pool.offer('k', g.job('k'));
    const made: number[] = [];
    const waiting = pool.offerEach(
      'k',
      3,
      (i) => {
        made.push(i);
        return g.job(`k${i}`);
      },
      5_000,
    );
    await tick();
    expect(made).toEqual([]);
    for (let n = 1; n <= 3; n++) {
      g.releases[n - 1]!();
      await tick();
      // One job more has started, so one more was made and queued.
      expect(made).toEqual([0, 1, 2].slice(0, n));
    }
    expect(await waiting).toBe(3);
    g.releases[3]!();
    await tick();
    g.releases[4]!();
    await pool.idle();
    expect(g.order).toEqual(['k', 'k', 'k0', 'k1', 'k2']);
  });

  it('offerEach takes what room frees within its wait and refuses the rest; a maker that has no more ends it at once', async () => {
    const pool = new SlotPool(10, 1, 1);
    const g = gate();
    pool.offer('k', g.job('k'));
    pool.offer('k', g.job('k'));
    const waiting = pool.offerEach('k', 3, () => g.job('k'), 300);
    await tick();
    g.releases[0]!();
    const started = Date.now();
    expect(await waiting).toBe(1);
    expect(Date.now() - started).toBeGreaterThanOrEqual(200);
    g.releases[1]!();
    await tick();
    // Room again, but the maker says there is nothing more: no wait.
    const other = pool.offerEach('k', 3, (i) => (i === 0 ? g.job('k') : undefined), 5_000);
    g.releases[2]!();
    expect(await other).toBe(1);
  });

  it('offerEach makes and runs its jobs in the context it was called in, whichever job\'s end makes the room', async () => {
    const pool = new SlotPool(10, 1, 1);
    const g = gate();
    runForTenant(1, () => pool.offer('k', g.job('k')));
    runForTenant(1, () => pool.offer('k', g.job('k')));
    const madeIn: Array<string | undefined> = [];
    const ranIn: Array<string | undefined> = [];
    const waiting = runForTenant(2, () =>
      pool.offerEach(
        'k',
        2,
        () => {
          madeIn.push(currentContext()?.tenantId);
          return async () => void ranIn.push(currentContext()?.tenantId);
        },
        5_000,
      ),
    );
    g.releases[0]!();
    await tick();
    g.releases[1]!();
    expect(await waiting).toBe(2);
    await pool.idle();
    expect(madeIn).toEqual(['2', '2']);
    expect(ranIn).toEqual(['2', '2']);
  });

  /**
   * A pool of one slot whose jobs record `look()` as they start; the first job offered holds the slot until `release`,
   * so the others start in its continuation.
   */
  function oneSlot(look: () => string | undefined) {
    const pool = new SlotPool(1, 1, 10);
    const seen: Array<string | undefined> = [];
    let release!: () => void;
    const first = new Promise<void>((resolve) => {
      release = resolve;
    });
    let holds = true;
    const job = () => {
      const ends = holds ? first : undefined;
      holds = false;
      return async () => {
        seen.push(look());
        await ends;
      };
    };
    return { pool, seen, job, release: () => release() };
  }

  it('runs each job in the context it was offered in, not in that of the job whose end started it', async () => {
    const { pool, seen, job, release } = oneSlot(() => currentContext()?.tenantId);
    runForTenant(1, () => pool.offer('a', job()));
    runForTenant(2, () => pool.offer('b', job()));
    pool.offer('c', job());
    // Only tenant 1's job runs; the others start, one after the other, when it ends (in its continuation).
    expect(seen).toEqual(['1']);
    release();
    await pool.idle();
    expect(seen).toEqual(['1', '2', undefined]);
  });

  it('a job offered outside any context stays outside it after a unit of work of its own (no context of the job before it comes back)', async () => {
    const { pool, seen, job, release } = oneSlot(() => currentContext()?.tenantId);
    runForTenant(1, () => pool.offer('a', job()));
    const after: Array<string | undefined> = [];
    pool.offer('b', async () => {
      runForTenant(2, () => undefined);
      after.push(currentContext()?.tenantId);
      await tick(1);
      after.push(currentContext()?.tenantId);
    });
    release();
    await pool.idle();
    expect(seen).toEqual(['1']);
    expect(after).toEqual([undefined, undefined]);
  });

  it('runs each job under the trace span it was offered under, with tracing on', async () => {
    startTracing({ serviceName: 'pool-test', endpoint: 'http://127.0.0.1:9', processor: new SimpleSpanProcessor(new InMemorySpanExporter()) });
    try {
      const { pool, seen, job, release } = oneSlot(() => trace.getActiveSpan()?.spanContext().spanId);
      const offerUnder = (name: string, work: () => void) => trace.getTracer('pool-test').startActiveSpan(name, (span) => {
        work();
        span.end();
        return span.spanContext().spanId;
      });
      const a = offerUnder('a', () => pool.offer('a', job()));
      const b = offerUnder('b', () => pool.offer('b', job()));
      release();
      await pool.idle();
      expect(seen).toEqual([a, b]);
    } finally {
      await stopTracing();
    }
  });

  it('size() counts the jobs running and queued over every key, through starts, ends, waits for room and clear()', async () => {
    const pool = new SlotPool(2, 1, 2);
    const g = gate();
    for (const key of ['a', 'b']) for (let i = 0; i < 4; i++) pool.offer(key, g.job(key));
    // Each key: 1 running, 2 queued, its fourth refused.
    expect(pool.size()).toBe(2 + 4);
    const waiting = pool.offerEach('a', 2, () => g.job('a'), 5_000);
    g.releases[0]!(); // a's first ends: a's next starts, and one of the waiting jobs takes its place in the queue
    await tick();
    expect(pool.size()).toBe(2 + 4);
    pool.clear();
    expect(await waiting).toBe(2); // room after the clear: the second one queued too
    expect(pool.size()).toBe(2 + 1);
    while (pool.size() > 0) {
      for (const release of g.releases) release();
      await tick();
    }
    await pool.idle();
  });

  it('a job that returns nothing ends when it calls done, once however often it calls it, and the next job then runs in its own context', async () => {
    const pool = new SlotPool(1, 1, 10);
    const dones: Array<() => void> = [];
    const seen: Array<string | undefined> = [];
    const job = () => (done: () => void) => {
      seen.push(currentContext()?.tenantId);
      dones.push(done);
      return undefined;
    };
    runForTenant(1, () => pool.offer('k', job()));
    runForTenant(2, () => pool.offer('k', job()));
    pool.offer('k', job());
    expect(pool.size()).toBe(3);
    expect(seen).toEqual(['1']);
    // Ended from another context (a socket's callback): the next job still runs in its own.
    runForTenant(3, () => dones[0]!());
    expect(seen).toEqual(['1', '2']);
    // A second call of the same done frees no second slot.
    dones[0]!();
    expect(seen).toEqual(['1', '2']);
    expect(pool.size()).toBe(2);
    dones[1]!();
    dones[2]!();
    await pool.idle();
    expect(seen).toEqual(['1', '2', undefined]);
    expect(pool.size()).toBe(0);
  });

  it('idle() resolves when everything ran; clear() drops what is queued', async () => {
    const pool = new SlotPool(1, 1, 10);
    let ran = 0;
    for (let i = 0; i < 3; i++) pool.offer('k', async () => void ran++);
    await pool.idle();
    expect(ran).toBe(3);
    const g = gate();
    pool.offer('k', g.job('k'));
    pool.offer('k', g.job('k'));
    pool.clear();
    g.releases[0]!();
    await pool.idle();
    expect(g.order.length).toBe(1);
  });
});
