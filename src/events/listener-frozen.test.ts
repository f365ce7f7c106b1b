import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { freeze, thaw } from '../../test/harness/freeze.js';
import { captureLogs } from '../../test/harness/log-capture.js';
import { until } from '../../test/harness/until.js';
import { type EmbeddedDatabase, startEmbedded } from '../db/embedded.js';
import { OutboxListener } from './listener.js';

/**
 * The outbox listener against a database that accepts connections and answers nothing (its server
 * frozen with SIGSTOP, as the fault suite does), then thawed.
 */

let dir: string;
let server: EmbeddedDatabase;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'listener-frozen-'));
  chmodSync(dir, 0o755);
  server = await startEmbedded({ dataDir: join(dir, 'data') });
}, 60_000);

afterAll(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

async function notify(): Promise<void> {
  const c = new pg.Client({ connectionString: server.url });
  await c.connect();
  try {
    await c.query('notify svc_outbox');
  } finally {
    await c.end();
  }
}

async function listenerConnections(): Promise<number> {
  const c = new pg.Client({ connectionString: server.url });
  await c.connect();
  try {
    const { rows } = await c.query("select count(*)::int as n from pg_stat_activity where application_name = 'svc-hub outbox listener'");
    return rows[0].n;
  } finally {
    await c.end();
  }
}

/** `promise`'s value, or `late` if it has not settled within `ms`. */
async function within<T>(promise: Promise<T>, ms: number, late: string): Promise<T | string> {
  let timer: NodeJS.Timeout | undefined;
  const outcome = await Promise.race([promise, new Promise<string>((resolve) => (timer = setTimeout(() => resolve(late), ms)))]);
  clearTimeout(timer);
  return outcome;
}

/** A connection the proxy accepted: what came in on it, whether it was forwarded, whether it has ended. */
interface Proxied {
  bytesIn: number;
  silent: boolean;
  ended: boolean;
}

/**
 * A TCP proxy on loopback to the server: forwards each connection, or, while `silent()`, accepts it
 * and says nothing. It sees what the server's side would: bytes coming in, a connection ending.
 */
async function startProxy(silent: () => boolean = () => false) {
  const connections: Proxied[] = [];
  const sockets = new Set<Socket>();
  const keep = (socket: Socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  };
  const proxy: Server = createServer((inbound) => {
    const seen: Proxied = { bytesIn: 0, silent: silent(), ended: false };
    connections.push(seen);
    keep(inbound);
    inbound.on('data', (chunk: Buffer) => (seen.bytesIn += chunk.length));
    inbound.on('close', () => (seen.ended = true));
    inbound.on('error', () => undefined);
    if (seen.silent) return;
    const outbound = createConnection({ host: '127.0.0.1', port: server.port });
    keep(outbound);
    outbound.on('error', () => inbound.destroy());
    inbound.on('error', () => outbound.destroy());
    inbound.pipe(outbound).pipe(inbound);
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  const url = new URL(server.url);
  url.host = `127.0.0.1:${(proxy.address() as { port: number }).port}`;
  url.searchParams.delete('host');
  const cutAll = () => {
    for (const socket of sockets) socket.destroy();
  };
  return {
    url: url.toString(),
    connections,
    cutAll,
    close: async () => {
      cutAll();
      await new Promise((resolve) => proxy.close(resolve));
    },
  };
}

describe('outbox listener, the database frozen', () => {
  it('a start on a frozen database returns within its connect timeout; after the thaw it connects again and wake-ups come', async () => {
    const listener = new OutboxListener(server.url, 1_000);
    const logs = captureLogs('warn');
    const frozen = freeze(server.clusterDir);
    try {
      // Was: still starting, for ever while frozen (the connect had no bound).
      expect(await within(listener.start().then(() => 'started'), 20_000, 'still starting after 20 s')).toBe('started');
      expect(listener.listening()).toBe(false);
      // Ended by its bound (nothing else ends a connect to a server that answers nothing), and said so.
      expect(logs.lines()).toContainEqual(expect.objectContaining({ msg: 'outbox listener could not connect; retrying in 1000 ms', err: expect.stringMatching(/timeout/) }));
    } finally {
      thaw(frozen);
      logs.restore();
    }
    try {
      // Retried with back-off (1 s, 2 s, …): connected again once the server answers.
      await until('the listener to listen again', () => listener.listening(), { timeoutMs: 30_000 });
      const woken = new Promise<string>((resolve) => listener.onEvent(() => resolve('woken')));
      await notify();
      expect(await within(woken, 10_000, 'not woken')).toBe('woken');
    } finally {
      await listener.stop();
    }
  }, 60_000);

  it('a stop while a connect hangs ends at once and cuts it: its connection ends while the server is still frozen, none is left after the thaw', async () => {
    // Through a proxy, which sees the connection's end: the frozen server cannot.
    const proxy = await startProxy();
    // A connect bound far beyond the test's: while the server is frozen, only the stop can end the connect.
    const listener = new OutboxListener(proxy.url, 3_600_000);
    try {
      const frozen = freeze(server.clusterDir);
      try {
        const starting = listener.start();
        // The connect under way: its startup sent, forwarded to the frozen server (the kernel's backlog), unanswered.
        const inbound = await until('the connect to send its startup', () => proxy.connections.find((c) => c.bytesIn > 0), { everyMs: 10 });
        expect(await within(listener.stop().then(() => 'stopped'), 20_000, 'still stopping after 20 s')).toBe('stopped');
        // Was: the connect went on (the stop only kept it from being used once connected): its connection ended after the thaw.
        await until("the connect's connection to end, the server still frozen", () => inbound.ended);
        // The start ends too (its connect cut), and keeps nothing.
        expect(await within(starting.then(() => 'ended'), 20_000, 'start still under way')).toBe('ended');
        expect(listener.listening()).toBe(false);
      } finally {
        thaw(frozen);
      }
      // The server's side of the cut connection ends once the thawed server reads that (one kept never would).
      await until('no listener connection on the server', async () => (await listenerConnections()) === 0);
    } finally {
      await proxy.close();
    }
  }, 60_000);

  it('a reconnect through a path that accepts and answers nothing (a proxy whose server is away) is given up and tried again: wake-ups resume once the server is reachable', async () => {
    // The proxy forwards to the server, or, while `away`, accepts and says nothing.
    let away = false;
    const proxy = await startProxy(() => away);
    const listener = new OutboxListener(proxy.url, 1_000);
    try {
      await listener.start();
      expect(listener.listening()).toBe(true);
      // The connection lost while the server is away: the reconnect (1 s later) finds a silent path.
      away = true;
      proxy.cutAll();
      await until('the listener to notice its connection gone', () => !listener.listening());
      await until('a reconnect on the silent path', () => proxy.connections.some((c) => c.silent), { timeoutMs: 20_000 });
      away = false;
      // Was: the reconnect waited for ever on the silent path; no wake-up came again.
      await until('the listener to listen again', () => listener.listening(), { timeoutMs: 20_000 });
      const woken = new Promise<string>((resolve) => listener.onEvent(() => resolve('woken')));
      await notify();
      expect(await within(woken, 10_000, 'not woken')).toBe('woken');
    } finally {
      await listener.stop();
      await proxy.close();
    }
  }, 60_000);
});
