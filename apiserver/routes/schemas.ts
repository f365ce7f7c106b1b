import type { JsonSchema, ResponseDecl } from '../route.js';

/** Shared response schemas, referenced by several route files. */
export const errorBody: JsonSchema = {
  type: 'object',
  required: ['error'],
  properties: { error: { type: 'string' }, field: { type: 'string' }, hint: { type: 'string' } },
};

export const plainText: JsonSchema = { type: 'string' };

/** Why the caller's tenant or account is refused: JSON `{error}` with either 401 or 403. */
const TENANT_REFUSED =
  'JSON `{error}` when the tenant or the account is refused: an unknown or inactive tenant, the system tenant, impersonation without svc_superadmin, an inactive or locked account';

/**
 * The standard refusals of an authenticated route, merged into its responses: every media type
 * each of them is answered in, with what tells them apart in the description (an empty body has no
 * media type: it is described only).
 */
export function refusals(platform: boolean): Record<number, ResponseDecl> {
  return platform
    ? {
        401: {
          description:
            'No or invalid token: plain text `authentication required`, header `WWW-Authenticate: Bearer`; JSON `{error}` when the token (with the dev bypass: the request) names no tenant',
          content: { 'text/plain': plainText, 'application/json': errorBody },
        },
        403: {
          description: `Plain text \`missing role svc_integrator\`; an empty body when another required role is missing; ${TENANT_REFUSED}`,
          content: { 'text/plain': plainText, 'application/json': errorBody },
        },
      }
    : {
        401: { description: 'No or invalid token (`WWW-Authenticate: Bearer`)', schema: errorBody },
        403: { description: `An empty body when a required role is missing, or \`{tid}\` is not the caller's tenant; ${TENANT_REFUSED}`, schema: errorBody },
      };
}

/**
 * `refusals`, its 403 adding the refusal of a scope-bound caller outside their grants (`needs`: what
 * the write needs them to hold), JSON `{"error": "scope not granted"}`.
 */
export function scopeRefusals(platform: boolean, needs: string): Record<number, ResponseDecl> {
  const floor = refusals(platform);
  return { ...floor, 403: { ...floor[403]!, description: `${floor[403]!.description}; or JSON \`{"error": "scope not granted"}\`: a scope-bound caller does not hold ${needs} (docs/admin.md, "Scopes")` } };
}
