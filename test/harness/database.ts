import { randomBytes } from 'node:crypto';
import { expect } from '@jest/globals';
import pg from 'pg';
import { Database } from '../../src/db/database.js';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureDatabase, startEmbedded } from '../../src/db/embedded.js';
import { migrate } from '../../src/db/migrations.js';
import { roleUrl } from '../../src/db/roles.js';
import { OWN_SERVER_MARKER, OWN_SERVER_PREFIX } from './start-postgres.js';

/** An embedded PostgreSQL of the caller's alone, in a temporary directory removed when it stops. */
async function ownServer(): Promise<{ url: string; stop(): Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), OWN_SERVER_PREFIX));
  const remove = () => rmSync(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 200 });
  let server: Awaited<ReturnType<typeof startEmbedded>>;
  try {
    chmodSync(dir, 0o755);
    server = await startEmbedded({ dataDir: join(dir, 'data'), database: 'own' });
  } catch (err) {
    remove();
    throw err;
  }
  // Which run and file started it: the run's teardown stops a server a file left running and names the file.
  writeFileSync(join(dir, OWN_SERVER_MARKER), JSON.stringify({ run: process.env.SVC_TEST_RUN_ID ?? '', file: expect.getState().testPath ?? '' }));
  return {
    url: server.url,
    async stop() {
      try {
        await server.stop();
      } finally {
        remove();
      }
    },
  };
}

/** The role names every test database uses (the hub's defaults). */
export const TEST_ROLES = { app: 'svc_app', worker: 'svc_worker', analytic: 'svc_analytic' };

/** The owner URL of the run's PostgreSQL server (set by global-setup.ts). */
export function serverUrl(): string {
  const url = process.env.SVC_TEST_DATABASE_URL;
  if (!url) throw new Error('SVC_TEST_DATABASE_URL is not set: run the tests through jest (global-setup starts PostgreSQL)');
  return url;
}

/** The databases this test file made on the run's server (test/harness/open-transactions.ts checks them at its end). */
export const databasesOfThisFile = new Set<string>();

/** A fresh, empty database on the run's server; returns its owner URL. */
export async function createTestDatabase(prefix = 't'): Promise<string> {
  const name = `${prefix}_${randomBytes(6).toString('hex')}`;
  databasesOfThisFile.add(name);
  await ensureDatabase(serverUrl(), name);
  const url = new URL(serverUrl());
  url.pathname = `/${name}`;
  return url.toString();
}

export interface MigratedDatabase {
  ownerUrl: string;
  /** The application and worker pools, as the hub opens them. */
  db: Database;
  /** A connected owner client (bypasses RLS): fixtures and assertions on raw rows. */
  owner: pg.Client;
  /** Closes the owner client and the pools. */
  close(): Promise<void>;
}

/**
 * A fresh database with every migration applied, the hub's pools over it, and optional fixture
 * tenants (`{id: code}`), for suites that test services below the HTTP layer.
 */
export async function migratedDatabase(tenants: Record<number, string> = {}, poolSize = 4, options: { ownServer?: boolean } = {}): Promise<MigratedDatabase> {
  // A server of its own: for suites that read the outbox, which is read below the oldest
  // transaction open on the whole server (pg_snapshot_xmin), so that other suites' transactions on
  // the shared server cannot hold their reads back.
  const own = options.ownServer ? await ownServer() : undefined;
  const ownerUrl = own ? own.url : await createTestDatabase();
  await migrate(ownerUrl, TEST_ROLES);
  const db = new Database({ appUrl: roleUrl(ownerUrl, TEST_ROLES.app), workerUrl: roleUrl(ownerUrl, TEST_ROLES.worker), analyticRole: TEST_ROLES.analytic, poolSize });
  const owner = new pg.Client({ connectionString: ownerUrl });
  await owner.connect();
  for (const [id, code] of Object.entries(tenants)) {
    await owner.query('insert into core.tenants (id, code, name) values ($1, $2, $3)', [Number(id), code, code]);
  }
  return {
    ownerUrl,
    db,
    owner,
    async close() {
      await owner.end();
      await db.close();
      await own?.stop();
    },
  };
}
