import type { Database, TenantId } from '../db/database.js';
import { NotFoundError } from '../errors.js';
import type { EventWriter } from '../events/outbox.js';
import { type ApplyResult, applyWorkflow, deleteWorkflow, getWorkflow, listWorkflows, type WorkflowDetail, type WorkflowRecord } from './store.js';
import { type SweepResult, sweepWorkflows } from './sweep.js';

/**
 * The workflow area (docs/workflows.md): each method takes the tenant and opens its own
 * transaction in it (row-level security). The functions beneath (store.ts, sweep.ts) take a `Tx`
 * or, for the sweep across tenants, the database.
 */
export interface WorkflowServices {
  apply(tenantId: TenantId, manifest: unknown, actor: string): Promise<ApplyResult>;
  list(tenantId: TenantId): Promise<WorkflowRecord[]>;
  /** Case-insensitive name; 404 when unknown. */
  get(tenantId: TenantId, name: string): Promise<WorkflowDetail>;
  /** Case-insensitive name; 404 when unknown. */
  remove(tenantId: TenantId, name: string): Promise<void>;
  /**
   * One dormancy sweep over every tenant's workflows (the leader's clock runs it); it ends early,
   * after the fetch in hand, once `going` answers false (leadership lost, the process stopping).
   */
  sweep(going?: () => boolean): Promise<SweepResult>;
}

export function createWorkflowServices(deps: { db: Database; events: EventWriter; sweepBatch: number }): WorkflowServices {
  const { db } = deps;
  return {
    apply: (t, manifest, actor) => db.withTenant(t, (tx) => applyWorkflow(tx, manifest, { actor })),
    list: (t) => db.withTenant(t, (tx) => listWorkflows(tx)),
    get: async (t, name) => {
      const found = await db.withTenant(t, (tx) => getWorkflow(tx, name));
      if (!found) throw new NotFoundError(`workflow ${name.toLowerCase()} not found`);
      return found;
    },
    remove: async (t, name) => {
      if (!(await db.withTenant(t, (tx) => deleteWorkflow(tx, name)))) throw new NotFoundError(`workflow ${name.toLowerCase()} not found`);
    },
    sweep: (going) => sweepWorkflows(db, deps.events, { batch: deps.sweepBatch, going }),
  };
}
