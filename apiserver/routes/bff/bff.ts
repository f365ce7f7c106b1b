import { route, type RouteDecl } from '../../route.js';
import { refusals } from '../schemas.js';

export const bffRoutes: RouteDecl[] = [
  route({
    method: 'GET', path: '/api/bff/v1/me', operationId: 'me', summary: 'The caller: tenant, roles and hub user', tags: ['User'],
    auth: ['svc_user'],
    responses: {
      200: {
        description: 'The caller',
        schema: {
          type: 'object', required: ['tenant', 'roles'],
          properties: {
            tenant: { type: ['object', 'null'], properties: { id: { type: 'integer' }, code: { type: 'string' }, homeId: { type: 'integer' }, impersonating: { type: 'boolean' } } },
            roles: { type: 'array', items: { type: 'string' } },
            user: { type: 'object', properties: { id: { type: 'string' }, login: { type: 'string' }, subject: { type: 'string' }, issuer: { type: 'string' } } },
            via: { enum: ['token', 'dev-bypass'] },
          },
        },
      },
      ...refusals(false),
    },
    handler: async ({ principal, services }) => {
      const p = principal!;
      const tenant = p.tenantId === undefined ? null : await services.directory.tenant(p.tenantId);
      return {
        tenant: tenant ? { id: tenant.id, code: tenant.code, homeId: p.homeTenantId, impersonating: p.impersonating } : null,
        roles: [...p.roles].sort(),
        user: { id: p.userId, login: p.login, subject: p.subject, issuer: p.issuer },
        via: p.via,
      };
    },
  }),
];
