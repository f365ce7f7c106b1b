import type { JWTPayload } from 'jose';
import { AuthenticationRequired, ForbiddenWithReason, ValidationError } from '../errors.js';
import { logger } from '../observability/logger.js';
import { joinField } from '../validation/schema-errors.js';
import { depthOf, findUnstorableText, MAX_JSON_DEPTH } from '../validation/input-limits.js';
import type { Directory } from './directory.js';
import { ROLES, type Principal } from './principal.js';
import { CLOCK_TOLERANCE_S, TokenRejected, type TokenVerifier } from './verifier.js';

export interface AuthenticatorOptions {
  devBypass: boolean;
  tenantClaim: string;
  verifier?: TokenVerifier;
  directory: Directory;
}

type Headers = Record<string, string | string[] | undefined>;

/** Tenant 0, the platform itself: never reachable through a header or a claim. */
const SYSTEM_TENANT = 0;

/**
 * Claims found within the input limits (`tooDeepClaim`, `findUnstorableText`), by object. A remembered
 * token's claims are one deeply frozen object, shared by each of its uses (src/auth/verifier.ts): what
 * the checks found holds for every later call, so they walk those claims once, not on each request.
 * Only frozen claims are kept: an object that may still change is checked each time.
 */
const CLAIMS_WITHIN_LIMITS = new WeakSet<JWTPayload>();

/** Failures that are the caller's, thrown as AuthenticationRequired so the gate can render them per path. */
export class Authenticator {
  constructor(private readonly options: AuthenticatorOptions) {}

  /**
   * The principal of a request, or undefined when it carries no credentials. Invalid credentials
   * throw AuthenticationRequired (rendered plain text or JSON by the route's gate). `rawHeaders` are
   * the request's headers as sent (Node's `req.rawHeaders`): a credential header given twice is
   * refused, where `headers` would show only the first Authorization (Node drops the others) or the
   * dev-bypass headers joined with `, `.
   */
  async authenticate(headers: Headers, platformPath: boolean, rawHeaders: readonly string[]): Promise<Principal | undefined> {
    if (this.options.devBypass) {
      const twice = givenTwice(rawHeaders, DEV_HEADERS);
      if (twice) throw new ValidationError(`${twice} is given twice`, twice, 'send the header once (readers differ on which of the two wins)');
      return this.devPrincipal(headers);
    }
    // Node keeps the first Authorization and drops the rest without a word: "good, then bad" would
    // pass here and a proxy or log reading the last would see another caller.
    if (givenTwice(rawHeaders, ['Authorization'])) throw refused(platformPath, 'header Authorization is given twice');
    const header = single(headers.authorization);
    if (!header) return undefined;
    const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (!match) throw new AuthenticationRequired(platformPath, 'not a bearer token');
    let claims: JWTPayload;
    try {
      claims = await this.options.verifier!.verify(match[1]!);
    } catch (err) {
      if (err instanceof TokenRejected) throw refused(platformPath, err.message);
      throw err;
    }
    return this.tokenPrincipal(claims, platformPath);
  }

  /**
   * The roles a request's credentials carry, read without the database (the token verified again, its
   * keys cached), or undefined when there are none or they do not verify: for a gate that must still
   * refuse a caller without a role while the tenant's and user's state cannot be read.
   */
  async rolesWithoutDirectory(headers: Headers): Promise<ReadonlySet<string> | undefined> {
    if (this.options.devBypass) return new Set(ROLES);
    const match = /^Bearer\s+(\S+)\s*$/i.exec(single(headers.authorization) ?? '');
    if (!match) return undefined;
    try {
      return new Set(realmRoles(await this.options.verifier!.verify(match[1]!)));
    } catch {
      return undefined;
    }
  }

  private async tokenPrincipal(claims: JWTPayload, platformPath: boolean): Promise<Principal> {
    // A signed token is still input: a claim nested deeper than a body may be, or one PostgreSQL
    // cannot store, is the caller's 400, naming it.
    if (!CLAIMS_WITHIN_LIMITS.has(claims)) {
      const deep = tooDeepClaim(claims);
      if (deep !== undefined) {
        const field = joinField('token', deep);
        throw new ValidationError(`token claim ${claimPath(field)} nests objects and arrays deeper than ${MAX_JSON_DEPTH} levels`, field, `at most ${MAX_JSON_DEPTH} levels of nesting are accepted (the token's payload is level 1)`);
      }
      const unstorable = findUnstorableText(claims, 'token');
      if (unstorable) throw new ValidationError(`token claim ${claimPath(unstorable.field)} ${unstorable.reason}`, unstorable.field);
      if (Object.isFrozen(claims)) CLAIMS_WITHIN_LIMITS.add(claims);
    }
    const roles = new Set(realmRoles(claims));
    const homeTenantId = claimedId(claims[this.options.tenantClaim]);
    if (homeTenantId === null) throw refused(platformPath, `claim ${this.options.tenantClaim} is not a tenant id`);
    // The system tenant is the platform's own: no token may name it (a token without a tenant claim
    // still provisions its user there, but acts as no tenant).
    if (homeTenantId === SYSTEM_TENANT) throw refused(platformPath, `claim ${this.options.tenantClaim} names the system tenant`);
    // A malformed or system-tenant acting_as_tenant makes the token invalid (401) whatever its roles,
    // as a malformed tenant_id does; a well-formed one without svc_superadmin is spec 1's 403.
    const target = claimedId(claims.acting_as_tenant);
    if (target === null) throw refused(platformPath, 'claim acting_as_tenant is not a tenant id');
    if (target === SYSTEM_TENANT) throw refused(platformPath, 'claim acting_as_tenant names the system tenant');
    let tenantId = homeTenantId;
    let impersonating = false;
    if (target !== undefined) {
      if (!roles.has('svc_superadmin')) throw new ForbiddenWithReason('svc_superadmin required to impersonate a tenant');
      await this.options.directory.requireActiveTenant(target);
      tenantId = target;
      // Acting as one's own tenant is no impersonation: the caller is still themselves there (and
      // may not, say, lock their own account).
      impersonating = target !== homeTenantId;
    }
    if (homeTenantId !== undefined) await this.options.directory.requireActiveTenant(homeTenantId);
    // The subject is a string (RFC 7519): String() of another value would make ["ann"] the user "ann"
    // and every object the one user "[object Object]".
    if (claims.sub !== undefined && typeof claims.sub !== 'string') throw refused(platformPath, 'claim sub is not a string');
    const subject = claims.sub ?? '';
    if (!subject) throw refused(platformPath, 'token has no subject');
    const userIdClaim = claimedId(claims.user_id);
    if (userIdClaim === null) throw refused(platformPath, 'claim user_id is not a user id');
    const user = await this.options.directory.userFor({
      tenantId: homeTenantId ?? 0,
      issuer: String(claims.iss),
      subject,
      userId: userIdClaim,
      login: stringClaim(claims.preferred_username),
      name: stringClaim(claims.name),
      email: stringClaim(claims.email),
    });
    return {
      via: 'token',
      issuer: String(claims.iss),
      subject,
      roles,
      homeTenantId,
      tenantId,
      impersonating,
      userId: String(user.id),
      login: user.login,
      // The verifier required a numeric exp.
      validUntil: ((claims.exp as number) + CLOCK_TOLERANCE_S) * 1000,
    };
  }

  private async devPrincipal(headers: Headers): Promise<Principal> {
    const home = headerTenant(headers, 'X-Tenant-ID');
    const acting = headerTenant(headers, 'X-Impersonate-Tenant');
    if (home !== undefined) await this.options.directory.requireActiveTenant(home);
    if (acting !== undefined) await this.options.directory.requireActiveTenant(acting);
    const userId = single(headers['x-user-id'])?.trim() || undefined;
    return {
      via: 'dev-bypass',
      subject: userId ?? 'dev',
      roles: new Set(ROLES),
      homeTenantId: home,
      tenantId: acting ?? home,
      // As with acting_as_tenant: naming one's own tenant is no impersonation.
      impersonating: acting !== undefined && acting !== home,
      userId,
      login: userId ?? 'dev',
    };
  }
}

/**
 * The first claim that nests objects and arrays deeper than bodies may (MAX_JSON_DEPTH, the payload
 * being level 1, as a body is), or undefined. Measured without recursion.
 */
function tooDeepClaim(claims: JWTPayload): string | undefined {
  if (depthOf(claims) <= MAX_JSON_DEPTH) return undefined;
  return Object.keys(claims).find((name) => depthOf(claims[name], MAX_JSON_DEPTH - 1) > MAX_JSON_DEPTH - 1);
}

/** A field under `token` as the claim's path: `token.name` is `name`, `token["a.b"]` is `["a.b"]`. */
function claimPath(field: string): string {
  return field.replace(/^token\.?/, '');
}

/** The headers that say who calls under the dev bypass, as documented. */
const DEV_HEADERS = ['X-Tenant-ID', 'X-Impersonate-Tenant', 'X-User-ID'];

/**
 * The first of `names` (matched in any letter case) that `rawHeaders` (name, value, name, value, …) gives more than
 * once. Read on every request: no map of every header, only a header of a name's length is lowercased.
 */
function givenTwice(rawHeaders: readonly string[], names: readonly string[]): string | undefined {
  for (const name of names) {
    const lower = name.toLowerCase();
    let seen = 0;
    for (let i = 0; i < rawHeaders.length; i += 2) {
      const given = rawHeaders[i]!;
      if (given.length === lower.length && given.toLowerCase() === lower && ++seen > 1) return name;
    }
  }
  return undefined;
}

/**
 * The 401 of a bearer token refused, by the verifier or for its claims, with its reason logged: the
 * caller gets the plain 401, the log says why (a claim that is not an id, an expired token, …).
 */
function refused(platformPath: boolean, reason: string): AuthenticationRequired {
  logger().info({ reason }, 'bearer token refused');
  return new AuthenticationRequired(platformPath, reason);
}

function single(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

function realmRoles(claims: JWTPayload): string[] {
  const realm = claims.realm_access as { roles?: unknown } | undefined;
  return Array.isArray(realm?.roles) ? realm.roles.filter((r): r is string => typeof r === 'string') : [];
}

/**
 * A numeric id claim (tenant, user). undefined: no claim (absent or JSON null); null: a claim that is
 * not an id, the empty string included (an id written as nothing is malformed, not absent).
 */
function claimedId(value: unknown): number | undefined | null {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'number' && typeof value !== 'string') return null; // [3] would stringify to '3'
  const text = String(value);
  if (!/^\d+$/.test(text)) return null;
  const id = Number(text);
  return Number.isSafeInteger(id) ? id : null;
}

function headerTenant(headers: Headers, name: string): number | undefined {
  const raw = single(headers[name.toLowerCase()]);
  if (raw === undefined || raw.trim() === '') return undefined;
  const id = claimedId(raw.trim());
  if (id === null || id === undefined) throw new ValidationError(`${name} must be a numeric tenant id`, name);
  if (id === SYSTEM_TENANT) throw new ForbiddenWithReason(`${name} names the system tenant`);
  return id;
}

function stringClaim(value: unknown): string | undefined {
  return typeof value === 'string' && value ? value : undefined;
}
