import { ValidationError } from '../errors.js';
import { takeKeptPlaces } from '../manifests/tenant-cap.js';
import type { Tx } from './common.js';
import { requireActiveUser } from './users.js';

/**
 * The scopes a user is bound to (core.user_scopes, row-level security: run in
 * `Database.withTenant`). A user with a non-empty list is scope-bound: outside those scopes the
 * retrieval and search API refuses them (403 `scope not granted`, spec 1 Authentication 9). An
 * empty list unbinds the user. Replaced scopes keep their rows, switched off.
 */

/**
 * Scope grants (a user and a scope) one tenant may have, revoked ones included (their rows stay): a
 * replaced list keeps its rows, so each list of new names made more rows, without bound.
 */
export const MAX_USER_SCOPE_GRANTS_PER_TENANT = 100_000;

/** The active scopes of a user, sorted; empty for an unbound or unknown user. */
export async function scopesOf(tx: Tx, userId: number): Promise<string[]> {
  const { rows } = await tx.query<{ scope: string }>('select scope from core.user_scopes where user_id = $1 and active order by scope', [userId]);
  return rows.map((r) => r.scope);
}

/** Whether a user is scope-bound (has at least one active scope). */
export async function isScopeBound(tx: Tx, userId: number): Promise<boolean> {
  const { rowCount } = await tx.query('select 1 from core.user_scopes where user_id = $1 and active limit 1', [userId]);
  return (rowCount ?? 0) > 0;
}

/**
 * Replaces a user's scopes with `scopes` (duplicates collapse) and returns the stored list, sorted.
 * Each scope must be non-blank and free of whitespace (400 naming `scopes[i]`). 404 for an unknown
 * user, 409 for a deactivated one.
 */
export async function setScopes(tx: Tx, userId: number, scopes: string[]): Promise<string[]> {
  if (tx.tenantId === undefined) throw new Error('scopes need a tenant transaction (Database.withTenant)');
  scopes.forEach((scope, i) => {
    if (!scope || /\s/.test(scope)) throw new ValidationError(`scopes[${i}] must be a non-blank scope name without whitespace`, `scopes[${i}]`);
  });
  await requireActiveUser(tx, userId, true);
  const wanted = [...new Set(scopes)];
  await takeKeptPlaces(
    tx,
    { table: 'core.user_scopes', plural: 'user scope grants', max: MAX_USER_SCOPE_GRANTS_PER_TENANT, advice: 'a revoked one counts too (its row stays) and can be granted again' },
    async () => {
      const { rows } = await tx.query<{ n: number }>('select count(*)::int as n from unnest($2::text[]) s where not exists (select 1 from core.user_scopes where user_id = $1 and scope = s)', [userId, wanted]);
      return rows[0]!.n;
    },
  );
  await tx.query('update core.user_scopes set active = false, revoked_at = now() where user_id = $1 and active and not (scope = any($2::text[]))', [
    userId,
    wanted,
  ]);
  if (wanted.length) {
    await tx.query(
      `insert into core.user_scopes (tenant_id, user_id, scope) select $1, $2, unnest($3::text[])
       on conflict (tenant_id, user_id, scope) do update
         set active = true, revoked_at = null,
             granted_at = case when core.user_scopes.active then core.user_scopes.granted_at else now() end`,
      [tx.tenantId, userId, wanted],
    );
  }
  return scopesOf(tx, userId);
}
