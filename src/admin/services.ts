import type { Directory } from '../auth/directory.js';
import type { Database, TenantId } from '../db/database.js';
import type { Events } from './common.js';
import { archiveOrg, createOrg, getOrg, listOrgs, type Org, type OrgInput, type OrgNode, type OrgPatch, orgTree, updateOrg } from './orgs.js';
import { assignRole, createRole, getRole, grantOrg, listRoles, orgsOfRole, removeRole, revokeOrg, type Role, type RoleInput, rolesOfUser } from './roles.js';
import { type Caller, getDefaultScope, requireEvery, type ScopeAccess, scopeAccess, setDefaultScope } from './scope-access.js';
import { scopesOf, setScopes } from './scopes.js';
import { createTenant, deactivateTenant, getTenant, listTenants, type Tenant, type TenantInput, type TenantPatch, tenantByCode, updateTenant } from './tenants.js';
import { createUser, deactivateUser, getUser, listUsers, unlockUser, type User, type UserInput, type UserPatch, updateUser } from './users.js';

/** The tenant a call acts in (the caller's; the gate checked it equals `{tid}`). */
type In = TenantId | undefined;

/**
 * Tenancy administration as the rest of the hub sees it. Every method opens its own transaction:
 * tenants without a tenant (core.tenants has no row-level security), everything else in the tenant
 * it is given. Changes that alter who may sign in reset the directory's cache.
 */
export interface AdminServices {
  tenants: {
    list(): Promise<Tenant[]>;
    get(id: number): Promise<Tenant>;
    /** Active or not; undefined when no tenant has that code. */
    byCode(code: string): Promise<{ id: number; active: boolean } | undefined>;
    create(input: TenantInput): Promise<Tenant>;
    update(id: number, patch: TenantPatch): Promise<Tenant>;
    /** False when it was already inactive. */
    deactivate(id: number): Promise<boolean>;
  };
  orgs: {
    list(tenantId: In): Promise<Org[]>;
    tree(tenantId: In, options: { root?: number; depth?: number }): Promise<OrgNode[]>;
    get(tenantId: In, id: number): Promise<Org>;
    create(tenantId: In, input: OrgInput): Promise<Org>;
    update(tenantId: In, id: number, patch: OrgPatch): Promise<Org>;
    archive(tenantId: In, id: number): Promise<void>;
  };
  users: {
    list(tenantId: In): Promise<User[]>;
    get(tenantId: In, id: number): Promise<User>;
    create(tenantId: In, input: UserInput): Promise<User>;
    update(tenantId: In, id: number, patch: UserPatch): Promise<User>;
    unlock(tenantId: In, id: number): Promise<User>;
    deactivate(tenantId: In, id: number): Promise<void>;
    scopes(tenantId: In, id: number): Promise<string[]>;
    /**
     * A scope-bound caller (their own list included) sets only a list of scopes they hold, on a user
     * whose list they hold, neither empty (an empty list binds to nothing: every scope); 403 `scope
     * not granted` otherwise, the list unchanged.
     */
    setScopes(tenantId: In, caller: Caller, id: number, scopes: string[]): Promise<string[]>;
    /** The caller's default scope ('' when none); 404 `no user record on this hub for user_id <id>` without a hub user. */
    defaultScope(tenantId: In, caller: Caller): Promise<string>;
    /** Sets (or with '' clears) the caller's default scope; 403 `scope not granted` outside a scope-bound caller's grants. */
    setDefaultScope(tenantId: In, caller: Caller, scope: string): Promise<string>;
    /** What scopes the caller may read, and their default (src/admin/scope-access.ts; `resolveScope` applies it). */
    scopeAccess(tenantId: In, caller: Caller): Promise<ScopeAccess>;
  };
  roles: {
    list(tenantId: In): Promise<Role[]>;
    get(tenantId: In, id: number): Promise<Role>;
    create(tenantId: In, input: RoleInput): Promise<Role>;
    ofUser(tenantId: In, userId: number): Promise<Role[]>;
    assign(tenantId: In, userId: number, roleId: number): Promise<void>;
    remove(tenantId: In, userId: number, roleId: number): Promise<void>;
    orgs(tenantId: In, roleId: number): Promise<Org[]>;
    grantOrg(tenantId: In, roleId: number, orgId: number): Promise<void>;
    revokeOrg(tenantId: In, roleId: number, orgId: number): Promise<void>;
  };
}

export function createAdminServices(deps: { db: Database; events: Events; directory: Pick<Directory, 'invalidate'> }): AdminServices {
  const { db, events, directory } = deps;
  const changedSignIn = <T>(changed: boolean, value: T): T => {
    if (changed) directory.invalidate();
    return value;
  };
  return {
    tenants: {
      list: () => db.withoutTenant(listTenants),
      get: (id) => db.withoutTenant((tx) => getTenant(tx, id)),
      byCode: (code) => db.withoutTenant((tx) => tenantByCode(tx, code)),
      // A caller refused as `unknown tenant N` before the tenant existed is cached so: the new tenant
      // must be usable at once.
      create: async (input) => changedSignIn(true, await db.withoutTenant((tx) => createTenant(tx, input))),
      update: (id, patch) => db.withoutTenant((tx) => updateTenant(tx, id, patch)),
      deactivate: async (id) => {
        const changed = await db.withoutTenant((tx) => deactivateTenant(tx, id));
        return changedSignIn(changed, changed);
      },
    },
    orgs: {
      list: (t) => db.withTenant(t, listOrgs),
      tree: (t, options) => db.withTenant(t, (tx) => orgTree(tx, options)),
      get: (t, id) => db.withTenant(t, (tx) => getOrg(tx, id)),
      create: (t, input) => db.withTenant(t, (tx) => createOrg(tx, events, input)),
      update: (t, id, patch) => db.withTenant(t, (tx) => updateOrg(tx, events, id, patch)),
      archive: (t, id) => db.withTenant(t, (tx) => archiveOrg(tx, events, id)),
    },
    users: {
      list: (t) => db.withTenant(t, listUsers),
      get: (t, id) => db.withTenant(t, (tx) => getUser(tx, id)),
      create: (t, input) => db.withTenant(t, (tx) => createUser(tx, input)),
      update: async (t, id, patch) => {
        const { user, lockChanged } = await db.withTenant(t, (tx) => updateUser(tx, id, patch));
        return changedSignIn(lockChanged, user);
      },
      unlock: async (t, id) => {
        const { user, changed } = await db.withTenant(t, (tx) => unlockUser(tx, id));
        return changedSignIn(changed, user);
      },
      deactivate: async (t, id) => {
        const changed = await db.withTenant(t, (tx) => deactivateUser(tx, id));
        changedSignIn(changed, undefined);
      },
      scopes: (t, id) =>
        db.withTenant(t, async (tx) => {
          await getUser(tx, id);
          return scopesOf(tx, id);
        }),
      setScopes: (t, caller, id, scopes) =>
        db.withTenant(t, async (tx) => {
          const access = await scopeAccess(tx, caller);
          if (access.bound) {
            await getUser(tx, id, true);
            requireEvery(access, await scopesOf(tx, id), scopes);
          }
          return setScopes(tx, id, scopes);
        }),
      defaultScope: (t, caller) => db.withTenant(t, (tx) => getDefaultScope(tx, caller)),
      setDefaultScope: (t, caller, scope) => db.withTenant(t, (tx) => setDefaultScope(tx, caller, scope)),
      scopeAccess: (t, caller) => db.withTenant(t, (tx) => scopeAccess(tx, caller)),
    },
    roles: {
      list: (t) => db.withTenant(t, listRoles),
      get: (t, id) => db.withTenant(t, (tx) => getRole(tx, id)),
      create: (t, input) => db.withTenant(t, (tx) => createRole(tx, input)),
      ofUser: (t, userId) => db.withTenant(t, (tx) => rolesOfUser(tx, userId)),
      assign: (t, userId, roleId) => db.withTenant(t, (tx) => assignRole(tx, userId, roleId)),
      remove: (t, userId, roleId) => db.withTenant(t, (tx) => removeRole(tx, userId, roleId)),
      orgs: (t, roleId) => db.withTenant(t, (tx) => orgsOfRole(tx, roleId)),
      grantOrg: (t, roleId, orgId) => db.withTenant(t, (tx) => grantOrg(tx, roleId, orgId)),
      revokeOrg: (t, roleId, orgId) => db.withTenant(t, (tx) => revokeOrg(tx, roleId, orgId)),
    },
  };
}
