import { type ScopeAccess, holdsEvery } from '../../admin/scope-access.js';
import type { Tx } from '../../db/database.js';
import { ScopeNotGranted } from '../../errors.js';

/**
 * Who writes the tenant's ext tables, by scope: the connectors whose endpoints target a table (as
 * applied) or have written it (connectors.ext_tables), and CSV sources with no manifest, which have
 * no scope. A table's rows belong to the scopes of its writers: a scope-bound caller may read them
 * through an entity, or write over them, only when they hold every writer's scopes.
 */

/** The scopes of each writer of each table (`except`: leave that connector out), in the caller's tenant transaction. */
async function writersOf(tx: Tx, tables: readonly string[], except?: string): Promise<Map<string, string[][]>> {
  const { rows } = await tx.query<{ table: string; scopes: string[] }>(
    `select w.table_name as "table", coalesce(c.scopes, '{}') as scopes
       from (select connector_id, table_name from connectors.ext_tables where table_name = any($1::text[])
             union select connector_id, target_table from connectors.endpoints where target_table = any($1::text[])) w
       left join connectors.connectors c on c.id = w.connector_id
      where w.connector_id is distinct from $2::uuid`,
    [[...new Set(tables)], except ?? null],
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
    const of = writers.get(table) ?? [];
    if ((options.written && of.length === 0) || !of.every((scopes) => holdsEvery(access, scopes))) throw new ScopeNotGranted();
  }
}

/**
 * Of these tables, those a scope-bound caller may read: every scope of every writer of the table is
 * theirs, and it has a writer. Every table for an unbound caller (nothing is read).
 */
export async function heldTables(tx: Tx, access: ScopeAccess, tables: readonly string[]): Promise<Set<string>> {
  if (!access.bound) return new Set(tables);
  const writers = await writersOf(tx, tables);
  return new Set(tables.filter((table) => (writers.get(table) ?? []).length > 0 && writers.get(table)!.every((scopes) => holdsEvery(access, scopes))));
}
