import { AsyncLocalStorage } from 'node:async_hooks';

/** What the current request or background unit of work is about; every log line carries it. */
export interface WorkContext {
  requestId?: string;
  tenantId?: string;
  userId?: string;
  job?: string;
  /**
   * Credentials the hub holds for this unit of work on a tenant's behalf (logger.ts,
   * registerOperationSecret): scrubbed from the lines this work writes, and from no other. Shared
   * with the contexts it starts.
   */
  secrets?: Set<string>;
}

const storage = new AsyncLocalStorage<WorkContext>();

export function currentContext(): WorkContext | undefined {
  return storage.getStore();
}

/** Runs fn with ctx merged over the surrounding context. */
export function runWithContext<T>(ctx: WorkContext, fn: () => T): T {
  const parent = storage.getStore();
  return storage.run({ ...parent, ...ctx, secrets: ctx.secrets ?? parent?.secrets ?? new Set() }, fn);
}

/** Sets fields on the current context (for example the tenant, once authentication has resolved it). */
export function annotateContext(fields: WorkContext): void {
  const store = storage.getStore();
  if (store) Object.assign(store, fields);
}
