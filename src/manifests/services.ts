import type { AdminServices } from '../admin/services.js';
import type { Database, TenantId } from '../db/database.js';
import { canonical } from './canonical.js';
import type { ManifestKind } from './kinds.js';

/**
 * What a manifest source other than the HTTP API (the Kubernetes operator) does with the hub: each
 * method takes the tenant and opens its own transaction, and runs the kind's handler, the very
 * functions of the kind's HTTP paths. The operator holds no database handle and no SQL.
 */
export interface ManifestServices {
  /** The tenant of that code, active or not (the admin area owns tenants). */
  tenantByCode(code: string): Promise<{ id: number; active: boolean } | undefined>;
  /**
   * Applies `manifest` unless the hub already holds exactly it (so a resync writes nothing and an
   * edit made over HTTP is reverted). Throws the kind's ValidationError naming the field.
   */
  applyIfChanged(kind: ManifestKind, tenantId: TenantId, name: string, manifest: Record<string, unknown>, actor: string): Promise<{ changed: boolean; created: boolean; schedule: string | null; warnings: string[] }>;
  /** Deletes by name with what it owns in the hub; false when there was none. */
  remove(kind: ManifestKind, tenantId: TenantId, name: string): Promise<boolean>;
  /** The latest run of kinds that have runs. */
  lastRun(kind: ManifestKind, tenantId: TenantId, name: string): Promise<{ id: string; status: string; endedAt: string | null } | undefined>;
  /**
   * Across tenants: the database's clock, and the (kind, tenant code, name) of resources whose runs
   * started or ended after `since(now)`.
   */
  runsChanged(kinds: readonly ManifestKind[], since: (now: Date) => Date): Promise<{ now: Date; changed: Array<{ kind: ManifestKind; tenant: string; name: string }> }>;
}

export function createManifestServices(deps: { db: Database; admin: AdminServices }): ManifestServices {
  const { db, admin } = deps;
  return {
    tenantByCode: (code) => admin.tenants.byCode(code),
    applyIfChanged: (kind, tenantId, name, manifest, actor) =>
      db.withTenant(tenantId, async (tx) => {
        const stored = await kind.handler.stored(tx, name);
        if (stored && canonical(stored.manifest) === canonical(manifest)) return { changed: false, created: false, schedule: stored.schedule, warnings: [] };
        const result = await kind.handler.apply(tx, manifest, actor);
        return { changed: true, created: result.created, schedule: result.schedule, warnings: result.warnings };
      }),
    remove: (kind, tenantId, name) => db.withTenant(tenantId, (tx) => kind.handler.remove(tx, name)),
    lastRun: async (kind, tenantId, name) => (kind.handler.lastRun ? db.withTenant(tenantId, (tx) => kind.handler.lastRun!(tx, name)) : undefined),
    runsChanged: (kinds, since) =>
      db.crossTenant('operator-runs', async (tx) => {
        const now = (await tx.query<{ now: Date }>('select now() as now')).rows[0]!.now;
        const changed: Array<{ kind: ManifestKind; tenant: string; name: string }> = [];
        for (const kind of kinds) {
          if (!kind.handler.runsSince) continue;
          for (const run of await kind.handler.runsSince(tx, since(now))) changed.push({ kind, ...run });
        }
        return { now, changed };
      }),
  };
}
