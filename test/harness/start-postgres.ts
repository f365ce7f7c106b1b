import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
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
  (globalThis as { __svcTestPg?: EmbeddedDatabase }).__svcTestPg = server;
  process.env.SVC_TEST_DATABASE_URL = server.url;
  process.env.SVC_TEST_PG_DIR = dir;
}

export async function stopTestPostgres(): Promise<void> {
  const server = (globalThis as { __svcTestPg?: EmbeddedDatabase }).__svcTestPg;
  if (!server) return;
  await server.stop();
  if (process.env.SVC_TEST_PG_DIR) rmSync(process.env.SVC_TEST_PG_DIR, { recursive: true, force: true });
}
