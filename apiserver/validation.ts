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
  if (part !== 'body') refuseLooseNumbers(schema, value);
  let check = cache.get(schema);
  if (!check) {
    check = (part === 'body' ? strict : coercing).compile(schema);
    cache.set(schema, check);
  }
  if (check(value)) return value;
  const error = shownError(check.errors);
  if (!error) throw new ValidationError(`invalid ${part}`);
  const issue = schemaIssue(error, { root: part });
  throw new ValidationError(issue.message, issue.field || undefined);
}

/**
 * The error a 400 names. Where a value matches none of the alternatives of an `anyOf` or `oneOf` (a topic given as
 * one string or as a list), ajv reports each alternative's first error in order, so the first is most often a type
 * that was not meant (`topic must be a string` for a list of 51 topics): the error of an alternative whose type the
 * value has says what to fix (`topic must have at most 50 items`).
 */
function shownError(errors: ValidateFunction['errors']): NonNullable<ValidateFunction['errors']>[number] | undefined {
  const first = errors?.[0];
  if (!errors?.some((e) => e.keyword === 'anyOf' || e.keyword === 'oneOf')) return first;
  return errors.find((e) => /\/(anyOf|oneOf)\/\d+\//.test(e.schemaPath) && e.keyword !== 'type' && e.keyword !== 'anyOf' && e.keyword !== 'oneOf') ?? first;
}

/** A number as a path or query value: decimal digits, an optional sign and fraction, nothing around them. */
const DECIMAL = /^[-+]?\d+(?:\.\d+)?$/;

/** An integer as a path or query value, written the one way: no leading zero, sign or fraction. */
const INTEGER = /^(?:0|-?[1-9]\d*)$/;

/** The bounds a parameter's schema may declare. */
type Bounds = { minimum?: unknown; maximum?: unknown; exclusiveMinimum?: unknown; exclusiveMaximum?: unknown };

/** The 400 for a value outside the declared bounds, in the words of a schema violation (schema-errors.ts); undefined within them. */
function outOfRange(name: string, value: number, bounds: Bounds): ValidationError | undefined {
  const { minimum, maximum, exclusiveMinimum, exclusiveMaximum } = bounds;
  if (typeof minimum === 'number' && value < minimum) return new ValidationError(`${name} must be at least ${minimum}`, name);
  if (typeof exclusiveMinimum === 'number' && value <= exclusiveMinimum) return new ValidationError(`${name} must be more than ${exclusiveMinimum}`, name);
  if (typeof maximum === 'number' && value > maximum) return new ValidationError(`${name} must be at most ${maximum}`, name);
  if (typeof exclusiveMaximum === 'number' && value >= exclusiveMaximum) return new ValidationError(`${name} must be less than ${exclusiveMaximum}`, name);
  return undefined;
}

/**
 * The 400 for a decimal number written other than as the integer it is (`01`, `1.0`, `+1`, `-0`), naming
 * the parameter and the one way to write it; undefined for any other text. Such forms read as the
 * number under JSON Schema's coercion, but as other text where a value is compared as written (the
 * tenant of `{tid}`): refused on every route, they cannot name a tenant one way here and another there.
 * When that one way would itself be refused by the parameter's declared bounds (`limit=-0` with a
 * minimum of 1), the 400 says so instead (`limit must be at least 1`), as it does for the number written
 * the one way: "must be written 0" pointed at a value that is not allowed either.
 */
export function nonCanonicalInteger(name: string, given: string, bounds: Bounds = {}): ValidationError | undefined {
  if (INTEGER.test(given)) return undefined;
  const parts = /^([-+]?)(\d+)(?:\.(\d+))?$/.exec(given);
  if (!parts) return undefined;
  if (parts[3] !== undefined && !/^0+$/.test(parts[3])) return new ValidationError(`${name} must be an integer`, name);
  const digits = parts[2]!.replace(/^0+(?=\d)/, '');
  const canonical = digits === '0' || parts[1] !== '-' ? digits : `-${digits}`;
  // Number() of the canonical text: exact up to 2^53 - 1 and at least 2^53 past it, so compared rightly with any bound up to 2^53 - 1.
  const range = outOfRange(name, Number(canonical), bounds);
  if (range) return range;
  return new ValidationError(`${name} must be written ${canonical}, not ${given}`, name, 'write an integer without leading zeros, sign or fraction');
}

/**
 * ajv's coercion reads a path or query value as JavaScript's `Number()` does: a blank value is 0
 * (`?limit=%20` said "limit must be at least 1"), `0x10` is 16 and `1e2` 100. A value for a number
 * or integer parameter must be written as a decimal number; anything else is refused as not one. An
 * integer must be written the one way too (`01`, `1.0` and `-0` are refused, naming the form to use).
 */
function refuseLooseNumbers(schema: JsonSchema, value: unknown): void {
  const properties = schema.properties as Record<string, { type?: unknown } & Bounds> | undefined;
  if (!properties || typeof value !== 'object' || value === null) return;
  for (const [name, given] of Object.entries(value)) {
    const type = properties[name]?.type;
    if ((type === 'integer' || type === 'number') && typeof given === 'string' && !DECIMAL.test(given)) {
      throw new ValidationError(`${name} must be ${type === 'integer' ? 'an integer' : 'a number'}`, name);
    }
    if (type === 'integer' && typeof given === 'string') {
      const refusal = nonCanonicalInteger(name, given, properties[name]);
      if (refusal) throw refusal;
    }
  }
}
