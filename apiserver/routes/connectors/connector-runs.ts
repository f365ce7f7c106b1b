import { actor, callerTenant } from '../../../src/auth/principal.js';
import { csvPieces } from '../../../src/connectors/csv-ingest.js';
import { ValidationError } from '../../../src/errors.js';
import { route, type RouteDecl } from '../../route.js';
import { declaredCharset } from '../../router.js';
import { runSchema } from './runs.js';
import { errorBody, scopeRefusals } from '../schemas.js';
import { CONNECTOR_SCOPES, connectorNameParam, endpointIdProperty } from './connectors.js';

export const connectorRunRoutes: RouteDecl[] = [
  route({
    method: 'POST', path: '/api/connectors/{name}/runs', operationId: 'runConnector', summary: 'Start one run per enabled endpoint (or the one named)', tags: ['Connectors'],
    auth: ['svc_integrator'],
    description: 'Manual runs ignore the window fence. The endpoints run are those of the connector as applied when the runs are recorded (a re-apply just before included). Answers once the runs are recorded; follow them on /api/platform/runs/{id} or the live stream (`connector.run.*`).',
    params: connectorNameParam,
    body: { type: 'object', additionalProperties: false, properties: { endpoint: endpointIdProperty } },
    responses: {
      202: {
        description: 'Runs started',
        schema: {
          type: 'object', required: ['runs'],
          properties: { runs: { type: 'array', items: { type: 'object', required: ['id', 'endpointId'], properties: { id: { type: 'string' }, endpointId: { type: 'string' }, endpoint: { type: 'string' } } } } },
        },
      },
      400: {
        description:
          'The endpoint named is disabled in the connector as applied when the runs are recorded (a re-apply that disabled it after the connector was read included): `{error: "endpoint E is disabled", field: "endpoint"}`; ' +
          'or invalid input `{error, field?, hint?}` (the body against its schema, malformed JSON, a NUL character)',
        schema: errorBody,
      },
      404: { description: 'Unknown connector or endpoint (also an endpoint named that a re-apply removed after the connector was read: `connector NAME has no endpoint E: a re-apply of the connector removed it …`)', schema: errorBody },
      409: {
        description:
          '`connector NAME has a run in flight`: a run of one of these endpoints is Running (one run in flight per endpoint); `hint` names it. ' +
          '`connector NAME was re-applied while its runs were being started`: a re-apply removed one of its endpoints meanwhile (`hint` names it); no run was started, ask again. ' +
          '`connector NAME has no enabled endpoint: every endpoint of it is disabled (enabled: false in its manifest); no run was started`: asked for all its endpoints, none is enabled (in the connector as applied when the runs were to be recorded)',
        schema: errorBody,
      },
      ...scopeRefusals(false, CONNECTOR_SCOPES),
    },
    handler: async ({ services, principal, params, body, ctx }) => {
      const triggered = await services.connectors.runs.start(callerTenant(principal), principal, params.name, { endpoint: body?.endpoint, triggeredBy: `manual:${actor(principal)}` });
      triggered.done.catch(() => undefined); // every outcome is recorded on the run itself
      ctx.status = 202;
      return { runs: triggered.runs };
    },
  }),
  route({
    method: 'POST', path: '/api/platform/sources/csv/ingest', operationId: 'ingestCsv', summary: 'Upsert a CSV body into ext.<table> as one run', tags: ['Connectors'],
    auth: ['svc_integrator'],
    description:
      'Body `text/csv` (UTF-8) with a header line. Every row is upserted into `ext.<table>` keyed by the `key` column and stored whole in `data`; each column whose name is a lower-case identifier is also a text column of the table. ' +
      'Answers the finished run record. New or changed rows emit `data.row.changed` inside the ingestion transaction when an integration, rule or process subscribes to it.',
    query: {
      type: 'object', required: ['connector', 'table', 'key'],
      properties: { connector: { type: 'string' }, table: { type: 'string', description: '`ext.<name>` or `<name>`' }, key: { type: 'string', description: 'the identity column' } },
    },
    bodyTypes: ['text/csv'],
    streamedBody: true,
    body: { type: 'string' },
    responses: {
      200: { description: 'The run', schema: runSchema },
      400: {
        description:
          'Bad CSV, table or key, nothing stored; also a header naming more new columns than the table has room for (a table holds at most 1,600, counting its own 8, its promoted and its dropped columns): `the CSV header names N columns ext.T does not have: at most M more fit (…)`',
        schema: errorBody,
      },
      409: {
        description:
          'An ingest into the same connector and table is in flight: `{error, hint}` naming its run; or the table is new and the tenant has 1,000 tables already (`this tenant has 1000 tables, the most it may have (1000): …`), no run recorded',
        schema: errorBody,
      },
      ...scopeRefusals(true, 'every scope of the connector named (a CSV source of no manifest has none), and of every other connector writing the table'),
    },
    handler: ({ services, principal, query, body, ctx, streamed }) => {
      const tenantId = callerTenant(principal);
      // Rows are stored as UTF-8 text as sent: a body declared in another charset is refused, not converted.
      const charset = declaredCharset(ctx.get('Content-Type'));
      if (charset && !/^utf-?8$/i.test(charset)) throw new ValidationError(`the CSV body must be UTF-8; it was declared ${charset} (convert it, or send Content-Type: text/csv; charset=utf-8)`, 'body');
      // Read through the pieces it was decoded in: the body of 10 MB is never copied whole (as a trim of it would).
      const csv = streamed ?? body;
      if (typeof body !== 'string' || csvPieces(csv).every((piece) => piece.trim() === '')) {
        throw new ValidationError('body must be CSV text with a header line', 'body');
      }
      return services.connectors.runs.ingestCsv(tenantId, principal, {
        connector: query.connector,
        table: query.table,
        key: query.key,
        csv,
        triggeredBy: `csv:${actor(principal)}`,
      });
    },
  }),
];
