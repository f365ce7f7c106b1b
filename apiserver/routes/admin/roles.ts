import { route, type RouteDecl } from '../../route.js';
import { created, errors, noContent, orgRecord, roleRecord, tenantParams, tenantRefusals } from './admin-schemas.js';

/**
 * Tenant roles (svc_admin): the roles, who holds them, and the organisations they give access to.
 * Removing an assignment or a grant switches it off; the row stays. Assign, remove, grant and
 * revoke are idempotent.
 */

const USER_ROLE = { uid: 'User id', roleId: 'Role id' };
const ROLE_ORG = { roleId: 'Role id', orgId: 'Organisation id' };

export const roleRoutes: RouteDecl[] = [
  route({
    method: 'GET', path: '/api/tenants/{tid}/roles', operationId: 'listRoles', summary: 'Roles of the tenant', tags: ['Roles'],
    auth: ['svc_admin'],
    params: tenantParams(),
    responses: { 200: { description: 'Roles, by id', schema: { type: 'array', items: roleRecord } }, ...tenantRefusals },
    handler: ({ services, principal }) => services.admin.roles.list(principal?.tenantId),
  }),
  route({
    method: 'POST', path: '/api/tenants/{tid}/roles', operationId: 'createRole', summary: 'Create a role', tags: ['Roles'],
    auth: ['svc_admin'],
    params: tenantParams(),
    body: {
      type: 'object', required: ['name'], additionalProperties: false,
      properties: { name: { type: 'string', minLength: 1, maxLength: 200 }, description: { type: ['string', 'null'], maxLength: 2000 } },
    },
    responses: {
      201: { description: 'The new role', schema: roleRecord },
      ...errors({ 400: 'Invalid body (`field` names it)', 409: 'A role of that name exists in the tenant; or the tenant has 1,000 roles (`this tenant has 1000 roles, the most it may have (1000): …`)' }),
      ...tenantRefusals,
    },
    handler: async ({ services, principal, body, ctx }) => created(ctx, await services.admin.roles.create(principal?.tenantId, body)),
  }),
  route({
    method: 'GET', path: '/api/tenants/{tid}/roles/{roleId}', operationId: 'getRole', summary: 'One role', tags: ['Roles'],
    auth: ['svc_admin'],
    params: tenantParams({ roleId: 'Role id' }),
    responses: { 200: { description: 'The role', schema: roleRecord }, ...errors({ 400: 'Invalid id', 404: 'Unknown, or of another tenant' }), ...tenantRefusals },
    handler: ({ services, principal, params }) => services.admin.roles.get(principal?.tenantId, params.roleId),
  }),
  route({
    method: 'GET', path: '/api/tenants/{tid}/users/{uid}/roles', operationId: 'listUserRoles', summary: 'Roles a user holds', tags: ['Roles'],
    auth: ['svc_admin'],
    params: tenantParams({ uid: 'User id' }),
    responses: { 200: { description: 'Roles, by id', schema: { type: 'array', items: roleRecord } }, ...errors({ 400: 'Invalid id', 404: 'Unknown user' }), ...tenantRefusals },
    handler: ({ services, principal, params }) => services.admin.roles.ofUser(principal?.tenantId, params.uid),
  }),
  route({
    method: 'PUT', path: '/api/tenants/{tid}/users/{uid}/roles/{roleId}', operationId: 'assignRole', summary: 'Give a role to a user', tags: ['Roles'],
    auth: ['svc_admin'],
    description: 'Idempotent.',
    params: tenantParams(USER_ROLE),
    responses: {
      204: { description: 'The user holds the role' },
      ...errors({ 400: 'Invalid id', 404: 'User or role unknown in the tenant', 409: 'The user is deactivated; or the user never had the role and the tenant has 100,000 role assignments, removed ones included (`this tenant has 100000 role assignments, …`)' }),
      ...tenantRefusals,
    },
    handler: async ({ services, principal, params, ctx }) => {
      await services.admin.roles.assign(principal?.tenantId, params.uid, params.roleId);
      return noContent(ctx);
    },
  }),
  route({
    method: 'DELETE', path: '/api/tenants/{tid}/users/{uid}/roles/{roleId}', operationId: 'removeRole', summary: 'Take a role from a user', tags: ['Roles'],
    auth: ['svc_admin'],
    description: 'The assignment is switched off, not erased. Idempotent.',
    params: tenantParams(USER_ROLE),
    responses: { 204: { description: 'The user no longer holds the role' }, ...errors({ 400: 'Invalid id', 404: 'User or role unknown in the tenant' }), ...tenantRefusals },
    handler: async ({ services, principal, params, ctx }) => {
      await services.admin.roles.remove(principal?.tenantId, params.uid, params.roleId);
      return noContent(ctx);
    },
  }),
  route({
    method: 'GET', path: '/api/tenants/{tid}/roles/{roleId}/orgs', operationId: 'listRoleOrgs', summary: 'Organisations a role gives access to', tags: ['Roles'],
    auth: ['svc_admin'],
    description: 'Granted organisations, by id; an organisation archived since the grant shows `active: false`.',
    params: tenantParams({ roleId: 'Role id' }),
    responses: { 200: { description: 'Organisations', schema: { type: 'array', items: orgRecord } }, ...errors({ 400: 'Invalid id', 404: 'Unknown role' }), ...tenantRefusals },
    handler: ({ services, principal, params }) => services.admin.roles.orgs(principal?.tenantId, params.roleId),
  }),
  route({
    method: 'PUT', path: '/api/tenants/{tid}/roles/{roleId}/orgs/{orgId}', operationId: 'grantRoleOrg', summary: 'Grant a role access to an organisation', tags: ['Roles'],
    auth: ['svc_admin'],
    description: 'Idempotent.',
    params: tenantParams(ROLE_ORG),
    responses: {
      204: { description: 'Granted' },
      ...errors({ 400: 'Invalid id', 404: 'Role or organisation unknown in the tenant', 409: 'The organisation is archived; or the role never had it and the tenant has 100,000 organisation grants, revoked ones included (`this tenant has 100000 organisation grants, …`)' }),
      ...tenantRefusals,
    },
    handler: async ({ services, principal, params, ctx }) => {
      await services.admin.roles.grantOrg(principal?.tenantId, params.roleId, params.orgId);
      return noContent(ctx);
    },
  }),
  route({
    method: 'DELETE', path: '/api/tenants/{tid}/roles/{roleId}/orgs/{orgId}', operationId: 'revokeRoleOrg', summary: 'Revoke a role\'s access to an organisation', tags: ['Roles'],
    auth: ['svc_admin'],
    description: 'The grant is switched off, not erased. Idempotent.',
    params: tenantParams(ROLE_ORG),
    responses: { 204: { description: 'Revoked' }, ...errors({ 400: 'Invalid id', 404: 'Role or organisation unknown in the tenant' }), ...tenantRefusals },
    handler: async ({ services, principal, params, ctx }) => {
      await services.admin.roles.revokeOrg(principal?.tenantId, params.roleId, params.orgId);
      return noContent(ctx);
    },
  }),
];
