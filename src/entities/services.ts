import type { Database, TenantId } from '../db/database.js';
import { NotFoundError } from '../errors.js';
import { type ApplyResult, applyEntity, deleteEntity, type EntityDef, type EntityDetail, type EntityRecord, getEntity, listEntities, loadEntity } from './store.js';

/**
 * The entity area (docs/entities.md): each method takes the tenant and opens its own transaction
 * in it (row-level security). The functions beneath (store.ts, relation.ts) take a `Tx`.
 */
export interface EntityServices {
  apply(tenantId: TenantId, manifest: unknown, actor: string): Promise<ApplyResult>;
  list(tenantId: TenantId): Promise<EntityRecord[]>;
  /** Case-insensitive name; 404 when unknown. */
  get(tenantId: TenantId, name: string): Promise<EntityDetail>;
  /** Case-insensitive name; 404 when unknown. */
  remove(tenantId: TenantId, name: string): Promise<void>;
  /** The stored definition, undefined when unknown. */
  load(tenantId: TenantId, name: string): Promise<EntityDef | undefined>;
}

export function createEntityServices(deps: { db: Database }): EntityServices {
  const { db } = deps;
  const found = <T>(value: T | undefined, name: string): T => {
    if (value === undefined) throw new NotFoundError(`entity ${name.toLowerCase()} not found`);
    return value;
  };
  return {
    apply: (t, manifest, actor) => db.withTenant(t, (tx) => applyEntity(tx, manifest, { actor })),
    list: (t) => db.withTenant(t, (tx) => listEntities(tx)),
    get: async (t, name) => found(await db.withTenant(t, (tx) => getEntity(tx, name)), name),
    remove: async (t, name) => {
      if (!(await db.withTenant(t, (tx) => deleteEntity(tx, name)))) throw new NotFoundError(`entity ${name.toLowerCase()} not found`);
    },
    load: (t, name) => db.withTenant(t, (tx) => loadEntity(tx, name)),
  };
}
