import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { ValidationError } from '../src/errors.js';
import { schemaIssue } from '../src/validation/schema-errors.js';
import type { JsonSchema } from './route.js';

// ajv-formats is CommonJS; its default export arrives wrapped under ESM.
const addFormats = ((addFormatsModule as unknown as { default?: typeof addFormatsModule }).default ?? addFormatsModule) as unknown as (ajv: Ajv2020) => void;

// verbose: the error carries the value (`got "x"` in enum messages) and its sub-schema.
const strict = new Ajv2020({ allErrors: false, strict: false, verbose: true });
const coercing = new Ajv2020({ allErrors: false, strict: false, verbose: true, coerceTypes: true, useDefaults: true });
addFormats(strict);
addFormats(coercing);

const cache = new WeakMap<JsonSchema, ValidateFunction>();

/**
 * Validates a request part against its declared schema, throwing a 400 that names the first field
 * in error (`{error, field}`). Path and query values are strings and are coerced; bodies are not.
 */
export function validate(schema: JsonSchema, value: unknown, part: 'params' | 'query' | 'body'): unknown {
  let check = cache.get(schema);
  if (!check) {
    check = (part === 'body' ? strict : coercing).compile(schema);
    cache.set(schema, check);
  }
  if (check(value)) return value;
  const error = check.errors?.[0];
  if (!error) throw new ValidationError(`invalid ${part}`);
  const issue = schemaIssue(error, { root: part });
  throw new ValidationError(issue.message, issue.field || undefined);
}
