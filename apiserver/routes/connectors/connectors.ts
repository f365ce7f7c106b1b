import { actor, callerTenant } from '../../../src/auth/principal.js';
import { connectorManifestSchema, ENDPOINT_ID_MAX_LENGTH, NAME_MAX_LENGTH } from '../../../src/connectors/manifest/schema.js';
import { type JsonSchema, route, type RouteDecl } from '../../route.js';
import { appliedAnswer, applyResponses, appliedSchema, MANIFEST_TYPES, manifestBodies, manifestIssue } from '../manifest-routes.js';
import { errorBody, refusals, scopeRefusals } from '../schemas.js';

/**
 * Connector manifests (CONTRACTS.md section 4): apply, validate, list, read, delete, reset a cursor,
 * purge an endpoint. The manifest is checked by src/connectors/manifest (one JSON Schema plus the
 * rules spanning fields), not by the router: a manifest error answers `{error, field}` with the
 * field as a path (`spec.endpoints[2].pagination.kind`), and validate answers every issue at once.
 */

const manifest = manifestBodies(
  'A Connector manifest (`apiVersion: connectors.svc.io/v1`, `kind: Connector`, `metadata.name`, `connector_type: rest-generic` or `soap-generic`, `scopes`, `spec`) as YAML or JSON; see docs/connectors.md.',
  connectorManifestSchema,
);

const timestamp: JsonSchema = { type: 'string', format: 'date-time' };

const endpointSummary: JsonSchema = {
  type: 'object',
  required: ['id', 'uuid', 'enabled', 'kind', 'method', 'path', 'pagination', 'table', 'syncMode', 'watermark', 'watermarkUpdatedAt', 'resumeFrom', 'resumeRunId'],
  properties: {
    id: { type: 'string', description: 'endpoint id from the manifest (what paths accept)' },
    uuid: { type: 'string', format: 'uuid', description: 'stable while the id stays in the manifest; what tables and events carry' },
    enabled: { type: 'boolean' },
    kind: { type: 'string', enum: ['rest', 'graphql'] },
    method: { type: 'string' },
    path: { type: 'string', description: 'for GraphQL: spec.graphql_path' },
    pagination: { type: 'string', description: 'the strategy, after preset expansion' },
    table: { type: 'string' },
    syncMode: { type: 'string', enum: ['full', 'watermark', 'api_cursor'] },
    watermark: { type: ['string', 'null'] },
    watermarkUpdatedAt: { type: ['string', 'null'], format: 'date-time' },
    resumeFrom: {
      type: ['string', 'null'],
      description: 'where the next run starts reading when the last run stopped at the page budget (`offset 20000`, `cursor "abc"`); null: at the first page',
    },
    resumeRunId: { type: ['string', 'null'], format: 'uuid', description: 'the run that stored resumeFrom' },
  },
};

const recordProperties: Record<string, JsonSchema> = {
  id: { type: 'string', format: 'uuid' },
  name: { type: 'string' },
  connectorType: { type: 'string' },
  scopes: { type: 'array', items: { type: 'string' } },
  schedule: { type: ['string', 'null'] },
  endpoints: { type: 'array', items: endpointSummary },
  createdAt: timestamp,
  updatedAt: timestamp,
};
const recordRequired = ['id', 'name', 'connectorType', 'scopes', 'schedule', 'endpoints', 'createdAt', 'updatedAt'];

const connectorRecord: JsonSchema = { type: 'object', required: recordRequired, properties: recordProperties };
const connectorDetail: JsonSchema = {
  type: 'object',
  required: [...recordRequired, 'manifest', 'spec'],
  properties: {
    ...recordProperties,
    manifest: { type: 'object', description: 'the manifest as applied, inline credential values (a dev-profile `token_value`, a literal credential header, a credential in a path query, a well-known key or JWT in a body, GraphQL variables or SOAP text) replaced by `[REDACTED]`' },
    spec: { type: 'object', description: 'the normalised connector the runtime reads: presets expanded, defaults filled, endpoint UUIDs assigned' },
  },
};

const applied = appliedSchema({ withId: true });

/** A connector's name in a path, bounded as the manifest bounds it: a longer one is a 400 naming it, not quoted back in a 404. */
export const connectorNameParam = {
  type: 'object',
  required: ['name'],
  properties: { name: { type: 'string', maxLength: NAME_MAX_LENGTH, description: 'metadata.name of the connector' } },
} as const;
/** An endpoint id as a body or path field, bounded as the manifest bounds it. */
export const endpointIdProperty = { type: 'string', maxLength: ENDPOINT_ID_MAX_LENGTH, description: 'endpoint id from the manifest' } as const;
const endpointParams = {
  type: 'object',
  required: ['name', 'id'],
  properties: { name: connectorNameParam.properties.name, id: endpointIdProperty },
} as const;


/** What a scope-bound caller must hold to write a connector (docs/admin.md, "Scopes"). */
export const CONNECTOR_SCOPES = 'every scope of the connector (one of no scope: none holds it)';
const CONNECTOR_AND_TABLES = 'every scope of the manifest and of the connector it replaces, and of every other connector writing one of its target tables';

const notFound = (text: string) => ({ 404: { description: text, schema: errorBody } });

export const connectorRoutes: RouteDecl[] = [
  route({
    method: 'POST', path: '/api/connectors/apply', operationId: 'applyConnector', summary: 'Apply a Connector manifest (create or update by name)', tags: ['Connectors'],
    auth: ['svc_integrator', 'svc_admin'],
    description: 'YAML or JSON. 201 for a new name, 200 for an update; endpoint UUIDs stay stable while their ids stay in the manifest. Unknown spec keys are warnings. A manifest that drops an endpoint whose run is in flight is a 409 naming the run.',
    bodyTypes: MANIFEST_TYPES, ...manifest,
    responses: { ...applyResponses(applied, scopeRefusals(false, CONNECTOR_AND_TABLES)), 409: { description: 'The manifest drops an endpoint whose run is in flight: `{error, hint}` naming the run', schema: errorBody } },
    handler: async ({ services, principal, body, ctx }) => {
      const result = await services.connectors.manifests.apply(callerTenant(principal), principal, body, actor(principal));
      return appliedAnswer(ctx, result, { name: result.connector.name, id: result.connector.id, warnings: result.warnings });
    },
  }),
  route({
    method: 'POST', path: '/api/connectors/validate', operationId: 'validateConnector', summary: 'Check a Connector manifest without applying it', tags: ['Connectors'],
    auth: ['svc_integrator'], audit: false,
    description: 'Writes nothing. Answers 200 with every error and warning, each naming its field, up to 100 of each: past them the list ends with one entry (field empty) counting the rest.',
    bodyTypes: MANIFEST_TYPES, ...manifest,
    responses: {
      200: {
        description: 'The verdict',
        schema: {
          type: 'object', required: ['valid', 'errors', 'warnings'],
          properties: { valid: { type: 'boolean' }, errors: { type: 'array', items: manifestIssue }, warnings: { type: 'array', items: manifestIssue } },
        },
      },
      400: { description: 'The body is not a YAML or JSON object', schema: errorBody },
      ...refusals(false),
    },
    handler: async ({ services, principal, body }) => {
      const { errors, warnings } = await services.connectors.manifests.check(callerTenant(principal), body);
      return { valid: errors.length === 0, errors, warnings };
    },
  }),
  route({
    method: 'GET', path: '/api/connectors', operationId: 'listConnectors', summary: 'Connectors of the caller\'s tenant, by name', tags: ['Connectors'],
    auth: ['svc_integrator'],
    responses: { 200: { description: 'Connectors', schema: { type: 'array', items: connectorRecord } }, ...refusals(false) },
    handler: ({ services, principal }) => services.connectors.manifests.list(callerTenant(principal)),
  }),
  route({
    method: 'GET', path: '/api/connectors/{name}', operationId: 'getConnector', summary: 'One connector with its stored manifest', tags: ['Connectors'],
    auth: ['svc_integrator'], params: connectorNameParam,
    responses: { 200: { description: 'The connector', schema: connectorDetail }, ...notFound('Unknown connector'), ...refusals(false) },
    handler: ({ services, principal, params }) => services.connectors.manifests.get(callerTenant(principal), params.name),
  }),
  route({
    method: 'DELETE', path: '/api/connectors/{name}', operationId: 'deleteConnector', summary: 'Delete a connector, its ext.* rows and its retrieval chunks', tags: ['Connectors'],
    auth: ['svc_integrator', 'svc_admin'], params: connectorNameParam,
    description: 'Its run records stay. The name can be applied again (a new connector with new UUIDs). Refused while a run of it is in flight: cancel it or wait for it to end first.',
    responses: {
      204: { description: 'Deleted' },
      ...notFound('Unknown connector'),
      409: { description: '`connector NAME has a run in flight`: `hint` names the run; nothing was deleted', schema: errorBody },
      ...scopeRefusals(false, CONNECTOR_SCOPES),
    },
    handler: async ({ services, principal, params, ctx }) => {
      await services.connectors.manifests.remove(callerTenant(principal), principal, params.name);
      ctx.status = 204;
      return undefined;
    },
  }),
  route({
    method: 'POST', path: '/api/connectors/{name}/endpoints/{id}/reset-cursor', operationId: 'resetConnectorCursor', summary: 'Clear an endpoint\'s watermark', tags: ['Connectors'],
    auth: ['svc_integrator'], params: endpointParams,
    description: 'The next run of the endpoint is a full read.',
    responses: { 204: { description: 'Cleared' }, ...notFound('Unknown connector or endpoint'), ...scopeRefusals(false, CONNECTOR_SCOPES) },
    handler: async ({ services, principal, params, ctx }) => {
      await services.connectors.manifests.resetCursor(callerTenant(principal), principal, params.name, params.id);
      ctx.status = 204;
      return undefined;
    },
  }),
  route({
    method: 'POST', path: '/api/connectors/{name}/endpoints/{id}/purge', operationId: 'purgeConnectorEndpoint', summary: 'Empty one endpoint\'s rows and retrieval chunks', tags: ['Connectors'],
    auth: ['svc_integrator', 'svc_admin'], params: endpointParams,
    description: 'The connector stays; the endpoint\'s watermark is cleared too, so its next run reads everything again. Refused while a run of the endpoint is in flight: cancel it or wait for it to end first.',
    responses: {
      204: { description: 'Purged' },
      ...notFound('Unknown connector or endpoint'),
      409: { description: '`connector NAME has a run in flight`: `hint` names the run of the endpoint; nothing was purged', schema: errorBody },
      ...scopeRefusals(false, CONNECTOR_SCOPES),
    },
    handler: async ({ services, principal, params, ctx }) => {
      await services.connectors.manifests.purgeEndpoint(callerTenant(principal), principal, params.name, params.id);
      ctx.status = 204;
      return undefined;
    },
  }),
];
