import { Ajv2020, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { ValidationError } from '../src/errors.js';
import type { JsonSchema } from './route.js';

// ajv-formats is CommonJS; its default export arrives wrapped under ESM.
const addFormats = ((addFormatsModule as unknown as { default?: typeof addFormatsModule }).default ?? addFormatsModule) as unknown as (ajv: Ajv2020) => void;

const strict = new Ajv2020({ allErrors: false, strict: false });
const coercing = new Ajv2020({ allErrors: false, strict: false, coerceTypes: true, useDefaults: true });
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
  throw toValidationError(check.errors?.[0], part);
}

function toValidationError(error: ErrorObject | undefined, part: string): ValidationError {
  if (!error) return new ValidationError(`invalid ${part}`);
  const path = error.instancePath
    .split('/')
    .slice(1)
    .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
  if (error.keyword === 'required') path.push(String((error.params as { missingProperty: string }).missingProperty));
  if (error.keyword === 'additionalProperties') path.push(String((error.params as { additionalProperty: string }).additionalProperty));
  const field = path.reduce((acc, seg) => (/^\d+$/.test(seg) ? `${acc}[${seg}]` : acc ? `${acc}.${seg}` : seg), '');
  const message =
    error.keyword === 'required'
      ? `${field} is required`
      : error.keyword === 'additionalProperties'
        ? `${field} is not a known field`
        : `${field || part} ${error.message ?? 'is invalid'}`;
  return new ValidationError(message, field || undefined);
}
