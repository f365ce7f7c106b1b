import { type Dispatcher, request } from 'undici';
import { describeNetworkError } from '../egress/network-error.js';
import { unconnectablePort } from '../egress/policy.js';
import { stringify } from 'yaml';
import { PayloadTooLarge, ValidationError } from '../errors.js';
import { MAX_JSON_DEPTH } from '../validation/input-limits.js';
import { promoteColumnName } from './target/ddl.js';
import { MAX_YAML_BYTES } from '../manifests/yaml-limits.js';
import type { YamlRead } from '../manifests/yaml-body.js';
import { type YamlReader, yamlReadRefusal, YamlReadStopped } from '../manifests/yaml-reader.js';
import { KUBECTL_YAML } from '../manifests/yaml.js';

type Schema = { type?: string; properties?: Record<string, Schema>; items?: Schema; $ref?: string; format?: string };
type OpenApi = {
  openapi?: string;
  swagger?: string;
  info?: { title?: string };
  servers?: Array<{ url: string }>;
  host?: string;
  basePath?: string;
  schemes?: string[];
  paths?: Record<string, Record<string, { responses?: Record<string, { content?: Record<string, { schema?: Schema }>; schema?: Schema }> }>>;
  components?: { schemas?: Record<string, Schema>; securitySchemes?: Record<string, { type: string; scheme?: string; in?: string; name?: string }> };
  definitions?: Record<string, Schema>;
  securityDefinitions?: Record<string, { type: string; scheme?: string; in?: string; name?: string }>;
};

const MAX_BYTES = 5 * 1024 * 1024;

/**
 * The most endpoints a draft holds, and promoted properties per endpoint: each endpoint's promotes are built from its
 * record's properties, so a document of a few kilobytes (300 paths answering one schema of 1,000 properties) made a
 * 21 MB draft, written on the event loop. A draft is a start to edit; the rest is named in its header.
 */
export const MAX_DRAFT_ENDPOINTS = 100;
export const MAX_DRAFT_PROMOTES = 50;
/** The most GET operations a draft looks at (those that answer no records included). */
export const MAX_DRAFT_EXAMINED = 1000;

/** `text` without its leading and trailing dashes (a regular expression for it backtracks on long runs of them). */
function trimDashes(text: string): string {
  let start = 0;
  let end = text.length;
  while (start < end && text.charCodeAt(start) === 0x2d) start++;
  while (end > start && text.charCodeAt(end - 1) === 0x2d) end--;
  return text.slice(start, end);
}

export interface ScaffoldOptions {
  /** The outbound address policy's dispatcher. */
  dispatcher?: Dispatcher;
  /** The hub's YAML reader, for a document in YAML (yaml-reader.ts). */
  yamlReader: YamlReader;
  /** How long a YAML document may take to read (`svc.http.yaml-read-timeout`). */
  yamlReadMs: number;
  /** Whose read it is (the tenant), for the YAML reader's turns. */
  owner: string;
  /** The longest the document may take to arrive as a whole (`svc.connectors.http.response-timeout`): a body trickling in never goes silent for the 10 s between chunks. */
  responseTimeoutMs: number;
  /** Aborts the read (the client went away). */
  signal?: AbortSignal;
}

/**
 * Drafts a Connector manifest (YAML) from an OpenAPI 3 (or Swagger 2) document: the first server as
 * base_url, one endpoint per GET operation without path parameters that answers JSON records, a
 * pagination preset guessed from the response schema, promotes from the record's scalar properties,
 * and auth from the security schemes (credentials as `*_env` names to fill in). A URL that holds no
 * readable document is refused, as is one carrying credentials (`user:password@`) or one the outbound
 * address policy refuses (`dispatcher`).
 */
export async function scaffoldManifest(openapiUrl: string, name: string, options: ScaffoldOptions): Promise<string> {
  let url: URL;
  try {
    url = new URL(openapiUrl);
  } catch {
    throw new ValidationError('openapiUrl is not a URL', 'openapiUrl');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new ValidationError('openapiUrl must be http or https', 'openapiUrl');
  // Never sent, and a relative server address would carry it into the drafted base_url (and every message quoting the URL).
  if (url.username || url.password) throw new ValidationError('openapiUrl must not carry credentials (user:password@ before the host): they are never sent; publish the document where it can be read without them', 'openapiUrl');
  const port = unconnectablePort(url);
  if (port) throw new ValidationError(`openapiUrl: ${port}`, 'openapiUrl');
  if (!/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/.test(name)) throw new ValidationError('name must be a lower-case name (letters, digits, dashes)', 'name');
  const doc = await fetchDocument(url, options);
  const unreadable = () => new ValidationError(`no readable OpenAPI document at ${url.href}`, 'openapiUrl');
  if (!doc || typeof doc !== 'object' || (!doc.openapi && !doc.swagger) || !doc.paths) throw unreadable();

  const server: unknown = doc.servers?.[0]?.url;
  const baseUrl = typeof server === 'string' && server
    ? serverUrl(server, url)
    : doc.host
      ? `${doc.schemes?.[0] ?? url.protocol.replace(':', '')}://${doc.host}${doc.basePath ?? ''}`.replace(/\/$/, '')
      : url.origin;
  const resolve = (schema: Schema | undefined): Schema | undefined => {
    let current = schema;
    for (let i = 0; i < 10 && typeof current?.$ref === 'string'; i++) {
      const ref = current.$ref.split('/').pop()!;
      current = doc.components?.schemas?.[ref] ?? doc.definitions?.[ref];
    }
    return current && typeof current === 'object' ? current : undefined;
  };
  // The promotes of a record, worked out once per record schema (endpoints often answer the same one), reading its
  // properties only until MAX_DRAFT_PROMOTES are found: `left` counts the properties not read.
  const promotesOf = new Map<Schema, { promote: unknown[]; left: number }>();
  const promotesFor = (record: Schema): { promote: unknown[]; left: number } => {
    const known = promotesOf.get(record);
    if (known) return known;
    const promote: unknown[] = [];
    let left = 0;
    const props = record.properties && typeof record.properties === 'object' ? record.properties : {};
    for (const key in props) {
      if (promote.length >= MAX_DRAFT_PROMOTES) {
        left += 1;
        continue;
      }
      const prop = resolve(props[key]);
      // A name apply takes for a column: not one every ext table has (`id`, `data`, `tenant_id`, PostgreSQL's `xmin`).
      if (!promoteColumnName(key) || !prop || !['string', 'integer', 'number', 'boolean'].includes(prop.type ?? '')) continue;
      promote.push({
        name: key,
        path: `$.${key}`,
        type: prop.type === 'integer' ? 'bigint' : prop.type === 'number' ? 'numeric' : prop.type === 'boolean' ? 'boolean' : prop.format === 'date-time' ? 'timestamptz' : 'text',
        ...(prop.format === 'date-time' ? { transform: 'parse_iso8601' } : {}),
      });
    }
    const found = { promote, left };
    promotesOf.set(record, found);
    return found;
  };
  const shapes = new Map<Schema, ReturnType<typeof recordsOf>>();
  const endpoints: unknown[] = [];
  let endpointsLeft = 0;
  let promotesLeft = 0;
  let examined = 0;
  for (const path in doc.paths) {
    const get = doc.paths[path]?.get;
    if (!get || path.includes('{')) continue;
    // Bounded work: at most MAX_DRAFT_ENDPOINTS drafted, MAX_DRAFT_EXAMINED operations looked at.
    if (endpoints.length >= MAX_DRAFT_ENDPOINTS || examined >= MAX_DRAFT_EXAMINED) {
      endpointsLeft += 1;
      continue;
    }
    examined += 1;
    const ok = get.responses?.['200'] ?? get.responses?.['2XX'] ?? get.responses?.default;
    const schema = resolve(ok?.content?.['application/json']?.schema ?? ok?.schema);
    // Once per response schema: a document's operations often answer the same one, and reading it goes through its
    // properties (so the work stays within the document's size).
    if (schema && !shapes.has(schema)) shapes.set(schema, recordsOf(schema, resolve));
    const shape = schema ? shapes.get(schema) : undefined;
    if (!shape) continue;
    const id = trimDashes(trimDashes(path.split('/').filter(Boolean).join('-').toLowerCase().replace(/[^a-z0-9-]+/g, '-')).slice(0, 63)) || 'root';
    const table = `ext.${id.replace(/-/g, '_').replace(/^(\d)/, 't_$1')}`.slice(0, 67);
    const record = resolve(shape.record);
    const { promote, left } = record ? promotesFor(record) : { promote: [], left: 0 };
    promotesLeft += left;
    endpoints.push({
      id,
      method: 'GET',
      path,
      pagination: shape.pagination,
      target: { kind: 'hybrid', table, unique_key: record?.properties && typeof record.properties === 'object' && 'id' in record.properties ? '$.id' : '$.REPLACE_ME', promote },
    });
  }
  if (endpoints.length === 0) throw new ValidationError(`the OpenAPI document at ${url.href} has no GET operation answering JSON records`, 'openapiUrl');

  const manifest = {
    apiVersion: 'connectors.svc.io/v1',
    kind: 'Connector',
    metadata: { name },
    connector_type: 'rest-generic',
    scopes: [name],
    spec: { base_url: baseUrl, auth: authOf(doc, name), endpoints },
  };
  const left = [
    endpointsLeft ? `# ${endpointsLeft} more GET operation(s) left out: a draft looks at the first ${MAX_DRAFT_EXAMINED} and holds at most ${MAX_DRAFT_ENDPOINTS}.\n` : '',
    promotesLeft ? `# ${promotesLeft} more record propert(ies) left out of promote: a draft promotes the first ${MAX_DRAFT_PROMOTES} scalar ones of an endpoint.\n` : '',
  ].join('');
  const title = typeof doc.info?.title === 'string' ? doc.info.title.replace(/[\p{Cc}\u2028\u2029]+/gu, ' ').slice(0, 200) : '';
  return `# Drafted from ${url.href}${title ? ` (${title})` : ''}: review pagination, unique_key and credentials before applying.\n${left}${stringify(manifest, KUBECTL_YAML)}`;
}

/** The document's first server address, read against the document's own URL (it may be relative), as base_url. */
function serverUrl(server: string, url: URL): string {
  try {
    return new URL(server, url).href.replace(/\/$/, '');
  } catch {
    throw new ValidationError(`the OpenAPI document at ${url.href} names a first server URL (servers[0].url) that cannot be read as a URL`, 'openapiUrl', 'fix servers[0].url in the document, or draft from another copy of it');
  }
}

async function fetchDocument(url: URL, { dispatcher, yamlReader, yamlReadMs, owner, responseTimeoutMs, signal }: ScaffoldOptions): Promise<OpenApi | undefined> {
  let text: string;
  const deadline = AbortSignal.timeout(responseTimeoutMs);
  try {
    const res = await request(url, { method: 'GET', headers: { accept: 'application/json, application/yaml;q=0.9, */*;q=0.5' }, headersTimeout: 10_000, bodyTimeout: 10_000, dispatcher, signal: signal ? AbortSignal.any([signal, deadline]) : deadline });
    if (res.statusCode < 200 || res.statusCode >= 300) {
      await res.body.dump();
      throw new ValidationError(`no readable OpenAPI document at ${url.href}: HTTP ${res.statusCode}`, 'openapiUrl');
    }
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of res.body) {
      size += (chunk as Buffer).length;
      if (size > MAX_BYTES) throw new ValidationError(`the document at ${url.href} is larger than 5 MiB`, 'openapiUrl');
      chunks.push(chunk as Buffer);
    }
    text = Buffer.concat(chunks).toString('utf8');
  } catch (err) {
    if (err instanceof ValidationError) throw err;
    if (deadline.aborted && !signal?.aborted) throw new ValidationError(`no readable OpenAPI document at ${url.href}: the document took longer than ${responseTimeoutMs} ms as a whole (svc.connectors.http.response-timeout)`, 'openapiUrl');
    throw new ValidationError(`no readable OpenAPI document at ${url.href}: ${describeNetworkError(err)}`, 'openapiUrl');
  }
  // Up to 5 MiB of JSON is parsed here (tens of milliseconds); what is built from it is bounded (MAX_DRAFT_ENDPOINTS).
  try {
    return JSON.parse(text) as OpenApi;
  } catch {
    // YAML is read on the YAML reader's thread (about a hundred times slower than JSON, never on the
    // event loop), at most 1 MiB of it, compact nesting refused from its tokens, within the time limit.
    if (Buffer.byteLength(text) > MAX_YAML_BYTES) {
      throw new ValidationError(`the document at ${url.href} is not JSON, and larger than the 1 MiB of YAML the hub reads`, 'openapiUrl', 'point openapiUrl at the JSON form of the document (read up to 5 MiB)');
    }
    let read: YamlRead | undefined;
    try {
      read = await yamlReader.document(text, { limitMs: yamlReadMs, owner, maxJsonBytes: MAX_BYTES });
    } catch (err) {
      if (err instanceof YamlReadStopped && err.reason !== 'closed') throw new ValidationError(`the document at ${url.href} is not JSON, and as YAML it ${err.message}`, 'openapiUrl', 'point openapiUrl at the JSON form of the document');
      throw yamlReadRefusal(err, 'point openapiUrl at the JSON form of the document');
    }
    if (read && 'problem' in read && read.problem.tooManyNodes) throw new PayloadTooLarge(`the document at ${url.href} is not JSON, and as YAML it ${read.problem.message}`, 'point openapiUrl at the JSON form of the document (read up to 5 MiB)');
    if (read && 'problem' in read && read.problem.tooLarge) throw new ValidationError(`the document at ${url.href} is not JSON, and as YAML it reads as more than 5 MiB of JSON`, 'openapiUrl', 'point openapiUrl at the JSON form of the document');
    if (read && 'problem' in read && read.problem.tooDeep) throw new ValidationError(`the document at ${url.href} nests deeper than ${MAX_JSON_DEPTH} levels`, 'openapiUrl');
    if (read && 'problem' in read) throw new ValidationError(`the document at ${url.href} is not JSON, and cannot be read as YAML: ${read.problem.message}`, 'openapiUrl', 'point openapiUrl at the JSON form of the document');
    return read ? (JSON.parse(read.json) as OpenApi) : undefined;
  }
}

function recordsOf(schema: Schema | undefined, resolve: (s: Schema | undefined) => Schema | undefined): { record: Schema | undefined; pagination: Record<string, unknown> } | undefined {
  if (!schema) return undefined;
  if (schema.type === 'array') return { record: schema.items, pagination: { kind: 'none', response_path: '$' } };
  const props = schema.properties && typeof schema.properties === 'object' ? schema.properties : {};
  const arrayProp = (key: string) => resolve(props[key])?.type === 'array' ? resolve(props[key])!.items : undefined;
  if (arrayProp('content') && props.totalPages) return { record: arrayProp('content'), pagination: { kind: 'spring' } };
  if (arrayProp('data') && props.has_more) return { record: arrayProp('data'), pagination: { kind: 'stripe' } };
  if (arrayProp('results') && props.next) return { record: arrayProp('results'), pagination: { kind: 'drf' } };
  if (arrayProp('data') && props.total) {
    return { record: arrayProp('data'), pagination: { kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit: 50, response_path: '$.data', total_path: '$.total' } };
  }
  const list = Object.keys(props).find((k) => arrayProp(k));
  return list ? { record: arrayProp(list), pagination: { kind: 'none', response_path: `$.${list}` } } : undefined;
}

function authOf(doc: OpenApi, name: string): Record<string, unknown> {
  const schemes = Object.values(doc.components?.securitySchemes ?? doc.securityDefinitions ?? {});
  const env = name.toUpperCase().replace(/[^A-Z0-9]+/g, '_');
  for (const s of schemes) {
    if (!s || typeof s !== 'object') continue;
    const scheme = typeof s.scheme === 'string' ? s.scheme.toLowerCase() : undefined;
    if (s.type === 'http' && scheme === 'bearer') return { kind: 'bearer', token_env: `${env}_TOKEN` };
    if ((s.type === 'http' && scheme === 'basic') || s.type === 'basic') return { kind: 'basic', username: 'REPLACE_ME', password_env: `${env}_PASSWORD` };
    if (s.type === 'apiKey' && (s.in === 'header' || s.in === 'query') && typeof s.name === 'string' && s.name) return { kind: 'api-key', in: s.in, name: s.name, value_env: `${env}_API_KEY` };
  }
  return { kind: 'none' };
}
