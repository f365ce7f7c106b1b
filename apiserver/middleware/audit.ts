import type { Context } from 'koa';
import type { AuditRecorder } from '../../src/audit/recorder.js';
import { actor, type Principal } from '../../src/auth/principal.js';
import type { RouteDecl } from '../route.js';

const MUTATING = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

export function audited(decl: RouteDecl): boolean {
  if (decl.audit === false || decl.auth === 'public') return false;
  return decl.audit === 'egress' || MUTATING.has(decl.method);
}

/** Records one audited call after it ended (who, tenant, action, target, outcome, at). */
export function recordCall(recorder: AuditRecorder, decl: RouteDecl, ctx: Context, status: number): void {
  const principal = ctx.state.principal as Principal | undefined;
  recorder.record({
    tenantId: principal?.tenantId ?? 0,
    actor: principal ? actor(principal) : 'anonymous',
    action: `${decl.method} ${decl.path}`,
    target: ctx.path,
    outcome: status < 400 ? 'success' : 'failure',
    status,
    requestId: ctx.state.requestId as string | undefined,
    at: new Date(),
  });
}
