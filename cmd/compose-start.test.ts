import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { type AddressInfo, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { Config } from '../src/config/config.js';
import { createTestDatabase } from '../test/harness/database.js';
import { startHub } from './compose.js';

/** A start of the hub that fails (startHub, cmd/compose.ts): what it had acquired is released, and a port in use fails it first. */

const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) {
    // A server a failed start left running (the bug these tests look for) does not outlive the run.
    const pidFile = join(dir, 'data', 'pg', 'postmaster.pid');
    if (existsSync(pidFile)) {
      try {
        process.kill(Number(readFileSync(pidFile, 'utf8').split('\n')[0]), 'SIGQUIT');
      } catch {
        // gone
      }
    }
    rmSync(dir, { recursive: true, force: true });
  }
});

function dataDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'svc-start-'));
  chmodSync(dir, 0o755);
  dirs.push(dir);
  return join(dir, 'data');
}

function config(overrides: Record<string, string | number | boolean>): Config {
  return Config.load({ env: {}, overrides: { 'svc.log.level': 'silent', 'svc.embedding.provider': 'none', 'svc.http.host': '127.0.0.1', 'svc.http.port': 0, ...overrides } });
}

/** A step after the database's start that fails: leader election through a Lease without POD_NAMESPACE (cmd/leader.ts). */
const FAILS_AFTER_THE_DATABASE = { 'svc.leader.backend': 'kubernetes' };

async function withoutPodNamespace<T>(fn: () => Promise<T>): Promise<T> {
  const saved = process.env.POD_NAMESPACE;
  delete process.env.POD_NAMESPACE;
  try {
    return await fn();
  } finally {
    if (saved !== undefined) process.env.POD_NAMESPACE = saved;
  }
}

describe('a start that fails', () => {
  it('after the embedded PostgreSQL started and the pools opened: the server is stopped and the data directory freed', async () => {
    const data = dataDir();
    await expect(withoutPodNamespace(() => startHub(config({ 'svc.data-dir': data, ...FAILS_AFTER_THE_DATABASE }), { api: true, background: true }))).rejects.toThrow('needs POD_NAMESPACE');
    // Was: the server left running (its postmaster.pid there) and hub.pid naming this process.
    expect(existsSync(join(data, 'pg', 'postmaster.pid'))).toBe(false);
    expect(existsSync(join(data, 'hub.pid'))).toBe(false);
    expect(execFileSync('ps', ['-eo', 'args'], { encoding: 'utf8' })).not.toContain(`-D ${join(data, 'pg')} `);
  }, 120_000);

  it('after the pools opened on an external database: no session of the hub is left on it', async () => {
    const url = await createTestDatabase();
    await expect(withoutPodNamespace(() => startHub(config({ 'svc.datasource.url': url, ...FAILS_AFTER_THE_DATABASE }), { api: true, background: true }))).rejects.toThrow('needs POD_NAMESPACE');
    const owner = new pg.Client({ connectionString: url });
    await owner.connect();
    try {
      const { rows } = await owner.query<{ application_name: string }>(
        `select application_name from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid() and application_name like 'svc-hub%'`,
      );
      // Was: the application and worker pools' connections and the outbox listener's, open for good.
      expect(rows).toEqual([]);
    } finally {
      await owner.end();
    }
  }, 120_000);

  it('on a port another process holds: at once, before the embedded PostgreSQL is made or started, saying so', async () => {
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const port = (taken.address() as AddressInfo).port;
    const data = dataDir();
    try {
      const startedAt = Date.now();
      await expect(startHub(config({ 'svc.data-dir': data, 'svc.http.port': port }), { api: true, background: false })).rejects.toThrow(
        `cannot listen on 127.0.0.1:${port}: listen EADDRINUSE: address already in use 127.0.0.1:${port} (another process holds the port, perhaps a svc-hub already running: stop it, or choose another port with PORT)`,
      );
      // Was: found only once the cluster was made, the server started and the migrations applied.
      expect(existsSync(join(data, 'pg'))).toBe(false);
      expect(existsSync(join(data, 'hub.pid'))).toBe(false);
      expect(Date.now() - startedAt).toBeLessThan(5_000);
    } finally {
      await new Promise((resolve) => taken.close(resolve));
    }
  }, 120_000);
});
