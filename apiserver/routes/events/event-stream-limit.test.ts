import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { until } from '../../../test/harness/until.js';

/**
 * svc.events.stream.max-per-tenant is exact: at no moment does a tenant have more streams open in
 * one process than it allows, however its opens interleave, and a stream counts until its connection
 * is done, a stream the hub ended included while what is left for its client is still being sent.
 */

let hub: TestHub;
const LIMIT = 2;

beforeAll(async () => {
  // Heartbeats every 10 s: a stream the hub ended whose client reads nothing keeps its connection
  // that long (then it is reset). Batches of 10 frames of about 2 kB, max-buffer 1 kB.
  hub = await startTestHub({
    'svc.events.stream.max-per-tenant': LIMIT,
    'svc.events.stream.max-buffer': 1024,
    'svc.events.stream.batch': 10,
    'svc.events.stream.poll-every': '100ms',
    'svc.events.stream.heartbeat': '10s',
  });
});

afterAll(async () => {
  await hub.stop();
});

const url = () => `${hub.url}/api/platform/events/stream`;

/** A raw stream that reads nothing once its request is sent. */
async function stalled(): Promise<Socket> {
  const socket = connect(Number(new URL(hub.url).port), '127.0.0.1');
  await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
  socket.on('error', () => undefined);
  socket.write('GET /api/platform/events/stream HTTP/1.1\r\nHost: x\r\nX-Tenant-ID: 1\r\n\r\n');
  socket.pause();
  return socket;
}

/** Opens one stream: its status; a 200 is held open (aborted by the caller). */
async function openOne(abort: AbortController, headers: Record<string, string> = { 'X-Tenant-ID': '1' }): Promise<number> {
  const res = await fetch(url(), { headers, signal: abort.signal });
  if (res.status !== 200) await res.text();
  return res.status;
}

/** Whether one more stream of tenant 1 is served now (closed at once if it is). */
async function oneMoreServed(): Promise<boolean> {
  const abort = new AbortController();
  try {
    return (await openOne(abort)) === 200;
  } finally {
    abort.abort();
  }
}

describe('svc.events.stream.max-per-tenant', () => {
  it('opens at the same moment, plain and resuming: exactly the limit is served, the rest 429', async () => {
    for (let round = 0; round < 3; round++) {
      const aborts = Array.from({ length: 12 }, () => new AbortController());
      const statuses = await Promise.all(aborts.map((abort, i) => openOne(abort, i % 2 ? { 'X-Tenant-ID': '1', 'Last-Event-ID': '0' } : { 'X-Tenant-ID': '1' })));
      try {
        expect(statuses.filter((s) => s === 200)).toHaveLength(LIMIT);
        expect(statuses.filter((s) => s === 429)).toHaveLength(12 - LIMIT);
      } finally {
        for (const abort of aborts) abort.abort();
      }
      await until('every place to be free', () => hub.services.stream.placesFor(1) === 0);
    }
  });

  it('a stream the hub ended keeps its place until its connection is done: a client that has not read the rest cannot open more than the limit beside it', async () => {
    const held = [await stalled(), await stalled()];
    try {
      await until('both to be subscribed', () => hub.services.stream.countFor(1) === LIMIT);
      // About 8 MB of live events: more than loopback TCP holds for a client that does not read.
      await hub.services.db.withTenant(1, async (tx) => {
        for (let i = 0; i < 4000; i++) await hub.services.events.emit(tx, 'org.archived', { id: 30_000 + i, code: 'c'.repeat(2000) });
      });
      await until('both to be ended as too slow', () => hub.services.stream.countFor(1) === 0, 30_000);
      // Their connections are still open, what is left for them still queued (reset after a heartbeat
      // period, 10 s): each is still one of the tenant's streams.
      expect(held.map((s) => s.destroyed)).toEqual([false, false]);
      expect(hub.services.stream.placesFor(1)).toBe(LIMIT);
      expect(await oneMoreServed()).toBe(false);
      for (const socket of held) socket.destroy();
      await until('the places to be freed with the connections', () => hub.services.stream.placesFor(1) === 0);
      expect(await oneMoreServed()).toBe(true);
    } finally {
      for (const socket of held) socket.destroy();
    }
  }, 90_000);

  it('a client gone before its stream began, or a refused resume, holds no place', async () => {
    // A Last-Event-ID that is not an id is refused before any place is taken.
    const bad = await fetch(url(), { headers: { 'X-Tenant-ID': '1', 'Last-Event-ID': 'x' } });
    expect(bad.status).toBe(400);
    const tries = Array.from(
      { length: 30 },
      (_, i) =>
        new Promise<void>((resolve) => {
          const socket = connect(Number(new URL(hub.url).port), '127.0.0.1', () => {
            socket.write('GET /api/platform/events/stream HTTP/1.1\r\nHost: x\r\nX-Tenant-ID: 1\r\n\r\n');
            setTimeout(() => socket.destroy(), i % 3);
          });
          socket.on('close', () => resolve());
          socket.on('error', () => undefined);
        }),
    );
    await Promise.all(tries);
    await until('every place to be free', () => hub.services.stream.placesFor(1) === 0, 5_000);
    expect(await oneMoreServed()).toBe(true);
  });
});
