import type { Database, TenantId } from '../db/database.js';
import type { Page, PageRequest } from '../db/keyset.js';
import { NotFoundError } from '../errors.js';
import type { EventWriter } from '../events/outbox.js';
import { ackInbox, type InboxItem, listInbox } from './inbox.js';
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
  inbox: {
    /** A page of the inbox, newest first. */
    list(tenantId: TenantId, page: PageRequest, opts: { acked?: boolean }): Promise<Page<InboxItem[]>>;
    /** 404 `decision not found` for an unknown id or another tenant's. */
    ack(tenantId: TenantId, id: number, by: string): Promise<InboxItem>;
  };
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
      if (!(await db.withTenant(t, (tx) => deleteProcess(tx, name)))) throw new NotFoundError(`process ${name.toLowerCase()} not found`);
    },
    inbox: {
      list: (t, page, opts) => db.withTenant(t, (tx) => listInbox(tx, page, opts)),
      ack: async (t, id, by) => {
        const item = Number.isSafeInteger(id) && id > 0 ? await db.withTenant(t, (tx) => ackInbox(tx, events, id, by)) : undefined;
        if (!item) throw new NotFoundError('decision not found');
        return item;
      },
    },
  };
}
