import { Ajv2020, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js';
import { depthOf, findUnstorableText, MAX_JSON_DEPTH, overValueLimits } from '../validation/input-limits.js';
import { type Issue, schemaIssue, unknownFieldsFirst } from '../validation/schema-errors.js';
import { toStructural, withoutPrunedNulls } from './structural.js';

/**
 * What every manifest kind's validator shares (Connector, Entity, Export): the issue list keyed by
 * field, the checks every manifest passes before its schema (an object, the nesting limit, text
 * PostgreSQL can store), one ajv instance compiling each kind's JSON Schema once, and the error
 * texts of failed `pattern`s, attached to the sub-schemas that carry them.
 */

export type Json = Record<string, unknown>;

export const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * At most this many issues of one kind (errors, warnings) are listed in an answer; the rest are
 * counted in one last entry (`cappedIssues`). A manifest of 49,000 unknown keys answered 49,000
 * errors (4 MB), and translating each held the event loop for a second.
 */
export const MAX_LISTED_ISSUES = 100;

/** The entry that closes a list cut at MAX_LISTED_ISSUES: how many more there were. */
export const moreIssues = (more: number): Issue => ({ field: '', message: `… and ${more} more not listed (the first ${MAX_LISTED_ISSUES} are)` });

/** `list` as an answer carries it: the first MAX_LISTED_ISSUES, then one entry counting the rest. */
export function cappedIssues(list: readonly Issue[], unlisted = 0): Issue[] {
  const more = Math.max(0, list.length - MAX_LISTED_ISSUES) + unlisted;
  return more === 0 ? [...list] : [...list.slice(0, MAX_LISTED_ISSUES), moreIssues(more)];
}

/**
 * Errors keyed by field: the first issue on a field wins, later ones on it are dropped. Past
 * MAX_LISTED_ISSUES a schema error is only counted (`addSchemaError`), never translated: `list` ends
 * with one entry saying how many more there were.
 */
export class Issues {
  private readonly listed: Issue[] = [];
  private readonly fields = new Set<string>();
  /** Past the cap: the distinct places (a field, or an error's JSON Pointer) of the issues not listed. */
  private readonly unlisted = new Set<string>();
  add(field: string, message: string): void {
    if (this.fields.has(field)) return;
    if (this.listed.length >= MAX_LISTED_ISSUES) {
      this.unlisted.add(field);
      return;
    }
    this.fields.add(field);
    this.listed.push({ field, message });
  }
  /** A schema error, translated by `translate` while the list has room, else counted by where it points. */
  addSchemaError(e: ErrorObject, translate: (e: ErrorObject) => [string, string]): void {
    if (this.listed.length < MAX_LISTED_ISSUES) {
      this.add(...translate(e));
      return;
    }
    const params = e.params as Record<string, unknown>;
    const key = e.keyword === 'additionalProperties' ? params.additionalProperty : e.keyword === 'required' ? params.missingProperty : undefined;
    this.unlisted.add(key === undefined ? e.instancePath : `${e.instancePath}/${String(key)}`);
  }
  /** The issues as an answer lists them (`cappedIssues`). */
  get list(): Issue[] {
    return this.unlisted.size ? [...this.listed, moreIssues(this.unlisted.size)] : this.listed;
  }
  get count(): number {
    return this.listed.length + this.unlisted.size;
  }
}

/** Error texts for failed patterns, keyed by the sub-schema object ajv reports as the failing one. */
export const patternMessages = new WeakMap<object, string>();

/** `schema`, whose failed `pattern` reads `message` (the exported schema stays free of non-standard keywords). */
export function said<T extends Record<string, unknown>>(schema: T, message: string): T {
  patternMessages.set(schema, message);
  return schema;
}

const ajv = new Ajv2020({ allErrors: true, strict: true, allowUnionTypes: true, verbose: true });

/** The validate function of a kind's schema, compiled on first use. */
export function compiledOnce(schema: Record<string, unknown>): () => ValidateFunction {
  let compiled: ValidateFunction | undefined;
  return () => {
    compiled ??= ajv.compile(schema);
    return compiled;
  };
}

/** An ajv error as `[field, message]`, pattern failures in the words given to `said`. */
export function schemaError(e: ErrorObject, refine?: (error: ErrorObject, field: string) => string | undefined): [string, string] {
  const issue = schemaIssue(e, { root: 'manifest', patternMessages, refine });
  return [issue.field, issue.message];
}

/**
 * A failed schema check's errors into `errors`, the unknown fields first (`unknownFieldsFirst`: a
 * misspelt key is reported before the required key it stands for), each as `translate` words it.
 */
export function addSchemaErrors(errors: Issues, found: ErrorObject[] | null | undefined, translate: (e: ErrorObject) => [string, string] = (e) => schemaError(e)): void {
  for (const e of unknownFieldsFirst(found)) errors.addSchemaError(e, translate);
}

/** Each kind's JSON Schema as the structural schema its CRD carries, made once. */
const structuralSchemas = new WeakMap<object, Json>();

/**
 * The checks before the schema: an object (else the error names `expected`, the kind's top-level
 * fields), nested at most as deep as any HTTP body, holding only text PostgreSQL can store. Answers
 * the manifest as an object when the schema may run, read as kube-apiserver reads the custom
 * resource through the kind's CRD (`schema`, the kind's JSON Schema): a null the CRD takes for no
 * value is left out (`withoutPrunedNulls`), so that the same bytes are one manifest over HTTP and
 * through kubectl.
 */
export function manifestObject(input: unknown, errors: Issues, expected: string, schema: Json): Json | undefined {
  if (!isObject(input)) {
    errors.add('', `a manifest must be an object (${expected})`);
    return undefined;
  }
  // The same limits as every HTTP body: what the validator accepts, apply accepts. Counted here too: a
  // custom resource comes past the HTTP parser (kube-apiserver stores up to 1.5 MB), and counting is
  // the cheapest walk (a depth walk of 400,000 objects takes a second).
  const over = overValueLimits(input);
  if (over) {
    errors.add('', `a manifest ${over}`);
    return undefined;
  }
  if (depthOf(input) > MAX_JSON_DEPTH) {
    errors.add('', `a manifest may nest objects and arrays at most ${MAX_JSON_DEPTH} levels deep`);
    return undefined;
  }
  const unstorable = findUnstorableText(input, '');
  if (unstorable) errors.add(unstorable.field, `${unstorable.field || 'manifest'} ${unstorable.reason}`);
  let structural = structuralSchemas.get(schema);
  if (!structural) {
    structural = toStructural(schema, schema);
    structuralSchemas.set(schema, structural);
  }
  return withoutPrunedNulls(input, structural) as Json;
}

/** The name of an `apps.svc.io` manifest: a slug, stored lower-case (upper case is accepted). */
export const SLUG_PATTERN = '^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$';
/** The longest slug SLUG_PATTERN takes: what a route naming such a manifest accepts, so a longer name is a 400 naming it, never quoted back in a 404. */
export const SLUG_MAX_LENGTH = 63;

/**
 * The JSON Schema of a whole `apps.svc.io/v1` manifest of `kind` around its `spec` schema: the
 * envelope is strict, `metadata.name` a slug, other metadata keys and a `status` accepted and ignored
 * (what `kubectl apply` sends).
 */
export function appsManifestSchema(kind: string, description: string, spec: Record<string, unknown>): Record<string, unknown> {
  return {
    $schema: 'https://json-schema.org/draft/2020-12/schema',
    title: `${kind} (apps.svc.io/v1)`,
    description,
    type: 'object',
    required: ['apiVersion', 'kind', 'metadata', 'spec'],
    additionalProperties: false,
    properties: {
      apiVersion: { type: 'string', enum: ['apps.svc.io/v1'] },
      kind: { type: 'string', enum: [kind] },
      metadata: {
        type: 'object',
        required: ['name'],
        description: 'Other keys (labels, annotations, namespace, …) are accepted and ignored.',
        properties: {
          name: said(
            { type: 'string', pattern: SLUG_PATTERN, description: 'A slug: 1 to 63 letters, digits or dashes, starting and ending with a letter or digit; stored lower-case, one per tenant.' },
            'must be a slug: 1 to 63 letters, digits or dashes, starting and ending with a letter or digit',
          ),
        },
      },
      spec,
      status: { type: 'object', description: 'Written by Kubernetes; ignored.' },
    },
  };
}
