import { type ResponseDecl, route, type RouteDecl } from '../../route.js';
import { errorBody, refusals } from '../schemas.js';

/**
 * The default scope of the calling hub user: the scope a chat reads when it names none. Stored on
 * the user (core.users, row-level security). A scope-bound user may choose only a granted scope (or
 * `all`); the empty string clears it. docs/admin.md, "Default scope".
 */

const defaultScopeRecord = {
  type: 'object',
  required: ['defaultScope'],
  additionalProperties: false,
  properties: {
    defaultScope: {
      type: 'string', maxLength: 200,
      description: 'A scope name (no whitespace; surrounding whitespace is dropped), `all` for no specific scope, or the empty string: none',
    },
  },
} as const;

const noUser = { description: '`no user record on this hub for user_id <id>`: the call names no hub user of the tenant', schema: errorBody };

/** The platform floor's refusals, and the JSON ones these routes add under the same statuses. */
function platformRefusals(scopeRefusal: boolean): Record<number, ResponseDecl> {
  const floor = refusals(true);
  const out: Record<number, ResponseDecl> = {
    ...floor,
    401: { ...floor[401]!, description: `${floor[401]!.description}; or JSON \`{"error": "no tenant in security context"}\` when the token names no tenant` },
  };
  if (scopeRefusal) {
    out[403] = { ...floor[403]!, description: `${floor[403]!.description}; or JSON \`{"error": "scope not granted"}\`: a scope-bound user chose a scope outside the grants` };
  }
  return out;
}

export const defaultScopeRoutes: RouteDecl[] = [
  route({
    method: 'GET', path: '/api/platform/users/me/scope', operationId: 'getMyDefaultScope', summary: 'The caller\'s default scope', tags: ['Users'],
    auth: ['svc_integrator'],
    description: 'The scope a chat reads when it names none; the empty string when none is set.',
    responses: {
      200: { description: 'The default scope', schema: defaultScopeRecord },
      ...platformRefusals(false),
      404: noUser,
    },
    handler: async ({ services, principal }) => ({ defaultScope: await services.admin.users.defaultScope(principal?.tenantId, principal) }),
  }),
  route({
    method: 'PUT', path: '/api/platform/users/me/scope', operationId: 'setMyDefaultScope', summary: 'Set or clear the caller\'s default scope', tags: ['Users'],
    auth: ['svc_integrator'],
    description:
      'The empty string clears it. A scope-bound user (one with scope grants) may choose only a granted scope or `all`: anything else is ' +
      'refused with 403 `scope not granted`. Answers the default scope as stored.',
    body: defaultScopeRecord,
    responses: {
      200: { description: 'The default scope as stored', schema: defaultScopeRecord },
      400: { description: 'Invalid body (`field` names it)', schema: errorBody },
      ...platformRefusals(true),
      404: noUser,
    },
    handler: async ({ services, principal, body }) => ({
      defaultScope: await services.admin.users.setDefaultScope(principal?.tenantId, principal, body.defaultScope),
    }),
  }),
];
