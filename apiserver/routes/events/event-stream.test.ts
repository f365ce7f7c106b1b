import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { until } from '../../../test/harness/until.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { startIssuer, type TestIssuer } from '../../../test/harness/tokens.js';

/** The live stream over real HTTP: a client that parses Server-Sent Events as EventSource does. */

interface Frame {
  id?: string;
  data?: string;
  comment?: string;
}

class SseClient {
  frames: Frame[] = [];
  private controller = new AbortController();
  private waiters: Array<() => void> = [];
  status = 0;
  contentType = '';
  /** The hub ended the stream (its body is over). */
  ended = false;

  static async open(url: string, headers: Record<string, string>): Promise<SseClient> {
    const client = new SseClient();
    const res = await fetch(url, { headers, signal: client.controller.signal });
    client.status = res.status;
    client.contentType = res.headers.get('content-type') ?? '';
    if (res.ok && res.body) void client.read(res.body);
    return client;
  }

  private async read(body: ReadableStream<Uint8Array>): Promise<void> {
    const decoder = new TextDecoder();
    let buffer = '';
    try {
      for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
        buffer += decoder.decode(chunk, { stream: true });
        let end = buffer.indexOf('\n\n');
        while (end >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const frame: Frame = {};
          for (const line of block.split('\n')) {
            if (line.startsWith(':')) frame.comment = line.slice(1).trim();
            else if (line.startsWith('id: ')) frame.id = line.slice(4);
            else if (line.startsWith('data: ')) frame.data = line.slice(6);
          }
          this.frames.push(frame);
          end = buffer.indexOf('\n\n');
        }
        for (const w of this.waiters.splice(0)) w();
      }
      this.ended = true;
    } catch {
      // aborted
    }
  }

  events(): Array<{ id: string; topic: string; payload: Record<string, unknown>; capturedAt: string }> {
    return this.frames
      .filter((f) => f.data)
      .map((f) => {
        const envelope = JSON.parse(f.data!) as { topic: string; payload: string; capturedAt: string };
        expect(typeof envelope.payload).toBe('string');
        return { id: f.id!, topic: envelope.topic, payload: JSON.parse(envelope.payload), capturedAt: envelope.capturedAt };
      });
  }

  async waitFor(predicate: () => boolean, timeoutMs = 5000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!predicate()) {
      if (Date.now() > deadline) throw new Error(`timed out; frames: ${JSON.stringify(this.frames)}`);
      await new Promise<void>((resolve) => {
        this.waiters.push(resolve);
        setTimeout(resolve, 50); // not a check: a wake-up for a predicate no frame changes (the deadline)
      });
    }
  }

  close(): void {
    this.controller.abort();
  }
}

let hub: TestHub;
const clients: SseClient[] = [];

async function open(query = '', headers: Record<string, string> = { 'X-Tenant-ID': '1' }): Promise<SseClient> {
  const client = await SseClient.open(`${hub.url}/api/platform/events/stream${query}`, headers);
  clients.push(client);
  await client.waitFor(() => client.frames.some((f) => f.comment?.startsWith('connected')));
  return client;
}

async function emit(tenantId: number, type: string, payload: Record<string, unknown>): Promise<number> {
  return hub.services.db.withTenant(tenantId, (tx) => hub.services.events.emit(tx, type, payload));
}

const updated = (tenantId: number, orgId: number) => emit(tenantId, 'org.updated', { orgId, tenantId });

beforeAll(async () => {
  hub = await startTestHub({ 'svc.events.stream.poll-every': '200ms', 'svc.events.stream.heartbeat': '150ms', 'svc.events.stream.batch': 3, 'svc.events.stream.max-per-tenant': 3 });
  const owner = new pg.Client({ connectionString: hub.ownerUrl });
  await owner.connect();
  await owner.query(`insert into core.tenants (id, code, name) values (2, 'second', 'Second'), (3, 'third', 'Third'), (4, 'fourth', 'Fourth')`);
  await owner.end();
});

afterAll(async () => {
  for (const c of clients) c.close();
  await hub.stop();
});

describe('GET /api/platform/events/stream', () => {
  it('streams the envelope {topic, payload (a JSON string), capturedAt} with an id per event', async () => {
    const client = await open();
    expect(client.status).toBe(200);
    expect(client.contentType).toContain('text/event-stream');
    const id = await emit(1, 'org.created', { orgId: 7, tenantId: 1, name: 'Sales' });
    await client.waitFor(() => client.events().length === 1);
    const [event] = client.events();
    expect(event).toEqual({ id: String(id), topic: 'org.created', payload: { orgId: 7, tenantId: 1, name: 'Sales' }, capturedAt: expect.any(String) });
    expect(Math.abs(Date.parse(event!.capturedAt) - Date.now())).toBeLessThan(10_000);
    client.close();
  });

  it('a subscriber only ever sees its own tenant', async () => {
    const one = await open();
    const two = await open('', { 'X-Tenant-ID': '2' });
    for (let i = 0; i < 4; i++) {
      await updated(1, 100 + i);
      await updated(2, 200 + i);
    }
    await one.waitFor(() => one.events().length === 4);
    await two.waitFor(() => two.events().length === 4);
    expect(one.events().map((e) => e.payload.orgId)).toEqual([100, 101, 102, 103]);
    expect(two.events().map((e) => e.payload.orgId)).toEqual([200, 201, 202, 203]);
    one.close();
    two.close();
  });

  it('filters by repeatable topic globs against the full type', async () => {
    const client = await open('?topic=org.arch*&topic=*.moved');
    await updated(1, 1);
    await emit(1, 'org.moved', { orgId: 1, tenantId: 1, newParentId: 2 });
    await emit(1, 'decision.dormant.onboarding', { entity: 'x' });
    await emit(1, 'org.archived', { id: 1, code: 'sales' });
    // Marker: a later matching event; events arrive in order, so once it is here nothing earlier is still coming.
    await emit(1, 'org.archived', { id: 99, code: 'marker' });
    await client.waitFor(() => client.events().some((e) => e.payload.code === 'marker'));
    expect(client.events().map((e) => e.topic)).toEqual(['org.moved', 'org.archived', 'org.archived']);
    client.close();
  });

  it('a client reconnecting with Last-Event-ID misses nothing and gets nothing twice', async () => {
    const first = await open();
    await updated(1, 300);
    await first.waitFor(() => first.events().length === 1);
    const last = first.events()[0]!.id;
    first.close();
    for (let i = 1; i <= 7; i++) await updated(1, 300 + i); // more than one poll batch (3)
    await updated(2, 999);
    // Zero-padded, as some clients store it: the same id.
    const again = await open('', { 'X-Tenant-ID': '1', 'Last-Event-ID': String(last).padStart(100, '0') });
    await updated(1, 308);
    await updated(1, 309); // the marker: once it is here, nothing earlier is still coming
    await again.waitFor(() => again.events().some((e) => e.payload.orgId === 309));
    expect(again.events().map((e) => e.payload.orgId)).toEqual([301, 302, 303, 304, 305, 306, 307, 308, 309]);
    again.close();
  });

  it('a fresh stream states where it starts, as an id without data before anything else: a client cut before its first event resumes from there and misses nothing', async () => {
    const first = await open();
    await first.waitFor(() => first.frames.some((f) => f.id !== undefined));
    // Right after the opening comment, before any heartbeat or event; no data, so no message.
    expect(first.frames[1]).toEqual({ id: expect.stringMatching(/^\d+$/) });
    const start = first.frames[1]!.id!;
    first.close();
    for (const orgId of [501, 502, 503]) await updated(1, orgId);
    await updated(2, 998);
    const again = await open('', { 'X-Tenant-ID': '1', 'Last-Event-ID': start });
    await updated(1, 504); // the marker
    await again.waitFor(() => again.events().some((e) => e.payload.orgId === 504));
    expect(again.events().map((e) => e.payload.orgId)).toEqual([501, 502, 503, 504]);
    // A resumed stream states nothing of the kind: its client has its Last-Event-ID.
    expect(again.frames.filter((f) => f.id !== undefined && f.data === undefined)).toEqual([]);
    again.close();
  });

  it('a Last-Event-ID above every event id starts at the newest event, not at the oldest', async () => {
    let newest = 0;
    for (const orgId of [390, 391]) newest = await updated(1, orgId); // history it must not replay
    // Older than the position a stream starts from: the poller's, once it has passed them, or (nobody
    // listening: a poll forgot its position) the head read then, once the outbox's readers read them
    // (below the oldest transaction open on the server).
    const poller = hub.services.stream as unknown as { position?: { id: number } };
    await until('the history to be behind the starting position', async () => {
      if (poller.position) return poller.position.id >= newest;
      const { rows } = await hub.services.db.crossTenant('test', (tx) =>
        tx.query<{ n: number }>('select count(*)::int as n from events.outbox where id = $1 and txid < pg_snapshot_xmin(pg_current_snapshot())', [newest]),
      );
      return rows[0]!.n === 1;
    });
    await updated(1, 400);
    const ahead = await open('', { 'X-Tenant-ID': '1', 'Last-Event-ID': '9007199254740991' });
    await updated(1, 401); // the marker
    await ahead.waitFor(() => ahead.events().some((e) => e.payload.orgId === 401));
    ahead.close();
    // Nothing of the tenant's history before it (390, 391 and the tests above): at most what the poller had
    // not yet passed when it connected, as for a client without Last-Event-ID.
    const seen = ahead.events().map((e) => e.payload.orgId as number);
    expect(seen.filter((orgId) => orgId < 400)).toEqual([]);
    expect(seen).toContain(401);
  });

  it('sends heartbeat comments while idle', async () => {
    const client = await open('?topic=nothing.matches');
    await client.waitFor(() => client.frames.filter((f) => f.comment === 'ping').length >= 2, 3000);
    // The opening comment states the period (ms), so a client can watch for silence from the start.
    expect(client.frames[0]?.comment).toBe('connected; heartbeat 150');
    client.close();
  });

  it('needs a tenant and svc_integrator like the rest of /api/platform', async () => {
    const res = await fetch(`${hub.url}/api/platform/events/stream`);
    expect(res.status).toBe(401);
    expect(await res.json()).toEqual({ error: 'no tenant in security context' });
    // A resume position that is no event id: the message names what the caller gave, the header or the query parameter.
    const range = 'must be an event id (a whole number from 0 to 9007199254740991)';
    const bad = await fetch(`${hub.url}/api/platform/events/stream`, { headers: { 'X-Tenant-ID': '1', 'Last-Event-ID': 'yesterday' } });
    expect({ status: bad.status, body: await bad.json() }).toEqual({ status: 400, body: { error: `Last-Event-ID ${range}`, field: 'Last-Event-ID' } });
    const badQuery = await fetch(`${hub.url}/api/platform/events/stream?lastEventId=abc`, { headers: { 'X-Tenant-ID': '1' } });
    expect({ status: badQuery.status, body: await badQuery.json() }).toEqual({ status: 400, body: { error: `lastEventId ${range}`, field: 'lastEventId' } });
    // Topics are bounded: at most 50, each at most 200 characters.
    const long = await fetch(`${hub.url}/api/platform/events/stream?topic=${'*'.repeat(201)}`, { headers: { 'X-Tenant-ID': '1' } });
    expect({ status: long.status, body: await long.json() }).toEqual({ status: 400, body: { error: 'topic must be at most 200 characters', field: 'topic' } });
    const many = await fetch(`${hub.url}/api/platform/events/stream?${Array.from({ length: 51 }, (_, i) => `topic=t${i}`).join('&')}`, { headers: { 'X-Tenant-ID': '1' } });
    // The error of the alternative the value is (a list), not of the other (one string).
    expect({ status: many.status, body: await many.json() }).toEqual({ status: 400, body: { error: 'topic must have at most 50 items', field: 'topic' } });
  });

  it('a tenant holds at most svc.events.stream.max-per-tenant streams open; one more is a 429, other tenants unaffected', async () => {
    const third = { 'X-Tenant-ID': '3' };
    const held = [await open('', third), await open('', third), await open('', third)];
    const refused = await fetch(`${hub.url}/api/platform/events/stream`, { headers: third });
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).toBe('5');
    expect(await refused.json()).toEqual({
      error: 'too many open event streams for this tenant: at most 3 at once in one hub process (svc.events.stream.max-per-tenant); close one, then reconnect',
    });
    const other = await open('', { 'X-Tenant-ID': '2' });
    other.close();
    held[0]!.close();
    await until('the closed stream to be released', () => hub.services.stream.countFor(3) === 2);
    held.push(await open('', third));
    for (const client of held) client.close();
  });

  it('a client gone while its subscription catches up (after Last-Event-ID) releases it too', async () => {
    const stream = hub.services.stream;
    const original = stream.subscribe.bind(stream);
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const made: Array<Promise<unknown>> = [];
    let entered = 0;
    // The catch-up made slow: the client goes away while it runs.
    stream.subscribe = async (options) => {
      entered++;
      await held;
      const subscribed = original(options);
      made.push(subscribed);
      return subscribed;
    };
    try {
      const aborts = Array.from({ length: 3 }, () => new AbortController());
      const requests = aborts.map((abort) =>
        fetch(`${hub.url}/api/platform/events/stream`, { headers: { 'X-Tenant-ID': '4', 'Last-Event-ID': '0' }, signal: abort.signal }).catch(() => undefined),
      );
      await until('every request to reach the subscription', () => entered === 3);
      for (const abort of aborts) abort.abort();
      await Promise.all(requests);
      // The hub has seen every client go (each gave its place back) before the subscriptions are made.
      await until('the hub to see the clients gone', () => stream.placesFor(4) === 0);
      release();
      await until('the held subscriptions to be made', () => made.length === 3);
      await Promise.allSettled(made);
      // Each was made after its client had gone, and released.
      await until('the subscriptions made after their clients went to be released', () => stream.countFor(4) === 0);
    } finally {
      stream.subscribe = original;
      release();
    }
  });

  it('a client gone while its catch-up is part-way through releases it at once; the catch-up stops writing (no crash)', async () => {
    const stream = hub.services.stream as unknown as { db: TestHub['services']['db']; countFor(t: number): number };
    const realDb = stream.db;
    let reads = 0;
    let heldReadsDone = 0;
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    // The stream's own reads of tenant 2's events: the second batch of the catch-up waits.
    stream.db = Object.assign(Object.create(realDb), {
      withTenant: async (tenantId: number, fn: Parameters<typeof realDb.withTenant>[1]) => {
        if (tenantId === 2 && ++reads >= 2) {
          await held;
          try {
            return await realDb.withTenant(tenantId, fn);
          } finally {
            heldReadsDone++;
          }
        }
        return realDb.withTenant(tenantId, fn);
      },
    });
    const abort = new AbortController();
    try {
      const first = await emit(2, 'org.created', { orgId: 100, tenantId: 2, name: 'first' });
      for (let i = 0; i < 8; i++) await updated(2, 100 + i);
      // All nine readable by the outbox's readers first (they read below the oldest transaction
      // open on the server, which other suites' transactions hold back now and then): else the
      // catch-up's first read comes back short and it goes live without a second read.
      await until(
        'the events to be readable in order',
        async () =>
          (
            await realDb.crossTenant('test', (tx) =>
              tx.query<{ n: number }>('select count(*)::int as n from events.outbox where tenant_id = 2 and id >= $1 and txid < pg_snapshot_xmin(pg_current_snapshot())', [first]),
            )
          ).rows[0]!.n >= 9,
        45_000,
      );
      const request = fetch(`${hub.url}/api/platform/events/stream`, { headers: { 'X-Tenant-ID': '2', 'Last-Event-ID': String(first - 1) }, signal: abort.signal }).catch(() => undefined);
      await until('the catch-up to wait on its second read', () => reads >= 2);
      expect(stream.countFor(2)).toBe(1);
      abort.abort();
      await request;
      await until('the place to be released while the catch-up waits', () => stream.countFor(2) === 0);
      release();
      // The rest of the catch-up is not written to the ended response (that was an uncaught
      // 'write after end' that stopped the process); the hub goes on serving streams.
      await until('the held read to come back to the catch-up', () => heldReadsDone >= 1);
      // What it does with that read (and with any read after it) is done before the hub serves the stream below.
      await new Promise((r) => setImmediate(r));
      const again = await open('', { 'X-Tenant-ID': '2' });
      again.close();
    } finally {
      abort.abort(); // a failure above must not leave the stream open for the tests after it
      stream.db = realDb;
      release();
    }
  }, 90_000);

  it('a burst of clients gone before the handler runs leaves no place taken', async () => {
    const { connect } = await import('node:net');
    const port = Number(new URL(hub.url).port);
    const tries = Array.from({ length: 60 }, (_, i) =>
      new Promise<void>((resolve) => {
        const socket = connect(port, '127.0.0.1', () => {
          socket.write('GET /api/platform/events/stream HTTP/1.1\r\nHost: x\r\nX-Tenant-ID: 4\r\n\r\n');
          setTimeout(() => socket.destroy(), i % 2);
        });
        socket.on('close', () => resolve());
        socket.on('error', () => undefined);
      }),
    );
    await Promise.all(tries);
    await until('every place of tenant 4 to be free', () => hub.services.stream.countFor(4) === 0, 5_000);
    const after = await open('', { 'X-Tenant-ID': '4' });
    after.close();
  });

  it('one poller serves every subscriber, and closing a client releases its subscription', async () => {
    const a = await open();
    const b = await open();
    expect(hub.services.stream.count()).toBeGreaterThanOrEqual(2);
    a.close();
    b.close();
    await until('every subscription released', () => hub.services.stream.count() === 0, 3_000);
  });
});

describe('a resume further behind than svc.events.stream.max-buffer', () => {
  let small: TestHub;

  beforeAll(async () => {
    small = await startTestHub({ 'svc.events.stream.max-buffer': 1024, 'svc.events.stream.batch': 10 });
  });

  afterAll(async () => {
    await small.stop();
  });

  it('one connection carries the whole backlog at the client\'s pace: a client that does not read stops the catch-up, and reading on gets every event once, in order, then live', async () => {
    // About 8 MB of frames: more than the stream's buffers (16 kB, and max-buffer: 1 kB) and what
    // loopback TCP holds for a client that does not read (about 4 MB here).
    const ids = await small.services.db.withTenant(1, async (tx) => {
      const made: number[] = [];
      for (let i = 0; i < 4000; i++) made.push(await small.services.events.emit(tx, 'org.archived', { id: 1000 + i, code: 'c'.repeat(2000) }));
      return made;
    });
    const { connect } = await import('node:net');
    const socket = connect(Number(new URL(small.url).port), '127.0.0.1');
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    socket.write(`GET /api/platform/events/stream HTTP/1.1\r\nHost: x\r\nX-Tenant-ID: 1\r\nLast-Event-ID: ${ids[0]! - 1}\r\n\r\n`);
    socket.pause(); // the client does not read
    const subscribers = (small.services.stream as unknown as { subscribers: Set<{ position: { id: number }; live: boolean }> }).subscribers;
    await until('the subscription to be made', () => subscribers.size === 1);
    const [sub] = [...subscribers];
    // The catch-up waits for the client: it stops short of the backlog's end (what loopback TCP and
    // the stream's buffers hold), and stays there.
    let stalled = -1;
    await until('the catch-up to stop moving', async () => {
      const before = sub!.position.id;
      // A window of stillness, kept: no event marks the catch-up waiting for the client's room. A
      // catch-up that did not wait for the client runs to the backlog's end and fails the check below.
      await new Promise((r) => setTimeout(r, 300));
      if (sub!.position.id !== before) return false;
      stalled = before;
      return true;
    }, 15_000);
    expect(sub!.live).toBe(false);
    expect(stalled).toBeLessThan(ids.at(-1)!);
    // Reading on, slowly: everything arrives on this one connection, then a live event.
    let text = '';
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString('latin1');
      socket.pause();
      setTimeout(() => socket.resume(), 2);
    });
    socket.resume();
    const got = () => [...text.matchAll(/^id: (\d+)$/gm)].map((m) => Number(m[1]));
    await until('the whole backlog', () => got().length >= ids.length, 20_000);
    await until('the subscription to go live', () => sub!.live);
    const live = await small.services.db.withTenant(1, (tx) => small.services.events.emit(tx, 'org.updated', { orgId: 9999, tenantId: 1 }));
    await until('the live event', () => got().includes(live), 10_000);
    socket.destroy();
    expect(text).not.toContain('client too slow');
    expect(got()).toEqual([...ids, live]);
    await until('the place to be released', () => small.services.stream.countFor(1) === 0);
    expect((await fetch(`${small.url}/q/health/ready`)).status).toBe(200);
  });
});

describe('a resuming client that stops reading', () => {
  let stall: TestHub;

  beforeAll(async () => {
    // max-buffer at its default (1 MiB), heartbeats every second: a client taking nothing for 4 s is ended.
    stall = await startTestHub({ 'svc.events.stream.batch': 10, 'svc.events.stream.heartbeat': '1s' });
  });

  afterAll(async () => {
    await stall.stop();
  });

  it('is ended as too slow after four heartbeat periods without taking anything; resuming with Last-Event-ID loses nothing', async () => {
    // About 6 MB of frames: more than loopback TCP and the stream's buffers hold for a client that does not read.
    const ids = await stall.services.db.withTenant(1, async (tx) => {
      const made: number[] = [];
      for (let i = 0; i < 3000; i++) made.push(await stall.services.events.emit(tx, 'org.archived', { id: 40_000 + i, code: 'c'.repeat(2000) }));
      return made;
    });
    const { connect } = await import('node:net');
    const socket = connect(Number(new URL(stall.url).port), '127.0.0.1');
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    socket.write(`GET /api/platform/events/stream HTTP/1.1\r\nHost: x\r\nX-Tenant-ID: 1\r\nLast-Event-ID: ${ids[0]! - 1}\r\n\r\n`);
    socket.pause(); // the client does not read
    let text = '';
    try {
      await until('the subscription to be made', () => stall.services.stream.countFor(1) === 1);
      // Its place is released (before, it was kept until the connection died).
      await until('the stalled catch-up to be ended', () => stall.services.stream.countFor(1) === 0, 20_000);
      socket.on('data', (chunk: Buffer) => {
        text += chunk.toString('latin1');
      });
      const ended = new Promise<void>((resolve) => {
        socket.once('close', () => resolve());
      });
      socket.on('error', () => undefined);
      socket.resume();
      await ended;
    } finally {
      socket.destroy();
    }
    // What it received (a frame cut short by the reset is not counted), then a resume after its last event.
    const got = [...text.matchAll(/^id: (\d+)\ndata: .*\n\n/gm)].map((m) => Number(m[1]));
    expect(got.length).toBeLessThan(ids.length);
    expect(got).toEqual(ids.slice(0, got.length));
    const rest = await SseClient.open(`${stall.url}/api/platform/events/stream`, { 'X-Tenant-ID': '1', 'Last-Event-ID': String(got.at(-1) ?? ids[0]! - 1) });
    try {
      await rest.waitFor(() => rest.events().length >= ids.length - got.length, 30_000);
      expect([...got, ...rest.events().map((e) => Number(e.id))]).toEqual(ids);
    } finally {
      rest.close();
    }
  }, 90_000);

  it('one that reads slowly but on is waited for, however long the whole takes: the backlog arrives on one connection', async () => {
    // About 6 MB, read a chunk (at most 64 kB) every 50 ms: longer than four heartbeat periods in all.
    // What the hub sees move is coarse (the kernel's buffers, megabytes on loopback, open up in large
    // steps), so the client reads on at a pace that shows the hub progress within four periods.
    const ids = await stall.services.db.withTenant(1, async (tx) => {
      const made: number[] = [];
      for (let i = 0; i < 3000; i++) made.push(await stall.services.events.emit(tx, 'org.archived', { id: 50_000 + i, code: 'c'.repeat(2000) }));
      return made;
    });
    const { connect } = await import('node:net');
    const socket = connect(Number(new URL(stall.url).port), '127.0.0.1');
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    socket.write(`GET /api/platform/events/stream HTTP/1.1\r\nHost: x\r\nX-Tenant-ID: 1\r\nLast-Event-ID: ${ids[0]! - 1}\r\n\r\n`);
    let text = '';
    let chunks = 0;
    socket.on('data', (chunk: Buffer) => {
      chunks++;
      text += chunk.toString('latin1');
      socket.pause();
      setTimeout(() => socket.resume(), 50);
    });
    const got = () => [...text.matchAll(/^id: (\d+)$/gm)].map((m) => Number(m[1]));
    const began = Date.now();
    try {
      await until('the whole backlog', () => got().length >= ids.length || text.includes('client too slow'), { timeoutMs: 30_000, detail: () => `${got().length} of ${ids.length}, ${text.length} bytes, ${chunks} chunks` });
      expect(text).not.toContain('client too slow');
      expect(got()).toEqual(ids);
      expect(Date.now() - began).toBeGreaterThan(4_000);
      expect(stall.services.stream.countFor(1)).toBe(1);
    } finally {
      socket.destroy();
    }
  }, 90_000);
});

describe('a live client that stops reading', () => {
  let hub2: TestHub;

  beforeAll(async () => {
    // Batches of 10 frames of about 2 kB: less than max-buffer (64 kB) each, so the stream ends
    // only once the client's TCP buffers are full and the hub's fill up behind them.
    hub2 = await startTestHub({ 'svc.events.stream.max-buffer': 65536, 'svc.events.stream.batch': 10, 'svc.events.stream.heartbeat': '1s' });
  });

  afterAll(async () => {
    await hub2.stop();
  });

  it('is ended as too slow; if it does not read what is left either, its connection is reset after one heartbeat period; one that reads gets the reason, then the connection closes', async () => {
    const { connect } = await import('node:net');
    const open = async () => {
      const socket = connect(Number(new URL(hub2.url).port), '127.0.0.1');
      await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
      socket.write('GET /api/platform/events/stream HTTP/1.1\r\nHost: x\r\nX-Tenant-ID: 1\r\n\r\n');
      socket.pause();
      return socket;
    };
    const ending = (socket: import('node:net').Socket) =>
      new Promise<string>((resolve) => {
        socket.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? 'error'));
        socket.once('end', () => resolve('end'));
      });
    const stalled = await open(); // never reads
    const reading = await open(); // reads only once its stream has ended
    try {
      await until('both to be subscribed', () => hub2.services.stream.countFor(1) === 2);
      // About 12 MB of live events: more than loopback TCP holds for a client that does not read.
      await hub2.services.db.withTenant(1, async (tx) => {
        for (let i = 0; i < 6000; i++) await hub2.services.events.emit(tx, 'org.archived', { id: 20_000 + i, code: 'c'.repeat(2000) });
      });
      await until('both to be ended as too slow', () => hub2.services.stream.countFor(1) === 0, 30_000);
      // The one that reads now gets what was queued, the reason, and the end of the connection.
      let text = '';
      reading.on('data', (chunk: Buffer) => {
        text += chunk.toString('latin1');
      });
      const readingEnd = ending(reading);
      reading.resume();
      expect(await readingEnd).toBe('end');
      expect(text).toMatch(/^connection: close\r$/im);
      expect(text).toMatch(/: client too slow; reconnect with Last-Event-ID\n\n\r\n0\r\n\r\n$/); // the last chunk, then the end
      // The one that does not read: after a heartbeat period the hub has reset its connection
      // (what was queued for it freed, its place given back), so reading now finds it cut short.
      await until('the hub to reset the connection of the one that does not read', () => hub2.services.stream.placesFor(1) === 0, 10_000);
      let tail = '';
      stalled.on('data', (chunk: Buffer) => {
        tail += chunk.toString('latin1');
      });
      const stalledEnd = ending(stalled);
      stalled.resume();
      // What its own TCP buffer held arrives, then the connection ends (an end or a reset, as the
      // client's kernel reports it); the rest, the reason included, was dropped with the connection.
      expect(['end', 'ECONNRESET']).toContain(await stalledEnd);
      expect(tail).not.toContain('client too slow');
      expect(tail).not.toMatch(/\r\n0\r\n\r\n$/);
    } finally {
      stalled.destroy();
      reading.destroy();
    }
  }, 60_000);
});

describe('a live client that reads promptly', () => {
  let hub3: TestHub;

  beforeAll(async () => {
    // A max-buffer far below one poll's frames (200 of about 1 kB).
    hub3 = await startTestHub({ 'svc.events.stream.max-buffer': 4096, 'svc.events.stream.batch': 200, 'svc.events.stream.poll-every': '200ms' });
  });

  afterAll(async () => {
    await hub3.stop();
  });

  it('is not ended for one poll\'s burst larger than max-buffer: it is judged on what earlier polls left unread', async () => {
    const client = await SseClient.open(`${hub3.url}/api/platform/events/stream`, { 'X-Tenant-ID': '1' });
    try {
      await client.waitFor(() => client.frames.some((f) => f.comment?.startsWith('connected')));
      await until('the subscription', () => hub3.services.stream.countFor(1) === 1);
      // One transaction of 150 events (≈ 150 kB, one poll), then a marker in a later poll.
      await hub3.services.db.withTenant(1, async (tx) => {
        for (let i = 0; i < 150; i++) await hub3.services.events.emit(tx, 'org.archived', { id: 30_000 + i, code: 'c'.repeat(1000) });
      });
      await client.waitFor(() => client.events().length >= 150, 10_000);
      const marker = await hub3.services.db.withTenant(1, (tx) => hub3.services.events.emit(tx, 'org.updated', { orgId: 31_000, tenantId: 1 }));
      await client.waitFor(() => client.events().some((e) => e.id === String(marker)), 10_000);
      expect(client.frames.some((f) => f.comment?.includes('client too slow'))).toBe(false);
      expect(client.events().map((e) => Number(e.payload.id ?? e.payload.orgId))).toEqual([...Array.from({ length: 150 }, (_, i) => 30_000 + i), 31_000]);
      expect(hub3.services.stream.countFor(1)).toBe(1);
    } finally {
      client.close();
    }
  });
});

describe('the stream of a token that expires', () => {
  let issuer: TestIssuer;
  let oidc: TestHub;

  beforeAll(async () => {
    issuer = await startIssuer();
    oidc = await startTestHub({ 'svc.oidc.issuer': issuer.issuer, 'svc.events.stream.poll-every': '200ms', 'svc.events.stream.heartbeat': '300ms' });
  });

  afterAll(async () => {
    await oidc?.stop();
    await issuer?.close();
  });

  const integrator = (expiresIn: number, subject: string) => issuer.mint({ tenant_id: 1, realm_access: { roles: ['svc_integrator'] } }, { expiresIn, subject });
  const emitThere = (orgId: number) => oidc.services.db.withTenant(1, (tx) => oidc.services.events.emit(tx, 'org.updated', { orgId, tenantId: 1 }));

  it('ends when the hub would refuse its token (exp plus the 5 s of clock tolerance), while a stream of a valid token goes on', async () => {
    // Expired a second ago: still accepted for about 4 s (the clock tolerance), then refused.
    const short = await integrator(-1, 'stream-short');
    const long = await integrator(300, 'stream-long');
    const expiring = await SseClient.open(`${oidc.url}/api/platform/events/stream`, { Authorization: `Bearer ${short}` });
    const lasting = await SseClient.open(`${oidc.url}/api/platform/events/stream`, { Authorization: `Bearer ${long}` });
    try {
      expect([expiring.status, lasting.status]).toEqual([200, 200]);
      await expiring.waitFor(() => expiring.frames.some((f) => f.comment?.startsWith('connected')));
      await lasting.waitFor(() => lasting.frames.some((f) => f.comment?.startsWith('connected')));
      await until('both subscriptions', () => oidc.services.stream.countFor(1) === 2);
      await emitThere(1);
      await expiring.waitFor(() => expiring.events().length === 1 || expiring.ended, 10_000);
      await expiring.waitFor(() => expiring.ended, 15_000);
      expect(expiring.frames.at(-1)?.comment).toBe('the token expired; reconnect with Last-Event-ID');
      await until('the expired subscription released', () => oidc.services.stream.countFor(1) === 1);
      // Nothing after its end reaches it; the other stream gets it.
      const after = await emitThere(2);
      await lasting.waitFor(() => lasting.events().some((e) => e.id === String(after)), 10_000);
      expect(expiring.events().map((e) => e.payload.orgId)).not.toContain(2);
      // Reconnecting with the same token is refused.
      const again = await fetch(`${oidc.url}/api/platform/events/stream`, { headers: { Authorization: `Bearer ${short}`, 'Last-Event-ID': String(after) } });
      expect(again.status).toBe(401);
      await again.body?.cancel();
    } finally {
      expiring.close();
      lasting.close();
    }
  });
  it('ends at a heartbeat once its tenant is deactivated or its user locked, with the reason a new call gets', async () => {
    await oidc.services.db.withoutTenant((tx) => tx.query(`insert into core.tenants (id, code, name) values (71, 'stream-gone', 'Stream gone'), (72, 'stream-lock', 'Stream lock') on conflict do nothing`));
    const reader = (tenant: number, subject: string) => issuer.mint({ tenant_id: tenant, realm_access: { roles: ['svc_integrator'] } }, { expiresIn: 300, subject });
    const deactivated = await SseClient.open(`${oidc.url}/api/platform/events/stream`, { Authorization: `Bearer ${await reader(71, 'stream-tenant')}` });
    const locked = await SseClient.open(`${oidc.url}/api/platform/events/stream`, { Authorization: `Bearer ${await reader(72, 'stream-locked')}` });
    const bystander = await SseClient.open(`${oidc.url}/api/platform/events/stream`, { Authorization: `Bearer ${await reader(72, 'stream-other')}` });
    try {
      expect([deactivated.status, locked.status, bystander.status]).toEqual([200, 200, 200]);
      // A few heartbeats with everything allowed: every stream stays open.
      await bystander.waitFor(() => bystander.frames.filter((f) => f.comment === 'ping').length >= 3, 10_000);
      expect([deactivated.ended, locked.ended, bystander.ended]).toEqual([false, false, false]);
      await oidc.services.db.withoutTenant((tx) => tx.query('update core.tenants set active = false where id = 71'));
      const lockedRows = await oidc.services.db.withTenant(72, (tx) => tx.query(`update core.users set locked = true where subject = 'stream-locked'`));
      expect(lockedRows.rowCount).toBe(1);
      // Past the directory's cache, as an administrator's change through the API would be.
      oidc.services.directory.invalidate();
      await deactivated.waitFor(() => deactivated.ended, 10_000);
      await locked.waitFor(() => locked.ended, 10_000);
      expect(deactivated.frames.at(-1)?.comment).toBe('access ended: tenant inactive; reconnect with Last-Event-ID');
      expect(locked.frames.at(-1)?.comment).toBe('access ended: account locked; reconnect with Last-Event-ID');
      await until('their subscriptions released', () => oidc.services.stream.countFor(71) === 0 && oidc.services.stream.countFor(72) === 1);
      // Another user of the tenant reads on.
      const pings = bystander.frames.filter((f) => f.comment === 'ping').length;
      await bystander.waitFor(() => bystander.frames.filter((f) => f.comment === 'ping').length > pings + 2, 10_000);
      expect(bystander.ended).toBe(false);
    } finally {
      deactivated.close();
      locked.close();
      bystander.close();
    }
  });
});
