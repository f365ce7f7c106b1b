import { randomBytes } from 'node:crypto';
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { startEmbedded, type EmbeddedDatabase } from '../../src/db/embedded.js';
import { setLogger, createLogger } from '../../src/observability/logger.js';
import { stopPostmaster } from './run-tmpdir.js';

/**
 * One embedded PostgreSQL for the whole test run; each test file creates its own database on it
 * (test/harness/database.ts). SVC_TEST_DATABASE_URL points the suite at an existing server instead.
 */
export async function startTestPostgres(): Promise<void> {
  // Inherited by the workers: marks the servers of this run's own (test/harness/database.ts ownServer).
  process.env.SVC_TEST_RUN_ID = randomBytes(8).toString('hex');
  if (process.env.SVC_TEST_DATABASE_URL) return;
  setLogger(createLogger({ level: 'warn', json: true }));
  const dir = mkdtempSync(join(tmpdir(), 'svc-test-pg-'));
  chmodSync(dir, 0o755);
  const server = await startEmbedded({ dataDir: dir, database: 'postgres' });
  await endLeakedTransactions(server.url);
  (globalThis as { __svcTestPg?: EmbeddedDatabase }).__svcTestPg = server;
  process.env.SVC_TEST_DATABASE_URL = server.url;
  process.env.SVC_TEST_PG_DIR = dir;
}

/**
 * Outbox readers see only what committed below the oldest transaction open on the whole server
 * (pg_snapshot_xmin), and the test files share this server: one transaction a failed test left
 * open (a client it never ended, holding an xid) would hold back every later suite's events for
 * the rest of its worker's life, failing suites that have nothing to do with it. The server ends a
 * session idle in a transaction for longer than any test runs, so such a failure stays one failure.
 */
async function endLeakedTransactions(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query("alter system set idle_in_transaction_session_timeout = '120s'");
    await client.query('select pg_reload_conf()');
  } finally {
    await client.end();
  }
}

/** Written into an own server's temporary directory (`svc-own-pg-*`): `{run, file}`. */
export const OWN_SERVER_MARKER = 'test-run.json';
export const OWN_SERVER_PREFIX = 'svc-own-pg-';

/**
 * The servers of their own (`migratedDatabase({ownServer: true})`) that this run's test files left
 * running: each is stopped and its directory removed, and the run fails naming the files. A file
 * that never closes its database leaves a PostgreSQL that outlives the test worker (a jest worker
 * ends without running the launcher's exit handler), holding memory and a port on the machine for
 * good.
 */
async function stopLeftOwnServers(): Promise<string[]> {
  const run = process.env.SVC_TEST_RUN_ID;
  if (!run) return [];
  const files: string[] = [];
  for (const name of readdirSync(tmpdir())) {
    if (!name.startsWith(OWN_SERVER_PREFIX)) continue;
    const dir = join(tmpdir(), name);
    let marker: { run?: string; file?: string };
    try {
      marker = JSON.parse(readFileSync(join(dir, OWN_SERVER_MARKER), 'utf8')) as { run?: string; file?: string };
    } catch {
      continue; // another run's, or one being made
    }
    if (marker.run !== run) continue;
    if (await stopPostmaster(join(dir, 'data', 'pg', 'postmaster.pid'))) files.push(marker.file || dir);
    rmSync(dir, { recursive: true, force: true });
  }
  return files;
}

export async function stopTestPostgres(): Promise<void> {
  const left = await stopLeftOwnServers();
  if (left.length > 0) {
    await stopSharedServer();
    throw new Error(`test files left their own PostgreSQL running (stopped now; close the database of migratedDatabase({ownServer: true}) in afterAll): ${left.join(', ')}`);
  }
  await stopSharedServer();
}

async function stopSharedServer(): Promise<void> {
  const server = (globalThis as { __svcTestPg?: EmbeddedDatabase }).__svcTestPg;
  if (!server) return;
  try {
    await server.stop();
  } finally {
    if (process.env.SVC_TEST_PG_DIR) rmSync(process.env.SVC_TEST_PG_DIR, { recursive: true, force: true });
  }
}
