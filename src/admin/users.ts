import { takeKeptPlaces } from '../manifests/tenant-cap.js';
import { ConflictError, NotFoundError, ValidationError } from '../errors.js';
import { assignments, isUniqueViolation, optionalText, requireText, type Tx } from './common.js';

/**
 * Hub users of a tenant (core.users, row-level security: run in `Database.withTenant`). The hub
 * stores no passwords; users reach the hub through their identity provider, either provisioned on
 * (issuer, subject) at first call or named by a token's `user_id` claim. Lock, unlock and
 * deactivation return whether the state changed: the caller then drops the authentication cache
 * (`Directory.invalidate()`) after the transaction commits, so the user's next call is refused.
 */

export interface User {
  id: number;
  tenantId: number;
  login: string;
  name: string | null;
  email: string | null;
  description: string | null;
  issuer: string | null;
  subject: string | null;
  locked: boolean;
  active: boolean;
  lastLoginAt: Date | null;
  createdAt: Date;
  updatedAt: Date;
}

export interface UserInput {
  login: string;
  name: string;
  email?: string | null;
  description?: string | null;
}

export interface UserPatch {
  name?: string;
  email?: string | null;
  description?: string | null;
  /** Only `true` (lock); unlocking is `unlockUser`. */
  locked?: boolean;
}

const COLUMNS =
  'id, tenant_id as "tenantId", login, name, email, description, issuer, subject, locked, active, ' +
  'last_login_at as "lastLoginAt", created_at as "createdAt", updated_at as "updatedAt"';

function tenantOf(tx: Tx): number {
  if (tx.tenantId === undefined) throw new Error('users need a tenant transaction (Database.withTenant)');
  return tx.tenantId;
}

/** Active users of the tenant, by id. */
export async function listUsers(tx: Tx): Promise<User[]> {
  const { rows } = await tx.query<User>(`select ${COLUMNS} from core.users where active order by id`);
  return rows;
}

/** One user, deactivated ones included; 404 when unknown or of another tenant. */
export async function getUser(tx: Tx, id: number, lock = false): Promise<User> {
  const { rows } = await tx.query<User>(`select ${COLUMNS} from core.users where id = $1${lock ? ' for update' : ''}`, [id]);
  if (!rows[0]) throw new NotFoundError(`user ${id} not found`);
  return rows[0];
}

/** An active user of the tenant: 404 when unknown, 409 when deactivated. */
export async function requireActiveUser(tx: Tx, id: number, lock = false): Promise<User> {
  const user = await getUser(tx, id, lock);
  if (!user.active) throw new ConflictError(`user ${id} is deactivated`);
  return user;
}

/**
 * Users an administrator may bring a tenant to, deactivated ones included (a deactivated user's row
 * and login stay): the database is shared, so creating users is bounded. Users provisioned at their
 * first call with a token count too, but are never refused (they are the identity provider's).
 */
export const MAX_USERS_PER_TENANT = 100_000;

/** 409 when the login is taken in the tenant (by an active or a deactivated user), or the tenant has MAX_USERS_PER_TENANT users. */
export async function createUser(tx: Tx, input: UserInput): Promise<User> {
  const tenantId = tenantOf(tx);
  requireText(input.login, 'login');
  if (input.login !== input.login.trim()) throw new ValidationError('login must not start or end with whitespace', 'login');
  requireText(input.name, 'name');
  await takeKeptPlaces(tx, { table: 'core.users', plural: 'users', max: MAX_USERS_PER_TENANT, advice: 'deactivated ones count too (their rows and logins stay)' });
  try {
    const { rows } = await tx.query<User>(
      `insert into core.users (tenant_id, login, name, email, description) values ($1, $2, $3, $4, $5) returning ${COLUMNS}`,
      [tenantId, input.login, input.name, optionalText(input.email) ?? null, optionalText(input.description) ?? null],
    );
    return rows[0]!;
  } catch (err) {
    if (isUniqueViolation(err, 'users_tenant_id_login_key')) throw new ConflictError(`login ${input.login} is already taken`, 'login');
    throw err;
  }
}

/**
 * Present fields only (null clears email and description); `locked: true` locks the account,
 * `locked: false` is refused (unlocking has its own operation). A deactivated user cannot be
 * changed (409). `lockChanged` says whether the account was locked by this call.
 */
export async function updateUser(tx: Tx, id: number, patch: UserPatch): Promise<{ user: User; lockChanged: boolean }> {
  if (patch.locked === false) {
    throw new ValidationError('locked can only be set to true here', 'locked', 'unlock with POST /api/tenants/{tid}/users/{id}/unlock');
  }
  const current = await requireActiveUser(tx, id, true);
  if (patch.name !== undefined) requireText(patch.name, 'name');
  const lockChanged = patch.locked === true && !current.locked;
  const set = assignments(
    { name: patch.name, email: optionalText(patch.email), description: optionalText(patch.description), locked: lockChanged ? true : undefined },
    { name: 'name', email: 'email', description: 'description', locked: 'locked' },
    2,
  );
  if (!set.sql.length) return { user: current, lockChanged };
  const { rows } = await tx.query<User>(`update core.users set ${set.sql.join(', ')}, updated_at = now() where id = $1 returning ${COLUMNS}`, [id, ...set.values]);
  return { user: rows[0]!, lockChanged };
}

/** Unlocks a locked account (an unlocked one is left as is). 409 for a deactivated user. */
export async function unlockUser(tx: Tx, id: number): Promise<{ user: User; changed: boolean }> {
  const current = await requireActiveUser(tx, id, true);
  if (!current.locked) return { user: current, changed: false };
  const { rows } = await tx.query<User>(`update core.users set locked = false, updated_at = now() where id = $1 returning ${COLUMNS}`, [id]);
  return { user: rows[0]!, changed: true };
}

/** Soft delete: `active = false`, the row stays. A deactivated user is left as is. */
export async function deactivateUser(tx: Tx, id: number): Promise<boolean> {
  const current = await getUser(tx, id, true);
  if (!current.active) return false;
  await tx.query('update core.users set active = false, updated_at = now() where id = $1', [id]);
  return true;
}
