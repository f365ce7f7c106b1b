import pg from 'pg';
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
  pool.on('error', (err) => logger().warn({ pool: name, err: err.message }, 'idle database connection failed'));
  pool.on('connect', (client) => {
    client.on('error', (err) => logger().debug({ pool: name, err: err.message }, 'database connection failed'));
  });
  return pool;
}
