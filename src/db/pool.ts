import pg from 'pg';
import { loggableMessage } from '../observability/database-errors.js';
import { logger } from '../observability/logger.js';

/**
 * A connection pool that survives the database going away. pg emits `error` on a client whose
 * server ends the connection, idle in the pool or checked out between two queries; pg-pool only
 * listens while the client is idle, so an error on a checked-out client would be an unhandled
 * `error` event and end the process. Every client gets a listener for its whole life: the query in
 * flight still fails (and the caller answers 503), and the pool discards the broken client on release.
 */
export function resilientPool(config: pg.PoolConfig): pg.Pool {
  const pool = new pg.Pool(config);
  const name = config.application_name ?? 'svc-hub';
  const open = new Set<pg.PoolClient>();
  connections.set(pool, open);
  pool.on('error', (err) => logger().warn({ pool: name, err: loggableMessage(err) }, 'idle database connection failed'));
  pool.on('connect', (client) => {
    open.add(client);
    client.once('end', () => open.delete(client));
    client.on('error', (err) => logger().debug({ pool: name, err: loggableMessage(err) }, 'database connection failed'));
  });
  return pool;
}

/** The connections each resilient pool has open (a connection leaves when it has closed). */
const connections = new WeakMap<pg.Pool, Set<pg.PoolClient>>();

/**
 * Ends the pool and waits (at most `waitMs`) until every connection it had open has closed.
 * pg-pool's `end()` resolves once it has asked its idle connections to end, before the server has
 * seen them go: a server stopped right after (the embedded PostgreSQL when the hub stops) would cut
 * those sessions off, and the pool would log each as a failed connection.
 */
export async function endPool(pool: pg.Pool, waitMs = 5_000): Promise<void> {
  const closed = [...(connections.get(pool) ?? [])].map((client) => new Promise<void>((resolve) => client.once('end', () => resolve())));
  await pool.end();
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([Promise.all(closed), new Promise<void>((resolve) => (timer = setTimeout(resolve, waitMs)))]);
  clearTimeout(timer);
}
