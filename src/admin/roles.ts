import { ConflictError, NotFoundError } from '../errors.js';
import { takeKeptPlaces } from '../manifests/tenant-cap.js';
import { isUniqueViolation, optionalText, requireText, type Tx } from './common.js';
import { getOrg, type Org } from './orgs.js';
import { getUser, requireActiveUser } from './users.js';

/**
 * Tenant roles, their holders and the organisations they give access to (row-level security: run
 * in `Database.withTenant`). Assignments and grants are links that are switched on and off, never
 * deleted: removing one keeps its row with `active = false` and `revoked_at`. Assigning or granting
 * again switches the same row back on. Both operations are idempotent.
 */

export interface Role {
  id: number;
  name: string;
  description: string | null;
}

export interface RoleInput {
  name: string;
  description?: string | null;
}

const COLUMNS = 'id, name, description';

function tenantOf(tx: Tx): number {
  if (tx.tenantId === undefined) throw new Error('roles need a tenant transaction (Database.withTenant)');
  return tx.tenantId;
}

/** Active roles of the tenant, by id. */
export async function listRoles(tx: Tx): Promise<Role[]> {
  const { rows } = await tx.query<Role>(`select ${COLUMNS} from core.roles where active order by id`);
  return rows;
}

/** One active role; 404 when unknown or of another tenant. */
export async function getRole(tx: Tx, id: number): Promise<Role> {
  const { rows } = await tx.query<Role>(`select ${COLUMNS} from core.roles where id = $1 and active`, [id]);
  if (!rows[0]) throw new NotFoundError(`role ${id} not found`);
  return rows[0];
}

/**
 * Roles, role assignments and organisation grants one tenant may have, each row counted whether
 * active or not (none is ever deleted: docs/admin.md): the database is shared, so each is bounded,
 * well past what a tenant's directory needs. Giving again a role a user had, or granting again an
 * organisation a role had, switches its row on and is never refused.
 */
export const MAX_ROLES_PER_TENANT = 1000;
export const MAX_ROLE_ASSIGNMENTS_PER_TENANT = 100_000;
export const MAX_ORG_GRANTS_PER_TENANT = 100_000;

/** 409 when the name is taken in the tenant, or the tenant has MAX_ROLES_PER_TENANT roles. */
export async function createRole(tx: Tx, input: RoleInput): Promise<Role> {
  requireText(input.name, 'name');
  await takeKeptPlaces(tx, { table: 'core.roles', plural: 'roles', max: MAX_ROLES_PER_TENANT, advice: 'roles are kept once created: give users a role the tenant has' });
  try {
    const { rows } = await tx.query<Role>(`insert into core.roles (tenant_id, name, description) values ($1, $2, $3) returning ${COLUMNS}`, [
      tenantOf(tx),
      input.name,
      optionalText(input.description) ?? null,
    ]);
    return rows[0]!;
  } catch (err) {
    if (isUniqueViolation(err, 'roles_tenant_id_name_key')) throw new ConflictError(`role ${input.name} already exists`, 'name');
    throw err;
  }
}

/**
 * Gives a role to a user: 404 when either is unknown in the tenant, 409 when the user is deactivated,
 * or when the user never had the role and the tenant has MAX_ROLE_ASSIGNMENTS_PER_TENANT assignments.
 */
export async function assignRole(tx: Tx, userId: number, roleId: number): Promise<void> {
  await requireActiveUser(tx, userId);
  await getRole(tx, roleId);
  await takeKeptPlaces(
    tx,
    { table: 'core.user_roles', plural: 'role assignments', max: MAX_ROLE_ASSIGNMENTS_PER_TENANT, advice: 'a removed one counts too (its row stays) and can be given again' },
    async () => ((await tx.query('select 1 from core.user_roles where user_id = $1 and role_id = $2', [userId, roleId])).rowCount === 0 ? 1 : 0),
  );
  await tx.query(
    `insert into core.user_roles (tenant_id, user_id, role_id) values ($1, $2, $3)
     on conflict (tenant_id, user_id, role_id) do update
       set active = true, revoked_at = null,
           granted_at = case when core.user_roles.active then core.user_roles.granted_at else now() end`,
    [tenantOf(tx), userId, roleId],
  );
}

/** Takes a role from a user (the row stays, switched off): 404 when either is unknown in the tenant. */
export async function removeRole(tx: Tx, userId: number, roleId: number): Promise<void> {
  await getUser(tx, userId);
  await getRole(tx, roleId);
  await tx.query('update core.user_roles set active = false, revoked_at = now() where user_id = $1 and role_id = $2 and active', [userId, roleId]);
}

/** The active roles a user holds, by id; 404 when the user is unknown. */
export async function rolesOfUser(tx: Tx, userId: number): Promise<Role[]> {
  await getUser(tx, userId);
  const { rows } = await tx.query<Role>(
    `select r.id, r.name, r.description from core.user_roles ur join core.roles r on r.id = ur.role_id
      where ur.user_id = $1 and ur.active and r.active order by r.id`,
    [userId],
  );
  return rows;
}

/**
 * Grants a role access to an organisation: 404 when either is unknown, 409 when the organisation is
 * archived, or when the role never had it and the tenant has MAX_ORG_GRANTS_PER_TENANT grants.
 */
export async function grantOrg(tx: Tx, roleId: number, orgId: number): Promise<void> {
  await getRole(tx, roleId);
  const org = await getOrg(tx, orgId);
  if (!org.active) throw new ConflictError(`organisation ${orgId} is archived`);
  await takeKeptPlaces(
    tx,
    { table: 'core.role_orgs', plural: 'organisation grants', max: MAX_ORG_GRANTS_PER_TENANT, advice: 'a revoked one counts too (its row stays) and can be granted again' },
    async () => ((await tx.query('select 1 from core.role_orgs where role_id = $1 and org_id = $2', [roleId, orgId])).rowCount === 0 ? 1 : 0),
  );
  await tx.query(
    `insert into core.role_orgs (tenant_id, role_id, org_id) values ($1, $2, $3)
     on conflict (tenant_id, role_id, org_id) do update
       set active = true, revoked_at = null,
           granted_at = case when core.role_orgs.active then core.role_orgs.granted_at else now() end`,
    [tenantOf(tx), roleId, orgId],
  );
}

/** Revokes a role's access to an organisation (the row stays, switched off): 404 when either is unknown. */
export async function revokeOrg(tx: Tx, roleId: number, orgId: number): Promise<void> {
  await getRole(tx, roleId);
  await getOrg(tx, orgId);
  await tx.query('update core.role_orgs set active = false, revoked_at = now() where role_id = $1 and org_id = $2 and active', [roleId, orgId]);
}

/** The organisations a role currently grants (archived organisations included, marked inactive), by id. */
export async function orgsOfRole(tx: Tx, roleId: number): Promise<Org[]> {
  await getRole(tx, roleId);
  const { rows } = await tx.query<Org>(
    `select o.id, o.tenant_id as "tenantId", o.code, o.name, o.description, o.parent_id as "parentId", o.active,
            o.created_at as "createdAt", o.updated_at as "updatedAt"
       from core.role_orgs ro join core.orgs o on o.id = ro.org_id
      where ro.role_id = $1 and ro.active order by o.id`,
    [roleId],
  );
  return rows;
}
