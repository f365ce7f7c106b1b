import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { ClockRunner } from '../clock/clock.js';
import { startEmbedded } from '../db/embedded.js';
import { KEEPALIVE_IDLE_MS } from '../db/pool.js';
import { roleUrl } from '../db/roles.js';
import { AdvisoryLockElector, Leadership } from './leader.js';
import { freeze, thaw } from '../../test/harness/freeze.js';
import { startGatedProcess, stopProcesses } from '../../test/harness/leadership.js';
import { keepaliveSeconds, ssProblem } from '../../test/harness/keepalive.js';
import { describeRequiring } from '../../test/harness/requires.js';
import { until } from '../../test/harness/until.js';

/** The PostgreSQL advisory-lock elector and the leadership gate, against a real server. */

let t: MigratedDatabase;
let url: string;

beforeAll(async () => {
  t = await migratedDatabase();
  url = roleUrl(t.ownerUrl, 'svc_worker');
});

afterAll(async () => {
  await t.close();
});

/** The backend of the connection that holds the lock (followers keep a connection of the same name open). */
async function backendPid(key: string): Promise<number> {
  const { rows } = await t.owner.query(
    `select l.pid from pg_locks l join pg_stat_activity a on a.pid = l.pid
      where l.locktype = 'advisory' and l.granted and a.application_name = $1 and a.datname = current_database()`,
    [`svc-hub leader (${key})`],
  );
  expect(rows.length).toBe(1);
  return rows[0].pid;
}

describe('advisory-lock elector', () => {
  it('one of two leads; release hands over; a killed connection loses it (onLost) and the other takes over', async () => {
    const key = 'test:elector';
    const a = new AdvisoryLockElector(url, key);
    const b = new AdvisoryLockElector(url, key);
    try {
      expect(await a.acquire()).toBe(true);
      expect(await b.acquire()).toBe(false);
      expect(await a.acquire()).toBe(true); // idempotent
      expect(await a.renew()).toBe(true);
      expect([a.isLeader(), b.isLeader()]).toEqual([true, false]);

      await a.release();
      expect(a.isLeader()).toBe(false);
      expect(await b.acquire()).toBe(true);

      let lost = 0;
      b.onLost(() => lost++);
      await t.owner.query('select pg_terminate_backend($1)', [await backendPid(key)]);
      await until('onLost', () => lost === 1);
      expect(b.isLeader()).toBe(false);
      expect(await b.renew()).toBe(false);
      expect(await a.acquire()).toBe(true);
      // b reconnects and finds the lock taken.
      expect(await b.acquire()).toBe(false);
    } finally {
      await a.release();
      await b.release();
    }
  });

  it('keys are independent, and advisory locks are per database', async () => {
    const x = new AdvisoryLockElector(url, 'test:x');
    const y = new AdvisoryLockElector(url, 'test:y');
    // A key whose hashtext is negative: renew still finds the lock in pg_locks.
    const negative = new AdvisoryLockElector(url, 'b');
    try {
      expect(await x.acquire()).toBe(true);
      expect(await y.acquire()).toBe(true);
      expect(await negative.acquire()).toBe(true);
      expect(await negative.renew()).toBe(true);
      expect(await x.renew()).toBe(true);
    } finally {
      await Promise.all([x.release(), y.release(), negative.release()]);
    }
  });
});

describe('advisory-lock elector on a database that does not answer', () => {
  const dirs: string[] = [];
  afterAll(() => {
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  it("release() (the hub's stop) ends within seconds, the leader's and a follower's, their connections cut", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'leader-frozen-'));
    chmodSync(dir, 0o755);
    dirs.push(dir);
    const server = await startEmbedded({ dataDir: join(dir, 'data') });
    const frozen: number[] = [];
    try {
      const key = 'test:frozen';
      // The unlock's query_timeout, and how long closing the connection waits before cutting it.
      const timeoutMs = 1_000;
      const closeTimeoutMs = 1_000;
      const leader = new AdvisoryLockElector(server.url, key, timeoutMs, closeTimeoutMs);
      const follower = new AdvisoryLockElector(server.url, key, timeoutMs, closeTimeoutMs);
      expect(await leader.acquire()).toBe(true);
      expect(await follower.acquire()).toBe(false);
      frozen.push(...freeze(server.clusterDir));
      const began = performance.now();
      let timer: NodeJS.Timeout | undefined;
      const outcome = await Promise.race([
        Promise.all([leader.release(), follower.release()]).then(() => 'released'),
        new Promise((resolve) => (timer = setTimeout(() => resolve('still releasing after 20 s'), 20_000))),
      ]);
      clearTimeout(timer);
      // Was: still releasing, for ever (the connection's end waits for the server to close its side).
      expect(outcome).toBe('released');
      // Within the unlock's query_timeout and the close's wait (2 s together): a hang guard of four times them.
      expect(performance.now() - began).toBeLessThan(4 * (timeoutMs + closeTimeoutMs));
    } finally {
      thaw(frozen);
      await server.stop();
    }
  }, 60_000);

  it("a check's connect to a database that does not answer fails within the elector's timeout, so a start or a stop waiting for it ends", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'leader-frozen-'));
    chmodSync(dir, 0o755);
    dirs.push(dir);
    const server = await startEmbedded({ dataDir: join(dir, 'data') });
    const frozen: number[] = [];
    try {
      frozen.push(...freeze(server.clusterDir));
      const timeoutMs = 1_000;
      const leadership = new Leadership(new AdvisoryLockElector(server.url, 'test:frozen-connect', timeoutMs), { checkEvery: 100 });
      const began = performance.now();
      let timer: NodeJS.Timeout | undefined;
      // The first check connects (the server accepts the connection in its kernel, and answers nothing).
      const outcome = await Promise.race([
        leadership.start().then(async () => {
          await leadership.stop();
          return 'started and stopped';
        }),
        new Promise((resolve) => (timer = setTimeout(() => resolve('still starting after 20 s'), 20_000))),
      ]);
      clearTimeout(timer);
      // Was: still starting, for ever (a connect had no bound; a stop waits for the check under way).
      expect(outcome).toBe('started and stopped');
      expect(leadership.isLeader()).toBe(false);
      // Within the elector's timeout (1 s) for the connect: a hang guard of ten times it.
      expect(performance.now() - began).toBeLessThan(10 * timeoutMs);
    } finally {
      thaw(frozen);
      await server.stop();
    }
  }, 60_000);
});

describeRequiring(ssProblem(), 'ss (iproute2)', 'advisory-lock elector over TCP', () => {
  it("its connection has the pools' TCP keepalive: the first probe after KEEPALIVE_IDLE_MS of silence (ss shows the timer)", async () => {
    // Over TCP whatever the harness's server offers: without `host`, node-postgres connects to 127.0.0.1.
    const tcp = new URL(t.ownerUrl);
    tcp.search = '';
    const key = 'test:keepalive';
    const elector = new AdvisoryLockElector(tcp.toString(), key);
    try {
      expect(await elector.acquire()).toBe(true);
      const { rows } = await t.owner.query<{ port: number }>("select client_port as port from pg_stat_activity where datname = current_database() and application_name = $1 and client_addr = '127.0.0.1'", [
        `svc-hub leader (${key})`,
      ]);
      expect(rows).toHaveLength(1);
      // Was: the OS default delay (7200 s on Linux), a dead path to the database unnoticed for two hours.
      expect(await keepaliveSeconds(rows[0]!.port)).toBeLessThanOrEqual(KEEPALIVE_IDLE_MS / 1000);
    } finally {
      await elector.release();
    }
  });
});

describe('leadership', () => {
  it('gated jobs run only in the leading process; the follower takes over when the leader goes', async () => {
    const key = 'test:leadership';
    const runs = { a: 0, b: 0 };
    const start = (name: 'a' | 'b') => startGatedProcess(new AdvisoryLockElector(url, key), () => runs[name]++);
    const a = await start('a');
    const b = await start('b');
    try {
      expect([a.leadership.isLeader(), b.leadership.isLeader()]).toEqual([true, false]);
      await until('a few runs', () => runs.a >= 3);
      expect(runs.b).toBe(0);
      expect(await b.gated.trigger('job')).toBe(false);
      expect(runs.b).toBe(0);

      // The leader's lock connection dies: it stops at once, the follower leads within a check or two.
      await t.owner.query('select pg_terminate_backend($1)', [await backendPid(key)]);
      await until('a to notice', () => !a.leadership.isLeader());
      // A gated job counts as its first statement, after a synchronous leadership check: from here
      // on, a run of a's is a run that started without the lead (no grace period to sleep through).
      const aRuns = runs.a;
      await until('b to lead', () => b.leadership.isLeader());
      await until('b to run', () => runs.b >= 2);
      expect(a.leadership.isLeader()).toBe(false);
      expect(runs.a).toBe(aRuns);

      // An orderly stop releases at once.
      await b.clock.stop();
      await b.leadership.stop();
      await until('a to lead again', () => a.leadership.isLeader(), 3_000);
    } finally {
      await stopProcesses([a, b]);
    }
  });
  it('a check that wins the leadership while the process stops runs no gated job and tells no listener; the stop gives the leadership up', async () => {
    const key = 'test:stopping';
    const holder = new pg.Client({ connectionString: t.ownerUrl });
    await holder.connect();
    await holder.query('select pg_advisory_lock(hashtext($1))', [key]);
    const elector = new AdvisoryLockElector(url, key);
    // Counts the checks' tries, and the acquisitions won: the case below is one (else it proves nothing).
    let tries = 0;
    let won = 0;
    const acquire = elector.acquire.bind(elector);
    elector.acquire = async () => {
      tries++;
      const ok = await acquire();
      if (ok) won++;
      return ok;
    };
    const leadership = new Leadership(elector, { checkEvery: 100 });
    let elected = 0;
    leadership.onElected(() => elected++);
    const clock = new ClockRunner();
    let runs = 0;
    leadership.gate(clock).schedule('job', { every: 60_000 }, async () => {
      runs++;
    });
    clock.start();
    await leadership.start();
    expect(leadership.isLeader()).toBe(false);
    // The follower's next check is held (its backend frozen) while the lock is freed; the process
    // stops meanwhile (the clocks first, as the hub's stop does), then the check wins.
    const { rows } = await t.owner.query<{ pid: number }>('select pid from pg_stat_activity where application_name = $1 and datname = current_database()', [`svc-hub leader (${key})`]);
    expect(rows.length).toBe(1);
    const backend = rows[0]!.pid;
    process.kill(backend, 'SIGSTOP');
    // A try begun from now waits for the answer of the frozen backend, which reads it after the unlock.
    const before = tries;
    try {
      await holder.query('select pg_advisory_unlock(hashtext($1))', [key]);
      // A check (every 100 ms) sends its try (was: a sleep of 400 ms, which a loaded machine may let pass without one).
      await until('a check to send its try', () => tries > before, { everyMs: 5 });
      await clock.stop();
      // The stop flags itself and waits for the check under way as it is called: the check wins after it.
      const stopping = leadership.stop();
      process.kill(backend, 'SIGCONT');
      await stopping;
    } finally {
      try {
        process.kill(backend, 'SIGCONT');
      } catch {
        // ended with the stop's release
      }
    }
    expect(won).toBe(1);
    // Was: the check that won ran the gated job on the stopped clock and told the onElected listeners
    // (the operator's start), neither waited for by anything, after the stop had stopped its work.
    // No wait for them: the stop has waited for the check, which would have done both before it ended.
    expect({ runs, elected }).toEqual({ runs: 0, elected: 0 });
    // Won, then given up by the stop: the lock is free.
    expect((await holder.query<{ ok: boolean }>('select pg_try_advisory_lock(hashtext($1)) as ok', [key])).rows[0]!.ok).toBe(true);
    await holder.end();
  });
});
