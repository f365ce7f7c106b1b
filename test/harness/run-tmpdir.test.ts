import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { afterAll, describe, expect, it } from '@jest/globals';
import { isLive, startEmbedded } from '../../src/db/embedded.js';
import { leftIn, makeRunDir, OWNER_FILE, processStart, RUN_DIR_PREFIX, removeRunDir, sweepStaleRunDirs } from './run-tmpdir.js';

/** The run's own TMPDIR (test/harness/run-tmpdir.ts, jest's global setup and teardown). */

const outers: string[] = [];
afterAll(() => {
  for (const dir of outers) rmSync(dir, { recursive: true, force: true });
});

/** A directory standing for the machine's /tmp. */
function outer(): string {
  const dir = mkdtempSync(join(tmpdir(), 'svc-outer-'));
  chmodSync(dir, 0o711); // as /tmp is to the postgres OS user an embedded server runs as under root
  outers.push(dir);
  return dir;
}

/** The pid of a process that has exited. */
function gonePid(): number {
  return Number(spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' }).stdout);
}

describe("the test run's TMPDIR", () => {
  it('is a directory of the run alone, which the test workers and the processes they start use', () => {
    const dir = process.env.SVC_TEST_RUN_DIR;
    expect(dir).toBeDefined();
    expect(tmpdir()).toBe(dir);
    expect(basename(dir!).startsWith(RUN_DIR_PREFIX)).toBe(true);
    expect(JSON.parse(readFileSync(join(dir!, OWNER_FILE), 'utf8')).pid).not.toBe(process.pid); // jest's main process, not the worker
    const child = spawnSync(process.execPath, ['-e', 'process.stdout.write(require("node:os").tmpdir())'], { encoding: 'utf8' });
    expect(child.stdout).toBe(dir);
    // The run's PostgreSQL lives in it too, and is removed with it.
    if (process.env.SVC_TEST_PG_DIR) expect(process.env.SVC_TEST_PG_DIR.startsWith(`${dir}/`)).toBe(true);
  });

  it('names what was left in it, and its removal keeps the tsx cache it links to', () => {
    const machine = outer();
    const dir = makeRunDir(machine);
    expect(leftIn(dir)).toEqual([]);
    const tsx = join(machine, `tsx-${process.geteuid!()}`);
    writeFileSync(join(tsx, 'cached'), 'x');
    mkdirSync(join(dir, 'docs-defaults-abc'));
    writeFileSync(join(dir, 'svc-hub-download-1.csv'), 'a,b\n');
    expect(leftIn(dir)).toEqual(['docs-defaults-abc', 'svc-hub-download-1.csv']);
    expect(removeRunDir(dir)).toEqual(['docs-defaults-abc', 'svc-hub-download-1.csv']);
    expect(existsSync(dir)).toBe(false);
    expect(readFileSync(join(tsx, 'cached'), 'utf8')).toBe('x');
  });

  it("an earlier run's directory is removed once its jest process is gone, a live run's never", async () => {
    const machine = outer();
    const live = makeRunDir(machine);
    const ns = readlinkSync('/proc/self/ns/pid');
    const gone = makeRunDir(machine);
    writeFileSync(join(gone, OWNER_FILE), JSON.stringify({ pid: gonePid(), started: '1', ns }));
    // A run of another PID namespace (a container sharing the directory): its pid means nothing here.
    const elsewhere = makeRunDir(machine);
    writeFileSync(join(elsewhere, OWNER_FILE), JSON.stringify({ pid: gonePid(), started: '1', ns: 'pid:[1]' }));
    // The pid of a live process, but not the process that made the directory (pids wrap).
    const reused = makeRunDir(machine);
    writeFileSync(join(reused, OWNER_FILE), JSON.stringify({ pid: process.pid, started: `${processStart(process.pid)}0`, ns }));
    // Being made this moment (no owner file yet): left alone.
    const making = join(machine, `${RUN_DIR_PREFIX}making`);
    mkdirSync(making);
    const other = join(machine, 'svc-chart-abc');
    mkdirSync(other);
    expect((await sweepStaleRunDirs(machine)).sort()).toEqual([gone, reused].sort());
    for (const dir of [live, elsewhere, making, other]) expect(existsSync(dir)).toBe(true);
    expect(removeRunDir(live)).toEqual([]);
  });

  it('a PostgreSQL a killed run left running in its directory is stopped before the directory goes', async () => {
    const machine = outer();
    const dir = makeRunDir(machine);
    writeFileSync(join(dir, OWNER_FILE), JSON.stringify({ pid: gonePid(), ns: readlinkSync('/proc/self/ns/pid') }));
    const data = join(dir, 'svc-test-pg-x');
    mkdirSync(data, { mode: 0o755 });
    const server = await startEmbedded({ dataDir: data, database: 'postgres' });
    const pid = Number(readFileSync(join(server.clusterDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
    try {
      expect(server.clusterDir.startsWith(dir)).toBe(true);
      expect(isLive(pid)).toBe(true);
      expect(await sweepStaleRunDirs(machine)).toEqual([dir]);
      expect(isLive(pid)).toBe(false);
      expect(existsSync(dir)).toBe(false);
    } finally {
      if (isLive(pid)) await server.stop();
    }
  }, 120_000);
});
