import { afterAll, describe, expect, it } from '@jest/globals';
import { connect, type Socket } from 'node:net';
import { retained } from '../../../test/harness/memory.js';
import { until } from '../../../test/harness/until.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';

/** Many live streams of one tenant that read nothing: what the hub holds for them. */

let hub: TestHub | undefined;
const sockets: Socket[] = [];

afterAll(async () => {
  for (const s of sockets) s.destroy();
  await hub?.stop();
});

describe('live streams of one tenant that read nothing', () => {
  it('hold one copy of each event\'s frame between them, not one per stream', async () => {
    // max-buffer large enough that no stream is ended as too slow here: what is held is measured.
    hub = await startTestHub({ 'svc.events.stream.max-buffer': 256 * 1024 * 1024, 'svc.events.stream.heartbeat': '60s', 'svc.events.stream.poll-every': '100ms' });
    const running = hub;
    const streams = 20;
    for (let i = 0; i < streams; i++) {
      const socket = connect(Number(new URL(running.url).port), '127.0.0.1');
      await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
      socket.write('GET /api/platform/events/stream HTTP/1.1\r\nHost: x\r\nX-Tenant-ID: 1\r\n\r\n');
      socket.pause();
      sockets.push(socket);
    }
    await until('every stream to be subscribed', () => running.services.stream.countFor(1) === streams);
    const baseline = await retained();
    // 16 MB of events (1,000 of 16 kB), in two polls.
    const size = 16_000;
    const count = 1_000;
    let last = 0;
    await running.services.db.withTenant(1, async (tx) => {
      for (let i = 0; i < count; i++) last = await running.services.events.emit(tx, 'org.archived', { id: 70_000 + i, code: 'c'.repeat(size) });
    });
    const poller = running.services.stream as unknown as { position?: { id: number } };
    await until('the poller to have passed every event', () => poller.position?.id === last, { timeoutMs: 30_000 });
    // Left as a sleep: not a check that nothing more arrives, but time for the sockets to hand what
    // they were given to the kernel (no event marks that) so what is measured is what stays; waiting
    // less only measures more, and the bound is an upper one.
    await new Promise((r) => setTimeout(r, 500));
    const held = (await retained()) - baseline;
    const burst = size * count;
    // One copy (and what the events themselves hold until the sockets take them) is a few bursts at
    // most; one copy per stream was `streams` bursts, less what the kernel took.
    expect(running.services.stream.countFor(1)).toBe(streams);
    expect(Math.round(held / 1e6)).toBeLessThan(Math.round((5 * burst) / 1e6)); // in MB
  }, 120_000);
});
