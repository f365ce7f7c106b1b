import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { chmodSync, closeSync, constants, existsSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { constants as osConstants, tmpdir } from 'node:os';
import { createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { DataDirInUse, freePort, isLive, startEmbedded } from '../src/db/embedded.js';
import { readMigrations } from '../src/db/migrations.js';
import { ddlLockName, tenantSchema } from '../src/connectors/target/ddl.js';
import { startDemoSource } from '../src/demo-source/server.js';
import { packageRoot, packageVersion } from '../src/package-root.js';
import { createTestDatabase } from '../test/harness/database.js';
import { freeze } from '../test/harness/freeze.js';
import { captureLogs } from '../test/harness/log-capture.js';
import { ssProblem } from '../test/harness/keepalive.js';
import { describeRequiring } from '../test/harness/requires.js';
import { startTmux, tmuxProblem } from '../test/harness/tmux.js';
import { until } from '../test/harness/until.js';
import { MANIFEST_KINDS } from '../src/manifests/kinds.js';
import { HUB_CONSUMERS } from './outbox.js';
import { RUN_USAGE } from './run.js';
import { stopped } from './stop.js';
import { expectedFailure, logStartFailure } from './svc-hub.js';

/** The svc-hub executable, run as users run it: a child process, its exit code and its output. */

const BIN = join(packageRoot(), 'bin', 'svc-hub.js');
const children: ChildProcess[] = [];
const dirs: string[] = [];

afterAll(() => {
  for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function baseEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  return { PATH: process.env.PATH, HOME: process.env.HOME, SVC_LOG_LEVEL: 'info', SVC_CONFIG: '/dev/null', ...extra };
}

/**
 * `group`: the hub leads a process group of its own, as a shell's foreground job does (Ctrl-C signals the whole group).
 * `redirected`: its standard input is that descriptor and its output goes to that file (`< TTY > FILE 2>&1`); else pipes read here.
 */
function start(args: string[], env: Record<string, string>, group = false, redirected?: { stdin: number; log: string }) {
  const log = redirected && openSync(redirected.log, 'a');
  const child = spawn(process.execPath, [BIN, ...args], {
    env: baseEnv(env),
    stdio: redirected ? [redirected.stdin, log!, log!] : ['ignore', 'pipe', 'pipe'],
    detached: group,
  });
  if (log !== undefined) closeSync(log);
  children.push(child);
  let output = '';
  child.stdout?.on('data', (d) => (output += d));
  child.stderr?.on('data', (d) => (output += d));
  const exited = new Promise<number>((resolve) => child.on('exit', (code, signal) => resolve(code ?? (signal ? 128 : -1))));
  return { child, exited, output: () => (redirected ? readFileSync(redirected.log, 'utf8') : output) };
}

/**
 * Makes a login to the hub's database of the embedded cluster in `dataDir` hang for an hour (a login
 * event trigger that sleeps, PostgreSQL 17 and later) for the sessions `when` (an SQL condition)
 * selects. The server is stopped again; its URL, for `untilLoginHangs`.
 */
async function hangLogins(dataDir: string, port: number, when: string): Promise<string> {
  const server = await startEmbedded({ dataDir, port });
  const owner = new pg.Client({ connectionString: server.url });
  await owner.connect();
  await owner.query(`create function hang_login() returns event_trigger language plpgsql as $$ begin if ${when} then perform pg_sleep(3600); end if; end $$`);
  await owner.query('create event trigger hang_login on login execute function hang_login()');
  await owner.end();
  await server.stop();
  return server.url;
}

/** Until a session of the server of `serverUrl` that `which` (an SQL condition on pg_stat_activity) selects sleeps in its login. */
async function untilLoginHangs(serverUrl: string, which: string, detail: () => string): Promise<void> {
  const admin = new URL(serverUrl);
  admin.pathname = '/postgres';
  const probe = new pg.Client({ connectionString: admin.toString() });
  await probe.connect();
  try {
    await until('a login to hang', async () => (await probe.query(`select 1 from pg_stat_activity where wait_event = 'PgSleep' and ${which}`)).rowCount! > 0, { timeoutMs: 30_000, detail });
  } finally {
    await probe.end();
  }
}

/** The pids of the live processes whose command line has an argument `arg`. */
function pidsWith(arg: string): number[] {
  return readdirSync('/proc')
    .filter((name) => /^\d+$/.test(name))
    .filter((pid) => {
      try {
        return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').includes(arg);
      } catch {
        return false;
      }
    })
    .map(Number);
}

/** The live processes of process group `pgid` (zombies not counted). */
function processGroup(pgid: number): number[] {
  return readdirSync('/proc')
    .filter((name) => /^\d+$/.test(name))
    .filter((pid) => {
      try {
        const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
        const [state, , group] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
        return state !== 'Z' && Number(group) === pgid;
      } catch {
        return false;
      }
    })
    .map(Number);
}

/**
 * The signals sent to process `pid` that wait, not yet delivered, while it is stopped (SIGSTOP, every
 * signal but SIGKILL and SIGCONT waits): its /proc status's ShdPnd.
 */
function pendingSignals(pid: number): string[] {
  const mask = BigInt(`0x${/^ShdPnd:\s*([0-9a-f]+)$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]}`);
  return Object.entries(osConstants.signals)
    .filter(([, number]) => (mask >> BigInt(number - 1)) & 1n)
    .map(([name]) => name);
}

/** The client ports of the hub's application pool's connections to the server of `serverUrl` (pg_stat_activity). */
async function appConnections(serverUrl: string): Promise<number[]> {
  const owner = new pg.Client({ connectionString: serverUrl });
  await owner.connect();
  try {
    const { rows } = await owner.query<{ port: number }>("select client_port as port from pg_stat_activity where application_name = 'svc-hub'");
    return rows.map((r) => r.port);
  } finally {
    await owner.end();
  }
}

/**
 * The peer ports of this host's established TCP connections to `port` on whose side of `port` bytes
 * wait unread (their Recv-Q, from Linux's `ss`): what was sent to a process that does not read.
 */
function unreadBy(port: number): number[] {
  return execFileSync('ss', ['-tnH', 'state', 'established', `( sport = :${port} )`], { encoding: 'utf8' })
    .split('\n')
    .map((line) => line.trim().split(/\s+/))
    .filter(([unread, , , peer]) => Number(unread) > 0 && peer !== undefined)
    .map(([, , , peer]) => Number(peer!.slice(peer!.lastIndexOf(':') + 1)));
}

/** The exit code; when it is not 0, the process's output goes with the failure (what it said is the diagnosis). */
async function exitCodeShowingOutput(started: ReturnType<typeof start>): Promise<number> {
  const code = await started.exited;
  if (code !== 0) throw new Error(`exit ${code}; its output:\n${started.output()}`);
  return code;
}

/** The exit code, or `still running after N s` when the process has not exited within `ms`. */
async function exitWithin(started: ReturnType<typeof start>, ms: number): Promise<number | string> {
  let timer: NodeJS.Timeout | undefined;
  const exit = await Promise.race([started.exited, new Promise<string>((resolve) => (timer = setTimeout(() => resolve(`still running after ${ms / 1000} s`), ms)))]);
  clearTimeout(timer);
  return exit;
}

async function waitReady(url: string, timeoutMs = 60_000): Promise<void> {
  // A connection refused: not listening yet.
  await until(`${url} ready`, async () => (await fetch(`${url}/q/health/ready`).catch(() => undefined))?.status === 200, { timeoutMs, everyMs: 200 });
}

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'svc-hub-cli-'));
  chmodSync(dir, 0o755);
  dirs.push(dir);
  return dir;
}

describe('svc-hub executable', () => {
  it('prints usage and exits 2 for an unknown role', async () => {
    const run = start(['fly'], {});
    expect(await run.exited).toBe(2);
    expect(run.output()).toContain("unknown role 'fly'");
    expect(run.output()).toContain('usage: svc-hub <role>');
    expect(run.output()).toMatch(/all\s+the API/);
    // Every role, and every command line `svc-hub run` takes (its own usage), is listed.
    for (const role of ['all', 'serve', 'dispatch', 'migrate', 'operator', 'run', 'secrets', 'outbox']) expect(run.output()).toMatch(new RegExp(`^  ${role} +\\S`, 'm'));
    // A role's lines name what it runs: every outbox consumer of this version, every kind the operator reconciles.
    const roleText = (role: string) => run.output().match(new RegExp(`^  ${role} +([\\s\\S]*?)\\n(?=  \\S)`, 'm'))?.[1]?.replace(/\s+/g, ' ') ?? '';
    for (const consumer of Object.keys(HUB_CONSUMERS)) expect(roleText('dispatch')).toContain(consumer === 'email' ? 'e-mail rules' : consumer);
    for (const { kind } of MANIFEST_KINDS) expect(roleText('operator')).toContain(kind);
    const runForms = [...RUN_USAGE.matchAll(/^(?:usage:)? +(svc-hub run \S+ .*)$/gm)].map((m) => m[1]!);
    expect(runForms).toEqual([expect.stringContaining('run connector NAME'), expect.stringContaining('run export NAME')]);
    for (const form of runForms) expect(run.output()).toContain(`       ${form}\n`);
    expect(run.output()).toContain('       svc-hub secrets rekey [--batch N]\n');
    expect(run.output()).toContain('       svc-hub outbox consumers | drop-consumer NAME [--force]\n');
    expect(run.output()).toContain('svc-hub --help | --version');
  }, 60_000); // a cold start of the executable

  it('--help after a role prints the usage (that of run for run) and exits 0', async () => {
    // Was: exit 2, 'unexpected arguments: --help' and "unknown run target '--help'".
    const serve = start(['serve', '--help'], {});
    expect(await serve.exited).toBe(0);
    expect(serve.output()).toMatch(/^usage: svc-hub <role>/);
    const run = start(['run', 'connector', '-h'], {});
    expect(await run.exited).toBe(0);
    expect(run.output()).toBe(RUN_USAGE);
  }, 90_000); // two cold starts of the executable: 30 s was exceeded on a loaded machine (load average 9)

  it('exits 0 after a clean stop and 1 after a failed one (something may be left behind)', async () => {
    const signal = AbortSignal.abort();
    expect(await stopped({ stop: async () => undefined }, signal)).toBe(0);
    expect(await stopped({ stop: async () => Promise.reject(new Error('the embedded PostgreSQL did not stop')) }, signal)).toBe(1);
    // Not before the signal. Marker: a stop begun without it would have been called, and resolved
    // (an immediate stop, no time limit: promise jobs only), before the next turn of the event loop.
    const controller = new AbortController();
    let done = false;
    let calls = 0;
    const exit = stopped({ stop: async () => void calls++ }, controller.signal).then((code) => {
      done = true;
      return code;
    });
    await new Promise((r) => setImmediate(r));
    expect({ calls, done }).toEqual({ calls: 0, done: false });
    controller.abort();
    expect(await exit).toBe(0);
  });

  it('a stop that outlasts its time limit resolves 1, naming the steps still pending; one within it is not cut', async () => {
    const logs = captureLogs('info');
    try {
      const signal = AbortSignal.abort();
      const never = { stop: () => new Promise<void>(() => undefined) };
      expect(await stopped(never, signal, { limitMs: 50, pending: () => ['the final audit flush', 'the database\'s close'] })).toBe(1);
      // A stand-in's deliberate slowness, kept: a stop that takes time (30 ms), well within its limit.
      const slow = { stop: () => new Promise<void>((resolve) => setTimeout(resolve, 30)) };
      expect(await stopped(slow, signal, { limitMs: 1_000, pending: () => [] })).toBe(0);
    } finally {
      logs.restore();
    }
    expect(logs.lines().map((l) => [l.level, l.msg])).toEqual([
      ['error', "the stop did not end within 50 ms; still pending: the final audit flush; the database's close. Exiting without waiting for them"],
      ['info', 'stopped'],
    ]);
  });

  // Mounting needs root (CI runs as root).
  (process.getuid?.() === 0 ? it : it.skip)('runs from the sources with a TMPDIR it cannot write (tsx then keeps no compile cache)', async () => {
    const readOnly = tempDir();
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'ro,size=64k', 'tmpfs', readOnly]);
    try {
      const version = start(['--version'], { TMPDIR: readOnly });
      // Was: 1, "EROFS: read-only file system, mkdir '…/tsx-0'" thrown by tsx and its stack.
      expect(await exitCodeShowingOutput(version)).toBe(0);
      expect(version.output()).toBe(`${packageVersion()}\n`);
    } finally {
      execFileSync('umount', [readOnly]);
    }
  });

  it('prints usage and exits 2 with no role', async () => {
    const run = start([], {});
    expect(await run.exited).toBe(2);
    expect(run.output()).toContain('no role given');
  });

  it('stops at start with a message naming a bad property', async () => {
    const run = start(['serve'], { SVC_WEBHOOK_SWEEP_EVERY: 'often' });
    expect(await run.exited).toBe(1);
    expect(run.output()).toContain('configuration error: svc.webhook.sweep-every (SVC_WEBHOOK_SWEEP_EVERY)');
    // The log level too, though the process logger reads it before the configuration is loaded.
    const level = start(['serve'], { SVC_LOG_LEVEL: 'verbose' });
    expect(await level.exited).toBe(1);
    expect(level.output()).toContain("configuration error: svc.log.level (SVC_LOG_LEVEL): 'verbose' from environment SVC_LOG_LEVEL is not one of");
    expect(level.output()).not.toContain('    at ');
    // One checked as the hub starts, before the database: reported the same way, no stack trace.
    const allow = start(['serve'], { SVC_EGRESS_ALLOW: '10.0.0.0/99', SVC_DATA_DIR: tempDir() });
    expect(await allow.exited).toBe(1);
    expect(allow.output()).toContain('svc-hub: configuration error: svc.egress.allow (SVC_EGRESS_ALLOW): 10.0.0.0/99 is not a CIDR');
    expect(allow.output()).not.toContain('    at ');
    expect(allow.output()).not.toContain('FATAL');
  }, 90_000); // three cold starts of the executable: 30 s was exceeded once on a loaded machine

  it('secrets rekey: a malformed previous key stops it naming the property, never the text; a good one re-seals and exits 0', async () => {
    const usage = start(['secrets'], {});
    expect(await usage.exited).toBe(2);
    expect(usage.output()).toContain('svc-hub secrets: a command is required (rekey)');
    expect(usage.output()).toContain('usage: svc-hub secrets rekey [--batch N]');
    const url = await createTestDatabase();
    const key = Buffer.alloc(32, 0x5a).toString('base64');
    const bad = start(['secrets', 'rekey'], { DATABASE_URL: url, SVC_SECRET_MASTER_KEY: key, SVC_SECRET_PREVIOUS_MASTER_KEYS: 'not-a-key-at-all' });
    expect(await bad.exited).toBe(1);
    expect(bad.output()).toContain('svc-hub: configuration error: svc.secret.previous-master-keys (SVC_SECRET_PREVIOUS_MASTER_KEYS): not a valid key; expected 32 bytes');
    expect(bad.output()).not.toContain('not-a-key-at-all');
    const good = start(['secrets', 'rekey', '--batch', '10'], { DATABASE_URL: url, SVC_SECRET_MASTER_KEY: key, SVC_SECRET_PREVIOUS_MASTER_KEYS: Buffer.alloc(32, 1).toString('hex') });
    expect(await good.exited).toBe(0);
    expect(good.output()).toContain('re-sealed 0 values, 0 already under the current key, 0 could not be opened with any configured key\n');
  }, 90_000);

  it('an expected start failure (database unreachable, port in use) is one line and exit 1, its stack only at debug', async () => {
    const closed = await freePort();
    const unreachable = start(['serve'], { DATABASE_URL: `postgres://svc:pw-not-logged@127.0.0.1:${closed}/svc` });
    expect(await unreachable.exited).toBe(1);
    // Was: the same line followed by the error's stack trace.
    expect(unreachable.output()).toContain(`svc-hub serve failed: the database cannot be reached: connect ECONNREFUSED 127.0.0.1:${closed}`);
    expect(unreachable.output()).not.toContain('    at ');
    expect(unreachable.output()).not.toContain('pw-not-logged');
    const debug = start(['serve'], { DATABASE_URL: `postgres://svc:pw-not-logged@127.0.0.1:${closed}/svc`, SVC_LOG_LEVEL: 'debug' });
    expect(await debug.exited).toBe(1);
    expect(debug.output()).toContain('the start failure in full');
    expect(debug.output()).toContain('    at ');

    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const port = (taken.address() as AddressInfo).port;
    try {
      const busy = start(['serve'], { DATABASE_URL: await createTestDatabase(), PORT: String(port), SVC_HTTP_HOST: '127.0.0.1' });
      expect(await busy.exited).toBe(1);
      expect(busy.output()).toContain(`svc-hub serve failed: cannot listen on 127.0.0.1:${port}: listen EADDRINUSE`);
      expect(busy.output()).toContain('(another process holds the port, perhaps a svc-hub already running: stop it, or choose another port with PORT)');
      expect(busy.output()).not.toContain('    at ');
    } finally {
      await new Promise((resolve) => taken.close(resolve));
    }
  }, 120_000);

  // Mounting needs root (CI runs as root).
  (process.getuid?.() === 0 ? it : it.skip)('a data directory on a full or read-only file system: one line naming the file and what to do, exit 1, no stack', async () => {
    const dataDir = tempDir();
    // Mode 0711, what a root-run hub makes of its data directory.
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64k,mode=0711', 'tmpfs', dataDir]);
    try {
      expect(() => writeFileSync(join(dataDir, 'filler'), Buffer.alloc(128 * 1024))).toThrow(/ENOSPC/); // full
      const full = start(['all'], { SVC_DATA_DIR: dataDir, PORT: '0' });
      expect(await full.exited).toBe(1);
      // Was: 'svc-hub all failed: ENOSPC: no space left on device, write' and the error's stack.
      expect(full.output()).toContain(
        `svc-hub all failed: cannot write ${join(dataDir, 'master.key')}: no space left on the device (ENOSPC). Free space on its file system, or point SVC_DATA_DIR at a directory elsewhere, or set SVC_SECRET_MASTER_KEY\n`,
      );
      expect(full.output()).not.toContain('    at ');
      // Its master key made, then the file system made read-only: the embedded PostgreSQL's start is refused.
      rmSync(join(dataDir, 'filler'));
      writeFileSync(join(dataDir, 'master.key'), `${Buffer.alloc(32, 7).toString('base64')}\n`, { mode: 0o600 });
      execFileSync('mount', ['-o', 'remount,ro', dataDir]);
      const readOnly = start(['all'], { SVC_DATA_DIR: dataDir, PORT: '0' });
      expect(await readOnly.exited).toBe(1);
      // Was: 'svc-hub all failed: EROFS: read-only file system, open …/hub.lock' and its stack.
      expect(readOnly.output()).toContain(
        `svc-hub all failed: cannot create or open ${join(dataDir, 'hub.lock')}: the file system is read-only (EROFS). Make it writable (mount it read-write), or point SVC_DATA_DIR at a directory elsewhere (or give the hub a PostgreSQL of its own, DATABASE_URL)\n`,
      );
      expect(readOnly.output()).not.toContain('    at ');
    } finally {
      execFileSync('umount', [dataDir]);
    }
  }, 60_000);

  (process.getuid?.() === 0 ? it : it.skip)('a disk that fills up during initdb: one line naming the cluster and what to do, exit 1, no stack', async () => {
    const dataDir = tempDir();
    // Room for the data directory's own files, not for a cluster (initdb writes some 40 MB).
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=3m,mode=0711', 'tmpfs', dataDir]);
    try {
      writeFileSync(join(dataDir, 'master.key'), `${Buffer.alloc(32, 7).toString('base64')}\n`, { mode: 0o600 });
      const full = start(['all'], { SVC_DATA_DIR: dataDir, PORT: '0' });
      expect(await full.exited).toBe(1);
      // Was: 'could not initialise embedded PostgreSQL in …: initdb exited with 1', initdb's whole output and a stack.
      expect(full.output()).toContain(
        `svc-hub all failed: cannot initialise embedded PostgreSQL in ${join(dataDir, 'pg')}: no space left on the device (ENOSPC). Free space on its file system, or point SVC_DATA_DIR at a directory elsewhere (or give the hub a PostgreSQL of its own, DATABASE_URL)\n`,
      );
      expect(full.output()).not.toContain('    at ');
      // The half-made cluster is not left behind.
      expect(readdirSync(dataDir).filter((name) => name.startsWith('pg'))).toEqual([]);
    } finally {
      execFileSync('umount', [dataDir]);
    }
  }, 60_000);

  it('an unexpected start failure keeps its stack', () => {
    expect(expectedFailure(new TypeError("Cannot read properties of undefined (reading 'x')"))).toBeUndefined();
    expect(expectedFailure(Object.assign(new Error('password authentication failed for user "svc"'), { code: '28P01' }))).toBe(
      'the database refused the connection: password authentication failed for user "svc"',
    );
  });

  it('a one-shot command on the data directory of a running hub is told to stop it or pass DATABASE_URL, not to take another SVC_DATA_DIR (an empty database)', () => {
    const held = new DataDirInUse('/srv/hub/.svc', 4242);
    for (const role of ['migrate', 'run', 'secrets', 'outbox']) {
      const line = expectedFailure(held, role)!;
      expect(line).toContain('data directory /srv/hub/.svc is already used by another svc-hub process (pid 4242)');
      expect(line).toContain(`give svc-hub ${role} the running server's URL as DATABASE_URL`);
      expect(line).not.toContain('SVC_DATA_DIR');
    }
    // A second hub is still told to choose another data directory.
    expect(expectedFailure(held, 'all')).toBe(held.message);
    expect(held.message).toContain('point SVC_DATA_DIR at another directory');
  });

  it('an unexpected start failure that is a PostgreSQL error quoting a value is logged without the value, in its message too', () => {
    const value = 'row-value-Kp30';
    const err = Object.assign(new Error(`invalid input syntax for type integer: "${value}"`), { severity: 'ERROR', code: '22P02' });
    const logs = captureLogs('info');
    try {
      logStartFailure('all', err);
    } finally {
      logs.restore();
    }
    expect(logs.raw()).not.toContain(value);
    expect(logs.lines()).toMatchObject([{ level: 'fatal', msg: 'svc-hub all failed: invalid input syntax for type integer: "…"', err: { code: '22P02' } }]);
  });

  it('outbox: a bad command prints its usage and exits 2; consumers lists the cursors, drop-consumer refuses a consumer this version runs', async () => {
    const usage = start(['outbox', 'drop-consumer'], {});
    expect(await usage.exited).toBe(2);
    expect(usage.output()).toContain('svc-hub outbox: drop-consumer needs the NAME of a consumer');
    expect(usage.output()).toContain('usage: svc-hub outbox consumers');
    const url = await createTestDatabase();
    const list = start(['outbox', 'consumers'], { DATABASE_URL: url });
    expect(await list.exited).toBe(0);
    expect(list.output()).toContain('no consumer cursors\n');
    const refused = start(['outbox', 'drop-consumer', 'webhooks'], { DATABASE_URL: url });
    expect(await refused.exited).toBe(1);
    expect(refused.output()).toContain("refused: 'webhooks' is a consumer this version of the hub runs");
  }, 90_000);

  it('migrate applies the migrations to an external database and exits 0', async () => {
    const url = await createTestDatabase();
    const run = start(['migrate'], { DATABASE_URL: url });
    expect(await run.exited).toBe(0);
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    const { rows } = await client.query('select schema, version from public.svc_schema_history order by schema, version');
    const tenants = await client.query('select code from core.tenants order by id');
    await client.end();
    const expected = readMigrations()
      .map((m) => ({ schema: m.schema, version: m.version }))
      .sort((a, b) => a.schema.localeCompare(b.schema) || a.version - b.version);
    expect(rows).toEqual(expected);
    expect(tenants.rows.map((r) => r.code)).toEqual(['system', 'default']);
    expect(run.output()).not.toContain(new URL(url).password);
  });

  it('all on an embedded database: ready, refuses a second hub on the same data, stops cleanly on SIGTERM, restarts on existing data', async () => {
    const dataDir = join(tempDir(), 'data');
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const first = start(['all'], { SVC_DATA_DIR: dataDir, PORT: String(port) });
    await waitReady(url);
    expect(first.output()).toContain(`svc-hub ready at ${url}`);
    expect(first.output()).toContain('DEV BYPASS ON');
    const me = await fetch(`${url}/api/bff/v1/me`, { headers: { 'X-Tenant-ID': '1' } });
    expect(me.status).toBe(200);
    expect(((await me.json()) as { tenant: { id: number } }).tenant.id).toBe(1);

    const second = start(['serve'], { SVC_DATA_DIR: dataDir, PORT: String(await freePort()) });
    expect(await second.exited).toBe(1);
    expect(second.output()).toContain(`data directory ${dataDir} is already used by another svc-hub process (pid ${first.child.pid})`);

    const pgPid = Number(readFileSync(join(dataDir, 'pg', 'postmaster.pid'), 'utf8').split('\n')[0]);
    first.child.kill('SIGTERM');
    expect(await first.exited).toBe(0);
    expect(first.output()).toContain('embedded PostgreSQL stopped');
    expect(existsSync(join(dataDir, 'hub.pid'))).toBe(false);
    expect(() => process.kill(pgPid, 0)).toThrow();

    const again = start(['serve'], { SVC_DATA_DIR: dataDir, PORT: String(port) }, true);
    await waitReady(url);
    expect(again.output()).not.toContain('initialising embedded PostgreSQL');
    expect(again.output()).not.toContain('created tenant default');
    // Ctrl-C in a terminal: SIGINT to the whole foreground group. The embedded PostgreSQL is not in
    // it: the hub closes its connections first and then stops it, so nothing is cut off under it.
    const beforeStop = again.output().length;
    process.kill(-again.child.pid!, 'SIGINT');
    expect(await again.exited).toBe(0);
    const stopping = again.output().slice(beforeStop);
    expect(stopping).toContain('embedded PostgreSQL stopped');
    expect(stopping).not.toMatch(/terminating connection|lost its connection|connection failed/);
    expect(stopping.split('\n').filter((line) => /"level":(40|50)|\bWARN\b|\bERROR\b/.test(line))).toEqual([]);
  }, 120_000);

  it('a signal during the start interrupts it, its PostgreSQL stopped too; SIGHUP (a closed terminal) stops it like SIGTERM', async () => {
    const dataDir = join(tempDir(), 'data');
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const first = start(['all'], { SVC_DATA_DIR: dataDir, PORT: String(port) });
    // Mid-start: the embedded PostgreSQL runs and the migrations are being applied.
    await until('a migration to be applied', () => first.output().includes('applied migration'), 60_000);
    const pgPid = Number(readFileSync(join(dataDir, 'pg', 'postmaster.pid'), 'utf8').split('\n')[0]);
    first.child.kill('SIGTERM');
    // Was: node killed by the signal (143), its PostgreSQL left running and hub.pid left behind.
    expect(await exitCodeShowingOutput(first)).toBe(0);
    expect(first.output()).toContain('SIGTERM: interrupting the start');
    expect(first.output()).toContain('the start was interrupted by the stop; what it had acquired is released');
    expect(first.output()).toContain('embedded PostgreSQL stopped');
    expect(first.output()).not.toContain('svc-hub ready');
    expect(existsSync(join(dataDir, 'hub.pid'))).toBe(false);
    expect(() => process.kill(pgPid, 0)).toThrow();

    const again = start(['serve'], { SVC_DATA_DIR: dataDir, PORT: String(port) });
    await waitReady(url);
    const againPg = Number(readFileSync(join(dataDir, 'pg', 'postmaster.pid'), 'utf8').split('\n')[0]);
    // A closed terminal sends SIGHUP twice: the shell passes it on to its jobs, and the kernel sends
    // it to the foreground job when the shell has gone.
    again.child.kill('SIGHUP');
    await until('the stop to begin', () => again.output().includes('SIGHUP: stopping'), { everyMs: 5 });
    expect(again.child.kill('SIGHUP')).toBe(true);
    // Was: 129, the PostgreSQL left running; then the second SIGHUP cut the stop short ('SIGHUP again: exiting now', 130).
    expect(await again.exited).toBe(0);
    expect(again.output()).toContain('SIGHUP: stopping (in-flight requests finish first)');
    expect(again.output()).not.toContain('exiting now');
    expect(again.output()).toContain('embedded PostgreSQL stopped');
    expect(existsSync(join(dataDir, 'hub.pid'))).toBe(false);
    expect(() => process.kill(againPg, 0)).toThrow();
  }, 120_000);

  it('Ctrl-C during a first start (initdb running) or during migrate interrupts it, exit 1: initdb and the embedded PostgreSQL are not in the terminal\'s group', async () => {
    // Ctrl-C in a terminal: SIGINT to the whole foreground group, here while initdb makes the cluster.
    const dataDir = join(tempDir(), 'data');
    const first = start(['migrate'], { SVC_DATA_DIR: dataDir }, true);
    const initdbPid = await until('initdb to run', () => pidsWith(`--pgdata=${join(dataDir, 'pg.initdb')}`)[0], { timeoutMs: 60_000, everyMs: 5, detail: () => first.output() });
    const signalled = performance.now();
    process.kill(-first.child.pid!, 'SIGINT');
    // How long initdb's group lived on after the signal (a whole initdb's run is the baseline, below).
    await until('initdb and the PostgreSQL it runs to end', () => processGroup(initdbPid).length === 0, { timeoutMs: 60_000, everyMs: 5, detail: () => first.output() });
    const cutMs = performance.now() - signalled;
    // Was: initdb and the server's start went on to their end (they were not cut), the interruption
    // taking effect once the server was up. Now initdb and the PostgreSQL it runs (its process group)
    // are killed, its work directory removed, and the start is interrupted at once: exit 1.
    expect({ exit: await exitWithin(first, 60_000), output: first.output() }).toMatchObject({ exit: 1 });
    expect(first.output()).toContain('SIGINT: interrupting the migrations');
    expect(first.output()).not.toContain('could not initialise');
    expect(first.output()).not.toContain('embedded PostgreSQL ready');
    expect(first.output()).toContain('the start was interrupted by the stop; what it had acquired is released');
    expect(first.output()).not.toContain('migrations are up to date');
    expect(existsSync(join(dataDir, 'hub.pid'))).toBe(false);
    // Nothing of initdb's group left running, nothing half-made left: the next start makes the cluster anew.
    expect(processGroup(initdbPid)).toEqual([]);
    expect(['pg.initdb', 'pg.pw', join('pg', 'PG_VERSION')].filter((name) => existsSync(join(dataDir, name)))).toEqual([]);
    const again = start(['migrate'], { SVC_DATA_DIR: dataDir });
    // The baseline, on the same machine under the same load: a whole initdb's run, from when it is seen
    // to when its group has ended. Killed at once, initdb's group ends within a small part of it; left
    // to run (not killed, or killed alone, the PostgreSQL it runs going on), it would live about as long.
    const wholePid = await until('initdb to run again', () => pidsWith(`--pgdata=${join(dataDir, 'pg.initdb')}`)[0], { timeoutMs: 60_000, everyMs: 5, detail: () => again.output() });
    const seen = performance.now();
    await until('the whole initdb to end', () => processGroup(wholePid).length === 0, { timeoutMs: 60_000, everyMs: 5, detail: () => again.output() });
    const wholeMs = performance.now() - seen;
    expect(cutMs).toBeLessThan(wholeMs / 2);
    expect(await exitCodeShowingOutput(again)).toBe(0);
    expect(again.output()).toContain('initialising embedded PostgreSQL');
    expect(again.output()).toContain('migrations are up to date');

    // Mid-migration: the embedded PostgreSQL is up, the migrations are being applied.
    const other = join(tempDir(), 'data');
    const second = start(['migrate'], { SVC_DATA_DIR: other }, true);
    await until('the embedded PostgreSQL to be ready', () => second.output().includes('embedded PostgreSQL ready'), { timeoutMs: 60_000, everyMs: 5 });
    process.kill(-second.child.pid!, 'SIGINT');
    // Was: the server stopped by the same Ctrl-C under the migrations (`terminating connection`). The
    // migrations' connection is cut by the hub, the server stopped by it, nothing else fails.
    expect({ exit: await second.exited, output: second.output() }).toMatchObject({ exit: 1 });
    expect(second.output()).toContain('the start was interrupted by the stop; what it had acquired is released');
    expect(second.output()).toContain('embedded PostgreSQL stopped');
    expect(second.output()).not.toMatch(/terminating connection|"level":50|"level":60|\bERROR\b|\bFATAL\b/);
    expect(existsSync(join(other, 'hub.pid'))).toBe(false);
  }, 120_000);

  it('a signal while the embedded PostgreSQL is being launched (it never gets ready) stops it at once: exit 0, hub.pid released, no PostgreSQL left, the next start serves', async () => {
    const dataDir = join(tempDir(), 'data');
    const pgPort = await freePort();
    const env = { SVC_DATA_DIR: dataDir, SVC_EMBEDDED_PORT: String(pgPort), SVC_HTTP_SHUTDOWN_GRACE: '1s', SVC_EMBEDDING_PROVIDER: 'none' };
    expect(await exitCodeShowingOutput(start(['migrate'], env))).toBe(0);
    // The server's start hangs: an archive recovery whose restore_command sleeps for an hour (a
    // duration of this test's own, to find it by).
    const clusterDir = join(dataDir, 'pg');
    const sleep = `3600.${pgPort}`;
    const autoConf = readFileSync(join(clusterDir, 'postgresql.auto.conf'), 'utf8');
    writeFileSync(join(clusterDir, 'postgresql.auto.conf'), `${autoConf}restore_command = 'sleep ${sleep}'\n`);
    writeFileSync(join(clusterDir, 'recovery.signal'), '');

    const hub = start(['serve'], { ...env, PORT: String(await freePort()) });
    await until('the server to wait in its restore_command', () => pidsWith(sleep).length > 0, { timeoutMs: 60_000, detail: () => hub.output() });
    const pgPid = Number(readFileSync(join(clusterDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
    hub.child.kill('SIGTERM');
    try {
      // Was: the hub waited for the server to get ready (120 s) until the stop's limit gave up (the
      // grace, 15 s, the embedded server's stop: 56 s), exit 1, hub.pid and the server left. The wait
      // here outlasts that limit, so a stop given up says so (a hang guard, not the measure of `at once`).
      expect({ exit: await exitWithin(hub, 80_000), output: hub.output() }).toMatchObject({ exit: 0 });
      expect(hub.output()).not.toContain('the stop did not end within');
      expect(hub.output()).toContain('the start was interrupted by the stop; what it had acquired is released');
      expect(hub.output()).not.toContain('embedded PostgreSQL ready');
      expect(existsSync(join(dataDir, 'hub.pid'))).toBe(false);
      // Stopped by its immediate shutdown, not killed 10 s after it (a SIGKILLed postmaster leaves its postmaster.pid).
      expect(existsSync(join(clusterDir, 'postmaster.pid'))).toBe(false);
      expect(() => process.kill(pgPid, 0)).toThrow();
      expect(pidsWith(sleep)).toEqual([]);
    } finally {
      // Should it fail: the server (in a process group of its own) not left running, nor, when its postmaster
      // was killed, its startup process waiting in the restore_command (a killed restore_command ends it).
      if (isLive(pgPid)) process.kill(pgPid, 'SIGQUIT');
      for (const pid of pidsWith(sleep)) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
    }

    // The recovery undone, the next start serves on the same cluster.
    rmSync(join(clusterDir, 'recovery.signal'));
    writeFileSync(join(clusterDir, 'postgresql.auto.conf'), autoConf);
    const port = await freePort();
    const again = start(['serve'], { ...env, PORT: String(port) });
    await waitReady(`http://127.0.0.1:${port}`);
    again.child.kill('SIGTERM');
    expect(await exitCodeShowingOutput(again)).toBe(0);
  }, 180_000);

  it('a signal while the start waits on the migrations\' lock (held by the test) interrupts it within the limit: serve exits 0, migrate 1', async () => {
    const url = await createTestDatabase();
    const holder = new pg.Client({ connectionString: url });
    await holder.connect();
    try {
      // What another replica applying the migrations holds (src/db/migrations.ts).
      await holder.query("select pg_advisory_lock(hashtext('svc-hub:migrations'))");
      const env = { DATABASE_URL: url, SVC_HTTP_SHUTDOWN_GRACE: '1s', SVC_EMBEDDING_PROVIDER: 'none' };
      const hub = start(['serve'], { ...env, PORT: String(await freePort()) });
      const migrate = start(['migrate'], env);
      for (const command of [hub, migrate]) {
        await until('the start to wait on the lock', () => command.output().includes('another process is applying the migrations'), { timeoutMs: 60_000, detail: () => command.output() });
      }
      hub.child.kill('SIGTERM');
      migrate.child.kill('SIGTERM');
      // Was: still running, as long as the lock is held (the limit began only once the start had returned).
      // The limit: the grace (1 s) and the margin (15 s); the interruption ends within it, which the
      // limit's give-up would say (exit 1, `the stop did not end within`). The wait here outlasts
      // the limit (a hang guard): a process still running after it did not stop.
      expect({ exit: await exitWithin(hub, 60_000), output: hub.output() }).toMatchObject({ exit: 0 });
      expect({ exit: await exitWithin(migrate, 60_000), output: migrate.output() }).toMatchObject({ exit: 1 });
      for (const command of [hub, migrate]) expect(command.output()).not.toContain('the stop did not end within');
      expect(hub.output()).toContain('SIGTERM: interrupting the start');
      expect(migrate.output()).toContain('SIGTERM: interrupting the migrations');
      for (const command of [hub, migrate]) {
        expect(command.output().match(/the start was interrupted by the stop; what it had acquired is released/g)).toHaveLength(1);
        expect(command.output()).not.toMatch(/failed|"level":50|"level":60|\bERROR\b|\bFATAL\b/);
      }
      expect(migrate.output()).not.toContain('migrations are up to date');
    } finally {
      await holder.end();
    }
  }, 120_000);

  it('a signal while an embedded start waits for a database that does not answer its connection: interrupted, hub.pid released, no PostgreSQL left', async () => {
    const dataDir = join(tempDir(), 'data');
    const pgPort = await freePort();
    const env = { SVC_DATA_DIR: dataDir, SVC_EMBEDDED_PORT: String(pgPort), SVC_HTTP_SHUTDOWN_GRACE: '1s' };
    expect(await exitCodeShowingOutput(start(['migrate'], env))).toBe(0);
    // A login of the hub's database hangs: the server answers the connections to `postgres` the
    // embedded start makes, never those the migrations make to `svc`.
    const serverUrl = await hangLogins(dataDir, pgPort, 'true');

    for (const role of ['all', 'migrate']) {
      const command = start([role], { ...env, PORT: String(await freePort()) });
      await until('the embedded PostgreSQL to be ready', () => command.output().includes('embedded PostgreSQL ready'), { timeoutMs: 60_000, detail: () => command.output() });
      const pgPid = Number(readFileSync(join(dataDir, 'pg', 'postmaster.pid'), 'utf8').split('\n')[0]);
      // The migrations' connection waiting in the login trigger.
      await untilLoginHangs(serverUrl, 'true', () => command.output());
      command.child.kill('SIGTERM');
      // Was: still running, for the trigger's hour. The limit: the grace (1 s), the margin (15 s), the embedded server's stop (40 s).
      expect({ exit: await exitWithin(command, 56_000), output: command.output() }).toMatchObject({ exit: role === 'migrate' ? 1 : 0 });
      expect(command.output()).toContain('the start was interrupted by the stop; what it had acquired is released');
      expect(command.output()).toContain('embedded PostgreSQL stopped');
      expect(existsSync(join(dataDir, 'hub.pid'))).toBe(false);
      expect(() => process.kill(pgPid, 0)).toThrow();
    }
  }, 180_000);

  it("a signal while an embedded start waits on the pools, the outbox listener's connect or the leadership's (their logins hang): interrupted at once, hub.pid released, no PostgreSQL left", async () => {
    // A login hangs for the sessions each case selects: the start's steps as the owner go through,
    // then it waits on the pools (the stored secrets' check), on the outbox listener's connect or
    // on the leader election's (as the worker role, each with an application name of its own).
    // `bound`: what the hub logs when the step's own connect bound (5 s) passes: the step then ended
    // by itself and the start went on, so a signal after it proves nothing of the step's cut (a slow
    // machine, the hung login seen late): that attempt is made again.
    const cases = [
      { waits: 'the pools', when: "session_user in ('svc_app', 'svc_worker')", which: "usename in ('svc_app', 'svc_worker')", roles: ['serve', 'all'], bound: undefined },
      { waits: "the outbox listener's connect", when: "current_setting('application_name') = 'svc-hub outbox listener'", which: "application_name = 'svc-hub outbox listener'", roles: ['serve'], bound: 'outbox listener could not connect' },
      { waits: "the leadership's connect", when: "current_setting('application_name') like 'svc-hub leader%'", which: "application_name like 'svc-hub leader%'", roles: ['all'], bound: 'leader election failed' },
    ];
    for (const { waits, when, which, roles, bound } of cases) {
      const dataDir = join(tempDir(), 'data');
      const pgPort = await freePort();
      // The pools' own wait for a connection (svc.datasource.connect-timeout) longer than the stop's limit: only the cut ends it.
      const env = { SVC_DATA_DIR: dataDir, SVC_EMBEDDED_PORT: String(pgPort), SVC_HTTP_SHUTDOWN_GRACE: '1s', SVC_EMBEDDING_PROVIDER: 'none', SVC_DATASOURCE_CONNECT_TIMEOUT: '120s' };
      expect(await exitCodeShowingOutput(start(['migrate'], env))).toBe(0);
      const serverUrl = await hangLogins(dataDir, pgPort, when);
      // The start signalled once the login hangs: its exit, how long after the signal, and its output.
      const signalledWhileHung = async (role: string) => {
        const command = start([role], { ...env, PORT: String(await freePort()) });
        await until('the embedded PostgreSQL to be ready', () => command.output().includes('embedded PostgreSQL ready'), { timeoutMs: 60_000, detail: () => command.output() });
        const pgPid = Number(readFileSync(join(dataDir, 'pg', 'postmaster.pid'), 'utf8').split('\n')[0]);
        await untilLoginHangs(serverUrl, which, () => command.output());
        command.child.kill('SIGTERM');
        const exit = await exitWithin(command, 80_000);
        const output = command.output();
        return { exit, output, beforeSignal: output.slice(0, output.indexOf('SIGTERM: ')), pgPid };
      };
      for (const role of roles) {
        let run = await signalledWhileHung(role);
        for (let attempt = 2; bound && run.beforeSignal.includes(bound) && attempt <= 3; attempt++) run = await signalledWhileHung(role);
        // Was: given up at the limit (the grace, 15 s, the embedded server's stop: 56 s), exit 1, hub.pid left.
        expect({ waits, role, exit: run.exit, output: run.output }).toMatchObject({ exit: 0 });
        // The embedded server's fast shutdown ends the sessions sleeping in their login: no immediate
        // shutdown after its wait (30 s), which the hub would log.
        expect(run.output).not.toContain('did not stop within');
        expect(run.output).toContain('the start was interrupted by the stop; what it had acquired is released');
        // The step's failure is the interruption's consequence, not news: the start's one line says it.
        if (bound) expect(run.output).not.toContain(bound);
        expect(run.output).not.toContain('the stop did not end within');
        expect(run.output).toContain('embedded PostgreSQL stopped');
        expect(existsSync(join(dataDir, 'hub.pid'))).toBe(false);
        expect(() => process.kill(run.pgPid, 0)).toThrow();
      }
    }
  }, 600_000);

  it('a second hub that finds the lock file gone (removed by hand) refuses to start, and does not stop the running hub\'s PostgreSQL as an orphan', async () => {
    const dataDir = join(tempDir(), 'data');
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const first = start(['serve'], { SVC_DATA_DIR: dataDir, PORT: String(port) });
    await waitReady(url);
    const pgPid = Number(readFileSync(join(dataDir, 'pg', 'postmaster.pid'), 'utf8').split('\n')[0]);
    // The lock files removed by hand: none naming the first.
    rmSync(join(dataDir, 'hub.holder'));
    rmSync(join(dataDir, 'hub.pid'));
    const second = start(['serve'], { SVC_DATA_DIR: dataDir, PORT: String(await freePort()) });
    // Was: 'stopping the embedded PostgreSQL a previous hub left running' (the first hub's), then a server of its own on the same cluster.
    expect(await Promise.race([second.exited, new Promise((resolve) => setTimeout(() => resolve('still running'), 60_000).unref())])).toBe(1);
    expect(second.output()).toContain(`data directory ${dataDir} is already used by another svc-hub process (pid ${first.child.pid})`);
    expect(second.output()).not.toContain('left running');
    expect(() => process.kill(pgPid, 0)).not.toThrow();
    expect((await fetch(`${url}/q/health/ready`)).status).toBe(200);
    first.child.kill('SIGTERM');
    expect(await first.exited).toBe(0);
  }, 120_000);

  it('SIGTERM while its database is frozen with audit work pending: the stop is given up after its time limit, naming what is pending, exit 1', async () => {
    const server = await startEmbedded({ dataDir: join(tempDir(), 'data'), database: 'svc' });
    const frozen: number[] = [];
    try {
      const port = await freePort();
      const url = `http://127.0.0.1:${port}`;
      // The audit retries' clock out of the way: what is pending is left to the stop's final flush.
      const hub = start(['serve'], { DATABASE_URL: server.url, PORT: String(port), SVC_EMBEDDING_PROVIDER: 'none', SVC_HTTP_SHUTDOWN_GRACE: '1s', SVC_AUDIT_DISPATCH_EVERY: '1h' });
      await waitReady(url);
      // Refused anonymous calls (a tenant header that is no tenant id): the first of a minute is written
      // with the call, the others are counted for the next flush (three: two fall in the same minute).
      for (let i = 0; i < 3; i++) {
        const res = await fetch(`${url}/api/platform/secrets`, { method: 'POST', headers: { 'X-Tenant-ID': 'acme', 'Content-Type': 'application/json' }, body: '{}' });
        expect(res.status).toBe(400);
      }
      frozen.push(...freeze(server.clusterDir));
      const signalled = performance.now();
      hub.child.kill('SIGTERM');
      // Was: still running, for ever (the final audit flush waits on a database that does not answer).
      const exit = await exitWithin(hub, 60_000);
      expect(exit).toBe(1);
      // The grace (1 s) and the margin (15 s).
      expect(performance.now() - signalled).toBeGreaterThan(16_000);
      expect(hub.output()).toContain('the stop did not end within 16000 ms; still pending: the final audit flush');
      const password = decodeURIComponent(new URL(server.url).password);
      expect(password).not.toBe('');
      expect(hub.output()).not.toContain(password);
    } finally {
      for (const pid of frozen) process.kill(pid, 'SIGCONT');
      await server.stop();
    }
  }, 120_000);

  it('after a kill -9 of the hub, the next start stops the orphaned PostgreSQL and serves the same data', async () => {
    const dataDir = join(tempDir(), 'data');
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const first = start(['all'], { SVC_DATA_DIR: dataDir, PORT: String(port) });
    await waitReady(url);
    const created = await fetch(`${url}/api/platform/secrets`, {
      method: 'POST',
      headers: { 'X-Tenant-ID': '1', 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'SURVIVES_KILL', value: 'kept-across-the-crash' }),
    });
    expect(created.status).toBe(201);
    const pgPid = Number(readFileSync(join(dataDir, 'pg', 'postmaster.pid'), 'utf8').split('\n')[0]);

    first.child.kill('SIGKILL');
    await first.exited;
    // The hub had no chance to stop its database: the postgres server is left running, an orphan.
    expect(() => process.kill(pgPid, 0)).not.toThrow();

    const again = start(['serve'], { SVC_DATA_DIR: dataDir, PORT: String(port) });
    await waitReady(url);
    expect(again.output()).toContain('stopping the embedded PostgreSQL a previous hub left running');
    // The orphan's pid is a field of its own: as `pid`, the log printer showed it as the writer's (`WARN (4242): …`).
    expect(again.output()).toContain(`postgresPid: ${pgPid}`);
    expect(again.output()).not.toMatch(/\(\d+\): stopping the embedded PostgreSQL/);
    await until('the orphan to be gone', () => {
      try {
        process.kill(pgPid, 0);
        return false;
      } catch {
        return true;
      }
    });
    const secrets = (await (await fetch(`${url}/api/platform/secrets`, { headers: { 'X-Tenant-ID': '1' } })).json()) as Array<{ name: string }>;
    expect(secrets.map((s) => s.name)).toContain('SURVIVES_KILL');
    again.child.kill('SIGINT');
    expect(await again.exited).toBe(0);
  }, 120_000);
});

describeRequiring(ssProblem(), 'ss (iproute2)', 'svc-hub executable, its database frozen (seen through ss)', () => {
  it('SIGTERM while its database is frozen (every server process SIGSTOPped): the stop ends, the connections cut, exit 0', async () => {
    const server = await startEmbedded({ dataDir: join(tempDir(), 'data'), database: 'svc' });
    const frozen: number[] = [];
    try {
      const port = await freePort();
      const url = `http://127.0.0.1:${port}`;
      // Over TCP (not the server's Unix socket): the kernel shows each connection's queues by port.
      const tcp = new URL(server.url);
      tcp.searchParams.delete('host');
      // The closes' wait on each connection (5 s by default) and the requests' grace short: what is cut after them is what is checked.
      const hub = start(['serve'], { DATABASE_URL: tcp.toString(), PORT: String(port), SVC_EMBEDDING_PROVIDER: 'none', SVC_DATASOURCE_CLOSE_TIMEOUT: '500ms', SVC_HTTP_SHUTDOWN_GRACE: '1s' });
      await waitReady(url);
      expect((await fetch(`${url}/api/platform/secrets`, { headers: { 'X-Tenant-ID': '1' } })).status).toBe(200);
      // The application pool's connections (the requests'), idle once that request has ended.
      const app = await appConnections(server.url);
      frozen.push(...freeze(server.clusterDir));
      // A request that has its connection and waits on the frozen database through the stop.
      const waiting = fetch(`${url}/api/platform/secrets`, { headers: { 'X-Tenant-ID': '1' } }).then(
        (res) => res.status,
        (err: Error) => err.name,
      );
      // The frozen server cannot be asked; its host's kernel shows what waits unread on its side of a connection.
      await until('the request to wait on the frozen database', () => unreadBy(server.port).some((peer) => app.includes(peer)), { everyMs: 10, detail: hub.output });
      hub.child.kill('SIGTERM');
      // Was: still running, for ever (the outbox listener's and the pools' ends wait for a server that does not answer).
      const exit = await exitWithin(hub, 60_000);
      expect(exit).toBe(0);
      // The pools' and the outbox listener's own connection, each cut after the configured wait.
      expect(hub.output()).toContain('database connections still open 500 ms after the pool was closed');
      expect(hub.output()).toContain('a database connection still open 500 ms after it was closed');
      await waiting;
    } finally {
      for (const pid of frozen) process.kill(pid, 'SIGCONT');
      await server.stop();
    }
  }, 120_000);
});

describeRequiring(tmuxProblem(), 'tmux', 'svc-hub started from a terminal that has gone since', () => {
  it('a signal while the start stops an orphaned PostgreSQL that does not stop (frozen): interrupted at once, exit 0, one line; the orphan, asked to stop, ends once thawed and the next start serves', async () => {
    const dataDir = join(tempDir(), 'data');
    const env = { SVC_DATA_DIR: dataDir, SVC_HTTP_SHUTDOWN_GRACE: '1s', SVC_EMBEDDING_PROVIDER: 'none' };
    const port = await freePort();
    const first = start(['serve'], { ...env, PORT: String(port) });
    await waitReady(`http://127.0.0.1:${port}`);
    const clusterDir = join(dataDir, 'pg');
    const pgPid = Number(readFileSync(join(clusterDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
    first.child.kill('SIGKILL');
    await first.exited;
    const frozen = freeze(clusterDir);
    try {
      const again = start(['serve'], { ...env, PORT: String(port) });
      await until('the start to stop the orphan', () => again.output().includes('stopping the embedded PostgreSQL a previous hub left running'), { timeoutMs: 60_000, detail: () => again.output() });
      again.child.kill('SIGTERM');
      // Was: the start waited for the orphan's fast shutdown (30 s) and its immediate one (10 s) (the
      // orphan's pending signals, below, show it). The wait here outlasts both and the stop's limit
      // (the grace, 15 s, the embedded server's stop: 56 s), a hang guard: a start that waited for
      // them, or a stop given up at the limit, is seen for what it is.
      expect({ exit: await exitWithin(again, 80_000), output: again.output() }).toMatchObject({ exit: 0 });
      expect(again.output().match(/the start was interrupted by the stop; what it had acquired is released/g)).toHaveLength(1);
      expect(again.output()).not.toMatch(/the stop did not end within|does not stop|"level":50|"level":60|\bERROR\b|\bFATAL\b/);
      expect(isLive(pgPid)).toBe(true);
      // The wait for the orphan's stop ended at once: the orphan was sent its fast shutdown (SIGINT),
      // never the immediate one (SIGQUIT) the wait sends after 30 s, which would then wait here too.
      expect(pendingSignals(pgPid)).toEqual(['SIGINT']);
    } finally {
      for (const pid of frozen) process.kill(pid, 'SIGCONT');
    }
    // Thawed, the orphan ends the fast shutdown it was asked for; the next start takes its place.
    await until('the orphan to end', () => !isLive(pgPid), { timeoutMs: 30_000 });
    const served = start(['serve'], { ...env, PORT: String(port) });
    await waitReady(`http://127.0.0.1:${port}`);
    expect(served.output()).not.toContain('left running');
    served.child.kill('SIGTERM');
    expect(await exitCodeShowingOutput(served)).toBe(0);
  }, 180_000);

  it('all, its logs in a file: SIGTERM stops it with exit 0, every line written, `stopped` the last', async () => {
    const dataDir = join(tempDir(), 'data');
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    // A terminal (tmux's pane) the hub's standard input is, as a shell's job's: `svc-hub all > LOG 2>&1`.
    const terminal = startTmux({ command: 'sleep 600', env: {}, cwd: tmpdir() });
    let hub: ReturnType<typeof start>;
    try {
      const tty = openSync(terminal.tty(), constants.O_RDWR | constants.O_NOCTTY);
      try {
        hub = start(['all'], { SVC_DATA_DIR: dataDir, PORT: String(port) }, false, { stdin: tty, log: join(tempDir(), 'hub.log') });
      } finally {
        closeSync(tty);
      }
      await waitReady(url);
    } finally {
      // Closed, as a terminal window or a logged-out session is: its descriptors answer EIO from now on.
      terminal.kill();
    }
    hub.child.kill('SIGTERM');
    // Was: 128 (SIGABRT): node 20 aborted at exit, failing to restore the settings of the terminal
    // gone (`Assertion failed` in `node::ResetStdio`, in the log), after a clean stop.
    expect(await hub.exited).toBe(0);
    expect(hub.output()).not.toContain('Assertion failed');
    const lines = hub.output().trimEnd().split('\n');
    expect(lines.at(-2)).toMatch(/INFO: embedded PostgreSQL stopped$/);
    expect(lines.at(-1)).toMatch(/INFO: stopped$/);
    expect(existsSync(join(dataDir, 'hub.pid'))).toBe(false);
  }, 120_000);
});

/**
 * The one-shot commands' stop has the roles' time limit (cmd/stop.ts): each command waits on a
 * table the test holds locked, its database is then frozen (every server process SIGSTOPped) and
 * the command sent SIGTERM. The limit is the grace (1 s here) and 15 s, with an external database.
 */
describe('svc-hub run, secrets and outbox stopped while their database is frozen', () => {
  const GRACE = { SVC_HTTP_SHUTDOWN_GRACE: '1s' };
  let server: Awaited<ReturnType<typeof startEmbedded>>;
  let demo: Awaited<ReturnType<typeof startDemoSource>>;
  let owner: pg.Client;

  beforeAll(async () => {
    server = await startEmbedded({ dataDir: join(tempDir(), 'data'), database: 'svc' });
    demo = await startDemoSource({ port: 0, host: '127.0.0.1', rows: 300, log: () => undefined });
    // A connector to run, applied through a hub that migrated the database.
    const port = await freePort();
    const hub = start(['serve'], { DATABASE_URL: server.url, PORT: String(port), SVC_EMBEDDING_PROVIDER: 'none' });
    await waitReady(`http://127.0.0.1:${port}`);
    const manifest = {
      apiVersion: 'connectors.svc.io/v1',
      kind: 'Connector',
      metadata: { name: 'frozen' },
      connector_type: 'rest-generic',
      spec: {
        base_url: demo.url,
        endpoints: [
          {
            id: 'partners',
            path: '/open/partners',
            pagination: { kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit: 100, response_path: '$.data', total_path: '$.total' },
            target: { table: 'ext.partners', unique_key: '$.id' },
          },
        ],
      },
    };
    const applied = await fetch(`http://127.0.0.1:${port}/api/connectors/apply`, { method: 'POST', headers: { 'X-Tenant-ID': '1', 'Content-Type': 'application/json' }, body: JSON.stringify(manifest) });
    expect(applied.status).toBe(201);
    hub.child.kill('SIGTERM');
    expect(await exitCodeShowingOutput(hub)).toBe(0);
    owner = new pg.Client({ connectionString: server.url });
    await owner.connect();
  }, 120_000);

  afterAll(async () => {
    await owner?.end();
    await demo?.close();
    await server?.stop();
  });

  /**
   * Starts the command while the test's transaction holds the lock `hold` takes, waits until the
   * command waits on it, freezes the database and sends SIGTERM: the exit code (or `still running
   * after …`), the time from the signal, the command's output.
   */
  async function stoppedFrozen(args: string[], hold: string, env: Record<string, string> = {}) {
    const frozen: number[] = [];
    await owner.query('begin');
    try {
      await owner.query(hold);
      const command = start(args, { DATABASE_URL: server.url, ...GRACE, ...env });
      // A command that never came to wait is not left running into the next test.
      await until(
        `svc-hub ${args.join(' ')} to wait on the lock the test holds`,
        async () => {
          // The migrations' lock is tried again and again (src/db/migrations.ts), not waited for in one statement: the start says so.
          if (command.output().includes('another process is applying the migrations')) return true;
          // pg_locks, which shows every role's sessions (pg_stat_activity hides other roles' waits from a role that is not a superuser).
          const { rows } = await owner.query<{ n: number }>('select count(*)::int as n from pg_locks where not granted');
          return rows[0]!.n > 0;
        },
        { timeoutMs: 60_000, detail: () => command.output() },
      ).catch((err: unknown) => {
        command.child.kill('SIGKILL');
        throw err;
      });
      frozen.push(...freeze(server.clusterDir));
      const signalled = performance.now();
      command.child.kill('SIGTERM');
      // Was: still running, for ever.
      const exit = await exitWithin(command, 40_000);
      return { exit, ms: performance.now() - signalled, output: command.output() };
    } finally {
      for (const pid of frozen) process.kill(pid, 'SIGCONT');
      await owner.query('rollback');
    }
  }

  it("every role waiting on the migrations' lock, then the database frozen: the start is interrupted at once (its connection cut here), exit 0 (serve) or 1 (the commands)", async () => {
    // The lock another replica applying the migrations holds (src/db/migrations.ts), here for the test's transaction.
    const migrationLock = "select pg_advisory_xact_lock(hashtext('svc-hub:migrations'))";
    const key = { SVC_SECRET_MASTER_KEY: Buffer.alloc(32, 0x5a).toString('base64') };
    const cases = [
      { args: ['serve'], code: 0, said: 'SIGTERM: interrupting the start' },
      { args: ['migrate'], code: 1, said: 'SIGTERM: interrupting the migrations' },
      { args: ['run', 'connector', 'frozen', '--tenant', 'default'], code: 1, said: 'SIGTERM: stopping' },
      { args: ['secrets', 'rekey'], code: 1, said: 'SIGTERM: stopping after the batch in progress', env: key },
      { args: ['outbox', 'consumers'], code: 1, said: 'SIGTERM: stopping once the command in hand has ended' },
    ];
    for (const { args, code, said, env } of cases) {
      const { exit, output } = await stoppedFrozen(args, migrationLock, { PORT: String(await freePort()), SVC_EMBEDDING_PROVIDER: 'none', ...env });
      // Was: still running, for ever (the start waited on the lock, then on the frozen database).
      expect({ args, exit, output }).toMatchObject({ exit: code });
      expect(output).toContain(said);
      expect(output).toContain('the start was interrupted by the stop; what it had acquired is released');
      // Nothing waits on the frozen server: no give-up at the limit (16 s), no connection cut after its close's wait.
      expect(output).not.toContain('the stop did not end within');
      expect(output).not.toContain('still open');
    }
  }, 180_000);

  it("serve whose start waits on the pools (the stored secrets' check on a locked table), then the database frozen: interrupted at once, exit 0", async () => {
    const { exit, output } = await stoppedFrozen(['serve'], 'lock table platform.secrets in access exclusive mode', {
      PORT: String(await freePort()),
      SVC_EMBEDDING_PROVIDER: 'none',
      SVC_MIGRATE_ON_START: 'false',
    });
    // Was: given up at the stop's limit (16 s), naming the stored secrets' check, exit 1.
    expect({ exit, output }).toMatchObject({ exit: 0 });
    expect(output).toContain('SIGTERM: interrupting the start');
    expect(output).toContain('the start was interrupted by the stop; what it had acquired is released');
    expect(output).not.toContain('the stop did not end within');
    // The pools' connections are cut by the interruption: the release waits on none of them (one it
    // waited on would be cut after svc.datasource.close-timeout, saying `still open`).
    expect(output).not.toContain('still open');
  }, 120_000);

  it("run connector: the run's end waits on the database; the stop is given up after its limit, naming the run, exit 1", async () => {
    // The tenant's DDL lock, which the run takes (shared) to register its table.
    const { rows } = await owner.query<{ id: number }>("select id from core.tenants where code = 'default'");
    const ddlLock = `select pg_advisory_xact_lock(hashtext('${ddlLockName(tenantSchema(rows[0]!.id))}'))`;
    const { exit, ms, output } = await stoppedFrozen(['run', 'connector', 'frozen', '--tenant', 'default'], ddlLock);
    expect({ exit, output }).toMatchObject({ exit: 1 });
    expect(ms).toBeGreaterThan(16_000);
    expect(output).toContain('stopping: the run ends Failed interrupted');
    expect(output).toMatch(/the stop did not end within 16000 ms; still pending: the connector run; [^\n]*the connector runs' end/);
  }, 120_000);

  it('secrets rekey: its batch in progress waits on the database; the stop is given up after its limit, exit 1', async () => {
    const key = Buffer.alloc(32, 0x5a).toString('base64');
    const { exit, ms, output } = await stoppedFrozen(['secrets', 'rekey'], 'lock table platform.secrets in access exclusive mode', { SVC_SECRET_MASTER_KEY: key, SVC_SECRET_PREVIOUS_MASTER_KEYS: Buffer.alloc(32, 1).toString('hex') });
    expect({ exit, output }).toMatchObject({ exit: 1 });
    expect(ms).toBeGreaterThan(16_000);
    expect(output).toContain('SIGTERM: stopping after the batch in progress');
    expect(output).toContain('the stop did not end within 16000 ms; still pending: the rekey (its batch in progress). Exiting without waiting for them');
    expect(output).not.toContain(key);
  }, 120_000);

  it('outbox consumers: its query waits on the database; the stop is given up after its limit, exit 1', async () => {
    const { exit, ms, output } = await stoppedFrozen(['outbox', 'consumers'], 'lock table events.consumer_cursors in access exclusive mode');
    expect({ exit, output }).toMatchObject({ exit: 1 });
    expect(ms).toBeGreaterThan(16_000);
    expect(output).toContain('SIGTERM: stopping once the command in hand has ended');
    expect(output).toContain('the stop did not end within 16000 ms; still pending: the consumers command. Exiting without waiting for them');
  }, 120_000);
});
