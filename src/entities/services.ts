import { type Caller, removeHeld, requireEvery, scopeAccess } from '../admin/scope-access.js';
import { requireTableWriters } from '../connectors/target/writers.js';
import type { Database, TenantId } from '../db/database.js';
import { NotFoundError } from '../errors.js';
import { takeObjectTurn } from '../manifests/tenant-cap.js';
import { type ApplyResult, applyEntity, deleteEntity, type EntityDef, type EntityDetail, type EntityRecord, getEntity, listEntities, loadEntity, lockedEntityScopes } from './store.js';

/**
 * The entity area (docs/entities.md): each method takes the tenant and opens its own transaction
 * in it (row-level security). The functions beneath (store.ts, relation.ts) take a `Tx`. The writes
 * take the caller too: a scope-bound caller (src/admin/scope-access.ts) applies or deletes only an
 * entity every scope of which they hold, as stored and as applied, over tables already written only
 * by connectors whose scopes they hold (src/connectors/target/writers.ts); 403 `scope not granted`
 * otherwise, nothing written.
 */
export interface EntityServices {
  apply(tenantId: TenantId, caller: Caller, manifest: unknown, actor: string): Promise<ApplyResult>;
  list(tenantId: TenantId): Promise<EntityRecord[]>;
  /** Case-insensitive name; 404 when unknown. */
  get(tenantId: TenantId, name: string): Promise<EntityDetail>;
  /** Case-insensitive name; 404 when unknown. */
  remove(tenantId: TenantId, caller: Caller, name: string): Promise<void>;
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
    apply: (t, caller, manifest, actor) =>
      db.withTenant(t, async (tx) => {
        const result = await applyEntity(tx, manifest, { actor });
        // Checked after the apply, in its transaction (a refusal rolls it back): the entity it replaced is read there, locked.
        const access = await scopeAccess(tx, caller);
        requireEvery(access, result.entity.scopes, result.replacedScopes ?? result.entity.scopes);
        await requireTableWriters(tx, access, result.entity.sources.map((s) => s.table), { written: true });
        return result;
      }),
    list: (t) => db.withTenant(t, (tx) => listEntities(tx)),
    get: async (t, name) => found(await db.withTenant(t, (tx) => getEntity(tx, name)), name),
    remove: async (t, caller, name) => {
      const deleted = await db.withTenant(t, async (tx) => {
        // The object's turn first (takeObjectTurn): before its row, which the delete locks, and its owner record, which it deletes.
        await takeObjectTurn(tx, 'entities', name);
        return removeHeld(tx, caller, () => lockedEntityScopes(tx, name), () => deleteEntity(tx, name));
      });
      if (!deleted) throw new NotFoundError(`entity ${name.toLowerCase()} not found`);
    },
    load: (t, name) => db.withTenant(t, (tx) => loadEntity(tx, name)),
  };
}
