import { afterAll, describe, expect, it } from '@jest/globals';
import { connect, type Socket } from 'node:net';
import { until } from '../../../test/harness/until.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';

/** A hub stopping under its event streams: they end first, and none holds the stop. */

let hub: TestHub | undefined;

afterAll(async () => {
  await hub?.stop();
});

async function openRaw(url: string): Promise<Socket> {
  const socket = connect(Number(new URL(url).port), '127.0.0.1');
  await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
  socket.write('GET /api/platform/events/stream HTTP/1.1\r\nHost: x\r\nX-Tenant-ID: 1\r\n\r\n');
  return socket;
}

describe('a hub stopping (SIGTERM) under its event streams', () => {
  it('ends them at once: a client that reads gets the reason; one that reads nothing does not hold the stop to the shutdown grace', async () => {
    hub = await startTestHub({
      'svc.events.stream.heartbeat': '20s',
      'svc.http.shutdown-grace': '20s',
      'svc.events.stream.max-buffer': 64 * 1024 * 1024,
      'svc.events.stream.poll-every': '100ms',
    });
    const running = hub;
    const stalled = await openRaw(running.url);
    stalled.pause(); // never reads
    const reading = await openRaw(running.url);
    let text = '';
    reading.on('data', (chunk: Buffer) => {
      text += chunk.toString('latin1');
    });
    const readingEnd = new Promise<void>((resolve) => reading.once('close', () => resolve()));
    try {
      await until('both to be subscribed', () => running.services.stream.countFor(1) === 2);
      // About 16 MB of live events: more than loopback TCP holds for a client that reads nothing.
      let last = 0;
      await running.services.db.withTenant(1, async (tx) => {
        for (let i = 0; i < 8000; i++) last = await running.services.events.emit(tx, 'org.archived', { id: 60_000 + i, code: 'c'.repeat(2000) });
      });
      await until('the reading client to have every event', () => text.includes(`id: ${last}\n`), { timeoutMs: 60_000 });
      const started = Date.now();
      await running.stop();
      hub = undefined;
      const took = Date.now() - started;
      await readingEnd;
      expect(text).toMatch(/: server stopping; reconnect with Last-Event-ID\n\n\r\n0\r\n\r\n$/);
      // Well under the grace (20 s) and the heartbeat (20 s), either of which held it before.
      expect(took).toBeLessThan(10_000);
    } finally {
      stalled.destroy();
      reading.destroy();
    }
  }, 120_000);
});
