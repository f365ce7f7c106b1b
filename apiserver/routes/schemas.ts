import type { JsonSchema } from '../route.js';

/** Shared response schemas, referenced by several route files. */
export const errorBody: JsonSchema = {
  type: 'object',
  required: ['error'],
  properties: { error: { type: 'string' }, field: { type: 'string' }, hint: { type: 'string' } },
};

export const plainText: JsonSchema = { type: 'string' };

/** The standard refusals of an authenticated route, merged into its responses. */
export function refusals(platform: boolean): Record<number, { description: string; schema?: JsonSchema; contentType?: string }> {
  return platform
    ? {
        401: { description: 'No or invalid token: plain text `authentication required`, header `WWW-Authenticate: Bearer`', schema: plainText, contentType: 'text/plain' },
        403: { description: 'Plain text `missing role svc_integrator`, or an empty body when another required role is missing' , schema: plainText, contentType: 'text/plain' },
      }
    : {
        401: { description: 'No or invalid token (`WWW-Authenticate: Bearer`)', schema: errorBody },
        403: { description: 'Empty body: a required role is missing, or `{tid}` is not the caller\'s tenant' },
      };
}
