import type { ErrorObject } from 'ajv/dist/2020.js';
import { CronExpressionParser } from 'cron-parser';
import { clientHeaderRefusal } from '../auth/headers.js';
import { NAMED_VALUE_RULE } from '../auth/names.js';
import { KNOWN_TOKEN, queryCredentials } from '../auth/stated-credentials.js';
import { hasTemplate, malformedTemplateNames, withoutTemplates } from '../auth/template.js';
import { parseWindow, someSlotInWindow, windowText } from '../schedule.js';
import { EXT_COLUMNS, promoteColumnName, SYSTEM_COLUMNS } from '../target/ddl.js';
import type { Auth, ConnectorSpec, ConnectorType, SoapCall, EndpointSpec, HeaderSpec, HttpMethod, Incremental, Pagination, Promote, RateLimit, Target } from '../types.js';
import { type EgressPolicy, unconnectablePort } from '../../egress/policy.js';
import { type Issue, joinField } from '../../validation/schema-errors.js';
import { cappedIssues, compiledOnce, Issues, isObject, type Json, manifestObject, schemaError } from '../../manifests/checking.js';
import { templateProblem } from '../soap/envelope.js';
import { isPreset, PRESET_NAMES, PRESETS } from './presets.js';
import { connectorManifestSchema, PAGINATION_KINDS, SPEC_KEYS, STRATEGIES } from './schema.js';

/**
 * Checks a Connector manifest and normalises it to the model the runtime uses (types.ts): the JSON
 * Schema first (every structural error at once), then the rules that span fields, preset expansion
 * and the warnings. Every issue names its field as a path (`spec.endpoints[2].pagination.kind`).
 * Pure: no database; endpoint UUIDs, the connector id and the tenant are the store's business.
 */

export type { Issue };

/** The exact refusal texts of spec 3 (and ours where it asks for "a clear text"). */
export const REFUSALS = {
  endpointHeaders: 'per-endpoint headers are not supported in this release; declare headers at spec.headers',
  graphqlNeedsRelay: 'graphql endpoints require pagination.kind=relay with cursor_binding=variable',
  variableBindingNotGraphql: 'cursor_binding=variable is valid only on GraphQL endpoints (kind graphql, or an endpoint carrying query)',
  unknownSpecKey: 'unknown key — ignored by the runtime',
  headerValue: 'exactly one of value and value_env',
  basicPassword: 'basic auth takes no inline password; set password_env to the name of a stored secret or environment variable',
  inlineToken: 'an inline token_value is accepted in the dev profile only; store the token as a secret and name it in token_env',
  inlineHeaderCredential: 'an inline credential in a header is accepted in the dev profile only; store it as a secret and name it in value_env (or a {{env:NAME}} template)',
  inlineQueryCredential:
    'an inline credential in a query is accepted in the dev profile only (it would be stored, and shown, as written); store it as a secret and name it in spec.auth (kind api-key with in: query, name and value_env)',
  inlineBodyCredential:
    'a credential of a well-known form (a JWT, sk_live_…, ghp_…, AKIA…) written in a request body or GraphQL variables is accepted in the dev profile only (it would be stored, and shown, as written); store it as a secret and write {{env:NAME}} where it goes',
  inlineSoapCredential:
    'a credential of a well-known form (a JWT, sk_live_…, ghp_…, AKIA…) written in a SOAP body or session header is accepted in the dev profile only (it would be stored, and shown, as written); store it as a secret, name it in soap.session.token_env and write {{token}} in soap.session.header where it goes',
  urlCredentials: 'spec.base_url must not carry credentials (user:password@ before the host): they are never sent and would be stored and shown as written; store the credential as a secret and name it in spec.auth (kind basic with username and password_env, bearer with token_env, or api-key with value_env)',
  baseQuery:
    'spec.base_url must not carry a query string (?…): each endpoint path is appended to base_url, so its parameters would stand before the path; put parameters in the endpoint path (path: /items?key=value, joined with the pagination parameters) or a key in auth kind api-key with in: query',
  baseFragment: 'spec.base_url must not carry a fragment (#…): it is never sent, and each endpoint path is appended to base_url',
  soapTemplate:
    '{{env:NAME}} templates do not resolve in a SOAP body, action or session header (they would be sent as written); a SOAP source\'s credential is its session token: name it in soap.session.token_env and write {{token}} in soap.session.header',
  urlTemplate: '{{env:NAME}} templates resolve in header values, request bodies and GraphQL variables, not in a URL; send a key in the query with auth kind api-key (in: query, value_env: NAME)',
} as const;

export interface CheckOptions {
  /** Accept inline credential values (`token_value`, a literal Authorization header): the dev profile only. Default false. */
  inlineCredentials?: boolean;
  /**
   * The outbound address policy: a base_url whose host it refuses without resolving a name (an IP
   * literal in any spelling, `localhost`, a metadata name) is a warning, not an error (runs fail at
   * connect until `svc.egress.allow` admits it). Absent: no such warning.
   */
  egress?: EgressPolicy;
}

/**
 * A header whose value is a credential (so it must not be written into a manifest outside dev, and
 * is redacted where it was): by its name (`Authorization…`, `Cookie`, `…-Key`, names with auth,
 * token, secret, password, credential, session or signature) or by its value (an HTTP
 * authentication scheme and its credentials: `Bearer …`, `Basic …`, whatever the header's name).
 */
export function isCredentialHeader(name: string, value = ''): boolean {
  if (CREDENTIAL_NAME.test(name)) return true;
  // The value as written, templates taken out: `{{env:T}}Bearer abc` states `Bearer abc`.
  const literal = withoutTemplates(value);
  return CREDENTIAL_VALUE.test(literal) || KNOWN_TOKEN.test(literal) || SCHEME_INSIDE.test(literal);
}

/**
 * A credential header whose value states a credential itself: the value, its `{{env:NAME}}`
 * templates taken out, holds more than an authentication scheme and parameter names
 * (`Bearer {{env:T}}` and `Token token="{{env:T}}"` state none; `Bearer sk_abc{{env:T}}` does).
 * Refused outside the dev profile and redacted where it was stored.
 */
export function statesCredential(name: string, value: string): boolean {
  if (!isCredentialHeader(name, value)) return false;
  const literal = withoutTemplates(value).replace(SCHEME, '');
  return !/^[\s"',;:=]*([A-Za-z][\w-]*\s*=[\s"',;]*)*$/.test(literal);
}

const CREDENTIAL_NAME =
  /(^|[-_])(proxy-)?auth(?!or($|[-_]))|api[-_]?key|(^|[-_])key($|[-_])|token|secret|password|passwd|passphrase|(^|[-_])(pass|pwd|pin|otp)($|[-_])|credential|session|signature|jwt|bearer|cookie/i;
const SCHEMES = 'bearer|basic|digest|token|negotiate|ntlm|hoba|mutual|aws4-hmac-sha256|sharedkey|hmac';
const CREDENTIAL_VALUE = new RegExp(`^\\s*(${SCHEMES})\\s+\\S`, 'i');
const SCHEME = new RegExp(`^\\s*(${SCHEMES})(?=\\s|$)`, 'i');
/**
 * A scheme further in the value (`v1, Bearer 9f86d081884c7d65`) counts when what follows it has the
 * form of a credential (16 or more token characters, letters and digits both): prose such as
 * `the basic plan` or `token ring` stays a plain value.
 */
const SCHEME_INSIDE = new RegExp(`[\\s,;](${SCHEMES})\\s+(?=[\\w.~+/-]*\\d)(?=[\\w.~+/-]*[A-Za-z])[\\w.~+/-]{16,}`, 'i');

export type EndpointDraft = Omit<EndpointSpec, 'uuid'>;

/** A checked manifest: everything of ConnectorSpec but the ids the store assigns. */
export interface ConnectorDraft extends Omit<ConnectorSpec, 'id' | 'tenantId' | 'endpoints'> {
  endpoints: EndpointDraft[];
}

export interface ManifestCheck {
  errors: Issue[];
  warnings: Issue[];
  /** Present when there is no error. */
  connector?: ConnectorDraft;
}

const DEFAULT_RATE_LIMIT = '100/s';
const DEFAULT_GRAPHQL_PATH = '/graphql';
const DEFAULT_SIZE = 50;
const UNIT_MS = { s: 1_000, m: 60_000, h: 3_600_000 } as const;

const schemaCheck = compiledOnce(connectorManifestSchema);



export function checkManifest(given: unknown, options: CheckOptions = {}): ManifestCheck {
  const errors = new Issues();
  const warnings: Issue[] = [];
  const input = manifestObject(given, errors, 'apiVersion, kind, metadata, connector_type, scopes, spec', connectorManifestSchema);
  if (!input) return { errors: errors.list, warnings: cappedIssues(warnings) };

  refusalsBeforeSchema(input, errors);
  const check = schemaCheck();
  if (!check(input)) for (const e of check.errors ?? []) errors.addSchemaError(e, translate);
  checkFieldPaths(input, errors);

  const spec = input.spec;
  if (isObject(spec)) {
    for (const key of Object.keys(spec)) if (!(SPEC_KEYS as readonly string[]).includes(key)) warnings.push({ field: `spec.${key}`, message: REFUSALS.unknownSpecKey });
  }
  if (errors.count) return { errors: errors.list, warnings: cappedIssues(warnings) };

  const connector = normalise(input, errors, warnings, options.inlineCredentials === true);
  if (errors.count || !connector) return { errors: errors.list, warnings: cappedIssues(warnings) };
  // The one address a connector's requests go to: every path, graphql_path and SOAP call is appended to it.
  const refused = baseUrlWarning(connector.baseUrl, options.egress);
  if (refused) warnings.push(refused);
  return { errors: [], warnings: cappedIssues(warnings), connector };
}

/** The outbound address policy's warning for a connector's base_url, or undefined (no policy, or the host admitted). */
export function baseUrlWarning(baseUrl: string, egress: EgressPolicy | undefined): Issue | undefined {
  const message = egress?.applyWarning(new URL(baseUrl).hostname);
  return message === undefined ? undefined : { field: 'spec.base_url', message };
}

/** Refusals whose text spec 3 fixes, reported before the schema's generic "not a known field". */
function refusalsBeforeSchema(input: Json, errors: Issues): void {
  const spec = input.spec;
  if (!isObject(spec)) return;
  if (Array.isArray(spec.endpoints)) {
    spec.endpoints.forEach((e, i) => {
      if (!isObject(e)) return;
      if (Object.hasOwn(e, 'headers')) errors.add(`spec.endpoints[${i}].headers`, REFUSALS.endpointHeaders);
      if (Object.hasOwn(e, 'total_path')) errors.add(`spec.endpoints[${i}].total_path`, `spec.endpoints[${i}].total_path belongs inside pagination (spec.endpoints[${i}].pagination.total_path)`);
    });
  }
  if (isObject(spec.auth) && Object.hasOwn(spec.auth, 'password')) errors.add('spec.auth.password', REFUSALS.basicPassword);
}

const quoted = (v: unknown) => JSON.stringify(v);

/**
 * unique_key and promote paths: a JSONPath on rest-generic; on soap-generic a field path over the
 * record's children (`id`, `a/b`, `@x` — or a JSONPath over the same projection). The schema cannot
 * tell them apart, since the rule hangs on connector_type.
 */
function checkFieldPaths(input: Json, errors: Issues): void {
  const spec = input.spec;
  if (!isObject(spec) || !Array.isArray(spec.endpoints)) return;
  const soap = input.connector_type === 'soap-generic';
  const check = (value: unknown, field: string) => {
    if (typeof value !== 'string' || value === '') return;
    if (value.startsWith('$')) return;
    if (!soap) errors.add(field, `${field} must be a JSONPath starting with $`);
    else if (soapFieldPath(value) === undefined) errors.add(field, `${field} must name the record's children by local name (id, a/b for a nested child, @x for an attribute, a/@x) or be a JSONPath starting with $`);
  };
  spec.endpoints.forEach((e, i) => {
    if (!isObject(e) || !isObject(e.target)) return;
    const at = `spec.endpoints[${i}].target`;
    check(e.target.unique_key, `${at}.unique_key`);
    if (!Array.isArray(e.target.promote)) return;
    e.target.promote.forEach((p, j) => {
      if (isObject(p)) check(p.path, `${at}.promote[${j}].path`);
    });
  });
}

const XML_NAME = /^[A-Za-z_][A-Za-z0-9_.-]*$/;
const JSON_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * A SOAP field path as the JSONPath the runtime reads records with (records are projected to JSON
 * with children by local name and attributes as `@name` keys): `a/b` -> `$.a.b`, `a/@x` -> `$.a['@x']`.
 * A JSONPath is kept as it is; undefined when the text is neither.
 */
export function soapFieldPath(path: string): string | undefined {
  if (path.startsWith('$')) return path;
  const segments = path.split('/');
  let out = '$';
  for (const [i, segment] of segments.entries()) {
    const attribute = segment.startsWith('@');
    const name = attribute ? segment.slice(1) : segment;
    if (!XML_NAME.test(name) || (attribute && i !== segments.length - 1)) return undefined;
    out += !attribute && JSON_NAME.test(name) ? `.${name}` : `['${segment}']`;
  }
  return out;
}

/** The manifest's own wording for some schema errors; the rest is the shared translator's. */
function refine(e: ErrorObject, at: string): string | undefined {
  if (e.keyword !== 'enum') return undefined;
  const allowed = ((e.params as { allowedValues: unknown[] }).allowedValues ?? []).map(String);
  if (at.endsWith('.transform')) return `unknown transform ${quoted(e.data)} at ${at}; one of ${allowed.join(', ')}`;
  if (/pagination\.kind$/.test(at)) return `${at} must be a strategy (${STRATEGIES.join(', ')}) or a preset (${PRESET_NAMES.join(', ')}); got ${quoted(e.data)}`;
  return undefined;
}

const translate = (e: ErrorObject): [string, string] => schemaError(e, refine);

// ---------------------------------------------------------------------------------------------
// Normalisation: the manifest has passed the schema, so every present field has its type.

interface RawEndpoint {
  id: string;
  enabled?: boolean;
  method?: HttpMethod;
  path?: string;
  kind?: 'graphql';
  query?: string;
  variables?: Record<string, unknown>;
  body?: unknown;
  soap?: Json;
  pagination?: Json & { kind: string };
  incremental?: { mode: Incremental['mode']; param?: string; watermark_path?: string };
  target: { kind?: 'hybrid'; table: string; unique_key: string; promote?: Promote[] };
}

function normalise(input: Json, errors: Issues, warnings: Issue[], inlineCredentials: boolean): ConnectorDraft | undefined {
  const metadata = input.metadata as { name: string };
  const spec = input.spec as Json;
  const scopes = [...new Set((input.scopes as string[] | undefined) ?? [])];

  const rateLimitText = (spec.default_rate_limit as string | undefined) ?? DEFAULT_RATE_LIMIT;
  const rateLimit = parseRateLimit(rateLimitText);

  const schedule = spec.schedule as string | undefined;
  const scheduleProblem = schedule === undefined ? undefined : cronProblem(schedule);
  if (scheduleProblem) errors.add('spec.schedule', `spec.schedule must be a 5-field cron expression (minute hour day-of-month month day-of-week, UTC): ${scheduleProblem}`);

  let window: ConnectorSpec['window'];
  if (spec.window !== undefined) {
    window = parseWindow(spec.window as string);
    if (window && window.start === window.end) errors.add('spec.window', 'spec.window must end at another time than it starts');
    if (schedule === undefined) warnings.push({ field: 'spec.window', message: 'the window fences scheduled runs only, and this connector has no schedule' });
    else if (window && window.start !== window.end && !scheduleProblem && !someSlotInWindow(schedule, window)) {
      warnings.push({
        field: 'spec.window',
        message: `no slot of spec.schedule falls in the window ${windowText(window)} (UTC): every scheduled run would be skipped; widen the window or change the schedule`,
      });
    }
  }

  const graphqlPath = (spec.graphql_path as string | undefined) ?? DEFAULT_GRAPHQL_PATH;
  const headers = ((spec.headers as HeaderSpec[] | undefined) ?? []).map((h, i) => {
    const clientHeader = clientHeaderRefusal(h.name, h.value);
    if (clientHeader) errors.add(`spec.headers[${i}].name`, clientHeader);
    if ((h.value === undefined) === (h.value_env === undefined)) errors.add(`spec.headers[${i}]`, REFUSALS.headerValue);
    else if (!inlineCredentials && h.value !== undefined && statesCredential(h.name, h.value)) errors.add(`spec.headers[${i}].value`, REFUSALS.inlineHeaderCredential);
    if (h.value !== undefined) checkTemplateNames(h.value, `spec.headers[${i}].value`, errors);
    return h.value !== undefined ? { name: h.name, value: h.value } : { name: h.name, value_env: h.value_env };
  });
  const auth = normaliseAuth(spec.auth as Json | undefined, errors, warnings, inlineCredentials);

  const connectorType = input.connector_type as ConnectorType;
  const raw = (spec.endpoints as RawEndpoint[] | undefined) ?? [];
  const seen = new Map<string, number>();
  const endpoints: EndpointDraft[] = [];
  // Templates resolve in header values, bodies and GraphQL variables; in a URL one would be sent as
  // written. A credential in the query goes through auth kind api-key (in: query).
  if (hasTemplate(spec.base_url as string)) errors.add('spec.base_url', `spec.base_url: ${REFUSALS.urlTemplate}`);
  // The pattern lets through what no request could be sent to (an escaped control character or a
  // zone id in the host): each address is read as a request would read it.
  const baseProblem = urlProblem(spec.base_url as string);
  if (baseProblem) errors.add('spec.base_url', `spec.base_url must be an absolute http or https URL: ${baseProblem}`);
  else if (hasUserinfo(spec.base_url as string)) errors.add('spec.base_url', REFUSALS.urlCredentials);
  else if (typeof spec.base_url === 'string' && unconnectablePort(new URL(spec.base_url))) errors.add('spec.base_url', `spec.base_url: ${unconnectablePort(new URL(spec.base_url))}`);
  else if (typeof spec.base_url === 'string' && spec.base_url.includes('?')) errors.add('spec.base_url', REFUSALS.baseQuery);
  else if (typeof spec.base_url === 'string' && spec.base_url.includes('#')) errors.add('spec.base_url', REFUSALS.baseFragment);
  raw.forEach((e, i) => {
    if (typeof e.path === 'string' && hasTemplate(e.path)) errors.add(`spec.endpoints[${i}].path`, `spec.endpoints[${i}].path: ${REFUSALS.urlTemplate}`);
    else if (typeof e.path === 'string' && e.path.includes('#')) errors.add(`spec.endpoints[${i}].path`, `spec.endpoints[${i}].path must not carry a fragment (#…): it is never sent; an # meant for the source is written %23`);
    else if (typeof e.path === 'string' && !inlineCredentials) {
      const stated = queryCredentials(e.path)[0];
      if (stated) errors.add(`spec.endpoints[${i}].path`, `spec.endpoints[${i}].path states a credential in its query (${stated.name}=…): ${REFUSALS.inlineQueryCredential}`);
    }
    if (e.body !== undefined) checkTemplateNames(e.body, `spec.endpoints[${i}].body`, errors);
    if (e.variables !== undefined) checkTemplateNames(e.variables, `spec.endpoints[${i}].variables`, errors);
    if (isObject(e.soap)) {
      const soap = e.soap;
      for (const [field, text] of [['body', soap.body], ['action', soap.action], ['session.header', isObject(soap.session) ? soap.session.header : undefined]] as const) {
        if (typeof text === 'string' && hasTemplate(text)) errors.add(`spec.endpoints[${i}].soap.${field}`, REFUSALS.soapTemplate);
      }
    }
    if (!inlineCredentials) {
      checkStatedTokens(e.body, `spec.endpoints[${i}].body`, REFUSALS.inlineBodyCredential, errors);
      checkStatedTokens(e.variables, `spec.endpoints[${i}].variables`, REFUSALS.inlineBodyCredential, errors);
      const soap = isObject(e.soap) ? e.soap : undefined;
      checkStatedTokens(soap?.body, `spec.endpoints[${i}].soap.body`, REFUSALS.inlineSoapCredential, errors);
      checkStatedTokens(isObject(soap?.session) ? soap.session.header : undefined, `spec.endpoints[${i}].soap.session.header`, REFUSALS.inlineSoapCredential, errors);
    }
    const first = seen.get(e.id);
    if (first !== undefined) errors.add(`spec.endpoints[${i}].id`, `duplicate endpoint id ${quoted(e.id)}: spec.endpoints[${first}] has it too`);
    else seen.set(e.id, i);
    const endpoint =
      connectorType === 'soap-generic'
        ? normaliseSoapEndpoint(e, `spec.endpoints[${i}]`, errors, warnings)
        : normaliseEndpoint(e, `spec.endpoints[${i}]`, graphqlPath, errors, warnings);
    if (endpoint) endpoints.push(endpoint);
  });

  if (errors.count) return undefined;
  const connector: ConnectorDraft = {
    name: metadata.name,
    connectorType,
    scopes,
    baseUrl: spec.base_url as string,
    auth,
    rateLimit,
    graphqlPath,
    headers,
    endpoints,
  };
  if (schedule !== undefined) connector.schedule = schedule;
  if (window) connector.window = window;
  if (Object.hasOwn(spec, 'defaults')) connector.defaults = spec.defaults;
  return connector;
}

/**
 * Each `{{env:…}}` of a header value, a body or GraphQL variables (their keys too) must name a value
 * as a `*_env` field does (`NAME` or `secret:NAME`): one of another form could never resolve, and
 * must not be sent upstream as written. The error names the field and quotes the template unless it
 * is long or has the form of a credential.
 */
function checkTemplateNames(value: unknown, field: string, errors: Issues): void {
  eachString(value, field, (text, at) => {
    const name = malformedTemplateNames(text)[0];
    if (name === undefined) return;
    const shown = name.length <= 64 && !KNOWN_TOKEN.test(name) ? `{{env:${name}}}` : 'a {{env:…}} template';
    errors.add(at, `${at} holds ${shown}, which names no value: ${NAMED_VALUE_RULE} (another tenant's secret or a path cannot be named)`);
  });
}

/**
 * A credential of a well-known form (KNOWN_TOKEN: a JWT, `sk_live_…`, `ghp_…`, `AKIA…`) written in a body, GraphQL
 * variables or a SOAP text, its `{{env:NAME}}` templates taken out: refused outside the dev profile as an inline
 * header credential is, naming the string that holds it (a body's keys and values at any depth).
 */
function checkStatedTokens(value: unknown, field: string, refusal: string, errors: Issues): void {
  eachString(value, field, (text, at) => {
    if (KNOWN_TOKEN.test(withoutTemplates(text))) errors.add(at, refusal);
  });
}

/** Every string of a JSON value (an object's keys too, each named by its key's field), with the field that holds it. */
function eachString(value: unknown, field: string, visit: (text: string, field: string) => void): void {
  if (typeof value === 'string') visit(value, field);
  else if (Array.isArray(value)) {
    for (const [i, v] of value.entries()) eachString(v, `${field}[${i}]`, visit);
  } else if (isObject(value)) {
    for (const [k, v] of Object.entries(value)) {
      const at = joinField(field, k);
      visit(k, at);
      eachString(v, at, visit);
    }
  }
}

/**
 * Whether a URL carries userinfo (`user:password@`). No request sends it (the engine builds each
 * address from its parts), and it would be stored and shown wherever base_url is: refused, the
 * text not quoted back, as a webhook's targetUrl is.
 */
export function hasUserinfo(text: string): boolean {
  if (typeof text !== 'string') return false;
  const url = new URL(text);
  return url.username !== '' || url.password !== '' || /^[a-z][a-z0-9+.-]*:\/\/[^/?#\\]*@/i.test(text);
}

/** Why `text` is not a URL a request can be sent to, or undefined. */
function urlProblem(text: string): string | undefined {
  if (typeof text !== 'string') return undefined; // the schema names it
  try {
    new URL(text);
    return undefined;
  } catch {
    return `${quoted(text.length > 200 ? `${text.slice(0, 200)}…` : text)} cannot be read as one`;
  }
}

/** `count/window` (already matched by the schema's pattern) -> RateLimit. */
export function parseRateLimit(text: string): RateLimit {
  const match = /^(\d+)\/(\d*)([smh])$/.exec(text);
  if (!match) throw new Error(`not a rate limit: ${text}`);
  const multiplier = match[2] ? Number(match[2]) : 1;
  return { count: Number(match[1]), windowMs: multiplier * UNIT_MS[match[3] as keyof typeof UNIT_MS] };
}

/** Why a text is not a 5-field UTC cron, or undefined when it is one. */
export function cronProblem(text: string): string | undefined {
  const fields = text.trim().split(/\s+/);
  if (fields.length !== 5) return `got ${fields.length} field${fields.length === 1 ? '' : 's'}`;
  if (fields.some((f) => /(^|[^A-Za-z])H($|[^A-Za-z])/.test(f))) return 'hashed fields (H) are not supported';
  // A Kubernetes CronJob (where a schedule becomes one) cannot express these.
  if (fields.some((f) => f.includes('#') || /(^|[^A-Za-z])L/.test(f))) return 'L (last) and # (nth weekday) are not supported: a Kubernetes CronJob cannot express them';
  // Kubernetes reads days of week 0-6 only, where cron-parser also takes 7 for Sunday.
  if (fields[4]!.split(',').some((part) => part.split('/')[0]!.split('-').some((bound) => /^\d+$/.test(bound) && Number(bound) === 7))) {
    return 'day of week 7 is not supported: write Sunday as 0 (a Kubernetes CronJob reads days of week 0-6)';
  }
  // The library's texts name no field ("Invalid range: 1-0, min(1) > max(0)" for MON-SUN): each field
  // is tried alone first, the others `*`, so the answer names the one it refuses and what it takes.
  for (let i = 0; i < 5; i++) {
    const alone = fields.map((f, j) => (j === i ? f : '*')).join(' ');
    const problem = cronLibraryProblem(alone);
    if (problem !== undefined) return `the ${CRON_FIELDS[i]!.name} field ${fields[i]}: ${cronFieldProblem(problem, CRON_FIELDS[i]!)}`;
  }
  // A Kubernetes CronJob (robfig/cron) reads a number with strconv.Atoi: a step past 2^63 - 1 is refused there.
  for (let i = 0; i < 5; i++) {
    const huge = fields[i]!.match(/\d+/g)?.find((n) => BigInt(n) > GO_INT_MAX);
    if (huge !== undefined) return `the ${CRON_FIELDS[i]!.name} field ${fields[i]}: ${huge} is out of range: a Kubernetes CronJob reads numbers up to ${GO_INT_MAX}`;
  }
  // Days of month and days of week: both given, a day matching either runs; one of them `*`, the other
  // alone picks the days. A CronJob takes a field holding `*` or `?` with no step, or a step of 1
  // (`*/1`, `*,5`), for `*`; cron-parser only the field `*` or `?` itself. With the other day field
  // given, the two would run on other days (`0 0 */1 * 1`: Mondays in a CronJob, every day here).
  const starOnlyForCronJob = (f: string) => !/^[*?]$/.test(f) && f.split(',').some((part) => /^[*?](\/0*1)?$/.test(part));
  for (const [at, other] of [[2, 4], [4, 2]] as const) {
    if (starOnlyForCronJob(fields[at]!) && !/^[*?]$/.test(fields[other]!) && !starOnlyForCronJob(fields[other]!)) {
      return `the ${CRON_FIELDS[at]!.name} field ${fields[at]} with a ${CRON_FIELDS[other]!.name} field given runs on other days in a Kubernetes CronJob (which reads it as *): write * to run on the ${CRON_FIELDS[other]!.name} field's days only, or name the days`;
    }
  }
  const problem = cronLibraryProblem(text);
  if (problem === undefined) return undefined;
  if (/day of month/i.test(problem)) return `day of month ${fields[2]} never comes in month ${fields[3]}, so it would never run`;
  return problem;
}

/** The largest number a Kubernetes CronJob's cron parser reads (Go's int, strconv.Atoi). */
const GO_INT_MAX = 2n ** 63n - 1n;

/** The fields of a 5-field cron, with what each takes (days of week as a Kubernetes CronJob reads them). */
const CRON_FIELDS = [
  { name: 'minute', takes: '0-59' },
  { name: 'hour', takes: '0-23' },
  { name: 'day-of-month', takes: '1-31' },
  { name: 'month', takes: '1-12 or JAN-DEC' },
  { name: 'day-of-week', takes: '0-6 or SUN-SAT, Sunday first' },
] as const;

function cronLibraryProblem(text: string): string | undefined {
  try {
    CronExpressionParser.parse(text, { tz: 'UTC' });
    return undefined;
  } catch (err) {
    return (err as Error).message;
  }
}

/** cron-parser's text for one field, said in terms of that field. */
function cronFieldProblem(problem: string, field: (typeof CRON_FIELDS)[number]): string {
  const range = /^Invalid range: /.test(problem);
  if (range) return `a range ends before it starts (the field takes ${field.takes}, a range from low to high)`;
  const outside = /got value (\S+) expected range/.exec(problem);
  if (outside) return `${outside[1]} is out of range: the field takes ${field.takes}`;
  if (/cannot repeat at every 0 time/.test(problem)) return 'a step of 0 repeats nothing';
  if (/^Invalid characters/.test(problem)) return `the field takes ${field.takes}, * and the separators , - /`;
  return problem;
}

const AUTH_FIELDS: Record<Auth['kind'], { allowed: string[]; required: string[] }> = {
  none: { allowed: [], required: [] },
  bearer: { allowed: ['token_env', 'token_value'], required: [] },
  basic: { allowed: ['username', 'password_env'], required: ['username', 'password_env'] },
  'api-key': { allowed: ['in', 'name', 'value_env'], required: ['in', 'name', 'value_env'] },
};

function normaliseAuth(auth: Json | undefined, errors: Issues, warnings: Issue[], inlineCredentials: boolean): Auth {
  if (!auth) return { kind: 'none' };
  const kind = auth.kind as Auth['kind'];
  const rule = AUTH_FIELDS[kind];
  for (const key of Object.keys(auth)) {
    if (key !== 'kind' && !rule.allowed.includes(key)) errors.add(`spec.auth.${key}`, `spec.auth.${key} is not a field of auth kind ${kind}`);
  }
  for (const key of rule.required) if (auth[key] === undefined) errors.add(`spec.auth.${key}`, `spec.auth.${key} is required for auth kind ${kind}`);
  switch (kind) {
    case 'bearer': {
      const tokenEnv = auth.token_env as string | undefined;
      const tokenValue = auth.token_value as string | undefined;
      if (tokenValue !== undefined && !inlineCredentials) errors.add('spec.auth.token_value', REFUSALS.inlineToken);
      if (tokenEnv === undefined && tokenValue === undefined) errors.add('spec.auth.token_env', 'spec.auth.token_env is required for auth kind bearer (or token_value, for development only)');
      if (tokenEnv !== undefined && tokenValue !== undefined) warnings.push({ field: 'spec.auth.token_value', message: 'ignored: token_env is set' });
      else if (tokenValue !== undefined) warnings.push({ field: 'spec.auth.token_value', message: 'token_value is for development only; name a secret in token_env instead' });
      const out: Auth = { kind: 'bearer' };
      if (tokenEnv !== undefined) out.token_env = tokenEnv;
      if (tokenValue !== undefined) out.token_value = tokenValue;
      return out;
    }
    case 'basic':
      return { kind: 'basic', username: auth.username as string, password_env: auth.password_env as string };
    case 'api-key':
      return { kind: 'api-key', in: auth.in as 'header' | 'query', name: auth.name as string, value_env: auth.value_env as string };
    default:
      return { kind: 'none' };
  }
}

type Strategy = (typeof STRATEGIES)[number];

/** The fields each strategy reads, and those it cannot do without (after preset expansion and defaults). */
const STRATEGY_FIELDS: Record<Strategy, { allowed: string[]; required: string[] }> = {
  none: { allowed: ['response_path'], required: [] },
  page: { allowed: ['page_param', 'size_param', 'start_page', 'size', 'total_pages_path', 'response_path', 'total_path'], required: ['page_param', 'size_param'] },
  offset: { allowed: ['offset_param', 'limit_param', 'limit', 'start_offset', 'response_path', 'total_path'], required: ['offset_param', 'limit_param'] },
  cursor: { allowed: ['cursor_param', 'cursor_path', 'has_more_path', 'response_path'], required: ['cursor_param', 'cursor_path'] },
  'link-header': { allowed: ['response_path'], required: [] },
  'body-link': { allowed: ['link_path', 'response_path', 'total_path'], required: ['link_path'] },
  relay: { allowed: ['cursor_binding', 'cursor_var', 'cursor_path', 'has_more_path', 'response_path'], required: ['cursor_binding', 'cursor_var', 'cursor_path', 'has_more_path', 'response_path'] },
  custom: { allowed: [], required: [] },
  soap: { allowed: ['page_size', 'start_row'], required: [] },
};

const STRATEGY_DEFAULTS: Partial<Record<Strategy, Json>> = {
  page: { start_page: 1, size: DEFAULT_SIZE },
  offset: { limit: DEFAULT_SIZE, start_offset: 0 },
  soap: { page_size: DEFAULT_SIZE, start_row: 0 },
};

const PAGE_SIZE_FIELDS = new Set(['size', 'size_param', 'limit', 'limit_param']);

/** A preset or strategy with the given fields over it, or undefined after reporting what is wrong. */
function expandPagination(given: Json & { kind: string }, at: string, errors: Issues, warnings: Issue[]): Pagination | undefined {
  const preset = isPreset(given.kind) ? PRESETS[given.kind] : undefined;
  const strategy = (preset?.kind ?? given.kind) as Strategy;
  if (!PAGINATION_KINDS.includes(given.kind)) return undefined;
  const { kind: _kind, ...fields } = given;
  if (strategy === 'custom') {
    warnings.push({ field: `${at}.kind`, message: 'custom pagination applies but fails on the second page; do not use' });
    return { kind: 'custom', response_path: (fields.response_path as string | undefined) ?? '$' };
  }
  const rule = STRATEGY_FIELDS[strategy];
  const named = preset ? `${given.kind} (a ${strategy} preset)` : strategy;
  let ok = true;
  for (const key of Object.keys(fields)) {
    if (rule.allowed.includes(key)) continue;
    ok = false;
    if (PAGE_SIZE_FIELDS.has(key) && strategy === 'relay') errors.add(`${at}.${key}`, `relay pagination sends no page-size parameter; the page size lives in the query text`);
    else if (PAGE_SIZE_FIELDS.has(key) && (strategy === 'cursor' || strategy === 'link-header' || strategy === 'body-link')) {
      errors.add(`${at}.${key}`, `${strategy} pagination sends no page-size parameter; put the page size in the endpoint path's query string (?limit=100)`);
    } else errors.add(`${at}.${key}`, `${at}.${key} is not a field of pagination kind ${named}`);
  }
  const expanded: Json = { kind: strategy, ...STRATEGY_DEFAULTS[strategy], ...(preset ?? {}), ...fields };
  if (strategy !== 'soap') expanded.response_path ??= '$';
  for (const key of rule.required) {
    if (expanded[key] === undefined) {
      ok = false;
      errors.add(`${at}.${key}`, `${at}.${key} is required for pagination kind ${strategy}`);
    }
  }
  return ok ? (expanded as unknown as Pagination) : undefined;
}

function normaliseEndpoint(e: RawEndpoint, at: string, graphqlPath: string, errors: Issues, warnings: Issue[]): EndpointDraft | undefined {
  const graphql = e.kind === 'graphql' || e.query !== undefined;
  // What the manifest asks for: the GraphQL rules are checked on it before the expansion, so
  // their texts win over a generic "not a field of pagination kind …".
  const preset = e.pagination && isPreset(e.pagination.kind) ? PRESETS[e.pagination.kind] : undefined;
  const strategy = preset?.kind ?? e.pagination?.kind ?? 'none';
  const binding = (e.pagination?.cursor_binding as string | undefined) ?? (preset && 'cursor_binding' in preset ? preset.cursor_binding : undefined);
  const bindingField = e.pagination && Object.hasOwn(e.pagination, 'cursor_binding') ? `${at}.pagination.cursor_binding` : `${at}.pagination.kind`;

  let method: HttpMethod = e.method ?? 'GET';
  let path = e.path;
  if (e.soap !== undefined) errors.add(`${at}.soap`, `${at}.soap is for connector_type soap-generic only`);
  if (strategy === 'soap') errors.add(`${at}.pagination.kind`, 'pagination kind soap is for connector_type soap-generic only');
  if (graphql) {
    if (e.query === undefined) errors.add(`${at}.query`, `${at}.query is required for a GraphQL endpoint (the query document)`);
    if (!e.pagination) errors.add(`${at}.pagination`, REFUSALS.graphqlNeedsRelay);
    else if (strategy !== 'relay' || binding !== 'variable') errors.add(`${at}.pagination.kind`, REFUSALS.graphqlNeedsRelay);
    if (e.body !== undefined) errors.add(`${at}.body`, `${at}.body is not used by GraphQL endpoints: the request body is the query and its variables`);
    if (e.method !== undefined && e.method !== 'POST') warnings.push({ field: `${at}.method`, message: 'ignored: GraphQL endpoints always POST' });
    if (e.path !== undefined) warnings.push({ field: `${at}.path`, message: 'ignored: GraphQL endpoints POST to base_url plus spec.graphql_path' });
    if (e.incremental?.mode === 'watermark') {
      warnings.push({
        field: `${at}.incremental.mode`,
        message: 'a watermark on a GraphQL endpoint sends a query parameter the server ignores, so every run re-reads everything; use a static variable or a literal argument and keep mode full',
      });
    }
    method = 'POST';
    path = graphqlPath;
  } else {
    if (binding === 'variable') errors.add(bindingField, REFUSALS.variableBindingNotGraphql);
    else if (strategy === 'relay') errors.add(`${at}.pagination.kind`, 'relay pagination is valid only on GraphQL endpoints (kind graphql, or an endpoint carrying query)');
    if (e.variables !== undefined) errors.add(`${at}.variables`, `${at}.variables is for GraphQL endpoints only (kind graphql, or an endpoint carrying query)`);
    if (path === undefined) errors.add(`${at}.path`, `${at}.path is required`);
    if (e.body !== undefined && !['POST', 'PUT', 'PATCH'].includes(method)) errors.add(`${at}.body`, `${at}.body is sent only with POST, PUT or PATCH (method is ${method})`);
  }

  const pagination = e.pagination ? expandPagination(e.pagination, `${at}.pagination`, errors, warnings) : ({ kind: 'none', response_path: '$' } as const);
  if (graphql && pagination?.kind === 'relay' && e.query !== undefined && !new RegExp(`\\$${pagination.cursor_var}\\b`).test(e.query)) {
    errors.add(`${at}.query`, `${at}.query must declare the cursor variable $${pagination.cursor_var} (cursor_var)`);
  }
  const incremental = normaliseIncremental(e.incremental, `${at}.incremental`, errors, warnings);
  const target = normaliseTarget(e.target, `${at}.target`, errors);
  if (!pagination || !target || !incremental || path === undefined) return undefined;

  const out: EndpointDraft = { id: e.id, enabled: e.enabled ?? true, method, path, graphql, pagination, incremental, target };
  if (graphql) {
    out.query = e.query;
    if (e.variables !== undefined) out.variables = e.variables;
  } else if (e.body !== undefined) out.body = e.body;
  return out;
}

/** A `{{…}}` placeholder of a SOAP text (an `{{env:NAME}}` template is refused on its own). */
const PLACEHOLDER = /\{\{([^{}]{0,200})\}\}/g;

/** The distinct placeholders of a SOAP text that the engine does not fill (not one of `names`), as written. */
function unfilledPlaceholders(text: string, names: readonly string[]): string[] {
  const found = new Set<string>();
  for (const [whole, name] of text.matchAll(PLACEHOLDER)) {
    if (!names.includes(name!) && !/^\s*env:/.test(name!)) found.add(whole);
  }
  return [...found];
}

/** Fields a SOAP endpoint has no use for: the envelope is the request. */
const NOT_SOAP = ['method', 'kind', 'query', 'variables', 'body'] as const;

/**
 * A `soap-generic` endpoint: always a POST of one envelope per page to path, pagination kind `soap`
 * (the default when absent), full reads only, target paths turned into JSONPath over the record's
 * projection (soapFieldPath).
 */
function normaliseSoapEndpoint(e: RawEndpoint, at: string, errors: Issues, warnings: Issue[]): EndpointDraft | undefined {
  for (const key of NOT_SOAP) {
    if (e[key] !== undefined) errors.add(`${at}.${key}`, `${at}.${key} is not used by soap-generic endpoints: each request POSTs the envelope built from ${at}.soap`);
  }
  if (e.path === undefined) errors.add(`${at}.path`, `${at}.path is required`);
  const raw = e.soap;
  if (raw === undefined) errors.add(`${at}.soap`, `${at}.soap is required for connector_type soap-generic (version, action, body, records, stop, session)`);
  let pagination: Pagination | undefined = { kind: 'soap', page_size: DEFAULT_SIZE, start_row: 0 };
  if (e.pagination) {
    if (e.pagination.kind !== 'soap') {
      errors.add(`${at}.pagination.kind`, `${at}.pagination.kind must be soap on a soap-generic endpoint ({kind: soap, page_size, start_row}); got ${quoted(e.pagination.kind)}`);
      pagination = undefined;
    } else pagination = expandPagination(e.pagination, `${at}.pagination`, errors, warnings);
  }
  if (e.incremental && e.incremental.mode !== 'full') errors.add(`${at}.incremental.mode`, `${at}.incremental.mode must be full on a soap-generic endpoint: a watermark has no request parameter to travel in`);
  // SOAP 1.1 (section 6.1.1): `SOAPAction: "<URI-reference>"`. A URI reference cannot hold a double quote and the
  // header has no escape for one (it is not a quoted-string): sent, it was dropped from the action. 1.2 sends the
  // action as a quoted-string parameter of the content type, which escapes it (\").
  if (raw && (raw.version ?? '1.1') === '1.1' && typeof raw.action === 'string' && raw.action.includes('"')) {
    errors.add(
      `${at}.soap.action`,
      `${at}.soap.action must not contain a double quote (") with SOAP version 1.1: the SOAPAction header is the action as a URI reference between double quotes, which has no way to carry one (a URI writes it %22)`,
    );
  }
  const session = raw?.session as SoapCall['session'] | undefined;
  if (session && !session.header.includes('{{token}}')) errors.add(`${at}.soap.session.header`, `${at}.soap.session.header must carry {{token}} where the session token goes`);
  // Sent as written (placeholders filled) inside the envelope: XML that is not well-formed would be accepted here
  // and fail every run, or reach the service as garbage.
  const version = (raw?.version as SoapCall['version'] | undefined) ?? '1.1';
  for (const [field, text, part, names, fills] of [
    ['body', raw?.body, 'Body, {{page_size}} and {{start_row}} filled', ['page_size', 'start_row'], 'a SOAP body fills {{page_size}} and {{start_row}} only'],
    ['session.header', session?.header, 'Header, {{token}} filled', ['token'], 'a SOAP session header fills {{token}} only'],
  ] as const) {
    if (typeof text !== 'string') continue;
    const problem = templateProblem(text, names, version);
    if (problem) errors.add(`${at}.soap.${field}`, `${at}.soap.${field} must be well-formed XML holding an element, every prefix declared, as it is sent inside the SOAP ${part}: ${problem}`);
    // A placeholder of another name (a typo, {{ page_size }} with spaces) is sent as written: a {{start_row}} mistyped reads the first page again and again.
    const unfilled = unfilledPlaceholders(text, names);
    if (unfilled.length > 0) {
      const listed = unfilled.length > 3 ? `${unfilled.slice(0, 3).join(', ')}, …` : unfilled.join(', ');
      warnings.push({ field: `${at}.soap.${field}`, message: `${at}.soap.${field} holds ${listed}, which ${unfilled.length === 1 ? 'is' : 'are'} not filled (${fills}): it is sent as written` });
    }
  }
  const target = normaliseTarget(e.target, `${at}.target`, errors, soapFieldPath);
  if (!raw || !pagination || !target || e.path === undefined || errors.count) return undefined;

  const soap: SoapCall = { version: (raw.version as SoapCall['version'] | undefined) ?? '1.1', body: raw.body as string, records: raw.records as string };
  if (raw.action !== undefined) soap.action = raw.action as string;
  if (raw.stop !== undefined) soap.stop = raw.stop as SoapCall['stop'];
  if (session) soap.session = { token_env: session.token_env, header: session.header };
  return { id: e.id, enabled: e.enabled ?? true, method: 'POST', path: e.path, graphql: false, soap, pagination, incremental: { mode: 'full' }, target };
}

function normaliseIncremental(given: RawEndpoint['incremental'], at: string, errors: Issues, warnings: Issue[]): Incremental | undefined {
  if (!given) return { mode: 'full' };
  if (given.mode === 'watermark') {
    let ok = true;
    for (const key of ['param', 'watermark_path'] as const) {
      if (given[key] === undefined) {
        ok = false;
        errors.add(`${at}.${key}`, `${at}.${key} is required for mode watermark`);
      }
    }
    return ok ? { mode: 'watermark', param: given.param!, watermark_path: given.watermark_path! } : undefined;
  }
  for (const key of ['param', 'watermark_path'] as const) {
    if (given[key] !== undefined) errors.add(`${at}.${key}`, `${at}.${key} is only for mode watermark`);
  }
  if (given.mode === 'api_cursor') {
    warnings.push({ field: `${at}.mode`, message: 'api_cursor is not implemented; the endpoint runs as mode full' });
    return { mode: 'api_cursor' };
  }
  return { mode: 'full' };
}

/** `paths` turns a declared unique_key or promote path into the JSONPath the runtime reads (SOAP field paths). */
function normaliseTarget(given: RawEndpoint['target'], at: string, errors: Issues, paths: (path: string) => string | undefined = (p) => p): Target | undefined {
  const promote: Promote[] = [];
  const names = new Map<string, number>();
  let ok = true;
  (given.promote ?? []).forEach((p, j) => {
    const field = `${at}.promote[${j}].name`;
    const first = names.get(p.name);
    if (first !== undefined) {
      ok = false;
      errors.add(field, `duplicate promote name ${quoted(p.name)}: ${at}.promote[${first}] has it too`);
      return;
    }
    names.set(p.name, j);
    if (!promoteColumnName(p.name)) {
      ok = false;
      const system = (SYSTEM_COLUMNS as readonly string[]).includes(p.name);
      errors.add(
        field,
        system
          ? `${field} ${quoted(p.name)} is a system column of every PostgreSQL table (${SYSTEM_COLUMNS.join(', ')})`
          : `${field} ${quoted(p.name)} is a column every ext table has (${EXT_COLUMNS.join(', ')})`,
      );
      return;
    }
    const path = paths(p.path) ?? p.path;
    promote.push(p.transform === undefined ? { name: p.name, path, type: p.type } : { name: p.name, path, type: p.type, transform: p.transform });
  });
  return ok ? { kind: 'hybrid', table: given.table, unique_key: paths(given.unique_key) ?? given.unique_key, promote } : undefined;
}
