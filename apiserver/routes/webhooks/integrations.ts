import { actor, callerTenant } from '../../../src/auth/principal.js';
import { EVENT_TYPES_MAX, NAME_MAX, SECRET_MAX, URL_MAX } from '../../../src/webhooks/validation.js';
import { SUBSCRIPTION_SCOPES } from '../../../src/events/scoped-families.js';
import { MAX_INTEGRATIONS_PER_TENANT } from '../../../src/webhooks/integrations.js';
import { AUTH_MODES, type IntegrationInput, type IntegrationPatch, PLATFORMS } from '../../../src/webhooks/model.js';
import { paging } from '../../paging.js';
import { type JsonSchema, route, type RouteDecl } from '../../route.js';
import { errorBody, refusals, scopeRefusals } from '../schemas.js';
import { tenantIdParam } from '../admin/admin-schemas.js';

/** The integration hub (spec 1 "Integration hub"): svc_admin, `{tid}` equal to the caller's tenant. */

const idText = (what: string) => ({ type: 'string', maxLength: 40, description: `${what} (an integer; any other value up to 40 characters is unknown: 404, a longer one a 400)` }) as const;

/** `{tid}` plus ids kept as text (any other value than an integer is unknown: 404). */
const tenantPath = <const N extends string = never>(ids: Record<N, string> = {} as Record<N, string>) =>
  ({
    type: 'object',
    required: ['tid', ...Object.keys(ids)] as Array<'tid' | N>,
    properties: { tid: tenantIdParam, ...(Object.fromEntries(Object.entries(ids).map(([name, what]) => [name, idText(what as string)])) as Record<N, ReturnType<typeof idText>>) },
  }) as const;

const integrationSchema: JsonSchema = {
  type: 'object',
  required: ['id', 'name', 'targetUrl', 'platform', 'authMode', 'hasSecret', 'eventTypes', 'enabled', 'standardWebhooks', 'createdAt', 'updatedAt', 'deletedAt'],
  additionalProperties: false,
  properties: {
    id: { type: 'integer' },
    name: { type: 'string' },
    targetUrl: { type: 'string' },
    platform: { enum: [...PLATFORMS] },
    authMode: { enum: [...AUTH_MODES] },
    hasSecret: { type: 'boolean', description: 'True when a secret is stored (the secret itself is never returned)' },
    eventTypes: { type: 'array', items: { type: 'string' } },
    enabled: { type: 'boolean' },
    standardWebhooks: { type: 'boolean', description: 'Also sends the Standard Webhooks headers `webhook-id`, `webhook-timestamp`, `webhook-signature`' },
    createdAt: { type: 'string', format: 'date-time' },
    updatedAt: { type: 'string', format: 'date-time' },
    deletedAt: { type: ['string', 'null'], format: 'date-time', description: 'Set once deleted (a deleted integration answers only this lookup and its history)' },
  },
};

const deliveryProperties: Record<string, JsonSchema> = {
  id: { type: 'integer' },
  integrationId: { type: 'integer' },
  eventType: { type: 'string' },
  eventId: { type: ['integer', 'null'], description: 'The outbox event id sent as `X-Svc-Event-Id` (the same on retries and replays); null on tests' },
  kind: { enum: ['event', 'replay', 'test'], description: '`event`: an event matched the integration; `replay`: a replay of `replayOf`; `test`: the test operation' },
  replayOf: { type: ['integer', 'null'] },
  attempts: { type: 'integer', description: 'Attempts made (at most `svc.webhook.max-attempts` automatically)' },
  succeeded: { type: 'boolean', description: 'True once an attempt got a 2xx answer' },
  closedReason: { type: ['string', 'null'], description: 'Why retries stopped early (integration deleted, disabled or no longer matching)' },
  http_status: { type: ['integer', 'null'], description: 'Status of the latest attempt\'s answer' },
  response_body: { type: ['string', 'null'], description: 'Start of the latest answer\'s body, at most 2000 characters' },
  error: { type: ['string', 'null'], description: 'Why the latest attempt failed before any answer (transport failure, timeout, or a missing secret)' },
  duration_ms: { type: ['integer', 'null'] },
  attempted_at: { type: ['string', 'null'], format: 'date-time' },
  createdAt: { type: 'string', format: 'date-time' },
};

export const deliverySchema: JsonSchema = {
  type: 'object',
  required: Object.keys(deliveryProperties),
  additionalProperties: false,
  properties: deliveryProperties,
};

const attemptSchema: JsonSchema = {
  type: 'object',
  required: ['attempt', 'http_status', 'response_body', 'error', 'duration_ms', 'attempted_at'],
  properties: {
    attempt: { type: 'integer' },
    http_status: { type: ['integer', 'null'] },
    response_body: { type: ['string', 'null'] },
    error: { type: ['string', 'null'] },
    duration_ms: { type: 'integer' },
    attempted_at: { type: 'string', format: 'date-time' },
  },
};

const testResultSchema: JsonSchema = {
  type: 'object',
  required: ['ok', 'httpStatus', 'responseBody', 'error', 'durationMs'],
  additionalProperties: false,
  properties: {
    ok: { type: 'boolean', description: 'True for a 2xx answer' },
    httpStatus: { type: ['integer', 'null'], description: 'null when no answer came' },
    responseBody: { type: ['string', 'null'], description: 'Start of the answer\'s body, at most 2000 characters' },
    error: { type: ['string', 'null'] },
    durationMs: { type: 'integer' },
  },
};

const fields = {
  name: { type: 'string', minLength: 1, maxLength: NAME_MAX, description: 'Label, unique among the tenant\'s integrations that are not deleted' },
  targetUrl: {
    type: 'string', minLength: 1, maxLength: URL_MAX,
    description: 'Absolute http(s) URL. Refused: other schemes, credentials in the URL, a #fragment, port 0; with `svc.egress.deny-private`, non-public addresses',
  },
  platform: { enum: [...PLATFORMS], description: 'Preset label for a UI (default `generic`); the hub treats all alike' },
  authMode: { enum: [...AUTH_MODES], description: '`HMAC` (default): `X-Svc-Signature`; `BEARER`: `Authorization: Bearer <secret>`; `NONE`' },
  secret: {
    type: ['string', 'null'], maxLength: SECRET_MAX,
    description:
      'Write-only, stored encrypted, never returned. Null or blank is ignored (on update: the stored one stays; any other value rotates it). ' +
      'With authMode `BEARER` it is sent in the Authorization header: printable ASCII or Latin-1 only, no line breaks or other control characters (400 otherwise)',
  },
  eventTypes: {
    type: 'array', maxItems: EVENT_TYPES_MAX, items: { type: 'string', maxLength: 200 },
    description: 'Exact event types or `prefix.*` patterns (a bare `*` and an empty list are refused)',
  },
  enabled: { type: 'boolean', description: 'Default true; a disabled integration matches no new event' },
  standardWebhooks: { type: 'boolean', description: 'Also send the Standard Webhooks headers (default false)' },
  // Read-only fields of a record sent back: accepted and ignored.
  id: { description: 'Ignored (read-only)' },
  hasSecret: { description: 'Ignored (read-only)' },
  createdAt: { description: 'Ignored (read-only)' },
  updatedAt: { description: 'Ignored (read-only)' },
  deletedAt: { description: 'Ignored (read-only)' },
};

const READ_ONLY = ['id', 'hasSecret', 'createdAt', 'updatedAt', 'deletedAt'];

/** The body without the read-only fields of a record sent back. */
function writable<T>(body: object): T {
  const copy: Record<string, unknown> = { ...body };
  for (const key of READ_ONLY) delete copy[key];
  return copy as T;
}

const notFound = (what: string) => ({ 404: { description: what, schema: errorBody } });
const invalid = { 400: { description: 'Invalid body `{error, field}`', schema: errorBody } };
const tenantRefusals = refusals(false);
const subscriptionRefusals = scopeRefusals(false, SUBSCRIPTION_SCOPES);

/** The `status` filter of the delivery lists. */
export const deliveryStatus = { enum: ['failed'], description: '`failed`: only deliveries not (yet) successful, attempted at least once or closed' } as const;

const DELIVERIES = paging({ name: 'deliveries', key: ['id'], defaultLimit: 50, filters: { status: deliveryStatus } });

export const integrationRoutes: RouteDecl[] = [
  route({
    method: 'GET', path: '/api/tenants/{tid}/integrations', operationId: 'listIntegrations', summary: 'Integrations of the tenant (deleted ones omitted)', tags: ['Integrations'],
    auth: ['svc_admin'],
    description: 'A scope-bound caller\'s list leaves out the integrations they may not hold (docs/integrations.md, "Scope-bound callers").',
    params: tenantPath(),
    responses: { 200: { description: 'Integrations, by id', schema: { type: 'array', items: integrationSchema } }, ...tenantRefusals },
    handler: ({ services, principal }) => services.integrations.list(callerTenant(principal), principal),
  }),
  route({
    method: 'POST', path: '/api/tenants/{tid}/integrations', operationId: 'createIntegration', summary: 'Subscribe a URL to event types', tags: ['Integrations'],
    auth: ['svc_admin'],
    description:
      'Only `name`, `targetUrl` and `eventTypes` are required; defaults: platform `generic`, authMode `HMAC`, enabled true, standardWebhooks false. ' +
      'An HMAC or BEARER integration without a secret is accepted (`hasSecret: false`): each of its deliveries records the fault ' +
      '`HMAC mode but no secret configured` (or `Bearer mode but no token configured`) and sends nothing. Only events written after the ' +
      'integration exists are delivered to it.',
    params: tenantPath(),
    body: { type: 'object', required: ['name', 'targetUrl', 'eventTypes'], additionalProperties: false, properties: fields },
    responses: {
      201: { description: 'Created: the record with `id` and `hasSecret` (header `Location`)', schema: integrationSchema },
      ...invalid,
      409: { description: `An integration of that name exists in the tenant, or the tenant has ${MAX_INTEGRATIONS_PER_TENANT} integrations (the most it may have)`, schema: errorBody },
      ...subscriptionRefusals,
    },
    handler: async ({ services, principal, body, params, ctx }) => {
      const created = await services.integrations.create(callerTenant(principal), principal, writable<IntegrationInput>(body), actor(principal));
      ctx.status = 201;
      ctx.set('Location', `/api/tenants/${params.tid}/integrations/${created.id}`);
      return created;
    },
  }),
  route({
    method: 'GET', path: '/api/tenants/{tid}/integrations/{id}', operationId: 'getIntegration', summary: 'One integration (deleted ones too)', tags: ['Integrations'],
    auth: ['svc_admin'],
    description: 'A deleted integration still answers 200, with `deletedAt` set; 404 only for an id that never existed in the tenant.',
    params: tenantPath({ id: 'Integration id' }),
    responses: { 200: { description: 'The integration', schema: integrationSchema }, ...notFound('Never existed (or of another tenant)'), ...subscriptionRefusals },
    handler: ({ services, principal, params }) => services.integrations.get(callerTenant(principal), principal, params.id),
  }),
  route({
    method: 'PUT', path: '/api/tenants/{tid}/integrations/{id}', operationId: 'updateIntegration', summary: 'Update an integration (present fields only)', tags: ['Integrations'],
    auth: ['svc_admin'],
    description:
      'Any subset of the fields; only those present are applied. A null or blank `secret` is ignored; another value replaces the stored ' +
      'secret (rotation). `enabled: false` stops new matches and, at the next retry, closes open deliveries; enabling again delivers only ' +
      'events written from then on.',
    params: tenantPath({ id: 'Integration id' }),
    body: { type: 'object', additionalProperties: false, properties: fields },
    responses: {
      200: { description: 'The updated integration', schema: integrationSchema },
      ...invalid,
      ...notFound('Unknown or deleted'),
      409: { description: 'Another integration of the tenant has that name', schema: errorBody },
      ...subscriptionRefusals,
    },
    handler: ({ services, principal, params, body }) =>
      services.integrations.update(callerTenant(principal), principal, params.id, writable<IntegrationPatch>(body), actor(principal)),
  }),
  route({
    method: 'DELETE', path: '/api/tenants/{tid}/integrations/{id}', operationId: 'deleteIntegration', summary: 'Delete an integration (soft)', tags: ['Integrations'],
    auth: ['svc_admin'],
    description:
      'Every send stops at once and open deliveries close (`closedReason`); the list omits it, the single lookup and its delivery history ' +
      'remain; test and replay answer 404.',
    params: tenantPath({ id: 'Integration id' }),
    responses: { 204: { description: 'Deleted' }, ...notFound('Unknown or already deleted'), ...subscriptionRefusals },
    handler: async ({ services, principal, params, ctx }) => {
      await services.integrations.remove(callerTenant(principal), principal, params.id, actor(principal));
      ctx.status = 204;
      return undefined;
    },
  }),
  route({
    method: 'POST', path: '/api/tenants/{tid}/integrations/{id}/test', operationId: 'testIntegration', summary: 'Send a test delivery', tags: ['Integrations'],
    auth: ['svc_admin'],
    description:
      'Sends a real POST of a sample payload synthesised from the catalog declaration of `eventType` (every declared field: long 1, ' +
      'boolean true, map {}, string `sample-<field>`), signed as usual but without `X-Svc-Event-Id`; recorded in the history (kind `test`, ' +
      'never retried); answers its outcome. Works on a disabled integration.',
    params: tenantPath({ id: 'Integration id' }),
    body: {
      type: 'object', required: ['eventType'], additionalProperties: false,
      properties: { eventType: { type: 'string', minLength: 1, maxLength: 200, description: 'A catalogued event type (not `decision.*`)' } },
    },
    responses: {
      200: { description: 'The test result', schema: testResultSchema },
      400: { description: '`Unknown event type: <type>` for a type not in the catalog (or `decision.*`)', schema: errorBody },
      ...notFound('Unknown or deleted integration'),
      ...subscriptionRefusals,
    },
    handler: ({ services, principal, params, body }) =>
      services.integrations.test(callerTenant(principal), principal, params.id, body.eventType),
  }),
  route({
    method: 'GET', path: '/api/tenants/{tid}/integrations/{id}/deliveries', operationId: 'listIntegrationDeliveries', summary: 'Delivery history of an integration', tags: ['Integrations'],
    auth: ['svc_admin'],
    description:
      'Newest first. A deleted integration keeps its history. Each record shows its latest attempt; `…/deliveries/{did}` lists every attempt. ' +
      'Paged: with more deliveries after the page, a `Link` header (rel="next") names the next page (`before`).',
    params: tenantPath({ id: 'Integration id' }),
    query: DELIVERIES.query,
    responses: { 200: DELIVERIES.ok('Delivery records', deliverySchema), ...notFound('Never existed'), ...subscriptionRefusals },
    handler: async ({ services, principal, params, query, ctx }) =>
      DELIVERIES.answer(ctx, query, await services.integrations.deliveries(callerTenant(principal), principal, params.id, DELIVERIES.asked(query), { failedOnly: query.status === 'failed' })),
  }),
  route({
    method: 'GET', path: '/api/tenants/{tid}/integrations/{id}/deliveries/{did}', operationId: 'getIntegrationDelivery', summary: 'One delivery with every attempt', tags: ['Integrations'],
    auth: ['svc_admin'],
    params: tenantPath({ id: 'Integration id', did: 'Delivery id' }),
    responses: {
      200: { description: 'The delivery record with `attemptLog`, its attempts in order', schema: { ...deliverySchema, required: [...Object.keys(deliveryProperties), 'attemptLog'], properties: { ...deliveryProperties, attemptLog: { type: 'array', items: attemptSchema } } } },
      ...notFound('Unknown, or not of this integration'),
      ...subscriptionRefusals,
    },
    handler: ({ services, principal, params }) => services.integrations.delivery(callerTenant(principal), principal, params.id, params.did),
  }),
  route({
    method: 'POST', path: '/api/tenants/{tid}/integrations/{id}/deliveries/{did}/replay', operationId: 'replayIntegrationDelivery', summary: 'Replay a delivery', tags: ['Integrations'],
    auth: ['svc_admin'],
    description:
      'Records a new delivery (kind `replay`) with the original body and the same `X-Svc-Event-Id`, and sends it at once; the original ' +
      'entry stays. Answers 202 with the new record (its outcome shows in the history). Replays get retries like any delivery.',
    params: tenantPath({ id: 'Integration id', did: 'Delivery id' }),
    responses: { 202: { description: 'The new delivery record', schema: deliverySchema }, ...notFound('Unknown delivery, not of this integration, or the integration is deleted'), ...subscriptionRefusals },
    handler: async ({ services, principal, params, ctx }) => {
      const record = await services.integrations.replay(callerTenant(principal), principal, params.did, params.id);
      ctx.status = 202;
      return record;
    },
  }),
];
