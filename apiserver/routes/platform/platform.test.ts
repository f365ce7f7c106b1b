import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { until } from '../../../test/harness/until.js';

/**
 * GET /api/platform/health pings the database (`Database.ping`, `select 1`): requests that arrive
 * while a ping is under way take its answer, so a burst of them takes one connection and wakes the
 * server once (docs/performance.md, "Levers already in the code").
 */

let hub: TestHub;

beforeAll(async () => {
  hub = await startTestHub();
});

afterAll(async () => {
  await hub?.stop();
});

/** Holds each `select 1` of the pool until released (then answers it, or fails it with `failure`); counts them and the pings asked for. */
function holdPings() {
  const db = hub.services.db;
  const { answerWithin, ping } = db;
  const counts = { asked: 0, sent: 0 };
  let release!: (failure?: Error) => void;
  const released = new Promise<Error | undefined>((resolve) => (release = resolve));
  db.ping = (timeoutMs) => {
    counts.asked++;
    return ping.call(db, timeoutMs);
  };
  db.answerWithin = async (text, timeoutMs) => {
    if (text === 'select 1') {
      counts.sent++;
      const failure = await released;
      if (failure) throw failure;
    }
    return answerWithin.call(db, text, timeoutMs);
  };
  return {
    counts,
    release,
    restore() {
      db.ping = ping;
      db.answerWithin = answerWithin;
    },
  };
}

describe('GET /api/platform/health', () => {
  it('requests that arrive while a ping is under way share it: one select 1 for them all; the next request pings again', async () => {
    const held = holdPings();
    try {
      const requests = Array.from({ length: 10 }, () => fetch(`${hub.url}/api/platform/health`));
      await until('every request to ask for a ping', () => held.counts.asked === 10);
      held.release();
      const answers = await Promise.all(requests);
      expect(answers.map((a) => a.status)).toEqual(Array(10).fill(200));
      expect(await answers[0]!.json()).toEqual({ platform: 'ok', modules: hub.services.modules });
      expect(held.counts.sent).toBe(1);
      expect((await fetch(`${hub.url}/api/platform/health`)).status).toBe(200);
      expect(held.counts.sent).toBe(2);
    } finally {
      held.restore();
    }
  });

  it('a ping that fails fails every request that shared it, and the next request pings again', async () => {
    const held = holdPings();
    try {
      const requests = Array.from({ length: 5 }, () => fetch(`${hub.url}/api/platform/health`));
      await until('every request to ask for a ping', () => held.counts.asked === 5);
      held.release(new Error('the database did not answer within 2000 ms'));
      const statuses = (await Promise.all(requests)).map((a) => a.status);
      expect(statuses.every((s) => s >= 500)).toBe(true);
      expect(new Set(statuses).size).toBe(1);
      expect(held.counts.sent).toBe(1);
    } finally {
      held.restore();
    }
    expect((await fetch(`${hub.url}/api/platform/health`)).status).toBe(200);
  });
});
