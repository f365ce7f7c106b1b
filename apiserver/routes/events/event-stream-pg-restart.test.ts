import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from '@jest/globals';
import { EventSource } from 'eventsource';
import { type EmbeddedDatabase, freePort, startEmbedded } from '../../../src/db/embedded.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { until } from '../../../test/harness/until.js';
import { directoryCacheExpired } from '../../../test/harness/directory-cache.js';

/** The hub's PostgreSQL stopped and started again under open event streams read by `eventsource`. */

const dir = mkdtempSync(join(tmpdir(), 'svc-stream-pg-'));
chmodSync(dir, 0o755);
const servers: EmbeddedDatabase[] = [];
let hub: TestHub | undefined;
const sources: EventSource[] = [];

afterAll(async () => {
  for (const es of sources) es.close();
  await hub?.stop().catch(() => undefined);
  for (const s of servers) await s.stop();
  rmSync(dir, { recursive: true, force: true });
});

function source(url: string) {
  const received: string[] = [];
  const log: string[] = [];
  const es = new EventSource(url, {
    fetch: (input, init) => {
      const headers = new Headers(init?.headers);
      log.push(`open after ${headers.get('last-event-id')}`);
      headers.set('X-Tenant-ID', '1');
      return fetch(input, { ...init, headers });
    },
  });
  es.onmessage = (m) => received.push(m.lastEventId);
  es.onerror = (e) => log.push(`error ${e.code ?? ''} ${e.message ?? ''} state ${es.readyState}`);
  sources.push(es);
  return { es, received, log };
}

describe('a PostgreSQL restart under open event streams', () => {
  it('open streams stay open through it and go on after it; a stream opened meanwhile (no Last-Event-ID) is served; one that needs the database (a resume, authentication past its cache) is told to reconnect (200, retry) and catches up after it; none loses or repeats an event', async () => {
    const port = await freePort();
    servers.push(await startEmbedded({ dataDir: join(dir, 'data'), database: 'svc', port }));
    hub = await startTestHub({ 'svc.datasource.url': servers[0]!.url, 'svc.events.stream.poll-every': '100ms', 'svc.events.stream.heartbeat': '300ms' });
    const running = hub;
    const emit = (orgId: number) => running.services.db.withTenant(1, (tx) => running.services.events.emit(tx, 'org.updated', { orgId, tenantId: 1 }));
    const first = await emit(1);
    const live = source(`${running.url}/api/platform/events/stream`);
    const resumed = source(`${running.url}/api/platform/events/stream?lastEventId=${first - 1}`);
    await until('both to be open', () => live.es.readyState === EventSource.OPEN && resumed.received.length === 1);
    const before = [await emit(2), await emit(3)];
    await until('the live stream to get them', () => live.received.length === 2);

    await servers[0]!.stop();
    // Opened while the database is away: a stream without Last-Event-ID starts at the position the
    // hub's poller holds in memory, asking the database nothing.
    const during = source(`${running.url}/api/platform/events/stream`);
    await until('the stream opened meanwhile to be open', () => during.es.readyState === EventSource.OPEN, { timeoutMs: 10_000 });
    // One with Last-Event-ID must read the outbox: a 200 stream that says so and ends at once, so the
    // EventSource reconnects every 3 s (a 503 would end it for good) until the database is back.
    const resuming = source(`${running.url}/api/platform/events/stream?lastEventId=${first}`);
    await until('the resume meanwhile to be told to reconnect, and to reconnect', () => resuming.log.filter((l) => l.startsWith('open')).length >= 2, { timeoutMs: 15_000 });
    expect(resuming.es.readyState).not.toBe(EventSource.CLOSED);
    // Past the 10 s the hub caches the tenant's and user's state (not configurable), authentication needs the database:
    // on this route that is the same answer, whatever the tenant (nothing about it is revealed)…
    await directoryCacheExpired(running.services.directory);
    const stream = (tenant?: string) => fetch(`${running.url}/api/platform/events/stream?lastEventId=${first}`, { headers: tenant ? { 'X-Tenant-ID': tenant } : {} });
    for (const tenant of ['1', '999']) {
      const answer = await stream(tenant);
      expect([answer.status, answer.headers.get('content-type'), await answer.text()]).toEqual([200, 'text/event-stream; charset=utf-8', 'retry: 3000\n: database unavailable; reconnect with Last-Event-ID\n\n']);
    }
    // …a caller without credentials keeps its 401, and every other route its 503.
    expect((await stream()).status).toBe(401);
    expect((await fetch(`${running.url}/api/platform/events`, { headers: { 'X-Tenant-ID': '1' } })).status).toBe(503);
    // An EventSource opened now reconnects through it as well.
    const late = source(`${running.url}/api/platform/events/stream?lastEventId=${first}`);
    await until('the late one to reconnect', () => late.log.filter((l) => l.startsWith('open')).length >= 2, { timeoutMs: 15_000 });
    servers.push(await startEmbedded({ dataDir: join(dir, 'data'), database: 'svc', port }));
    const after: number[] = [];
    await until('a write to succeed', async () => {
      try {
        after.push(await emit(10));
        return true;
      } catch {
        return false;
      }
    }, { timeoutMs: 30_000, everyMs: 500 });
    after.push(await emit(11));
    const ids = (list: number[]) => list.map(String);
    await until('every stream to get the events written after the restart', () => [live, resumed, during, resuming, late].every((s) => s.received.at(-1) === String(after[1])), {
      timeoutMs: 20_000,
      detail: () => JSON.stringify({ live: live.received, resumed: resumed.received, during: during.received, after }),
    });
    expect(live.received).toEqual(ids([...before, ...after]));
    expect(resumed.received).toEqual(ids([first, ...before, ...after]));
    expect(during.received).toEqual(ids(after));
    // The same connections throughout: none had to reconnect.
    for (const s of [live, resumed, during]) expect(s.log).toEqual(['open after null']);
    // The two told to reconnect: every event after the one they named, once, in order; an error
    // (the stream's end) before each reconnection, and never closed.
    for (const s of [resuming, late]) {
      expect(s.received).toEqual(ids([...before, ...after]));
      expect(s.es.readyState).toBe(EventSource.OPEN);
      expect(s.log.filter((l) => l.startsWith('error')).every((l) => l.endsWith('state 0'))).toBe(true);
    }
    // Resumed after the restart from an id before the outage: the rest, once each.
    const later = source(`${running.url}/api/platform/events/stream?lastEventId=${before[0]}`);
    await until('the resume after the restart to catch up', () => later.received.length === 3, { timeoutMs: 10_000, detail: () => JSON.stringify(later.received) });
    // The marker: once it is here, nothing earlier (a repeat) is still coming.
    const marker = await emit(12);
    await until('the resume after the restart to get the marker', () => later.received.includes(String(marker)), { timeoutMs: 10_000, detail: () => JSON.stringify(later.received) });
    expect(later.received).toEqual(ids([before[1]!, ...after, marker]));
  }, 120_000);
});
