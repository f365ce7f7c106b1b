import type { ErrorObject } from 'ajv/dist/2020.js';

/**
 * The one translator from Ajv's errors to `{field, message}`: the HTTP validation of every route
 * (apiserver/validation.ts) and the manifest validators use it, so a wrong field reads the same
 * whichever door it came through. A field is a path (`spec.endpoints[2].pagination.kind`); the
 * message starts with it.
 */

export interface Issue {
  field: string;
  message: string;
}

export interface TranslateOptions {
  /** What to call the value itself when the error is at its root (`body`, `query`, `manifest`). */
  root?: string;
  /** Messages for failed `pattern`s, keyed by the sub-schema carrying the pattern. */
  patternMessages?: WeakMap<object, string>;
  /** A domain's own wording for an error at `field`; undefined falls back to the generic text. */
  refine?: (error: ErrorObject, field: string) => string | undefined;
}

/** `/spec/endpoints/2/id` -> `spec.endpoints[2].id` (JSON Pointer escapes undone). */
export function fieldOf(instancePath: string): string {
  return instancePath
    .split('/')
    .slice(1)
    .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'))
    .reduce((acc, seg) => (/^\d+$/.test(seg) ? `${acc}[${seg}]` : joinField(acc, seg)), '');
}

/**
 * `parent.key`, or `key` at the root; a key that would not read back as itself after a dot (empty,
 * or holding a dot, a bracket, a double quote, white space or a control character) or that holds
 * half a surrogate pair is quoted in brackets with JSON's escapes: `body[""]`,
 * `spec.defaults["a.b"]`, `columns["a b"]`, `body["k\u0000"]`, `body["\ud800"]`.
 */
export function joinField(parent: string, key: string): string {
  if (!plainKey(key)) return `${parent}[${JSON.stringify(key)}]`;
  return parent ? `${parent}.${key}` : key;
}

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** Whether a key reads back as itself written after a dot in a field path. */
function plainKey(key: string): boolean {
  if (key === '' || /[.[\]"\s]/.test(key) || LONE_SURROGATE.test(key)) return false;
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    if (c < 0x20 || c === 0x7f) return false;
  }
  return true;
}

const article = (word: string) => (/^[aeiou]/.test(word) ? 'an' : 'a');
/** Of a value quoted back in a message, at most this many characters of its JSON text. */
export const QUOTED_MAX = 200;

/**
 * A value as JSON, cut to QUOTED_MAX characters (and its length said) when longer: a 100 KB
 * `connector_type` came back whole in its 400, and an answer should not echo a caller's body.
 */
const quoted = (v: unknown) => {
  const text = JSON.stringify(v) ?? String(v);
  if (text.length <= QUOTED_MAX) return text;
  // Never half a surrogate pair at the cut.
  const end = /[\uD800-\uDBFF]/.test(text[QUOTED_MAX - 1]!) ? QUOTED_MAX - 1 : QUOTED_MAX;
  return `${text.slice(0, end)}… (${text.length} characters)`;
};

/**
 * A schema's errors (all of them, ajv's `allErrors`) with the unknown fields first, each kind in its
 * order: a misspelt key is also a missing one (`on:` for `event:` reports `spec.event is required`
 * too), and the misspelling is what to fix, so it is what a caller shown one error should see.
 */
export function unknownFieldsFirst<T extends { keyword: string }>(errors: readonly T[] | null | undefined): T[] {
  const all = [...(errors ?? [])];
  return [...all.filter((e) => e.keyword === 'additionalProperties'), ...all.filter((e) => e.keyword !== 'additionalProperties')];
}

export function schemaIssue(e: ErrorObject, options: TranslateOptions = {}): Issue {
  const at = fieldOf(e.instancePath);
  const params = e.params as Record<string, unknown>;
  if (e.keyword === 'required') {
    const field = joinField(at, String(params.missingProperty));
    return { field, message: `${field} is required` };
  }
  if (e.keyword === 'additionalProperties') {
    const key = String(params.additionalProperty);
    const field = joinField(at, key);
    // kubectl reads manifests as YAML 1.1, where an unquoted `on`, `off`, `yes` or `no` is a boolean.
    const yaml11 = key === 'true' || key === 'false' ? ' (YAML 1.1 reads an unquoted on, off, yes or no as a boolean: quote the key, or check its name)' : '';
    return { field, message: `${field} is not a known field${yaml11}` };
  }
  const name = at || options.root || 'value';
  const refined = options.refine?.(e, at);
  if (refined !== undefined) return { field: at, message: refined };
  return { field: at, message: `${name} ${describe(e, params, options)}` };
}

function describe(e: ErrorObject, params: Record<string, unknown>, options: TranslateOptions): string {
  switch (e.keyword) {
    case 'type': {
      const types = (Array.isArray(params.type) ? params.type : String(params.type).split(',')).map(String);
      return `must be ${types.map((t) => `${article(t)} ${t}`).join(' or ')}`;
    }
    case 'enum': {
      const allowed = ((params.allowedValues as unknown[] | undefined) ?? []).map(String);
      if (allowed.length === 1) return `must be ${allowed[0]}`;
      return `must be one of ${allowed.join(', ')}${e.data === undefined ? '' : `; got ${quoted(e.data)}`}`;
    }
    case 'const':
      return `must be ${quoted(params.allowedValue)}`;
    case 'pattern':
      return (e.parentSchema && options.patternMessages?.get(e.parentSchema as object)) ?? `must match the pattern ${String(params.pattern)}`;
    case 'format':
      return `must be ${article(String(params.format))} ${String(params.format)}`;
    case 'minLength':
      return Number(params.limit) === 1 ? 'must not be empty' : `must be at least ${params.limit} characters`;
    case 'maxLength':
      return `must be at most ${params.limit} characters`;
    case 'minimum':
      return `must be at least ${params.limit}`;
    case 'maximum':
      return `must be at most ${params.limit}`;
    case 'exclusiveMinimum':
      return `must be more than ${params.limit}`;
    case 'exclusiveMaximum':
      return `must be less than ${params.limit}`;
    case 'minItems':
      return `must have at least ${params.limit} item${Number(params.limit) === 1 ? '' : 's'}`;
    case 'maxItems':
      return `must have at most ${params.limit} items`;
    case 'minProperties':
      return Number(params.limit) === 1 ? 'must name at least one field' : `must name at least ${params.limit} fields`;
    case 'maxProperties':
      return `must name at most ${params.limit} fields`;
    default:
      return e.message ?? 'is invalid';
  }
}
