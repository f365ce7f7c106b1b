import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { startEmbedded, type EmbeddedDatabase } from '../../src/db/embedded.js';
import { setLogger, createLogger } from '../../src/observability/logger.js';

/**
 * One embedded PostgreSQL for the whole test run; each test file creates its own database on it
 * (test/harness/database.ts). SVC_TEST_DATABASE_URL points the suite at an existing server instead.
 */
export async function startTestPostgres(): Promise<void> {
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

export async function stopTestPostgres(): Promise<void> {
  const server = (globalThis as { __svcTestPg?: EmbeddedDatabase }).__svcTestPg;
  if (!server) return;
  await server.stop();
  if (process.env.SVC_TEST_PG_DIR) rmSync(process.env.SVC_TEST_PG_DIR, { recursive: true, force: true });
}
