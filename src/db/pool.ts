import { AsyncLocalStorage } from 'node:async_hooks';
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
  const name = config.application_name ?? 'svc-hub';
  // Every connection from its making on, those still connecting too (endPool may have to cut them).
  const open = new Set<pg.Client>();
  const Client = class extends pg.Client {
    constructor(clientConfig?: string | pg.ClientConfig) {
      super(clientConfig);
      open.add(this);
      startConnections.getStore()?.track(this);
      this.once('end', () => open.delete(this));
    }
  };
  // TCP keepalive (KEEPALIVE; a pool's own setting wins).
  const pool = new pg.Pool({ ...KEEPALIVE, ...config, Client });
  connections.set(pool, { name, open });
  pool.on('error', (err) => logger().warn({ pool: name, err: loggableMessage(err) }, 'idle database connection failed'));
  pool.on('connect', (client) => {
    client.on('error', (err) => logger().debug({ pool: name, err: loggableMessage(err) }, 'database connection failed'));
  });
  return pool;
}

/** Silence on a database connection over TCP after which the kernel begins its keepalive probes. */
export const KEEPALIVE_IDLE_MS = 10_000;

/**
 * The TCP keepalive of every database connection the hub makes, the pools' and those of its own
 * (`ownClient`): a connection whose server or path died without a word (the host gone, a NAT or a
 * failover that forgot it) is noticed by the kernel's probes, which begin after KEEPALIVE_IDLE_MS of
 * silence, and the statement waiting on it fails, instead of waiting for ever. Probes are sent while
 * a statement waits for its answer too. Nothing for a connection through a Unix socket, which
 * cannot go half-open.
 */
export const KEEPALIVE = { keepAlive: true, keepAliveInitialDelayMillis: KEEPALIVE_IDLE_MS } as const satisfies pg.ClientConfig;

/**
 * A connection of its own, not a pool's (the migrations', the start's checks as the owner, the
 * embedded server's database creation), with the pools' TCP keepalive (KEEPALIVE): a start whose
 * database went silent under it fails instead of waiting for ever. `config`'s own settings win.
 * One made within `interruptibleStart`'s work is cut by its interruption, as a pool's is.
 */
export function ownClient(config: pg.ClientConfig): pg.Client {
  const client = new pg.Client({ ...KEEPALIVE, ...config });
  startConnections.getStore()?.track(client);
  return client;
}

/**
 * The database connections a start makes (`interruptibleStart`): the pools' and those of their own,
 * in the start's own steps and in what it begins (the outbox listener's connect, the leadership's,
 * a clock's first tick). Its interruption cuts them all, and refuses those asked for after it.
 */
class StartConnections {
  constructor(private readonly interrupt: AbortSignal) {}

  private readonly open = new Set<pg.Client>();
  /** Aborted by the interruption while the start runs, never after it: what `startInterrupt` gives. */
  private readonly cutting = new AbortController();
  private over = false;

  get cutSignal(): AbortSignal {
    return this.cutting.signal;
  }

  track(client: pg.Client): void {
    if (this.over) return;
    this.open.add(client);
    client.once('end', () => this.open.delete(client));
    // A connection asked for once the start is cut is cut as it begins (before, its socket would be
    // made anew by the connect): its connect fails at once, as one under way does.
    const connect = client.connect.bind(client) as (callback?: (err: Error) => void) => unknown;
    (client as { connect: unknown }).connect = (callback?: (err: Error) => void) => {
      const connecting = connect(callback);
      if (this.cutting.signal.aborted && !this.over) cut(client);
      return connecting;
    };
  }

  cut(): void {
    if (this.over) return;
    this.cutting.abort(this.interrupt.reason);
    for (const client of this.open) cut(client);
  }

  /** The start has ended (started, failed or released): its connections are no longer its. */
  end(): void {
    this.over = true;
    this.open.clear();
  }
}

/** Destroys a connection's socket: its connect or statement under way fails at once. */
function cut(client: pg.Client): void {
  // The cut's consequence, not news: an `error` event when no statement was under way.
  client.on('error', () => undefined);
  client.connection.stream.destroy();
}

const startConnections = new AsyncLocalStorage<StartConnections>();

/**
 * Runs `work` (a start and, should it fail, its release: the hub's, cmd/compose.ts `startHub`; a
 * command's database setup, cmd/database-command.ts `databaseStart`) so that
 * `interrupt` (a signal during the start), until `work` has settled, cuts every database connection
 * made within it: the pools' (a statement waiting on a locked table, a connect to a database that
 * does not answer) and those of their own (ownClient: the migrations' with their wait for the lock,
 * the owner's checks, the embedded server's database creation, the outbox listener's, the leadership's),
 * including those made by what the start began (a clock's tick). Their sockets are destroyed, so
 * what waits on them fails at once, and a connection asked for afterwards within `work` fails as it
 * begins: the release that follows (endPool, endClient) finds nothing left open to wait for on a
 * server that does not answer. Once `work` has settled, a signal cuts nothing (the hub's stop is
 * graceful).
 */
export async function interruptibleStart<T>(interrupt: AbortSignal | undefined, work: () => Promise<T>): Promise<T> {
  if (!interrupt) return work();
  const connections = new StartConnections(interrupt);
  const onInterrupt = () => connections.cut();
  if (interrupt.aborted) connections.cut();
  else interrupt.addEventListener('abort', onInterrupt, { once: true });
  try {
    return await startConnections.run(connections, work);
  } finally {
    interrupt.removeEventListener('abort', onInterrupt);
    connections.end();
  }
}

/**
 * The interruption of the start whose work calls it (`interruptibleStart`), for a wait of its own (a
 * pause between tries, a Kubernetes Lease's request) to end with it: aborted (with the signal's
 * reason) by a signal that comes while the start runs, never by one after it, though what the start
 * began (a clock's tick, the leadership's next check) still runs in its context then: the hub's
 * graceful stop cuts nothing.
 */
export function startInterrupt(): AbortSignal | undefined {
  return startConnections.getStore()?.cutSignal;
}

/** The connections each resilient pool has made and not yet closed (connecting ones too), and its name. */
const connections = new WeakMap<pg.Pool, { name: string; open: Set<pg.Client> }>();

/**
 * Ends the pool and waits (at most `waitMs`) until every connection it had open has closed.
 * pg-pool's `end()` resolves once it has asked its idle connections to end, before the server has
 * seen them go: a server stopped right after (the embedded PostgreSQL when the hub stops) would cut
 * those sessions off, and the pool would log each as a failed connection. pg-pool's `end()` also
 * waits for every connection in use to come back, which one waiting on a database that no longer
 * answers (its server frozen, a network path gone silent) never does: after `waitMs` the sockets of
 * the connections still open are destroyed (their statements fail, their transactions are rolled
 * back by the server once it notices), so the stop goes on.
 */
/** How long a close waits for a connection to end before cutting it, unless told (`svc.datasource.close-timeout`'s default). */
export const CLOSE_WAIT_MS = 5_000;

export async function endPool(pool: pg.Pool, waitMs = CLOSE_WAIT_MS): Promise<void> {
  const tracked = connections.get(pool);
  const open = tracked?.open ?? new Set<pg.Client>();
  const closed = [...open].map((client) => new Promise<void>((resolve) => client.once('end', () => resolve())));
  const ended = pool.end();
  if (await settlesWithin(Promise.all([ended, ...closed]), waitMs)) return;
  logger().warn({ pool: tracked?.name, connections: open.size }, `database connections still open ${waitMs} ms after the pool was closed (the database does not answer, or work still holds them): cut`);
  for (const client of open) client.connection.stream.destroy();
  await settlesWithin(ended, 1_000);
}

/**
 * Ends a connection of its own (not a pool's): waits at most `waitMs` for the server to see it go,
 * then destroys its socket. `end()` alone waits for the server to close its side, for ever when the
 * server does not answer (frozen, or its path gone silent).
 */
export async function endClient(client: pg.Client, waitMs = CLOSE_WAIT_MS): Promise<void> {
  if (await settlesWithin(client.end(), waitMs)) return;
  logger().warn(`a database connection still open ${waitMs} ms after it was closed (the database does not answer): cut`);
  client.connection.stream.destroy();
}

/** Whether `promise` settled (resolved or rejected) within `ms`. */
export async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const settled = promise.then(
    () => true,
    () => true,
  );
  const result = await Promise.race([settled, new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), ms)))]);
  clearTimeout(timer);
  return result;
}
