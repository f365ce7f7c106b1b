import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Validator } from '@seriousme/openapi-schema-validator';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { parse as parseYaml } from 'yaml';
import { connectorManifestSchema } from '../src/connectors/manifest/schema.js';
import { packageVersion } from '../src/package-root.js';
import { startTestHub, type TestHub } from '../test/harness/hub.js';
import { allRoutes } from './app.js';
import { INVALID_INPUT, openApiDocument } from './openapi.js';
import { route, type JsonSchema, type RouteDecl } from './route.js';
import { validate } from './validation.js';

// ajv-formats is CommonJS; its default export arrives wrapped under ESM.
const addFormats = ((addFormatsModule as unknown as { default?: typeof addFormatsModule }).default ?? addFormatsModule) as unknown as (
  ajv: Ajv2020,
) => void;

/** The body schemas as the router reads them (no coercion), for which bodies may be left out. */
const ajv2020 = new Ajv2020({ strict: false });
addFormats(ajv2020);

type Operation = {
  operationId: string;
  summary: string;
  tags: string[];
  description?: string;
  parameters: { name: string; in: string; required: boolean; schema: JsonSchema }[];
  responses: Record<string, { description: string; content?: Record<string, { schema: JsonSchema }> }>;
  requestBody?: { required: boolean; content: Record<string, { schema: JsonSchema }> };
  security: Record<string, string[]>[];
  'x-svc-roles': unknown;
};
type Doc = {
  openapi: string;
  info: { title: string; version: string; description: string };
  components: { securitySchemes: Record<string, Record<string, string>> };
  paths: Record<string, Record<string, Operation>>;
};

/**
 * Probes mounted through the real pipeline: path parameters (with and without a params schema),
 * a query, a body, a role gate with an alternative, and a hidden route that must stay out.
 */
const probes: RouteDecl[] = [
  route({
    method: 'GET', path: '/api/tenants/{tid}/probes/{id}', operationId: 'openapiProbeGet', summary: 'Probe with path parameters', tags: ['Probe'],
    auth: ['svc_user', ['svc_admin', 'svc_superadmin']],
    params: {
      type: 'object', required: ['tid', 'id'],
      properties: { tid: { type: 'integer', description: 'Tenant id' }, id: { type: 'string', format: 'uuid' } },
    },
    query: { type: 'object', required: ['limit'], properties: { limit: { type: 'integer', minimum: 1 }, cursor: { type: 'string' } } },
    responses: { 200: { description: 'The probe', schema: { type: 'object', properties: { id: { type: 'string' } } } }, 404: { description: 'No such probe' } },
    handler: ({ params }) => ({ id: params.id }),
  }),
  route({
    method: 'PUT', path: '/api/probes/{name}', operationId: 'openapiProbePut', summary: 'Probe whose path parameter has no schema', tags: ['Probe'],
    auth: [],
    body: { type: 'object', required: ['value'], properties: { value: { type: 'string' } } },
    bodyTypes: ['application/json', 'application/yaml'],
    responses: { 200: { description: 'Stored', schema: { type: 'object' } } },
    handler: () => ({}),
  }),
  route({
    method: 'GET', path: '/api/probes/hidden', operationId: 'openapiProbeHidden', summary: 'Hidden probe', tags: ['Probe'], auth: 'public',
    responses: { 200: { description: 'Nothing' } }, hidden: true,
    handler: () => ({}),
  }),
];

/** What the document must list: every declared route of the build, plus the probes, less the hidden ones. */
const declared = (): RouteDecl[] => [...allRoutes(), ...probes].filter((decl) => !decl.hidden);

const key = (method: string, path: string) => `${method.toUpperCase()} ${path}`;

describe('GET /q/openapi', () => {
  let hub: TestHub;
  let doc: Doc;

  beforeAll(async () => {
    hub = await startTestHub({}, probes);
    const res = await fetch(`${hub.url}/q/openapi`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    doc = (await res.json()) as Doc;
  });

  afterAll(async () => {
    await hub?.stop();
  });

  it('is an OpenAPI 3.1.0 document of this build with a bearer scheme', () => {
    expect(doc.openapi).toBe('3.1.0');
    expect(doc.info.title).toBe('svc-hub API');
    expect(doc.info.version).toBe(packageVersion());
    expect(doc.info.description).toContain('development bypass');
    expect(doc.components.securitySchemes.bearer).toEqual({ type: 'http', scheme: 'bearer', bearerFormat: 'JWT' });
  });

  it('is valid against the OpenAPI 3.1 schema, by an independent validator, and every $ref resolves', async () => {
    // @seriousme/openapi-schema-validator: the OpenAPI Initiative's published JSON Schema for 3.1
    // (with its dialect for the Schema Objects), not this repository's reading of it.
    const validator = new Validator();
    const result = await validator.validate(structuredClone(doc) as unknown as Record<string, unknown>);
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
    expect(validator.version).toBe('3.1');
    expect(() => validator.resolveRefs()).not.toThrow();
  });

  it('the declarations themselves have unique operations and operation ids', () => {
    const routes = [...allRoutes(), ...probes];
    expect(new Set(routes.map((d) => key(d.method, d.path))).size).toBe(routes.length);
    expect(new Set(routes.map((d) => d.operationId)).size).toBe(routes.length);
    expect(allRoutes().length).toBeGreaterThan(0);
  });

  it('lists exactly the non-hidden declared routes', () => {
    const listed = Object.entries(doc.paths).flatMap(([path, item]) => Object.keys(item).map((method) => key(method, path)));
    expect(listed.sort()).toEqual(declared().map((d) => key(d.method, d.path)).sort());
    expect(listed).not.toContain('GET /api/probes/hidden');
    expect(Object.keys(doc.paths).filter((p) => p.startsWith('/q/openapi') || p.startsWith('/q/swagger-ui'))).toEqual([]);
  });

  it.each(declared().map((d) => [key(d.method, d.path), d] as const))('%s: operation id, summary and tags', (_, decl) => {
    const op = doc.paths[decl.path]![decl.method.toLowerCase()]!;
    expect(op.operationId).toBe(decl.operationId);
    expect(op.summary).toBe(decl.summary);
    expect(op.tags).toEqual(decl.tags);
  });

  it.each(declared().map((d) => [key(d.method, d.path), d] as const))('%s: security and x-svc-roles follow the declared gate', (_, decl) => {
    const op = doc.paths[decl.path]![decl.method.toLowerCase()]!;
    expect(op['x-svc-roles']).toEqual(decl.auth);
    if (decl.auth === 'public') {
      expect(op.security).toEqual([]);
    } else {
      expect(op.security).toEqual([{ bearer: [] }]);
      expect(op.description).toMatch(/Roles: .+\./);
      for (const role of decl.auth.flat()) expect(op.description).toContain(role);
    }
  });

  it.each(declared().map((d) => [key(d.method, d.path), d] as const))('%s: one path parameter per {x} segment, and the query', (_, decl) => {
    const op = doc.paths[decl.path]![decl.method.toLowerCase()]!;
    const segments = [...decl.path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]);
    const pathParams = op.parameters.filter((p) => p.in === 'path');
    expect(pathParams.map((p) => p.name)).toEqual(segments);
    for (const p of pathParams) {
      expect(p.required).toBe(true);
      const declaredSchema = (decl.params?.properties as Record<string, JsonSchema> | undefined)?.[p.name];
      expect(p.schema).toEqual(declaredSchema ?? { type: 'string' });
    }
    const queryProps = (decl.query?.properties ?? {}) as Record<string, JsonSchema>;
    const required = new Set((decl.query?.required ?? []) as string[]);
    const queryParams = op.parameters.filter((p) => p.in === 'query');
    expect(queryParams.map((p) => p.name)).toEqual(Object.keys(queryProps));
    for (const p of queryParams) {
      expect(p.schema).toEqual(queryProps[p.name]);
      expect(p.required).toBe(required.has(p.name));
    }
    expect(op.parameters.length).toBe(pathParams.length + queryParams.length);
  });

  it.each(declared().map((d) => [key(d.method, d.path), d] as const))('%s: responses and request body as declared', (_, decl) => {
    const op = doc.paths[decl.path]![decl.method.toLowerCase()]!;
    // A rate-limited route also documents its 429 (the router adds it: apiserver/rate-limit.test.ts checks it), and a
    // route with a body its 415 (a body in another media type: apiserver/routes/connectors/connectors.test.ts), and
    // a route taking YAML its 429 (a third YAML body of a tenant under way: apiserver/input-limits.test.ts).
    const hasBody = (decl.documentedBody ?? decl.body) !== undefined;
    // Every operation also lists the router's own 400 (invalid input, a NUL character) when it declares none.
    const takesYaml = decl.bodyTypes?.some((type) => type.includes('yaml')) ?? false;
    const added = [...(decl.rateLimit || (takesYaml && !decl.responses[429]) ? ['429'] : []), ...(hasBody && !decl.responses[415] ? ['415'] : []), ...(decl.responses[400] ? [] : ['400'])];
    expect(Object.keys(op.responses).sort()).toEqual([...Object.keys(decl.responses), ...added].sort());
    if (hasBody) expect(op.responses['415']!.content).toEqual({ 'application/json': { schema: expect.objectContaining({ type: 'object' }) } });
    if (!decl.responses[400]) expect(op.responses['400']).toEqual({ description: INVALID_INPUT.description, content: { 'application/json': { schema: INVALID_INPUT.schema } } });
    for (const [status, response] of Object.entries(decl.responses)) {
      const documented = op.responses[status]!;
      expect(documented.description).toBe(response.description);
      if (response.content) {
        expect(documented.content).toEqual(Object.fromEntries(Object.entries(response.content).map(([type, schema]) => [type, { schema }])));
      } else if (response.schema) {
        expect(documented.content).toEqual({ [response.contentType ?? 'application/json']: { schema: response.schema } });
      } else {
        expect(documented.content).toBeUndefined();
      }
    }
    if (decl.body) {
      // Optional exactly when an absent body (read as {}) passes the body schema, and the one documented.
      expect(op.requestBody?.required).toBe(!ajv2020.validate(decl.body, {}) || (decl.documentedBody !== undefined && !ajv2020.validate(decl.documentedBody, {})));
      expect(Object.keys(op.requestBody!.content)).toEqual(decl.bodyTypes ?? ['application/json']);
      for (const media of Object.values(op.requestBody!.content)) expect(media.schema).toEqual(decl.documentedBody ?? decl.body);
    } else {
      expect(op.requestBody).toBeUndefined();
    }
  });

  it('documents every operation with at least one success response', () => {
    for (const decl of declared()) {
      const statuses = Object.keys(doc.paths[decl.path]![decl.method.toLowerCase()]!.responses);
      expect(statuses.some((s) => /^2\d\d$/.test(s))).toBe(true);
    }
  });

  it('every schema in the document compiles with ajv (JSON Schema 2020-12)', () => {
    const ajv = new Ajv2020({ strict: true, allowUnionTypes: true });
    addFormats(ajv);
    const schemas: [string, JsonSchema][] = [];
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(item)) {
        for (const [status, response] of Object.entries(op.responses)) {
          for (const [media, { schema }] of Object.entries(response.content ?? {})) schemas.push([`${method} ${path} ${status} ${media}`, schema]);
        }
        for (const p of op.parameters) schemas.push([`${method} ${path} ${p.in} ${p.name}`, p.schema]);
        for (const [media, { schema }] of Object.entries(op.requestBody?.content ?? {})) schemas.push([`${method} ${path} body ${media}`, schema]);
      }
    }
    expect(schemas.filter(([where]) => / \d{3} /.test(where)).length).toBeGreaterThanOrEqual(declared().length);
    const failures: string[] = [];
    for (const [where, schema] of schemas) {
      try {
        ajv.compile(schema);
      } catch (err) {
        failures.push(`${where}: ${(err as Error).message}`);
      }
    }
    expect(failures).toEqual([]);
  });

  it('the manifest paths carry the Connector manifest schema as their request body, in every media type', () => {
    for (const path of ['/api/connectors/apply', '/api/connectors/validate']) {
      const content = doc.paths[path]!.post!.requestBody!.content;
      expect(Object.keys(content).sort()).toEqual(['application/json', 'application/x-yaml', 'application/yaml', 'text/yaml']);
      for (const { schema } of Object.values(content)) {
        expect(schema).toMatchObject({ type: 'object', required: connectorManifestSchema.required, properties: { spec: { type: 'object' } } });
        expect(Object.keys(schema.properties as object).sort()).toEqual(Object.keys(connectorManifestSchema.properties as object).sort());
      }
    }
  });

  it('an apply route, which refuses a request without a body, documents its body as required', async () => {
    for (const path of ['/api/connectors/apply', '/api/entities/apply', '/api/exports/apply', '/api/workflows/apply', '/api/processes/apply']) {
      const res = await fetch(`${hub.url}${path}`, { method: 'POST', headers: { 'X-Tenant-ID': '1' } });
      expect({ path, status: res.status, body: await res.json() }).toEqual({ path, status: 400, body: { error: 'apiVersion is required', field: 'apiVersion' } });
      expect({ path, required: doc.paths[path]!.post!.requestBody!.required }).toEqual({ path, required: true });
    }
  });

  it('a manifest name in a path longer than a manifest takes (63) is a 400 naming it, not quoted back in a 404', async () => {
    const long = 'n'.repeat(4000);
    for (const path of [`/api/exports/${long}`, `/api/entities/${long}`, `/api/processes/${long}`, `/api/platform/workflows/${long}`, `/api/connectors/${long}`, `/api/exports/entities/${long}/download`]) {
      const res = await fetch(`${hub.url}${path}`, { headers: { 'X-Tenant-ID': '1' } });
      const text = await res.text();
      const where = path.replace(long, 'LONG');
      expect({ where, status: res.status, quoted: text.includes(long), field: (JSON.parse(text) as { field?: string }).field }).toEqual({
        where,
        status: 400,
        quoted: false,
        field: where.endsWith('/download') ? 'entity' : 'name',
      });
    }
  });

  it('is public: no token or tenant needed', async () => {
    const res = await fetch(`${hub.url}/q/openapi`, { headers: { authorization: 'Bearer not-a-token' } });
    expect(res.status).toBe(200);
  });

  it('?format=yaml returns the same document as YAML, without anchors', async () => {
    const res = await fetch(`${hub.url}/q/openapi?format=yaml`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/yaml/);
    const text = await res.text();
    expect(text).toMatch(/^openapi: 3\.1\.0$/m);
    expect(text).not.toMatch(/^\s*[\w"'-]+:\s*[&*]\w+/m);
    expect(parseYaml(text)).toEqual(doc);
  });

  it('Accept: application/yaml also selects YAML', async () => {
    const res = await fetch(`${hub.url}/q/openapi`, { headers: { accept: 'application/yaml' } });
    expect(res.headers.get('content-type')).toMatch(/^application\/yaml/);
    expect(parseYaml(await res.text())).toEqual(doc);
  });
});

describe('openApiDocument', () => {
  it('describes the dev bypass only when it is on', () => {
    const on = openApiDocument(allRoutes(), { version: '1.2.3', devBypass: true }) as Doc;
    const off = openApiDocument(allRoutes(), { version: '1.2.3', devBypass: false }) as Doc;
    expect(on.info.version).toBe('1.2.3');
    expect(on.info.description).toContain('development bypass');
    expect(off.info.description).not.toContain('development bypass');
    expect(off.paths).toEqual(on.paths);
  });
});

describe('route declarations', () => {
  it('every integer path or query parameter is bounded, at most 2^53 - 1 (Number.MAX_SAFE_INTEGER)', () => {
    // A value past what a JSON number holds exactly was rounded (an id naming another row) or, past
    // a bigint, reached the database as an out-of-range number naming no field: each one is a 400
    // naming the parameter (`tenantId must be at most 9007199254740991`) instead.
    const integers: string[] = [];
    const unbounded: string[] = [];
    for (const decl of allRoutes()) {
      for (const part of ['params', 'query'] as const) {
        const properties = (decl[part]?.properties ?? {}) as Record<string, JsonSchema>;
        for (const [name, schema] of Object.entries(properties)) {
          const types = ([] as unknown[]).concat(schema.type ?? []);
          if (!types.includes('integer')) continue;
          const where = `${key(decl.method, decl.path)} ${part}.${name}`;
          integers.push(where);
          if (typeof schema.maximum !== 'number' || schema.maximum > Number.MAX_SAFE_INTEGER) unbounded.push(where);
        }
      }
    }
    expect(integers.length).toBeGreaterThan(50);
    expect(integers).toContain('POST /api/platform/hooks/{hookId}/toggle query.tenantId');
    expect(unbounded).toEqual([]);
  });

  it('every string a request body names, every manifest name in a path, and every name or id in a connector path or query, is bounded: a longer one is a 400 naming it, never quoted back', () => {
    // `POST /api/connectors/{name}/runs {endpoint}` echoed a 100 KB endpoint name back in its 404, and
    // every `/api/<kind>/{name}` its name (`export NAME not found`). Bounded: a maxLength, an enum or
    // const, a format, or an anchored pattern without an open-ended repetition. Tenant and
    // organisation codes are refused by their handler with a fixed text that does not quote them
    // (docs/admin.md states it), so they keep that text.
    const fixedText = new Set(['POST /api/tenants body.code', 'POST /api/tenants/{tid}/orgs body.code']);
    const bounded = (schema: JsonSchema) =>
      typeof schema.maxLength === 'number' ||
      schema.enum !== undefined ||
      schema.const !== undefined ||
      schema.format !== undefined ||
      (typeof schema.pattern === 'string' && /^\^.*\$$/.test(schema.pattern) && !/[*+]|\{\d+,\}/.test(schema.pattern));
    const strings: string[] = [];
    const unbounded: string[] = [];
    for (const decl of allRoutes()) {
      const connectorRoute = decl.path.startsWith('/api/connectors/');
      for (const part of ['body', 'params', 'query'] as const) {
        const properties = (decl[part]?.properties ?? {}) as Record<string, JsonSchema>;
        for (const [name, schema] of Object.entries(properties)) {
          if (!([] as unknown[]).concat(schema.type ?? []).includes('string')) continue;
          if (part !== 'body' && !connectorRoute && !(part === 'params' && (name === 'name' || name === 'entity'))) continue;
          const where = `${key(decl.method, decl.path)} ${part}.${name}`;
          strings.push(where);
          if (!bounded(schema) && !fixedText.has(where)) unbounded.push(where);
        }
      }
    }
    expect(strings).toContain('POST /api/connectors/{name}/runs body.endpoint');
    expect(strings).toContain('POST /api/connectors/{name}/endpoints/{id}/purge params.id');
    expect(strings).toContain('GET /api/exports/entities/{entity}/download params.entity');
    expect(strings).toContain('DELETE /api/processes/{name} params.name');
    expect(unbounded).toEqual([]);
  });

  it('an integer parameter written otherwise than the one way is refused for its range when its value is out of it, on every route', () => {
    // "must be written 0, not -0" named a value the bounds refuse too (`limit=-0` with a minimum of 1).
    const refusal = (schema: JsonSchema, part: 'params' | 'query', name: string, text: string) => {
      try {
        validate(schema, { [name]: text }, part);
      } catch (err) {
        const e = err as { message: string; field?: string };
        return { message: e.message, field: e.field };
      }
      return undefined;
    };
    let checked = 0;
    for (const decl of allRoutes()) {
      for (const part of ['params', 'query'] as const) {
        const schema = decl[part];
        for (const [name, property] of Object.entries((schema?.properties ?? {}) as Record<string, JsonSchema>)) {
          if (property.type !== 'integer' || typeof property.minimum !== 'number' || typeof property.maximum !== 'number') continue;
          const where = `${key(decl.method, decl.path)} ${part}.${name}`;
          const { minimum, maximum } = property;
          const below = minimum - 1;
          for (const text of [below < 0 ? `-0${-below}` : `0${below}`, `${below}.0`, ...(below === 0 ? ['-0', '+0'] : [])]) {
            expect({ where, text, refusal: refusal(schema!, part, name, text) }).toEqual({ where, text, refusal: { message: `${name} must be at least ${minimum}`, field: name } });
          }
          for (const text of [`0${maximum + 1}`, `+${maximum + 1}`, `${maximum + 1}.0`]) {
            expect({ where, text, refusal: refusal(schema!, part, name, text) }).toEqual({ where, text, refusal: { message: `${name} must be at most ${maximum}`, field: name } });
          }
          expect({ where, refusal: refusal(schema!, part, name, `0${minimum + 1}`) }).toEqual({ where, refusal: { message: `${name} must be written ${minimum + 1}, not 0${minimum + 1}`, field: name } });
          checked++;
        }
      }
    }
    expect(checked).toBeGreaterThan(50);
  });
});
