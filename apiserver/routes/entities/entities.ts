import { actor, callerTenant } from '../../../src/auth/principal.js';
import { COLUMN_TYPES, entityManifestSchema } from '../../../src/entities/manifest/schema.js';
import { type JsonSchema, route, type RouteDecl } from '../../route.js';
import { appliedAnswer, applyResponses, appliedSchema, MANIFEST_TYPES, manifestBodies } from '../manifest-routes.js';
import { errorBody, refusals, scopeRefusals } from '../schemas.js';
import { SLUG_MAX_LENGTH } from '../../../src/manifests/checking.js';

/**
 * Entity manifests (docs/entities.md): apply, list, read, delete. The
 * manifest is checked by src/entities/manifest (one JSON Schema plus the rules spanning fields) and
 * against the tenant's tables by the store, not by the router: an error answers `{error, field}`
 * with the field as a path (`spec.sources[1].columns.email`).
 */

const manifest = manifestBodies(
  'An Entity manifest (`apiVersion: apps.svc.io/v1`, `kind: Entity`, `metadata.name`, `spec`: `scope`, `key`, `columns`, `sources`) as YAML or JSON; see docs/entities.md.',
  entityManifestSchema,
);

const timestamp: JsonSchema = { type: 'string', format: 'date-time' };
const strings: JsonSchema = { type: 'array', items: { type: 'string' } };

const column: JsonSchema = {
  type: 'object',
  required: ['name', 'type', 'label', 'description', 'examples', 'values'],
  properties: {
    name: { type: 'string' },
    type: { type: 'string', enum: [...COLUMN_TYPES] },
    label: { type: ['string', 'null'] },
    description: { type: ['string', 'null'] },
    examples: strings,
    values: { type: ['array', 'null'], items: { type: 'string' }, description: 'the declared value domain; null when none is declared' },
  },
};

const recordProperties: Record<string, JsonSchema> = {
  id: { type: 'string', format: 'uuid' },
  name: { type: 'string', description: 'metadata.name, lower-case' },
  scopes: strings,
  key: { type: 'string', description: 'the canonical key column' },
  columns: { type: 'array', items: column, description: 'the canonical columns, in declared order' },
  sources: {
    type: 'array',
    description: 'in declared order, which is the order of precedence',
    items: { type: 'object', required: ['table', 'key'], properties: { table: { type: 'string' }, key: { type: 'string' } } },
  },
  createdAt: timestamp,
  updatedAt: timestamp,
};
const recordRequired = ['id', 'name', 'scopes', 'key', 'columns', 'sources', 'createdAt', 'updatedAt'];

const entityRecord: JsonSchema = { type: 'object', required: recordRequired, properties: recordProperties };
const entityDetail: JsonSchema = {
  type: 'object',
  required: [...recordRequired, 'manifest', 'spec'],
  properties: {
    ...recordProperties,
    manifest: { type: 'object', description: 'the manifest as applied' },
    spec: { type: 'object', description: 'the normalised definition: scopes as a list, the sources with their column mappings' },
  },
};

const applied = appliedSchema({ withId: true });

const nameParam = { type: 'object', required: ['name'], properties: { name: { type: 'string', maxLength: SLUG_MAX_LENGTH, description: 'metadata.name of the entity (case-insensitive)' } } } as const;

const notFound = { 404: { description: 'Unknown entity', schema: errorBody } };

export const entityRoutes: RouteDecl[] = [
  route({
    method: 'POST', path: '/api/entities/apply', operationId: 'applyEntity', summary: 'Apply an Entity manifest (create or update by name)', tags: ['Entities'],
    auth: ['svc_integrator', 'svc_admin'],
    description: 'YAML or JSON. 201 for a new name, 200 for an update. A source table that does not exist yet is a warning; a mapped column an existing table lacks is a 400.',
    bodyTypes: MANIFEST_TYPES, ...manifest,
    responses: applyResponses(applied, scopeRefusals(false, 'every scope of the manifest and of the entity it replaces, and of every connector writing its source tables (which must be written already)')),
    handler: async ({ services, principal, body, ctx }) => {
      const result = await services.entities.apply(callerTenant(principal), principal, body, actor(principal));
      return appliedAnswer(ctx, result, { name: result.entity.name, id: result.entity.id, warnings: result.warnings });
    },
  }),
  route({
    method: 'GET', path: '/api/entities', operationId: 'listEntities', summary: 'Entities of the caller\'s tenant with their canonical columns, by name', tags: ['Entities'],
    auth: ['svc_integrator'],
    responses: { 200: { description: 'Entities', schema: { type: 'array', items: entityRecord } }, ...refusals(false) },
    handler: ({ services, principal }) => services.entities.list(callerTenant(principal)),
  }),
  route({
    method: 'GET', path: '/api/entities/{name}', operationId: 'getEntity', summary: 'One entity with its stored manifest', tags: ['Entities'],
    auth: ['svc_integrator'], params: nameParam,
    responses: { 200: { description: 'The entity', schema: entityDetail }, ...notFound, ...refusals(false) },
    handler: ({ services, principal, params }) => services.entities.get(callerTenant(principal), params.name),
  }),
  route({
    method: 'DELETE', path: '/api/entities/{name}', operationId: 'deleteEntity', summary: 'Delete an entity', tags: ['Entities'],
    auth: ['svc_integrator', 'svc_admin'], params: nameParam,
    description: 'The ext.* tables it reads and their rows stay. The name can be applied again.',
    responses: { 204: { description: 'Deleted' }, ...notFound, ...scopeRefusals(false, 'every scope of the entity') },
    handler: async ({ services, principal, params, ctx }) => {
      await services.entities.remove(callerTenant(principal), principal, params.name);
      ctx.status = 204;
      return undefined;
    },
  }),
];
