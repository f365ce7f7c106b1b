import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { isLive } from '../../src/db/embedded.js';

/**
 * The test run's own temporary directory (docs/development.md, "Temporary files of a test run").
 * Jest's global setup makes `<TMPDIR>/svc-test-run-XXXXXX` and points TMPDIR at it before the
 * workers start, so that everything the run's tests, harnesses and child processes make through
 * os.tmpdir() (mkdtemp, the embedded PostgreSQL's directories, sshd's, chromium's profile) lands in
 * it. The global teardown names what is left in it, removes it and fails the run when something
 * was. Entries of other processes sharing the machine's /tmp never count.
 */
export const RUN_DIR_PREFIX = 'svc-test-run-';
/** `{pid, started, ns}` of the jest process that owns a run directory. */
export const OWNER_FILE = '.owner.json';
/** A run directory with no owner file older than this was left by a run killed as it made it. */
const UNOWNED_AFTER_MS = 10 * 60_000;

/** tsx keeps its compile cache in `<tmpdir>/tsx-<euid>`: the run's is a link to the machine's, kept warm across runs. */
function tsxCacheName(): string {
  return `tsx-${process.geteuid ? process.geteuid() : userInfo().username}`;
}

/** The start time of a process (field 22 of /proc/<pid>/stat): with its pid, it names the process even after pids wrap. '' where there is no /proc. */
export function processStart(pid: number): string {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? '';
  } catch {
    return '';
  }
}

/** This process's PID namespace (`pid:[4026531836]`): a pid means something only within it. '' where there is no /proc. */
function pidNamespace(): string {
  try {
    return readlinkSync('/proc/self/ns/pid');
  } catch {
    return '';
  }
}

type Owner = { pid?: number; started?: string; ns?: string };

function ownerAlive(owner: Owner): boolean {
  // A run of another PID namespace (a container sharing this /tmp): its pid cannot be looked at from here.
  if ((owner.ns ?? '') !== pidNamespace()) return true;
  if (!owner.pid || !isLive(owner.pid)) return false;
  return !owner.started || processStart(owner.pid) === owner.started;
}

/**
 * Makes this run's directory in `outer` (0711: the postgres OS user that an embedded server runs as
 * under root reaches the directories made in it, and lists none of them), recording this process as
 * its owner.
 */
export function makeRunDir(outer: string = tmpdir()): string {
  const dir = mkdtempSync(join(outer, RUN_DIR_PREFIX));
  chmodSync(dir, 0o711);
  writeFileSync(join(dir, OWNER_FILE), JSON.stringify({ pid: process.pid, started: processStart(process.pid), ns: pidNamespace() }));
  const tsx = tsxCacheName();
  try {
    mkdirSync(join(outer, tsx), { recursive: true });
    symlinkSync(join(outer, tsx), join(dir, tsx));
  } catch {
    // No shared cache: tsx makes one of the run's own, removed with it.
  }
  return dir;
}

/** What the run's tests left in `dir` (names, sorted): everything but what makeRunDir put there. */
export function leftIn(dir: string): string[] {
  const own = new Set([OWNER_FILE, tsxCacheName()]);
  return readdirSync(dir)
    .filter((name) => !own.has(name))
    .sort();
}

/** Removes the run's directory; answers what the tests left in it. */
export function removeRunDir(dir: string): string[] {
  const left = existsSync(dir) ? leftIn(dir) : [];
  // rm of the tsx link removes the link, never the shared cache it points at.
  rmSync(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 200 });
  return left;
}

/**
 * The run directories in `outer` of runs that ended without their teardown (killed: a CI timeout, a
 * Ctrl-C that jest did not see through): their owner is gone. A PostgreSQL such a run left running
 * in one is stopped first; then the directory is removed. Answers the directories removed. Those
 * of live runs, and one just being made, are left alone.
 */
export async function sweepStaleRunDirs(outer: string = tmpdir()): Promise<string[]> {
  const swept: string[] = [];
  for (const name of readdirSync(outer)) {
    if (!name.startsWith(RUN_DIR_PREFIX)) continue;
    const dir = join(outer, name);
    let owner: Owner | undefined;
    try {
      owner = JSON.parse(readFileSync(join(dir, OWNER_FILE), 'utf8')) as Owner;
    } catch {
      try {
        if (Date.now() - statSync(dir).mtimeMs < UNOWNED_AFTER_MS) continue;
      } catch {
        continue;
      }
    }
    if (owner && ownerAlive(owner)) continue;
    await stopServersUnder(dir);
    unmountUnder(dir);
    rmSync(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 200 });
    swept.push(dir);
  }
  return swept;
}

/**
 * Unmounts (lazily) what a killed run left mounted under `dir`: the root-run tests of a full or read-only disk mount a
 * small tmpfs in their directory and unmount it in a `finally` a kill -9 skips; its mount point cannot be removed
 * (EBUSY), which failed every later run's setup.
 */
function unmountUnder(dir: string): void {
  let mounts: string;
  try {
    mounts = readFileSync('/proc/self/mounts', 'utf8');
  } catch {
    return;
  }
  const points = mounts
    .split('\n')
    .map((line) => line.split(' ')[1])
    .filter((point): point is string => point !== undefined && (point === dir || point.startsWith(`${dir}/`)));
  for (const point of points.sort().reverse()) {
    try {
      execFileSync('umount', ['-l', point], { stdio: 'ignore' });
    } catch {
      // Not ours to unmount (not root): the removal below reports it.
    }
  }
}

/** Stops (SIGINT, a fast shutdown) the PostgreSQL servers still running on a data directory under `dir`. */
async function stopServersUnder(dir: string): Promise<void> {
  let files: string[];
  try {
    files = (readdirSync(dir, { recursive: true }) as string[]).filter((f) => f.endsWith('postmaster.pid'));
  } catch {
    return;
  }
  for (const file of files) await stopPostmaster(join(dir, file));
}

/**
 * Stops the PostgreSQL that `pidFile` (a cluster's postmaster.pid) names, when it is running: SIGINT
 * (a fast shutdown), then up to 30 s for it to end. False when none was running.
 */
export async function stopPostmaster(pidFile: string): Promise<boolean> {
  let pid = 0;
  try {
    pid = Number(readFileSync(pidFile, 'utf8').split('\n')[0]);
    // The pid of a server long gone may be another program's by now.
    if (!(pid > 0 && isLive(pid) && readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('postgres'))) return false;
    process.kill(pid, 'SIGINT');
  } catch {
    return false;
  }
  for (let waited = 0; isLive(pid) && waited < 30_000; waited += 100) await new Promise((r) => setTimeout(r, 100));
  return true;
}
