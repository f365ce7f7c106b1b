import { AsyncLocalStorage } from 'node:async_hooks';
import { type Context as OtelContext, context as otelContext } from '@opentelemetry/api';

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
 * The async-local stores a queued job must find as they were when it was offered (`inCurrentContext`):
 * this module's logging store, and those other modules register with `carryIntoQueuedJobs` (the
 * request's audit commit hook, src/db/database.ts). Registered here rather than imported, so that
 * observability depends on none of its users.
 */
const carried: Array<AsyncLocalStorage<unknown>> = [storage as AsyncLocalStorage<unknown>];

/** Registers a store that `inCurrentContext` takes at offer time and restores when the job runs. */
export function carryIntoQueuedJobs<S>(store: AsyncLocalStorage<S>): void {
  const own = store as AsyncLocalStorage<unknown>;
  if (!carried.includes(own)) carried.push(own);
}

/**
 * `fn`, to be called later in the context current now (or outside any, if none is): a job queued
 * for a slot starts when another job ends, and must not run in that job's context (its tenant, its
 * request and that request's audit hook, the secrets its lines are masked for, the span its own
 * spans belong to). Every registered store (`carryIntoQueuedJobs`) and OpenTelemetry's active
 * context are taken now and restored then, a store that was empty now emptied then: a closure of
 * nested `run`s, not an async resource (`AsyncResource.bind` and `AsyncLocalStorage.snapshot` cost
 * microseconds per call on Node 20). An empty store is restored with `run(undefined, …)`, not
 * `exit`: on Node 20 a `run` of the same store inside an `exit` brings the outer store back for
 * the rest of the job (a job offered outside any context that starts a tenant's unit of work would
 * then carry, after it, the tenant of the job whose end started it).
 */
export function inCurrentContext<T, A = void>(fn: (arg: A) => T): (arg: A) => T {
  const traced = otelContext.active();
  // One closure per call, the stores' values in an array and entered by `enter` (a function of the
  // module, given its arguments through `run`): not a closure per store, each of which costs the
  // source checkout's transform (tsx) a property definition, on every job of every pool. The one
  // argument is handed on (a pool's job gets its `done`; a callback its result).
  const values = carried.map((store) => store.getStore());
  return (arg: A) => enter(values.length - 1, values, traced, fn, arg);
}

/**
 * Runs `fn(arg)` inside the stores `carried[0..k]` set to `values[0..k]` (the outermost the last one
 * registered, as the closures of earlier code nested them), then OpenTelemetry's `traced` context.
 * Only the stores registered when the values were taken (`values.length`): `carried` only grows.
 */
function enter<T, A>(k: number, values: unknown[], traced: OtelContext, fn: (arg: A) => T, arg: A): T {
  // Entered only when it is not the active one then (never with tracing off: the no-op manager's
  // context is always the root one): entering the active context again changes nothing.
  if (k < 0) return otelContext.active() === traced ? fn(arg) : otelContext.with(traced, fn, undefined, arg);
  return carried[k]!.run(values[k], enter, k - 1, values, traced, fn, arg) as T;
}

/** Runs fn (with `args`: no closure needed to hand it its arguments) with ctx merged over the surrounding context. */
export function runWithContext<T, A extends unknown[] = []>(ctx: WorkContext, fn: (...args: A) => T, ...args: A): T {
  const parent = storage.getStore();
  return storage.run({ ...parent, ...ctx, secrets: ctx.secrets ?? parent?.secrets ?? new Set() }, fn, ...args);
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
