import { expect, it } from '@jest/globals';
import pg from 'pg';
import { serverUrl } from './database.js';

/**
 * The shared test server ends a session left idle in a transaction (test/harness/start-postgres.ts):
 * one transaction a failed test left open would otherwise hold back every later suite's outbox reads.
 */
it('the shared test server ends sessions idle in a transaction after 120 s', async () => {
  if (!process.env.SVC_TEST_PG_DIR) return; // SVC_TEST_DATABASE_URL named a server of the caller's: left as it is
  const client = new pg.Client({ connectionString: serverUrl() });
  await client.connect();
  try {
    const { rows } = await client.query<{ t: string }>("select current_setting('idle_in_transaction_session_timeout') as t");
    expect(rows[0]!.t).toBe('2min');
  } finally {
    await client.end();
  }
});
