import type { Context, Next } from 'koa';
import { type AuditRecorder, type AuditSubject, RequestAudit } from '../../src/audit/recorder.js';
import { actor, type Principal } from '../../src/auth/principal.js';
import { runWithCommitHook } from '../../src/db/database.js';
import { isDatabaseUnavailable } from '../../src/db/unavailable.js';
import type { RouteDecl } from '../route.js';
import { errorStatus } from './errors.js';
import type { AreaServices } from '../../src/runtime/services.js';

const MUTATING = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

export function audited(decl: RouteDecl): boolean {
  if (decl.audit === false || decl.auth === 'public') return false;
  return decl.audit === 'egress' || MUTATING.has(decl.method);
}

/**
 * Mounted in front of an audited route: the call runs with its RequestAudit as the commit hook of
 * every transaction it opens (the entry commits with the call's first write), and the entry is
 * completed (outcome, status) before the response is sent, so it is in the database when the
 * caller sees the answer.
 */
export function auditCall(services: AreaServices, decl: RouteDecl) {
  return async (ctx: Context, next: Next): Promise<void> => {
    const call = new RequestAudit((final) => subject(decl, ctx, final));
    ctx.state.audit = call;
    let status: number;
    try {
      await runWithCommitHook(call, next);
      status = (ctx.state.auditStatus as number | undefined) ?? ctx.status;
    } catch (err) {
      status = (ctx.state.auditStatus as number | undefined) ?? errorStatus(err);
      // With the database unreachable the entry goes to the recorder's retries at once: waiting for
      // a connection again would double the caller's wait for its 503.
      await call.finish(services.db, services.audit, status, { reachable: !isDatabaseUnavailable(err) });
      throw err;
    }
    // A route that answers a database outage itself (the event stream) marks it: no wait for a connection.
    await call.finish(services.db, services.audit, status, { reachable: ctx.state.databaseUnreachable !== true });
  };
}

/** The path, or what a handler set in `ctx.state.auditTarget` (a download adds its rows, bytes and SHA-256). */
function auditTarget(ctx: Context): string {
  return typeof ctx.state.auditTarget === 'string' ? ctx.state.auditTarget : ctx.path;
}

/** Who called what; before the end of the call, undefined until authentication has run. */
function subject(decl: RouteDecl, ctx: Context, final: boolean): AuditSubject | undefined {
  const principal = ctx.state.principal as Principal | undefined;
  if (!principal && !final) return undefined;
  return {
    tenantId: principal?.tenantId ?? 0,
    actor: principal ? actor(principal) : 'anonymous',
    action: `${decl.method} ${decl.path}`,
    target: auditTarget(ctx),
    requestId: ctx.state.requestId as string | undefined,
    homeTenantId: principal?.homeTenantId,
    impersonating: principal?.impersonating ?? false,
    anonymous: !principal,
  };
}

/**
 * How an audited call ended (who, tenant, action, target, outcome, at). Behind auditCall the
 * status is handed to it, which writes the entry before the response; alone, the entry is buffered.
 */
export function recordCall(recorder: AuditRecorder, decl: RouteDecl, ctx: Context, status: number): void {
  if (ctx.state.audit instanceof RequestAudit) {
    ctx.state.auditStatus = status;
    return;
  }
  recorder.record({ ...subject(decl, ctx, true)!, outcome: status < 400 ? 'success' : 'failure', status, at: new Date() });
}
