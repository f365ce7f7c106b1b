import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from '@jest/globals';
import { packageRoot } from '../package-root.js';
import { here, lockDataDir, unlockDataDir } from './embedded.js';

/**
 * `<dataDir>/hub.pid` taken by several processes at the same moment (src/db/embedded.ts,
 * `lockDataDir`): real processes, as hubs started together on one data directory are, each trying
 * the same directories at the same instants; and files written in another place (another machine,
 * container or pid namespace sharing the directory), by hand and by a real process in a pid
 * namespace of its own.
 */

const dirs: string[] = [];
const children: ChildProcess[] = [];
afterAll(() => {
  for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

/** Takes the lock of each directory in turn, all processes at the same instants, and reports what it got. */
const SCRIPT = `
import { lockDataDir } from ${JSON.stringify(join(packageRoot(), 'src', 'db', 'embedded.ts'))};
const dirs = JSON.parse(process.env.LOCK_DIRS);
process.stdout.write('ready\\n');
let input = '';
process.stdin.on('data', async (d) => {
  input += d;
  if (!input.includes('\\n')) return;
  const start = Number(input.trim());
  const results = [];
  for (let i = 0; i < dirs.length; i++) {
    while (Date.now() < start + i * 40) {}
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

/** `ownPidNamespace`: run in a new pid namespace (`unshare`), where the contender is pid 1, as a container's hub often is. */
function contender(lockDirs: string[], { ownPidNamespace = false } = {}) {
  const node = [process.execPath, '--import', 'tsx', '--input-type=module', '-e', SCRIPT];
  const [command, ...args] = ownPidNamespace ? ['unshare', '--pid', '--fork', '--mount-proc', '--kill-child', ...node] : node;
  const child = spawn(command!, args, {
    env: { PATH: process.env.PATH, HOME: process.env.HOME, LOCK_DIRS: JSON.stringify(lockDirs), SVC_LOG_LEVEL: 'error' },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  children.push(child);
  let out = '';
  let err = '';
  child.stderr!.on('data', (d) => (err += d));
  child.stdout!.on('data', (d) => (out += d));
  const exited = new Promise<never>((_, reject) => child.once('exit', (code) => reject(new Error(`contender exited ${code}: ${err}`))));
  // Its own lines only ('ready', then the results): log lines go by.
  const lines = async (n: number): Promise<string[]> => {
    for (;;) {
      const got = out.split('\n').filter((line) => line === 'ready' || line.startsWith('['));
      if (got.length >= n) return got;
      await Promise.race([exited, new Promise((r) => setTimeout(r, 20))]);
    }
  };
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
    // The gates and the files made beside the lock are gone: only hub.pid is left.
    for (const dir of lockDirs) expect(readdirSync(dir)).toEqual(['hub.pid']);
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

/** hub.pid as a hub of `place` writes it. */
function lockFile(pid: number, place: { host: string; boot?: string; pidns?: string }): string {
  return `${pid}\nhost=${place.host}\nboot=${place.boot}\npidns=${place.pidns}\n`;
}

function elsewhere(dir: string, pid: number, place: { host: string; boot?: string; pidns?: string }): string {
  return `data directory ${dir} is held by svc-hub pid ${pid} on host ${place.host} (boot ${place.boot}, pid namespace ${place.pidns}), which is not this process's pid namespace: another container or machine shares the directory, and whether that hub still runs cannot be told from here. Stop that hub; if it is gone for certain (its container or machine stopped), remove ${join(dir, 'hub.pid')}, and ${join(dir, 'pg', 'postmaster.pid')} if there, and start again`;
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

  it('records pid, host name, boot and pid namespace; this place\'s own file and an earlier version\'s (pid only) are judged by the pid, as before', async () => {
    expect(me.host).toBe(hostname());
    expect(me.boot).toBe(readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim());
    expect(me.pidns).toMatch(/^\d+$/);
    const live = sleeper();
    const inUse = (dir: string, pid: number) =>
      `data directory ${dir} is already used by another svc-hub process (pid ${pid}); stop that process, or point SVC_DATA_DIR at another directory`;

    for (const content of [undefined, lockFile(gonePid(), me), String(gonePid())]) {
      const dir = lockDir(content);
      await lockDataDir(dir);
      expect(readFileSync(join(dir, 'hub.pid'), 'utf8')).toBe(`${process.pid}\nhost=${me.host}\nboot=${me.boot}\npidns=${me.pidns}\n`);
      unlockDataDir(dir);
      expect(readdirSync(dir)).toEqual([]);
    }
    for (const content of [lockFile(live.pid!, me), String(live.pid)]) {
      const dir = lockDir(content);
      await expect(lockDataDir(dir)).rejects.toThrow(inUse(dir, live.pid!));
      unlockDataDir(dir); // not this process's: left
      expect(readFileSync(join(dir, 'hub.pid'), 'utf8')).toBe(content);
    }
  });

  it('a file of another host or another pid namespace is never judged by its pid (alive here, this very process, or gone): the start is refused naming the holder, and the file is left', async () => {
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
      expect(readdirSync(dir)).toEqual(['hub.pid']);
    }
  });

  it('the gate of a stale file\'s replacement, left by a start of another place (killed in it): never taken from here, the start is refused naming the gate', async () => {
    const stale = String(gonePid()); // an earlier version's file, stale in every place
    const dir = lockDir(stale);
    const gate = join(dir, `hub.pid.stale-${createHash('sha256').update(stale).digest('hex').slice(0, 12)}`);
    const otherContainer = { host: me.host, boot: me.boot, pidns: ANOTHER_NAMESPACE };
    writeFileSync(gate, lockFile(gonePid(), otherContainer));
    const holder = Number(readFileSync(gate, 'utf8').split('\n')[0]);
    // Was (the gate judged by its pid): taken, and a second start of that place could replace the file too.
    await expect(lockDataDir(dir)).rejects.toThrow(elsewhere(dir, holder, otherContainer).replace(`remove ${join(dir, 'hub.pid')},`, `remove ${gate},`));
    expect(readFileSync(join(dir, 'hub.pid'), 'utf8')).toBe(stale);
  });

  it('a file of this host\'s previous boot, both outside any container (the initial pid namespace): left by this machine before it restarted, taken over', async () => {
    const INITIAL = '4026531836';
    const before = { host: me.host, boot: '0f2c3b4a-0000-4000-8000-000000000002', pidns: INITIAL };
    const dir = lockDir(lockFile(1, before));
    if (me.pidns === INITIAL) {
      await lockDataDir(dir);
      expect(readFileSync(join(dir, 'hub.pid'), 'utf8').split('\n')[0]).toBe(String(process.pid));
    } else {
      // In a container: the previous boot's file may be another machine's, whose host name is the same.
      await expect(lockDataDir(dir)).rejects.toThrow(elsewhere(dir, 1, before));
    }
  });

  const unshare = spawnSync('unshare', ['--pid', '--fork', '--mount-proc', 'true'], { encoding: 'utf8' });
  const namespaces = unshare.status === 0 ? undefined : `unshare --pid --fork --mount-proc does not work here (needs root or CAP_SYS_ADMIN): ${unshare.error?.message ?? unshare.stderr.trim()}`;
  if (namespaces) console.warn(`skipping the real pid namespace test: ${namespaces}`);
  (namespaces ? it.skip : it)('a real hub process in a pid namespace of its own (pid 1 there) and one in this namespace: neither takes the other\'s lock', async () => {
    const [inner, outer] = [lockDir(), lockDir()];
    // A process in a new pid namespace holds `inner`: pid 1 there, which here is this machine's init.
    const contained = contender([inner], { ownPidNamespace: true });
    await contained.ready;
    contained.child.stdin!.write(`${Date.now()}\n`);
    expect(await contained.done).toEqual(['took']);
    const held = readFileSync(join(inner, 'hub.pid'), 'utf8');
    const pidns = /\npidns=(\d+)\n/.exec(held)?.[1];
    expect(pidns).toBeDefined();
    expect(pidns).not.toBe(me.pidns);
    expect(held).toBe(lockFile(1, { host: me.host, boot: me.boot, pidns }));
    // Was: refused naming pid 1 here (init), as if the directory's holder were this machine's init.
    await expect(lockDataDir(inner)).rejects.toThrow(elsewhere(inner, 1, { host: me.host, boot: me.boot, pidns }));

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
