import { afterAll } from '@jest/globals';
import pg from 'pg';
import { databasesOfThisFile, serverUrl } from './database.js';

/**
 * After each test file's tests: a transaction with an xid that the file left open in one of its
 * databases (a client a failed test never ended, holding a lock) is ended here and fails the file,
 * naming it. Left open, it would hold back what every outbox reader of the shared server may read
 * (they read below the oldest transaction open on the whole server) and fail later suites that have
 * nothing to do with it; the server's own limit (start-postgres.ts, 120 s) is the slower net behind
 * this. This runs before the file's own `afterAll` (its hubs may still run): a transaction counts
 * only when it sat idle, unchanged, through a second look `SETTLE_MS` later, which a running hub's
 * transaction between two of its statements does not.
 */
export const SETTLE_MS = 2_000;

interface Idle {
  pid: number;
  datname: string;
  query: string;
  since: string;
}

async function idleWithXid(client: pg.Client): Promise<Idle[]> {
  const { rows } = await client.query<Idle>(
    `select pid, datname, left(query, 160) as query, state_change::text as since
       from pg_stat_activity
      where datname = any($1) and state like 'idle in transaction%' and backend_xid is not null`,
    [[...databasesOfThisFile]],
  );
  return rows;
}

afterAll(async () => {
  if (databasesOfThisFile.size === 0) return;
  const client = new pg.Client({ connectionString: serverUrl() });
  await client.connect();
  try {
    const first = await idleWithXid(client);
    if (first.length === 0) return;
    await new Promise((r) => setTimeout(r, SETTLE_MS));
    const again = new Set((await idleWithXid(client)).map((r) => `${r.pid} ${r.since}`));
    const left = first.filter((r) => again.has(`${r.pid} ${r.since}`));
    if (left.length === 0) return;
    await client.query('select pg_terminate_backend(pid) from unnest($1::int[]) as pid', [left.map((r) => r.pid)]);
    const what = left.map((r) => `pid ${r.pid} in ${r.datname}, idle since ${r.since} after: ${r.query}`).join('; ');
    throw new Error(`this file left ${left.length} transaction(s) with an xid open (ended now; end them on every path, failures included): ${what}`);
  } finally {
    await client.end();
  }
}, 10_000);
