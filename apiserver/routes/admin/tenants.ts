import { ConflictError } from '../../../src/errors.js';
import { route, type RouteDecl } from '../../route.js';
import { created, errors, idParam, noContent, tenantRecord, tenantRefusals } from './admin-schemas.js';
import { refusals } from '../schemas.js';

/**
 * Tenant administration (svc_superadmin). The tenant registry has no row-level security; these run
 * as the application role with no tenant bound. Tenant 0 (system) is outside this surface.
 */

const tenantParams = { type: 'object', required: ['id'], properties: { id: { ...idParam('Tenant id (the system tenant 0 is a 404)'), minimum: 0 } } } as const;

const codeRule = '1 to 63 lower-case letters, digits or dashes, starting and ending with a letter or digit (usable as a Kubernetes label value)';

export const tenantRoutes: RouteDecl[] = [
  route({
    method: 'GET', path: '/api/tenants', operationId: 'listTenants', summary: 'Active tenants', tags: ['Tenants'],
    auth: ['svc_superadmin'],
    description: 'Deactivated tenants and the system tenant 0 are omitted.',
    responses: { 200: { description: 'Active tenants, by id', schema: { type: 'array', items: tenantRecord } }, ...tenantRefusals },
    handler: ({ services }) => services.admin.tenants.list(),
  }),
  route({
    method: 'GET', path: '/api/tenants/{id}', operationId: 'getTenant', summary: 'One tenant', tags: ['Tenants'],
    auth: ['svc_superadmin'],
    description: 'A deactivated tenant still answers, with `active: false`.',
    params: tenantParams,
    responses: { 200: { description: 'The tenant', schema: tenantRecord }, ...errors({ 400: 'Invalid id', 404: 'Unknown tenant' }), ...tenantRefusals },
    handler: ({ services, params }) => services.admin.tenants.get(params.id),
  }),
  route({
    method: 'POST', path: '/api/tenants', operationId: 'createTenant', summary: 'Create a tenant', tags: ['Tenants'],
    auth: ['svc_superadmin'],
    description: `\`code\`: ${codeRule}. Codes stay taken after a tenant is deactivated.`,
    body: {
      type: 'object', required: ['code', 'name'], additionalProperties: false,
      properties: {
        code: { type: 'string', description: codeRule, examples: ['acme-eu'] },
        name: { type: 'string', minLength: 1, maxLength: 200 },
        description: { type: ['string', 'null'], maxLength: 2000 },
      },
    },
    responses: {
      201: { description: 'The new tenant', schema: tenantRecord },
      ...errors({ 400: 'Invalid body (`field` names it)', 409: 'The code is taken (`field`: `code`)' }),
      ...tenantRefusals,
    },
    handler: async ({ services, body, ctx }) => created(ctx, await services.admin.tenants.create(body)),
  }),
  route({
    method: 'PUT', path: '/api/tenants/{id}', operationId: 'updateTenant', summary: 'Update a tenant\'s name or description', tags: ['Tenants'],
    auth: ['svc_superadmin'],
    description: 'Only the fields present are applied; `description: null` clears it. The code never changes.',
    params: tenantParams,
    body: {
      type: 'object', additionalProperties: false, minProperties: 1,
      properties: { name: { type: 'string', minLength: 1, maxLength: 200 }, description: { type: ['string', 'null'], maxLength: 2000 } },
    },
    responses: {
      200: { description: 'The updated tenant', schema: tenantRecord },
      ...errors({ 400: 'Invalid body (`field` names it)', 404: 'Unknown tenant', 409: 'The tenant is deactivated' }),
      ...tenantRefusals,
    },
    handler: ({ services, params, body }) => services.admin.tenants.update(params.id, body),
  }),
  route({
    method: 'DELETE', path: '/api/tenants/{id}', operationId: 'deactivateTenant', summary: 'Deactivate a tenant (soft delete)', tags: ['Tenants'],
    auth: ['svc_superadmin'],
    description:
      'Sets `active: false`; the tenant and its data stay. Its callers are refused from their next call (403 `tenant inactive`; by another hub process within 10 seconds). Repeating it changes nothing. ' +
      'The caller\'s own tenant (the one the token belongs to) is a 409: deactivation is final, and the caller would shut themselves out.',
    params: tenantParams,
    responses: { 204: { description: 'Deactivated' }, ...errors({ 400: 'Invalid id', 404: 'Unknown tenant', 409: 'The caller\'s own tenant' }), ...tenantRefusals },
    handler: async ({ services, principal, params, ctx }) => {
      if (principal?.homeTenantId === params.id) {
        throw new ConflictError('you cannot deactivate your own tenant; a svc_superadmin of another tenant can');
      }
      await services.admin.tenants.deactivate(params.id);
      return noContent(ctx);
    },
  }),
  route({
    method: 'GET', path: '/api/platform/admin/tenants', operationId: 'platformListTenants', summary: 'Tenant listing for platform tools', tags: ['Platform', 'Tenants'],
    auth: ['svc_integrator', 'svc_superadmin'],
    description: 'The same active tenants as GET /api/tenants.',
    responses: { 200: { description: 'Active tenants, by id', schema: { type: 'array', items: tenantRecord } }, ...refusals(true) },
    handler: ({ services }) => services.admin.tenants.list(),
  }),
];
