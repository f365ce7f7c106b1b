import { appsManifestSchema, said, SLUG_PATTERN } from '../../manifests/checking.js';
/**
 * THE JSON Schema (draft 2020-12) of an `apps.svc.io/v1` Entity manifest: the one place its shape is
 * written. The apply path checks manifests against it with ajv (validate.ts); the CRD generator
 * (src/manifests/kinds.ts) and the OpenAPI document reuse the same object. Like the Connector's
 * (src/connectors/manifest/schema.ts) it is plain JSON: no `$id`, no `$ref`, no formats, only the
 * keywords a Kubernetes structural schema understands, and it compiles under ajv's strict mode.
 *
 * Unlike a Connector's `spec`, an Entity's is closed at every level: an unknown key is an error.
 * What a schema cannot say lives in validate.ts: the key among the columns, every column mapped,
 * mapped columns declared, unique names and tables, the reserved names, JSONPath syntax. What needs
 * the tenant's database (does the source table exist, does it have the mapped column) is the store's.
 *
 * `messages` pairs some sub-schemas with the error text a failed `pattern` gets.
 */

export const API_VERSION = 'apps.svc.io/v1';
export const KIND = 'Entity';

/** The types a canonical column may declare (the promote types of a connector). */
export const COLUMN_TYPES = ['text', 'bigint', 'numeric', 'timestamptz', 'boolean'] as const;

/** A slug: what `kubectl` accepts as a name; stored lower-case (upper case is accepted over HTTP and folded). */
export const NAME_PATTERN = SLUG_PATTERN;
/** A canonical column: a lower-case SQL identifier that does not start with `_` (those are the relation's own). */
export const CANONICAL_COLUMN_PATTERN = '^[a-z][a-z0-9_]{0,62}$';
export const EXT_TABLE_PATTERN = '^ext\\.[a-z_][a-z0-9_]{0,62}$';
export const SCOPE_PATTERN = '^\\S{1,100}$';

/** Upper bounds that keep one entity's fused relation a query PostgreSQL plans quickly. */
export const MAX_COLUMNS = 200;
export const MAX_SOURCES = 16;

type Schema = Record<string, unknown>;

const SCOPE_MESSAGE = 'must be a non-blank scope tag without whitespace (at most 100 characters)';

const column: Schema = {
  type: 'object',
  required: ['name', 'type'],
  additionalProperties: false,
  properties: {
    name: said(
      { type: 'string', pattern: CANONICAL_COLUMN_PATTERN, description: 'The business name of the column: a lower-case SQL identifier (letters, digits, underscores) starting with a letter, at most 63 characters; `_entity_id`, `_conflicts` and `_resolution` are the relation\'s own.' },
      'must be a lower-case column name (letters, digits, underscores; starting with a letter; at most 63)',
    ),
    type: { type: 'string', enum: [...COLUMN_TYPES], description: 'The declared type (values are delivered as text in PostgreSQL\'s text form of that type).' },
    label: { type: 'string', minLength: 1, maxLength: 200, description: 'What a person calls the column.' },
    description: { type: 'string', minLength: 1, maxLength: 2000, description: 'What the column means.' },
    examples: { type: 'array', maxItems: 20, items: { type: 'string', maxLength: 200 }, description: 'Typical values, as text.' },
    values: {
      type: 'array',
      minItems: 1,
      maxItems: 1000,
      items: { type: 'string', maxLength: 200 },
      description: 'The declared value domain: every value the column may hold (case-sensitive, as stored). Analytic chat refuses a comparison with any other literal.',
    },
  },
};

const source: Schema = {
  type: 'object',
  required: ['table', 'key', 'columns'],
  additionalProperties: false,
  properties: {
    table: said(
      { type: 'string', pattern: EXT_TABLE_PATTERN, description: 'The tenant\'s ingested table `ext.<name>` (a connector\'s target); it may not exist yet.' },
      'must be ext.<name>, <name> a lower-case identifier (letters, digits, underscores; not starting with a digit; at most 63)',
    ),
    key: {
      type: 'string',
      minLength: 1,
      maxLength: 2000,
      description: 'Where this source holds the entity key: a column of the table (`external_id` or a promoted column) or a JSONPath into `data` (`$.code`). Rows whose key is null or empty are left out.',
    },
    columns: {
      type: 'object',
      maxProperties: MAX_COLUMNS,
      additionalProperties: { type: 'string', minLength: 1, maxLength: 2000 },
      description: 'Canonical column -> a column of the table (`external_id` or a promoted column) or a JSONPath into `data` starting with `$` (`$.contact.email`, `$.lines[0].sku`, `$[\'a b\']`).',
    },
  },
};

const spec: Schema = {
  type: 'object',
  required: ['scope', 'key', 'columns', 'sources'],
  additionalProperties: false,
  properties: {
    scope: said(
      {
        type: ['string', 'array'],
        pattern: SCOPE_PATTERN,
        minItems: 1,
        maxItems: 50,
        items: said({ type: 'string', pattern: SCOPE_PATTERN }, SCOPE_MESSAGE),
        description: 'The business scope (or a list of scopes) the entity belongs to; duplicates collapse.',
      },
      SCOPE_MESSAGE,
    ),
    key: { type: 'string', minLength: 1, maxLength: 63, description: 'The canonical key column: the name of one of spec.columns.' },
    columns: { type: 'array', minItems: 1, maxItems: MAX_COLUMNS, items: column, description: 'The canonical columns, in the order the fused relation shows them.' },
    sources: {
      type: 'array',
      minItems: 1,
      maxItems: MAX_SOURCES,
      items: source,
      description: 'Where the columns come from. Several sources fuse on the key; where they disagree the first declared wins (precedence) and the disagreement is recorded in `_conflicts`.',
    },
  },
};

export const entityManifestSchema: Schema = appsManifestSchema(
  KIND,
  'An entity manifest: canonical, business-named columns over ingested ext.* tables, several sources fused on one key. The same bytes go to POST /api/entities/apply or to kubectl apply.',
  spec,
);

