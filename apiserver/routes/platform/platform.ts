import { route, type RouteDecl } from '../../route.js';
import { refusals } from '../schemas.js';

export const platformRoutes: RouteDecl[] = [
  route({
    method: 'GET', path: '/api/platform/health', operationId: 'platformHealth', summary: 'Platform health and installed modules', tags: ['Platform'],
    auth: ['svc_integrator'],
    responses: {
      200: {
        description: 'Platform health object',
        schema: {
          type: 'object', required: ['platform', 'modules'],
          properties: { platform: { type: 'string', examples: ['ok'] }, modules: { type: 'object', additionalProperties: { type: 'string' } } },
        },
      },
      ...refusals(true),
    },
    handler: async ({ services }) => {
      await services.ping();
      return { platform: 'ok', modules: services.modules };
    },
  }),
  route({
    method: 'GET', path: '/api/platform/migrations', operationId: 'listMigrations', summary: 'Migration status per schema (read-only; there is no apply endpoint)', tags: ['Platform'],
    auth: ['svc_integrator'],
    responses: {
      200: {
        description: 'One entry per schema',
        schema: {
          type: 'array',
          items: {
            type: 'object', required: ['schema', 'currentVersion', 'pending', 'lastApplied'],
            properties: {
              schema: { type: 'string' }, currentVersion: { type: 'string' }, pending: { type: 'integer' },
              lastApplied: { type: ['string', 'null'], format: 'date-time' },
            },
          },
        },
      },
      ...refusals(true),
    },
    handler: ({ services }) => services.migrationStatus(),
  }),
];
