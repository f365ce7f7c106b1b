import type { Context } from 'koa';
import type { Tx } from '../../../src/admin/common.js';
import type { Principal } from '../../../src/auth/principal.js';
import type { JsonSchema, ResponseDecl } from '../../route.js';
import type { HubServices } from '../../services.js';
import { errorBody, refusals } from '../schemas.js';

/** Schemas and helpers shared by the tenancy administration routes (tenants, orgs, users, roles). */

export const MAX_ID = Number.MAX_SAFE_INTEGER;

export const tenantIdParam: JsonSchema = { type: 'integer', minimum: 0, maximum: MAX_ID, description: 'Tenant id: must be the caller\'s tenant (or the impersonated one)' };

export function idParam(description: string): JsonSchema {
  return { type: 'integer', minimum: 1, maximum: MAX_ID, description };
}

/** Path parameters: `{tid}` plus the named ids. */
export function tenantParams(ids: Record<string, string> = {}): JsonSchema {
  const names = ['tid', ...Object.keys(ids)];
  return {
    type: 'object',
    required: names,
    properties: { tid: tenantIdParam, ...Object.fromEntries(Object.entries(ids).map(([name, text]) => [name, idParam(text)])) },
  };
}

const timestamp: JsonSchema = { type: 'string', format: 'date-time' };
const optionalText: JsonSchema = { type: ['string', 'null'] };

export const tenantRecord: JsonSchema = {
  type: 'object',
  required: ['id', 'code', 'name', 'description', 'active', 'createdAt', 'updatedAt'],
  properties: {
    id: { type: 'integer' }, code: { type: 'string' }, name: { type: 'string' }, description: optionalText,
    active: { type: 'boolean' }, createdAt: timestamp, updatedAt: timestamp,
  },
};

const orgProperties: Record<string, JsonSchema> = {
  id: { type: 'integer' }, tenantId: { type: 'integer' }, code: { type: 'string' }, name: { type: 'string' }, description: optionalText,
  parentId: { type: ['integer', 'null'], description: 'null for a top-level organisation' },
  active: { type: 'boolean', description: 'false once archived' }, createdAt: timestamp, updatedAt: timestamp,
};
const orgRequired = ['id', 'tenantId', 'code', 'name', 'description', 'parentId', 'active', 'createdAt', 'updatedAt'];

export const orgRecord: JsonSchema = { type: 'object', required: orgRequired, properties: orgProperties };

export const orgTreeNode: JsonSchema = {
  type: 'object',
  required: [...orgRequired, 'children', 'truncated'],
  properties: {
    ...orgProperties,
    children: { type: 'array', description: 'Active child organisations (nodes of this same shape), by code; empty at the depth limit', items: { type: 'object' } },
    truncated: { type: 'boolean', description: 'true when the node has active children that the depth limit left out' },
  },
};

export const userRecord: JsonSchema = {
  type: 'object',
  required: ['id', 'tenantId', 'login', 'name', 'email', 'description', 'issuer', 'subject', 'locked', 'active', 'lastLoginAt', 'createdAt', 'updatedAt'],
  properties: {
    id: { type: 'integer' }, tenantId: { type: 'integer' }, login: { type: 'string' }, name: optionalText, email: optionalText, description: optionalText,
    issuer: { type: ['string', 'null'], description: 'identity provider of a user provisioned at first login; null for a user created here' },
    subject: { type: ['string', 'null'] },
    locked: { type: 'boolean' }, active: { type: 'boolean', description: 'false once deactivated' },
    lastLoginAt: { type: ['string', 'null'], format: 'date-time' }, createdAt: timestamp, updatedAt: timestamp,
  },
};

export const roleRecord: JsonSchema = {
  type: 'object',
  required: ['id', 'name', 'description'],
  properties: { id: { type: 'integer' }, name: { type: 'string' }, description: optionalText },
};

export const scopesBody: JsonSchema = {
  type: 'object',
  required: ['scopes'],
  additionalProperties: false,
  properties: {
    scopes: {
      type: 'array', maxItems: 1000,
      description: 'The complete list (it replaces the stored one); duplicates collapse; an empty list unbinds the user',
      items: { type: 'string', minLength: 1, maxLength: 200 },
    },
  },
};

export const scopesRecord: JsonSchema = {
  type: 'object',
  required: ['scopes'],
  properties: { scopes: { type: 'array', items: { type: 'string' }, description: 'Stored scopes, sorted; empty when the user is not scope-bound' } },
};

/** Error responses other than the gate's, each `{error, field?, hint?}`. */
export function errors(statuses: Record<number, string>): Record<number, ResponseDecl> {
  return Object.fromEntries(Object.entries(statuses).map(([status, description]) => [Number(status), { description, schema: errorBody }]));
}

export const tenantRefusals = refusals(false);

/** Runs `fn` in one transaction bound to the caller's tenant (checked equal to `{tid}` by the gate). */
export function inTenant<T>(services: HubServices, principal: Principal | undefined, fn: (tx: Tx) => Promise<T>): Promise<T> {
  return services.db.withTenant(principal?.tenantId, fn);
}

/** 201 with a body. */
export function created<T>(ctx: Context, body: T): T {
  ctx.status = 201;
  return body;
}

/** 204, no body. */
export function noContent(ctx: Context): undefined {
  ctx.status = 204;
  return undefined;
}
