import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from '@jest/globals';
import { Agent } from 'undici';
import { HttpError } from './errors.js';
import { OPEN_TIMEOUT_MS, reconnectDelay, type StreamEvent, tailEvents } from './event-tail.js';
import { Hub } from './http.js';
import { runSvc } from '../../test/harness/svc-cli.js';
import { DATABASE_UNREACHABLE } from '../../apiserver/routes/events/event-stream.js';

/**
 * `svc events tail`'s reconnections against a scripted stand-in for the hub's event stream: each
 * connection is answered by the next step of a script (a stream of events, or an error status), so
 * the answers a real hub gives only under load (429 too many open event streams, a proxy's 502, a
 * restart's 503) come in a known order. Waits go through the `wait` option, which records them.
 */

type Step = (req: IncomingMessage, res: ServerResponse) => void;

/** Event `id` as the hub sends it: an org.created whose payload is `{"id": id}`. */
const frame = (id: number) => `id: ${id}\ndata: ${JSON.stringify({ topic: 'org.created', payload: JSON.stringify({ id }), capturedAt: '2025-03-01T10:00:00Z' })}\n\n`;

/** Events `ids`, then the stream ends (as the hub ends a client that fell behind). */
const events =
  (...ids: number[]): Step =>
  (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write('retry: 10\n\n');
    for (const id of ids) res.write(frame(id));
    res.end();
  };

const refuse =
  (status: number, body: string, headers: Record<string, string> = {}): Step =>
  (_req, res) => {
    res.writeHead(status, { 'content-type': body.startsWith('{') ? 'application/json' : 'text/plain', ...headers });
    res.end(body);
  };

interface Script {
  url: string;
  /** The Last-Event-ID of each connection, in order ('' without one). */
  lastIds: string[];
  close(): Promise<void>;
}

let open: Script[] = [];

async function script(...steps: Step[]): Promise<Script> {
  const lastIds: string[] = [];
  const server = createServer((req, res) => {
    lastIds.push(String(req.headers['last-event-id'] ?? ''));
    const step = steps.shift();
    if (step) step(req, res);
    else refuse(500, '{"error":"script over"}')(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const s: Script = {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    lastIds,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
  open.push(s);
  return s;
}

afterEach(async () => {
  await Promise.all(open.map((s) => s.close()));
  open = [];
});

/** Runs tailEvents until it ends (or `stopAfter` events), recording what it printed and waited. */
async function tail(s: Script, options: { stopAfter?: number; retryFirst?: boolean; token?: string; openTimeoutMs?: number } = {}) {
  const stop = new AbortController();
  const hub = new Hub({ url: s.url, token: options.token ?? 'tok' });
  const seen: StreamEvent[] = [];
  const notices: string[] = [];
  const waits: number[] = [];
  let connections = 0;
  let error: unknown;
  try {
    await tailEvents(hub, {
      topics: [],
      signal: stop.signal,
      retryFirst: options.retryFirst,
      openTimeoutMs: options.openTimeoutMs,
      onEvent: (event) => {
        seen.push(event);
        if (seen.length === options.stopAfter) stop.abort();
      },
      onNotice: (text) => notices.push(text),
      onConnected: () => connections++,
      wait: async (ms) => void waits.push(ms),
    });
  } catch (err) {
    error = err;
  } finally {
    await hub.close();
  }
  return { ids: seen.map((e) => e.id), notices, waits, connections, error };
}

describe('events tail: reconnections', () => {
  it('waits out 429 (its Retry-After), 502, 503 and 504 on a reconnection and resumes after the last event', async () => {
    const s = await script(
      events(1, 2),
      refuse(429, '{"error":"too many open event streams"}', { 'retry-after': '5' }),
      refuse(503, 'Service Unavailable'),
      refuse(502, 'Bad Gateway'),
      refuse(504, 'Gateway Timeout'),
      events(3),
    );
    const r = await tail(s, { stopAfter: 3 });
    expect(r.error).toBeUndefined();
    expect(r.ids).toEqual(['1', '2', '3']);
    // every reconnection asks for what came after event 2: nothing lost
    expect(s.lastIds).toEqual(['', '2', '2', '2', '2', '2']);
    // the stream's retry (10 ms) after the close; Retry-After's 5 s; then a bounded backoff of at least 1 s, doubling
    expect(r.waits).toEqual([10, 5_000, 2_000, 4_000, 8_000]);
    expect(r.connections).toBe(2);
    expect(r.notices).toEqual([
      'the hub closed the stream; reconnecting in 10 ms',
      'stream lost: too many open event streams (HTTP 429, Retry-After: 5); waiting 5 s, then reconnecting after event 2',
      'stream lost: Service Unavailable (HTTP 503); waiting 2 s, then reconnecting after event 2',
      'stream lost: Bad Gateway (HTTP 502); waiting 4 s, then reconnecting after event 2',
      'stream lost: Gateway Timeout (HTTP 504); waiting 8 s, then reconnecting after event 2',
      'reconnected after event 2',
    ]);
  });

  it('a 401 on a reconnection ends it with the hint of the other commands; a 403 ends it too', async () => {
    const s = await script(events(1), refuse(401, 'Unauthorized'));
    const r = await tail(s);
    expect(r.ids).toEqual(['1']);
    expect(r.error).toBeInstanceOf(HttpError);
    expect((r.error as HttpError).status).toBe(401);
    expect((r.error as HttpError).message).toBe('Unauthorized; the stored token was refused (expired?): svc login again');
    expect(r.waits).toEqual([10]);

    const forbidden = await script(events(1), refuse(403, 'Forbidden'));
    const f = await tail(forbidden);
    expect((f.error as HttpError).status).toBe(403);
    expect(f.waits).toEqual([10]);
  });

  it('the first connection: its error is the command\'s (a 503 is not waited out, a 401 has the hint); with retryFirst (the TUI) it is waited out', async () => {
    const first = await tail(await script(refuse(503, '{"error":"hub starting"}', { 'retry-after': '2' }), events(1)));
    expect((first.error as HttpError).status).toBe(503);
    expect(first.waits).toEqual([]);

    const unauthorized = await tail(await script(refuse(401, 'Unauthorized')));
    expect((unauthorized.error as HttpError).message).toMatch(/; the stored token was refused \(expired\?\): svc login again$/);

    const s = await script(refuse(503, '{"error":"hub starting"}', { 'retry-after': '2' }), refuse(429, '{"error":"too many open event streams"}', { 'retry-after': '600' }), events(1));
    const again = await tail(s, { retryFirst: true, stopAfter: 1 });
    expect(again.error).toBeUndefined();
    expect(again.ids).toEqual(['1']);
    // a Retry-After beyond two minutes is cut to two minutes
    expect(again.waits).toEqual([2_000, 120_000]);
    expect(again.notices).toEqual([
      'cannot open the stream: hub starting (HTTP 503, Retry-After: 2); waiting 2 s, then reconnecting',
      'cannot open the stream: too many open event streams (HTTP 429, Retry-After: 600); waiting 120 s, then reconnecting',
      'connected',
    ]);
  });

  it('rides out a connection cut mid-event, a 500 and a hub that is down, then restarted on its address: every event once, in order', async () => {
    // A real hub's life on one loopback port: a stream cut while it sends event 3 (kill -9), the
    // restarting hub's 500, no hub at all (connection refused), then the hub back with 3 and 4.
    const lastIds: string[] = [];
    let connection = 0;
    const server = createServer((req, res) => {
      lastIds.push(String(req.headers['last-event-id'] ?? ''));
      connection++;
      if (connection === 1) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(`retry: 10\n\n${frame(1)}${frame(2)}${frame(3).slice(0, 20)}`, () => res.socket?.destroy());
      } else if (connection === 2) {
        res.writeHead(500, { 'content-type': 'application/json' });
        res.end('{"error":"internal error"}');
      } else {
        // the stream stays open until the tail has what it waits for
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(`retry: 10\n\n${frame(3)}${frame(4)}`);
      }
    });
    const listen = (port: number) => new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
    await listen(0);
    const port = (server.address() as AddressInfo).port;
    const stop = new AbortController();
    const hub = new Hub({ url: `http://127.0.0.1:${port}`, token: 'tok' }, stop.signal);
    const ids: string[] = [];
    const notices: string[] = [];
    const waits: number[] = [];
    try {
      await tailEvents(hub, {
        topics: [],
        signal: stop.signal,
        onEvent: (event) => {
          ids.push(event.id);
          if (ids.length === 4) stop.abort();
        },
        onNotice: (text) => notices.push(text),
        wait: async (ms) => {
          waits.push(ms);
          // after the 500 the hub goes away; after the refused connection it is back on its port
          if (waits.length === 2) {
            server.closeAllConnections();
            await new Promise<void>((resolve) => server.close(() => resolve()));
          }
          if (waits.length === 3) await listen(port);
        },
      });
    } finally {
      await hub.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
    expect(ids).toEqual(['1', '2', '3', '4']);
    // the half-sent event 3 is not printed; every reconnection asks for what came after event 2
    expect(lastIds).toEqual(['', '2', '2']);
    expect(waits).toEqual([1_000, 2_000, 4_000]);
    expect(notices).toHaveLength(4);
    expect(notices[0]).toMatch(/^stream lost: .+; waiting 1 s, then reconnecting after event 2$/);
    expect(notices[1]).toBe('stream lost: internal error (HTTP 500); waiting 2 s, then reconnecting after event 2');
    expect(notices[2]).toMatch(/^stream lost: cannot reach http:\/\/127\.0\.0\.1:\d+: .*ECONNREFUSED.*; waiting 4 s, then reconnecting after event 2$/);
    expect(notices[3]).toBe('reconnected after event 2');
  });

  it('a connection cut without a word (no heartbeat for three periods) is lost and resumed after the last event', async () => {
    const lastIds: string[] = [];
    const heartbeatMs = 40;
    /** When the hub last wrote on the first connection, and when the client said it lost it. */
    let silentSince = Number.NaN;
    let lostAt = Number.NaN;
    const server = createServer((req, res) => {
      lastIds.push(String(req.headers['last-event-id'] ?? ''));
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      if (lastIds.length === 1) {
        // as the hub writes them: heartbeats every 40 ms; then the network goes: nothing more, and no end either
        res.write(`retry: 10\n: connected\n\n${frame(1)}: ping\n\n`);
        setTimeout(() => {
          res.write(': ping\n\n');
          silentSince = performance.now();
        }, heartbeatMs);
      } else res.write(`retry: 10\n: connected\n\n${frame(2)}`);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const stop = new AbortController();
    const hub = new Hub({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, token: 'tok' }, stop.signal);
    const ids: string[] = [];
    const notices: string[] = [];
    try {
      await tailEvents(hub, {
        topics: [],
        signal: stop.signal,
        minSilenceMs: 0,
        onEvent: (event) => {
          ids.push(event.id);
          if (ids.length === 2) stop.abort();
        },
        onNotice: (text) => {
          if (text.startsWith('stream lost') && Number.isNaN(lostAt)) lostAt = performance.now();
          notices.push(text);
        },
        wait: async () => undefined,
      });
    } finally {
      await hub.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
    expect(ids).toEqual(['1', '2']);
    expect(lastIds).toEqual(['', '1']);
    expect(notices[0]).toMatch(/^stream lost: nothing from the hub for [\d.]+ s, not even its heartbeat \(every [\d.]+ s\); waiting 1 s, then reconnecting after event 1$/);
    // Three periods of silence (120 ms), well before the kernel's keepalive would have said so (about 12 minutes): timed
    // from the hub's last write to the notice, a hang guard of twenty-five times those three periods.
    expect(lostAt - silentSince).toBeLessThan(25 * 3 * heartbeatMs);
  });

  it('a hub that states its heartbeat period (`: connected; heartbeat <ms>`) is watched from the start: silence before any heartbeat is lost too', async () => {
    const lastIds: string[] = [];
    const server = createServer((req, res) => {
      lastIds.push(String(req.headers['last-event-id'] ?? ''));
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      // as the hub opens a stream, then the network goes before its first heartbeat: nothing more, and no end
      if (lastIds.length === 1) res.write(`retry: 10\n: connected; heartbeat 40\n\n${frame(1)}`);
      else res.write(`retry: 10\n: connected; heartbeat 40\n\n${frame(2)}`);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const stop = new AbortController();
    // Without the stated period the first connection is never found lost: give up after 5 s.
    const giveUp = setTimeout(() => stop.abort(), 5_000);
    const hub = new Hub({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, token: 'tok' }, stop.signal);
    const ids: string[] = [];
    const notices: string[] = [];
    try {
      await tailEvents(hub, {
        topics: [],
        signal: stop.signal,
        minSilenceMs: 0,
        onEvent: (event) => {
          ids.push(event.id);
          if (ids.length === 2) stop.abort();
        },
        onNotice: (text) => notices.push(text),
        wait: async () => undefined,
      });
    } finally {
      clearTimeout(giveUp);
      await hub.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
    expect(ids).toEqual(['1', '2']);
    expect(lastIds).toEqual(['', '1']);
    expect(notices[0]).toMatch(/^stream lost: nothing from the hub for [\d.]+ s, not even its heartbeat \(every [\d.]+ s\); waiting 1 s, then reconnecting after event 1$/);
  });

  it('a hub that takes the connection and never answers: the open is given up after openTimeoutMs, said, and retried from Last-Event-ID; the first connection\'s is the command\'s error', async () => {
    const hanging: ServerResponse[] = [];
    const hang: Step = (_req, res) => void hanging.push(res);
    try {
      const s = await script(events(1), hang, events(2));
      const started = performance.now();
      const r = await tail(s, { stopAfter: 2, openTimeoutMs: 300 });
      // undici's timers are coarse (about a second): far below its two minutes, and the 30 s default open timeout,
      // all the same (the notice says the 0.3 s cut it): a hang guard of a quarter of that default.
      expect(performance.now() - started).toBeLessThan(OPEN_TIMEOUT_MS / 4);
      expect(r.error).toBeUndefined();
      expect(r.ids).toEqual(['1', '2']);
      expect(s.lastIds).toEqual(['', '1', '1']);
      expect(r.waits).toEqual([10, 1_000]);
      expect(r.notices).toEqual([
        'the hub closed the stream; reconnecting in 10 ms',
        `stream lost: ${s.url} took the connection but sent no answer within 0.3 s; waiting 1 s, then reconnecting after event 1`,
        'reconnected after event 1',
      ]);

      const first = await tail(await script(hang), { openTimeoutMs: 300 });
      expect((first.error as Error).message).toMatch(/^http:\/\/127\.0\.0\.1:\d+ took the connection but sent no answer within 0\.3 s$/);
    } finally {
      for (const res of hanging) res.destroy();
    }
  });

  it('a stream is not cut by a body timeout between heartbeats: the open asks for none (the silence watch is its guard)', async () => {
    // An agent whose body timeout is shorter than the hub's heartbeat period: the stream ignores it.
    const s = await script((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(': connected; heartbeat 1500\n\n');
      setTimeout(() => {
        res.write(': ping\n\n');
        res.end(`id: 1\ndata: ${JSON.stringify({ topic: 'org.created', payload: '{}', capturedAt: '2025-03-01T10:00:00Z' })}\n\n`);
      }, 1_500);
    });
    const hub = new Hub({ url: s.url, token: 'tok' });
    (hub as unknown as { agent: Agent }).agent = new Agent({ bodyTimeout: 500 });
    const res = await hub.open('/api/platform/events/stream', {}, {});
    const text = await res.body.text();
    await hub.close();
    expect(text).toContain('id: 1');
  });

  it('reconnectDelay: which failures are waited out, and how long', () => {
    expect(reconnectDelay(new HttpError(400, 'bad topic', undefined), 1, 3_000)).toBeUndefined();
    expect(reconnectDelay(new HttpError(401, 'no', undefined), 1, 3_000)).toBeUndefined();
    for (const final of [400, 403, 404, 501, 505]) expect(reconnectDelay(new HttpError(final, 'no', undefined), 1, 3_000)).toBeUndefined();
    for (const transient of [408, 500, 502, 503, 504, 507]) expect(reconnectDelay(new HttpError(transient, 'later', undefined), 1, 3_000)?.ms).toBe(3_000);
    expect(reconnectDelay(new HttpError(503, 'down', undefined, 0), 1, 3_000)?.ms).toBe(1_000);
    expect(reconnectDelay(new Error('socket hang up'), 1, 3_000)?.ms).toBe(3_000);
    expect(reconnectDelay(new Error('socket hang up'), 2, 3_000)?.ms).toBe(6_000);
    expect(reconnectDelay(new Error('socket hang up'), 20, 3_000)?.ms).toBe(30_000);
  });
});

describe('events tail: the hub\'s answer while its database is unreachable', () => {
  it('a 200 that ends at once with the reason (the hub\'s exact answer) is reconnected after its retry, saying why, and loses nothing', async () => {
    const down: Step = (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8' });
      res.end(DATABASE_UNREACHABLE);
    };
    const s = await script(events(1), down, down, down, down, down, events(2));
    const r = await tail(s, { stopAfter: 2 });
    expect(r.error).toBeUndefined();
    expect(r.ids).toEqual(['1', '2']);
    expect(s.lastIds).toEqual(['', '1', '1', '1', '1', '1', '1']);
    expect(r.waits).toEqual([10, 3_000, 3_000, 3_000, 3_000, 3_000]);
    // One line while it lasts, one when the stream is back: the 200 heads of the outage's answers
    // are not the stream being back (each ends at once, with nothing but the reason).
    expect(r.notices).toEqual([
      'the hub closed the stream; reconnecting in 10 ms',
      'the hub closed the stream (database unavailable; reconnect with Last-Event-ID); reconnecting in 3000 ms',
      'reconnected after event 1',
    ]);
    // Back only once the stream shows it is live (here its event).
    expect(r.connections).toBe(2);
  });

  it('the same failure again is not said again until the stream is back; another one is, and so is a hub that ends a live stream each time', async () => {
    const down: Step = (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8' });
      res.end(DATABASE_UNREACHABLE);
    };
    const s = await script(
      events(1),
      refuse(503, 'Service Unavailable'),
      refuse(503, 'Service Unavailable'),
      refuse(503, 'Service Unavailable'),
      down,
      down,
      events(2),
      events(3),
    );
    const r = await tail(s, { stopAfter: 3 });
    expect(r.ids).toEqual(['1', '2', '3']);
    expect(r.waits).toEqual([10, 1_000, 2_000, 4_000, 3_000, 3_000, 10]);
    expect(r.notices).toEqual([
      'the hub closed the stream; reconnecting in 10 ms',
      'stream lost: Service Unavailable (HTTP 503); waiting 1 s, then reconnecting after event 1',
      'the hub closed the stream (database unavailable; reconnect with Last-Event-ID); reconnecting in 3000 ms',
      'reconnected after event 1',
      'the hub closed the stream; reconnecting in 10 ms',
      'reconnected after event 2',
    ]);
  });
});

describe('svc events tail', () => {
  const svc = (url: string, signal?: AbortSignal, args: string[] = []) =>
    runSvc(['events', 'tail', ...args], { env: { SVC_URL: url, SVC_TOKEN: 'expired', SVC_CLI_CONFIG: '/nonexistent/svc-config.json' }, signal });

  it('a hub that takes the connection and never answers: exit 1 after 30 s, saying so, not after two minutes', async () => {
    const hanging: ServerResponse[] = [];
    const s = await script((_req, res) => void hanging.push(res));
    const started = Date.now();
    try {
      const r = await svc(s.url);
      // undici's timers are coarse (about a second)
      expect(Date.now() - started).toBeGreaterThanOrEqual(29_000);
      expect(Date.now() - started).toBeLessThan(40_000);
      expect(r).toEqual({ code: 1, out: '', err: `error: ${s.url} took the connection but sent no answer within 30 s\n` });
    } finally {
      for (const res of hanging) res.destroy();
    }
  }, 60_000);

  it('a 401 at the first connection and at a reconnection: exit 1 with the hint about the token', async () => {
    const first = await svc((await script(refuse(401, 'Unauthorized'))).url);
    expect(first).toEqual({ code: 1, out: '', err: 'error: Unauthorized; the token in SVC_TOKEN was refused (expired?) (HTTP 401)\n' });

    const later = await svc((await script(events(7), refuse(401, 'Unauthorized'))).url);
    expect(later.code).toBe(1);
    expect(later.out).toMatch(/ 7 {2}org\.created {2}\{"id":7\}\n$/);
    expect(later.err).toBe('the hub closed the stream; reconnecting in 10 ms\nerror: Unauthorized; the token in SVC_TOKEN was refused (expired?) (HTTP 401)\n');
  });

  it('--json: a payload\'s DEL, C1 controls and format characters (another user\'s text) as \\u escapes, one object per line: nothing a terminal obeys or reorders', async () => {
    const stop = new AbortController();
    const name = 'Acme\u202e\u009b2J\u007f\u200b\u001b[31m';
    const s = await script((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(`id: 9\ndata: ${JSON.stringify({ topic: 'org.created', payload: JSON.stringify({ name }), capturedAt: '2025-03-01T10:00:00Z' })}\n\n`);
      setTimeout(() => stop.abort(), 100);
    });
    const r = await svc(s.url, stop.signal, ['--json']);
    expect(r).toMatchObject({ code: 0, err: '' });
    expect([...r.out].filter((ch) => ch !== '\n' && /[\p{Cc}\p{Cf}]/u.test(ch))).toEqual([]);
    expect(r.out.split('\n')).toHaveLength(2);
    const event = JSON.parse(r.out) as { id: string; payload: string };
    expect(event.id).toBe('9');
    expect(JSON.parse(event.payload)).toEqual({ name });
  });

  it('a database outage of the hub: one line on stderr when it begins, one when the stream is back, whatever the attempts between; no more', async () => {
    const stop = new AbortController();
    const down: Step = (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8' });
      res.end(DATABASE_UNREACHABLE);
    };
    // The hub's opening of a live stream, event 8, and it stays open until Ctrl-C.
    const back: Step = (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8' });
      res.write('retry: 3000\n: connected; heartbeat 15000\n\n');
      res.write(`id: 8\ndata: ${JSON.stringify({ topic: 'org.created', payload: '{}', capturedAt: '2025-03-01T10:00:01Z' })}\n\n`);
      setTimeout(() => stop.abort(), 100);
    };
    const s = await script(events(7), down, down, back);
    const r = await svc(s.url, stop.signal);
    expect(r.code).toBe(0);
    expect(r.out.trimEnd().split('\n').map((l) => l.split('  ')[1])).toEqual(['7', '8']);
    expect(s.lastIds).toEqual(['', '7', '7', '7']);
    expect(r.err).toBe(
      'the hub closed the stream; reconnecting in 10 ms\n' +
        'the hub closed the stream (database unavailable; reconnect with Last-Event-ID); reconnecting in 3000 ms\n' +
        'reconnected after event 7\n',
    );
  }, 30_000);

  it('--open-timeout: the wait for the stream\'s head, at the first connection; a wrong value is a usage error before anything is sent', async () => {
    const hanging: ServerResponse[] = [];
    const s = await script((_req, res) => void hanging.push(res));
    const started = performance.now();
    try {
      const r = await svc(s.url, undefined, ['--open-timeout', '2s']);
      // undici's timers are coarse (about a second); the flag's 2 s, not the 30 s default: under half of that.
      expect(performance.now() - started).toBeGreaterThanOrEqual(1_500);
      expect(performance.now() - started).toBeLessThan(OPEN_TIMEOUT_MS / 2);
      expect(r).toEqual({ code: 1, out: '', err: `error: ${s.url} took the connection but sent no answer within 2 s\n` });
    } finally {
      for (const res of hanging) res.destroy();
    }
    for (const [value, says] of [
      ['soon', "--open-timeout must be a duration like 3s, 500ms or 1m, not 'soon'"],
      ['500ms', "--open-timeout must be at least 1s, not '500ms'"],
      ['2h', "--open-timeout must be at most 1h (3600s), not '2h'"],
    ]) {
      const r = await svc(s.url, undefined, ['--open-timeout', value!]);
      expect(r.code).toBe(2);
      expect(r.err).toContain(`svc events tail: ${says}`);
    }
    expect(s.lastIds).toHaveLength(1);
  }, 30_000);

  it('a 503 at a reconnection: one line on stderr saying it waits and why, then the events after the last one', async () => {
    const stop = new AbortController();
    const s = await script(events(7), refuse(503, '{"error":"database unavailable"}', { 'retry-after': '1' }), (_req, res) => {
      // event 8, and the stream stays open until Ctrl-C
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(`id: 8\ndata: ${JSON.stringify({ topic: 'org.created', payload: '{}', capturedAt: '2025-03-01T10:00:01Z' })}\n\n`);
      setTimeout(() => stop.abort(), 100);
    });
    const r = await svc(s.url, stop.signal);
    expect(r.code).toBe(0);
    expect(r.out.trimEnd().split('\n').map((l) => l.split('  ')[1])).toEqual(['7', '8']);
    expect(s.lastIds.slice(0, 3)).toEqual(['', '7', '7']);
    expect(r.err.split('\n').slice(0, 3)).toEqual([
      'the hub closed the stream; reconnecting in 10 ms',
      'stream lost: database unavailable (HTTP 503, Retry-After: 1); waiting 1 s, then reconnecting after event 7',
      'reconnected after event 7',
    ]);
  });
});
