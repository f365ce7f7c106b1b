import { NoTenantError } from '../errors.js';

/** The four roles of spec 1, matched literally: no role implies another. */
export const ROLES = ['svc_user', 'svc_admin', 'svc_integrator', 'svc_superadmin'] as const;
export type Role = (typeof ROLES)[number];

/** Who is calling, after authentication; the tenant is the one every statement runs as. */
export interface Principal {
  readonly via: 'token' | 'dev-bypass';
  readonly issuer?: string;
  readonly subject?: string;
  readonly roles: ReadonlySet<string>;
  /** The tenant the caller belongs to (token claim or X-Tenant-ID). */
  readonly homeTenantId?: number;
  /** The tenant the call acts as: the home tenant, or the impersonated one. */
  readonly tenantId?: number;
  readonly impersonating: boolean;
  /** The hub user (provisioned just in time for tokens; X-User-ID in the dev bypass). */
  readonly userId?: string;
  readonly login?: string;
  /**
   * When the credential stops being valid (ms since the epoch): the token's `exp` plus the clock
   * tolerance, the moment the verifier starts refusing it. A call that outlives it (an event stream)
   * ends there. Undefined under the dev bypass.
   */
  readonly validUntil?: number;
}

export function hasRole(principal: Principal, role: string): boolean {
  return principal.roles.has(role);
}

/**
 * A role gate: every entry must hold; an entry that is a list holds when any of its roles does.
 * `['svc_integrator', ['svc_admin', 'svc_superadmin']]` reads "svc_integrator and (svc_admin or svc_superadmin)".
 */
export type RoleGate = ReadonlyArray<Role | ReadonlyArray<Role>>;

export function satisfies(principal: Pick<Principal, 'roles'>, gate: RoleGate): boolean {
  return gate.every((entry) => (typeof entry === 'string' ? principal.roles.has(entry) : entry.some((r) => principal.roles.has(r))));
}

/** "svc_integrator and (svc_admin or svc_superadmin)", for the OpenAPI document. */
export function describeGate(gate: RoleGate): string {
  return gate.map((entry) => (typeof entry === 'string' ? entry : `(${entry.join(' or ')})`)).join(' and ');
}

/** The tenant a call acts as (the token's, or the impersonated one); 401 `no tenant in security context` without one. */
export function callerTenant(principal: Principal | undefined): number {
  if (principal?.tenantId === undefined) throw new NoTenantError();
  return principal.tenantId;
}

/**
 * The actor the Kubernetes operator records for its own writes (`updated_by` of the objects it
 * applies): an object with no owner record last applied by it is one an operator from before owner
 * records applied, which a resource of its name adopts (docs/kubernetes.md, "Ownership and conflicts").
 */
export const OPERATOR_ACTOR = 'operator';

/**
 * Who did it, as events and the audit record it: the hub user's login, else its id or subject. A
 * caller whose login is the operator's actor is recorded as `operator#<subject>`: recorded as
 * `operator`, an object it applied over HTTP would pass for one the operator applied, and a resource
 * of its name would adopt it (overwrite it, and delete it when deleted) instead of being a Conflict.
 */
export function actor(principal: Principal | undefined): string {
  const who = principal?.login ?? principal?.userId ?? principal?.subject ?? 'unknown';
  return who === OPERATOR_ACTOR ? `${who}#${principal?.subject ?? principal?.userId}` : who;
}
