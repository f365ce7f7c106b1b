import { said } from '../../manifests/checking.js';
import { CONNECTOR_TYPES, PROMOTE_TYPES, TRANSFORMS } from '../types.js';
import { NAMED_VALUE_PATTERN } from '../auth/names.js';
import { PRESET_NAMES } from './presets.js';

/**
 * THE JSON Schema (draft 2020-12) of a `connectors.svc.io/v1` Connector manifest: the one place its
 * shape is written. The apply and validate paths check manifests against it with ajv (validate.ts);
 * the CRD generator and the OpenAPI document reuse the same object. It is plain JSON: no `$id`, no
 * `$ref`, no formats, nothing beyond the keywords a Kubernetes structural schema understands
 * (type, properties, required, additionalProperties, items, enum, pattern, minimum, maximum,
 * minLength, maxLength, description), and it compiles under ajv's strict mode.
 *
 * What a schema cannot say lives in validate.ts: the rules that span fields (exactly one of value
 * and value_env, GraphQL and relay, fields per pagination kind and auth kind, unique endpoint ids),
 * cron and window parsing, preset expansion, and the warnings. The `spec` object is deliberately
 * open here: spec 3 makes an unknown spec key a warning, never an error.
 *
 * `messages` pairs some sub-schemas with the error text a failed `pattern` gets (ajv hands back the
 * failing sub-schema object itself), so the exported schema stays free of non-standard keywords.
 */

export const API_VERSION = 'connectors.svc.io/v1';
export const KIND = 'Connector';
export { CONNECTOR_TYPES };

/** Strategies of spec 3 ("none": one request, no paging). */
export const STRATEGIES = ['none', 'page', 'offset', 'cursor', 'link-header', 'body-link', 'relay', 'custom', 'soap'] as const;
export const PAGINATION_KINDS: readonly string[] = [...STRATEGIES, ...PRESET_NAMES];

export const HTTP_METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;
export const AUTH_KINDS = ['none', 'bearer', 'basic', 'api-key'] as const;
export const INCREMENTAL_MODES = ['full', 'watermark', 'api_cursor'] as const;

/** Keys the runtime reads at the spec level; any other is a warning (spec 3). */
export const SPEC_KEYS = ['base_url', 'auth', 'default_rate_limit', 'schedule', 'window', 'graphql_path', 'headers', 'endpoints', 'defaults'] as const;

export const NAME_PATTERN = '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$';
export const ENDPOINT_ID_PATTERN = '^[a-z0-9]+(-[a-z0-9]+)*$';
/** The longest connector name (NAME_PATTERN, a DNS label) and endpoint id: what the routes that take one accept, so a longer one is a 400 naming it, never quoted back. */
export const NAME_MAX_LENGTH = 63;
export const ENDPOINT_ID_MAX_LENGTH = 63;
export const EXT_TABLE_PATTERN = '^ext\\.[a-z_][a-z0-9_]{0,62}$';
export const COLUMN_PATTERN = '^[a-z_][a-z0-9_]{0,62}$';
export const RATE_LIMIT_PATTERN = '^([1-9][0-9]{0,8})/([1-9][0-9]{0,5})?([smh])$';
export const WINDOW_PATTERN = '^([01][0-9]|2[0-3]):[0-5][0-9]-([01][0-9]|2[0-3]):[0-5][0-9]$';

type Schema = Record<string, unknown>;

const jsonPath = (description: string): Schema =>
  said({ type: 'string', minLength: 1, pattern: '^\\$', description: `JSONPath (\`$\` is the root). ${description}` }, 'must be a JSONPath starting with $');

/** How every named value of a connector resolves (src/connectors/auth/resolver.ts). */
const NAMED_VALUE =
  "Resolved as the tenant's stored secret of that name; the hub's environment (then a configuration-file key) only for names allowed by `svc.credentials.env-allow`, never for the hub's own settings.";

const credentialName = (description: string): Schema =>
  said(
    { type: 'string', pattern: NAMED_VALUE_PATTERN, description: `${description} ${NAMED_VALUE} Never the value itself.` },
    'must be a name (letters, digits, _, ., -; optionally secret:NAME), never the credential itself',
  );

const paramName = (description: string): Schema => ({ type: 'string', minLength: 1, maxLength: 200, description });

const requestPath = said(
  { type: 'string', pattern: '^/', maxLength: 2000, description: 'Request path appended to base_url; may carry a query string (a page size goes here for strategies that send none). A credential in it (api_key=…, token=…, sig=…, or a well-known key) is accepted in the dev profile only: use auth kind api-key with in: query.' },
  'must start with /',
);

const pagination: Schema = {
  type: 'object',
  description: 'How the endpoint pages: a strategy, or a preset that expands to one at apply time (fields given beside a preset override it).',
  required: ['kind'],
  additionalProperties: false,
  properties: {
    kind: { type: 'string', enum: PAGINATION_KINDS, description: 'A strategy or a preset.' },
    page_param: paramName('page: query parameter carrying the page number.'),
    size_param: paramName('page: query parameter carrying the page size.'),
    start_page: { type: 'integer', minimum: 0, maximum: 1000000, description: 'page: the first page number (default 1).' },
    size: { type: 'integer', minimum: 1, maximum: 100000, description: 'page: page size sent in size_param (default 50).' },
    total_pages_path: jsonPath('page: the page count the source publishes.'),
    offset_param: paramName('offset: query parameter carrying the offset.'),
    limit_param: paramName('offset: query parameter carrying the limit.'),
    limit: { type: 'integer', minimum: 1, maximum: 100000, description: 'offset: limit sent in limit_param (default 50).' },
    start_offset: { type: 'integer', minimum: 0, description: 'offset: the first offset (default 0).' },
    cursor_param: paramName('cursor: query parameter carrying the cursor.'),
    cursor_path: jsonPath('cursor, relay: where the next cursor is read (relay: must resolve to a scalar directly).'),
    has_more_path: jsonPath('cursor, relay: the flag saying another page exists.'),
    link_path: jsonPath('body-link: the whole next URL in the body, until null.'),
    cursor_binding: { type: 'string', enum: ['variable'], description: 'relay: how the cursor is sent (a GraphQL variable); valid on GraphQL endpoints only.' },
    cursor_var: said(
      { type: 'string', pattern: '^[_A-Za-z][_0-9A-Za-z]*$', description: 'relay: the cursor variable name, without its $ sigil.' },
      'must be a GraphQL variable name without its $ sigil',
    ),
    response_path: jsonPath('Where the rows of a response are (default `$`).'),
    total_path: jsonPath('page, offset, body-link: the row count the source publishes; a run whose row count differs fails.'),
    page_size: { type: 'integer', minimum: 1, maximum: 100000, description: 'soap: the rows asked for per page, filling {{page_size}} (default 50).' },
    start_row: { type: 'integer', minimum: 0, description: 'soap: the 0-based row offset of the first page, filling {{start_row}}; grows by page_size (default 0).' },
  },
};

/** Local name of an XML element (an NCName without its prefix). */
const LOCAL_NAME = '^[A-Za-z_][A-Za-z0-9_.-]*$';
/** What an HTTP header value may hold (RFC 9110 field-value, as undici checks it): tab, printable ASCII, Latin-1 from 0x80. Escapes both JavaScript and Kubernetes' RE2 read (no \u). */
const HEADER_VALUE = '^[\\t -~\\x80-\\xff]*$';
const localName = (description: string): Schema =>
  said({ type: 'string', pattern: LOCAL_NAME, maxLength: 200, description }, 'must be the local name of an XML element (no prefix)');

const soap: Schema = {
  type: 'object',
  required: ['body', 'records'],
  additionalProperties: false,
  description: 'soap-generic endpoints only: one SOAP envelope per page, POSTed to path.',
  properties: {
    version: { type: 'string', enum: ['1.1', '1.2'], description: '1.1 (text/xml, SOAPAction header; default) or 1.2 (application/soap+xml, action parameter). Quote it in YAML.' },
    action: said(
      { type: 'string', maxLength: 2000, pattern: HEADER_VALUE, description: 'The SOAPAction (1.1) or the action parameter of the content type (1.2).' },
      'must be sendable in an HTTP header: tabs, printable ASCII and Latin-1 letters only (no line breaks)',
    ),
    body: { type: 'string', minLength: 1, maxLength: 100000, description: 'The operation element, placed in the SOAP Body; {{page_size}} and {{start_row}} are filled per page (XML-escaped).' },
    records: localName('Local name of the record elements, at any depth under the Body.'),
    stop: {
      type: 'object',
      required: ['flag', 'when'],
      additionalProperties: false,
      description: 'The flag that ends the read when its trimmed text equals `when` (case-insensitive). Absent: the read stops on a short or empty page.',
      properties: {
        flag: localName('Local name of the flag element, at any depth under the Body.'),
        when: { type: 'string', maxLength: 200, description: 'The value that means "no more pages" (`true` for LastPage, `false` for MoreRecords).' },
      },
    },
    session: {
      type: 'object',
      required: ['token_env', 'header'],
      additionalProperties: false,
      description: 'A session token sent in the SOAP Header of every request.',
      properties: {
        token_env: credentialName('The session token.'),
        header: { type: 'string', minLength: 1, maxLength: 100000, description: 'The header element; {{token}} is replaced by the token, XML-escaped.' },
      },
    },
  },
};

/** unique_key and promote paths: JSONPath for rest-generic, a field path for soap-generic (checked in validate.ts). */
const fieldPath = (description: string): Schema => ({
  type: 'string',
  minLength: 1,
  maxLength: 2000,
  description: `${description} rest-generic: a JSONPath (\`$\` is the root). soap-generic: the record element's children by local name, \`a/b\` a nested child, \`@x\` an attribute.`,
});

const incremental: Schema = {
  type: 'object',
  description: '`{mode: full}` (default) or `{mode: watermark, param, watermark_path}`; `api_cursor` is unimplemented and runs as full.',
  required: ['mode'],
  additionalProperties: false,
  properties: {
    mode: { type: 'string', enum: [...INCREMENTAL_MODES] },
    param: paramName('watermark: query parameter carrying the stored mark on the first request.'),
    watermark_path: jsonPath('watermark: read from every item; the running maximum becomes the next mark.'),
  },
};

const promote: Schema = {
  type: 'object',
  required: ['name', 'path', 'type'],
  additionalProperties: false,
  properties: {
    name: said({ type: 'string', pattern: COLUMN_PATTERN, description: 'Column name.' }, 'must be a lower-case column name (letters, digits, underscores; not starting with a digit; at most 63)'),
    path: fieldPath('Read against the item.'),
    type: { type: 'string', enum: [...PROMOTE_TYPES] },
    transform: { type: 'string', enum: [...TRANSFORMS] },
  },
};

const target: Schema = {
  type: 'object',
  required: ['table', 'unique_key'],
  additionalProperties: false,
  properties: {
    kind: { type: 'string', enum: ['hybrid'], description: 'Typed promoted columns plus the whole payload in `data` (default).' },
    table: said(
      { type: 'string', pattern: EXT_TABLE_PATTERN, description: '`ext.<name>`, created on the first run.' },
      'must be ext.<name>, <name> a lower-case identifier (letters, digits, underscores; not starting with a digit; at most 63)',
    ),
    unique_key: fieldPath('The row identity (column external_id, unique per tenant; every write is an upsert).'),
    promote: { type: 'array', items: promote, description: 'Typed columns projected from each item (a projection, not a filter).' },
  },
};

const endpoint: Schema = {
  type: 'object',
  required: ['id', 'target'],
  additionalProperties: false,
  properties: {
    id: said(
      { type: 'string', pattern: ENDPOINT_ID_PATTERN, maxLength: ENDPOINT_ID_MAX_LENGTH, description: 'Kebab-case, unique in the connector; keeps its UUID across applies.' },
      'must be kebab-case: lower-case letters and digits, words joined by single dashes',
    ),
    enabled: { type: 'boolean', description: 'Default true; a disabled endpoint is skipped by runs and counted by the pre-flight.' },
    method: { type: 'string', enum: [...HTTP_METHODS], description: 'Default GET; implicit (POST) for GraphQL.' },
    path: requestPath,
    kind: { type: 'string', enum: ['graphql'], description: 'An endpoint carrying `query` is GraphQL regardless.' },
    query: { type: 'string', minLength: 1, description: 'GraphQL only: the query document; declares the cursor variable with its sigil.' },
    variables: { type: 'object', description: 'GraphQL only: static variables merged into every request; the cursor is injected on top.' },
    soap,
    body: { description: "POST, PUT, PATCH only: a body template (JSON value or string) where `{{env:NAME}}` resolves like a `*_env` credential (the tenant's stored secret first)." },
    pagination,
    incremental,
    target,
  },
};

const header: Schema = {
  type: 'object',
  required: ['name'],
  additionalProperties: false,
  properties: {
    name: said({ type: 'string', pattern: "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$", maxLength: 200 }, 'must be an HTTP header name'),
    value: said({ type: 'string', pattern: HEADER_VALUE, description: 'Sent as given, `{{env:NAME}}` resolved. Outside the dev profile a credential-looking header (Authorization…, Cookie, a name with auth, key, token, secret, password, credential, session or signature, or a value that starts with an authentication scheme such as Bearer or Basic) must take its value from value_env or a template.' }, 'must be sendable as an HTTP header value: tabs, printable ASCII and Latin-1 letters only (no line breaks)'),
    value_env: credentialName('The header\'s value. Unresolved, the header is not sent (the pre-flight says so).'),
  },
};

const auth: Schema = {
  type: 'object',
  required: ['kind'],
  additionalProperties: false,
  description: 'bearer: token_env (or token_value, dev profile only); basic: username, password_env; api-key: in, name, value_env; none (default).',
  properties: {
    kind: { type: 'string', enum: [...AUTH_KINDS] },
    token_env: credentialName('bearer: the token.'),
    token_value: { type: 'string', minLength: 1, description: 'bearer, dev profile only (refused elsewhere): the token inline; ignored whenever token_env is set; never returned by GET /api/connectors/{name}.' },
    username: { type: 'string', minLength: 1, description: 'basic.' },
    password_env: credentialName('basic: the password.'),
    in: { type: 'string', enum: ['header', 'query'], description: 'api-key.' },
    name: { type: 'string', minLength: 1, description: 'api-key: header or query parameter name.' },
    value_env: credentialName('api-key: the key.'),
  },
};

const spec: Schema = {
  type: 'object',
  required: ['base_url'],
  description: 'A closed list of keys: an unknown one is a warning (ignored by the runtime), not an error.',
  properties: {
    base_url: said({ type: 'string', pattern: '^https?://[^\\s/?#]+[^\\s]*$', description: 'Base address of the source.' }, 'must be an absolute http or https URL'),
    auth,
    default_rate_limit: said(
      { type: 'string', pattern: RATE_LIMIT_PATTERN, description: '`count/window`, window an optional integer and `s`, `m` or `h` (`100/s`, `100/5m`, `1000/h`); default `100/s`; one bucket per connector.' },
      'must be count/window: a count, a slash, an optional integer and a unit s, m or h (100/s, 100/5m, 1000/h)',
    ),
    schedule: { type: 'string', minLength: 1, description: '5-field cron, UTC; omitted: on-demand runs only.' },
    window: said(
      { type: 'string', pattern: WINDOW_PATTERN, description: '`HH:MM-HH:MM` UTC, end exclusive, may cross midnight; scheduled slots outside it are skipped.' },
      'must be HH:MM-HH:MM (UTC, 24-hour)',
    ),
    graphql_path: said({ type: 'string', pattern: '^/', description: 'GraphQL endpoints POST to base_url plus this (default `/graphql`).' }, 'must start with /'),
    headers: { type: 'array', items: header, description: 'Sent with every request, before auth (an auth header wins a name clash).' },
    endpoints: { type: 'array', items: endpoint },
    defaults: { description: 'Copied verbatim into the stored config, unvalidated.' },
  },
};

export const connectorManifestSchema: Schema = {
  $schema: 'https://json-schema.org/draft/2020-12/schema',
  title: 'Connector (connectors.svc.io/v1)',
  description: 'A connector manifest: the same bytes go to POST /api/connectors/apply or to kubectl apply.',
  type: 'object',
  required: ['apiVersion', 'kind', 'metadata', 'connector_type', 'spec'],
  additionalProperties: false,
  properties: {
    apiVersion: { type: 'string', enum: [API_VERSION] },
    kind: { type: 'string', enum: [KIND] },
    metadata: {
      type: 'object',
      required: ['name'],
      description: 'Other keys (labels, annotations, namespace, …) are accepted and ignored.',
      properties: {
        name: said(
          { type: 'string', pattern: NAME_PATTERN, description: 'A DNS label: 1 to 63 lower-case letters, digits or dashes, starting and ending with a letter or digit; one per tenant.' },
          'must be a DNS label: 1 to 63 lower-case letters, digits or dashes, starting and ending with a letter or digit',
        ),
      },
    },
    connector_type: { type: 'string', enum: [...CONNECTOR_TYPES] },
    scopes: {
      type: 'array',
      description: 'Business scope tags of the data this connector ingests (duplicates collapse).',
      items: said({ type: 'string', pattern: '^\\S{1,100}$' }, 'must be a non-blank scope tag without whitespace (at most 100 characters)'),
    },
    spec,
    status: { type: 'object', description: 'Written by Kubernetes; ignored.' },
  },
};
