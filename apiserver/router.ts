import { METHODS } from 'node:http';
import { setImmediate as turn } from 'node:timers/promises';
import Router, { type Layer } from '@koa/router';
import type { Context } from 'koa';
import { type Principal, satisfies } from '../src/auth/principal.js';
import { AuthenticationRequired, Forbidden, MissingIntegratorRole, PayloadTooLarge, UnsupportedMediaType, ValidationError } from '../src/errors.js';
import { auditCall, audited, recordCall } from './middleware/audit.js';
import { answerJsonText, databaseUnreachable, errorStatus } from './middleware/errors.js';
import { JsonText } from '../src/db/json-text.js';
import { loggableMessage } from '../src/observability/database-errors.js';
import { logger } from '../src/observability/logger.js';
import { annotateContext } from '../src/observability/context.js';
import type { JsonSchema, RouteDecl } from './route.js';
import { closest } from '../src/validation/closest.js';
import { joinField } from '../src/validation/schema-errors.js';
import type { AreaServices } from '../src/runtime/services.js';
import { firstUndecodable } from '../src/validation/undecodable.js';
import { type bodyBytesReader, type StreamedText, Utf8Pieces } from './body-bytes.js';
import { jsonSyntaxMessage } from '../src/validation/json-syntax.js';
import { duplicateJsonKey, findUnstorableText, jsonTextMayHoldUnstorable, MAX_JSON_BODY_BYTES, MAX_JSON_DEPTH, overJsonLimits, scanJsonText, unstorableText } from '../src/validation/input-limits.js';
import { nonCanonicalInteger, validate } from './validation.js';
import { MAX_YAML_BYTES } from '../src/manifests/yaml-limits.js';
import type { YamlRead } from '../src/manifests/yaml-body.js';
import { yamlReadRefusal } from '../src/manifests/yaml-reader.js';
import { indexRouter } from './route-index.js';

const PLATFORM = '/api/platform/';
/** Every spelling of a platform path the router would match (it is case-insensitive), declared or not. */
const PLATFORM_PATHS = /^\/api\/platform(?:\/.*)?$/i;

/** `{tid}` -> `:tid` */
export function koaPath(path: string): string {
  return path.replace(/\{(\w+)\}/g, ':$1');
}

/**
 * How request bodies are read (apiserver/body-bytes.ts): as bytes as they arrive, a text media type only, up to
 * svc.http.body-limit, refused in the words and statuses of koa-body (the body parser it replaces).
 */
export type BodyReader = ReturnType<typeof bodyBytesReader>;

/**
 * Mounts route declarations: authentication and the role gate in the order spec 1 fixes, the tenant
 * path check, the route's rate limit, validation of params, query and body, then the handler.
 */
export function mountRoutes(routes: RouteDecl[], services: AreaServices, readBody: BodyReader): Router {
  // Every method Node's parser lets through is one the router knows: one no declaration serves is
  // a 405 naming those that do (or a 404 on an unknown path), never @koa/router's bare 501 for a
  // method outside its short default list (TRACE, PROPFIND, …) with an empty Allow on unknown paths.
  const router = new Router({ methods: [...METHODS] });
  for (const decl of routes) {
    const audit = audited(decl);
    // One path, so each registration is a Layer (a list of paths would answer the router itself).
    const layers: Layer[] = [];
    if (audit) layers.push(router.register(koaPath(decl.path), [decl.method], auditCall(services, decl)) as Layer);
    layers.push(router.register(koaPath(decl.path), [decl.method], async (ctx: Context) => {
      ctx.state.routePath = decl.path;
      try {
        refuseUnstorableHeaders(ctx);
        const principal = await gate(ctx, decl, services);
        // Refused before anything of the request is read further or the resource runs.
        if (decl.rateLimit) services.rateLimiter.admit(decl.rateLimit, principal?.tenantId);
        refuseUnstorable({ ...ctx.params }, 'path');
        refuseUnstorable({ ...ctx.query }, 'query');
        refuseUndeclaredQuery(decl, ctx.query);
        const params = decl.params ? (validate(decl.params, { ...ctx.params }, 'params') as Record<string, string>) : { ...ctx.params };
        const query = decl.query ? (validate(decl.query, { ...ctx.query }, 'query') as Record<string, unknown>) : {};
        const read = decl.body ? await parseBody(ctx, decl, services, principal, readBody) : undefined;
        const body = decl.body ? validate(decl.body, read!.value, 'body') : undefined;
        const result = await decl.handler({ params, query, body, principal, services, ctx, streamed: read?.streamed });
        // A list the database serialised is answered at once (the frame would turn it into its text after the route).
        if (result instanceof JsonText) answerJsonText(ctx, result);
        else if (result !== undefined) ctx.body = result;
        if (audit) recordCall(services.audit, decl, ctx, ctx.status);
      } catch (err) {
        if (decl.whileDatabaseUnreachable && databaseUnreachable(err)) {
          // The route's own answer instead of the 503 (the event stream's, which a client retries).
          // The audit records the call as the 503 it stands for (nothing left the hub), and its entry
          // goes to the recorder's retries at once.
          logger().warn({ err: loggableMessage(err) }, 'database unavailable');
          ctx.state.databaseUnreachable = true;
          decl.whileDatabaseUnreachable(ctx);
          if (audit) recordCall(services.audit, decl, ctx, 503);
          return;
        }
        if (audit) recordCall(services.audit, decl, ctx, errorStatus(err));
        throw err;
      }
    }) as Layer);
    // @koa/router serves HEAD with a GET's handler: taken back where that handler is more than a read.
    if (decl.method === 'GET' && !servesHead(decl)) for (const layer of layers) layer.methods = layer.methods.filter((m) => m !== 'HEAD');
  }
  // The platform floor holds before routing: a /api/platform/* path no declaration serves (or a
  // method it does not serve) gets the same 401, then 403, as a declared one, so an unauthenticated
  // caller cannot map the route table. Declared routes answer before this; with credentials and
  // svc_integrator the request falls through to the usual 404 or 405.
  router.all(PLATFORM_PATHS, async (ctx: Context, next) => {
    const principal = await services.authenticator.authenticate(ctx.headers, true, ctx.req.rawHeaders);
    if (!principal) throw new AuthenticationRequired(true);
    if (!principal.roles.has('svc_integrator')) throw new MissingIntegratorRole();
    // Not a route of its own: the 405's Allow list names only what declarations serve.
    const state = ctx as Context & { matched?: Array<{ path: unknown }> };
    state.matched = state.matched?.filter((layer) => layer.path !== PLATFORM_PATHS);
    await next();
  });
  indexRouter(router);
  return router;
}

/**
 * Whether HEAD is served on a route, answered by its GET handler without the body: not on a route audited as
 * data egress (the CSV download, the event stream, a row by its hash), where HEAD would do all the work of
 * the GET and record data leaving the hub that never left. There HEAD is a 405 naming GET.
 */
export function servesHead(decl: RouteDecl): boolean {
  return decl.method === 'GET' && decl.audit !== 'egress';
}

async function gate(ctx: Context, decl: RouteDecl, services: AreaServices) {
  if (decl.auth === 'public') return undefined;
  // The declared path, not ctx.path: the router also matches /API/Platform/... and the floor must hold there.
  const platform = decl.path.startsWith(PLATFORM);
  let principal: Principal | undefined;
  try {
    principal = await services.authenticator.authenticate(ctx.headers, platform, ctx.req.rawHeaders);
  } catch (err) {
    // The tenant's and user's state cannot be read: on a route that answers that itself (the event
    // stream), a token without the route's roles is still refused as it would be with the database.
    if (decl.whileDatabaseUnreachable && databaseUnreachable(err)) {
      const roles = await services.authenticator.rolesWithoutDirectory(ctx.headers);
      if (roles && platform && !roles.has('svc_integrator')) throw new MissingIntegratorRole();
      if (roles && !satisfies({ roles }, decl.auth)) throw new Forbidden('role gate');
    }
    throw err;
  }
  if (!principal) throw new AuthenticationRequired(platform);
  annotateContext({ tenantId: principal.tenantId === undefined ? undefined : String(principal.tenantId), userId: principal.userId });
  if (platform && !principal.roles.has('svc_integrator')) throw new MissingIntegratorRole();
  if (!satisfies(principal, decl.auth)) throw new Forbidden('role gate');
  if (ctx.params.tid !== undefined) {
    // `{tid}` is compared as written: a form of a number other than the one way to write it (`03`,
    // `3.0`) is a 400 naming it on every route, as path parameter validation refuses it, never a
    // 403 here and the number elsewhere.
    const odd = nonCanonicalInteger('tid', ctx.params.tid, (decl.params?.properties as Record<string, object> | undefined)?.tid);
    if (odd) throw odd;
    if (ctx.params.tid !== String(principal.tenantId)) throw new Forbidden('tenant mismatch');
  }
  ctx.state.principal = principal;
  return principal;
}

/** The request headers the hub reads; none may carry text PostgreSQL cannot store. */
const READ_HEADERS = ['authorization', 'x-tenant-id', 'x-impersonate-tenant', 'x-user-id', 'last-event-id', 'x-request-id'];

function refuseUnstorableHeaders(ctx: Context): void {
  for (const name of READ_HEADERS) {
    const value = ctx.headers[name];
    if (value === undefined) continue;
    // One value, or the values of a header given more than once (Node joins most; some it keeps as a list).
    const reason = typeof value === 'string' ? unstorableText(value) : value.map(unstorableText).find((r) => r !== undefined);
    if (reason) throw new ValidationError(`header ${name} ${reason}`, name);
  }
}

/**
 * A field path (or message) as an answer shows it: at most `max` characters, cut with `…`. A path names the keys it
 * goes through, and a key may be megabytes long: the answer quoted it whole, twice.
 */
function shownField(field: string, max = 300): string {
  return field.length > max ? `${field.slice(0, max)}…` : field;
}

/** A NUL (or half a surrogate pair) anywhere in a request part: 400 naming the field (`body.spec.name`). */
function refuseUnstorable(value: unknown, root: string): void {
  const found = findUnstorableText(value, root);
  if (found) {
    const field = shownField(found.field);
    throw new ValidationError(`${field} ${found.reason}`, field, 'text may hold neither NUL characters nor unpaired UTF-16 surrogates (the database cannot store them)');
  }
}

/**
 * A query parameter the route does not declare is a 400 naming it, on every route: read by nothing, it
 * would be answered as if it were not given (`?conector=x` listing every run, unfiltered). The names
 * are compared as written (`Limit` is not `limit`). A parameter given twice where the route takes one
 * value is a 400 naming it too: JSON Schema's coercion would read neither value. Checked after the gate
 * and the rate limit, with the other checks of the request, before the handler runs.
 */
function refuseUndeclaredQuery(decl: RouteDecl, query: Record<string, string | string[] | undefined>): void {
  const properties = (decl.query?.properties ?? {}) as Record<string, JsonSchema>;
  const names = Object.keys(properties);
  for (const [name, value] of Object.entries(query)) {
    if (!Object.hasOwn(properties, name)) {
      const shown = shownField(joinField('', name));
      const takes = names.length ? `this route takes ${names.join(', ')}` : 'this route takes no query parameters';
      const near = names.length ? closest(name, names) : undefined;
      throw new ValidationError(
        `unknown query parameter ${shown}: ${takes}`,
        shown,
        near ? `did you mean ${near}?` : 'leave it out: the hub refuses a query parameter a route does not read, rather than answer as if it were not given',
      );
    }
    if (Array.isArray(value) && !takesList(properties[name]!)) {
      throw new ValidationError(`query parameter ${name} is given ${value.length} times: it takes one value`, name, `send ${name} once`);
    }
  }
}

/** Whether a parameter's schema takes a list (`?topic=a&topic=b`): an array type, or an alternative of one. */
function takesList(schema: JsonSchema): boolean {
  const type = schema.type;
  if (type === 'array' || (Array.isArray(type) && type.includes('array'))) return true;
  return [schema.anyOf, schema.oneOf].some((options) => Array.isArray(options) && options.some((option) => takesList(option as JsonSchema)));
}

/** One parameter of a Content-Type: `; name=value`, the value a token or a quoted string (or nothing). */
const PARAMETER = /;\s*([^;=\s]*)\s*(?:=\s*("(?:[^"\\]|\\.)*"|[^;]*))?/g;

/**
 * The charset a request's Content-Type declares, undefined when it declares none. Read from the
 * header itself, not from Koa's `request.charset`, which is '' (so UTF-8) for a Content-Type it
 * cannot parse, or whose charset is empty: `charset=` and `charset=""` name no charset, and two
 * different ones leave the reading to whichever a reader takes; both are a 400 naming `body`.
 */
export function declaredCharset(contentType: string | undefined): string | undefined {
  const given: string[] = [];
  for (const [, name, raw] of (contentType ?? '').matchAll(PARAMETER)) {
    if (name!.toLowerCase() !== 'charset') continue;
    const text = (raw ?? '').trim();
    given.push(text.length >= 2 && text.startsWith('"') && text.endsWith('"') ? text.slice(1, -1).replace(/\\(.)/g, '$1') : text);
  }
  if (!given.length) return undefined;
  if (given.some((c) => c.trim() === '')) throw new ValidationError('body declares an empty charset', 'body', 'name the charset (Content-Type: …; charset=utf-8), or leave the parameter out for UTF-8');
  const distinct = [...new Set(given.map((c) => c.toLowerCase()))];
  if (distinct.length > 1) throw new ValidationError(`body declares ${distinct.length} charsets (${distinct.join(', ')})`, 'body', 'declare one charset');
  return given[0]!;
}

/**
 * A text body's bytes decoded in the charset its Content-Type declares, UTF-8 when it declares none: bytes that are
 * not valid in it are a 400 naming `body` and the offset of the first, a charset the hub cannot decode (or an empty
 * one, or two) a 400 naming it (a route that takes UTF-8 only, as the CSV ingest, refuses other charsets itself).
 * A body in UTF-8 here is at most a JSON or YAML body's 1 MiB, decoded at once; a route that takes larger ones
 * streams them (`streamedBody`: Utf8Pieces decodes them as they arrive), and sends the bytes of another charset here,
 * decoded a slice at a time.
 */
async function textOf(ctx: Context, bytes: Buffer): Promise<string> {
  const charset = declaredCharset(ctx.get('Content-Type')) ?? 'utf-8';
  let decoder: InstanceType<typeof TextDecoder>;
  try {
    decoder = new TextDecoder(charset, { fatal: true });
  } catch {
    throw new ValidationError(`body declares charset ${charset}, which the hub cannot decode`, 'body', 'send the body encoded as UTF-8 (Content-Type: …; charset=utf-8)');
  }
  try {
    if (bytes.length <= DECODE_SLICE_BYTES || decoder.encoding === 'utf-8') return decoder.decode(bytes);
    let text = '';
    for (let at = 0; at < bytes.length; at += DECODE_SLICE_BYTES) {
      text += decoder.decode(bytes.subarray(at, at + DECODE_SLICE_BYTES), { stream: true });
      await turn();
    }
    return text + decoder.decode();
  } catch {
    throw notDecodable(decoder.encoding, firstUndecodable(decoder.encoding, bytes) ?? bytes.length);
  }
}

/** The 400 for a body whose bytes are not valid in its charset (`encoding` as TextDecoder names it), from `offset` on. */
function notDecodable(encoding: string, offset: number): ValidationError {
  const name = encoding === 'utf-8' ? 'UTF-8' : encoding;
  return new ValidationError(`body is not valid ${name}: an invalid byte sequence at byte offset ${offset}`, 'body', 'send the body encoded as UTF-8');
}

/** Whether a body is decoded as UTF-8: its Content-Type declares no charset, or UTF-8 (a charset refused is not). */
function declaresUtf8(ctx: Context): boolean {
  try {
    return new TextDecoder(declaredCharset(ctx.get('Content-Type')) ?? 'utf-8').encoding === 'utf-8';
  } catch {
    return false;
  }
}

/**
 * A body as text, undefined when none was read (another media type, no body); read by a `streamedBody` route in
 * UTF-8, also in the pieces it was decoded in (`streamed`) and whether it holds a NUL, found as it was decoded
 * (`nul`: it needs no search again).
 */
interface BodyText {
  raw: string | undefined;
  streamed?: StreamedText;
  nul?: boolean;
}

/**
 * The body, read as bytes as they arrive: a JSON or YAML body past MAX_JSON_BODY_BYTES refused as soon as its
 * Content-Length or its bytes read pass it (nothing more read or held),
 * another decoded at once once it has ended (at most 1 MiB of UTF-8 for a route that is not `streamedBody`). A
 * `streamedBody` route's in UTF-8 is decoded as it comes, each chunk once, so no step holds the event loop for the
 * whole body (10 MB of text outside latin1, read whole then decoded and searched, held it 45 to 190 ms); in another
 * charset its bytes are kept and decoded once the body has ended.
 */
async function readBodyText(ctx: Context, types: string[], readBody: BodyReader, streamedBody: boolean): Promise<BodyText> {
  const pieces = streamedBody && declaresUtf8(ctx) ? new Utf8Pieces() : undefined;
  const chunks: Buffer[] = [];
  // A route of JSON and YAML only stops reading at their bound: a body past it is not held up to svc.http.body-limit.
  const cap = types.every(isJsonOrYaml) ? { bytes: MAX_JSON_BODY_BYTES, refusal: jsonBodyTooLarge } : undefined;
  const bytes = await readBody(ctx, (chunk) => (pieces ? pieces.write(chunk) : chunks.push(chunk)), cap);
  if (bytes === undefined) return { raw: undefined };
  if (!pieces) return { raw: await textOf(ctx, chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, bytes)) };
  const { text, nul, invalidAt } = pieces.end();
  if (invalidAt !== undefined) throw notDecodable('utf-8', invalidAt);
  return { raw: text, streamed: { pieces: pieces.pieces, bytes }, nul };
}

/** Bytes decoded between two turns of the event loop (a few milliseconds). */
const DECODE_SLICE_BYTES = 1024 * 1024;

const JSON_TYPES = ['application/json', 'application/*+json'];
const isJsonOrYaml = (type: string) => type.includes('json') || type.includes('yaml');

/**
 * A JSON or YAML body past MAX_JSON_BODY_BYTES, refused from its length before it is decoded: reading and
 * checking it would hold the event loop every tenant shares in proportion to its size.
 */
const jsonBodyTooLarge = () =>
  new PayloadTooLarge(
    `body too large: more than the ${MAX_JSON_BODY_BYTES.toLocaleString('en-US')} bytes a JSON or YAML body may hold`,
    'a manifest or a request of the API holds far less; only the CSV ingest reads bodies up to svc.http.body-limit',
  );
const YAML_TYPES = ['application/yaml', 'application/x-yaml', 'text/yaml'];
const tooDeep = () => new ValidationError(`body nests objects and arrays deeper than ${MAX_JSON_DEPTH} levels`, 'body', `at most ${MAX_JSON_DEPTH} levels of nesting are accepted`);

/**
 * A YAML body read on the hub's YAML reader (src/manifests/yaml-reader.ts), never on the event loop: within
 * `svc.http.yaml-read-timeout`, two bodies of a tenant at once, tenants taking turns, its value held to
 * `svc.http.body-limit` of JSON as a JSON body is.
 */
async function readYamlBody(text: string, services: AreaServices, tenantId: number | undefined): Promise<YamlRead> {
  let read: YamlRead;
  try {
    read = await services.yamlReader.manifest(text, 'body', {
      limitMs: services.config.duration('svc.http.yaml-read-timeout'),
      owner: String(tenantId ?? 'public'),
      maxJsonBytes: services.config.bytes('svc.http.body-limit'),
    });
  } catch (err) {
    throw yamlReadRefusal(err, 'send the manifest as JSON (Content-Type: application/json), which is read far faster');
  }
  if ('problem' in read && read.problem.tooLarge) throw new PayloadTooLarge(read.problem.message, read.problem.hint ?? '');
  return read;
}

/**
 * The body in the declared media types: JSON and YAML parsed here (the body reader hands over bytes),
 * with the nesting cap checked as they are read and unstorable text refused, naming its field.
 */
async function parseBody(ctx: Context, decl: RouteDecl, services: AreaServices, principal: Principal | undefined, readBody: BodyReader): Promise<{ value: unknown; streamed?: StreamedText }> {
  const types = decl.bodyTypes ?? ['application/json'];
  const { raw, streamed, nul } = await readBodyText(ctx, types, readBody, decl.streamedBody === true);
  if (ctx.is(...YAML_TYPES) && types.some((t) => t.includes('yaml'))) {
    const text = String(raw ?? '');
    if (Buffer.byteLength(text) > MAX_YAML_BYTES) {
      throw new PayloadTooLarge('YAML body too large: at most 1 MiB', 'JSON and YAML bodies are read up to 1 MiB (as UTF-8): write the repeated parts once, or split the manifest');
    }
    const read = await readYamlBody(text, services, principal?.tenantId);
    if ('problem' in read) throw new ValidationError(shownField(read.problem.message, 2000), read.problem.field === undefined ? undefined : shownField(read.problem.field), read.problem.hint);
    // Held to what the same manifest sent as JSON may be (the reader stops at svc.http.body-limit, before writing more).
    if (read.json.length > MAX_JSON_BODY_BYTES || Buffer.byteLength(read.json) > MAX_JSON_BODY_BYTES) {
      throw new PayloadTooLarge(
        `body (YAML) reads as more JSON than the ${MAX_JSON_BODY_BYTES.toLocaleString('en-US')} bytes a JSON body may hold`,
        'JSON writes more than YAML does (quotes around keys and text, null for an empty value, each alias as the whole value it names): write repeated parts once, or split the manifest',
      );
    }
    // JSON text written by JSON.stringify: no key twice in an object.
    return { value: readJsonBody(read.json, false) };
  }
  if (sentBody(ctx) && !ctx.is(...types)) {
    const sent = ctx.request.type ? `not ${ctx.request.type}` : 'the request names no Content-Type';
    throw new UnsupportedMediaType(`body must be ${types.join(' or ')} (${sent})`, `send Content-Type: ${types[0]}`);
  }
  if (ctx.is(...JSON_TYPES) && typeof raw === 'string') return { value: raw.trim() === '' ? {} : readJsonBody(raw, true) };
  const value = raw ?? {};
  // Text decoded from UTF-8 holds no unpaired surrogate; a NUL found as it was decoded is refused as the search would.
  refuseUnstorable(nul === undefined ? value : nul ? '\u0000' : '', 'body');
  return { value, streamed };
}

/**
 * Whether the request sends a body: a Content-Length above 0, or a body in chunks (`Transfer-Encoding`, no length
 * given: a client streaming what it sends). Its media type is then checked, whichever way it comes.
 */
function sentBody(ctx: Context): boolean {
  return ctx.request.length === undefined ? ctx.get('Transfer-Encoding') !== '' : ctx.request.length > 0;
}

/**
 * A JSON body's text (or a YAML body's, as the reader wrote it) as a value: nesting, the number of objects and arrays
 * and keys given twice checked on the text before or beside `JSON.parse`, and text the database cannot store refused,
 * naming its field (the parsed value is walked for it only when the text shows such a character).
 */
function readJsonBody(text: string, checkKeys: boolean): unknown {
  const scanned = scanJsonText(text);
  if (scanned.tooDeep) throw tooDeep();
  const over = overJsonLimits(scanned);
  if (over) throw new PayloadTooLarge(`body ${over}`, 'a manifest holds far fewer; split the body into several requests');
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    // V8's words for an unexpected token quote the text around it: the caller's data, a secret among it.
    throw new ValidationError(`body is not valid JSON: ${jsonSyntaxMessage(text, err)}`, 'body');
  }
  if (checkKeys) {
    const found = duplicateJsonKey(text, value, scanned.keys, 'body');
    const twice = found === undefined ? undefined : shownField(found);
    if (twice) throw new ValidationError(`${twice} is given twice: a key may appear once in an object`, twice, 'remove one of the two (JSON readers differ on which one wins)');
  }
  if (jsonTextMayHoldUnstorable(text)) refuseUnstorable(value, 'body');
  return value;
}
