import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import type { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { keepaliveSeconds, ssProblem } from '../../test/harness/keepalive.js';
import { freeze, thaw } from '../../test/harness/freeze.js';
import { captureLogs } from '../../test/harness/log-capture.js';
import { describeRequiring } from '../../test/harness/requires.js';
import { until } from '../../test/harness/until.js';
import { startEmbedded } from './embedded.js';
import { migrate } from './migrations.js';
import { endClient, endPool, interruptibleStart, KEEPALIVE_IDLE_MS, ownClient, resilientPool } from './pool.js';

/**
 * The server ends a connection while the hub holds it in a transaction (PostgreSQL restarted, an
 * administrator's pg_terminate_backend). pg then emits `error` on the checked-out client, which
 * pg-pool does not listen to: without the pool's own listener the process would die.
 */
describe('a connection ended by the server while checked out', () => {
  let t: MigratedDatabase;
  beforeAll(async () => {
    t = await migratedDatabase({ 1: 'one' });
  });
  afterAll(async () => t.close());

  it('fails only its own transaction; the process lives and the pool serves the next one', async () => {
    const uncaught: Error[] = [];
    const onUncaught = (err: Error) => uncaught.push(err);
    process.on('uncaughtException', onUncaught);
    try {
      const failed = t.db.withTenant(1, async (tx) => {
        const { rows } = await tx.query<{ pid: number }>('select pg_backend_pid() as pid');
        // Killed between two statements: no query in flight, the client idle but checked out.
        await t.owner.query('select pg_terminate_backend($1)', [rows[0]!.pid]);
        // Gone from pg_stat_activity once it has said FATAL and closed the connection: the client hears it while idle.
        await until('the backend gone', async () => (await t.owner.query('select 1 from pg_stat_activity where pid = $1', [rows[0]!.pid])).rows.length === 0, { everyMs: 10 });
        await tx.query('select 1');
      });
      await expect(failed).rejects.toThrow();
      const { rows } = await t.db.withTenant(1, (tx) => tx.query<{ one: number }>('select 1 as one'));
      expect(rows[0]!.one).toBe(1);
      expect(uncaught).toEqual([]);
    } finally {
      process.off('uncaughtException', onUncaught);
    }
  });
});

describe('ending a pool', () => {
  let t: MigratedDatabase;
  beforeAll(async () => {
    t = await migratedDatabase({ 1: 'one' });
  });
  afterAll(async () => t.close());

  it('endPool resolves once the server has no session of the pool left (pg-pool alone resolves before)', async () => {
    for (let round = 0; round < 5; round++) {
      const name = `svc-hub end-test ${round}`;
      const pool = resilientPool({ connectionString: t.ownerUrl, max: 4, application_name: name });
      // Four idle connections, as a hub has when it stops.
      await Promise.all(Array.from({ length: 4 }, () => pool.query('select pg_sleep(0.01)')));
      await endPool(pool);
      const { rows } = await t.owner.query<{ n: number }>('select count(*)::int as n from pg_stat_activity where datname = current_database() and application_name = $1', [name]);
      expect({ round, sessions: rows[0]!.n }).toEqual({ round, sessions: 0 });
    }
  });
});

describeRequiring(ssProblem(), 'ss (iproute2)', 'TCP keepalive', () => {
  let t: MigratedDatabase;
  beforeAll(async () => {
    t = await migratedDatabase({ 1: 'one' });
  });
  afterAll(async () => t.close());

  it("a pool's TCP connections have the kernel's keepalive timer armed (ss shows it), after KEEPALIVE_IDLE_MS of silence", async () => {
    // Over TCP whatever the harness's server offers: without `host`, node-postgres connects to 127.0.0.1.
    const tcp = new URL(t.ownerUrl);
    tcp.search = '';
    const pool = resilientPool({ connectionString: tcp.toString(), max: 1, application_name: 'svc-hub keepalive-test' });
    try {
      const client = await pool.connect();
      const socket = (client as unknown as pg.Client).connection.stream as Socket;
      expect(socket.remoteAddress).toBe('127.0.0.1');
      // Was: no timer.
      expect(await keepaliveSeconds(socket.localPort!)).toBeLessThanOrEqual(KEEPALIVE_IDLE_MS / 1000);
      client.release();
    } finally {
      await endPool(pool);
    }
  });

  it('a start-up connection of its own (the migrations\', waiting on another process\'s lock) has the same keepalive', async () => {
    const tcp = new URL(t.ownerUrl);
    tcp.search = '';
    await t.owner.query("select pg_advisory_lock(hashtext('svc-hub:migrations'))");
    try {
      const waiting = migrate(tcp.toString(), null, []);
      let port: number | undefined;
      await until('the migrations to wait on the lock', async () => {
        const { rows } = await t.owner.query<{ port: number }>(
          // Tried again and again (src/db/migrations.ts), not waited for in one statement: the session between its tries.
          "select client_port as port from pg_stat_activity where datname = current_database() and query like 'select pg_try_advisory_lock%' and client_addr = '127.0.0.1'",
        );
        port = rows[0]?.port;
        return port !== undefined;
      });
      // Was: no timer (the kernel's default: no probe ever on a connection without keepalive).
      expect(await keepaliveSeconds(port!)).toBeLessThanOrEqual(KEEPALIVE_IDLE_MS / 1000);
      await t.owner.query("select pg_advisory_unlock(hashtext('svc-hub:migrations'))");
      expect(await waiting).toBe(0);
    } finally {
      await t.owner.query('select pg_advisory_unlock_all()');
    }
  });
});

describe('ending a pool on a database that does not answer', () => {
  const dirs: string[] = [];
  afterAll(() => {
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  it('endPool cuts the connections still open after its wait, one in use waiting on a frozen server (SIGSTOP) too, and resolves', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-pool-frozen-'));
    chmodSync(dir, 0o755);
    dirs.push(dir);
    const server = await startEmbedded({ dataDir: join(dir, 'data') });
    const frozen: number[] = [];
    const logs = captureLogs('warn');
    try {
      const pool = resilientPool({ connectionString: server.url, max: 3, application_name: 'svc-hub frozen-test' });
      await Promise.all(Array.from({ length: 3 }, () => pool.query('select 1')));
      const inUse = await pool.connect();
      // Every server process stopped, as the fault suite freezes a database (e2e/faults/database-restart.test.ts).
      frozen.push(...freeze(server.clusterDir));
      const waiting = inUse.query('select 1').then(
        () => 'answered',
        (err: Error) => `failed: ${err.message}`,
      );
      // Was: pg-pool's end() waits for the connection in use to come back, which never happens.
      let timer: NodeJS.Timeout | undefined;
      const outcome = await Promise.race([endPool(pool, 1_000).then(() => 'ended'), new Promise((resolve) => (timer = setTimeout(() => resolve('still ending after 20 s'), 20_000)))]);
      clearTimeout(timer);
      expect(outcome).toBe('ended');
      // Ended by the cut after its wait (the frozen server ends nothing), which it says, naming the pool.
      expect(logs.lines()).toContainEqual(
        expect.objectContaining({ pool: 'svc-hub frozen-test', connections: 3, msg: 'database connections still open 1000 ms after the pool was closed (the database does not answer, or work still holds them): cut' }),
      );
      expect(await waiting).toMatch(/^failed: /);
      inUse.release(true);
    } finally {
      logs.restore();
      thaw(frozen);
      await server.stop();
    }
  }, 120_000);
});

/**
 * A signal during the hub's start (cmd/compose.ts `startHub`) cuts every connection the start made,
 * the pools' too: what waits on them fails at once, a connection asked for afterwards fails as it
 * begins, and a start that has settled is not touched by a later signal (the hub's stop is graceful).
 */
describe('interruptibleStart', () => {
  let t: MigratedDatabase;
  beforeAll(async () => {
    t = await migratedDatabase();
  });
  afterAll(async () => t.close());

  /** How many sessions of `application_name` run pg_sleep on the server. */
  const sleeping = async (application_name: string) =>
    (await t.owner.query(`select 1 from pg_stat_activity where datname = current_database() and application_name = $1 and state = 'active' and query like 'select pg_sleep%'`, [application_name])).rowCount;

  const outcome = (work: Promise<unknown>) =>
    work.then(
      () => 'answered',
      (err: Error) => `failed: ${err.message}`,
    );

  it("cuts the start's connections (a pool's and one of its own) on the signal, refuses new ones, and cuts nothing once the start has settled", async () => {
    const application_name = 'svc-hub interrupt-test';
    const settledPool = resilientPool({ connectionString: t.ownerUrl, max: 2, application_name });
    const pool = resilientPool({ connectionString: t.ownerUrl, max: 2, application_name });
    try {
      // A start that has settled: a later signal leaves its connections alone.
      const settled = new AbortController();
      const kept = await interruptibleStart(settled.signal, () => settledPool.connect());
      settled.abort();
      expect((await kept.query<{ one: number }>('select 1 as one')).rows[0]!.one).toBe(1);
      kept.release();

      const interrupt = new AbortController();
      const logs = captureLogs('warn');
      const interrupted = interruptibleStart(interrupt.signal, async () => {
        const own = ownClient({ connectionString: t.ownerUrl, application_name });
        await own.connect();
        // Each waits an hour on the server, unless cut.
        const waits = Promise.all([outcome(pool.query('select pg_sleep(3600)')), outcome(own.query('select pg_sleep(3600)'))]);
        await until('both sleeps to run on the server', async () => (await sleeping(application_name)) === 2);
        interrupt.abort();
        const cut = await waits;
        const asked = await outcome(pool.query('select 1'));
        await endPool(pool);
        await endClient(own);
        return { cut, asked };
      }).finally(() => logs.restore());
      const { cut, asked } = await interrupted;
      // Was: both answered after their sleep, and the query after the signal too.
      expect(cut).toEqual([expect.stringMatching(/^failed: /), expect.stringMatching(/^failed: /)]);
      expect(asked).toMatch(/^failed: /);
      // Nor does the close that follows wait out endPool's and endClient's own bound (5 s): neither logs a connection it had to cut.
      expect(logs.lines().map((l) => l.msg)).toEqual([]);
      expect((await settledPool.query<{ one: number }>('select 1 as one')).rows[0]!.one).toBe(1);
    } finally {
      await endPool(settledPool);
      // The sessions that were cut would end only once their sleep does.
      await t.owner.query('select pg_terminate_backend(pid) from pg_stat_activity where datname = current_database() and application_name = $1', [application_name]);
      await until('the cut sessions to end', async () => (await t.owner.query('select 1 from pg_stat_activity where datname = current_database() and application_name = $1', [application_name])).rowCount === 0, { timeoutMs: 10_000 });
    }
  });
});
