import { re2Pattern } from './re2.js';

/**
 * A manifest kind's JSON Schema (the one its apply path validates with) as a Kubernetes structural
 * schema (apiextensions.k8s.io/v1), node by node: what crd.ts writes into each CRD, and what the apply
 * path reads a manifest through as kube-apiserver reads a custom resource (`withoutPrunedNulls`).
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
 */

export type Schema = Record<string, unknown>;

const PRESERVE = 'x-kubernetes-preserve-unknown-fields';
const INT_OR_STRING = 'x-kubernetes-int-or-string';

export const isObject = (v: unknown): v is Schema => typeof v === 'object' && v !== null && !Array.isArray(v);

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
export function toStructural(input: unknown, root: Schema): Schema {
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
 * `value` as kube-apiserver keeps a custom resource its structural schema reads: a `null` where the
 * schema takes none (no `nullable`; the CRDs give no defaults) is dropped with its key, at any depth
 * the schema declares (a property, a map's value, a list's item), as the apiserver's
 * PruneNonNullableNullsWithoutDefaults drops it before validation. So `label:` left empty in YAML,
 * or `"auth": null`, means the field left out, through kubectl and the apply routes alike. A null
 * where the schema declares nothing (an unknown key of an open object, inside a free-form value) stays.
 * A copy where something is dropped; `value` itself is not changed.
 */
export function withoutPrunedNulls(value: unknown, schema: Schema | undefined): unknown {
  if (!schema) return value;
  if (Array.isArray(value)) {
    const items = isObject(schema.items) ? schema.items : undefined;
    if (!items) return value;
    let copy: unknown[] | undefined;
    value.forEach((item, i) => {
      const read = withoutPrunedNulls(item, items);
      if (read === item) return;
      copy ??= [...value];
      copy[i] = read;
    });
    return copy ?? value;
  }
  if (!isObject(value)) return value;
  const properties = isObject(schema.properties) ? schema.properties : undefined;
  const additional = isObject(schema.additionalProperties) ? schema.additionalProperties : undefined;
  let copy: Schema | undefined;
  // Without a schema for other keys, only the declared ones can hold what is read: the walk is over the
  // schema's keys, never over each of the value's (49,000 unknown keys were each looked up here).
  const keys = additional ? Object.keys(value) : properties ? Object.keys(properties).filter((key) => Object.hasOwn(value, key)) : [];
  for (const key of keys) {
    const item = value[key];
    const sub = (properties && Object.hasOwn(properties, key) ? properties[key] : additional) as Schema | undefined;
    if (!sub) continue;
    if (item === null && sub.nullable !== true && sub.default === undefined) {
      copy ??= { ...value };
      delete copy[key];
      continue;
    }
    const read = withoutPrunedNulls(item, sub);
    if (read === item) continue;
    copy ??= { ...value };
    // Defined, not assigned: a key `__proto__` (JSON.parse makes it an own key) stays a key.
    Object.defineProperty(copy, key, { value: read, writable: true, enumerable: true, configurable: true });
  }
  return copy ?? value;
}
