import type { Context } from 'koa';
import type { Principal, RoleGate } from '../src/auth/principal.js';
import type { RateLimitBucket } from '../src/ratelimit/limiter.js';
import type { AreaServices } from '../src/runtime/services.js';
import type { StreamedText } from './body-bytes.js';

/** A JSON Schema (draft 2020-12, as OpenAPI 3.1 uses). */
export type JsonSchema = Record<string, unknown>;

export interface ResponseDecl {
  description: string;
  /** Omitted: no body. */
  schema?: JsonSchema;
  /** Default application/json. */
  contentType?: string;
  /** A response answered in several media types, each with its schema (instead of `schema`). */
  content?: Record<string, JsonSchema>;
  /** Response headers the client reads (OpenAPI Header Objects: `description`, `schema`). */
  headers?: Record<string, { description: string; schema: JsonSchema }>;
}

/**
 * The TypeScript type of a value that an `as const` JSON Schema accepts, for the keywords the routes
 * use (type, enum, const, properties, required, items, anyOf/oneOf). Handlers get their params,
 * query and body typed from the very schemas the router validates them against.
 */
export type FromSchema<S> = S extends { const: infer C }
  ? C
  : S extends { enum: readonly (infer E)[] }
    ? E
    : S extends { type: readonly (infer T extends string)[] }
      ? FromType<T, S>
      : S extends { type: infer T extends string }
        ? FromType<T, S>
        : S extends { anyOf: readonly (infer U)[] }
          ? FromSchema<U>
          : S extends { oneOf: readonly (infer U)[] }
            ? FromSchema<U>
            : unknown;

type FromType<T extends string, S> = T extends 'string'
  ? string
  : T extends 'integer' | 'number'
    ? number
    : T extends 'boolean'
      ? boolean
      : T extends 'null'
        ? null
        : T extends 'array'
          ? S extends { items: infer I }
            ? FromSchema<I>[]
            : unknown[]
          : T extends 'object'
            ? FromObject<S>
            : unknown;

type RequiredKeys<S> = S extends { required: readonly (infer R)[] } ? R : never;

type FromObject<S> = S extends { properties: infer P }
  ? Flat<
      { -readonly [K in keyof P as K extends RequiredKeys<S> ? K : never]: FromSchema<P[K]> } & {
        -readonly [K in keyof P as K extends RequiredKeys<S> ? never : K]?: FromSchema<P[K]>;
      }
    >
  : Record<string, unknown>;

type Flat<T> = { [K in keyof T]: T[K] };

/** What a handler receives for a schema, or for none. */
type Given<S, Otherwise> = [S] extends [undefined] ? Otherwise : FromSchema<S>;

export interface RouteInput<P = Record<string, string>, Q = Record<string, unknown>, B = unknown> {
  params: P;
  query: Q;
  body: B;
  principal: Principal | undefined;
  services: AreaServices;
  ctx: Context;
  /**
   * A `streamedBody` route's body in UTF-8 as it was decoded: its text in the pieces it arrived in (`body` is them
   * joined; read through them, it is never copied whole) and its size in bytes. Undefined on other routes, for a body
   * in another charset, and when no body was read.
   */
  streamed?: StreamedText;
}

/**
 * One HTTP operation, declared once: path, roles, schemas and handler. The router enforces the gate
 * and validates against the schemas; the OpenAPI document is generated from the same object.
 */
export interface RouteDecl<P extends JsonSchema | undefined = JsonSchema | undefined, Q extends JsonSchema | undefined = JsonSchema | undefined, B extends JsonSchema | undefined = JsonSchema | undefined> {
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
  params?: P;
  query?: Q;
  body?: B;
  /** Media types the body may come in (default application/json). */
  bodyTypes?: string[];
  /**
   * The body is decoded as UTF-8 chunk by chunk as it arrives (apiserver/body-bytes.ts), not once it has ended:
   * for a body that may be as large as svc.http.body-limit (the CSV ingest), so that decoding it never holds the
   * event loop for the whole body at once. The same limit and refusals.
   */
  streamedBody?: true;
  /**
   * What /q/openapi shows for the body when the handler checks more than the router does (the
   * connector manifest: its own validator answers every issue with a field path). Default: `body`.
   */
  documentedBody?: JsonSchema;
  responses: Record<number, ResponseDecl>;
  /** Returns the JSON body of a 200 (or sets ctx itself and returns undefined). */
  handler(input: RouteInput<Given<P, Record<string, string>>, Given<Q, Record<string, unknown>>, Given<B, unknown>>): Promise<unknown> | unknown;
  /** Excluded from /q/openapi (the document and the console themselves). */
  hidden?: boolean;
  /**
   * Audit: mutating methods (POST, PUT, PATCH, DELETE) are recorded unless `false`; a read that
   * lets data leave the hub says `'egress'` and is recorded too.
   */
  audit?: false | 'egress';
  /**
   * The inbound rate-limit bucket the operation counts against (per tenant, 60-second fixed window,
   * `svc.ratelimit.<bucket>.rpm`). The router refuses with 429 after authentication and the role
   * gate, before the body is read and the handler runs; /q/openapi documents the 429.
   */
  rateLimit?: RateLimitBucket;
  /**
   * The answer this route gives, instead of the 503 `database unavailable`, when the database cannot be
   * reached in authentication (the tenant's and user's state) or in the handler; sets ctx itself. Only
   * that condition: every refusal (401, 403, …) stays as it is.
   */
  whileDatabaseUnreachable?: (ctx: Context) => void;
}

/**
 * Declares a route. The schemas are taken as written (`const` type parameters), so the handler's
 * `params`, `query` and `body` have the types those schemas validate: no casts in handlers.
 */
export function route<const P extends JsonSchema | undefined = undefined, const Q extends JsonSchema | undefined = undefined, const B extends JsonSchema | undefined = undefined>(
  decl: RouteDecl<P, Q, B>,
): RouteDecl {
  return decl as unknown as RouteDecl;
}
