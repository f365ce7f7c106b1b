import { describeNetworkError, type NetworkErrorContext } from '../../egress/network-error.js';
import { maskUserinfo } from '../../observability/url-redaction.js';
import { isNamedValue, NAMED_VALUE_RULE } from '../auth/names.js';
/**
 * What a connector read can end with, other than success. Each error carries the run status the
 * runner records (`runStatus`) and whether running again may help (`retryable`, reported on
 * `connector.run.failed`). Messages are the run ledger's error texts (spec 3); none carries a
 * credential.
 */

export type EngineRunStatus = 'Failed' | 'Partial' | 'Cancelled';

/** Longest upstream body quoted in a message. */
export const BODY_QUOTE_LIMIT = 500;

/** The most characters a message quotes of one short value an upstream gave (a URL, a header such as the content type): a header block may hold 16 KiB. */
export const SHORT_QUOTE_LIMIT = 200;

/** The redirects: the engine follows none of them (a redirect could carry the connector's credentials to another host). */
export const REDIRECT_STATUSES: ReadonlySet<number> = new Set([301, 302, 303, 307, 308]);

/** A redirect's Location as a message shows it: its address without credentials, query and fragment (which may carry a signed token), at most SHORT_QUOTE_LIMIT characters. Webhook attempts name it the same way (src/webhooks/sender.ts). */
export function redirectTarget(location: string): string {
  return quote(maskUserinfo(location).replace(/[?#][\s\S]*$/, '…'), SHORT_QUOTE_LIMIT);
}

/** The statuses the retry policy retries (spec 3 Limits). */
export const TRANSIENT_STATUSES: ReadonlySet<number> = new Set([408, 429, 500, 502, 503, 504]);

// biome-ignore lint/suspicious/noExplicitAny: the table's message builders each take their own arguments
type Args = any[];

interface Kind {
  /** The class name callers see (`err.name`, stack traces). */
  name: string;
  runStatus: EngineRunStatus;
  retryable: boolean;
  /** The run ledger's error text, from the constructor's arguments. */
  message: (...args: Args) => string;
  /** Fields the error carries besides the message. */
  details?: (...args: Args) => object;
  cause?: (...args: Args) => unknown;
}

/** Why a `{{env:NAME}}` did not resolve: no such value (a `secret:NAME` reads the store only), or NAME is no name. */
function templateProblem(variable: string, where: string): string {
  // Not quoted: what stands there is no name, and could be anything the manifest's author wrote.
  if (!isNamedValue(variable)) return `a {{env:…}} template in ${where} names no value: ${NAMED_VALUE_RULE}`;
  if (variable.startsWith('secret:')) return `template {{env:${variable}}} in ${where} did not resolve: the tenant has no stored secret ${variable.slice('secret:'.length)}`;
  return `template {{env:${variable}}} in ${where} did not resolve: the tenant has no stored secret ${variable} (the hub's environment is read only for names allowed by svc.credentials.env-allow)`;
}

/**
 * Every way a read can end other than success, by `code` (the short name pre-flight verdicts and
 * logs use): the run status the runner records, whether running again may help, the message.
 */
const KINDS = {
  /** A final non-2xx answer, after retries: the run fails and the body is never ingested. Retryable when the status is transient. */
  upstream_http: {
    name: 'UpstreamHttpError',
    runStatus: 'Failed',
    retryable: false,
    message: (status: number, body: string, location?: string) =>
      REDIRECT_STATUSES.has(status)
        ? `upstream answered HTTP ${status}, a redirect${location ? ` to ${redirectTarget(location)}` : ''}; redirects are not followed (point spec.base_url or the endpoint path at the address it names) — its body is not ingested as data: ${quote(body)}`
        : `upstream returned HTTP ${status} (${TRANSIENT_STATUSES.has(status) ? 'transient' : status >= 400 ? 'permanent' : 'not a success'}) — refusing to ingest its body as data: ${quote(body)}`,
    details: (status: number) => ({ status, transient: TRANSIENT_STATUSES.has(status), retryable: TRANSIENT_STATUSES.has(status) }),
  },
  /** The request never got an answer (connection refused or reset, timeout), after retries. */
  upstream_network: {
    name: 'UpstreamNetworkError',
    runStatus: 'Failed',
    retryable: true,
    message: (attempts: number, cause: unknown, context?: NetworkErrorContext) => `upstream could not be reached after ${attempts} attempt(s): ${describeNetworkError(cause, context)}`,
    cause: (_attempts: number, cause: unknown) => cause,
  },
  /** The outbound address policy refused the source's address: nothing was sent; not retried. */
  destination_refused: {
    name: 'DestinationRefusedError',
    runStatus: 'Failed',
    retryable: false,
    message: (cause: unknown) => `upstream not contacted: ${describeNetworkError(cause)}`,
    cause: (cause: unknown) => cause,
  },
  /**
   * The request could not be composed or sent as stored: a header value with a line break or a
   * character beyond Latin-1 (from a stored secret or a template: the manifest's own are refused at
   * apply; undici names the header, never the value), or an address that is not a URL (a connector
   * stored before apply read base_url as a request does).
   */
  request_invalid: {
    name: 'RequestInvalidError',
    runStatus: 'Failed',
    retryable: false,
    message: (detail: string) => `the request could not be sent: ${detail}`,
  },
  /**
   * A 2xx answer whose body cannot be read as a page: not JSON (or not a SOAP envelope), empty, compressed
   * unasked, past the page size bound. Carries the answer's status (the pre-flight reports it).
   */
  unreadable_response: {
    name: 'UnreadableResponseError',
    runStatus: 'Failed',
    retryable: false,
    message: (detail: string, _status?: number) => detail,
    details: (_detail: string, status?: number) => ({ status }),
  },
  /** total_path disagreed with the rows read, in either direction. */
  declared_total_mismatch: {
    name: 'DeclaredTotalMismatchError',
    runStatus: 'Failed',
    retryable: false,
    message: (declared: number, returned: number) =>
      `the source declared ${declared} rows but this run returned ${returned} — refusing to report a partial extract as a complete one`,
    details: (declared: number, returned: number) => ({ declared, returned }),
  },
  /** A GraphQL 200 carrying an errors array. */
  graphql_errors: {
    name: 'GraphQLErrorsError',
    runStatus: 'Failed',
    retryable: false,
    message: (count: number, first: string) => `GraphQL response carried ${count} error(s); first: ${quote(first)}`,
  },
  /** A GraphQL 200 with no errors and null or absent data. */
  graphql_malformed: {
    name: 'GraphQLMalformedError',
    runStatus: 'Failed',
    retryable: false,
    message: (body: string) => `GraphQL response has no errors and null/absent data (malformed envelope): ${quote(body)}`,
  },
  /** A SOAP Fault, on HTTP 500 or 200: an answer, not a transient error, so never retried. */
  soap_fault: {
    name: 'SoapFaultError',
    runStatus: 'Failed',
    retryable: false,
    message: (status: number, fault: string) => `the SOAP service answered a Fault (HTTP ${status}): ${quote(fault)}`,
    details: (status: number) => ({ status }),
  },
  /** A SOAP service refused the request with 401: names the fault string and the session setting to look at. */
  soap_unauthorized: {
    name: 'SoapUnauthorizedError',
    runStatus: 'Failed',
    retryable: false,
    message: (fault: string | undefined, session: string) =>
      `upstream returned HTTP 401 (permanent)${fault ? ` with the Fault ${JSON.stringify(quote(fault))}` : ''}: the service refused the credentials or the session; ${session}`,
    details: () => ({ status: 401 }),
  },
  /** The run's page budget is spent while the source still had pages: Partial. */
  page_cap: {
    name: 'PageCapError',
    runStatus: 'Partial',
    retryable: false,
    message: (maxPages: number) =>
      `the ${maxPages.toLocaleString('en-US')}-page budget of one run was reached while the source still had pages; the rows of those pages were read, the rest were not`,
    details: (maxPages: number) => ({ maxPages }),
  },
  /** The source answered 404/410 for a position carried from an earlier page or the stored mark: Partial. */
  stale_position: {
    name: 'StalePositionError',
    runStatus: 'Partial',
    retryable: false,
    message: (status: number, position: string, pagesRead: number) =>
      `the source answered HTTP ${status} for ${position}: it no longer has the records past that position; the run stopped after ${pagesRead} page(s) read`,
    details: (status: number) => ({ status }),
  },
  /** An auth `*_env` credential resolved to nothing (no stored secret, no allowed environment variable). */
  credential_unresolved: {
    name: 'CredentialError',
    runStatus: 'Failed',
    retryable: false,
    message: (credential: string, field: string) =>
      credential.startsWith('secret:')
        ? `credential ${credential} did not resolve (${field}): the tenant has no stored secret ${credential.slice('secret:'.length)}`
        : `credential ${credential} did not resolve (${field}): the tenant has no stored secret of that name (the hub's environment is read only for names allowed by svc.credentials.env-allow)`,
    details: (credential: string, field: string) => ({ credential, field }),
  },
  /** A stored secret that does not open with this hub's master key (the key changed since it was stored). */
  credential_unreadable: {
    name: 'CredentialUnreadableError',
    runStatus: 'Failed',
    retryable: false,
    message: (credential: string) =>
      `the stored secret ${credential} cannot be decrypted with this hub's svc.secret.master-key: the key was changed since it was stored (add the earlier key to svc.secret.previous-master-keys, or store the secret again)`,
    details: (credential: string) => ({ credential }),
  },
  /** A `{{env:NAME}}` template naming a value that did not resolve, or a name of the wrong form. */
  template_unresolved: {
    name: 'TemplateError',
    runStatus: 'Failed',
    retryable: false,
    message: (variable: string, where: string) => templateProblem(variable, where),
    details: (variable: string) => ({ variable }),
  },
  /** The pagination cannot go on: `custom` on its second page, a position that does not advance, a link off the source. */
  pagination: { name: 'PaginationError', runStatus: 'Failed', retryable: false, message: (message: string) => message },
  /** Cancellation requested: the read stopped at a page boundary. */
  cancelled: { name: 'CancelledError', runStatus: 'Cancelled', retryable: false, message: (message = 'cancelled on request') => message },
} as const satisfies Record<string, Kind>;

export type EngineErrorCode = keyof typeof KINDS;

/** What a read ended with: one class, its behaviour looked up by `code` in the table above. */
export class EngineError extends Error {
  readonly runStatus: EngineRunStatus;
  readonly retryable: boolean;
  constructor(
    /** A short name for pre-flight verdicts and logs. */
    readonly code: EngineErrorCode,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
    const kind: Kind = KINDS[code];
    this.name = kind.name;
    this.runStatus = kind.runStatus;
    this.retryable = kind.retryable;
  }
}

type Details<K> = K extends { details: (...args: Args) => infer D } ? Readonly<D> : unknown;

/** The constructor of one code: `new PageCapError(10)`, `err instanceof PageCapError`. */
function kindOf<C extends EngineErrorCode>(code: C): new (...args: Parameters<(typeof KINDS)[C]['message']>) => EngineError & Details<(typeof KINDS)[C]> {
  const kind: Kind = KINDS[code];
  const Of = class extends EngineError {
    constructor(...args: Args) {
      super(code, kind.message(...args), kind.cause ? { cause: kind.cause(...args) } : undefined);
      if (kind.details) Object.assign(this, kind.details(...args));
    }
  };
  Object.defineProperty(Of, 'name', { value: kind.name });
  return Of as never;
}

export const UpstreamHttpError = kindOf('upstream_http');
export const UpstreamNetworkError = kindOf('upstream_network');
export const DestinationRefusedError = kindOf('destination_refused');
export const UnreadableResponseError = kindOf('unreadable_response');
export const RequestInvalidError = kindOf('request_invalid');
export const DeclaredTotalMismatchError = kindOf('declared_total_mismatch');
export const GraphQLErrorsError = kindOf('graphql_errors');
export const GraphQLMalformedError = kindOf('graphql_malformed');
export const PageCapError = kindOf('page_cap');
export const StalePositionError = kindOf('stale_position');
export const CredentialError = kindOf('credential_unresolved');
export const CredentialUnreadableError = kindOf('credential_unreadable');
export const TemplateError = kindOf('template_unresolved');
export const PaginationError = kindOf('pagination');
export const CancelledError = kindOf('cancelled');
export const SoapFaultError = kindOf('soap_fault');
export const SoapUnauthorizedError = kindOf('soap_unauthorized');
export type PaginationError = InstanceType<typeof PaginationError>;

/** Shortens an upstream text for a message: at most BODY_QUOTE_LIMIT characters, an ellipsis when cut. */
export function quote(text: string, limit = BODY_QUOTE_LIMIT): string {
  const flat = text.replace(/\s*[\r\n]+\s*/g, ' ').trim();
  return flat.length > limit ? `${flat.slice(0, limit)}…` : flat;
}

const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENETDOWN',
  'EAI_AGAIN',
  'ENOTFOUND',
  'UND_ERR_SOCKET',
  'UND_ERR_CLOSED',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
  // An attempt that ran past svc.connectors.http.response-timeout as a whole (engine/http.ts ResponseTimeoutError).
  'SVC_RESPONSE_TIMEOUT',
  // An answer that is not HTTP/1.1 as undici reads it: headers past its limit, a body shorter or
  // longer than its Content-Length (a body cut off mid-read); the parser's own below (HTTPParserError,
  // which carries no code: `Response does not match the HTTP/1.1 protocol (Invalid response status)`).
  'UND_ERR_HEADERS_OVERFLOW',
  'UND_ERR_RES_CONTENT_LENGTH_MISMATCH',
]);

/** A transport failure the retry policy retries (undici and node socket errors). */
export function isNetworkError(err: unknown): boolean {
  let current: unknown = err;
  for (let depth = 0; depth < 4 && current && typeof current === 'object'; depth++) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === 'string' && NETWORK_CODES.has(code)) return true;
    if ((current as { name?: unknown }).name === 'HTTPParserError') return true;
    // Node 20's happy-eyeballs connect reports an AggregateError of per-address failures.
    const inner = (current as { errors?: unknown }).errors;
    if (Array.isArray(inner) && inner.some((e) => isNetworkError(e))) return true;
    current = (current as { cause?: unknown }).cause;
  }
  return false;
}
