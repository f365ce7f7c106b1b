import { randomBytes } from 'node:crypto';
import { ensureDatabase } from '../../src/db/embedded.js';

/** The owner URL of the run's PostgreSQL server (set by global-setup.ts). */
export function serverUrl(): string {
  const url = process.env.SVC_TEST_DATABASE_URL;
  if (!url) throw new Error('SVC_TEST_DATABASE_URL is not set: run the tests through jest (global-setup starts PostgreSQL)');
  return url;
}

/** A fresh, empty database on the run's server; returns its owner URL. */
export async function createTestDatabase(prefix = 't'): Promise<string> {
  const name = `${prefix}_${randomBytes(6).toString('hex')}`;
  await ensureDatabase(serverUrl(), name);
  const url = new URL(serverUrl());
  url.pathname = `/${name}`;
  return url.toString();
}
