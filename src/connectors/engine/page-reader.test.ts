import type { ConnectorSpec } from '../types.js';
import { BUCKETS_KEPT, EnginePageReader } from './page-reader.js';

// Only the fields limiterFor reads: the id and the rate limit.
const connector = (id: string, count = 10, windowMs = 3_600_000) => ({ id, rateLimit: { count, windowMs } }) as unknown as ConnectorSpec;

describe('EnginePageReader token buckets', () => {
  const reader = () =>
    new EnginePageReader(() => {
      throw new Error('not read in this test');
    });

  it('keeps one bucket per connector and replaces it when the limit changes', () => {
    const r = reader();
    const a = r.limiterFor(connector('a'));
    expect(r.limiterFor(connector('a'))).toBe(a);
    const changed = r.limiterFor(connector('a', 20));
    expect(changed).not.toBe(a);
    expect(changed.capacity).toBe(20);
    expect(r.bucketCount).toBe(1);
  });

  it('drops idle buckets once it holds BUCKETS_KEPT, keeping those in use with their state', async () => {
    const r = reader();
    // A slow refill (10 an hour): a bucket a token was taken from stays short for the whole test.
    const used = r.limiterFor(connector('used'));
    expect(used.tryTake()).toBe(true);
    const busy = r.limiterFor(connector('busy', 1));
    expect(busy.tryTake()).toBe(true);
    const abort = new AbortController();
    const waiter = busy.take(abort.signal).catch((err: unknown) => err);
    const total = BUCKETS_KEPT + 100;
    for (let i = 0; i < total; i++) r.limiterFor(connector(`c${i}`));
    // Without pruning the reader would hold every connector it ever saw (total + 2).
    expect(r.bucketCount).toBeLessThanOrEqual(BUCKETS_KEPT);
    expect(r.bucketCount).toBeLessThan(total);
    // The buckets in use are the same objects, their tokens not handed back.
    expect(r.limiterFor(connector('used'))).toBe(used);
    expect(r.limiterFor(connector('busy', 1))).toBe(busy);
    for (let i = 0; i < 9; i++) expect(used.tryTake()).toBe(true);
    expect(used.tryTake()).toBe(false);
    abort.abort(new Error('test over'));
    expect(await waiter).toBeInstanceOf(Error);
  });
});
