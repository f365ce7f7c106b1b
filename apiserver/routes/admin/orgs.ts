import { DEFAULT_TREE_DEPTH, MAX_TREE_DEPTH } from '../../../src/admin/orgs.js';
import { route, type RouteDecl } from '../../route.js';
import { created, errors, idParam, noContent, orgRecord, orgTreeNode, tenantParams, tenantRefusals } from './admin-schemas.js';

/**
 * Organisations of the caller's tenant (svc_admin), under row-level security: an id of another
 * tenant is a 404 like an unknown one. Changes emit org.* events in the same transaction.
 */

const ORG = { id: 'Organisation id' };
const codeRule = '1 to 100 letters, digits, dots, underscores or dashes, starting with a letter or digit';
const parentId = { type: ['integer', 'null'], minimum: 1, maximum: Number.MAX_SAFE_INTEGER, description: 'An active organisation of the tenant; null or absent: top level' } as const;

export const orgRoutes: RouteDecl[] = [
  route({
    method: 'GET', path: '/api/tenants/{tid}/orgs', operationId: 'listOrgs', summary: 'Active organisations', tags: ['Organisations'],
    auth: ['svc_admin'],
    params: tenantParams(),
    responses: { 200: { description: 'Active organisations, by id', schema: { type: 'array', items: orgRecord } }, ...tenantRefusals },
    handler: ({ services, principal }) => services.admin.orgs.list(principal?.tenantId),
  }),
  // Declared before /orgs/{id} so that `tree` is never read as an id.
  route({
    method: 'GET', path: '/api/tenants/{tid}/orgs/tree', operationId: 'orgTree', summary: 'The organisation tree', tags: ['Organisations'],
    auth: ['svc_admin'],
    description:
      'Always a list of nodes: the top-level organisations, or the one `root`. Each node is an organisation record with ' +
      '`children` (active children by code, nested) and `truncated` (children left out by `depth`). `depth` counts levels: 1 is the starting nodes alone.',
    params: tenantParams(),
    query: {
      type: 'object',
      properties: {
        root: idParam('Start from this active organisation instead of the top level'),
        depth: { type: 'integer', minimum: 1, maximum: MAX_TREE_DEPTH, default: DEFAULT_TREE_DEPTH, description: 'Levels to include' },
      },
    },
    responses: {
      200: { description: 'The tree', schema: { type: 'array', items: orgTreeNode } },
      ...errors({ 400: 'Invalid `root` or `depth`', 404: '`root` is not an active organisation of the tenant' }),
      ...tenantRefusals,
    },
    handler: ({ services, principal, query }) =>
      services.admin.orgs.tree(principal?.tenantId, { root: query.root, depth: query.depth }),
  }),
  route({
    method: 'GET', path: '/api/tenants/{tid}/orgs/{id}', operationId: 'getOrg', summary: 'One organisation', tags: ['Organisations'],
    auth: ['svc_admin'],
    description: 'An archived organisation still answers, with `active: false`.',
    params: tenantParams(ORG),
    responses: { 200: { description: 'The organisation', schema: orgRecord }, ...errors({ 400: 'Invalid id', 404: 'Unknown, or of another tenant' }), ...tenantRefusals },
    handler: ({ services, principal, params }) => services.admin.orgs.get(principal?.tenantId, params.id),
  }),
  route({
    method: 'POST', path: '/api/tenants/{tid}/orgs', operationId: 'createOrg', summary: 'Create an organisation', tags: ['Organisations'],
    auth: ['svc_admin'],
    description: `Emits \`org.created\`. \`code\`: ${codeRule}, unique in the tenant (archived organisations keep theirs).`,
    params: tenantParams(),
    body: {
      type: 'object', required: ['code', 'name'], additionalProperties: false,
      properties: {
        code: { type: 'string', description: codeRule },
        name: { type: 'string', minLength: 1, maxLength: 200 },
        description: { type: ['string', 'null'], maxLength: 2000 },
        parentId,
      },
    },
    responses: {
      201: { description: 'The new organisation', schema: orgRecord },
      ...errors({ 400: 'Invalid body, or `parentId` is not an active organisation of the tenant (`field` names it)', 409: 'The code is taken in the tenant; or the tenant has 10,000 organisations, archived ones included (`this tenant has 10000 organisations, the most it may have (10000): …`)' }),
      ...tenantRefusals,
    },
    handler: async ({ services, principal, body, ctx }) => created(ctx, await services.admin.orgs.create(principal?.tenantId, body)),
  }),
  route({
    method: 'PUT', path: '/api/tenants/{tid}/orgs/{id}', operationId: 'updateOrg', summary: 'Update or move an organisation', tags: ['Organisations'],
    auth: ['svc_admin'],
    description:
      'Only the fields present are applied; `parentId: null` moves it to the top level. A change emits `org.updated`; a new parent also ' +
      '`org.moved` (`newParentId` 0 for the top level). A body that changes nothing emits nothing. A parent that is the organisation itself ' +
      'or one of its descendants is refused.',
    params: tenantParams(ORG),
    body: {
      type: 'object', additionalProperties: false, minProperties: 1,
      properties: { name: { type: 'string', minLength: 1, maxLength: 200 }, description: { type: ['string', 'null'], maxLength: 2000 }, parentId },
    },
    responses: {
      200: { description: 'The updated organisation', schema: orgRecord },
      ...errors({
        400: 'Invalid body; `parentId` unknown, archived, or would make the organisation its own ancestor',
        404: 'Unknown, or of another tenant',
        409: 'The organisation is archived',
      }),
      ...tenantRefusals,
    },
    handler: ({ services, principal, params, body }) => services.admin.orgs.update(principal?.tenantId, params.id, body),
  }),
  route({
    method: 'DELETE', path: '/api/tenants/{tid}/orgs/{id}', operationId: 'archiveOrg', summary: 'Archive an organisation (soft delete)', tags: ['Organisations'],
    auth: ['svc_admin'],
    description: 'Sets `active: false` and emits `org.archived`; the row stays. Repeating it changes and emits nothing. Refused while it has active children.',
    params: tenantParams(ORG),
    responses: {
      204: { description: 'Archived' },
      ...errors({ 400: 'Invalid id', 404: 'Unknown, or of another tenant', 409: 'It has active child organisations' }),
      ...tenantRefusals,
    },
    handler: async ({ services, principal, params, ctx }) => {
      await services.admin.orgs.archive(principal?.tenantId, params.id);
      return noContent(ctx);
    },
  }),
];
