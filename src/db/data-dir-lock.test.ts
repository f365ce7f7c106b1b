import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from '@jest/globals';
import { packageRoot } from '../package-root.js';
import { captureLogs } from '../../test/harness/log-capture.js';
import { until } from '../../test/harness/until.js';
import { lockFree, withoutFlock } from '../../test/harness/data-dir-lock.js';
import * as earlier from '../../test/harness/hub-pid-83b12e2.js';
import { here, lockDataDir, startEmbedded, unlockDataDir } from './embedded.js';

/**
 * `<dataDir>/hub.lock` (the kernel lock) and `<dataDir>/hub.pid` taken by several processes at the
 * same moment (src/db/embedded.ts, `lockDataDir`): real processes, as hubs started together on one
 * data directory are, each trying the same directories at the same instants; files written in
 * another place (another machine, container or pid namespace sharing the directory), by hand and by
 * a real process in a pid namespace of its own, killed with its namespace as a container dies; and
 * the identity rules alone where flock is not available.
 */

const dirs: string[] = [];
const children: ChildProcess[] = [];
/** Process groups started here (a holder of hub.lock and its child). */
const groups: number[] = [];
afterAll(() => {
  for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
  for (const group of groups) {
    try {
      process.kill(-group, 'SIGKILL');
    } catch {
      // gone
    }
  }
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

/** This version's lock (src/db/embedded.ts), and the earlier one's (test/harness/hub-pid-83b12e2.ts). */
const THIS_VERSION = join(packageRoot(), 'src', 'db', 'embedded.ts');
const EARLIER_VERSION = join(packageRoot(), 'test', 'harness', 'hub-pid-83b12e2.ts');

/** Takes the lock of each directory in turn, all processes at the same instants, and reports what it got. */
const SCRIPT = `
const { lockDataDir } = await import(process.env.LOCK_MODULE);
const dirs = JSON.parse(process.env.LOCK_DIRS);
const lags = JSON.parse(process.env.LOCK_LAGS ?? '[]');
const spacing = Number(process.env.LOCK_SPACING ?? 40);
process.stdout.write('ready\\n');
let input = '';
process.stdin.on('data', async (d) => {
  input += d;
  if (!input.includes('\\n')) return;
  const start = Number(input.trim());
  const results = [];
  for (let i = 0; i < dirs.length; i++) {
    while (Date.now() < start + i * spacing + (lags[i] ?? 0)) {}
    try {
      await lockDataDir(dirs[i]);
      results.push('took');
    } catch (err) {
      results.push(err.name === 'DataDirInUse' ? (err.place ? 'held elsewhere by ' + err.pid : 'in use') : 'error: ' + err.message);
    }
  }
  process.stdout.write(JSON.stringify(results) + '\\n');
  // Alive until told: a holder that exited would make its lock stale for the others.
  process.stdin.on('end', () => process.exit(0));
});
`;

/**
 * `ownPidNamespace`: run in a new pid namespace (`unshare`), where the contender is pid 1, as a
 * container's hub often is. `earlier`: with the lock of the version before hub.holder. `flock`:
 * false, with no flock on its PATH.
 */
function contender(lockDirs: string[], { ownPidNamespace = false, earlier = false, flock = true, lags = [] as number[], spacing = 40 } = {}) {
  const node = [process.execPath, '--import', 'tsx', '--input-type=module', '-e', SCRIPT];
  const [command, ...args] = ownPidNamespace ? ['unshare', '--pid', '--fork', '--mount-proc', '--kill-child', ...node] : node;
  const child = spawn(command!, args, {
    env: {
      PATH: flock ? process.env.PATH : join(tmpdir(), 'svc-no-such-dir'),
      HOME: process.env.HOME,
      LOCK_DIRS: JSON.stringify(lockDirs),
      LOCK_MODULE: earlier ? EARLIER_VERSION : THIS_VERSION,
      LOCK_LAGS: JSON.stringify(lags),
      LOCK_SPACING: String(spacing),
      SVC_LOG_LEVEL: 'error',
    },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  children.push(child);
  let out = '';
  let err = '';
  child.stderr!.on('data', (d) => (err += d));
  child.stdout!.on('data', (d) => (out += d));
  const exited = new Promise<never>((_, reject) => child.once('exit', (code) => reject(new Error(`contender exited ${code}: ${err}`))));
  // Its own lines only ('ready', then the results): log lines go by.
  // Looked at on each output (after `out` took it), not every 20 ms.
  const lines = (n: number): Promise<string[]> =>
    new Promise((resolve, reject) => {
      const look = () => {
        const got = out.split('\n').filter((line) => line === 'ready' || line.startsWith('['));
        if (got.length < n) return;
        child.stdout!.off('data', look);
        resolve(got);
      };
      child.stdout!.on('data', look);
      exited.catch(reject);
      look();
    });
  const ready = lines(1);
  const done = lines(2).then((got) => JSON.parse(got[1]!) as string[]);
  return { child, ready, done };
}

describe('the data directory lock (hub.pid)', () => {
  it('several starts at the same instant, on fresh directories and on directories whose hub.pid names a process that is gone: exactly one takes each', async () => {
    const root = mkdtempSync(join(tmpdir(), 'svc-lock-'));
    chmodSync(root, 0o755);
    dirs.push(root);
    // The pid of a process that has exited: what a hub killed with kill -9 leaves in hub.pid.
    const gone = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' }).stdout;
    const rounds = 24;
    const lockDirs = Array.from({ length: rounds }, (_, i) => {
      const dir = join(root, `d${i}`);
      mkdirSync(dir);
      if (i % 2 === 1) writeFileSync(join(dir, 'hub.pid'), gone);
      return dir;
    });
    const contenders = Array.from({ length: 6 }, () => contender(lockDirs));
    await Promise.all(contenders.map((c) => c.ready));
    const start = Date.now() + 500;
    for (const c of contenders) c.child.stdin!.write(`${start}\n`);
    const results = await Promise.all(contenders.map((c) => c.done));
    for (const c of contenders) c.child.stdin!.end();

    const takers = lockDirs.map((_, i) => results.filter((r) => r[i] === 'took').length);
    // Was: a stale file taken by two starts (one removed it and made its own, the other removed that
    // one and made its own), and a fresh file read empty (made, not yet written) taken as stale.
    expect(takers).toEqual(lockDirs.map(() => 1));
    expect(results.flat().filter((r) => r !== 'took' && r !== 'in use')).toEqual([]);
    // The files made beside hub.holder and hub.pid are gone: hub.holder, hub.lock and hub.pid are left.
    for (const dir of lockDirs) expect(readdirSync(dir).sort()).toEqual(['hub.holder', 'hub.lock', 'hub.pid']);
  }, 120_000);
});

/** The pid of a process that has exited: what a hub killed with kill -9 leaves in hub.pid. */
function gonePid(): number {
  return Number(spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' }).stdout);
}

function lockDir(content?: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'svc-lock-'));
  dirs.push(dir);
  if (content !== undefined) writeFileSync(join(dir, 'hub.pid'), content);
  return dir;
}

/**
 * hub.holder as a hub of `place` writes it: `locked`, under the kernel lock; else where flock was not
 * available. The version before hub.holder wrote the same lines into hub.pid, which the tests below
 * write by hand as that version's file.
 */
function lockFile(pid: number, place: { host: string; boot?: string; pidns?: string }, locked = false): string {
  return `${pid}\nhost=${place.host}\nboot=${place.boot}\npidns=${place.pidns}\n${locked ? 'lock=hub.lock\n' : ''}`;
}

/** The refusal by the identity rules (a file of another place that no kernel lock vouches for). */
function elsewhere(dir: string, pid: number, place: { host: string; boot?: string; pidns?: string }): string {
  return `data directory ${dir} is held by svc-hub pid ${pid} on host ${place.host} (boot ${place.boot}, pid namespace ${place.pidns}), which is not this process's pid namespace: another container or machine shares the directory, and whether that hub still runs cannot be told from here. Stop that hub; if it is gone for certain (its container or machine stopped), remove ${join(dir, 'hub.pid')}, and ${join(dir, 'pg', 'postmaster.pid')} if there, and start again`;
}

/** The refusal while a hub of another place holds hub.lock: alive there for certain. */
function heldThere(dir: string, pid: number, place: { host: string; boot?: string; pidns?: string }): string {
  return `data directory ${dir} is held by svc-hub pid ${pid} on host ${place.host} (boot ${place.boot}, pid namespace ${place.pidns}), another container or machine sharing the directory, and ${join(dir, 'hub.lock')} is locked: that hub, or its PostgreSQL, still runs there. Stop it there, or point SVC_DATA_DIR at another directory; once it has exited, the next start here takes the directory over`;
}

/** A live process of this pid namespace other than this one. */
function sleeper(): ChildProcess {
  const child = spawn('sleep', ['600'], { stdio: 'ignore' });
  children.push(child);
  return child;
}

describe('hub.pid across places (machines, containers, pid namespaces sharing the data directory)', () => {
  const me = here();
  const ANOTHER_NAMESPACE = '4026532999';

  it('records pid, host name, boot, pid namespace and the kernel lock; holds hub.lock until unlocked; a file written without the lock, of this place or an earlier version\'s (pid only), is judged by the pid, as before', async () => {
    expect(me.host).toBe(hostname());
    expect(me.boot).toBe(readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim());
    expect(me.pidns).toMatch(/^\d+$/);
    const live = sleeper();
    const inUse = (dir: string, pid: number) =>
      `data directory ${dir} is already used by another svc-hub process (pid ${pid}); stop that process, or point SVC_DATA_DIR at another directory`;

    // The last: a live pid, but written under the kernel lock, which is free: its writer has exited
    // (the pid is another process's now), so taken over.
    for (const content of [undefined, lockFile(gonePid(), me), String(gonePid()), lockFile(live.pid!, me, true)]) {
      const dir = lockDir(content);
      await lockDataDir(dir);
      expect(readFileSync(join(dir, 'hub.holder'), 'utf8')).toBe(`${process.pid}\nhost=${me.host}\nboot=${me.boot}\npidns=${me.pidns}\nlock=hub.lock\n`);
      expect(readFileSync(join(dir, 'hub.pid'), 'utf8')).toBe(`${process.pid}\n`);
      expect(lockFree(dir)).toBe(false);
      unlockDataDir(dir);
      expect(lockFree(dir)).toBe(true);
      expect(readdirSync(dir)).toEqual(['hub.lock']);
    }
    for (const content of [lockFile(live.pid!, me), String(live.pid)]) {
      const dir = lockDir(content);
      await expect(lockDataDir(dir)).rejects.toThrow(inUse(dir, live.pid!));
      unlockDataDir(dir); // not this process's: left
      expect(readFileSync(join(dir, 'hub.pid'), 'utf8')).toBe(content);
      expect(lockFree(dir)).toBe(true); // a refused start keeps no lock
    }
  });

  it('a file of another host or another pid namespace is never judged by its pid (alive here, this very process, or gone): written without the kernel lock, the start is refused naming the holder and the file is left; written under it, with hub.lock free, taken over', async () => {
    const otherHost = { host: `not-${me.host}`, boot: '0f2c3b4a-0000-4000-8000-000000000001', pidns: ANOTHER_NAMESPACE };
    // A container on this machine (same kernel boot; same host name, as with the host's network).
    const otherContainer = { host: me.host, boot: me.boot, pidns: ANOTHER_NAMESPACE };
    const cases = [
      { pid: process.pid, place: otherHost }, // was: taken as this process's own
      { pid: gonePid(), place: otherHost }, // was: taken as stale
      { pid: 1, place: otherContainer }, // was: refused naming this machine's pid 1
      { pid: process.pid, place: otherContainer },
      { pid: gonePid(), place: otherContainer },
      { pid: gonePid(), place: { ...me, boot: otherHost.boot, pidns: ANOTHER_NAMESPACE } }, // a container of this host before a restart
    ];
    for (const { pid, place } of cases) {
      const dir = lockDir(lockFile(pid, place));
      await expect(lockDataDir(dir)).rejects.toThrow(elsewhere(dir, pid, place));
      unlockDataDir(dir);
      expect(readFileSync(join(dir, 'hub.pid'), 'utf8')).toBe(lockFile(pid, place));
      expect(readdirSync(dir).sort()).toEqual(['hub.lock', 'hub.pid']);
    }
    // Under the kernel lock, which nothing holds: every process of that place has exited (its
    // container was killed, its machine lost power). Was: refused until both files were removed by hand.
    for (const { pid, place } of cases) {
      const dir = lockDir(lockFile(pid, place, true));
      await lockDataDir(dir);
      expect(readFileSync(join(dir, 'hub.holder'), 'utf8')).toBe(lockFile(process.pid, me, true));
      unlockDataDir(dir);
    }
  });

  it('a live process that holds hub.lock with no hub.pid naming it (a start that has just taken the lock; a hub.pid removed by hand): the start waits a moment, then is refused', async () => {
    const dir = lockDir();
    writeFileSync(join(dir, 'hub.lock'), '');
    // flock and the sleep it runs (which keeps the locked descriptor) in a group of their own, killed together.
    const holder = spawn('flock', ['-x', join(dir, 'hub.lock'), 'sleep', '600'], { stdio: 'ignore', detached: true });
    groups.push(holder.pid!);
    await until('the holder to take hub.lock', () => !lockFree(dir));
    // Was (no kernel lock): taken, as no hub.pid said otherwise.
    await expect(lockDataDir(dir)).rejects.toThrow(
      `data directory ${dir} is in use: ${join(dir, 'hub.lock')} is locked by a live process, and ${join(dir, 'hub.holder')} is missing. Stop the svc-hub or PostgreSQL that uses the directory (here, \`fuser -v ${join(dir, 'hub.lock')}\` lists the processes that have it open), or point SVC_DATA_DIR at another directory`,
    );
    expect(readdirSync(dir)).toEqual(['hub.lock']);
    // The holder writes hub.pid under the lock a moment after the refused start began: it is named.
    writeFileSync(join(dir, 'hub.pid'), '');
    const named = lockDataDir(dir);
    setTimeout(() => writeFileSync(join(dir, 'hub.pid'), lockFile(holder.pid!, me, true)), 300);
    await expect(named).rejects.toThrow(`already used by another svc-hub process (pid ${holder.pid})`);
    process.kill(-holder.pid!, 'SIGKILL');
    await until('hub.lock to be free', () => lockFree(dir));
    await lockDataDir(dir);
    unlockDataDir(dir);
  }, 30_000);

  it("a signal during that wait (the start's interrupt) ends it at once with the signal's reason: nothing written, hub.lock not kept open", async () => {
    const dir = lockDir();
    const lockPath = join(dir, 'hub.lock');
    writeFileSync(lockPath, '');
    const holder = spawn('flock', ['-x', lockPath, 'sleep', '600'], { stdio: 'ignore', detached: true });
    groups.push(holder.pid!);
    await until('the holder to take hub.lock', () => !lockFree(dir));
    const openHere = () => readdirSync('/proc/self/fd').filter((fd) => {
      try {
        return readlinkSync(`/proc/self/fd/${fd}`) === lockPath;
      } catch {
        return false;
      }
    });
    const stop = new AbortController();
    // Under way once the call returns: hub.lock opened and found locked, the holder looked for.
    const taking = lockDataDir(dir, stop.signal).then(
      () => 'taken',
      (err: Error) => err.message,
    );
    expect(openHere()).toHaveLength(1);
    const signalled = performance.now();
    stop.abort(new Error('SIGTERM'));
    // Was: the wait went on for its 5 s, then refused ('is in use').
    expect(await taking).toBe('SIGTERM');
    expect(performance.now() - signalled).toBeLessThan(1_000);
    expect(readdirSync(dir)).toEqual(['hub.lock']);
    expect(openHere()).toEqual([]);
    // The embedded PostgreSQL's start passes its interrupt on.
    const later = new AbortController();
    const embedded = startEmbedded({ dataDir: dir, interrupt: later.signal }).then(
      () => 'started',
      (err: Error) => err.message,
    );
    await until('the start to wait on hub.lock', () => openHere().length === 1);
    const again = performance.now();
    later.abort(new Error('SIGINT'));
    expect(await embedded).toBe('SIGINT');
    expect(performance.now() - again).toBeLessThan(1_000);
    expect(readdirSync(dir)).toEqual(['hub.lock']);
    process.kill(-holder.pid!, 'SIGKILL');
    await until('hub.lock to be free', () => lockFree(dir));
  }, 30_000);

  it('without flock (not on PATH): the identity rules alone, with a warning; a file of another place is refused even under the lock it names, and is taken with flock back; a start writes hub.pid without the lock mark', async () => {
    const otherContainer = { host: me.host, boot: me.boot, pidns: ANOTHER_NAMESPACE };
    const pid = gonePid();
    const dir = lockDir(lockFile(pid, otherContainer, true));
    const logs = captureLogs('warn');
    try {
      await withoutFlock(() => expect(lockDataDir(dir)).rejects.toThrow(elsewhere(dir, pid, otherContainer)));
      expect(logs.lines().map((l) => l.msg)).toEqual([
        `no kernel lock on ${join(dir, 'hub.lock')} (flock: ENOENT): hub.holder alone guards the data directory, and a hub.holder of another container or machine is never taken over`,
      ]);
      // A directory of its own: taken, the file written without the lock mark.
      const own = lockDir(String(gonePid()));
      await withoutFlock(() => lockDataDir(own));
      expect(readFileSync(join(own, 'hub.holder'), 'utf8')).toBe(lockFile(process.pid, me));
      expect(readFileSync(join(own, 'hub.pid'), 'utf8')).toBe(`${process.pid}\n`);
      expect(lockFree(own)).toBe(true);
      unlockDataDir(own);
      expect(readdirSync(own)).toEqual(['hub.lock']);
    } finally {
      logs.restore();
    }
    await lockDataDir(dir);
    unlockDataDir(dir);
  });

  it('flock failing otherwise (ENOLCK: a file system without locks): the identity rules alone, with a warning naming what flock said', async () => {
    // flock(1) as util-linux's answers a flock(2) failing with ENOLCK: its message, exit 71 (EX_OSERR).
    const bin = lockDir();
    writeFileSync(join(bin, 'flock'), '#!/bin/sh\necho "flock: 3: No locks available" >&2\nexit 71\n', { mode: 0o755 });
    const otherContainer = { host: me.host, boot: me.boot, pidns: ANOTHER_NAMESPACE };
    const pid = gonePid();
    const dir = lockDir(lockFile(pid, otherContainer, true));
    const logs = captureLogs('warn');
    const path = process.env.PATH;
    process.env.PATH = `${bin}:${path}`;
    try {
      await expect(lockDataDir(dir)).rejects.toThrow(elsewhere(dir, pid, otherContainer));
      expect(logs.lines().map((l) => l.msg)).toEqual([
        `no kernel lock on ${join(dir, 'hub.lock')} (flock: 3: No locks available): hub.holder alone guards the data directory, and a hub.holder of another container or machine is never taken over`,
      ]);
    } finally {
      process.env.PATH = path;
      logs.restore();
    }
  });

  it('without flock: the gate of a stale file\'s replacement, left by a start of another place (killed in it), is never taken from here, the start is refused naming the gate', async () => {
    const stale = String(gonePid()); // an earlier version's file, stale in every place
    const dir = lockDir(stale);
    const gate = join(dir, `hub.pid.stale-${createHash('sha256').update(stale).digest('hex').slice(0, 12)}`);
    const otherContainer = { host: me.host, boot: me.boot, pidns: ANOTHER_NAMESPACE };
    writeFileSync(gate, lockFile(gonePid(), otherContainer));
    const holder = Number(readFileSync(gate, 'utf8').split('\n')[0]);
    // Was (the gate judged by its pid): taken, and a second start of that place could replace the file too.
    await withoutFlock(() => expect(lockDataDir(dir)).rejects.toThrow(elsewhere(dir, holder, otherContainer).replace(`remove ${join(dir, 'hub.pid')},`, `remove ${gate},`)));
    expect(readFileSync(join(dir, 'hub.pid'), 'utf8')).toBe(stale);
  });

  it("without flock: a signal while the start waits for another start of this place replacing the same stale file (its gate held) ends the wait at once with the signal's reason, nothing of its own left", async () => {
    const stale = String(gonePid());
    const dir = lockDir(stale);
    const gate = join(dir, `hub.pid.stale-${createHash('sha256').update(stale).digest('hex').slice(0, 12)}`);
    // The gate of a start that stays inside it (a live process of this place).
    const other = spawn('sleep', ['600'], { stdio: 'ignore' });
    children.push(other);
    writeFileSync(gate, lockFile(other.pid!, me));
    const race = async (interrupt?: AbortController) => {
      const logs = captureLogs('warn');
      try {
        return await withoutFlock(async () => {
          const taking = lockDataDir(dir, interrupt?.signal).then(
            () => 'taken',
            (err: Error) => err.message,
          );
          // Said right before the race for hub.holder and hub.pid begins.
          await until('the start to race for the files', () => logs.raw().includes('no kernel lock'));
          const began = performance.now();
          interrupt?.abort(new Error('SIGTERM'));
          return { outcome: await taking, ms: performance.now() - began };
        });
      } finally {
        logs.restore();
      }
    };
    // Without a signal: the start tries again every 10 ms, 200 times, then gives up.
    const unsignalled = await race();
    expect(unsignalled.outcome).toBe(`could not lock ${join(dir, 'hub.pid')}: it keeps changing`);
    const signalled = await race(new AbortController());
    // Was: the signal waited for, the start refused as above once its tries were spent.
    expect(signalled.outcome).toBe('SIGTERM');
    expect(signalled.ms).toBeLessThan(unsignalled.ms / 4);
    expect(readdirSync(dir).sort()).toEqual(['hub.lock', 'hub.pid', gate.slice(dir.length + 1)]);
    other.kill('SIGKILL');
  });

  it('a file of this host\'s previous boot: under the kernel lock, taken over (a restart frees the lock); without it, refused like any other place\'s', async () => {
    const before = { host: me.host, boot: '0f2c3b4a-0000-4000-8000-000000000002', pidns: '4026531836' };
    const locked = lockDir(lockFile(1, before, true));
    await lockDataDir(locked);
    expect(readFileSync(join(locked, 'hub.pid'), 'utf8').split('\n')[0]).toBe(String(process.pid));
    unlockDataDir(locked);
    // Was taken outside any container (the initial pid namespace): the same host name may be another machine's.
    const unlocked = lockDir(lockFile(1, before));
    await expect(lockDataDir(unlocked)).rejects.toThrow(elsewhere(unlocked, 1, before));
  });

  const unshare = spawnSync('unshare', ['--pid', '--fork', '--mount-proc', 'true'], { encoding: 'utf8' });
  const namespaces = unshare.status === 0 ? undefined : `unshare --pid --fork --mount-proc does not work here (needs root or CAP_SYS_ADMIN): ${unshare.error?.message ?? unshare.stderr.trim()}`;
  if (namespaces) console.warn(`skipping the real pid namespace test: ${namespaces}`);
  (namespaces ? it.skip : it)('a real hub process in a pid namespace of its own (pid 1 there) and one in this namespace: neither takes the other\'s lock; the namespace killed (as a container dies), its directory is taken over', async () => {
    const [inner, outer] = [lockDir(), lockDir()];
    // A process in a new pid namespace holds `inner`: pid 1 there, which here is this machine's init.
    const contained = contender([inner], { ownPidNamespace: true });
    await contained.ready;
    contained.child.stdin!.write(`${Date.now()}\n`);
    expect(await contained.done).toEqual(['took']);
    const held = readFileSync(join(inner, 'hub.holder'), 'utf8');
    const pidns = /\npidns=(\d+)\n/.exec(held)?.[1];
    expect(pidns).toBeDefined();
    expect(pidns).not.toBe(me.pidns);
    expect(held).toBe(lockFile(1, { host: me.host, boot: me.boot, pidns }, true));
    // Was: refused naming pid 1 here (init), as if the directory's holder were this machine's init.
    await expect(lockDataDir(inner)).rejects.toThrow(heldThere(inner, 1, { host: me.host, boot: me.boot, pidns }));
    // The whole namespace killed: unshare, then (--kill-child) its pid 1, then every process in it.
    contained.child.kill('SIGKILL');
    await until('the namespace\'s processes to exit and hub.lock to be free', () => lockFree(inner));
    // Was: refused (a file of another place) until hub.pid was removed by hand.
    await lockDataDir(inner);
    expect(readFileSync(join(inner, 'hub.holder'), 'utf8')).toBe(lockFile(process.pid, me, true));
    unlockDataDir(inner);

    // A process of this namespace holds `outer`; one in a new pid namespace tries it.
    const local = contender([outer]);
    await local.ready;
    local.child.stdin!.write(`${Date.now()}\n`);
    expect(await local.done).toEqual(['took']);
    const intruder = contender([outer], { ownPidNamespace: true });
    await intruder.ready;
    intruder.child.stdin!.write(`${Date.now()}\n`);
    // Was: 'took' (the holder's pid is no process there, so the file was judged stale): two holders.
    expect(await intruder.done).toEqual([`held elsewhere by ${local.child.pid}`]);
    expect(readFileSync(join(outer, 'hub.pid'), 'utf8').split('\n')[0]).toBe(String(local.child.pid));
    for (const c of [contained, local, intruder]) c.child.stdin!.end();
  }, 60_000);
});

describe('hub.pid as earlier versions read it (their lock logic, copied from commit 83b12e2: test/harness/hub-pid-83b12e2.ts)', () => {
  const me = here();

  for (const flock of [true, false]) {
    it(`a directory a hub of this version holds (${flock ? 'under the kernel lock' : 'without flock'}): hub.pid is its pid alone, the earlier logic reads that live pid and is refused, both files left; once the holder has exited, the earlier logic takes the directory`, async () => {
      const dir = lockDir();
      const holder = contender([dir], { flock });
      await holder.ready;
      holder.child.stdin!.write(`${Date.now()}\n`);
      expect(await holder.done).toEqual(['took']);
      const pid = holder.child.pid!;
      // Was (the identity lines in hub.pid): Number('<pid>\nhost=…') is NaN, taken for stale, and
      // the earlier version replaced hub.pid and started a second PostgreSQL on the cluster.
      await expect(earlier.lockDataDir(dir)).rejects.toThrow(`data directory ${dir} is already used by another svc-hub process (pid ${pid})`);
      earlier.unlockDataDir(dir); // not its own: left
      expect(readFileSync(join(dir, 'hub.pid'), 'utf8')).toBe(`${pid}\n`);
      expect(readFileSync(join(dir, 'hub.holder'), 'utf8')).toBe(lockFile(pid, me, flock));
      // The holder exits without a word (killed): its hub.pid is stale to the earlier logic too.
      const exited = new Promise((resolve) => holder.child.once('exit', resolve));
      holder.child.kill('SIGKILL');
      await exited;
      await earlier.lockDataDir(dir);
      expect(readFileSync(join(dir, 'hub.pid'), 'utf8')).toBe(String(process.pid));
      earlier.unlockDataDir(dir);
    }, 30_000);
  }

  it('a directory an earlier version holds (hub.pid, a live pid alone): a start of this version is refused naming it, under the kernel lock and without it, and leaves hub.pid as it was and no hub.holder', async () => {
    const live = sleeper();
    for (const flock of [true, false]) {
      const dir = lockDir(String(live.pid));
      const start = () => lockDataDir(dir);
      await expect(flock ? start() : withoutFlock(start)).rejects.toThrow(`data directory ${dir} is already used by another svc-hub process (pid ${live.pid})`);
      expect(readFileSync(join(dir, 'hub.pid'), 'utf8')).toBe(String(live.pid));
      expect(readdirSync(dir).sort()).toEqual(['hub.lock', 'hub.pid']);
    }
  });

  it('what a killed hub of this version leaves (hub.holder and hub.pid naming a gone pid): taken over by this version, with the lock and without it, and by the earlier logic', async () => {
    const pid = gonePid();
    for (const take of ['this version', 'without flock', 'earlier'] as const) {
      const dir = lockDir(`${pid}\n`);
      writeFileSync(join(dir, 'hub.holder'), lockFile(pid, me, take !== 'without flock'));
      if (take === 'earlier') {
        await earlier.lockDataDir(dir);
        expect(readFileSync(join(dir, 'hub.pid'), 'utf8')).toBe(String(process.pid));
        earlier.unlockDataDir(dir);
        continue;
      }
      await (take === 'this version' ? lockDataDir(dir) : withoutFlock(() => lockDataDir(dir)));
      expect(readFileSync(join(dir, 'hub.holder'), 'utf8')).toBe(lockFile(process.pid, me, take === 'this version'));
      expect(readFileSync(join(dir, 'hub.pid'), 'utf8')).toBe(`${process.pid}\n`);
      unlockDataDir(dir);
      expect(readdirSync(dir)).toEqual(['hub.lock']);
    }
  });

  it('a hub.holder of another place written without the kernel lock is refused, naming both files to remove once that hub is gone', async () => {
    const otherContainer = { host: me.host, boot: me.boot, pidns: '4026532999' };
    const pid = gonePid();
    const dir = lockDir(`${pid}\n`);
    writeFileSync(join(dir, 'hub.holder'), lockFile(pid, otherContainer));
    const refusal = elsewhere(dir, pid, otherContainer).replace(`remove ${join(dir, 'hub.pid')},`, `remove ${join(dir, 'hub.holder')} and ${join(dir, 'hub.pid')},`);
    await expect(lockDataDir(dir)).rejects.toThrow(refusal);
    await withoutFlock(() => expect(lockDataDir(dir)).rejects.toThrow(refusal));
    expect(readdirSync(dir).sort()).toEqual(['hub.holder', 'hub.lock', 'hub.pid']);
  });

  it('starts of this version and of the earlier one at the same instants, on fresh directories, on an earlier version\'s stale hub.pid and on what a killed hub of this version left: exactly one takes each', async () => {
    const root = mkdtempSync(join(tmpdir(), 'svc-lock-'));
    chmodSync(root, 0o755);
    dirs.push(root);
    const gone = gonePid();
    const lockDirs = Array.from({ length: 18 }, (_, i) => {
      const dir = join(root, `d${i}`);
      mkdirSync(dir);
      if (i % 3 === 1) writeFileSync(join(dir, 'hub.pid'), String(gone));
      if (i % 3 === 2) {
        writeFileSync(join(dir, 'hub.pid'), `${gone}\n`);
        writeFileSync(join(dir, 'hub.holder'), lockFile(gone, me, true));
      }
      return dir;
    });
    // The earlier version's starts 0 to 90 ms after this version's: this version's start takes some
    // milliseconds (flock), the earlier one's a fraction of one, so each wins some directories.
    const lags = (isEarlier: boolean) => lockDirs.map((_, i) => (isEarlier ? (i % 4) * 30 : 0));
    const contenders = [false, true, false, true, false, true].map((isEarlier) => ({ isEarlier, ...contender(lockDirs, { earlier: isEarlier, lags: lags(isEarlier), spacing: 200 }) }));
    await Promise.all(contenders.map((c) => c.ready));
    const start = Date.now() + 500;
    for (const c of contenders) c.child.stdin!.write(`${start}\n`);
    const results = await Promise.all(contenders.map((c) => c.done));
    try {
      expect(results.flat().filter((r) => r !== 'took' && r !== 'in use')).toEqual([]);
      lockDirs.forEach((dir, i) => {
        const takers = contenders.filter((_, c) => results[c]![i] === 'took');
        expect(takers).toHaveLength(1);
        const taker = takers[0]!;
        const files = readdirSync(dir).sort();
        expect(readFileSync(join(dir, 'hub.pid'), 'utf8').trim()).toBe(String(taker.child.pid));
        if (taker.isEarlier) {
          // A start of this version refused there removed its own hub.holder (which may have replaced
          // a killed hub's, stale either way): none, or the killed hub's, is left.
          expect(files.filter((f) => f !== 'hub.holder')).toEqual(['hub.lock', 'hub.pid']);
          if (files.includes('hub.holder')) expect(readFileSync(join(dir, 'hub.holder'), 'utf8')).toBe(lockFile(gone, me, true));
        } else {
          expect(files).toEqual(['hub.holder', 'hub.lock', 'hub.pid']);
          expect(readFileSync(join(dir, 'hub.holder'), 'utf8')).toBe(lockFile(taker.child.pid!, me, true));
        }
      });
    } finally {
      for (const c of contenders) c.child.stdin!.end();
    }
  }, 120_000);
});

describe('hub.holder where the file system refuses it', () => {
  const me = here();
  // chattr and mount need root (CI runs as root).
  (process.getuid?.() === 0 ? it : it.skip)('a rename refused (an immutable hub.holder) or a write refused (a full disk) fails the start and leaves no temporary file beside hub.holder', async () => {
    const dir = lockDir();
    const holder = join(dir, 'hub.holder');
    writeFileSync(holder, lockFile(gonePid(), me, true)); // stale: written under the lock by a hub that has exited
    execFileSync('chattr', ['+i', holder]);
    try {
      await expect(lockDataDir(dir)).rejects.toThrow(/^EPERM: operation not permitted, rename '.+\.tmp' -> '.+\/hub\.holder'$/);
    } finally {
      execFileSync('chattr', ['-i', holder]);
    }
    // Was: hub.holder.<pid>.<random>.tmp left at each start so refused.
    expect(readdirSync(dir).sort()).toEqual(['hub.holder', 'hub.lock']);

    const full = lockDir();
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64k,mode=0755', 'tmpfs', full]);
    try {
      writeFileSync(join(full, 'hub.lock'), '');
      // The file system filled: the filler's write stops at its end.
      expect(() => writeFileSync(join(full, 'filler'), Buffer.alloc(128 * 1024))).toThrow(/ENOSPC/);
      await expect(lockDataDir(full)).rejects.toThrow(/^ENOSPC: no space left on device, write$/);
      // Was: an empty hub.holder.<pid>.<random>.tmp (made, its bytes refused) left at each start.
      expect(readdirSync(full).sort()).toEqual(['filler', 'hub.lock']);
    } finally {
      execFileSync('umount', [full]);
    }
  });
});
