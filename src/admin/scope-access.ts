import type { Principal } from '../auth/principal.js';
import { NotFoundError, ScopeNotGranted, ValidationError } from '../errors.js';
import type { Tx } from './common.js';
import { scopesOf } from './scopes.js';

/**
 * What scopes a caller may read, for the retrieval and search API, and the caller's own default
 * scope (GET and PUT /api/platform/users/me/scope). Run in `Database.withTenant` (core.users and
 * core.user_scopes are under row-level security).
 *
 * A user with at least one active scope grant is scope-bound: asking outside the grants is refused
 * with 403 `scope not granted`. `all` means no specific scope; for a scope-bound user that is the
 * granted set.
 */

export interface ScopeAccess {
  /** The caller has at least one active grant and may read only `granted`. */
  bound: boolean;
  /** The active grants, sorted; empty for an unbound caller. */
  granted: string[];
  /** The caller's default scope; '' when none is set. */
  defaultScope: string;
}

/** Whose scope access a call has: the principal's hub user (undefined: no user, unbound). */
export type Caller = Pick<Principal, 'userId'> | undefined;

/** The longest default scope stored. */
const MAX_SCOPE_LENGTH = 200;

/** The word that asks for no specific scope. */
export const ALL_SCOPES = 'all';

/** What a caller with no hub user gets: unbound, no default. */
const NO_USER: ScopeAccess = { bound: false, granted: [], defaultScope: '' };

/**
 * The hub user id a principal names: a token's user is provisioned (or named by its `user_id`
 * claim) and always numeric; the dev bypass's `X-User-ID` is taken as given. undefined when it
 * names no possible user id (absent, not a positive safe integer).
 */
export function hubUserId(principal: Pick<Principal, 'userId'> | undefined): number | undefined {
  const raw = principal?.userId?.trim();
  if (!raw || !/^\d+$/.test(raw)) return undefined;
  const id = Number(raw);
  return Number.isSafeInteger(id) && id > 0 ? id : undefined;
}

/** 404 `no user record on this hub for user_id <id>` (`(none)` when the call names no user). */
export function noUserRecord(principal: Pick<Principal, 'userId'> | undefined): NotFoundError {
  return new NotFoundError(`no user record on this hub for user_id ${principal?.userId?.trim() || '(none)'}`);
}

/**
 * A caller's scope access as one row of a statement's own (`$n`: the hub user id, or null for
 * none): `defaultScope` and `granted` (the active grants, sorted), both null when the tenant has no
 * such user. Joined to a read (`left join (…) alias on true`), the access travels with the read's
 * answer: one round trip where reading it first cost two more (`scopeAccessOf` reads its columns).
 */
export function scopeAccessSql(userParam: string): string {
  return `select coalesce(u.default_scope, '') as "defaultScope",
      array(select s.scope from core.user_scopes s where s.user_id = u.id and s.active order by s.scope) as granted
    from core.users u where u.id = ${userParam}`;
}

/** The columns of `scopeAccessSql`'s row (both null without a user row) as the caller's access. */
export function scopeAccessOf(row: { defaultScope: string | null; granted: string[] | null } | undefined): ScopeAccess {
  if (!row || row.granted === null || row.defaultScope === null) return NO_USER;
  return { bound: row.granted.length > 0, granted: row.granted, defaultScope: row.defaultScope };
}

/** `scopeAccess`'s statement: the default scope and the grants in one round trip. */
const SCOPE_ACCESS = scopeAccessSql('$1');

async function defaultScopeOf(tx: Tx, userId: number): Promise<string | undefined> {
  const { rows } = await tx.query<{ defaultScope: string | null }>('select default_scope as "defaultScope" from core.users where id = $1', [userId]);
  return rows[0] ? (rows[0].defaultScope ?? '') : undefined;
}

/**
 * The caller's scope access. A caller with no hub user in the tenant (the dev bypass without
 * `X-User-ID`, or naming an id with no row) is unbound with no default: grants belong to users.
 */
export async function scopeAccess(tx: Tx, principal: Pick<Principal, 'userId'> | undefined): Promise<ScopeAccess> {
  const id = hubUserId(principal);
  if (id === undefined) return NO_USER;
  const { rows } = await tx.query<{ defaultScope: string; granted: string[] }>(SCOPE_ACCESS, [id]);
  return scopeAccessOf(rows[0]);
}

/** The caller's default scope ('' when none); 404 `no user record on this hub for user_id <id>` without a hub user. */
export async function getDefaultScope(tx: Tx, principal: Pick<Principal, 'userId'> | undefined): Promise<string> {
  const id = hubUserId(principal);
  const found = id === undefined ? undefined : await defaultScopeOf(tx, id);
  if (found === undefined) throw noUserRecord(principal);
  return found;
}

/**
 * Sets the caller's default scope and returns it as stored: surrounding whitespace is dropped, ''
 * clears it, whitespace inside is refused (400, field `defaultScope`). A scope-bound caller may
 * choose only a granted scope or `all` (403 `scope not granted`). 404 without a hub user.
 */
export async function setDefaultScope(tx: Tx, principal: Pick<Principal, 'userId'> | undefined, scope: string): Promise<string> {
  const id = hubUserId(principal);
  const current = id === undefined ? undefined : await defaultScopeOf(tx, id);
  if (id === undefined || current === undefined) throw noUserRecord(principal);
  const wanted = scope.trim();
  if (/\s/.test(wanted)) throw new ValidationError('defaultScope must be a scope name without whitespace', 'defaultScope');
  if (wanted.length > MAX_SCOPE_LENGTH) throw new ValidationError(`defaultScope must be at most ${MAX_SCOPE_LENGTH} characters`, 'defaultScope');
  if (wanted && wanted !== ALL_SCOPES) {
    const granted = await scopesOf(tx, id);
    if (granted.length > 0 && !granted.includes(wanted)) throw new ScopeNotGranted();
  }
  await tx.query('update core.users set default_scope = $2, updated_at = now() where id = $1', [id, wanted || null]);
  return wanted;
}

/**
 * What a retrieval call reads, from the scope it asked for and the caller's access:
 * - `scope`: the one scope to read; undefined for no specific scope;
 * - `allowed`: the scopes the caller may read at all; the granted set of a scope-bound caller,
 *   undefined (every scope) for an unbound one.
 */
export interface ResolvedScope {
  scope?: string;
  allowed?: string[];
}

/**
 * The scope rules of the read surface. Blank or absent: the caller's default scope when set (unless
 * `useDefault` is false: search, whose blank means no tag filter), else no specific scope; `all`: no
 * specific scope. No specific scope for a scope-bound caller is their granted set. A scope-bound
 * caller naming (or defaulting to) a scope outside the grants: 403 `scope not granted`.
 */
export function resolveScope(requested: string | undefined, access: ScopeAccess, options: { useDefault?: boolean } = {}): ResolvedScope {
  let scope = requested?.trim() ?? '';
  if (!scope && (options.useDefault ?? true)) scope = access.defaultScope.trim();
  const allowed = access.bound ? [...access.granted] : undefined;
  if (!scope || scope === ALL_SCOPES) return allowed ? { allowed } : {};
  if (access.bound && !access.granted.includes(scope)) throw new ScopeNotGranted();
  return allowed ? { scope, allowed } : { scope };
}

/**
 * Whether the caller may write (apply, delete, run, purge) a definition of these scopes: an unbound
 * caller any; a scope-bound one only a definition that names at least one scope, each granted (one
 * naming none holds data outside every scope: its chunks are untagged, invisible to them).
 */
export function holdsEvery(access: ScopeAccess, scopes: readonly string[]): boolean {
  return !access.bound || (scopes.length > 0 && scopes.every((s) => access.granted.includes(s)));
}

/**
 * 403 `scope not granted` unless the caller holds every scope of each list (holdsEvery): a write's
 * definition as it was stored and as it will be, so that a scope-bound caller can neither take
 * another domain's definition into their scopes nor move one of theirs into another's.
 */
export function requireEvery(access: ScopeAccess, ...lists: ReadonlyArray<readonly string[]>): void {
  if (!lists.every((scopes) => holdsEvery(access, scopes))) throw new ScopeNotGranted();
}

/**
 * A delete held to the caller's grants (requireEvery): for a scope-bound caller, `lockedScopes`
 * (the definition's scopes as stored, its row locked as the delete locks it; undefined when there is
 * none: false, nothing deleted) must all be held; then `remove`. In the caller's transaction.
 */
export async function removeHeld(tx: Tx, caller: Caller, lockedScopes: () => Promise<string[] | undefined>, remove: () => Promise<boolean>): Promise<boolean> {
  const access = await scopeAccess(tx, caller);
  if (access.bound) {
    const scopes = await lockedScopes();
    if (scopes === undefined) return false;
    requireEvery(access, scopes);
  }
  return remove();
}
