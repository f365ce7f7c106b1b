import { actor, callerTenant } from '../../../src/auth/principal.js';
import { MAX_SECRETS_PER_TENANT, SECRET_NAME_PATTERN } from '../../../src/platform/secrets/store.js';
import { type JsonSchema, route, type RouteDecl } from '../../route.js';
import { errorBody, refusals } from '../schemas.js';

const VALUE_MAX = 65_536;
const DESCRIPTION_MAX = 1_000;

const secretMetadataSchema: JsonSchema = {
  type: 'object',
  required: ['name', 'description', 'createdAt', 'updatedAt', 'rotatedAt'],
  additionalProperties: false,
  properties: {
    name: { type: 'string' },
    description: { type: ['string', 'null'] },
    createdAt: { type: 'string', format: 'date-time' },
    updatedAt: { type: 'string', format: 'date-time' },
    rotatedAt: { type: ['string', 'null'], format: 'date-time', description: 'When the value was last rotated (null: never)' },
  },
};

const nameParam = {
  type: 'object',
  required: ['name'],
  properties: { name: { type: 'string', minLength: 1, maxLength: 200, description: 'Secret name (connector configs reference it as `secret:NAME`)' } },
} as const;

const valueSchema = { type: 'string', minLength: 1, maxLength: VALUE_MAX, description: 'The secret value: write-only, stored encrypted, never returned' } as const;
const descriptionSchema = { type: ['string', 'null'], maxLength: DESCRIPTION_MAX } as const;

const notFound = { 404: { description: 'No secret of that name (or it was deleted)', schema: errorBody } };
const invalid = { 400: { description: 'Invalid body `{error, field}`', schema: errorBody } };

export const secretRoutes: RouteDecl[] = [
  route({
    method: 'GET', path: '/api/platform/secrets', operationId: 'listSecrets', summary: 'Secrets of the tenant (metadata only, never values)', tags: ['Secrets'],
    auth: ['svc_integrator'],
    responses: { 200: { description: 'Secret metadata, by name', schema: { type: 'array', items: secretMetadataSchema } }, ...refusals(true) },
    handler: ({ services, principal }) => services.secrets.list(callerTenant(principal)),
  }),
  route({
    method: 'GET', path: '/api/platform/secrets/{name}', operationId: 'getSecret', summary: 'One secret (metadata only, never the value)', tags: ['Secrets'],
    auth: ['svc_integrator'],
    params: nameParam,
    responses: { 200: { description: 'Secret metadata', schema: secretMetadataSchema }, ...notFound, ...refusals(true) },
    handler: ({ services, principal, params }) => services.secrets.get(callerTenant(principal), params.name),
  }),
  route({
    method: 'POST', path: '/api/platform/secrets', operationId: 'createSecret', summary: 'Store a secret (value encrypted at rest)', tags: ['Secrets'],
    auth: ['svc_integrator', 'svc_admin'],
    description:
      'Emits `platform.secret.created`. Names are unique among the tenant\'s secrets that are not deleted: a deleted name can be created again (a new secret; the deleted one stays as history without its value).',
    body: {
      type: 'object', required: ['name', 'value'], additionalProperties: false,
      properties: {
        name: { type: 'string', pattern: SECRET_NAME_PATTERN, description: 'Letters, digits, `_`, `.`, `-` (at most 128, not starting with `.` or `-`)' },
        value: valueSchema,
        description: descriptionSchema,
      },
    },
    responses: {
      201: { description: 'Created: the metadata (header `Location`)', schema: secretMetadataSchema },
      ...invalid,
      409: { description: `A secret of that name exists, or the tenant has ${MAX_SECRETS_PER_TENANT} stored secrets (the most it may have)`, schema: errorBody },
      ...refusals(true),
    },
    handler: async ({ services, principal, body, ctx }) => {
      const created = await services.secrets.create(callerTenant(principal), body, actor(principal));
      ctx.status = 201;
      ctx.set('Location', `/api/platform/secrets/${encodeURIComponent(created.name)}`);
      return created;
    },
  }),
  route({
    method: 'PUT', path: '/api/platform/secrets/{name}', operationId: 'rotateSecret', summary: 'Rotate a secret\'s value (sets rotatedAt)', tags: ['Secrets'],
    auth: ['svc_integrator', 'svc_admin'],
    description: 'Body `{value, description?}`: a present `description` replaces the old one (null clears it). Emits `platform.secret.updated`.',
    params: nameParam,
    body: { type: 'object', required: ['value'], additionalProperties: false, properties: { value: valueSchema, description: descriptionSchema } },
    responses: { 204: { description: 'Rotated' }, ...invalid, ...notFound, ...refusals(true) },
    handler: async ({ services, principal, params, body, ctx }) => {
      await services.secrets.rotate(callerTenant(principal), params.name, body, actor(principal));
      ctx.status = 204;
      return undefined;
    },
  }),
  route({
    method: 'DELETE', path: '/api/platform/secrets/{name}', operationId: 'deleteSecret', summary: 'Delete a secret (soft)', tags: ['Secrets'],
    auth: ['svc_integrator', 'svc_admin'],
    description: 'The secret disappears from reads and resolution; its row stays without its value. Emits `platform.secret.deleted`.',
    params: nameParam,
    responses: { 204: { description: 'Deleted' }, ...notFound, ...refusals(true) },
    handler: async ({ services, principal, params, ctx }) => {
      await services.secrets.remove(callerTenant(principal), params.name, actor(principal));
      ctx.status = 204;
      return undefined;
    },
  }),
];
