import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { type EmbeddedDatabase, freePort, startEmbedded } from '../../src/db/embedded.js';
import { type Receiver, startReceiver } from '../../test/harness/receiver.js';
import { until } from '../../test/harness/until.js';
import { killAll, startHubProcess } from './processes.js';

/**
 * The hub's PostgreSQL stopped and started again under load: readiness goes down and comes back, the
 * hub recovers by itself (no restart), requests during the outage fail as unavailable (503, never a
 * 500 and never a hang), a write made after the restart is kept, and
 * the background consumers deliver events written after it.
 */

const dirs: string[] = [];
// Every server started here, each stopped at the end (a second test's server once replaced the
// first test's restarted one in a single variable: that one was left running while its directory
// was removed, ENOTEMPTY in pg_wal).
const servers: EmbeddedDatabase[] = [];
let receiver: Receiver | undefined;

async function startServer(options: Parameters<typeof startEmbedded>[0]): Promise<EmbeddedDatabase> {
  const started = await startEmbedded(options);
  servers.push(started);
  return started;
}

afterAll(async () => {
  await killAll();
  for (const started of servers) await started.stop();
  await receiver?.close();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

const H = { 'X-Tenant-ID': '1', 'content-type': 'application/json' };

describe('PostgreSQL stopped and restarted under load', () => {
  it('readiness goes down and up, the hub recovers without a restart, and no request gets a 500', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-fault-pg-'));
    chmodSync(dir, 0o755);
    dirs.push(dir);
    const port = await freePort();
    let server = await startServer({ dataDir: join(dir, 'data'), database: 'svc', port });
    const hub = await startHubProcess('all', server.url, { SVC_LEADER_CHECK_EVERY: '300ms', SVC_WEBHOOK_SWEEP_EVERY: '500ms' });
    receiver = await startReceiver();
    const integration = await fetch(`${hub.url}/api/tenants/1/integrations`, { method: 'POST', headers: H, body: JSON.stringify({ name: 'after-outage', targetUrl: `${receiver.url}/hook`, eventTypes: ['org.updated'], authMode: 'NONE' }) });
    expect(integration.status).toBe(201);

    // Load: reads and writes in a loop for the whole test, every answer recorded.
    const statuses: Array<{ at: number; status: number | string }> = [];
    let loading = true;
    let n = 0;
    const load = (async () => {
      while (loading) {
        const i = n++;
        const request = i % 3 === 0
          ? fetch(`${hub.url}/api/tenants/1/orgs`, { method: 'POST', headers: H, body: JSON.stringify({ code: `load-${i}`, name: `Load ${i}` }), signal: AbortSignal.timeout(15_000) })
          : fetch(`${hub.url}/api/platform/secrets`, { headers: H, signal: AbortSignal.timeout(15_000) });
        const status = await request.then(async (res) => {
          await res.arrayBuffer();
          return res.status;
        }, (err: Error) => err.name);
        statuses.push({ at: Date.now(), status });
        await new Promise((r) => setTimeout(r, 20)); // the load's pace, not a check
      }
    })();
    await until('load to run', () => statuses.filter((s) => s.status === 200 || s.status === 201).length >= 20, { timeoutMs: 20_000 });

    const down = Date.now();
    await server.stop();
    const ready = async () => (await fetch(`${hub.url}/q/health/ready`).catch(() => undefined))?.status;
    const hubLog = () => `exit ${hub.child.exitCode}; ${hub.output().slice(-4000)}`;
    await until('readiness to go down', async () => (await ready()) === 503, { timeoutMs: 20_000, everyMs: 100, detail: hubLog });
    // The probe needs no credentials: it says the database is unreachable, not where it is (the
    // driver's `connect ECONNREFUSED 127.0.0.1:<port>` goes to the hub's log).
    const health = (await (await fetch(`${hub.url}/q/health/ready`)).json()) as { checks: Array<{ name: string; data?: { error?: string } }> };
    expect(health.checks.find((c) => c.name === 'database')?.data?.error).toBe('database unreachable');
    expect(JSON.stringify(health)).not.toContain(String(port));
    await until('requests during the outage', () => statuses.some((s) => s.at > down && s.status === 503), { timeoutMs: 20_000, detail: () => JSON.stringify(statuses.filter((s) => s.at > down).map((s) => s.status)) });

    const up = Date.now();
    server = await startServer({ dataDir: join(dir, 'data'), database: 'svc', port });
    await until('readiness to come back', async () => (await ready()) === 200, { timeoutMs: 30_000, everyMs: 100, detail: hubLog });
    await until('requests to succeed again', () => statuses.filter((s) => s.at > up && s.status === 200).length >= 20, { timeoutMs: 30_000 });
    loading = false;
    await load;

    expect(hub.child.exitCode).toBeNull(); // the same process throughout
    const written = await fetch(`${hub.url}/api/platform/secrets`, { method: 'POST', headers: H, body: JSON.stringify({ name: 'AFTER_RESTART', value: 'kept' }) });
    expect(written.status).toBe(201);
    const names = ((await (await fetch(`${hub.url}/api/platform/secrets`, { headers: H })).json()) as Array<{ name: string }>).map((s) => s.name);
    expect(names).toContain('AFTER_RESTART');
    // The background work recovered too: an event written after the restart is delivered.
    const org = (await (await fetch(`${hub.url}/api/tenants/1/orgs`, { method: 'POST', headers: H, body: JSON.stringify({ code: 'after', name: 'After' }) })).json()) as { id: number };
    expect((await fetch(`${hub.url}/api/tenants/1/orgs/${org.id}`, { method: 'PUT', headers: H, body: JSON.stringify({ name: 'After the outage' }) })).status).toBe(200);
    await receiver.waitFor(1, '/hook', 20_000);

    // Every answer was a success, or "unavailable" while the database was away: no 500, no hang.
    const kinds = new Set(statuses.map((s) => s.status));
    expect([...kinds].filter((k) => ![200, 201, 503].includes(k as number))).toEqual([]);
    // Once readiness was back, nothing failed any more.
    const lastFailure = Math.max(...statuses.filter((s) => s.status === 503).map((s) => s.at));
    expect(statuses.filter((s) => s.at > lastFailure).every((s) => s.status === 200 || s.status === 201)).toBe(true);
    expect(await hub.stop()).toBe(0);
    await server.stop();
  }, 120_000);

  it('a database that stops answering (every server process stopped with SIGSTOP): readiness answers 503 within svc.health.database-timeout, and 200 once it answers again', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-fault-pg-'));
    chmodSync(dir, 0o755);
    dirs.push(dir);
    const server = await startServer({ dataDir: join(dir, 'data'), database: 'svc' });
    // A small pool and a short connection wait: requests beyond the pool fail fast while it hangs.
    const hub = await startHubProcess('serve', server.url, { SVC_HEALTH_DATABASE_TIMEOUT: '500ms', SVC_DATASOURCE_POOL_SIZE: '3', SVC_DATASOURCE_CONNECT_TIMEOUT: '2s', SVC_AUDIT_DISPATCH_EVERY: '200ms' });
    const ready = async () => {
      const res = await fetch(`${hub.url}/q/health/ready`, { signal: AbortSignal.timeout(10_000) });
      return { status: res.status, body: await res.text() };
    };
    expect((await ready()).status).toBe(200);
    const postmaster = Number(readFileSync(join(server.clusterDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
    const processes = [postmaster, ...execFileSync('pgrep', ['-P', String(postmaster)], { encoding: 'utf8' }).split('\n').filter(Boolean).map(Number)];
    for (const pid of processes) process.kill(pid, 'SIGSTOP');
    // Requests while it hangs: those that got a connection wait for the database (a statement sent
    // may have done its work), the others give up after svc.datasource.connect-timeout with a 503.
    const frozenAt = Date.now();
    const answers: Array<{ status: number | string; ms: number; body?: string }> = [];
    const requests = Array.from({ length: 8 }, () =>
      fetch(`${hub.url}/api/platform/secrets`, { headers: H, signal: AbortSignal.timeout(60_000) }).then(
        async (res) => answers.push({ status: res.status, ms: Date.now() - frozenAt, body: await res.text() }),
        (err: Error) => answers.push({ status: err.name, ms: Date.now() - frozenAt }),
      ),
    );
    try {
      // At most the pool's 3 connections wait on the database; the other requests are refused soon.
      await until('requests beyond the pool to be refused', () => answers.filter((a) => a.status === 503).length >= 5, { timeoutMs: 15_000, detail: () => JSON.stringify(answers) });
      expect(answers.every((a) => a.status === 503 && a.ms < 8_000)).toBe(true);
      // Named for what it is: no connection in time, not a database known to be down.
      expect(JSON.parse(answers[0]!.body!)).toEqual({ error: 'database unavailable', hint: expect.stringContaining('svc.datasource.connect-timeout') });
      // An audited write is refused after one connection wait, not two (its audit entry does not
      // wait for a connection again: it is written once the database is back, with the 503). The
      // measure of one wait: a read sent with the writes, refused after its one wait on the same
      // machine at the same moment; a second wait would add svc.datasource.connect-timeout (2 s).
      const timed = async (init: RequestInit) => {
        const sent = Date.now();
        const res = await fetch(`${hub.url}/api/platform/secrets`, { headers: H, ...init, signal: AbortSignal.timeout(30_000) });
        return { status: res.status, ms: Date.now() - sent };
      };
      const [read, ...writes] = await Promise.all([
        timed({}),
        ...['frozen-1', 'frozen-2'].map((name) => timed({ method: 'POST', body: JSON.stringify({ name, value: 'v-frozen-0000' }) })),
      ]);
      expect([read, ...writes].map((w) => w.status)).toEqual([503, 503, 503]);
      expect(Math.max(...writes.map((w) => w.ms))).toBeLessThan(read!.ms + 1_000);
      // Several probes in a row: each answers in about the timeout, none waits for the database.
      for (let i = 0; i < 3; i++) {
        const started = Date.now();
        const frozen = await ready();
        expect(frozen.status).toBe(503);
        expect(frozen.body).toContain('the database did not answer within 500 ms');
        expect(Date.now() - started).toBeLessThan(5_000);
      }
    } finally {
      for (const pid of processes) process.kill(pid, 'SIGCONT');
    }
    await until('readiness to come back', async () => (await ready()).status === 200, { timeoutMs: 30_000, everyMs: 100 });
    // The requests that waited on the database are answered once it answers; none got a 500.
    await Promise.all(requests);
    expect(answers.filter((a) => a.status !== 503 && a.status !== 200)).toEqual([]);
    const secrets = await fetch(`${hub.url}/api/platform/secrets`, { headers: H });
    expect(secrets.status).toBe(200);
    // The refused writes are in the audit trail with the status their callers got.
    const owner = new pg.Client({ connectionString: server.url });
    await owner.connect();
    try {
      await until('the refused writes to be audited', async () => (await owner.query("select 1 from audit.entries where action = 'POST /api/platform/secrets'")).rowCount === 2, { timeoutMs: 10_000 });
      const { rows } = await owner.query<{ status: number; outcome: string }>("select status, outcome from audit.entries where action = 'POST /api/platform/secrets'");
      expect(rows).toEqual([{ status: 503, outcome: 'failure' }, { status: 503, outcome: 'failure' }]);
    } finally {
      await owner.end();
    }
    expect(hub.child.exitCode).toBeNull();
    expect(await hub.stop()).toBe(0);
    await server.stop();
  }, 120_000);
});
