import { Forbidden, NoTenantError, NotFoundError } from '../../../src/errors.js';
import { type JsonSchema, route, type RouteDecl } from '../../route.js';
import { errorBody, refusals } from '../schemas.js';
import { actor, callerTenant } from '../../../src/auth/principal.js';
import { SYSTEM_TENANT } from '../../../src/admin/tenants.js';

const hookProperties = {
  id: { type: 'string' },
  module: { type: 'string', description: 'The declaring module' },
  target: { type: 'string', description: 'The handler the hook runs' },
  events: { type: 'array', items: { type: 'string' }, description: 'Exact event types or `prefix.*` patterns' },
  priority: { type: 'integer', description: 'Lower runs first' },
  enabled: { type: 'boolean', description: 'The tenant\'s effective flag: its override, else the declared default' },
};

const hookSchema: JsonSchema = {
  type: 'object',
  required: ['id', 'module', 'target', 'events', 'priority', 'enabled'],
  additionalProperties: false,
  properties: hookProperties,
};

const toggledSchema: JsonSchema = {
  type: 'object',
  required: ['id', 'module', 'target', 'events', 'priority', 'enabled', 'tenantId'],
  additionalProperties: false,
  properties: { ...hookProperties, tenantId: { type: 'integer', description: 'The tenant the override was recorded for' } },
};

export const hookRoutes: RouteDecl[] = [
  route({
    method: 'GET', path: '/api/platform/hooks', operationId: 'listHooks', summary: 'Declared hooks with the tenant\'s effective enabled flag', tags: ['Hooks'],
    auth: ['svc_integrator', 'svc_admin'],
    description: 'In run order (priority, then id). Overrides are read through a cache (`svc.hooks.cache-ttl`, 60 s): a change made through another process shows within that time.',
    responses: { 200: { description: 'Hooks', schema: { type: 'array', items: hookSchema } }, ...refusals(true) },
    handler: ({ services, principal }) => services.hooks.list(callerTenant(principal)),
  }),
  route({
    method: 'POST', path: '/api/platform/hooks/{hookId}/toggle', operationId: 'toggleHook', summary: 'Record a tenant\'s enabled override of a hook', tags: ['Hooks'],
    auth: ['svc_integrator', ['svc_admin', 'svc_superadmin']],
    description:
      'Without `enabled` the tenant\'s effective flag is flipped; with `enabled=true|false` it is set. `tenantId` defaults to the caller\'s tenant. ' +
      'An svc_admin may act for its own tenant only (another `tenantId`: empty-body 403); an svc_superadmin for any tenant. ' +
      'Answers the hook with its new effective state for that tenant.',
    params: { type: 'object', required: ['hookId'], properties: { hookId: { type: 'string', minLength: 1, maxLength: 200 } } },
    query: {
      type: 'object',
      properties: {
        tenantId: { type: 'integer', minimum: 0, maximum: Number.MAX_SAFE_INTEGER, description: 'The tenant whose override is recorded (default: the caller\'s)' },
        enabled: { type: 'boolean', description: 'Set the flag instead of flipping it' },
      },
    },
    responses: {
      200: { description: 'The hook with its new effective state for the tenant', schema: toggledSchema },
      400: { description: 'Invalid query `{error, field}`', schema: errorBody },
      404: { description: 'No hook of that id, or no such tenant', schema: errorBody },
      ...refusals(true),
    },
    handler: async ({ services, principal, params, query }) => {
      const own = principal?.tenantId;
      const tenantId = query.tenantId ?? own;
      if (tenantId === undefined) throw new NoTenantError();
      if (tenantId !== own && !principal!.roles.has('svc_superadmin')) throw new Forbidden('hook toggle for another tenant');
      const hookId = params.hookId;
      if (!services.hooks.find(hookId)) throw new NotFoundError(`hook ${hookId} not found`);
      // The system tenant is a row of the registry but no tenant anyone acts for (docs/authentication.md).
      if (tenantId !== own && (tenantId === SYSTEM_TENANT || !(await services.directory.tenant(tenantId)))) throw new NotFoundError(`tenant ${tenantId} not found`);
      const hook = await services.hooks.toggle(tenantId, hookId, query.enabled, actor(principal));
      return { ...hook, tenantId };
    },
  }),
];
