import { type Caller, removeHeld, requireEvery, scopeAccess } from '../admin/scope-access.js';
import type { Database, TenantId } from '../db/database.js';
import { NotFoundError } from '../errors.js';
import { takeObjectTurn } from '../manifests/tenant-cap.js';
import type { EventWriter } from '../events/outbox.js';
import { type ApplyResult, applyWorkflow, deleteWorkflow, getWorkflow, listWorkflows, lockedWorkflowScopes, type WorkflowDetail, type WorkflowRecord } from './store.js';
import { type SweepResult, sweepWorkflows } from './sweep.js';

/**
 * The workflow area (docs/workflows.md): each method takes the tenant and opens its own
 * transaction in it (row-level security). The functions beneath (store.ts, sweep.ts) take a `Tx`
 * or, for the sweep across tenants, the database.
 */
export interface WorkflowServices {
  /**
   * A scope-bound caller (`caller`: docs/admin.md, "Scopes") applies only a workflow every scope of
   * which they hold, as applied and as stored before (store.ts, scopesOf): 403 `scope not granted`.
   */
  apply(tenantId: TenantId, caller: Caller, manifest: unknown, actor: string): Promise<ApplyResult>;
  /** The workflows a scope-bound caller holds every scope of (store.ts, scopesOf); every one to an unbound caller. */
  list(tenantId: TenantId, caller: Caller): Promise<WorkflowRecord[]>;
  /** Case-insensitive name; 404 when unknown; 403 `scope not granted` to a scope-bound caller not holding every scope of it. */
  get(tenantId: TenantId, caller: Caller, name: string): Promise<WorkflowDetail>;
  /** Case-insensitive name; 404 when unknown; 403 `scope not granted` to a scope-bound caller not holding every scope of it as stored. */
  remove(tenantId: TenantId, caller: Caller, name: string): Promise<void>;
  /**
   * One dormancy sweep over every tenant's workflows (the leader's clock runs it); it ends early,
   * after the fetch in hand, once `going` answers false (leadership lost, the process stopping).
   */
  sweep(going?: () => boolean): Promise<SweepResult>;
}

export function createWorkflowServices(deps: { db: Database; events: EventWriter; sweepBatch: number; sweepTurn: number; sweepEvery: number }): WorkflowServices {
  const { db } = deps;
  return {
    apply: (t, caller, manifest, actor) =>
      db.withTenant(t, async (tx) => {
        const result = await applyWorkflow(tx, manifest, { actor });
        // Checked after the apply, in its transaction (a refusal rolls it back), as for connectors and entities.
        requireEvery(await scopeAccess(tx, caller), result.scopes, result.replacedScopes ?? result.scopes);
        return result;
      }),
    list: (t, caller) =>
      db.withTenant(t, async (tx) => {
        const access = await scopeAccess(tx, caller);
        return listWorkflows(tx, access.bound ? access.granted : undefined);
      }),
    get: (t, caller, name) =>
      db.withTenant(t, async (tx) => {
        const found = await getWorkflow(tx, name);
        if (!found) throw new NotFoundError(`workflow ${name.toLowerCase()} not found`);
        const { scopes, ...workflow } = found;
        requireEvery(await scopeAccess(tx, caller), scopes);
        return workflow;
      }),
    remove: async (t, caller, name) => {
      const deleted = await db.withTenant(t, async (tx) => {
        // The object's turn first (takeObjectTurn): before its row, which the delete locks, and its owner record, which it deletes.
        await takeObjectTurn(tx, 'workflows', name);
        return removeHeld(tx, caller, () => lockedWorkflowScopes(tx, name), () => deleteWorkflow(tx, name));
      });
      if (!deleted) throw new NotFoundError(`workflow ${name.toLowerCase()} not found`);
    },
    sweep: (going) => sweepWorkflows(db, deps.events, { batch: deps.sweepBatch, turn: deps.sweepTurn, every: deps.sweepEvery, going }),
  };
}
