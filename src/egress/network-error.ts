/**
 * One wording for a request that got no answer (connection refused or reset, a timeout, a refused
 * destination), used by the webhook sender and the connector engine alike.
 */

export interface NetworkErrorContext {
  /** The connect timeout in force, named by a connect-timeout message. */
  connectTimeoutMs?: number;
  /** The exchange timeout in force, named by the headers and body timeout messages. */
  timeoutMs?: number;
  /** The setting `timeoutMs` comes from, named after it by those messages (`… within 60000 ms (svc.connectors.http.headers-timeout)`). */
  setting?: string;
}

export function describeNetworkError(err: unknown, context: NetworkErrorContext = {}): string {
  if (!err || typeof err !== 'object') return String(err);
  const e = err as { code?: unknown; message?: unknown; cause?: { message?: unknown }; errors?: unknown };
  const code = typeof e.code === 'string' ? e.code : undefined;
  const within = (ms: number | undefined) => (ms === undefined ? '' : ` within ${ms} ms`);
  const setting = context.setting === undefined ? '' : ` (${context.setting})`;
  switch (code) {
    case 'EGRESS_DENIED':
      return String(e.message);
    case 'UND_ERR_CONNECT_TIMEOUT':
      return `connect timeout: no connection${within(context.connectTimeoutMs)}`;
    case 'UND_ERR_HEADERS_TIMEOUT':
      return `timeout: no response${within(context.timeoutMs)}${setting}`;
    case 'UND_ERR_BODY_TIMEOUT':
      return `timeout: the response body stalled${context.timeoutMs === undefined ? '' : ` for ${context.timeoutMs} ms`}${setting}`;
    case 'SVC_RESPONSE_TIMEOUT':
      // The connector engine's whole-answer time limit; its message names it.
      return String(e.message);
    case 'UND_ERR_SOCKET':
      // undici drops the connection itself on these (its SocketError, as for a close): the other side did not close it.
      if (e.message === 'bad response') return 'bad response: an interim 100 Continue answer the request did not ask for (no Expect: 100-continue was sent); the connection was dropped';
      if (e.message === 'bad upgrade') return 'bad response: a 101 Switching Protocols answer to a request that asked for no upgrade; the connection was dropped';
      return `connection closed by the other side${typeof e.cause?.message === 'string' && e.cause.message ? ` (${e.cause.message})` : ''}`;
    case 'ERR_ASSERTION':
      // undici's own assertions on what its parser let through (a status line `HTTP/1.1 099`): the
      // answer is refused and its connection dropped; the assertion's text names undici's internals.
      return /statusCode >= 100/.test(String(e.message))
        ? 'bad response: not HTTP (a status below 100); the connection was dropped'
        : 'bad response: the HTTP client could not read the answer; the connection was dropped';
    case 'UND_ERR_ABORTED':
    case 'ABORT_ERR':
      return 'aborted: the process is stopping';
  }
  // An OpenSSL error (an https target whose server speaks plain HTTP: `wrong version number`): its
  // message is OpenSSL's error line, the process's thread id first and a source path of Node's own
  // build last, so it differed at every attempt; its reason alone says what failed.
  const reason = (err as { reason?: unknown }).reason;
  if (code?.startsWith('ERR_SSL_') && typeof reason === 'string' && reason) return `${code}: TLS failed: ${reason}`;
  let message = typeof e.message === 'string' ? e.message : '';
  // Node 20's happy-eyeballs connect reports an AggregateError (empty message) of per-address failures.
  if (!message && Array.isArray(e.errors) && e.errors.length > 0) return describeNetworkError(e.errors[0], context);
  if (!message) message = String(err);
  return code && !message.includes(code) ? `${code}: ${message}` : message;
}
