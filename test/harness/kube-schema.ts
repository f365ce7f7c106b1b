/**
 * Part of the SCRIPTED KUBERNETES API STAND-IN (test/harness/kube-api.ts): what kube-apiserver does
 * with a custom resource and the structural openAPIV3Schema of its CRD, in the server's order:
 * prune the fields the schema does not declare, apply `default`s, then validate. Errors are
 * field errors as the server reports them (`field: Invalid value: …`, `field: Required value`, …).
 */

export interface JSONSchemaProps {
  type?: 'object' | 'array' | 'string' | 'integer' | 'number' | 'boolean';
  description?: string;
  properties?: Record<string, JSONSchemaProps>;
  required?: string[];
  items?: JSONSchemaProps;
  additionalProperties?: JSONSchemaProps | boolean;
  enum?: unknown[];
  format?: string;
  default?: unknown;
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: boolean;
  exclusiveMaximum?: boolean;
  multipleOf?: number;
  minLength?: number;
  maxLength?: number;
  pattern?: string;
  minItems?: number;
  maxItems?: number;
  uniqueItems?: boolean;
  minProperties?: number;
  maxProperties?: number;
  nullable?: boolean;
  oneOf?: JSONSchemaProps[];
  anyOf?: JSONSchemaProps[];
  allOf?: JSONSchemaProps[];
  not?: JSONSchemaProps;
  'x-kubernetes-preserve-unknown-fields'?: boolean;
  'x-kubernetes-int-or-string'?: boolean;
  'x-kubernetes-embedded-resource'?: boolean;
  'x-kubernetes-list-type'?: 'atomic' | 'set' | 'map';
  'x-kubernetes-list-map-keys'?: string[];
  [key: string]: unknown;
}

export type CauseReason =
  | 'FieldValueInvalid'
  | 'FieldValueRequired'
  | 'FieldValueNotSupported'
  | 'FieldValueTooLong'
  | 'FieldValueTooMany'
  | 'FieldValueDuplicate'
  | 'FieldValueForbidden';

/** A field error: `field: message` is how the server prints it; `message` is the cause's message. */
export interface FieldError {
  reason: CauseReason;
  field: string;
  message: string;
}

type Obj = Record<string, unknown>;
const isObject = (v: unknown): v is Obj => v !== null && typeof v === 'object' && !Array.isArray(v);
const clone = <T>(v: T): T => structuredClone(v);

/** Go's %#v of the value, roughly: strings quoted, numbers bare, the rest as JSON. */
export function goValue(v: unknown): string {
  if (typeof v === 'string') return JSON.stringify(v);
  if (v === null || v === undefined) return 'null';
  return typeof v === 'object' ? JSON.stringify(v) : String(v);
}

export const fieldErrors = {
  invalid: (field: string, value: unknown, detail: string): FieldError => ({ reason: 'FieldValueInvalid', field, message: `Invalid value: ${goValue(value)}: ${detail}` }),
  required: (field: string, detail = ''): FieldError => ({ reason: 'FieldValueRequired', field, message: `Required value${detail ? `: ${detail}` : ''}` }),
  notSupported: (field: string, value: unknown, supported: unknown[]): FieldError => ({
    reason: 'FieldValueNotSupported',
    field,
    message: `Unsupported value: ${goValue(value)}: supported values: ${supported.map(goValue).join(', ')}`,
  }),
  tooLong: (field: string, max: number): FieldError => ({ reason: 'FieldValueTooLong', field, message: `Too long: must have at most ${max} bytes` }),
  tooMany: (field: string, actual: number, max: number): FieldError => ({ reason: 'FieldValueTooMany', field, message: `Too many: ${actual}: must have at most ${max} items` }),
  duplicate: (field: string, value: unknown): FieldError => ({ reason: 'FieldValueDuplicate', field, message: `Duplicate value: ${goValue(value)}` }),
  forbidden: (field: string, detail: string): FieldError => ({ reason: 'FieldValueForbidden', field, message: `Forbidden: ${detail}` }),
};

/** The fields of metav1.ObjectMeta: what survives in `metadata` (the rest is dropped when decoded). */
export const OBJECT_META_FIELDS = new Set([
  'name',
  'generateName',
  'namespace',
  'selfLink',
  'uid',
  'resourceVersion',
  'generation',
  'creationTimestamp',
  'deletionTimestamp',
  'deletionGracePeriodSeconds',
  'labels',
  'annotations',
  'ownerReferences',
  'finalizers',
  'managedFields',
]);

export function pruneObjectMeta(meta: unknown): Obj {
  if (!isObject(meta)) return {};
  return Object.fromEntries(Object.entries(meta).filter(([k]) => OBJECT_META_FIELDS.has(k)));
}

// ---- pruning ------------------------------------------------------------------------------------

/**
 * Drops, in place, every field `schema` does not declare (unless under x-kubernetes-preserve-unknown-fields);
 * the path of each (`spec.foo`, `metadata.bar`) is pushed to `unknown` when given.
 */
export function prune(value: unknown, schema: JSONSchemaProps | undefined, root = false, unknown?: string[], path = ''): unknown {
  if (!schema) return value;
  const at = (key: string) => (path ? `${path}.${key}` : key);
  if (Array.isArray(value)) {
    if (schema.items) for (let i = 0; i < value.length; i++) value[i] = prune(value[i], schema.items, false, unknown, `${path}[${i}]`);
    return value;
  }
  if (!isObject(value)) return value;
  const embedded = root || schema['x-kubernetes-embedded-resource'] === true;
  const additional = isObject(schema.additionalProperties) ? (schema.additionalProperties as JSONSchemaProps) : undefined;
  const preserve = schema['x-kubernetes-preserve-unknown-fields'] === true || schema.additionalProperties === true;
  for (const key of Object.keys(value)) {
    if (embedded && (key === 'apiVersion' || key === 'kind')) continue;
    if (embedded && key === 'metadata') {
      if (isObject(value.metadata)) for (const k of Object.keys(value.metadata)) if (!OBJECT_META_FIELDS.has(k)) unknown?.push(at(`metadata.${k}`));
      value.metadata = pruneObjectMeta(value.metadata);
      continue;
    }
    const declared = schema.properties?.[key];
    if (declared) value[key] = prune(value[key], declared, false, unknown, at(key));
    else if (additional) value[key] = prune(value[key], additional, false, unknown, at(key));
    else if (!preserve) {
      unknown?.push(at(key));
      delete value[key];
    }
  }
  return value;
}

// ---- defaulting ---------------------------------------------------------------------------------

/**
 * Applies `default`s, in place, top-down (a default's own nested defaults apply too). A null where the
 * schema is not nullable is replaced by the default, or dropped when there is none (as the server's
 * PruneNonNullableNullsWithoutDefaults does); a nullable null stays null.
 */
export function applyDefaults(value: unknown, schema: JSONSchemaProps | undefined): unknown {
  if (!schema) return value;
  if (Array.isArray(value)) {
    if (schema.items) for (let i = 0; i < value.length; i++) value[i] = applyDefaults(value[i], schema.items);
    return value;
  }
  if (!isObject(value)) return value;
  const additional = isObject(schema.additionalProperties) ? (schema.additionalProperties as JSONSchemaProps) : undefined;
  for (const key of Object.keys(value)) {
    const prop = schema.properties?.[key] ?? additional;
    if (prop && value[key] === null && !prop.nullable && prop.default === undefined) delete value[key];
  }
  for (const [key, prop] of Object.entries(schema.properties ?? {})) {
    const v = value[key];
    if (prop.default !== undefined && (v === undefined || (v === null && !prop.nullable))) value[key] = clone(prop.default);
  }
  for (const key of Object.keys(value)) {
    const prop = schema.properties?.[key] ?? additional;
    if (prop) value[key] = applyDefaults(value[key], prop);
  }
  return value;
}

// ---- validation ---------------------------------------------------------------------------------

const FORMATS: Record<string, (s: string) => boolean> = {
  'date-time': (s) => /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/.test(s) && !Number.isNaN(Date.parse(s.replace(' ', 'T'))),
  datetime: (s) => FORMATS['date-time']!(s),
  date: (s) => /^\d{4}-\d{2}-\d{2}$/.test(s) && !Number.isNaN(Date.parse(s)),
  byte: (s) => /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/.test(s),
  uuid: (s) => /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(s),
  int32: () => true,
  int64: () => true,
};

function typeName(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  if (typeof v === 'number') return Number.isInteger(v) ? 'integer' : 'number';
  return typeof v;
}

function hasType(v: unknown, type: NonNullable<JSONSchemaProps['type']>): boolean {
  switch (type) {
    case 'object':
      return isObject(v);
    case 'array':
      return Array.isArray(v);
    case 'string':
      return typeof v === 'string';
    case 'boolean':
      return typeof v === 'boolean';
    case 'integer':
      return typeof v === 'number' && Number.isInteger(v);
    case 'number':
      return typeof v === 'number' && Number.isFinite(v);
  }
}

const canonicalJson = (v: unknown): string =>
  JSON.stringify(v, (_k, x) => (isObject(x) ? Object.fromEntries(Object.entries(x).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) : x));
const deepEqual = (a: unknown, b: unknown) => canonicalJson(a) === canonicalJson(b);

/** The field errors of `value` against `schema` at `path` ('' for the root). */
export function validate(value: unknown, schema: JSONSchemaProps | undefined, path = '', errors: FieldError[] = []): FieldError[] {
  if (!schema) return errors;
  const at = path || '<root>';
  const invalid = (v: unknown, detail: string) => errors.push(fieldErrors.invalid(at, v, `${at} in body ${detail}`));
  if (value === null) {
    if (!schema.nullable && schema.type) invalid('null', `must be of type ${schema.type}: "null"`);
    return errors;
  }
  if (schema['x-kubernetes-int-or-string']) {
    if (!(typeof value === 'string' || (typeof value === 'number' && Number.isInteger(value)))) {
      invalid(typeName(value), `must be of type integer-or-string: ${JSON.stringify(typeName(value))}`);
      return errors;
    }
  } else if (schema.type && !hasType(value, schema.type)) {
    invalid(typeName(value), `must be of type ${schema.type}: ${JSON.stringify(typeName(value))}`);
    return errors;
  }
  if (schema.enum && !schema.enum.some((e) => deepEqual(e, value))) errors.push(fieldErrors.notSupported(at, value, schema.enum));

  if (typeof value === 'string') {
    const length = [...value].length;
    if (schema.maxLength !== undefined && length > schema.maxLength) errors.push(fieldErrors.tooLong(at, schema.maxLength));
    if (schema.minLength !== undefined && length < schema.minLength) invalid(value, `should be at least ${schema.minLength} chars long`);
    if (schema.pattern !== undefined && !re2RegExp(schema.pattern).test(value)) invalid(value, `should match '${schema.pattern}'`);
    const format = schema.format ? FORMATS[schema.format] : undefined;
    if (format && !format(value)) invalid(value, `must be of type ${schema.format}: ${JSON.stringify(value)}`);
  }
  if (typeof value === 'number') {
    if (schema.minimum !== undefined && (schema.exclusiveMinimum ? value <= schema.minimum : value < schema.minimum)) {
      invalid(value, `should be greater than ${schema.exclusiveMinimum ? '' : 'or equal to '}${schema.minimum}`);
    }
    if (schema.maximum !== undefined && (schema.exclusiveMaximum ? value >= schema.maximum : value > schema.maximum)) {
      invalid(value, `should be less than ${schema.exclusiveMaximum ? '' : 'or equal to '}${schema.maximum}`);
    }
    if (schema.multipleOf !== undefined && Math.abs(value / schema.multipleOf - Math.round(value / schema.multipleOf)) > 1e-9) {
      invalid(value, `should be a multiple of ${schema.multipleOf}`);
    }
    if (schema.format === 'int32' && (value < -2147483648 || value > 2147483647)) invalid(value, `must be of type int32: "${value}"`);
  }
  if (Array.isArray(value)) {
    if (schema.maxItems !== undefined && value.length > schema.maxItems) errors.push(fieldErrors.tooMany(at, value.length, schema.maxItems));
    if (schema.minItems !== undefined && value.length < schema.minItems) invalid(value, `should have at least ${schema.minItems} items`);
    const listType = schema['x-kubernetes-list-type'];
    if (schema.uniqueItems || listType === 'set') {
      const seen = new Set<string>();
      value.forEach((item, i) => {
        const k = canonicalJson(item);
        if (seen.has(k)) errors.push(fieldErrors.duplicate(`${at}[${i}]`, item));
        seen.add(k);
      });
    }
    if (listType === 'map') {
      const keys = schema['x-kubernetes-list-map-keys'] ?? [];
      const seen = new Set<string>();
      value.forEach((item, i) => {
        if (!isObject(item)) return;
        const k = canonicalJson(keys.map((key) => item[key]));
        if (seen.has(k)) errors.push(fieldErrors.duplicate(`${at}[${i}]`, Object.fromEntries(keys.map((key) => [key, item[key]]))));
        seen.add(k);
      });
    }
    if (schema.items) value.forEach((item, i) => {
      validate(item, schema.items, `${path}[${i}]`, errors);
    });
  }
  if (isObject(value)) {
    const child = (key: string) => (path ? `${path}.${key}` : key);
    for (const key of schema.required ?? []) if (value[key] === undefined) errors.push(fieldErrors.required(child(key)));
    const count = Object.keys(value).length;
    if (schema.maxProperties !== undefined && count > schema.maxProperties) invalid(value, `should have at most ${schema.maxProperties} properties`);
    if (schema.minProperties !== undefined && count < schema.minProperties) invalid(value, `should have at least ${schema.minProperties} properties`);
    if (schema['x-kubernetes-embedded-resource']) {
      if (typeof value.apiVersion !== 'string' || !value.apiVersion) errors.push(fieldErrors.required(child('apiVersion'), 'must not be empty'));
      if (typeof value.kind !== 'string' || !value.kind) errors.push(fieldErrors.required(child('kind'), 'must not be empty'));
    }
    const additional = isObject(schema.additionalProperties) ? (schema.additionalProperties as JSONSchemaProps) : undefined;
    for (const [key, v] of Object.entries(value)) {
      const prop = schema.properties?.[key] ?? additional;
      if (prop) validate(v, prop, child(key), errors);
    }
  }

  // Value validation: the sub-schemas constrain the value; they do not declare (or prune) fields.
  for (const sub of schema.allOf ?? []) validate(value, sub, path, errors);
  if (schema.anyOf && !schema.anyOf.some((sub) => validate(value, sub, path).length === 0)) invalid(value, 'must validate at least one schema (anyOf)');
  if (schema.oneOf) {
    const valid = schema.oneOf.filter((sub) => validate(value, sub, path).length === 0).length;
    if (valid !== 1) invalid(value, `must validate one and only one schema (oneOf). ${valid === 0 ? 'Found none valid' : `Found ${valid} valid alternatives`}`);
  }
  if (schema.not && validate(value, schema.not, path).length === 0) invalid(value, 'must not validate the schema (not)');
  return errors;
}

/**
 * The root of a custom resource: `metadata` is checked only where the schema constrains
 * `metadata.name`/`metadata.generateName` (all a structural schema may say of it); the rest as declared.
 */
export function validateCustomResource(object: Obj, schema: JSONSchemaProps, only?: string): FieldError[] {
  const errors: FieldError[] = [];
  if (only) return validate(object[only], schema.properties?.[only], only, errors);
  const { metadata: metaSchema, ...props } = schema.properties ?? {};
  const meta = isObject(object.metadata) ? object.metadata : {};
  for (const key of ['name', 'generateName']) {
    const s = metaSchema?.properties?.[key];
    if (s && meta[key] !== undefined) validate(meta[key], s, `metadata.${key}`, errors);
  }
  const { metadata: _m, ...rest } = object;
  return validate(rest, { ...schema, properties: props }, '', errors);
}

const compiled = new Map<string, RegExp>();

/**
 * A CRD's `pattern` as kube-apiserver reads it (Go's regexp, RE2), as a JavaScript RegExp: `\s` is the
 * ASCII whitespace `\t\n\f\r ` only (JavaScript's also takes `\v` and Unicode spaces), `.` stops at
 * `\n` only (JavaScript's also at `\r`, U+2028, U+2029), `\x{HHHH}` is a code point. A construct the
 * two read differently and this does not translate is refused, so that no test reads a pattern more
 * leniently than the API server would. Written apart from src/manifests/re2.ts (the generator's
 * reverse translation) on purpose: it checks what the generator writes, so it shares none of its code.
 */
export function re2RegExp(pattern: string): RegExp {
  let re = compiled.get(pattern);
  if (re) return re;
  const ascii = '\\t\\n\\f\\r ';
  let out = '';
  let inClass = false;
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!;
    if (c === '\\') {
      const next = pattern[i + 1] ?? '';
      i++;
      if (next === 's') out += inClass ? ascii : `[${ascii}]`;
      else if (next === 'S' && !inClass) out += `[^${ascii}]`;
      else if (next === 'x' && pattern[i + 1] === '{') {
        const end = pattern.indexOf('}', i);
        out += `\\u{${pattern.slice(i + 2, end)}}`;
        i = end;
      } else if ('SAzQEpPC'.includes(next)) throw new Error(`the kube stand-in does not read \\${next} in a pattern as RE2 does: ${pattern}`);
      else out += `\\${next}`;
    } else if (c === '[' && !inClass) {
      inClass = true;
      out += c;
    } else if (c === ']' && inClass) {
      inClass = false;
      out += c;
    } else if (c === '.' && !inClass) out += '[^\\n]';
    else out += c;
  }
  re = new RegExp(out, 'u');
  compiled.set(pattern, re);
  return re;
}

/**
 * Why kube-apiserver would refuse a CRD whose schema has this `pattern`: it compiles every pattern
 * with Go's regexp (RE2 syntax) when the CRD is created. Undefined when RE2 reads it. Checked here:
 * the escapes and groups JavaScript reads and RE2 does not (`\u0080`, `\cJ`, `\k<n>`, back-references,
 * an unknown letter escape, lookahead and lookbehind).
 */
export function re2Problem(pattern: string): string | undefined {
  const letterEscapes = new Set('afnrtvxAbBzdDsSwWpPQE'.split(''));
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (c === '\\') {
      const next = pattern[i + 1] ?? '';
      if (/[1-9]/.test(next) || (/[A-Za-z]/.test(next) && !letterEscapes.has(next))) return `invalid escape sequence: \`\\${next}\``;
      i++;
    } else if (c === '(' && pattern[i + 1] === '?') {
      const rest = pattern.slice(i + 2, i + 4);
      if (rest.startsWith('=') || rest.startsWith('!') || rest === '<=' || rest === '<!') return `invalid or unsupported Perl syntax: \`(?${rest.startsWith('<') ? rest : rest[0]}\``;
    }
  }
  return undefined;
}

/** Every `pattern` of a schema, with its path, that kube-apiserver would refuse (re2Problem). */
export function re2Problems(schema: unknown, path = 'openAPIV3Schema'): string[] {
  if (Array.isArray(schema)) return schema.flatMap((s, k) => re2Problems(s, `${path}[${k}]`));
  if (schema === null || typeof schema !== 'object') return [];
  const problems: string[] = [];
  for (const [key, value] of Object.entries(schema as Obj)) {
    if (key === 'pattern' && typeof value === 'string') {
      const problem = re2Problem(value);
      if (problem) problems.push(`${path}.pattern: Invalid value: ${JSON.stringify(value)}: must be a valid regular expression, but isn't: error parsing regexp: ${problem}`);
    } else if (key !== 'enum' && key !== 'default' && key !== 'example') problems.push(...re2Problems(value, `${path}.${key}`));
  }
  return problems;
}
