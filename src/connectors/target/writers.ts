import { type ScopeAccess, holdsEvery } from '../../admin/scope-access.js';
import type { Tx } from '../../db/database.js';
import { ScopeNotGranted } from '../../errors.js';

/**
 * Who writes the tenant's ext tables, by scope: the connectors whose endpoints target a table (as
 * applied) or have written it (connectors.ext_tables), and CSV sources with no manifest, which have
 * no scope. A table's rows belong to the scopes of its writers: a scope-bound caller may read them
 * through an entity, or write over them, only when they hold every writer's scopes.
 */

/**
 * The scopes of each writer of each table (`tables` undefined: of every table something writes;
 * `except`: leave that connector out), in the caller's tenant transaction.
 */
async function writersOf(tx: Tx, tables: readonly string[] | undefined, except?: string): Promise<Map<string, string[][]>> {
  const { rows } = await tx.query<{ table: string; scopes: string[] }>(
    `select w.table_name as "table", coalesce(c.scopes, '{}') as scopes
       from (select connector_id, table_name from connectors.ext_tables where $1::text[] is null or table_name = any($1::text[])
             union select connector_id, target_table from connectors.endpoints where target_table is not null and ($1::text[] is null or target_table = any($1::text[]))) w
       left join connectors.connectors c on c.id = w.connector_id
      where w.connector_id is distinct from $2::uuid`,
    [tables === undefined ? null : [...new Set(tables)], except ?? null],
  );
  const writers = new Map<string, string[][]>();
  for (const r of rows) writers.set(r.table, [...(writers.get(r.table) ?? []), r.scopes]);
  return writers;
}

/**
 * 403 `scope not granted` unless a scope-bound caller holds every scope of every writer of each
 * table but `except`. `written`: each table must have a writer already (an entity's sources: a table
 * nothing writes yet could be written later by another domain's connector); otherwise a table nothing
 * writes is the caller's to make (a connector's or a CSV ingest's new target). Nothing is read for an
 * unbound caller.
 */
export async function requireTableWriters(tx: Tx, access: ScopeAccess, tables: readonly string[], options: { except?: string; written?: boolean } = {}): Promise<void> {
  if (!access.bound || tables.length === 0) return;
  const writers = await writersOf(tx, tables, options.except);
  for (const table of tables) {
    if (!writersHeld(access, writers.get(table) ?? [], options.written ?? false)) throw new ScopeNotGranted();
  }
}

/** Whether the caller holds every scope of each of a table's writers (`of`); `written`: it must have one. */
function writersHeld(access: ScopeAccess, of: readonly string[][], written: boolean): boolean {
  return !(written && of.length === 0) && of.every((scopes) => holdsEvery(access, scopes));
}

/**
 * Of these tables (undefined: every table something writes), those a scope-bound caller may read:
 * every scope of every writer of the table is theirs, and it has a writer. Every table named for an
 * unbound caller (nothing is read).
 */
export async function heldTables(tx: Tx, access: ScopeAccess, tables?: readonly string[]): Promise<Set<string>> {
  if (!access.bound && tables !== undefined) return new Set(tables);
  const writers = await writersOf(tx, tables);
  return new Set((tables ?? [...writers.keys()]).filter((table) => access.bound ? writersHeld(access, writers.get(table) ?? [], true) : writers.has(table)));
}
