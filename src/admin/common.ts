import type { Tx } from '../db/database.js';
import { ValidationError } from '../errors.js';
import type { EventWriter } from '../events/outbox.js';

/**
 * Shared pieces of tenancy administration. Service functions in src/admin know nothing of HTTP:
 * they take a transaction (`Database.withTenant` for tenant data, `Database.withoutTenant` for the
 * tenant registry), throw the hub's errors (src/errors.ts), and write events through the caller's
 * transaction, so a rolled-back change leaves none.
 */

export type { Tx };

/** What the services need of the outbox writer. */
export type Events = Pick<EventWriter, 'emit'>;

/** The unique-violation check the admin services use (defined beside the other database refusals). */
export { isUniqueViolation } from '../validation/database-refusals.js';

/**
 * The `set` list of an update from the fields present in a patch (undefined = leave as is; null
 * clears): `["name = $2", "description = $3"]` and their values, numbered from `firstIndex`.
 */
export function assignments(patch: Record<string, unknown>, columns: Record<string, string>, firstIndex: number): { sql: string[]; values: unknown[] } {
  const sql: string[] = [];
  const values: unknown[] = [];
  for (const [field, column] of Object.entries(columns)) {
    if (patch[field] === undefined) continue;
    values.push(patch[field]);
    sql.push(`${column} = $${firstIndex + values.length - 1}`);
  }
  return { sql, values };
}

/** A required text that is only whitespace is refused with the field named. */
export function requireText(value: string, field: string): string {
  if (!value.trim()) throw new ValidationError(`${field} must not be blank`, field);
  return value;
}

/** Optional text: null and undefined pass, blank is stored as null. */
export function optionalText(value: string | null | undefined): string | null | undefined {
  if (value === undefined || value === null) return value;
  return value.trim() ? value : null;
}

/**
 * Tenant codes: what a Kubernetes label value and a DNS label accept (the operator resolves a
 * resource's tenant from the label `svc.io/tenant: <code>`): 1 to 63 lower-case letters, digits or
 * dashes, starting and ending with a letter or digit.
 */
export const TENANT_CODE = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

/** Organisation codes: 1 to 100 letters, digits, dots, underscores or dashes, starting with a letter or digit. */
export const ORG_CODE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/;
