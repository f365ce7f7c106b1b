import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { openApiDocument } from '../../apiserver/openapi.js';
import type { RouteDecl } from '../../apiserver/route.js';

// ajv-formats is CommonJS; its default export arrives wrapped under ESM.
const addFormats = ((addFormatsModule as unknown as { default?: typeof addFormatsModule }).default ?? addFormatsModule) as unknown as (
  ajv: Ajv2020,
) => void;

/** An answer as a test saw it. */
export interface Answer {
  status: number;
  /** The media type of the answer (Content-Type without its parameters), '' without one. */
  type: string;
  body: string;
}

/** The media type of a Content-Type header: lower-case, without parameters; '' for none. */
export const mediaType = (contentType: string | null | undefined): string => String(contentType ?? '').split(';')[0]!.trim().toLowerCase();

type Documented = { responses: Record<string, { content?: Record<string, { schema: Record<string, unknown> }> }> };

/**
 * What the OpenAPI document of a route table says each operation answers, and a judge of answers
 * against it: the fuzzer (test/fuzz/routes.test.ts) and the tenancy matrix hold every answer they
 * get to it. The document is the one the hub serves, built from the same table (hidden routes
 * included: they answer as declared like any other), so a status the document adds to every
 * operation (400, 415, 429) needs no second list here.
 */
export class DeclaredAnswers {
  private readonly paths: Record<string, Record<string, Documented>>;
  private readonly routes: RouteDecl[];
  /** Each operation's path pattern, compiled once. */
  private readonly patterns = new Map<RouteDecl, RegExp>();
  private readonly ajv = new Ajv2020({ strict: false, allowUnionTypes: true });
  private readonly checks = new WeakMap<object, ValidateFunction>();

  constructor(routes: RouteDecl[]) {
    const doc = openApiDocument(
      routes.map((r) => ({ ...r, hidden: false })),
      { version: 'test', devBypass: true },
    ) as { paths: Record<string, Record<string, Documented>> };
    this.paths = doc.paths;
    this.routes = routes;
    for (const decl of routes) this.patterns.set(decl, pathPattern(decl));
    addFormats(this.ajv);
  }

  /**
   * The operation a request for `path` reaches: of the routes whose pattern matches, one declared
   * for exactly that path (`/q/swagger-ui/` rather than `/q/swagger-ui`: the router ignores a
   * trailing slash, the handlers do not), else the one with the most fixed segments
   * (`/api/connectors/apply` before `/api/connectors/{name}`); undefined when none matches.
   */
  operationFor(method: string, path: string): RouteDecl | undefined {
    const bare = path.split('?')[0]!.toLowerCase();
    const rank = (decl: RouteDecl) => (decl.path.toLowerCase() === bare ? 1000 : 0) + decl.path.split('/').filter((segment) => segment && !segment.startsWith('{')).length;
    return this.routes
      .filter((decl) => decl.method === method.toUpperCase() && this.routed(decl, path))
      .sort((a, b) => rank(b) - rank(a))[0];
  }

  /**
   * What is wrong with `answer` to a request for `path` against operation `decl`, or undefined. A
   * status must be one the operation declares or the document adds to it, or the server's own (413
   * a body too large, 431 headers too large, 500 an internal error (the fuzzer refuses it apart; a
   * suite may provoke one on purpose), 502–504 an upstream or the database unavailable, and a 404 or
   * 405 for a path none of the operation's patterns match); its body must be in a media type
   * declared for that status and, as JSON, valid against the declared schema. An empty body is not
   * judged (the refusals' empty 403 is described, not typed), nor a response declared without content.
   */
  problem(decl: RouteDecl, path: string, answer: Answer): string | undefined {
    const response = this.operation(decl).responses[String(answer.status)];
    if (!response) {
      const servers = [413, 431, 500, 502, 503, 504].includes(answer.status) || ((answer.status === 404 || answer.status === 405) && !this.routed(decl, path));
      return servers ? undefined : `${answer.status} is not among the operation's declared answers`;
    }
    if (!response.content || answer.body === '') return undefined;
    const media = response.content[answer.type];
    if (!media) return `a ${answer.status} in ${answer.type || 'no media type'}, declared in ${Object.keys(response.content).join(', ')}`;
    if (answer.type !== 'application/json') return undefined;
    let check = this.checks.get(media.schema);
    if (!check) {
      check = this.ajv.compile(media.schema);
      this.checks.set(media.schema, check);
    }
    let value: unknown;
    try {
      value = JSON.parse(answer.body);
    } catch {
      return `a ${answer.status} declared as JSON whose body is not JSON`;
    }
    return check(value) ? undefined : `a ${answer.status} body its declared schema refuses: ${this.ajv.errorsText(check.errors)}`;
  }

  /** Whether a request's path is one of the operation's (the router matches paths case-insensitively). */
  private routed(decl: RouteDecl, path: string): boolean {
    return (this.patterns.get(decl) ?? pathPattern(decl)).test(path.split('?')[0]!);
  }

  private operation(decl: RouteDecl): Documented {
    const operation = this.paths[decl.path]?.[decl.method.toLowerCase()];
    if (!operation) throw new Error(`${decl.method} ${decl.path} is not in the route table given`);
    return operation;
  }
}

/** An operation's path as a pattern: each `{param}` one segment, a trailing slash allowed. */
function pathPattern(decl: RouteDecl): RegExp {
  const pattern = decl.path.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\{\w+\}/g, '[^/]+');
  return new RegExp(`^${pattern}/?$`, 'i');
}
