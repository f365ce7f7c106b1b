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
  return anyInChain(err, unavailable);
}

/** Whether one error of a chain says the database cannot be reached (isDatabaseUnavailable). */
function unavailable(e: ErrorLink): boolean {
  const { code, message } = e;
  if (typeof code === 'string' && (UNAVAILABLE_CODES.has(code) || code.startsWith('08'))) return true;
  // A Unix socket (the embedded PostgreSQL's) whose server is away: its socket file is gone.
  if (code === 'ENOENT' && e.syscall === 'connect') return true;
  return typeof message === 'string' && UNAVAILABLE_MESSAGES.some((re) => re.test(message));
}

type ErrorLink = { code?: unknown; message?: unknown; errors?: unknown; cause?: unknown; syscall?: unknown; name?: unknown };

/** Whether `test` holds for `err`, one of its causes (5 deep at most) or one of an AggregateError's errors. */
function anyInChain(err: unknown, test: (e: ErrorLink) => boolean): boolean {
  let current: unknown = err;
  for (let depth = 0; depth < 5 && current && typeof current === 'object'; depth++) {
    const link = current as ErrorLink;
    if (test(link)) return true;
    // Node's happy-eyeballs connect reports an AggregateError of per-address failures.
    if (Array.isArray(link.errors) && link.errors.some((e) => anyInChain(e, test))) return true;
    current = link.cause;
  }
  return false;
}

/**
 * SQLSTATEs of a database busy or going away rather than of a statement's fault: classes 08
 * (connection), 40 (a transaction rolled back: serialization, deadlock), 53 (insufficient resources),
 * 57 (operator intervention: shutdown, cancel, statement timeout), 58 (system error: I/O), and the
 * timeouts and locks of 25P (idle in transaction, transaction timeout) and 55P (lock not available).
 */
const BUSY_SQLSTATE = /^(08|40|53|57|58|25P|55P)/;

/** Network failures of a connection, the database's or any other server's. */
const NETWORK_CODES = new Set(['ECONNABORTED', 'ENETDOWN', 'ENOTFOUND', 'EADDRNOTAVAIL', 'EHOSTDOWN', 'UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_SOCKET', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT']);

/**
 * Whether `err` means the database or the network is unavailable or busy right now
 * (isDatabaseUnavailable, a SQLSTATE of BUSY_SQLSTATE, a network error code, a timeout or an abort),
 * as opposed to a failure that would meet the same work again at every try: work that meets it is
 * retried for ever, never given up on (an outbox consumer never sets an event aside for it).
 */
export function isUnavailableOrBusy(err: unknown): boolean {
  return anyInChain(
    err,
    (e) =>
      unavailable(e) ||
      (typeof e.code === 'string' && (BUSY_SQLSTATE.test(e.code) || NETWORK_CODES.has(e.code))) ||
      e.name === 'TimeoutError' ||
      e.name === 'AbortError',
  );
}

/** PostgreSQL's class 53, insufficient resources: a full disk (53100), out of memory, too many connections. */
export function isOutOfResources(err: unknown): boolean {
  const code = (err as { code?: unknown } | undefined)?.code;
  return typeof code === 'string' && code.startsWith('53');
}
