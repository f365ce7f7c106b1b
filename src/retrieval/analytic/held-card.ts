import { heldTables } from '../../connectors/target/writers.js';
import type { Tx } from '../../db/database.js';
import { loadEntity } from '../../entities/store.js';
import type { SchemaCard } from './schema-card.js';

/**
 * What of a scope's schema card a scope-bound caller (`granted`: their scopes; undefined: unbound,
 * the whole card) may see and query. A card lists the tables the scope's connectors write and the
 * entities declaring the scope, but a table's rows belong to the scopes of every connector writing
 * it (src/connectors/target/writers.ts): a table another domain's connector writes too, and an
 * entity over such a table, are left out. An entity that no longer exists is kept (the query's
 * guard names it). In the caller's tenant transaction.
 */
export async function readableCard(tx: Tx, card: SchemaCard, granted: readonly string[] | undefined): Promise<SchemaCard> {
  if (granted === undefined) return card;
  const tablesOf = new Map<string, string[]>();
  for (const relation of card.relations) {
    if (relation.entity === undefined) tablesOf.set(relation.name, [relation.name]);
    else tablesOf.set(relation.name, (await loadEntity(tx, relation.entity))?.sources.map((s) => s.table) ?? []);
  }
  const held = await heldTables(tx, { bound: true, granted: [...granted], defaultScope: '' }, [...new Set([...tablesOf.values()].flat())]);
  return { ...card, relations: card.relations.filter((r) => tablesOf.get(r.name)!.every((table) => held.has(table))) };
}
