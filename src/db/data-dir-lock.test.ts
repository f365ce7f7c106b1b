import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from '@jest/globals';
import { packageRoot } from '../package-root.js';

/**
 * `<dataDir>/hub.pid` taken by several processes at the same moment (src/db/embedded.ts,
 * `lockDataDir`): real processes, as hubs started together on one data directory are, each trying
 * the same directories at the same instants.
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
      results.push(err.name === 'DataDirInUse' ? 'in use' : 'error: ' + err.message);
    }
  }
  process.stdout.write(JSON.stringify(results) + '\\n');
  // Alive until told: a holder that exited would make its lock stale for the others.
  process.stdin.on('end', () => process.exit(0));
});
`;

function contender(lockDirs: string[]) {
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', SCRIPT], {
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
