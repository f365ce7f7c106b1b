import { composeHeaders, DEFAULT_HEADERS } from '../auth/headers.js';
import { resolveTemplate, resolveTemplates } from '../auth/template.js';
import type { AuthParts } from '../auth/types.js';
import type { Position } from '../pagination/types.js';
import type { ConnectorSpec, EndpointSpec, HttpMethod } from '../types.js';
import { soapAccept, soapEnvelope, soapHeaders } from '../soap/envelope.js';
import { maskUserinfo } from '../../observability/url-redaction.js';
import { CredentialError, PaginationError, quote, RequestInvalidError, SHORT_QUOTE_LIMIT } from './errors.js';
import { redactSecrets } from '../../observability/secret-forms.js';
import { queryCredentials } from '../auth/stated-credentials.js';
import { ExactNumber, jsonText } from './exact-json.js';
import { encodeComponent } from './utf8-escape.js';

/** One composed HTTP request. */
export interface ComposedRequest {
  url: URL;
  method: HttpMethod;
  headers: Record<string, string>;
  body?: string;
  /** How messages name the position this request reads (`page 3`, `cursor "x"`, `the next link <url>`). */
  position: string;
  /** Whether the request carries a position taken from an earlier page (a 404/410 then means Partial). */
  carriesPosition: boolean;
}

/** What stays the same for every request of one read. */
export interface RequestPlan {
  endpointUrl: URL;
  method: HttpMethod;
  headers: Record<string, string>;
  /** The resolved body of a non-GraphQL POST/PUT/PATCH. */
  body?: string;
  /** The resolved static GraphQL variables. */
  variables?: Record<string, unknown>;
  /** The resolved SOAP session token (soap.session.token_env), also among auth.secrets as every resolved name is. */
  soapToken?: string;
  auth: AuthParts;
}

/** `base_url` + the endpoint path (GraphQL: `graphql_path`), keeping a base path prefix. */
export function endpointUrl(connector: ConnectorSpec, endpoint: EndpointSpec): URL {
  const path = endpoint.graphql ? connector.graphqlPath || '/graphql' : endpoint.path;
  const base = connector.baseUrl.replace(/\/+$/, '');
  const rest = path === '' || path.startsWith('/') || path.startsWith('?') ? path : `/${path}`;
  try {
    return new URL(base + rest);
  } catch {
    throw new RequestInvalidError(`the address ${quote(maskUserinfo(base + rest), SHORT_QUOTE_LIMIT)} is not a valid URL; fix spec.base_url (apply reads it as a request does)`);
  }
}

/**
 * Resolves everything fixed for a read: URL, method, headers (declared, then auth), body template
 * and static variables (`{{env:NAME}}` answered by `lookup`, values resolved beforehand). Every value
 * a name resolves to joins the plan's `auth.secrets`, masked in every message built from the plan
 * as the auth credentials are (an upstream error may echo a header or the body back).
 */
export function planRequests(connector: ConnectorSpec, endpoint: EndpointSpec, lookup: (name: string) => string | undefined, auth: AuthParts): RequestPlan {
  const resolved = new Set<string>();
  const env = (name: string) => {
    const value = lookup(name);
    if (value !== undefined) resolved.add(value);
    return value;
  };
  // A credential the path's query states as written (the dev profile only) is kept out of messages as a resolved one is.
  // So is one in a base_url stored before apply refused a query in it.
  for (const stated of [...queryCredentials(endpoint.path), ...queryCredentials(connector.baseUrl)]) resolved.add(stated.value).add(stated.raw);
  const headers = composeHeaders(connector.headers ?? [], env, auth, endpoint.soap ? { ...DEFAULT_HEADERS, Accept: soapAccept(endpoint.soap) } : DEFAULT_HEADERS);
  const plan: RequestPlan = { endpointUrl: endpointUrl(connector, endpoint), method: endpoint.graphql ? 'POST' : endpoint.method, headers, auth };
  if (endpoint.soap) {
    for (const [name, value] of Object.entries(soapHeaders(endpoint.soap))) {
      for (const known of Object.keys(headers)) if (known.toLowerCase() === name.toLowerCase()) delete headers[known];
      headers[name] = value;
    }
    const session = endpoint.soap.session;
    if (session) {
      const token = env(session.token_env);
      if (token === undefined) throw new CredentialError(session.token_env, `endpoint ${endpoint.id} soap.session.token_env`);
      plan.soapToken = token;
    }
  } else if (endpoint.graphql) {
    plan.variables = (resolveTemplates(endpoint.variables ?? {}, env, `endpoint ${endpoint.id} variables`) ?? {}) as Record<string, unknown>;
    setDefault(headers, 'Content-Type', 'application/json');
  } else if (endpoint.body !== undefined && (endpoint.method === 'POST' || endpoint.method === 'PUT' || endpoint.method === 'PATCH')) {
    const where = `endpoint ${endpoint.id} body`;
    if (typeof endpoint.body === 'string') {
      plan.body = resolveTemplate(endpoint.body, env, where);
      setDefault(headers, 'Content-Type', isJson(plan.body) ? 'application/json' : 'text/plain; charset=utf-8');
    } else {
      plan.body = jsonText(resolveTemplates(endpoint.body, env, where));
      setDefault(headers, 'Content-Type', 'application/json');
    }
  }
  if (resolved.size > 0) plan.auth = { ...auth, secrets: [...auth.secrets, ...resolved] };
  return plan;
}

/**
 * The request for one position. Every request of a watermark run carries the stored mark as
 * `param`, so the source filters every page alike (an offset into a filtered set only means something
 * with the same filter; a next link that already carries it keeps the same value); a whole next URL (link strategies) must stay on the endpoint's origin, so that
 * credentials never travel to a host the manifest did not name. Auth query parameters go on every
 * request.
 */
export function composeRequest(
  plan: RequestPlan,
  endpoint: EndpointSpec,
  position: Position,
  previous: URL | undefined,
  watermark: string | undefined,
): ComposedRequest {
  let url: URL;
  let describe = position.describe;
  if (position.url !== undefined) {
    url = new URL(position.url, previous ?? plan.endpointUrl);
    if (url.origin !== plan.endpointUrl.origin) {
      // The rule holds without credentials too: the hub reads only from the address the manifest names.
      const credentials = plan.auth.secrets.length > 0 || plan.auth.headers.length > 0 || plan.auth.query.length > 0;
      const away = quote(url.origin, SHORT_QUOTE_LIMIT);
      throw new PaginationError(
        credentials
          ? `the next link leaves the source (${away}, not ${plan.endpointUrl.origin}); refusing to send the connector's credentials there`
          : `the next link leaves the source (${away}, not ${plan.endpointUrl.origin}); next links are followed only on the origin of spec.base_url`,
      );
    }
  } else {
    url = new URL(plan.endpointUrl);
    for (const [name, value] of Object.entries(position.params ?? {})) setQueryParameter(url, name, value);
  }
  if (watermark !== undefined && endpoint.incremental.mode === 'watermark') {
    setQueryParameter(url, endpoint.incremental.param, watermark);
  }
  for (const [name, value] of plan.auth.query) setQueryParameter(url, name, value);

  let body = plan.body;
  if (endpoint.soap) body = soapEnvelope(endpoint.soap, position.soap ?? { pageSize: 0, startRow: 0 }, plan.soapToken);
  else if (endpoint.graphql) body = jsonText({ query: endpoint.query ?? '', variables: { ...plan.variables, ...position.variables } });
  if (position.url !== undefined) describe = `${describe} ${shownUrl(url, plan.auth)}`;
  return { url, method: plan.method, headers: plan.headers, body, position: describe, carriesPosition: previous !== undefined };
}

/**
 * Sets one query parameter of `url` (replacing every parameter of that name, as
 * `URLSearchParams.set` does) and leaves the other parameters as written: `searchParams.set`
 * serialises the whole query again (`%20` becomes `+`, `~` becomes `%7E`), which breaks a next link
 * signed over its exact query, or a cursor its source compares as sent.
 */
export function setQueryParameter(url: URL, name: string, value: string): void {
  const segment = `${encodeURIComponent(name)}=${encodeComponent(value)}`;
  const kept: string[] = [];
  let placed = false;
  for (const part of url.search.length > 1 ? url.search.slice(1).split('&') : []) {
    if (part !== '' && queryName(part) === name) {
      if (!placed) kept.push(segment);
      placed = true;
    } else kept.push(part);
  }
  if (!placed) kept.push(segment);
  url.search = kept.join('&');
}

/** Removes every query parameter of that name from `url`, the others left as written (setQueryParameter). */
export function removeQueryParameter(url: URL, name: string): void {
  const parts = url.search.length > 1 ? url.search.slice(1).split('&') : [];
  const kept = parts.filter((part) => part === '' || queryName(part) !== name);
  if (kept.length !== parts.length) url.search = kept.join('&');
}

/** A query segment's parameter name, decoded as URLSearchParams decodes it (`+` a space); as written when it does not decode. */
function queryName(part: string): string {
  const raw = part.split('=', 1)[0]!.replace(/\+/g, ' ');
  try {
    return decodeURIComponent(raw);
  } catch {
    return raw;
  }
}

/**
 * The URL with credentials before its host (a stored base_url's, never sent), auth query values and
 * every resolved secret masked: for reports and messages.
 */
export function redactUrl(url: URL, auth: AuthParts): string {
  const copy = new URL(url);
  for (const [name] of auth.query) if (copy.searchParams.has(name)) copy.searchParams.set(name, '***');
  return redactText(maskUserinfo(copy.href), auth);
}

/**
 * A URL the source gave (a next link) as messages and a stored position name it: masked as redactUrl
 * masks it, then cut to SHORT_QUOTE_LIMIT characters (`…` after them). The source's text has no length
 * of its own: quoted whole, a link of megabytes made as long a run error, event and log line.
 */
export function shownUrl(url: URL, auth: AuthParts): string {
  return quote(redactUrl(url, auth), SHORT_QUOTE_LIMIT);
}

/**
 * Masks every resolved credential value in a text (an upstream body may echo one back) in every form
 * it may come back in (src/observability/secret-forms.ts: URL encoded, JSON or HTML escaped, base64).
 */
export function redactText(text: string, auth: AuthParts): string {
  return redactSecrets(text, auth.secrets);
}

/** The Location header of an answer, credentials masked, for the message of a redirect not followed. */
export function redirectLocation(answer: { headers: Record<string, string | string[] | undefined> }, auth: AuthParts): string | undefined {
  const location = answer.headers.location;
  const first = Array.isArray(location) ? location[0] : location;
  return first ? redactText(first, auth) : undefined;
}

/** A value (a sample record) with every string in it, keys included, passed through `redactText`. */
export function redactDeep(value: unknown, auth: AuthParts): unknown {
  if (auth.secrets.length === 0) return value;
  if (typeof value === 'string') return redactText(value, auth);
  if (Array.isArray(value)) return value.map((v) => redactDeep(v, auth));
  if (value && typeof value === 'object' && !(value instanceof ExactNumber)) return Object.fromEntries(Object.entries(value).map(([k, v]) => [redactText(k, auth), redactDeep(v, auth)]));
  return value;
}

function setDefault(headers: Record<string, string>, name: string, value: string): void {
  const lower = name.toLowerCase();
  if (!Object.keys(headers).some((k) => k.toLowerCase() === lower)) headers[name] = value;
}

function isJson(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}
