import { randomBytes } from 'node:crypto';
import type { Database } from '../db/database.js';
import { ForbiddenWithReason } from '../errors.js';

/**
 * What authentication reads on every call: whether a tenant exists and is active, and the hub user
 * behind an (issuer, subject) pair, created on first sight (just-in-time provisioning). Both are
 * cached briefly so a busy caller costs no query per request; a lock or a deactivation takes
 * effect within `ttlMs`.
 */

interface TenantEntry {
  id: number;
  code: string;
  active: boolean;
}

export interface HubUser {
  id: number;
  tenantId: number;
  login: string;
  locked: boolean;
  active: boolean;
}

export interface TokenIdentity {
  tenantId: number;
  issuer: string;
  subject: string;
  /** A claim `user_id` names the hub user directly. */
  userId?: number;
  login?: string;
  name?: string;
  email?: string;
}

export class Directory {
  private readonly tenants = new Map<number, { entry: TenantEntry | null; at: number }>();
  private readonly users = new Map<string, { user: HubUser; at: number }>();

  constructor(
    private readonly db: Database,
    private readonly ttlMs = 10_000,
    /** Past this many entries in a cache, those older than `ttlMs` are dropped (they would be read again anyway). */
    private readonly maxEntries = 10_000,
  ) {}

  async tenant(id: number): Promise<TenantEntry | null> {
    const cached = this.tenants.get(id);
    if (cached && Date.now() - cached.at < this.ttlMs) return cached.entry;
    const { rows } = await this.db.withoutTenant((tx) => tx.query<TenantEntry>('select id, code, active from core.tenants where id = $1', [id]));
    const entry = rows[0] ?? null;
    this.remember(this.tenants, id, { entry, at: Date.now() });
    return entry;
  }

  /** The tenant must exist and be active, or the call is refused. */
  async requireActiveTenant(id: number): Promise<TenantEntry> {
    const tenant = await this.tenant(id);
    if (!tenant) throw new ForbiddenWithReason(`unknown tenant ${id}`);
    if (!tenant.active) throw new ForbiddenWithReason('tenant inactive');
    return tenant;
  }

  /** The hub user of a token, provisioned on first sight; refuses locked and inactive accounts. */
  userFor(identity: TokenIdentity): Promise<HubUser> {
    const key = `${identity.tenantId}\u0000${identity.issuer}\u0000${identity.subject}\u0000${identity.userId ?? ''}`;
    return this.allowedUser(key, identity.tenantId, (tx) => (identity.userId !== undefined ? byId(tx, identity.userId) : provision(tx, identity)));
  }

  /**
   * Whether a principal authenticated earlier may still act (a call that outlives its request, such
   * as an event stream): its tenants still active and, for a token's user, the account neither
   * locked nor deactivated. Throws the ForbiddenWithReason a new call would get; read through the
   * same cache, so a change takes effect within `ttlMs`.
   */
  async recheck(principal: { via: string; homeTenantId?: number; tenantId?: number; userId?: string }): Promise<void> {
    for (const id of new Set([principal.homeTenantId, principal.tenantId])) if (id !== undefined) await this.requireActiveTenant(id);
    if (principal.via !== 'token' || principal.userId === undefined) return;
    const tenantId = principal.homeTenantId ?? 0;
    await this.allowedUser(`${tenantId}\u0000#${principal.userId}`, tenantId, (tx) => byId(tx, Number(principal.userId)));
  }

  /** The user cached under `key` (read by `load` in `tenantId` when stale), refused when locked or inactive. */
  private async allowedUser(key: string, tenantId: number, load: (tx: Tx) => Promise<HubUser>): Promise<HubUser> {
    const cached = this.users.get(key);
    let user = cached && Date.now() - cached.at < this.ttlMs ? cached.user : undefined;
    if (!user) {
      user = await this.db.withTenant(tenantId, load);
      this.remember(this.users, key, { user, at: Date.now() });
    }
    if (!user.active) throw new ForbiddenWithReason('account inactive');
    if (user.locked) throw new ForbiddenWithReason('account locked');
    return user;
  }

  /**
   * Caches an entry. Every user ever seen (and, under the dev bypass, every tenant id a header named)
   * would otherwise stay in memory for the life of the process: past `maxEntries`, the stale ones go.
   */
  private remember<K, V extends { at: number }>(cache: Map<K, V>, key: K, value: V): void {
    cache.set(key, value);
    if (cache.size <= this.maxEntries) return;
    // At most one pass per `ttlMs` and cache: with more fresh entries than `maxEntries`, a pass would drop none.
    const now = Date.now();
    if (now - (this.prunedAt.get(cache) ?? 0) < this.ttlMs) return;
    this.prunedAt.set(cache, now);
    for (const [k, v] of cache) if (now - v.at >= this.ttlMs) cache.delete(k);
  }

  private readonly prunedAt = new Map<Map<unknown, unknown>, number>();

  /** Forget cached state (after an administrator changes a tenant or a user). */
  invalidate(): void {
    this.tenants.clear();
    this.users.clear();
  }
}

type Tx = Parameters<Parameters<Database['withTenant']>[1]>[0];

const USER_COLUMNS = 'id, tenant_id as "tenantId", login, locked, active';

async function byId(tx: Tx, id: number): Promise<HubUser> {
  const { rows } = await tx.query<HubUser>(`select ${USER_COLUMNS} from core.users where id = $1`, [id]);
  if (!rows[0]) throw new ForbiddenWithReason('unknown user');
  return rows[0];
}

async function provision(tx: Tx, identity: TokenIdentity): Promise<HubUser> {
  const found = await signedIn(tx, identity);
  if (found) return found;
  const base = identity.login || identity.email || identity.subject;
  // The login is the first of these not taken in the tenant: the token's, then with the subject
  // appended, then with a random tail as well (an administrator may have created `ann#<sub>` too, or
  // another new user of the same login may be provisioned at the same moment). Provisioning never
  // fails on a login: a unique violation here was a 500 on every call of that user.
  for (let attempt = 0; ; attempt++) {
    const login = attempt === 0 ? base : attempt === 1 ? `${base}#${identity.subject}` : `${base}#${identity.subject}#${randomBytes(4).toString('hex')}`;
    const created = await tx.query<HubUser>(
      `insert into core.users (tenant_id, login, name, email, issuer, subject, last_login_at)
       values ($1, $2, $3, $4, $5, $6, now())
       on conflict do nothing
       returning ${USER_COLUMNS}`,
      [identity.tenantId, login, identity.name ?? null, identity.email ?? null, identity.issuer, identity.subject],
    );
    if (created.rows[0]) return created.rows[0];
    // Nothing inserted: the login is taken, or a concurrent first call provisioned this (iss, sub).
    const meanwhile = await signedIn(tx, identity);
    if (meanwhile) return meanwhile;
    if (attempt >= MAX_LOGIN_ATTEMPTS) throw new Error(`no free login for a new hub user after ${attempt + 1} attempts`);
  }
}

/** Logins tried for a new user before giving up (the third and later carry a random tail: practically never reached). */
const MAX_LOGIN_ATTEMPTS = 5;

/** The user of (iss, sub) in the transaction's tenant, its last login set to now; undefined when none. */
async function signedIn(tx: Tx, identity: TokenIdentity): Promise<HubUser | undefined> {
  const { rows } = await tx.query<HubUser>(`update core.users set last_login_at = now() where issuer = $1 and subject = $2 returning ${USER_COLUMNS}`, [
    identity.issuer,
    identity.subject,
  ]);
  return rows[0];
}
