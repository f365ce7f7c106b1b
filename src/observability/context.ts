import { AsyncLocalStorage } from 'node:async_hooks';
import { context as otelContext } from '@opentelemetry/api';

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

/**
 * `fn`, to be called later in the context current now (or outside any, if none is): a job queued
 * for a slot starts when another job ends, and must not run in that job's context (its tenant, its
 * request, the secrets its lines are masked for, the span its own spans belong to). The logging
 * store and OpenTelemetry's active context are taken now and restored then: a closure, not an async
 * resource (`AsyncResource.bind` costs microseconds per call on Node 20).
 */
export function inCurrentContext<T>(fn: () => T): () => T {
  const store = storage.getStore();
  const traced = otelContext.active();
  const within = () => otelContext.with(traced, fn);
  return store === undefined ? () => storage.exit(within) : () => storage.run(store, within);
}

/** Runs fn with ctx merged over the surrounding context. */
export function runWithContext<T>(ctx: WorkContext, fn: () => T): T {
  const parent = storage.getStore();
  return storage.run({ ...parent, ...ctx, secrets: ctx.secrets ?? parent?.secrets ?? new Set() }, fn);
}

/**
 * Runs fn as one tenant's unit of work: its lines carry that tenant, and the credentials it
 * registers are scrubbed from its own lines only. Inside a context of the same tenant (a request,
 * a run it started) the unit shares that context's credentials; inside shared background work (a
 * job serving every tenant, another tenant's unit) it gets a set of its own, so that one tenant's
 * lines never carry another's id and one tenant's secret text never blanks out another's lines.
 */
export function runForTenant<T>(tenantId: number | string, fn: () => T): T {
  const parent = storage.getStore();
  const tenant = String(tenantId);
  const secrets = parent?.tenantId === tenant && parent.secrets ? parent.secrets : new Set<string>();
  return storage.run({ ...parent, tenantId: tenant, secrets }, fn);
}

/** Sets fields on the current context (for example the tenant, once authentication has resolved it). */
export function annotateContext(fields: WorkContext): void {
  const store = storage.getStore();
  if (store) Object.assign(store, fields);
}
