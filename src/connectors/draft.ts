import { ConflictError, HubError, RateLimited, type Rendered, ValidationError } from '../errors.js';
import { type EngineContext, firstPage, rateLimitWait } from './engine/read.js';
import type { ConnectorSpec, EndpointSpec, HttpMethod, PromoteType } from './types.js';
import { ExactNumber } from './engine/exact-json.js';
import { promoteColumnName } from './target/ddl.js';

/** The source refused the drafting request: 502 naming the upstream status. */
class UpstreamRefused extends HubError {
  constructor(message: string) {
    super(message);
    this.name = 'UpstreamRefused';
  }
  render(): Rendered {
    return { status: 502, body: { json: { error: this.message } } };
  }
}

interface DraftedEndpoint {
  id: string;
  method: HttpMethod;
  path: string;
  pagination: { kind: string } & Record<string, unknown>;
  target: { kind: 'hybrid'; table: string; unique_key?: string; promote: Array<{ name: string; path: string; type: PromoteType; transform?: string }> };
}

/**
 * Drafts an endpoint fragment from a live path (spec 3): the first answer's envelope names a
 * pagination preset (`none` for a bare array without a next link, `unknown` when unrecognised) and
 * the first record's scalar fields become promote entries. Upstream errors are refused naming the
 * status.
 */
export async function draftEndpoint(connector: ConnectorSpec, request: { path: string; method?: HttpMethod }, context: EngineContext): Promise<DraftedEndpoint> {
  if (connector.connectorType !== 'rest-generic') {
    throw new ValidationError(
      `drafting reads a JSON answer and works for rest-generic connectors only; ${connector.name} is ${connector.connectorType} (write the endpoint's soap block by hand, then check it with the pre-flight)`,
      'connector_type',
    );
  }
  const method = request.method ?? 'GET';
  const probe: EndpointSpec = {
    id: 'draft',
    uuid: '00000000-0000-0000-0000-000000000000',
    enabled: true,
    method,
    path: request.path,
    graphql: false,
    pagination: { kind: 'none', response_path: '$' },
    incremental: { mode: 'full' },
    target: { kind: 'hybrid', table: 'ext.draft', unique_key: '$.id', promote: [] },
  };
  const report = await firstPage(connector, probe, context);
  if (report.rateLimitedMs !== undefined) throw new RateLimited(Math.ceil(report.rateLimitedMs / 1000), `nothing was sent to the source: ${rateLimitWait(report.rateLimitedMs)}`);
  // The connector's own fault (a credential that does not resolve or open): nothing was sent.
  if (report.unsent) throw new ConflictError(`nothing was sent to the source: ${report.verdict}`);
  if (report.verdict !== 'ok') {
    // A 2xx whose body could not be read: the verdict says what the source answered and why it is unreadable.
    if (report.status >= 200 && report.status < 300) throw new UpstreamRefused(`${method} ${request.path}: ${report.verdict}`);
    throw new UpstreamRefused(report.status ? `upstream answered HTTP ${report.status} for ${method} ${request.path}` : `upstream did not answer ${method} ${request.path}: ${report.verdict}`);
  }
  const { kind, records, pagination } = recognise(report.body, report.link);
  const first = records.find((r) => r !== null && typeof r === 'object' && !Array.isArray(r)) as Record<string, unknown> | undefined;
  // Column names are lower-case: of fields spelt alike but for case (`Name`, `name`), the first is
  // promoted (a promote name twice is refused at apply); the others stay in `data`, as do fields
  // named as a column every ext table has, PostgreSQL's own (`xmin`, `ctid`) included (apply refuses them).
  const named = new Set<string>();
  const promote = first
    ? Object.entries(first)
        // ASCII letters before lower-casing: `\u212A` (the Kelvin sign) lower-cases to `k`.
        .filter(([key, value]) => /^[a-z_][a-z0-9_]{0,62}$/i.test(key) && promoteColumnName(key.toLowerCase()) !== undefined && value !== null && (typeof value !== 'object' || value instanceof ExactNumber))
        .filter(([key]) => {
          const fresh = !named.has(key.toLowerCase());
          named.add(key.toLowerCase());
          return fresh;
        })
        .map(([key, value]) => ({ name: key.toLowerCase(), path: `$.${key}`, ...typeOf(value) }))
    : [];
  const base = request.path.split('?')[0]!.split('/').filter(Boolean).pop() ?? 'records';
  // At most 61 characters: the endpoint id and the table name (`t_` before a leading digit) stay within 63.
  const name = base.toLowerCase().replace(/[^a-z0-9]+/g, '_').slice(0, 61).replace(/^_+|_+$/g, '') || 'records';
  return {
    id: name.replace(/_/g, '-'),
    method,
    path: request.path,
    pagination: pagination ?? { kind },
    target: { kind: 'hybrid', table: `ext.${/^[a-z_]/.test(name) ? name : `t_${name}`}`, ...(first && 'id' in first ? { unique_key: '$.id' } : {}), promote },
  };
}

/** The preset an envelope looks like, and where its records are. */
function recognise(body: unknown, link: string | undefined): { kind: string; records: unknown[]; pagination?: { kind: string } & Record<string, unknown> } {
  // A bare array without a next link is the whole collection: one page, which `none` reads (at `$`).
  if (Array.isArray(body)) return { kind: link && /rel="?next"?/.test(link) ? 'link-header' : 'none', records: body };
  if (body === null || typeof body !== 'object') return { kind: 'unknown', records: [] };
  const b = body as Record<string, unknown>;
  if (Array.isArray(b.content) && 'totalPages' in b) return { kind: 'spring', records: b.content };
  if (Array.isArray(b.data) && 'has_more' in b) return { kind: 'stripe', records: b.data };
  if (Array.isArray(b.results) && 'next' in b) return { kind: 'drf', records: b.results };
  if (Array.isArray(b.data) && 'last_page' in b) return { kind: 'laravel', records: b.data };
  if (Array.isArray(b.data) && b.links && typeof b.links === 'object' && 'next' in (b.links as object)) return { kind: 'jsonapi', records: b.data };
  if (Array.isArray(b.value) && ('@odata.nextLink' in b || '@odata.context' in b)) return { kind: 'odata', records: b.value };
  if (b._links && b._embedded && typeof b._embedded === 'object') {
    return { kind: 'hal', records: (Object.values(b._embedded as object).find(Array.isArray) as unknown[] | undefined) ?? [] };
  }
  if (Array.isArray(b.data) && 'total' in b && ('offset' in b || 'limit' in b)) {
    return {
      kind: 'offset',
      records: b.data,
      pagination: { kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit: 50, response_path: '$.data', total_path: '$.total' },
    };
  }
  const list = Object.values(b).find(Array.isArray) as unknown[] | undefined;
  return { kind: 'unknown', records: list ?? [b] };
}

function typeOf(value: unknown): { type: PromoteType; transform?: string } {
  if (typeof value === 'boolean') return { type: 'boolean' };
  if (typeof value === 'number') return Number.isInteger(value) ? { type: 'bigint' } : { type: 'numeric' };
  if (typeof value === 'bigint') return value >= -9223372036854775808n && value <= 9223372036854775807n ? { type: 'bigint' } : { type: 'numeric' };
  if (value instanceof ExactNumber) return { type: 'numeric' };
  if (typeof value === 'string' && /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}/.test(value) && !Number.isNaN(Date.parse(value))) return { type: 'timestamptz', transform: 'parse_iso8601' };
  return { type: 'text' };
}
