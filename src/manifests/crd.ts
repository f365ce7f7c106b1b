import { stringify } from 'yaml';
import { re2Pattern } from './re2.js';
import { apiVersionOf, crdNameOf, type ManifestKind, MANIFEST_KINDS } from './kinds.js';

/**
 * CustomResourceDefinitions generated from the registered manifest kinds (kinds.ts): each kind's
 * JSON Schema, the one its apply path validates with, translated into a Kubernetes structural
 * schema (apiextensions.k8s.io/v1). Pure: scripts/generate-crds.ts writes the result to crds/,
 * test/crds.test.ts compares it with what is there.
 *
 * The translation (JSON Schema draft 2020-12 → structural OpenAPI v3):
 * - `$ref` (local, `#/...`) is inlined; `$defs`, `$schema`, `$id`, `examples`, `default` and every
 *   keyword the apiserver does not know are dropped (the apply path still checks them).
 * - `additionalProperties: false` is dropped (Kubernetes forbids it beside `properties`; pruning and
 *   kubectl's strict field validation refuse unknown fields instead). An object the JSON Schema
 *   leaves open (no `additionalProperties`, or `true`) gets `x-kubernetes-preserve-unknown-fields`,
 *   so unknown keys reach the apply path, which warns about them (the `spec` level) rather than being
 *   pruned away silently. `additionalProperties: <schema>` without `properties` stays a map.
 * - A node without a single type: `["integer", "string"]` becomes `x-kubernetes-int-or-string`, a
 *   `null` member becomes `nullable`, anything else (no type, other unions, `oneOf`/`anyOf`/`allOf`
 *   branches of different types) becomes `x-kubernetes-preserve-unknown-fields` without a type.
 *   `oneOf`/`anyOf`/`allOf`/`not` are dropped: the apply path is where they are enforced.
 * - `const` becomes a one-value `enum`; a numeric `exclusiveMinimum`/`exclusiveMaximum` becomes
 *   `minimum`/`maximum` plus the OpenAPI v3.0 boolean.
 * - The root: `apiVersion` and `kind` keep only their type (the apiserver owns them), `metadata`
 *   keeps only restrictions on `name` (all Kubernetes allows), the top-level extras (for a Connector
 *   `connector_type`, `scopes`) are declared beside `spec` (a custom resource may carry top-level
 *   fields only when the root schema declares them), and `status` is the status schema of
 *   CONTRACTS.md section 6, written by the operator through the status subresource.
 */

type Schema = Record<string, unknown>;

const PRESERVE = 'x-kubernetes-preserve-unknown-fields';
const INT_OR_STRING = 'x-kubernetes-int-or-string';
const ENVELOPE = new Set(['apiVersion', 'kind', 'metadata', 'status']);

const isObject = (v: unknown): v is Schema => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Resolves a local JSON pointer (`#/$defs/x`) against the root schema. */
function resolvePointer(root: Schema, ref: string): Schema {
  if (!ref.startsWith('#')) throw new Error(`only local $ref are supported, got ${ref}`);
  let node: unknown = root;
  for (const raw of ref.slice(1).split('/').filter(Boolean)) {
    const key = decodeURIComponent(raw).replaceAll('~1', '/').replaceAll('~0', '~');
    node = isObject(node) ? node[key] : undefined;
  }
  if (!isObject(node)) throw new Error(`$ref ${ref} resolves to nothing`);
  return node;
}

/** The schema with its `$ref` chain inlined (siblings of `$ref` win, as in draft 2020-12 they both apply). */
function dereference(node: Schema, root: Schema, seen: string[] = []): Schema {
  const ref = node.$ref;
  if (typeof ref !== 'string') return node;
  if (seen.includes(ref)) throw new Error(`recursive $ref ${ref}: a structural schema cannot express it`);
  const { $ref: _, ...siblings } = node;
  return { ...dereference(resolvePointer(root, ref), root, [...seen, ref]), ...siblings };
}

function typesOf(node: Schema, root: Schema): string[] | undefined {
  if (typeof node.type === 'string') return [node.type];
  if (Array.isArray(node.type)) return node.type as string[];
  if (node.const !== undefined) return [jsonType(node.const)];
  if (Array.isArray(node.enum) && node.enum.length) {
    const types = [...new Set(node.enum.map(jsonType))];
    return types;
  }
  for (const junctor of ['oneOf', 'anyOf', 'allOf'] as const) {
    const branches = node[junctor];
    if (!Array.isArray(branches) || !branches.length) continue;
    const all = new Set<string>();
    for (const branch of branches) {
      const types = isObject(branch) ? typesOf(dereference(branch, root), root) : undefined;
      if (!types) return undefined;
      for (const t of types) all.add(t);
    }
    return [...all];
  }
  return undefined;
}

function jsonType(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  if (typeof value === 'number') return Number.isInteger(value) ? 'integer' : 'number';
  return typeof value;
}

const SCALAR_KEYWORDS: Record<string, string[]> = {
  string: ['minLength', 'maxLength', 'pattern', 'format'],
  integer: ['minimum', 'maximum', 'multipleOf', 'format'],
  number: ['minimum', 'maximum', 'multipleOf', 'format'],
  array: ['minItems', 'maxItems', 'uniqueItems'],
  object: ['minProperties', 'maxProperties'],
};

/** One JSON Schema node as a structural schema node. */
function toStructural(input: unknown, root: Schema): Schema {
  if (input === true || (isObject(input) && Object.keys(input).length === 0)) return { [PRESERVE]: true };
  if (!isObject(input)) throw new Error(`not a schema: ${JSON.stringify(input)}`);
  const node = dereference(input, root);
  const out: Schema = {};
  for (const key of ['title', 'description'] as const) if (typeof node[key] === 'string') out[key] = node[key];

  let types = typesOf(node, root);
  const nullable = types?.includes('null') ?? false;
  types = types?.filter((t) => t !== 'null');
  if (types?.includes('integer') && types.includes('number')) types = types.filter((t) => t !== 'integer');

  if (!types || types.length === 0) {
    out[PRESERVE] = true;
    if (nullable) out.nullable = true;
    return out;
  }
  if (types.length > 1) {
    if (types.length === 2 && types.includes('integer') && types.includes('string')) out[INT_OR_STRING] = true;
    else out[PRESERVE] = true;
    if (nullable) out.nullable = true;
    return out;
  }

  const type = types[0]!;
  out.type = type;
  if (nullable) out.nullable = true;
  for (const key of SCALAR_KEYWORDS[type] ?? []) if (node[key] !== undefined) out[key] = key === 'pattern' ? re2Pattern(node[key] as string) : node[key];
  if (type === 'integer' || type === 'number') {
    for (const [exclusive, bound] of [['exclusiveMinimum', 'minimum'], ['exclusiveMaximum', 'maximum']] as const) {
      if (typeof node[exclusive] === 'number') {
        out[bound] = node[exclusive];
        out[exclusive] = true;
      }
    }
  }
  if (node.const !== undefined) out.enum = [node.const];
  else if (Array.isArray(node.enum)) out.enum = node.enum.filter((v) => jsonType(v) === type || (type === 'number' && jsonType(v) === 'integer'));

  if (type === 'array') out.items = node.items === undefined || node.items === true ? { [PRESERVE]: true } : toStructural(node.items, root);

  if (type === 'object') {
    const properties = isObject(node.properties) ? node.properties : undefined;
    if (properties) {
      out.properties = Object.fromEntries(Object.entries(properties).map(([name, sub]) => [name, toStructural(sub, root)]));
      if (Array.isArray(node.required)) {
        const required = (node.required as string[]).filter((name) => name in properties);
        if (required.length) out.required = required;
      }
    }
    const additional = node.additionalProperties;
    if (additional === false) {
      // closed: pruning and kubectl's field validation refuse unknown keys
    } else if (isObject(additional) && !properties) {
      out.additionalProperties = toStructural(additional, root);
    } else {
      out[PRESERVE] = true;
    }
  }
  return out;
}

/**
 * The status of every registered kind (docs/kubernetes.md, "Status"); `lastRun` for connectors and
 * exports. Every field the operator writes is declared here: an API server prunes undeclared ones.
 */
function statusSchema(kind: ManifestKind): Schema {
  const properties: Schema = {
    observedGeneration: { type: 'integer', format: 'int64', description: 'The metadata.generation the conditions describe.' },
    tenant: { type: 'string', description: 'The code of the tenant the hub holds the resource in.' },
    conditions: {
      type: 'array',
      description: '`Ready`, `Reconciling`, `Stalled` (kstatus), plus `Scheduled` where the resource has a schedule.',
      'x-kubernetes-list-type': 'map',
      'x-kubernetes-list-map-keys': ['type'],
      items: {
        type: 'object',
        required: ['type', 'status'],
        properties: {
          type: { type: 'string', description: 'Ready, Reconciling, Stalled or Scheduled.' },
          status: { type: 'string', enum: ['True', 'False', 'Unknown'] },
          reason: { type: 'string', description: 'CamelCase reason (e.g. Applied, Invalid, TenantUnresolved, Conflict, HubUnavailable).' },
          message: { type: 'string', description: 'Human-readable detail; a validation error names its field.' },
          lastTransitionTime: { type: 'string', format: 'date-time' },
          observedGeneration: { type: 'integer', format: 'int64' },
        },
      },
    },
  };
  if (kind.lastRun) {
    properties.lastRun = {
      type: 'object',
      description: 'The latest run.',
      properties: {
        id: { type: 'string', description: 'Run id in the hub.' },
        status: { type: 'string', description: 'Running, Completed, Partial, Failed, …' },
        endedAt: { type: 'string', format: 'date-time', nullable: true, description: 'Absent while the run runs.' },
      },
    };
  }
  return { type: 'object', description: 'Written by the operator through the status subresource.', properties };
}

/** The openAPIV3Schema of a kind: its manifest schema made structural, with the envelope Kubernetes owns. */
function openApiSchemaOf(kind: ManifestKind): Schema {
  const root = kind.schema;
  const converted = toStructural(root, root);
  const properties = (converted.properties ?? {}) as Record<string, Schema>;
  const metadata = isObject(properties.metadata?.properties) ? properties.metadata.properties : {};
  const name = metadata.name as Schema | undefined;
  const rootProperties: Record<string, Schema> = {
    apiVersion: { type: 'string', description: `${apiVersionOf(kind)}.` },
    kind: { type: 'string', description: `${kind.kind}.` },
    metadata: { type: 'object', ...(name ? { properties: { name } } : {}) },
  };
  for (const [key, sub] of Object.entries(properties)) if (!ENVELOPE.has(key)) rootProperties[key] = sub;
  rootProperties.status = statusSchema(kind);
  const required = ((converted.required ?? []) as string[]).filter((key) => !ENVELOPE.has(key));
  return {
    type: 'object',
    ...(typeof converted.description === 'string' ? { description: converted.description } : {}),
    ...(required.length ? { required } : {}),
    properties: rootProperties,
  };
}

export function crdOf(kind: ManifestKind): Schema {
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: crdNameOf(kind) },
    spec: {
      group: kind.group,
      names: {
        kind: kind.kind,
        listKind: `${kind.kind}List`,
        plural: kind.plural,
        singular: kind.singular,
        ...(kind.shortNames.length ? { shortNames: kind.shortNames } : {}),
        ...(kind.categories?.length ? { categories: kind.categories } : {}),
      },
      scope: 'Namespaced',
      versions: [
        {
          name: kind.version,
          served: true,
          storage: true,
          subresources: { status: {} },
          additionalPrinterColumns: kind.printerColumns,
          schema: { openAPIV3Schema: openApiSchemaOf(kind) },
        },
      ],
    },
  };
}

const HEADER = (kind: ManifestKind) =>
  `# Generated by scripts/generate-crds.ts (npm run crds) from the ${kind.kind} manifest JSON Schema\n` +
  '# registered in src/manifests/kinds.ts. Do not edit: regenerate, then npm run chart:crds.\n';

/** Every registered kind's CRD as the text of crds/<plural>.<group>.yaml, keyed by file name (YAML 1.1, as Kubernetes reads it). */
export function renderCrds(kinds: readonly ManifestKind[] = MANIFEST_KINDS): Map<string, string> {
  const files = new Map<string, string>();
  for (const kind of kinds) files.set(`${crdNameOf(kind)}.yaml`, HEADER(kind) + stringify(crdOf(kind), { version: '1.1' }));
  return files;
}
