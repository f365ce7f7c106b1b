import { type ChildProcess, spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from '@jest/globals';
import { freePort, isLive } from '../src/db/embedded.js';
import { packageRoot } from '../src/package-root.js';
import { describeRequiring } from '../test/harness/requires.js';
import { startTmux, tmuxProblem } from '../test/harness/tmux.js';
import { until } from '../test/harness/until.js';

/**
 * `npm start` as README.md says to run it, stopped as people and process managers stop it: npm
 * passes the SIGINT and SIGTERM it receives on to the hub (through the shell of the script, which
 * must hand its place to node for that), and a terminal's Ctrl-C or a stop of the whole process
 * group reaches the hub itself too, so the hub has the same signal twice at once: one stop, not a
 * second signal that cuts the stop short (`SIGINT again: exiting now`).
 */

const ROOT = packageRoot();
const dir = mkdtempSync(join(tmpdir(), 'svc-npm-start-'));
chmodSync(dir, 0o755);
/** One data directory for the file: the first start initialises it, the others reuse it. */
const dataDir = join(dir, 'data');
const children: ChildProcess[] = [];

/** The hub holding the data directory (hub.pid), or undefined once it has stopped. */
function hubPid(): number | undefined {
  try {
    // The pid alone (hub.holder has the hub's place too).
    const pid = Number(readFileSync(join(dataDir, 'hub.pid'), 'utf8').split('\n')[0]);
    return pid && isLive(pid) ? pid : undefined;
  } catch {
    return undefined;
  }
}

afterAll(async () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  // A hub the signal did not reach (npm gone, node left running): stopped, its PostgreSQL with it.
  const left = hubPid();
  if (left) {
    process.kill(left, 'SIGTERM');
    await until('the hub left running to stop', () => !hubPid(), 30_000).catch(() => process.kill(left, 'SIGKILL'));
  }
  rmSync(dir, { recursive: true, force: true });
}, 60_000);

function env(port: number): Record<string, string> {
  return {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: process.env.HOME ?? '/tmp',
    SVC_CONFIG: '/dev/null',
    SVC_LOG_LEVEL: 'info',
    SVC_DATA_DIR: dataDir,
    PORT: String(port),
    npm_config_update_notifier: 'false',
  };
}

async function waitReady(url: string, timeoutMs = 90_000): Promise<void> {
  await until(
    `${url} to be ready`,
    async () => {
      try {
        return (await fetch(`${url}/q/health/ready`)).status === 200;
      } catch {
        return false;
      }
    },
    { timeoutMs, everyMs: 200 },
  );
}

/** `npm start` leading a process group of its own (as a process manager's service or a shell's job). */
function npmStart(port: number) {
  const child = spawn('npm', ['start'], { cwd: ROOT, env: env(port), stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  children.push(child);
  let output = '';
  child.stdout!.on('data', (d) => (output += d));
  child.stderr!.on('data', (d) => (output += d));
  const exited = new Promise<number>((resolve) => child.on('exit', (code, signal) => resolve(code ?? (signal ? 128 : -1))));
  return { child, exited, output: () => output };
}

function expectCleanStop(output: string, signal: string): void {
  expect(output).toContain(`${signal}: stopping (in-flight requests finish first)`);
  expect(output).not.toContain('again: exiting now');
  expect(output).toMatch(/INFO: embedded PostgreSQL stopped\n[^\n]*INFO: stopped\n/);
  expect(existsSync(join(dataDir, 'hub.pid'))).toBe(false);
}

describe('npm start', () => {
  it('SIGTERM to npm alone (a process manager stopping its main process) stops the hub cleanly, as does SIGTERM to the whole group', async () => {
    const port = await freePort();
    const first = npmStart(port);
    await waitReady(`http://127.0.0.1:${port}`);
    const hub = hubPid();
    expect(hub).toBeDefined();
    expect(hub).not.toBe(first.child.pid);
    process.kill(first.child.pid!, 'SIGTERM');
    await first.exited;
    // Was: npm and its shell gone, the hub left running without a signal, holding the data directory and the port.
    await until('the hub to stop', () => !hubPid() && first.output().includes('INFO: stopped\n'), 30_000);
    expectCleanStop(first.output(), 'SIGTERM');

    const second = npmStart(port);
    await waitReady(`http://127.0.0.1:${port}`);
    // systemd's default: every process of the service at once; npm passes its own on.
    process.kill(-second.child.pid!, 'SIGTERM');
    await second.exited;
    await until('the hub to stop', () => !hubPid(), 30_000);
    expectCleanStop(second.output(), 'SIGTERM');
  }, 240_000);
});

describeRequiring(tmuxProblem(), 'tmux', 'npm start in a terminal', () => {
  it('Ctrl-C stops the hub cleanly: runs end interrupted, the pools close, then the embedded PostgreSQL', async () => {
    const port = await freePort();
    const log = join(dir, 'terminal.log');
    const terminal = startTmux({ command: `npm start > ${log} 2>&1`, env: env(port), cwd: ROOT });
    try {
      await waitReady(`http://127.0.0.1:${port}`);
      terminal.sendKeys('C-c');
      await until('npm to end', () => terminal.ended(), 30_000);
      await until('the hub to stop', () => !hubPid(), 30_000);
      // Was, with the script's shell handing its place to node: 'SIGINT again: exiting now' (exit 130), no clean stop.
      expectCleanStop(readFileSync(log, 'utf8'), 'SIGINT');
    } finally {
      terminal.kill();
    }
  }, 240_000);
});
