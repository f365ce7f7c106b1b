import { AsyncLocalStorage } from 'node:async_hooks';

/** What the current request or background unit of work is about; every log line carries it. */
export interface WorkContext {
  requestId?: string;
  tenantId?: string;
  userId?: string;
  job?: string;
}

const storage = new AsyncLocalStorage<WorkContext>();

export function currentContext(): WorkContext | undefined {
  return storage.getStore();
}

/** Runs fn with ctx merged over the surrounding context. */
export function runWithContext<T>(ctx: WorkContext, fn: () => T): T {
  return storage.run({ ...storage.getStore(), ...ctx }, fn);
}

/** Sets fields on the current context (for example the tenant, once authentication has resolved it). */
export function annotateContext(fields: WorkContext): void {
  const store = storage.getStore();
  if (store) Object.assign(store, fields);
}
