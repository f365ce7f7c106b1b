import type { Context } from 'koa';
import type { JsonSchema, ResponseDecl } from '../../route.js';
import { errorBody, refusals } from '../schemas.js';

/** Schemas and helpers shared by the tenancy administration routes (tenants, orgs, users, roles). */

const MAX_ID = Number.MAX_SAFE_INTEGER;

export const tenantIdParam = { type: 'integer', minimum: 0, maximum: MAX_ID, description: 'Tenant id: must be the caller\'s tenant (or the impersonated one)' } as const;

export function idParam(description: string) {
  return { type: 'integer', minimum: 1, maximum: MAX_ID, description } as const;
}

type IdSchema = ReturnType<typeof idParam>;

/** Path parameters: `{tid}` plus the named ids (integers, as the handlers receive them). */
export function tenantParams<const N extends string = never>(ids: Record<N, string> = {} as Record<N, string>) {
  const names = ['tid', ...Object.keys(ids)] as Array<'tid' | N>;
  return {
    type: 'object',
    required: names,
    properties: { tid: tenantIdParam, ...(Object.fromEntries(Object.entries(ids).map(([name, text]) => [name, idParam(text as string)])) as Record<N, IdSchema>) },
  } as const;
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

export const scopesBody = {
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
} as const;

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
