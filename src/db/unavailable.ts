/**
 * Whether an error means the database cannot be reached right now (stopped, restarting, out of
 * connections), as opposed to a failure of the statement: the API answers it with a 503, readiness
 * reports it, and the request may simply be retried once the database is back.
 */
const UNAVAILABLE_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
  '57P01', // admin_shutdown
  '57P02', // crash_shutdown
  '57P03', // cannot_connect_now (starting up, shutting down, in recovery)
  '53300', // too_many_connections
]);

/**
 * node-postgres's words when no connection came within the pool's `connectionTimeoutMillis`
 * (svc.datasource.connect-timeout): none of the pool became free, or a new one did not open in time.
 */
const NO_CONNECTION_IN_TIME = /^(timeout exceeded when trying to connect|Connection terminated due to connection timeout)/;

/** Whether `err` is a wait for a database connection that timed out (a kind of unavailable). */
export function isConnectionWaitTimeout(err: unknown): boolean {
  return err instanceof Error && NO_CONNECTION_IN_TIME.test(err.message);
}

/** node-postgres reports a lost or refused connection in these words (no code). */
const UNAVAILABLE_MESSAGES = [
  /^Connection terminated/,
  NO_CONNECTION_IN_TIME,
  /Client has encountered a connection error and is not queryable/,
  /Connection ended unexpectedly/,
  /terminating connection due to administrator command/,
];

export function isDatabaseUnavailable(err: unknown): boolean {
  let current: unknown = err;
  for (let depth = 0; depth < 5 && current && typeof current === 'object'; depth++) {
    const { code, message, errors, cause } = current as { code?: unknown; message?: unknown; errors?: unknown; cause?: unknown };
    if (typeof code === 'string' && (UNAVAILABLE_CODES.has(code) || code.startsWith('08'))) return true;
    // A Unix socket (the embedded PostgreSQL's) whose server is away: its socket file is gone.
    if (code === 'ENOENT' && (current as { syscall?: unknown }).syscall === 'connect') return true;
    if (typeof message === 'string' && UNAVAILABLE_MESSAGES.some((re) => re.test(message))) return true;
    // Node's happy-eyeballs connect reports an AggregateError of per-address failures.
    if (Array.isArray(errors) && errors.some((e) => isDatabaseUnavailable(e))) return true;
    current = cause;
  }
  return false;
}

/** PostgreSQL's class 53, insufficient resources: a full disk (53100), out of memory, too many connections. */
export function isOutOfResources(err: unknown): boolean {
  const code = (err as { code?: unknown } | undefined)?.code;
  return typeof code === 'string' && code.startsWith('53');
}
