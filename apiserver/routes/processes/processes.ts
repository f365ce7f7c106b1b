import { actor, callerTenant } from '../../../src/auth/principal.js';
import { processManifestSchema } from '../../../src/processes/manifest/schema.js';
import { paging } from '../../paging.js';
import { type JsonSchema, route, type RouteDecl } from '../../route.js';
import { appliedAnswer, appliedSchema, applyResponses, MANIFEST_TYPES, manifestBodies } from '../manifest-routes.js';
import { errorBody, refusals, scopeRefusals } from '../schemas.js';
import { SLUG_MAX_LENGTH } from '../../../src/manifests/checking.js';

/**
 * Process manifests and the decision inbox (docs/processes.md). The manifest is checked by
 * src/processes/manifest (one JSON Schema, then the event glob and the CEL condition): an error
 * answers `{error, field}` naming the field (`spec.when`).
 */

const manifest = manifestBodies(
  'A Process manifest (`apiVersion: apps.svc.io/v1`, `kind: Process`, `metadata.name`, `spec`: `event`, `when`, `decision`, `message`) as YAML or JSON; see docs/processes.md.',
  processManifestSchema,
);

const timestamp: JsonSchema = { type: 'string', format: 'date-time' };

const recordProperties: Record<string, JsonSchema> = {
  name: { type: 'string', description: 'metadata.name, lower-case' },
  event: { type: 'string', description: 'the event type or prefix.* pattern watched' },
  when: { type: ['string', 'null'], description: 'the CEL condition, null when none' },
  decision: { type: 'string', description: 'the decision event type emitted' },
  message: { type: 'string', description: 'the message template' },
  createdAt: timestamp,
  updatedAt: timestamp,
};
const recordRequired = ['name', 'event', 'when', 'decision', 'message', 'createdAt', 'updatedAt'];
const processRecord: JsonSchema = { type: 'object', required: recordRequired, properties: recordProperties };
const processDetail: JsonSchema = {
  type: 'object',
  required: [...recordRequired, 'manifest'],
  properties: { ...recordProperties, manifest: { type: 'object', description: 'the manifest as applied' } },
};
const applied = appliedSchema({ withId: false });

const inboxItem: JsonSchema = {
  type: 'object',
  required: ['id', 'eventId', 'type', 'message', 'payload', 'createdAt', 'ackedAt', 'ackedBy'],
  properties: {
    id: { type: 'integer', description: 'the inbox item (`decision_id` of annotation.decision.acked)' },
    eventId: { type: 'integer', description: 'the outbox event id (the `X-Svc-Event-Id` its webhooks carry)' },
    type: { type: 'string', description: 'the decision type (`decision.…`)' },
    message: { type: 'string', description: 'the payload\'s `message`, or a sentence the hub writes' },
    payload: { type: 'object' },
    createdAt: timestamp,
    ackedAt: { type: ['string', 'null'], format: 'date-time' },
    ackedBy: { type: ['string', 'null'], description: 'the login of the hub user who acknowledged it' },
  },
};

const nameParam = { type: 'object', required: ['name'], properties: { name: { type: 'string', maxLength: SLUG_MAX_LENGTH, description: 'metadata.name of the process (case-insensitive)' } } } as const;
const notFound = { 404: { description: 'Unknown process', schema: errorBody } };
const INBOX = paging({
  name: 'inbox', key: ['id'], defaultLimit: 50, over: 'refuse',
  filters: { acked: { type: 'string', enum: ['true', 'false'], description: '`true`: only acknowledged items; `false`: only items not acknowledged yet' } },
});
const READ_GATE = [['svc_admin', 'svc_integrator']] as const;

export const processRoutes: RouteDecl[] = [
  route({
    method: 'POST', path: '/api/processes/apply', operationId: 'applyProcess', summary: 'Apply a Process manifest (create or update by name)', tags: ['Processes'],
    auth: ['svc_admin'],
    description: 'YAML or JSON. 201 for a new name, 200 for an update. `spec.when` is compiled and type-checked here; every error is a 400 naming the field.',
    bodyTypes: MANIFEST_TYPES, ...manifest,
    responses: applyResponses(applied),
    handler: async ({ services, principal, body, ctx }) => {
      const result = await services.processes.apply(callerTenant(principal), body, actor(principal));
      return appliedAnswer(ctx, result, result);
    },
  }),
  route({
    method: 'GET', path: '/api/processes', operationId: 'listProcesses', summary: 'Processes of the caller\'s tenant, by name', tags: ['Processes'],
    auth: READ_GATE,
    responses: { 200: { description: 'Processes', schema: { type: 'array', items: processRecord } }, ...refusals(false) },
    handler: ({ services, principal }) => services.processes.list(callerTenant(principal)),
  }),
  route({
    method: 'GET', path: '/api/processes/{name}', operationId: 'getProcess', summary: 'One process with its stored manifest', tags: ['Processes'],
    auth: READ_GATE, params: nameParam,
    responses: { 200: { description: 'The process', schema: processDetail }, ...notFound, ...refusals(false) },
    handler: ({ services, principal, params }) => services.processes.get(callerTenant(principal), params.name),
  }),
  route({
    method: 'DELETE', path: '/api/processes/{name}', operationId: 'deleteProcess', summary: 'Delete a process', tags: ['Processes'],
    auth: ['svc_admin'], params: nameParam,
    description: 'Decisions it emitted stay in the outbox and the inbox.',
    responses: { 204: { description: 'Deleted' }, ...notFound, ...refusals(false) },
    handler: async ({ services, principal, params, ctx }) => {
      await services.processes.remove(callerTenant(principal), params.name);
      ctx.status = 204;
      return undefined;
    },
  }),
  route({
    method: 'GET', path: '/api/inbox', operationId: 'listInbox', summary: 'The decision inbox of the caller\'s tenant, newest first', tags: ['Inbox'],
    auth: ['svc_user'],
    description:
      'Newest first. Paged: with more items after the page, a `Link` header (rel="next") names the next page (`before`). ' +
      'A scope-bound caller\'s list leaves out the dormancy decisions (`decision.dormant.<workflow>`) of workflows they do not hold every scope of (docs/processes.md).',
    query: INBOX.query,
    responses: {
      200: INBOX.ok('Inbox items', inboxItem),
      400: { description: 'Invalid query `{error, field}`', schema: errorBody },
      ...refusals(false),
    },
    handler: async ({ services, principal, query, ctx }) =>
      INBOX.answer(ctx, query, await services.processes.inbox.list(callerTenant(principal), principal, INBOX.asked(query), { acked: query.acked === undefined ? undefined : query.acked === 'true' })),
  }),
  route({
    method: 'POST', path: '/api/inbox/{id}/ack', operationId: 'ackInboxItem', summary: 'Acknowledge a decision', tags: ['Inbox'],
    auth: ['svc_user'],
    params: { type: 'object', required: ['id'], properties: { id: { type: 'string', description: 'the inbox item id' } } },
    description: 'Records the caller\'s login and the time, and emits `annotation.decision.acked {decision_id, by}`. A second ack answers 200 unchanged and emits nothing.',
    responses: {
      200: { description: 'The item', schema: inboxItem },
      404: { description: '`decision not found`: no such item in the caller\'s tenant', schema: errorBody },
      ...scopeRefusals(false, "every scope of the workflow whose dormancy decision it is (its scope and its entity's, as stored now; a deleted workflow's is no one's)"),
    },
    handler: ({ services, principal, params }) => {
      const id = /^[0-9]{1,15}$/.test(params.id) ? Number(params.id) : 0;
      return services.processes.inbox.ack(callerTenant(principal), principal, id, actor(principal));
    },
  }),
];
