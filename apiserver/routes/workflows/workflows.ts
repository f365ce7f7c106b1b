import { actor, callerTenant } from '../../../src/auth/principal.js';
import { workflowManifestSchema } from '../../../src/workflows/manifest/schema.js';
import { type JsonSchema, route, type RouteDecl } from '../../route.js';
import { appliedAnswer, applyResponses, appliedSchema, MANIFEST_TYPES, manifestBodies } from '../manifest-routes.js';
import { errorBody, refusals, scopeRefusals } from '../schemas.js';
import { SLUG_MAX_LENGTH } from '../../../src/manifests/checking.js';

/**
 * Workflow manifests (docs/workflows.md): apply and delete (svc_admin), list and read under
 * /api/platform (its floor svc_integrator, plus svc_admin or svc_superadmin). The manifest is checked
 * by src/workflows/manifest and against the tenant's entities by the store, not by the router: an
 * error answers `{error, field}` with the field as a path (`spec.transitions[1].to`).
 */

const manifest = manifestBodies(
  'A Workflow manifest (`apiVersion: apps.svc.io/v1`, `kind: Workflow`, `metadata.name`, `spec`: `entity`, `scope`, `stateColumn`, `states`, `transitions`, `dormancy`) as YAML or JSON; see docs/workflows.md.',
  workflowManifestSchema,
);

const strings: JsonSchema = { type: 'array', items: { type: 'string' } };
const timestamp: JsonSchema = { type: 'string', format: 'date-time' };

const recordProperties: Record<string, JsonSchema> = {
  name: { type: 'string', description: 'metadata.name, lower-case' },
  entity: { type: 'string', description: 'the entity, as stored (lower-case)' },
  scope: { type: ['string', 'null'], description: 'spec.scope, else the entity\'s first scope' },
  stateColumn: { type: 'string' },
  states: strings,
  transitions: { type: 'array', items: { type: 'object', required: ['from', 'to'], properties: { from: { type: 'string' }, to: { type: 'string' } } } },
  dormancy: {
    type: ['object', 'null'],
    required: ['after', 'states'],
    properties: { after: { type: 'string', description: 'as written' }, states: strings },
    description: 'null when the manifest declares none',
  },
  createdAt: timestamp,
  updatedAt: timestamp,
};
const recordRequired = ['name', 'entity', 'scope', 'stateColumn', 'states', 'transitions', 'dormancy', 'createdAt', 'updatedAt'];
const workflowRecord: JsonSchema = { type: 'object', required: recordRequired, properties: recordProperties };
const workflowDetail: JsonSchema = {
  type: 'object',
  required: [...recordRequired, 'manifest'],
  properties: { ...recordProperties, manifest: { type: 'object', description: 'the manifest as applied' } },
};

const applied = appliedSchema({ withId: false });

const nameParam = { type: 'object', required: ['name'], properties: { name: { type: 'string', maxLength: SLUG_MAX_LENGTH, description: 'metadata.name of the workflow (case-insensitive)' } } } as const;
const notFound = { 404: { description: 'Unknown workflow', schema: errorBody } };

export const workflowRoutes: RouteDecl[] = [
  route({
    method: 'POST', path: '/api/workflows/apply', operationId: 'applyWorkflow', summary: 'Apply a Workflow manifest (create or update by name)', tags: ['Workflows'],
    auth: ['svc_admin'],
    description:
      'YAML or JSON. 201 for a new name, 200 for an update. `spec.entity` must be an applied Entity and `spec.stateColumn` one of its canonical columns. ' +
      'Re-applying keeps the records\' dormancy spells unless the entity or the state column changes. The lifecycle is indexed as retrieval corpus `workflow:<name>`.',
    bodyTypes: MANIFEST_TYPES, ...manifest,
    responses: applyResponses(applied, scopeRefusals(false, "the workflow's scope and every scope of its entity, and those of the workflow it replaces")),
    handler: async ({ services, principal, body, ctx }) => {
      const result = await services.workflows.apply(callerTenant(principal), principal, body, actor(principal));
      return appliedAnswer(ctx, result, result);
    },
  }),
  route({
    method: 'DELETE', path: '/api/workflows/{name}', operationId: 'deleteWorkflow', summary: 'Delete a workflow, its dormancy spells and its lifecycle corpus', tags: ['Workflows'],
    auth: ['svc_admin'], params: nameParam,
    responses: { 204: { description: 'Deleted' }, ...notFound, ...scopeRefusals(false, "the workflow's scope and every scope of its entity") },
    handler: async ({ services, principal, params, ctx }) => {
      await services.workflows.remove(callerTenant(principal), principal, params.name);
      ctx.status = 204;
      return undefined;
    },
  }),
  route({
    method: 'GET', path: '/api/platform/workflows', operationId: 'listWorkflows', summary: 'Declared workflows of the caller\'s tenant, by name', tags: ['Workflows'],
    auth: ['svc_integrator', ['svc_admin', 'svc_superadmin']],
    description: 'A scope-bound caller lists only the workflows whose scope and whose entity\'s every scope they hold.',
    responses: { 200: { description: 'Workflows', schema: { type: 'array', items: workflowRecord } }, ...refusals(true) },
    handler: ({ services, principal }) => services.workflows.list(callerTenant(principal), principal),
  }),
  route({
    method: 'GET', path: '/api/platform/workflows/{name}', operationId: 'getWorkflow', summary: 'One workflow with its manifest as applied', tags: ['Workflows'],
    auth: ['svc_integrator', ['svc_admin', 'svc_superadmin']], params: nameParam,
    responses: { 200: { description: 'The workflow', schema: workflowDetail }, ...notFound, ...scopeRefusals(true, "the workflow's scope and every scope of its entity") },
    handler: ({ services, principal, params }) => services.workflows.get(callerTenant(principal), principal, params.name),
  }),
];
