/**
 * The connector model after apply: a Connector manifest (spec 3) validated, presets expanded,
 * defaults filled and endpoint UUIDs assigned. Everything downstream (engine, runner, pre-flight,
 * scheduler) works on these types, never on the raw manifest.
 */

export type HttpMethod = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

export type Pagination =
  /** No pagination declared: one request, items at response_path (default `$`). */
  | { kind: 'none'; response_path: string }
  | {
      kind: 'page';
      page_param: string;
      size_param: string;
      start_page: number;
      size: number;
      total_pages_path?: string;
      response_path: string;
      total_path?: string;
    }
  | { kind: 'offset'; offset_param: string; limit_param: string; limit: number; start_offset?: number; response_path: string; total_path?: string }
  | { kind: 'cursor'; cursor_param: string; cursor_path: string; has_more_path?: string; response_path: string }
  | { kind: 'link-header'; response_path: string }
  | { kind: 'body-link'; link_path: string; response_path: string; total_path?: string }
  | { kind: 'relay'; cursor_binding: 'variable'; cursor_var: string; cursor_path: string; has_more_path: string; response_path: string }
  /** Applies cleanly, fails on the second page (spec 3). */
  | { kind: 'custom'; response_path: string }
  /** SOAP endpoints only: `{{page_size}}` and `{{start_row}}` fill the operation body; start_row grows by page_size. */
  | { kind: 'soap'; page_size: number; start_row: number };

export type PaginationKind = Pagination['kind'];

export type Incremental = { mode: 'full' } | { mode: 'watermark'; param: string; watermark_path: string } | { mode: 'api_cursor' };

export const PROMOTE_TYPES = ['text', 'bigint', 'timestamptz', 'numeric', 'boolean'] as const;
export type PromoteType = (typeof PROMOTE_TYPES)[number];

export const TRANSFORMS = ['parse_iso8601', 'trim', 'lowercase', 'uppercase', 'to_string'] as const;
type Transform = (typeof TRANSFORMS)[number];

export interface Promote {
  name: string;
  /** JSONPath into the item. */
  path: string;
  type: PromoteType;
  transform?: Transform;
}

export interface Target {
  kind: 'hybrid';
  /** `ext.<name>` */
  table: string;
  /** JSONPath of the row identity (column external_id). */
  unique_key: string;
  promote: Promote[];
  /**
   * Never from a manifest: the CSV ingest's target (every column promoted as text). A promote naming
   * a column the table already has takes that column's type (ExtSchema.ensureTable), its values read
   * as that type, rather than failing the run on the clash.
   */
  typesFromTable?: boolean;
}

export type Auth =
  | { kind: 'none' }
  | { kind: 'bearer'; token_env?: string; token_value?: string }
  | { kind: 'basic'; username: string; password_env: string }
  | { kind: 'api-key'; in: 'header' | 'query'; name: string; value_env: string };

export interface HeaderSpec {
  name: string;
  value?: string;
  value_env?: string;
}

export interface RateLimit {
  count: number;
  windowMs: number;
}

export const CONNECTOR_TYPES = ['rest-generic', 'soap-generic'] as const;
export type ConnectorType = (typeof CONNECTOR_TYPES)[number];

/**
 * How a `soap-generic` endpoint talks to its service: one envelope per page, POSTed to the path.
 * Record fields are the record element's children by local name; the target's paths are turned into
 * JSONPath over that projection at apply (`a/b` -> `$.a.b`, `@x` -> `$['@x']`).
 */
export interface SoapCall {
  /** 1.1: text/xml and a SOAPAction header; 1.2: application/soap+xml with an action parameter. */
  version: '1.1' | '1.2';
  action?: string;
  /** The operation element; `{{page_size}}` and `{{start_row}}` are filled per page (XML-escaped). */
  body: string;
  /** Local name of the record elements, at any depth under the Body. */
  records: string;
  /** Absent: the read stops on a short or empty page. */
  stop?: { flag: string; when: string };
  /** A token (resolved like every `*_env` credential) sent in the SOAP Header of every request. */
  session?: { token_env: string; header: string };
}

export interface EndpointSpec {
  /** Kebab-case id from the manifest (what paths accept). */
  id: string;
  /** Stable UUID assigned at first apply, kept while `id` stays in the manifest. */
  uuid: string;
  enabled: boolean;
  method: HttpMethod;
  /** Request path, may carry a query string. For GraphQL: the connector's graphql_path. */
  path: string;
  graphql: boolean;
  query?: string;
  variables?: Record<string, unknown>;
  /** POST/PUT/PATCH body template (JSON value or string); `{{env:NAME}}` resolves from the environment. */
  body?: unknown;
  /** `soap-generic` connectors: the SOAP call (method is POST, pagination kind `soap`). */
  soap?: SoapCall;
  pagination: Pagination;
  incremental: Incremental;
  target: Target;
}

export interface ConnectorSpec {
  /** UUID of the connector. */
  id: string;
  name: string;
  tenantId: number;
  connectorType: ConnectorType;
  scopes: string[];
  baseUrl: string;
  auth: Auth;
  rateLimit: RateLimit;
  /** 5-field cron, UTC. */
  schedule?: string;
  /** Window fence in minutes after midnight UTC, end exclusive; may cross midnight. */
  window?: { start: number; end: number };
  graphqlPath: string;
  headers: HeaderSpec[];
  endpoints: EndpointSpec[];
  /** Copied verbatim, unvalidated. */
  defaults?: unknown;
}

/** One page as the engine hands it over. */
export interface Page {
  /** 1-based page number within the run. */
  number: number;
  items: unknown[];
  /** The row count the source declared on this page (total_path), if any. */
  declaredTotal?: number;
}
