import type { Tx } from '../../db/database.js';
import type { ScopeAccess } from '../../admin/scope-access.js';
import { NotFoundError, ScopeNotGranted } from '../../errors.js';
import { heldTables } from '../target/writers.js';
import { extTableName, tableRegclassSql, tenantTableSql, tenantTableText } from '../target/ddl.js';
import { ExactNumber, jsonText, parseJsonExact } from '../engine/exact-json.js';

/**
 * Follows a citation's row hash to its raw source row in the current tenant: every ext.* table the
 * tenant's connectors write is searched, in the tenant's own schema (row-level security and the
 * tenant_id filter are the second and third walls). A table's rows belong to the scopes of its
 * writers (target/writers.ts): a scope-bound caller (`access`) not holding them is refused the row
 * (403 `scope not granted`).
 */
export async function rowByHash(tx: Tx, hash: string, access: ScopeAccess): Promise<Record<string, string>> {
  if (!/^[0-9a-f]{64}$/.test(hash)) throw new NotFoundError('row not found');
  const { rows } = await tx.query<{ table_name: string }>('select distinct table_name from connectors.ext_tables order by table_name');
  // A scope-bound caller reads a table's rows only when they hold every scope of its writers: those
  // tables are searched first, and a row found only in another's is a 403.
  const held = await heldTables(tx, access, rows.map((r) => r.table_name));
  const tables = [...rows.filter((r) => held.has(r.table_name)), ...rows.filter((r) => !held.has(r.table_name))];
  for (const { table_name } of tables) {
    const name = extTableName(table_name);
    if (!name) continue;
    const exists = await tx.query<{ t: string | null }>(`select ${tableRegclassSql('$1')} as t`, [tenantTableText(tx.tenantId, table_name)]);
    if (!exists.rows[0]?.t) continue;
    // As text, read as the engine reads a source (integers beyond ±(2^53 − 1) exactly).
    const found = await tx.query<{ data: string }>(`select data::text as data from ${tenantTableSql(tx.tenantId, table_name)} where tenant_id = core.current_tenant() and row_hash = $1 limit 1`, [hash]);
    if (!found.rows[0]) continue;
    if (!held.has(table_name)) throw new ScopeNotGranted();
    return flatten(parseJsonExact(found.rows[0].data));
  }
  throw new NotFoundError('row not found');
}

/**
 * A flat object of strings: nested objects become dotted keys (`address.city`), arrays keep their
 * JSON text, null becomes the empty string, everything else its text form.
 */
export function flatten(value: unknown, prefix = '', out: Record<string, string> = {}): Record<string, string> {
  if (value !== null && typeof value === 'object' && !Array.isArray(value) && !(value instanceof ExactNumber)) {
    for (const [key, child] of Object.entries(value as Record<string, unknown>)) flatten(child, prefix ? `${prefix}.${key}` : key, out);
    return out;
  }
  const key = prefix || 'value';
  if (value === null || value === undefined) out[key] = '';
  else if (Array.isArray(value)) out[key] = jsonText(value);
  else out[key] = String(value);
  return out;
}
