import { ConflictError, NotFoundError, ValidationError } from '../errors.js';
import { assignments, isUniqueViolation, optionalText, requireText, TENANT_CODE, type Tx } from './common.js';

/**
 * The tenant registry (core.tenants, no row-level security: every request resolves its tenant
 * there). Run these in `Database.withoutTenant`. Tenant 0, the system tenant, is outside the
 * administration surface: never listed, and every lookup, update or deactivation of it is a 404.
 */

export interface Tenant {
  id: number;
  code: string;
  name: string;
  description: string | null;
  active: boolean;
  createdAt: Date;
  updatedAt: Date;
}

export interface TenantInput {
  code: string;
  name: string;
  description?: string | null;
}

export interface TenantPatch {
  name?: string;
  description?: string | null;
}

/** The system tenant: the platform itself, as which no caller acts. */
export const SYSTEM_TENANT = 0;

const COLUMNS = 'id, code, name, description, active, created_at as "createdAt", updated_at as "updatedAt"';

/** Active tenants, system tenant excluded, by id. */
export async function listTenants(tx: Tx): Promise<Tenant[]> {
  const { rows } = await tx.query<Tenant>(`select ${COLUMNS} from core.tenants where active and id <> $1 order by id`, [SYSTEM_TENANT]);
  return rows;
}

/** One tenant, active or not; 404 when unknown (or the system tenant). */
export async function getTenant(tx: Tx, id: number, lock = false): Promise<Tenant> {
  const { rows } = await tx.query<Tenant>(`select ${COLUMNS} from core.tenants where id = $1 and id <> $2${lock ? ' for update' : ''}`, [id, SYSTEM_TENANT]);
  if (!rows[0]) throw new NotFoundError(`tenant ${id} not found`);
  return rows[0];
}

/**
 * The tenant of that code, active or not (`svc-hub run --tenant`, the operator's tenant label).
 * The system tenant's code (`system`) names no tenant here, as its id does everywhere else: nothing
 * may run or apply as tenant 0.
 */
export async function tenantByCode(tx: Tx, code: string): Promise<{ id: number; active: boolean } | undefined> {
  const { rows } = await tx.query<{ id: number; active: boolean }>('select id, active from core.tenants where code = $1 and id <> $2', [code, SYSTEM_TENANT]);
  return rows[0] ? { id: Number(rows[0].id), active: rows[0].active } : undefined;
}

function checkTenantCode(code: string): string {
  if (!TENANT_CODE.test(code)) {
    throw new ValidationError(
      'code must be 1 to 63 lower-case letters, digits or dashes, starting and ending with a letter or digit',
      'code',
      'for example acme or acme-eu-2',
    );
  }
  return code;
}

/** 409 on a code already taken (by an active or a deactivated tenant: codes are never reused). */
export async function createTenant(tx: Tx, input: TenantInput): Promise<Tenant> {
  checkTenantCode(input.code);
  requireText(input.name, 'name');
  try {
    const { rows } = await tx.query<Tenant>(`insert into core.tenants (code, name, description) values ($1, $2, $3) returning ${COLUMNS}`, [
      input.code,
      input.name,
      optionalText(input.description) ?? null,
    ]);
    return rows[0]!;
  } catch (err) {
    if (isUniqueViolation(err, 'tenants_code_key')) throw new ConflictError(`tenant code ${input.code} is already taken`, 'code');
    throw err;
  }
}

/** Present fields only; a deactivated tenant cannot be changed (409). */
export async function updateTenant(tx: Tx, id: number, patch: TenantPatch): Promise<Tenant> {
  const current = await getTenant(tx, id, true);
  if (!current.active) throw new ConflictError(`tenant ${id} is deactivated`);
  if (patch.name !== undefined) requireText(patch.name, 'name');
  const set = assignments({ name: patch.name, description: optionalText(patch.description) }, { name: 'name', description: 'description' }, 2);
  if (!set.sql.length) return current;
  const { rows } = await tx.query<Tenant>(`update core.tenants set ${set.sql.join(', ')}, updated_at = now() where id = $1 returning ${COLUMNS}`, [id, ...set.values]);
  return rows[0]!;
}

/**
 * Soft delete: `active = false`, the row and everything of the tenant stay. Deactivating a
 * deactivated tenant changes nothing. Returns whether the state changed (callers then drop the
 * authentication cache, so the tenant's next call is refused).
 */
export async function deactivateTenant(tx: Tx, id: number): Promise<boolean> {
  const current = await getTenant(tx, id, true);
  if (!current.active) return false;
  await tx.query('update core.tenants set active = false, updated_at = now() where id = $1', [id]);
  return true;
}
