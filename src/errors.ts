/**
 * The error family of the hub. Domain code throws these; the apiserver's one error mapper renders
 * them (apiserver/middleware/errors.ts). Anything else thrown becomes a 500 with no detail.
 */

export interface Rendered {
  status: number;
  /** A JSON body, a plain-text body, or nothing at all (the body-less 403). */
  body?: { json: Record<string, unknown> } | { text: string };
  headers?: Record<string, string>;
}

export abstract class HubError extends Error {
  abstract render(): Rendered;
}

/** 400 `{error, field?, hint?}` */
export class ValidationError extends HubError {
  constructor(
    message: string,
    readonly field?: string,
    readonly hint?: string,
  ) {
    super(message);
    this.name = 'ValidationError';
  }
  render(): Rendered {
    const json: Record<string, unknown> = { error: this.message };
    if (this.field) json.field = this.field;
    if (this.hint) json.hint = this.hint;
    return { status: 400, body: { json } };
  }
}

/** 415 `{error, hint}`: a body in a media type the route does not take. */
export class UnsupportedMediaType extends HubError {
  constructor(
    message: string,
    readonly hint: string,
  ) {
    super(message);
    this.name = 'UnsupportedMediaType';
  }
  render(): Rendered {
    return { status: 415, body: { json: { error: this.message, hint: this.hint } } };
  }
}

/** 413 `{error, hint}`: a body the hub will not read at that size in the media type it came in. */
export class PayloadTooLarge extends HubError {
  constructor(
    message: string,
    readonly hint: string,
  ) {
    super(message);
    this.name = 'PayloadTooLarge';
  }
  render(): Rendered {
    return { status: 413, body: { json: { error: this.message, hint: this.hint } } };
  }
}

/** 404 `{error}` */
export class NotFoundError extends HubError {
  constructor(message = 'not found') {
    super(message);
    this.name = 'NotFoundError';
  }
  render(): Rendered {
    return { status: 404, body: { json: { error: this.message } } };
  }
}

/** 409 `{error, field?}` */
export class ConflictError extends HubError {
  constructor(
    message: string,
    readonly field?: string,
    readonly hint?: string,
  ) {
    super(message);
    this.name = 'ConflictError';
  }
  render(): Rendered {
    const json: Record<string, unknown> = { error: this.message };
    if (this.field) json.field = this.field;
    if (this.hint) json.hint = this.hint;
    return { status: 409, body: { json } };
  }
}

/** 401 with `WWW-Authenticate: Bearer`; plain text on /api/platform/* (spec 1), JSON elsewhere. */
export class AuthenticationRequired extends HubError {
  constructor(
    readonly plainText: boolean,
    readonly reason?: string,
  ) {
    super('authentication required');
    this.name = 'AuthenticationRequired';
  }
  render(): Rendered {
    const headers = { 'WWW-Authenticate': 'Bearer' };
    return this.plainText
      ? { status: 401, headers, body: { text: 'authentication required' } }
      : { status: 401, headers, body: { json: { error: 'authentication required' } } };
  }
}

/** 401 `{"error": "no tenant in security context"}`: the call needs a tenant and the token names none. */
export class NoTenantError extends HubError {
  constructor() {
    super('no tenant in security context');
    this.name = 'NoTenantError';
  }
  render(): Rendered {
    return { status: 401, headers: { 'WWW-Authenticate': 'Bearer' }, body: { json: { error: this.message } } };
  }
}

/** 403 plain text `missing role svc_integrator`: the /api/platform/* floor. */
export class MissingIntegratorRole extends HubError {
  constructor() {
    super('missing role svc_integrator');
    this.name = 'MissingIntegratorRole';
  }
  render(): Rendered {
    return { status: 403, body: { text: this.message } };
  }
}

/** 403 with an empty body: any other role gate, or a `{tid}` that is not the caller's tenant. */
export class Forbidden extends HubError {
  constructor(reason = 'forbidden') {
    super(reason);
    this.name = 'Forbidden';
  }
  render(): Rendered {
    return { status: 403 };
  }
}

/** 403 `{error}`: refusals whose text the spec fixes (impersonation, scopes, locked accounts). */
export class ForbiddenWithReason extends HubError {
  constructor(message: string) {
    super(message);
    this.name = 'ForbiddenWithReason';
  }
  render(): Rendered {
    return { status: 403, body: { json: { error: this.message } } };
  }
}

/** 403 `{"error": "scope not granted"}`: a scope-bound user asked outside the granted scopes (the whole read surface). */
export class ScopeNotGranted extends ForbiddenWithReason {
  constructor() {
    super('scope not granted');
    this.name = 'ScopeNotGranted';
  }
}

/** 429 `{"error": "rate limit exceeded"}` (or another limit's own message) with `Retry-After`. */
export class RateLimited extends HubError {
  constructor(
    readonly retryAfterSeconds: number,
    message = 'rate limit exceeded',
  ) {
    super(message);
    this.name = 'RateLimited';
  }
  render(): Rendered {
    return { status: 429, headers: { 'Retry-After': String(this.retryAfterSeconds) }, body: { json: { error: this.message } } };
  }
}

/** 503 `{error}`: a dependency (the database) is not there. */
export class Unavailable extends HubError {
  constructor(message: string) {
    super(message);
    this.name = 'Unavailable';
  }
  render(): Rendered {
    return { status: 503, body: { json: { error: this.message } } };
  }
}

/** 503 `{error, hint}`: a port retrieval needs (embedding, chat) is not configured, or its backend does not answer or answers nonsense. */
export class PortUnavailable extends HubError {
  constructor(
    message: string,
    readonly hint: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'PortUnavailable';
  }
  render(): Rendered {
    return { status: 503, body: { json: { error: this.message, hint: this.hint } } };
  }
}

/**
 * A start the hub refuses for a reason its message says in full (the HTTP port taken, a migration
 * changed or added out of order, a database never set up, a data directory another hub uses):
 * `svc-hub` prints that one line and exits 1, without a stack trace, which would point into the
 * hub's code where there is nothing to fix (it is logged at debug, as the cause is).
 */
export class StartRefused extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'StartRefused';
  }
}
