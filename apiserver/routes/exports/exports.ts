import { actor, callerTenant } from '../../../src/auth/principal.js';
import { exportManifestSchema } from '../../../src/exports/manifest/schema.js';
import { FAILURE_CODES } from '../../../src/exports/types.js';
import { paging } from '../../paging.js';
import { type JsonSchema, route, type RouteDecl } from '../../route.js';
import { appliedAnswer, applyResponses, appliedSchema, MANIFEST_TYPES, manifestBodies } from '../manifest-routes.js';
import { errorBody, refusals } from '../schemas.js';
import { SLUG_MAX_LENGTH } from '../../../src/manifests/checking.js';

/**
 * Export manifests and runs (spec 3 "Endpoints"; list, read and delete for the CLI). Every path is
 * svc_integrator, reads included; listing, reading or running an export needs the export's scope
 * (403 `scope not granted`). The manifest is checked by src/exports/manifest (one JSON Schema plus
 * the rules spanning fields, and the entity's columns and scopes): `{error, field}` on the first
 * error.
 */

const manifest = manifestBodies(
  'An Export manifest (`apiVersion: apps.svc.io/v1`, `kind: Export`, `metadata.name`, `spec`) as YAML or JSON; see docs/exports.md.',
  exportManifestSchema,
);

const timestamp: JsonSchema = { type: 'string', format: 'date-time' };

const recordProperties: Record<string, JsonSchema> = {
  id: { type: 'string', format: 'uuid' },
  name: { type: 'string' },
  entity: { type: 'string' },
  scope: { type: 'string' },
  destination: { type: 'string', enum: ['sftp', 's3'] },
  schedule: { type: ['string', 'null'] },
  columns: { type: 'array', items: { type: 'string' } },
  createdAt: timestamp,
  updatedAt: timestamp,
};
const recordRequired = Object.keys(recordProperties);
const exportRecord: JsonSchema = { type: 'object', required: recordRequired, properties: recordProperties };
const exportDetail: JsonSchema = {
  type: 'object',
  required: [...recordRequired, 'manifest', 'spec'],
  properties: {
    ...recordProperties,
    manifest: { type: 'object', description: 'the manifest as applied (it never holds a credential)' },
    spec: { type: 'object', description: 'the normalised export: defaults filled, names lower-cased' },
  },
};

export const exportRunSchema: JsonSchema = {
  type: 'object',
  required: ['id', 'exportName', 'entity', 'scope', 'destination', 'status', 'trigger', 'attempt', 'retryOf', 'artifactTime', 'startedAt', 'endedAt', 'rowCount', 'byteCount', 'sha256', 'location', 'failureCode', 'failureReason'],
  properties: {
    id: { type: 'string', format: 'uuid' },
    exportName: { type: 'string' },
    entity: { type: 'string' },
    scope: { type: 'string' },
    destination: { type: 'string', enum: ['sftp', 's3'] },
    status: { type: 'string', enum: ['Running', 'Completed', 'Failed'] },
    trigger: { type: 'string', enum: ['manual', 'scheduled'] },
    attempt: { type: 'integer', minimum: 1 },
    retryOf: { type: ['string', 'null'], description: 'the run this one retries' },
    artifactTime: { ...timestamp, description: 'what `${date}` and `${timestamp}` resolve against: the request moment, or the cron slot' },
    slot: { type: ['string', 'null'], format: 'date-time', description: 'the cron slot of a scheduled run' },
    startedAt: timestamp,
    endedAt: { type: ['string', 'null'], format: 'date-time' },
    rowCount: { type: ['integer', 'null'], description: 'rows written so far while Running; the receipt once Completed' },
    byteCount: { type: ['integer', 'null'], description: 'bytes written so far while Running; the receipt once Completed' },
    sha256: { type: ['string', 'null'], description: 'hex SHA-256 of the file' },
    location: { type: ['string', 'null'], description: '`sftp://user@host:port/path` or `s3://bucket/key`' },
    failureCode: { type: ['string', 'null'], enum: [...FAILURE_CODES, null] },
    failureReason: { type: ['string', 'null'] },
    etag: { type: 'string', description: 'S3 only; not a checksum' },
    versionId: { type: 'string', description: 'S3 versioned buckets only' },
  },
};

const nameParam = { type: 'object', required: ['name'], properties: { name: { type: 'string', maxLength: SLUG_MAX_LENGTH, description: 'metadata.name of the export (case-insensitive)' } } } as const;
const runParams = {
  type: 'object',
  required: ['name', 'id'],
  properties: { name: { type: 'string', maxLength: SLUG_MAX_LENGTH, description: 'metadata.name of the export' }, id: { type: 'string', description: 'run id' } },
} as const;
const runId: JsonSchema = { type: 'object', required: ['runId'], properties: { runId: { type: 'string', format: 'uuid' } } };
const scopeRefusal = { description: 'Empty body when a role is missing; `{"error": "scope not granted"}` when the caller does not hold the export\'s scope', schema: errorBody };
const refused = { ...refusals(false), 403: scopeRefusal };
const notFound = (text: string) => ({ 404: { description: text, schema: errorBody } });
const EXPORT_RUNS = paging({ name: 'export-runs', key: ['instant', 'uuid'], defaultLimit: 50, over: 'refuse' });

export const exportRoutes: RouteDecl[] = [
  route({
    method: 'POST', path: '/api/exports/apply', operationId: 'applyExport', summary: 'Apply an Export manifest (create or update by name)', tags: ['Exports'],
    auth: ['svc_integrator'],
    description: 'YAML or JSON. 201 for a new name, 200 for an update. Everything is checked here: unknown keys, types, the entity and its columns, the scope, the cron, file-name tokens, inline credentials; the first error answers 400 naming the field. A caller who does not hold `spec.scope`, or the scope of the export of that name it would replace, gets 403 `scope not granted`.',
    bodyTypes: MANIFEST_TYPES, ...manifest,
    responses: applyResponses(appliedSchema({ withId: true }), refused),
    handler: async ({ services, principal, body, ctx }) => {
      const result = await services.exports.manifests.apply(callerTenant(principal), principal, body, actor(principal));
      return appliedAnswer(ctx, result, result);
    },
  }),
  route({
    method: 'GET', path: '/api/exports', operationId: 'listExports', summary: 'Exports of the caller\'s tenant whose scope the caller holds, by name', tags: ['Exports'],
    auth: ['svc_integrator'],
    responses: { 200: { description: 'Exports', schema: { type: 'array', items: exportRecord } }, ...refusals(false) },
    handler: ({ services, principal }) => services.exports.manifests.list(callerTenant(principal), principal),
  }),
  route({
    method: 'GET', path: '/api/exports/{name}', operationId: 'getExport', summary: 'One export with its stored manifest', tags: ['Exports'],
    auth: ['svc_integrator'], params: nameParam,
    responses: { 200: { description: 'The export', schema: exportDetail }, ...notFound('Unknown export'), ...refused },
    handler: ({ services, principal, params }) => services.exports.manifests.get(callerTenant(principal), principal, params.name),
  }),
  route({
    method: 'DELETE', path: '/api/exports/{name}', operationId: 'deleteExport', summary: 'Delete an export (its runs stay as history)', tags: ['Exports'],
    auth: ['svc_integrator'], params: nameParam,
    description:
      'Files already published stay where they are. A run in flight is stopped: it ends Failed `definition` (Completed if it had published already), at once when the process serving the call runs it, else at that process\'s next heartbeat; a run no live process holds (no heartbeat for `svc.export.run-stale-after`, and not publishing) ends at once, Failed `interrupted`, the reason saying a partial file may be left behind. Its runs stay readable at GET /api/exports/{name}/runs. The name can be applied again; its first run waits for the deleted export\'s run to end (409 `already has a run in flight` meanwhile).',
    responses: { 204: { description: 'Deleted' }, ...notFound('Unknown export'), ...refused },
    handler: async ({ services, principal, params, ctx }) => {
      await services.exports.manifests.remove(callerTenant(principal), principal, params.name);
      ctx.status = 204;
      return undefined;
    },
  }),
  route({
    method: 'POST', path: '/api/exports/{name}/runs', operationId: 'runExport', summary: 'Start a run (202 once claimed)', tags: ['Exports'],
    auth: ['svc_integrator'], params: nameParam,
    description: 'The run is claimed (one in flight per export) and proceeds in the background: follow it at GET /api/exports/{name}/runs/{id}. Its artifact time, what the file-name tokens resolve against, is the moment of this request.',
    responses: {
      202: { description: 'Claimed', schema: runId },
      409: { description: '`already has a run in flight`', schema: errorBody },
      ...notFound('Unknown export'),
      ...refused,
    },
    handler: async ({ services, principal, params, ctx }) => {
      const run = await services.exports.runs.start(callerTenant(principal), principal, params.name, actor(principal));
      ctx.status = 202;
      return { runId: run.id };
    },
  }),
  route({
    method: 'GET', path: '/api/exports/{name}/runs', operationId: 'listExportRuns', summary: 'Runs of an export, newest first', tags: ['Exports'],
    auth: ['svc_integrator'], params: nameParam,
    description:
      'Newest first by the instant each run started (to the microsecond, then by id). Paged: with more runs after the page, a `Link` header (rel="next") names the next page (`before`). ' +
      'The runs whose scope the caller does not hold are left out as the page is read: a page holds `limit` runs while that many follow.',
    query: EXPORT_RUNS.query,
    responses: { 200: EXPORT_RUNS.ok('Run records', exportRunSchema), ...notFound('Unknown export'), ...refused },
    handler: async ({ services, principal, params, query, ctx }) =>
      EXPORT_RUNS.answer(ctx, query, await services.exports.runs.list(callerTenant(principal), principal, params.name, EXPORT_RUNS.asked(query))),
  }),
  route({
    method: 'GET', path: '/api/exports/{name}/runs/{id}', operationId: 'getExportRun', summary: 'One run', tags: ['Exports'],
    auth: ['svc_integrator'], params: runParams,
    responses: { 200: { description: 'The run record', schema: exportRunSchema }, ...notFound('Unknown export or run'), ...refused },
    handler: ({ services, principal, params }) => services.exports.runs.get(callerTenant(principal), principal, params.name, params.id),
  }),
  route({
    method: 'POST', path: '/api/exports/{name}/runs/{id}/retry', operationId: 'retryExportRun', summary: 'Retry a Failed run (202)', tags: ['Exports'],
    auth: ['svc_integrator'], params: runParams,
    description:
      'A new run with `retryOf` set and `attempt` plus 1, regenerated from byte 0 with the original artifact time, so it aims at the same file name: a collision then means the earlier attempt did publish. 409 for a run that is Completed or Running, for a scheduled slot another attempt delivered (`already delivered`), or when a run is in flight.',
    responses: {
      202: { description: 'Claimed', schema: runId },
      409: { description: 'The run is not Failed, its slot was `already delivered`, or the export `already has a run in flight`', schema: errorBody },
      ...notFound('Unknown export or run'),
      ...refused,
    },
    handler: async ({ services, principal, params, ctx }) => {
      const run = await services.exports.runs.retry(callerTenant(principal), principal, params.name, params.id, actor(principal));
      ctx.status = 202;
      return { runId: run.id };
    },
  }),
  route({
    method: 'POST', path: '/api/exports/{name}/runs/{id}/cancel', operationId: 'cancelExportRun', summary: 'Stop a Running run (202)', tags: ['Exports'],
    auth: ['svc_integrator'], params: runParams,
    description:
      'The run ends Failed `interrupted` with a reason naming who cancelled it: at once when the process serving the call runs it, else at that process\'s next heartbeat (`svc.export.heartbeat-every`). Nothing is published (the temporary file is removed, the multipart upload aborted), unless the run had published already: it then ends Completed. A run no live process holds (no heartbeat for `svc.export.run-stale-after`, and not publishing) ends at once, the reason naming who cancelled it and saying a partial file may be left behind; the answer then shows it Failed. Otherwise answers the run as it was when the stop was asked; follow it at GET /api/exports/{name}/runs/{id}. 409 for a run that has ended.',
    responses: {
      202: { description: 'Stop requested', schema: exportRunSchema },
      409: { description: 'The run has ended (Completed or Failed)', schema: errorBody },
      ...notFound('Unknown export or run'),
      ...refused,
    },
    handler: async ({ services, principal, params, ctx }) => {
      const run = await services.exports.runs.cancel(callerTenant(principal), principal, params.name, params.id, actor(principal));
      ctx.status = 202;
      return run;
    },
  }),
  route({
    method: 'GET', path: '/api/exports/entities/{entity}/download', operationId: 'downloadEntity', summary: 'One-shot CSV of an entity', tags: ['Exports'],
    auth: ['svc_integrator'], audit: 'egress',
    params: { type: 'object', required: ['entity'], properties: { entity: { type: 'string', maxLength: SLUG_MAX_LENGTH, description: 'entity name (case-insensitive)' } } } as const,
    description:
      'Every canonical column in declared order, the default format (comma, header, the CSV byte rules of exports), rows sorted by the entity key then the other columns. Audited as data egress with its rows, bytes and SHA-256 (also sent as headers `X-Row-Count` and `X-Content-SHA256`). Needs one of the entity\'s scopes.',
    responses: {
      200: { description: 'The CSV', schema: { type: 'string' }, contentType: 'text/csv' },
      ...notFound('Unknown entity'),
      409: { description: 'The entity cannot be read yet: a source table or a mapped column does not exist (not ingested yet)', schema: errorBody },
      ...refused,
    },
    handler: async ({ services, principal, params, ctx }) => {
      const file = await services.exports.download(callerTenant(principal), principal, params.entity);
      ctx.state.auditTarget = `${ctx.path} rows=${file.rows} bytes=${file.bytes} sha256=${file.sha256}`;
      ctx.set('Content-Type', 'text/csv; charset=utf-8');
      ctx.set('Content-Disposition', `attachment; filename="${file.filename}"`);
      ctx.set('X-Row-Count', String(file.rows));
      ctx.set('X-Content-SHA256', file.sha256);
      ctx.length = file.bytes;
      // Koa destroys the stream when the answer ends, sent whole or not: the file closes with it.
      ctx.body = file.body;
      return undefined;
    },
  }),
];
