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

/** How long a starting process may write nothing and not be ready before its start counts as stuck. */
const STALL_MS = 60_000;

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
  let wroteAt = Date.now();
  const written = (d: Buffer) => {
    output += d;
    wroteAt = Date.now();
  };
  child.stdout!.on('data', written);
  child.stderr!.on('data', written);
  let exitCode: number | undefined;
  const exited = new Promise<number>((resolve) =>
    child.on('exit', (code, signal) => {
      exitCode = code ?? (signal ? 128 : -1);
      resolve(exitCode);
    }),
  );
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
    // No bound of its own on the whole start, which a loaded machine stretches past a minute (the
    // migrations of a new database): it fails when the process exits, or stops writing (its log
    // shows each migration and start step) for STALL_MS without being ready.
    await until(
      `svc-hub ${role} to be ready`,
      async () => {
        if (exitCode !== undefined) throw new Error(`svc-hub ${role} exited (${exitCode}) before it was ready; ${output.slice(-2000)}`);
        if (Date.now() - wroteAt > STALL_MS) throw new Error(`svc-hub ${role} wrote nothing for ${STALL_MS} ms and is not ready; ${output.slice(-2000)}`);
        return (await fetch(`${hub.url}/q/health/ready`).catch(() => undefined))?.status === 200;
      },
      { timeoutMs: Number.POSITIVE_INFINITY, everyMs: 100 },
    );
  }
  return hub;
}

/** Kills whatever a failed test left running. */
export async function killAll(): Promise<void> {
  for (const hub of [...running]) await hub.crash();
}
