import type { Tx } from '../db/database.js';
import { type EntityDef, loadEntity } from '../entities/store.js';
import type { EntityShape } from './manifest/validate.js';

/** What an export needs of an entity: its name, scopes and canonical column names. */
export function shapeOf(entity: EntityDef): EntityShape {
  return { name: entity.name, scopes: entity.scopes, columns: entity.columns.map((c) => c.name) };
}

/** The shape of the entity of that name (case-insensitive), in the caller's tenant transaction. */
export async function entityShape(tx: Tx, name: string): Promise<EntityShape | undefined> {
  const entity = await loadEntity(tx, name);
  return entity && shapeOf(entity);
}
