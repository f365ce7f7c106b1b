import { describeGate } from '../src/auth/principal.js';
import type { JsonSchema, ResponseDecl, RouteDecl } from './route.js';
import { errorBody } from './routes/schemas.js';
import { validate } from './validation.js';

interface OpenApiInfo {
  version: string;
  devBypass: boolean;
}

/**
 * The OpenAPI 3.1 document of the running build, generated from the route declarations (the same
 * objects the router enforces), never written by hand beside them.
 */
export function openApiDocument(routes: RouteDecl[], info: OpenApiInfo): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const decl of routes) {
    if (decl.hidden) continue;
    const operation: Record<string, unknown> = {
      operationId: decl.operationId,
      summary: decl.summary,
      tags: decl.tags,
      parameters: [...pathParameters(decl.path, decl.params), ...queryParameters(decl.query)],
      responses: Object.fromEntries(Object.entries(decl.responses).map(([status, response]) => [status, documentedResponse(response)])),
    };
    // Every operation validates what it is sent (path, query, body, a NUL anywhere, and with the dev
    // bypass the tenant header): its 400 is listed even where the route declares none of its own.
    (operation.responses as Record<string, unknown>)['400'] ??= documentedResponse(INVALID_INPUT);
    if (decl.documentedBody ?? decl.body) {
      (operation.responses as Record<string, unknown>)['415'] ??= documentedResponse({
        description: `A body in another media type than ${(decl.bodyTypes ?? ['application/json']).join(' or ')}: \`{error, hint}\``,
        schema: errorBody,
      });
    }
    if (decl.bodyTypes?.some((type) => type.includes('yaml'))) {
      (operation.responses as Record<string, unknown>)['429'] ??= {
        description: 'Two YAML bodies of the caller\'s tenant are being read already (the hub reads YAML on a thread of its own, two bodies of a tenant at once): `{error}`; send it again when they are answered, or as JSON',
        headers: { 'Retry-After': { description: 'Whole seconds to wait', schema: { type: 'integer', minimum: 1 } } },
        content: { 'application/json': { schema: errorBody } },
      };
    }
    if (decl.rateLimit) {
      (operation.responses as Record<string, unknown>)['429'] = {
        description: `Rate limit \`${decl.rateLimit}\` exhausted for the caller's tenant: \`{"error": "rate limit exceeded"}\``,
        headers: { 'Retry-After': { description: 'Whole seconds until the window resets', schema: { type: 'integer', minimum: 1 } } },
        content: { 'application/json': { schema: errorBody } },
      };
      operation['x-svc-rate-limit'] = decl.rateLimit;
    }
    const notes: string[] = [];
    if (decl.description) notes.push(decl.description);
    // The gate as declared (`'public'` or the role list), for tools that read the document.
    operation['x-svc-roles'] = decl.auth;
    if (decl.auth === 'public') {
      operation.security = [];
    } else {
      operation.security = [{ bearer: [] }];
      notes.push(`Roles: ${describeGate(decl.auth) || 'any authenticated caller'}.`);
    }
    if (decl.rateLimit) {
      notes.push(`Rate limit: bucket \`${decl.rateLimit}\`, \`svc.ratelimit.${decl.rateLimit}.rpm\` requests per minute per tenant in a fixed 60-second window (0: off); past it, 429 with \`Retry-After\`.`);
    }
    if (notes.length) operation.description = notes.join('\n\n');
    const body = decl.documentedBody ?? decl.body;
    if (body) {
      operation.requestBody = {
        // Optional when an absent body (read as `{}`) passes the route's body schema.
        required: !acceptsEmptyBody(decl),
        content: Object.fromEntries((decl.bodyTypes ?? ['application/json']).map((type) => [type, { schema: body }])),
      };
    }
    paths[decl.path] ??= {};
    paths[decl.path]![decl.method.toLowerCase()] = operation;
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'svc-hub API',
      version: info.version,
      description:
        'Multi-tenant integration hub. Every call carries `Authorization: Bearer <token>`; roles come from the token\'s `realm_access.roles` and the tenant from its `tenant_id` claim.' +
        ' An operation takes the query parameters it lists and no other: one it does not list is a 400 naming it, never ignored.' +
        (info.devBypass ? ' This instance runs with the development bypass: no token, tenant from `X-Tenant-ID`.' : ''),
    },
    servers: [{ url: '/' }],
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' } },
    },
    paths,
  };
}

/**
 * One parameter per `{name}` segment of the path (OpenAPI requires each to be declared), described
 * by the matching property of the params schema when there is one, else as a string.
 */
function pathParameters(path: string, schema: JsonSchema | undefined): unknown[] {
  const properties = (schema?.properties ?? {}) as Record<string, JsonSchema>;
  return [...path.matchAll(/\{(\w+)\}/g)].map(([, name]) => {
    const property = properties[name!] ?? { type: 'string' };
    return { name, in: 'path', required: true, ...(property.description ? { description: property.description } : {}), schema: property };
  });
}

function queryParameters(schema: JsonSchema | undefined): unknown[] {
  if (!schema) return [];
  const properties = (schema.properties ?? {}) as Record<string, JsonSchema>;
  const required = new Set((schema.required ?? []) as string[]);
  return Object.entries(properties).map(([name, property]) => ({
    name,
    in: 'query',
    required: required.has(name),
    ...(property.description ? { description: property.description } : {}),
    schema: property,
  }));
}

/** The 400 of an operation that declares none: what the router itself refuses. */
export const INVALID_INPUT: ResponseDecl = {
  description:
    'Invalid input `{error, field?, hint?}`: a path or query parameter, or the body, against its schema (an integer parameter written with a leading zero, a sign or a fraction, `03` or `3.0`, is refused naming it); ' +
    'a query parameter the operation does not list, or one it takes once given twice (`unknown query parameter conector: this route takes connector, limit, before`); malformed JSON or YAML; ' +
    'a NUL character or half of a surrogate pair in any of them or in a token claim; with the dev bypass, a tenant header that is not a tenant id, or X-Tenant-ID, X-Impersonate-Tenant or X-User-ID given twice',
  schema: errorBody,
};

function documentedResponse(response: ResponseDecl): Record<string, unknown> {
  const content = response.content ?? (response.schema ? { [response.contentType ?? 'application/json']: response.schema } : undefined);
  return {
    description: response.description,
    ...(response.headers ? { headers: response.headers } : {}),
    ...(content ? { content: Object.fromEntries(Object.entries(content).map(([type, schema]) => [type, { schema }])) } : {}),
  };
}

/**
 * Whether a request without a body (which the router reads as `{}`) passes the route's body schema, and
 * the schema the document shows for it: a manifest route's router schema takes any object, but its
 * handler checks the manifest (`apiVersion is required`), so a body its documented schema refuses
 * empty is required.
 */
function acceptsEmptyBody(decl: RouteDecl): boolean {
  for (const schema of [decl.body, decl.documentedBody]) {
    if (!schema) continue;
    try {
      validate(schema, {}, 'body');
    } catch {
      return false;
    }
  }
  return true;
}
