import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { freePort } from '../../src/db/embedded.js';
import { packageRoot } from '../../src/package-root.js';
import { until } from '../../test/harness/until.js';

/** The svc-hub executable as a child process, the way operators run it (the fault suite kills it). */

const BIN = join(packageRoot(), 'bin', 'svc-hub.js');
/** The same key in every process of a test, so secrets written by one are read by the next. */
export const MASTER_KEY = Buffer.alloc(32, 0x42).toString('base64');

export interface HubProcess {
  child: ChildProcess;
  url: string;
  output(): string;
  exited: Promise<number>;
  /** kill -9: no shutdown of any kind. */
  crash(): Promise<void>;
  stop(): Promise<number>;
}

const running = new Set<HubProcess>();

/**
 * Starts `svc-hub <role>` on `databaseUrl` with `env` (property environment forms) and waits until it is ready.
 * Without `databaseUrl` the hub runs its embedded PostgreSQL (`SVC_DATA_DIR` in `env`), as a single-node operator runs it.
 */
export async function startHubProcess(role: 'all' | 'serve' | 'dispatch', databaseUrl: string | undefined, env: Record<string, string> = {}, waitReady = true): Promise<HubProcess> {
  const port = await freePort();
  const child = spawn(process.execPath, [BIN, role], {
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      SVC_CONFIG: '/dev/null',
      SVC_LOG_LEVEL: 'info',
      ...(databaseUrl === undefined ? {} : { DATABASE_URL: databaseUrl }),
      PORT: String(port),
      SVC_SECRET_MASTER_KEY: MASTER_KEY,
      // The faults are about runs, deliveries and consumers: no sentence-encoder worker embedding the
      // platform corpus in every process start, competing for the CPU with what is measured.
      SVC_EMBEDDING_PROVIDER: 'none',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (d) => (output += d));
  child.stderr!.on('data', (d) => (output += d));
  const exited = new Promise<number>((resolve) => child.on('exit', (code, signal) => resolve(code ?? (signal ? 128 : -1))));
  const hub: HubProcess = {
    child,
    url: `http://127.0.0.1:${port}`,
    output: () => output,
    exited,
    async crash() {
      child.kill('SIGKILL');
      await exited;
      running.delete(hub);
    },
    async stop() {
      child.kill('SIGTERM');
      const code = await exited;
      running.delete(hub);
      return code;
    },
  };
  running.add(hub);
  if (waitReady) {
    await until(`svc-hub ${role} to be ready`, async () => (await fetch(`${hub.url}/q/health/ready`).catch(() => undefined))?.status === 200, {
      timeoutMs: 60_000,
      everyMs: 100,
      detail: () => output.slice(-2000),
    });
  }
  return hub;
}

/** Kills whatever a failed test left running. */
export async function killAll(): Promise<void> {
  for (const hub of [...running]) await hub.crash();
}
