import { route, type RouteDecl } from '../../route.js';
import { refusals } from '../schemas.js';

const catalogEntrySchema = {
  type: 'object',
  required: ['module', 'type', 'description', 'payload'],
  properties: {
    module: { type: 'string' },
    type: { type: 'string' },
    description: { type: 'string' },
    payload: { type: 'object', additionalProperties: { enum: ['long', 'string', 'boolean', 'map'] } },
  },
};

export const eventRoutes: RouteDecl[] = [
  route({
    method: 'GET', path: '/api/platform/events', operationId: 'listEventTypes', summary: 'The event catalog loaded from the module declarations', tags: ['Events'],
    auth: ['svc_integrator'],
    description: '`decision.*` types are a dynamic family minted by processes and workflows; they are delivered but never catalogued.',
    responses: { 200: { description: 'Catalog entries', schema: { type: 'array', items: catalogEntrySchema } }, ...refusals(true) },
    handler: ({ services }) => services.catalog.entries().map((e) => ({ module: e.module, type: e.type, description: e.description, payload: e.payload })),
  }),
];
