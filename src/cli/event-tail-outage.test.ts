import { spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from '@jest/globals';
import { type EmbeddedDatabase, freePort, startEmbedded } from '../db/embedded.js';
import { packageRoot } from '../package-root.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { until } from '../../test/harness/until.js';

/**
 * `svc events tail` (the real bin/svc.js) against a real hub whose PostgreSQL is stopped: what the
 * user sees on stderr while the hub answers each reconnection with its outage answer, and once the
 * database is back.
 */

const dir = mkdtempSync(join(tmpdir(), 'svc-tail-outage-'));
chmodSync(dir, 0o755);
const servers: EmbeddedDatabase[] = [];
let relay: Server | undefined;
const relayed = new Set<Socket>();

/** A TCP relay in front of the hub counting the stream's requests through it (the CLI's connections). */
async function streamRequestsRelay(hubUrl: string): Promise<{ url: string; requests: () => number }> {
  const upstream = new URL(hubUrl);
  let requests = 0;
  relay = createServer((client) => {
    const server = connect(Number(upstream.port), upstream.hostname);
    for (const socket of [client, server]) {
      relayed.add(socket);
      socket.on('error', () => undefined).on('close', () => {
        relayed.delete(socket);
        client.destroy();
        server.destroy();
      });
    }
    client.on('data', (chunk: Buffer) => {
      requests += chunk.toString('latin1').match(/^GET \/api\/platform\/events\/stream/gm)?.length ?? 0;
    });
    client.pipe(server).pipe(client);
  });
  const listening = relay;
  await new Promise<void>((resolve) => listening.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(listening.address() as { port: number }).port}`, requests: () => requests };
}
let hub: TestHub | undefined;

afterAll(async () => {
  for (const socket of relayed) socket.destroy();
  await new Promise((resolve) => (relay ? relay.close(resolve) : resolve(undefined)));
  await hub?.stop().catch(() => undefined);
  for (const s of servers) await s.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('svc events tail through a database outage of the hub', () => {
  it('one line when it begins, one when the stream is back, whatever the attempts between; no stack; every event after --since once', async () => {
    const port = await freePort();
    servers.push(await startEmbedded({ dataDir: join(dir, 'data'), database: 'svc', port }));
    hub = await startTestHub({ 'svc.datasource.url': servers[0]!.url, 'svc.events.stream.poll-every': '100ms', 'svc.events.stream.heartbeat': '300ms' });
    const running = hub;
    const emit = (orgId: number) => running.services.db.withTenant(1, (tx) => running.services.events.emit(tx, 'org.updated', { orgId, tenantId: 1 }));
    const first = await emit(1);
    await servers[0]!.stop();
    // Started while the database is away, resuming after an event: every connection needs the
    // database (authentication, the resume), so each is the outage's answer until it is back.
    const counted = await streamRequestsRelay(running.url);
    const env = { PATH: process.env.PATH ?? '', SVC_CLI_CONFIG: join(dir, 'absent.json'), SVC_URL: counted.url, SVC_DEV_TENANT: '1' };
    const child = spawn(process.execPath, [join(packageRoot(), 'bin', 'svc.js'), 'events', 'tail', '--since', String(first - 1)], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
    try {
      // Three of the outage's answers at least (one every 3 s): the third request answered once a fourth is sent.
      await until('four requests of the stream', () => counted.requests() >= 4, { timeoutMs: 30_000, everyMs: 100, detail: () => `${counted.requests()}; ${err}` });
      expect(out).toBe('');
      servers.push(await startEmbedded({ dataDir: join(dir, 'data'), database: 'svc', port }));
      const after: number[] = [];
      await until('a write to succeed', async () => {
        try {
          after.push(await emit(2));
          return true;
        } catch {
          return false;
        }
      }, { timeoutMs: 30_000, everyMs: 500 });
      await until('the events to be printed', () => out.split('\n').filter(Boolean).length >= 2, { timeoutMs: 20_000, detail: () => `${out}\n${err}` });
      // The marker: an event written after them is printed after anything printed of them again.
      const marker = await emit(3);
      await until('the marker event to be printed', () => out.includes(`  ${marker}  `), { timeoutMs: 20_000, detail: () => `${out}\n${err}` });
      expect(out.trimEnd().split('\n').map((l) => Number(l.split('  ')[1]))).toEqual([first, after[0], marker]);
      expect(err.split('\n').filter(Boolean)).toEqual([
        'the hub closed the stream (database unavailable; reconnect with Last-Event-ID); reconnecting in 3000 ms',
        `reconnected after event ${first - 1}`,
      ]);
    } finally {
      child.kill('SIGINT');
      expect(await exited).toBe(0);
    }
  }, 120_000);
});
