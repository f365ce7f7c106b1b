import { type Caller, scopeAccess } from '../admin/scope-access.js';
import type { Database, TenantId, Tx } from '../db/database.js';
import type { Page, PageRequest } from '../db/keyset.js';
import { NotFoundError, ScopeNotGranted } from '../errors.js';
import { takeObjectTurn } from '../manifests/tenant-cap.js';
import { dormantWorkflow } from '../events/scoped-families.js';
import type { EventWriter } from '../events/outbox.js';
import { listWorkflows } from '../workflows/store.js';
import { ackInbox, type InboxItem, inboxItemType, listInbox } from './inbox.js';
import { type ApplyResult, applyProcess, deleteProcess, getProcess, listProcesses, type ProcessDetail, type ProcessRecord } from './store.js';

/**
 * Processes and the decision inbox (docs/processes.md): each method takes the tenant and opens its
 * own transaction in it (row-level security).
 */
export interface ProcessServices {
  apply(tenantId: TenantId, manifest: unknown, actor: string): Promise<ApplyResult>;
  list(tenantId: TenantId): Promise<ProcessRecord[]>;
  /** Case-insensitive name; 404 when unknown. */
  get(tenantId: TenantId, name: string): Promise<ProcessDetail>;
  /** Case-insensitive name; 404 when unknown. */
  remove(tenantId: TenantId, name: string): Promise<void>;
  /**
   * A scope-bound caller (`caller`: docs/admin.md, "Scopes") reaches a workflow's dormancy decision
   * (`decision.dormant.<workflow>`) only when they hold every scope of the workflow as stored now
   * (src/workflows/store.ts, scopesOf; a deleted workflow's is no one's); other decisions are not split by scope.
   */
  inbox: {
    /** A page of the inbox, newest first. */
    list(tenantId: TenantId, caller: Caller, page: PageRequest, opts: { acked?: boolean }): Promise<Page<InboxItem[]>>;
    /** 404 `decision not found` for an unknown id or another tenant's; 403 `scope not granted` for another domain's dormancy decision. */
    ack(tenantId: TenantId, caller: Caller, id: number, by: string): Promise<InboxItem>;
  };
}

/** The workflows a scope-bound caller holds every scope of; undefined for an unbound caller. */
async function heldWorkflows(tx: Tx, caller: Caller): Promise<string[] | undefined> {
  const access = await scopeAccess(tx, caller);
  return access.bound ? (await listWorkflows(tx, access.granted)).map((w) => w.name) : undefined;
}

export function createProcessServices(deps: { db: Database; events: EventWriter }): ProcessServices {
  const { db, events } = deps;
  return {
    apply: (t, manifest, actor) => db.withTenant(t, (tx) => applyProcess(tx, manifest, { actor })),
    list: (t) => db.withTenant(t, (tx) => listProcesses(tx)),
    get: async (t, name) => {
      const found = await db.withTenant(t, (tx) => getProcess(tx, name));
      if (!found) throw new NotFoundError(`process ${name.toLowerCase()} not found`);
      return found;
    },
    remove: async (t, name) => {
      const deleted = await db.withTenant(t, async (tx) => {
        // The object's turn first (takeObjectTurn): before its row, which the delete locks, and its owner record, which it deletes.
        await takeObjectTurn(tx, 'processes', name);
        return deleteProcess(tx, name);
      });
      if (!deleted) throw new NotFoundError(`process ${name.toLowerCase()} not found`);
    },
    inbox: {
      list: (t, caller, page, opts) => db.withTenant(t, async (tx) => listInbox(tx, page, { ...opts, workflows: await heldWorkflows(tx, caller) })),
      ack: async (t, caller, id, by) => {
        const item =
          Number.isSafeInteger(id) && id > 0
            ? await db.withTenant(t, async (tx) => {
                const held = await heldWorkflows(tx, caller);
                const workflow = held && dormantWorkflow((await inboxItemType(tx, id)) ?? '');
                if (workflow !== undefined && !held?.includes(workflow)) throw new ScopeNotGranted();
                return ackInbox(tx, events, id, by);
              })
            : undefined;
        if (!item) throw new NotFoundError('decision not found');
        return item;
      },
    },
  };
}
