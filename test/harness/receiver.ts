import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Socket } from 'node:net';

/**
 * The tests' one scriptable HTTP peer on loopback: a webhook receiver, or a small source a connector
 * reads (an OpenAPI document, rows the database refuses). It records every request (path, headers,
 * raw body, time) and answers as its `behave` function says: a status, headers and body, after a
 * delay, or never (hang). The demo source (src/demo-source) is the realistic source; the engine's
 * failure modes are its test-only fault routes (src/demo-source/faults.ts, `startDemoSource({ faults: true })`).
 */

export interface Received {
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
  at: number;
}

export type Behaviour = { status?: number; headers?: Record<string, string>; body?: string; delayMs?: number } | 'hang';

export interface Receiver {
  url: string;
  received: Received[];
  /** Requests to one path. */
  on(path: string): Received[];
  /** Waits until `count` requests reached `path` (or any path when undefined). */
  waitFor(count: number, path?: string, timeoutMs?: number): Promise<Received[]>;
  behave: (path: string, received: Received) => Behaviour;
  /** Connections open now (a peer killed: its connections close once the receiver has read what it sent). */
  connections(): number;
  close(): Promise<void>;
}

export async function startReceiver(behave: (path: string, received: Received) => Behaviour = () => ({ status: 200, body: 'ok' })): Promise<Receiver> {
  const received: Received[] = [];
  const sockets = new Set<Socket>();
  const hanging = new Set<ServerResponse>();
  const delayed = new Set<NodeJS.Timeout>();
  const receiver: Receiver = {
    url: '',
    received,
    behave,
    on: (path) => received.filter((r) => r.path === path),
    async waitFor(count, path, timeoutMs = 10_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const got = path === undefined ? received : received.filter((r) => r.path === path);
        if (got.length >= count) return got;
        if (Date.now() > deadline) throw new Error(`receiver: ${got.length} of ${count} requests to ${path ?? 'any path'} within ${timeoutMs} ms`);
        await new Promise((r) => setTimeout(r, 20));
      }
    },
    connections: () => sockets.size,
    close: () =>
      new Promise<void>((resolve) => {
        for (const timer of delayed) clearTimeout(timer);
        for (const res of hanging) res.destroy();
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const entry: Received = { path: req.url ?? '/', headers: req.headers, body: Buffer.concat(chunks).toString('utf8'), at: Date.now() };
      received.push(entry);
      const behaviour = receiver.behave(entry.path, entry);
      if (behaviour === 'hang') {
        hanging.add(res);
        return;
      }
      const answer = () => {
        res.statusCode = behaviour.status ?? 200;
        for (const [name, value] of Object.entries(behaviour.headers ?? {})) res.setHeader(name, value);
        res.end(behaviour.body ?? '');
      };
      if (behaviour.delayMs) {
        // Cleared by close(): a pending answer would hold the test worker open past its end.
        const timer = setTimeout(() => {
          delayed.delete(timer);
          answer();
        }, behaviour.delayMs);
        delayed.add(timer);
      } else answer();
    });
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  receiver.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return receiver;
}

/** Verifies `X-Svc-Signature` as a receiver should: HMAC-SHA256 of the raw body, compared in constant time. */
export function verifySvcSignature(secret: string, received: Received): boolean {
  const header = received.headers['x-svc-signature'];
  if (typeof header !== 'string' || !header.startsWith('sha256=')) return false;
  const expected = Buffer.from(createHmac('sha256', secret).update(received.body, 'utf8').digest('hex'));
  const got = Buffer.from(header.slice('sha256='.length));
  return got.length === expected.length && timingSafeEqual(got, expected);
}
