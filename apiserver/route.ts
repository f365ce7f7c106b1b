import type { Context } from 'koa';
import type { Principal, RoleGate } from '../src/auth/principal.js';
import type { HubServices } from './services.js';

/** A JSON Schema (draft 2020-12, as OpenAPI 3.1 uses). */
export type JsonSchema = Record<string, unknown>;

export interface ResponseDecl {
  description: string;
  /** Omitted: no body. */
  schema?: JsonSchema;
  /** Default application/json. */
  contentType?: string;
}

export interface RouteInput<P = Record<string, string>, Q = Record<string, unknown>, B = unknown> {
  params: P;
  query: Q;
  body: B;
  principal: Principal | undefined;
  services: HubServices;
  ctx: Context;
}

/**
 * One HTTP operation, declared once: path, roles, schemas and handler. The router enforces the gate
 * and validates against the schemas; the OpenAPI document is generated from the same object.
 */
export interface RouteDecl {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  /** OpenAPI form: `/api/tenants/{tid}/orgs/{id}`. */
  path: string;
  operationId: string;
  summary: string;
  tags: string[];
  description?: string;
  /** `'public'`: no authentication. Otherwise the roles every caller must hold. */
  auth: 'public' | RoleGate;
  /** Path parameters (object schema; values arrive as strings and are coerced). */
  params?: JsonSchema;
  query?: JsonSchema;
  body?: JsonSchema;
  /** Media types the body may come in (default application/json). */
  bodyTypes?: string[];
  responses: Record<number, ResponseDecl>;
  /** Returns the JSON body of a 200 (or sets ctx itself and returns undefined). */
  handler: (input: RouteInput) => Promise<unknown> | unknown;
  /** Excluded from /q/openapi (the document and the console themselves). */
  hidden?: boolean;
  /**
   * Audit: mutating methods (POST, PUT, PATCH, DELETE) are recorded unless `false`; a read that
   * lets data leave the hub says `'egress'` and is recorded too.
   */
  audit?: false | 'egress';
}

export function route(decl: RouteDecl): RouteDecl {
  return decl;
}
