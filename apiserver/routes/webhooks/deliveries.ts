import { callerTenant } from '../../../src/auth/principal.js';
import { paging } from '../../paging.js';
import { route, type RouteDecl } from '../../route.js';
import { SUBSCRIPTION_SCOPES } from '../../../src/events/scoped-families.js';
import { deliverySchema, deliveryStatus } from './integrations.js';
import { errorBody, scopeRefusals } from '../schemas.js';

/** The tenant's delivery journal across integrations (spec 1 Platform surface; CONTRACTS.md section 4). */

const DELIVERIES = paging({
  name: 'platform-deliveries', key: ['flag', 'id'], defaultLimit: 50,
  filters: {
    status: deliveryStatus,
    integrationId: {
      type: 'integer', minimum: 1, maximum: Number.MAX_SAFE_INTEGER,
      description: 'Only this integration\'s deliveries (a deleted one\'s too); 404 when the tenant has no integration of that id',
    },
  },
});

export const deliveryRoutes: RouteDecl[] = [
  route({
    method: 'GET', path: '/api/platform/deliveries', operationId: 'listDeliveries', summary: 'Deliveries across the tenant\'s integrations, failures first', tags: ['Deliveries'],
    auth: ['svc_integrator', ['svc_admin', 'svc_superadmin']],
    description:
      'Unsuccessful deliveries first, then the rest, newest first within each. Deleted integrations keep their history here. ' +
      'A scope-bound caller\'s list leaves out the deliveries of integrations they may not hold (docs/integrations.md, "Scope-bound callers"). ' +
      'Paged: with more deliveries after the page, a `Link` header (rel="next") names the next page (`before`).',
    query: DELIVERIES.query,
    responses: {
      200: DELIVERIES.ok('Delivery records', deliverySchema),
      400: { description: 'Invalid query `{error, field}`', schema: errorBody },
      404: { description: '`integrationId` names no integration of the tenant (another tenant\'s included: existence is not confirmed)', schema: errorBody },
      ...scopeRefusals(true, `the integration \`integrationId\` names: ${SUBSCRIPTION_SCOPES}`),
    },
    handler: async ({ services, principal, query, ctx }) =>
      DELIVERIES.answer(
        ctx,
        query,
        await services.integrations.platformDeliveries(callerTenant(principal), principal, DELIVERIES.asked(query), { failedOnly: query.status === 'failed', integrationId: query.integrationId }),
      ),
  }),
  route({
    method: 'POST', path: '/api/platform/deliveries/{id}/replay', operationId: 'replayDelivery', summary: 'Replay a delivery by its id', tags: ['Deliveries'],
    auth: ['svc_integrator', ['svc_admin', 'svc_superadmin']],
    description:
      'As the replay under the integration path: a new delivery with the original body and `X-Svc-Event-Id`, sent at once; 202 with the new ' +
      'record. 404 when the delivery is unknown, belongs to another tenant (its existence is not confirmed), or its integration is deleted.',
    params: { type: 'object', required: ['id'], properties: { id: { type: 'string', maxLength: 40, description: 'Delivery id (an integer; any other value up to 40 characters is unknown: 404, a longer one a 400)' } } },
    responses: {
      202: { description: 'The new delivery record', schema: deliverySchema },
      404: { description: 'Unknown, of another tenant, or its integration is deleted', schema: errorBody },
      ...scopeRefusals(true, `the delivery's integration: ${SUBSCRIPTION_SCOPES}`),
    },
    handler: async ({ services, principal, params, ctx }) => {
      const record = await services.integrations.replay(callerTenant(principal), principal, params.id);
      ctx.status = 202;
      return record;
    },
  }),
];
