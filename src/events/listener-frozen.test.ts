import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { freeze, thaw } from '../../test/harness/freeze.js';
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

describe('outbox listener, the database frozen', () => {
  it('a start on a frozen database returns within its connect timeout; after the thaw it connects again and wake-ups come', async () => {
    const listener = new OutboxListener(server.url, 1_000);
    const frozen = freeze(server.clusterDir);
    try {
      const began = performance.now();
      // Was: still starting, for ever while frozen (the connect had no bound).
      expect(await within(listener.start().then(() => 'started'), 20_000, 'still starting after 20 s')).toBe('started');
      expect(performance.now() - began).toBeLessThan(10_000);
      expect(listener.listening()).toBe(false);
    } finally {
      thaw(frozen);
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

  it('a stop while a connect hangs ends at once and cuts it: no listening connection is left after the thaw', async () => {
    const listener = new OutboxListener(server.url, 60_000);
    const frozen = freeze(server.clusterDir);
    let starting: Promise<void> | undefined;
    try {
      starting = listener.start();
      // The connect under way: its socket connected to the frozen server (the kernel's backlog), its startup unanswered.
      await until('the connect to reach the server', () => listener.connectReachedServer(), { everyMs: 10 });
      const began = performance.now();
      expect(await within(listener.stop().then(() => 'stopped'), 20_000, 'still stopping after 20 s')).toBe('stopped');
      expect(performance.now() - began).toBeLessThan(2_000);
    } finally {
      thaw(frozen);
    }
    // The start ends too (its connect cut), and keeps nothing.
    expect(await within(starting.then(() => 'ended'), 10_000, 'start still under way')).toBe('ended');
    // Was: the connect under way completed after the thaw and its connection stayed open, listening, after the stop.
    // No wait: the start has ended, so its connect is over, kept or not.
    expect(listener.listening()).toBe(false);
    // The server's side of a connection cut by the client ends once the thawed server reads that (one kept never would).
    await until('no listener connection on the server', async () => (await listenerConnections()) === 0);
  }, 60_000);

  it('a reconnect through a path that accepts and answers nothing (a proxy whose server is away) is given up and tried again: wake-ups resume once the server is reachable', async () => {
    // A TCP proxy on loopback: forwards to the server, or, while `away`, accepts and says nothing.
    let away = false;
    let silent = 0;
    const sockets = new Set<Socket>();
    const proxy: Server = createServer((inbound) => {
      sockets.add(inbound);
      inbound.on('close', () => sockets.delete(inbound));
      inbound.on('error', () => undefined);
      if (away) {
        silent++;
        return;
      }
      const outbound = createConnection({ host: '127.0.0.1', port: server.port });
      sockets.add(outbound);
      outbound.on('close', () => sockets.delete(outbound));
      outbound.on('error', () => inbound.destroy());
      inbound.on('error', () => outbound.destroy());
      inbound.pipe(outbound).pipe(inbound);
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    const through = new URL(server.url);
    through.host = `127.0.0.1:${(proxy.address() as { port: number }).port}`;
    through.searchParams.delete('host');
    const listener = new OutboxListener(through.toString(), 1_000);
    try {
      await listener.start();
      expect(listener.listening()).toBe(true);
      // The connection lost while the server is away: the reconnect (1 s later) finds a silent path.
      away = true;
      for (const socket of sockets) socket.destroy();
      await until('the listener to notice its connection gone', () => !listener.listening());
      await until('a reconnect on the silent path', () => silent > 0, { timeoutMs: 20_000 });
      away = false;
      // Was: the reconnect waited for ever on the silent path; no wake-up came again.
      await until('the listener to listen again', () => listener.listening(), { timeoutMs: 20_000 });
      const woken = new Promise<string>((resolve) => listener.onEvent(() => resolve('woken')));
      await notify();
      expect(await within(woken, 10_000, 'not woken')).toBe('woken');
    } finally {
      await listener.stop();
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => proxy.close(resolve));
    }
  }, 60_000);
});
