import { callerTenant } from '../../../src/auth/principal.js';
import { draftEndpoint } from '../../../src/connectors/draft.js';
import { preflight } from '../../../src/connectors/preflight.js';
import { NAME_MAX_LENGTH } from '../../../src/connectors/manifest/schema.js';
import { scaffoldManifest } from '../../../src/connectors/scaffold.js';
import { CancelledError } from '../../../src/connectors/engine/errors.js';
import { NotFoundError } from '../../../src/errors.js';
import type { AreaServices } from '../../../src/runtime/services.js';
import { route, type RouteDecl } from '../../route.js';
import { whileClientWaits } from '../client-gone.js';
import { errorBody, refusals } from '../schemas.js';
import { connectorNameParam } from './connectors.js';


async function connectorOf(services: AreaServices, tenantId: number, name: string) {
  const connector = await services.connectors.byName(tenantId, name);
  if (!connector) throw new NotFoundError(`connector ${name} not found`);
  return connector;
}

/** A probe stopped by its signal ends with the engine's CancelledError. */
const isCancelled = (err: unknown) => err instanceof CancelledError;

export const connectorToolRoutes: RouteDecl[] = [
  route({
    method: 'POST', path: '/api/connectors/{name}/preflight', operationId: 'preflightConnector', summary: 'Send the first request of every enabled endpoint once; write nothing', tags: ['Connectors'],
    auth: ['svc_integrator'], params: connectorNameParam,
    description: 'No retry, no write. `ok` is false when any endpoint did not answer readable data, or answered records in none of which its `unique_key` finds a key (the verdict says so: a run would dead-letter every row); a 200 with 0 items means response_path matched nothing. Disabled endpoints are counted in `skipped`. An endpoint the connector\'s `default_rate_limit` would let through only after svc.connectors.preflight.max-token-wait is not sent: its verdict is `not checked: … allows its next request in N s; nothing was sent` (status 0, `ok` false). `warnings` names what a run would leave out of the request (a declared header whose value_env resolves to nothing) records of the answer without a key, and records a run would dead-letter `unstorable` (a NUL, bytes that are not UTF-8, too deep), named as the run names them.',
    responses: {
      200: {
        description: 'The pre-flight report',
        schema: {
          type: 'object', required: ['ok', 'endpoints', 'skipped'],
          properties: {
            ok: { type: 'boolean' },
            skipped: { type: 'integer' },
            endpoints: {
              type: 'array',
              items: {
                type: 'object', required: ['id', 'method', 'status', 'items', 'verdict'],
                properties: { id: { type: 'string' }, method: { type: 'string' }, status: { type: 'integer' }, items: { type: 'integer' }, verdict: { type: 'string' }, warnings: { type: 'array', items: { type: 'string' } }, url: { type: 'string' }, sample: {} },
              },
            },
          },
        },
      },
      404: { description: 'Unknown connector', schema: errorBody },
      ...refusals(false),
    },
    handler: async ({ services, principal, params, ctx }) => {
      const connector = await connectorOf(services, callerTenant(principal), params.name);
      return whileClientWaits(ctx, (signal) => preflight(connector, (c) => ({ ...services.connectors.context(c), signal })), isCancelled);
    },
  }),
  route({
    method: 'POST', path: '/api/connectors/{name}/draft', operationId: 'draftEndpoint', summary: 'Draft an endpoint fragment from a live path of the connector\'s source', tags: ['Connectors'],
    auth: ['svc_integrator'], params: connectorNameParam,
    description: 'Guesses the pagination preset from the first answer (`unknown` when unrecognised) and promotes the first record\'s scalar fields. Upstream errors answer 502 naming the status; a credential of the connector that does not resolve (or open) answers 409, nothing sent.',
    body: { type: 'object', required: ['path'], additionalProperties: false, properties: { path: { type: 'string', pattern: '^/', maxLength: 2000, description: 'Request path appended to base_url, as an endpoint\'s `path`: starts with /' }, method: { enum: ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'] } } },
    responses: {
      200: { description: 'An endpoint fragment to paste into spec.endpoints', schema: { type: 'object' } },
      404: { description: 'Unknown connector', schema: errorBody },
      409: { description: 'Nothing was sent: a credential of the connector does not resolve, or its stored secret does not open', schema: errorBody },
      429: { description: 'Nothing was sent: the connector\'s rate limit would not allow a request within svc.connectors.preflight.max-token-wait; `Retry-After` says when', schema: errorBody },
      502: { description: 'The source answered an error', schema: errorBody },
      ...refusals(false),
    },
    handler: async ({ services, principal, params, body, ctx }) => {
      const connector = await connectorOf(services, callerTenant(principal), params.name);
      return whileClientWaits(ctx, (signal) => draftEndpoint(connector, body, { ...services.connectors.context(connector), signal }), isCancelled);
    },
  }),
  route({
    method: 'POST', path: '/api/connectors/scaffold', operationId: 'scaffoldConnector', summary: 'Draft a Connector manifest (YAML) from an OpenAPI document', tags: ['Connectors'],
    auth: ['svc_integrator'],
    body: { type: 'object', required: ['openapiUrl', 'name'], additionalProperties: false, properties: { openapiUrl: { type: 'string', maxLength: 2000 }, name: { type: 'string', maxLength: NAME_MAX_LENGTH } } },
    responses: {
      200: { description: 'The drafted manifest', contentType: 'application/yaml', schema: { type: 'string' } },
      400: { description: 'No readable OpenAPI document at the URL', schema: errorBody },
      429: { description: 'The document is YAML and two YAML texts of the caller\'s tenant are being read already: `{error}`, `Retry-After`', schema: errorBody },
      ...refusals(false),
    },
    handler: async ({ services, principal, body, ctx }) => {
      const { openapiUrl, name } = body;
      ctx.type = 'application/yaml';
      // The client leaving ends the read of the document (whileClientWaits): any error then is its abort's.
      ctx.body = await whileClientWaits(ctx, (signal) => scaffoldManifest(openapiUrl, name, {
        dispatcher: services.connectors.dispatcher,
        yamlReader: services.yamlReader,
        yamlReadMs: services.config.duration('svc.http.yaml-read-timeout'),
        owner: String(callerTenant(principal)),
        responseTimeoutMs: services.config.duration('svc.connectors.http.response-timeout'),
        signal,
      }), () => true);
      return undefined;
    },
  }),
];
