import { describeNetworkError } from '../../egress/network-error.js';
/**
 * What a connector read can end with, other than success. Each error carries the run status the
 * runner records (`runStatus`) and whether running again may help (`retryable`, reported on
 * `connector.run.failed`). Messages are the run ledger's error texts (spec 3); none carries a
 * credential.
 */

export type EngineRunStatus = 'Failed' | 'Partial' | 'Cancelled';

/** Longest upstream body quoted in a message. */
export const BODY_QUOTE_LIMIT = 500;

export abstract class EngineError extends Error {
  abstract readonly runStatus: EngineRunStatus;
  abstract readonly retryable: boolean;
  /** A short name for pre-flight verdicts and logs. */
  abstract readonly code: string;
}

/** The statuses the retry policy retries (spec 3 Limits). */
export const TRANSIENT_STATUSES: ReadonlySet<number> = new Set([408, 429, 500, 502, 503, 504]);

/** A final non-2xx answer, after retries: the run fails and the body is never ingested. */
export class UpstreamHttpError extends EngineError {
  readonly runStatus = 'Failed' as const;
  readonly code = 'upstream_http';
  /** A status the retry policy retries: running again later may help. */
  readonly transient: boolean;
  readonly retryable: boolean;
  constructor(
    readonly status: number,
    body: string,
  ) {
    const transient = TRANSIENT_STATUSES.has(status);
    super(`upstream returned HTTP ${status} (${transient ? 'transient' : 'permanent'}) — refusing to ingest its body as data: ${quote(body)}`);
    this.name = 'UpstreamHttpError';
    this.transient = transient;
    this.retryable = transient;
  }
}

/** The request never got an answer (connection refused or reset, timeout), after retries. */
export class UpstreamNetworkError extends EngineError {
  readonly runStatus = 'Failed' as const;
  readonly retryable = true;
  readonly code = 'upstream_network';
  constructor(attempts: number, cause: unknown) {
    super(`upstream could not be reached after ${attempts} attempt(s): ${describeNetworkError(cause)}`, { cause });
    this.name = 'UpstreamNetworkError';
  }
}

/** The outbound address policy refused the source's address: nothing was sent; not retried. */
export class DestinationRefusedError extends EngineError {
  readonly runStatus = 'Failed' as const;
  readonly retryable = false;
  readonly code = 'destination_refused';
  constructor(cause: unknown) {
    super(`upstream not contacted: ${describeNetworkError(cause)}`, { cause });
    this.name = 'DestinationRefusedError';
  }
}

/** A 2xx answer whose body is not JSON (or exceeds the page size bound). */
export class UnreadableResponseError extends EngineError {
  readonly runStatus = 'Failed' as const;
  readonly retryable = false;
  readonly code = 'unreadable_response';
  constructor(detail: string) {
    super(detail);
    this.name = 'UnreadableResponseError';
  }
}

/** total_path disagreed with the rows read, in either direction. */
export class DeclaredTotalMismatchError extends EngineError {
  readonly runStatus = 'Failed' as const;
  readonly retryable = false;
  readonly code = 'declared_total_mismatch';
  constructor(
    readonly declared: number,
    readonly returned: number,
  ) {
    super(`the source declared ${declared} rows but this run returned ${returned} — refusing to report a partial extract as a complete one`);
    this.name = 'DeclaredTotalMismatchError';
  }
}

/** A GraphQL 200 carrying an errors array. */
export class GraphQLErrorsError extends EngineError {
  readonly runStatus = 'Failed' as const;
  readonly retryable = false;
  readonly code = 'graphql_errors';
  constructor(count: number, first: string) {
    super(`GraphQL response carried ${count} error(s); first: ${quote(first)}`);
    this.name = 'GraphQLErrorsError';
  }
}

/** A GraphQL 200 with no errors and null or absent data. */
export class GraphQLMalformedError extends EngineError {
  readonly runStatus = 'Failed' as const;
  readonly retryable = false;
  readonly code = 'graphql_malformed';
  constructor(body: string) {
    super(`GraphQL response has no errors and null/absent data (malformed envelope): ${quote(body)}`);
    this.name = 'GraphQLMalformedError';
  }
}

/** The run's page budget is spent while the source still had pages: Partial. */
export class PageCapError extends EngineError {
  readonly runStatus = 'Partial' as const;
  readonly retryable = false;
  readonly code = 'page_cap';
  constructor(readonly maxPages: number) {
    super(
      `the ${maxPages.toLocaleString('en-US')}-page budget of one run was reached while the source still had pages; the rows of those pages were read, the rest were not`,
    );
    this.name = 'PageCapError';
  }
}

/** The source answered 404/410 for a position carried from an earlier page or the stored mark: Partial. */
export class StalePositionError extends EngineError {
  readonly runStatus = 'Partial' as const;
  readonly retryable = false;
  readonly code = 'stale_position';
  constructor(
    readonly status: number,
    position: string,
    pagesRead: number,
  ) {
    super(
      `the source answered HTTP ${status} for ${position}: it no longer has the records past that position; the run stopped after ${pagesRead} page(s) read`,
    );
    this.name = 'StalePositionError';
  }
}

/** An auth `*_env` credential resolved to nothing (no stored secret, no allowed environment variable). */
export class CredentialError extends EngineError {
  readonly runStatus = 'Failed' as const;
  readonly retryable = false;
  readonly code = 'credential_unresolved';
  constructor(
    readonly credential: string,
    readonly field: string,
  ) {
    super(`credential ${credential} did not resolve (${field}): the tenant has no stored secret of that name (the hub's environment is read only for names allowed by svc.credentials.env-allow)`);
    this.name = 'CredentialError';
  }
}

/** A `{{env:NAME}}` template naming a value that did not resolve. */
export class TemplateError extends EngineError {
  readonly runStatus = 'Failed' as const;
  readonly retryable = false;
  readonly code = 'template_unresolved';
  constructor(
    readonly variable: string,
    where: string,
  ) {
    super(`template {{env:${variable}}} in ${where} did not resolve: the tenant has no stored secret ${variable} (the hub's environment is read only for names allowed by svc.credentials.env-allow)`);
    this.name = 'TemplateError';
  }
}

/** The pagination cannot go on: `custom` on its second page, a position that does not advance, a link off the source. */
export class PaginationError extends EngineError {
  readonly runStatus = 'Failed' as const;
  readonly retryable = false;
  readonly code = 'pagination';
  constructor(message: string) {
    super(message);
    this.name = 'PaginationError';
  }
}

/** Cancellation requested: the read stopped at a page boundary. */
export class CancelledError extends EngineError {
  readonly runStatus = 'Cancelled' as const;
  readonly retryable = false;
  readonly code = 'cancelled';
  constructor(message = 'cancelled on request') {
    super(message);
    this.name = 'CancelledError';
  }
}

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
]);

/** A transport failure the retry policy retries (undici and node socket errors). */
export function isNetworkError(err: unknown): boolean {
  let current: unknown = err;
  for (let depth = 0; depth < 4 && current && typeof current === 'object'; depth++) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === 'string' && NETWORK_CODES.has(code)) return true;
    // Node 20's happy-eyeballs connect reports an AggregateError of per-address failures.
    const inner = (current as { errors?: unknown }).errors;
    if (Array.isArray(inner) && inner.some((e) => isNetworkError(e))) return true;
    current = (current as { cause?: unknown }).cause;
  }
  return false;
}
