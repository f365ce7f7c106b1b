import { callerTenant } from '../../../src/auth/principal.js';
import { paging } from '../../paging.js';
import { route, type RouteDecl } from '../../route.js';
import { errorBody, refusals, scopeRefusals } from '../schemas.js';

export const runSchema = {
  type: 'object',
  required: ['id', 'connectorId', 'status', 'startedAt', 'recordsIn', 'recordsOut', 'recordsSkipped', 'deadLetterCount', 'triggeredBy', 'chunkCount'],
  properties: {
    id: { type: 'string', format: 'uuid' },
    connectorId: { type: 'string', format: 'uuid' },
    connector: { type: 'string' },
    endpointId: { type: ['string', 'null'], description: 'endpoint UUID' },
    endpoint: { type: ['string', 'null'], description: 'endpoint id from the manifest' },
    status: { enum: ['Running', 'Completed', 'Partial', 'Failed', 'Cancelled'] },
    startedAt: { type: 'string', format: 'date-time' },
    endedAt: { type: ['string', 'null'], format: 'date-time' },
    recordsIn: { type: 'integer' },
    recordsOut: { type: 'integer' },
    recordsSkipped: { type: 'integer' },
    deadLetterCount: { type: 'integer' },
    triggeredBy: { type: 'string' },
    syncMode: { type: 'string' },
    chunkCount: { type: 'integer' },
    errorMessage: { type: ['string', 'null'] },
  },
};

const deadLetterSchema = {
  type: 'object',
  required: ['id', 'skipReason', 'errorMessage', 'attempts', 'resolution', 'capturedAt'],
  properties: {
    id: { type: 'integer' },
    runId: { type: 'string' },
    connectorId: { type: 'string' },
    endpointId: { type: ['string', 'null'] },
    skipReason: { type: 'string' },
    errorMessage: { type: 'string' },
    attempts: { type: 'integer' },
    resolution: { type: ['string', 'null'], enum: ['replayed', 'discarded', null] },
    capturedAt: { type: 'string', format: 'date-time' },
    payload: {},
    skipDetail: {},
  },
};

/** A dead-letter entry is read and resolved with the scopes of the connector it came from. */
const ENTRY_SCOPE = scopeRefusals(true, "every scope of the entry's connector (a CSV source's, or a deleted connector's, has none)");

const idParam = { type: 'object', required: ['id'], properties: { id: { type: 'string' } } } as const;

const RUNS = paging({
  name: 'runs', key: ['instant', 'uuid'], defaultLimit: 50,
  filters: { connector: { type: 'string', description: 'Only this connector\'s runs: its name (runs of a deleted connector keep theirs) or its id (the `connectorId` of runs, either case); a name no run has lists nothing' } },
});

const DEAD_LETTERS = paging({
  name: 'dlq', key: ['id'], defaultLimit: 100,
  filters: {
    connector: { type: 'string', description: 'connector name or id (the `connectorId` of runs and entries, either case)' },
    run: { type: 'string', description: 'run id (a UUID, either case); any other text lists nothing' },
  },
});

export const runRoutes: RouteDecl[] = [
  route({
    method: 'GET', path: '/api/platform/runs', operationId: 'listRuns', summary: 'Connector runs, newest first', tags: ['Runs'],
    description:
      'Newest first by the instant each run started (to the microsecond, then by id), so a smaller `limit` answers the first runs of a larger one. ' +
      'Paged: with more runs after the page, a `Link` header (rel="next") names the next page (`before`), which holds the runs after the last one shown.',
    auth: ['svc_integrator'],
    query: RUNS.query,
    responses: { 200: RUNS.ok('Run records', runSchema), ...refusals(true) },
    handler: async ({ services, principal, query, ctx }) =>
      RUNS.answer(ctx, query, await services.connectors.runs.list(callerTenant(principal), RUNS.asked(query), { connector: query.connector })),
  }),
  route({
    method: 'GET', path: '/api/platform/runs/{id}', operationId: 'getRun', summary: 'One run record', tags: ['Runs'], auth: ['svc_integrator'],
    params: idParam,
    responses: { 200: { description: 'Run record', schema: runSchema }, 404: { description: 'Unknown run', schema: errorBody }, ...refusals(true) },
    handler: ({ services, principal, params }) => services.connectors.runs.get(callerTenant(principal), params.id),
  }),
  route({
    method: 'POST', path: '/api/platform/runs/{id}/cancel', operationId: 'cancelRun', summary: 'Cancel a running run', tags: ['Runs'],
    auth: ['svc_integrator'], params: idParam,
    description:
      'A run of the process serving the request stops at once; a run of another process at its next heartbeat (`svc.connectors.heartbeat-every`) or page boundary. A retry back-off, a rate-limit wait or a request in flight is interrupted. A run whose process died (no heartbeat for `svc.connectors.run-stale-after`) is ended at once as the interrupted-run sweep ends it: `Failed`, `interrupted: the hub stopped during the run`.',
    responses: {
      202: { description: 'Cancellation requested; the run ends Cancelled (a run whose process died: ended Failed, interrupted, as this record says)', schema: runSchema },
      404: { description: 'Unknown run', schema: errorBody },
      409: { description: 'The run is already terminal', schema: errorBody },
      ...scopeRefusals(true, 'every scope of the run\'s connector (a CSV source\'s run, or a deleted connector\'s, has none)'),
    },
    handler: async ({ services, principal, params, ctx }) => {
      const run = await services.connectors.runs.cancel(callerTenant(principal), principal, params.id);
      ctx.status = 202;
      return run;
    },
  }),
  route({
    method: 'GET', path: '/api/platform/dlq', operationId: 'listDeadLetters', summary: 'Dead-letter entries', tags: ['Dead letters'], auth: ['svc_integrator'],
    description:
      'With `run`: that run\'s whole history (it wins over `connector`). With `connector` (name or id): its unresolved entries. With neither: every active entry. ' +
      'A scope-bound caller lists only the entries of connectors every scope of which they hold; a `run` or `connector` naming only others\' is a 403. ' +
      'Newest (largest id) first; paged as the runs are (`Link` rel="next", `before`).',
    query: DEAD_LETTERS.query,
    responses: { 200: DEAD_LETTERS.ok('Entries (without payloads)', deadLetterSchema), ...ENTRY_SCOPE },
    handler: async ({ services, principal, query, ctx }) =>
      DEAD_LETTERS.answer(ctx, query, await services.connectors.deadLetters.list(callerTenant(principal), principal, DEAD_LETTERS.asked(query), { run: query.run, connector: query.connector })),
  }),
  route({
    method: 'GET', path: '/api/platform/dlq/{id}', operationId: 'getDeadLetter', summary: 'One entry with payload and skipDetail', tags: ['Dead letters'], auth: ['svc_integrator'],
    params: idParam,
    responses: { 200: { description: 'Entry', schema: deadLetterSchema }, 404: { description: 'Unknown or erased', schema: errorBody }, ...ENTRY_SCOPE },
    handler: ({ services, principal, params }) => services.connectors.deadLetters.get(callerTenant(principal), principal, params.id),
  }),
  route({
    method: 'POST', path: '/api/platform/dlq/{id}/replayed', operationId: 'markDeadLetterReplayed', summary: 'Mark an entry replayed', tags: ['Dead letters'], auth: ['svc_integrator'],
    params: idParam, query: { type: 'object', properties: { newRunId: { type: 'string', format: 'uuid' } } },
    responses: {
      204: { description: 'Marked' },
      400: { description: '`newRunId` is not a UUID, or names no run of the tenant', schema: errorBody },
      404: { description: 'Unknown or erased', schema: errorBody },
      409: { description: 'Already discarded, or already replayed by another run (or without a run id, when `newRunId` is given); marking it replayed again otherwise is a 204 that keeps the first record', schema: errorBody },
      ...ENTRY_SCOPE,
    },
    handler: async ({ services, principal, params, query, ctx }) => {
      await services.connectors.deadLetters.markReplayed(callerTenant(principal), principal, params.id, query.newRunId);
      ctx.status = 204;
      return undefined;
    },
  }),
  route({
    method: 'POST', path: '/api/platform/dlq/{id}/discard', operationId: 'discardDeadLetter', summary: 'Discard an entry (resolution recorded, row kept)', tags: ['Dead letters'],
    auth: ['svc_integrator'], params: idParam,
    responses: {
      204: { description: 'Discarded (again: a no-op that keeps the first record)' },
      404: { description: 'Unknown or erased', schema: errorBody },
      409: { description: 'Already replayed', schema: errorBody },
      ...ENTRY_SCOPE,
    },
    handler: async ({ services, principal, params, ctx }) => {
      await services.connectors.deadLetters.discard(callerTenant(principal), principal, params.id);
      ctx.status = 204;
      return undefined;
    },
  }),
  route({
    method: 'DELETE', path: '/api/platform/dlq/{id}', operationId: 'eraseDeadLetter', summary: 'Erase an entry for data-protection reasons', tags: ['Dead letters'],
    auth: ['svc_integrator', 'svc_admin'], params: idParam,
    description: 'Soft-deletes the entry and scrubs its payload; it is excluded everywhere afterwards (404).',
    responses: { 204: { description: 'Erased' }, 404: { description: 'Unknown or already erased', schema: errorBody }, ...ENTRY_SCOPE },
    handler: async ({ services, principal, params, ctx }) => {
      await services.connectors.deadLetters.erase(callerTenant(principal), principal, params.id);
      ctx.status = 204;
      return undefined;
    },
  }),
  route({
    method: 'GET', path: '/api/platform/data/row/{hash}', operationId: 'rowByHash', summary: 'The source row behind a citation row hash', tags: ['Data'],
    auth: ['svc_integrator'], audit: 'egress',
    description: 'A flat JSON object with every value a string: nested objects become dotted keys, arrays keep their JSON text, null is the empty string. Current tenant only.',
    params: { type: 'object', required: ['hash'], properties: { hash: { type: 'string' } } },
    responses: {
      200: { description: 'The row', schema: { type: 'object', additionalProperties: { type: 'string' } } },
      404: { description: 'Nothing resolves', schema: errorBody },
      ...scopeRefusals(true, 'every scope of every connector writing the row\'s table (a CSV source with no manifest has none)'),
    },
    handler: ({ services, principal, params }) => services.connectors.rowByHash(callerTenant(principal), principal, params.hash),
  }),
];
