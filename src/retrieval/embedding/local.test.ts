import { afterAll, describe, expect, it } from '@jest/globals';
import { EmbeddingUnavailable } from './errors.js';
import { LocalEmbedding } from './local.js';

/** The largest gap between 5 ms timer ticks while `work` ran: how long the event loop was held at once. */
async function loopStall(work: () => Promise<unknown>): Promise<number> {
  let last = performance.now();
  let stallMs = 0;
  const timer = setInterval(() => {
    const now = performance.now();
    stallMs = Math.max(stallMs, now - last);
    last = now;
  }, 5);
  try {
    await work();
  } finally {
    clearInterval(timer);
  }
  return Math.max(stallMs, performance.now() - last);
}

/**
 * The event loop's utilization while `work` ran (`performance.eventLoopUtilization`: the share of
 * the time it was running code rather than waiting for something to do), with nothing else
 * scheduled: a timer of our own would add its ticks, and on a busy machine each tick's short run is
 * stretched by the scheduler (one CI run measured 0.53 for the worker with a 5 ms timer running).
 */
async function utilization(work: () => Promise<unknown>): Promise<number> {
  const before = performance.eventLoopUtilization();
  await work();
  return performance.eventLoopUtilization(before).utilization;
}

const cosine = (a: Float32Array, b: Float32Array) => a.reduce((sum, v, i) => sum + v * b[i]!, 0);

const texts = Array.from({ length: 48 }, (_v, i) => `customer ${i} asked about the invoice for order ${i * 7} and wants a refund`);

describe('LocalEmbedding (the bundled sentence encoder)', () => {
  const worker = new LocalEmbedding();
  const inThread = new LocalEmbedding({ mode: 'in-thread', batchSize: 16 });
  afterAll(async () => {
    await worker.close();
    await inThread.close();
  });

  it('answers one 512-dimension unit vector per text, in order, that put related texts closer', async () => {
    expect(worker).toMatchObject({ provider: 'local', model: 'universal-sentence-encoder-lite', dimensions: 512 });
    const [refund, refundAgain, weather, empty] = await worker.embed(['I want my money back for this invoice', 'please refund the invoice', 'it will rain in Paris tomorrow', '']);
    for (const v of [refund!, refundAgain!, weather!, empty!]) {
      expect(v).toBeInstanceOf(Float32Array);
      expect(v.length).toBe(512);
      expect(Math.hypot(...v)).toBeCloseTo(1, 5);
    }
    expect(cosine(refund!, refundAgain!)).toBeGreaterThan(cosine(refund!, weather!) + 0.2);
    expect(await worker.embed([])).toEqual([]);
  });

  it('gives the same vectors in the worker thread and in-thread', async () => {
    const [a] = await worker.embed(['the quick brown fox']);
    const [b] = await inThread.embed(['the quick brown fox']);
    expect(cosine(a!, b!)).toBeCloseTo(1, 5);
  });

  it('keeps the event loop free in the worker thread, where in-thread embedding holds it for a whole batch', async () => {
    await worker.embed(['warm']);
    await inThread.embed(['warm']);
    // Measured here: worker ≈ 15 ms longest stall, in-thread ≈ 200–900 ms (a batch of 16 at ≈ 100
    // texts/s). The gaps move with the machine's load (one CI run on 2 busy cores saw the worker's
    // loop wait 320 ms for a core), so only the in-thread one is held to a bound; the utilization
    // does not move with the load: in-thread the loop runs the model the whole time, with the
    // worker it waits for the answers.
    expect(await loopStall(() => inThread.embed(texts))).toBeGreaterThan(100);
    const off = await utilization(() => worker.embed(texts));
    const on = await utilization(() => inThread.embed(texts));
    expect(on).toBeGreaterThan(0.8);
    expect(off).toBeLessThan(on / 2);
  });

  it('shares a call\'s batches among its threads and answers in the texts\' order, as one thread does', async () => {
    const two = new LocalEmbedding({ threads: 2, batchSize: 8 });
    try {
      expect(await two.embed(['only one batch'])).toHaveLength(1);
      expect(two.threadsStarted).toBe(1); // one batch: no second thread
      const many = texts.slice(0, 40); // 5 batches over 2 threads
      const parallel = await two.embed(many);
      expect(two.threadsStarted).toBe(2);
      const serial = await inThread.embed(many);
      expect(parallel).toHaveLength(many.length);
      for (const [i, v] of parallel.entries()) expect(cosine(v, serial[i]!)).toBeCloseTo(1, 5);
    } finally {
      await two.close();
    }
    expect(two.threadsStarted).toBe(0);
  });

  it('starts the worker again after close', async () => {
    const local = new LocalEmbedding();
    await local.embed(['one']);
    await local.close();
    expect((await local.embed(['two']))[0]!.length).toBe(512);
    await local.close();
  });

  it('answers a call made while it closes from the new worker: only the closed worker\'s calls fail, none is left waiting', async () => {
    const local = new LocalEmbedding();
    try {
      await local.embed(['warm']);
      const during = local.embed(texts).then(
        () => 'answered',
        (err: unknown) => err,
      );
      const closing = local.close();
      // The old worker's exit comes after this call has started a new one: it failed with the old worker's
      // "exit code 1" (one map of waiting calls for both workers).
      const after = local.embed(['asked while the old worker stops']);
      await closing;
      const old = await during;
      expect(old).toBeInstanceOf(EmbeddingUnavailable);
      expect((old as Error).message).toMatch(/the local sentence encoder's worker stopped/);
      expect((await after)[0]!.length).toBe(512);
      expect((await local.embed(['and then']))[0]!.length).toBe(512);
    } finally {
      await local.close();
    }
  });
});
