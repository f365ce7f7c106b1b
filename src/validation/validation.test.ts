import { describe, expect, it } from '@jest/globals';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { checkManifest } from '../connectors/manifest/validate.js';
import { depthOf, findUnstorableText, jsonTextTooDeep, MAX_JSON_DEPTH, toStorable, unstorableText } from './input-limits.js';
import { fieldOf, schemaIssue } from './schema-errors.js';

const nest = (depth: number): unknown => (depth <= 1 ? {} : { a: nest(depth - 1) });

describe('input limits', () => {
  it('finds text PostgreSQL cannot store, in values and keys, naming the path', () => {
    expect(unstorableText('fine ✓ 😀')).toBeUndefined();
    expect(unstorableText('a\u0000b')).toMatch(/NUL/);
    expect(unstorableText('\ud800')).toMatch(/surrogate/);
    expect(unstorableText('x\udc00')).toMatch(/surrogate/);
    expect(findUnstorableText({ spec: { list: [1, { name: 'a\u0000' }] } }, 'body')).toEqual({ field: 'body.spec.list[1].name', reason: 'contains a NUL character (\\u0000)' });
    expect(findUnstorableText({ 'k\u0000': 1 }, 'body')?.field).toBe('body.k\\u0000');
    expect(findUnstorableText({ ok: ['x'] }, 'body')).toBeUndefined();
    expect(toStorable({ 'k\u0000': ['a\u0000', '\ud800x'] })).toEqual({ 'k\ufffd': ['a\ufffd', '\ufffdx'] });
  });

  it('measures depth the same in text and in parsed values, shared references at their deepest use', () => {
    const text = (d: number) => JSON.stringify(nest(d));
    expect(jsonTextTooDeep(text(MAX_JSON_DEPTH))).toBe(false);
    expect(jsonTextTooDeep(text(MAX_JSON_DEPTH + 1))).toBe(true);
    expect(jsonTextTooDeep(`{"a": "${'['.repeat(100)}"}`)).toBe(false); // brackets inside strings do not count
    expect(jsonTextTooDeep(`{"a": "\\"${'['.repeat(100)}"}`)).toBe(false);
    expect(depthOf(nest(MAX_JSON_DEPTH))).toBe(MAX_JSON_DEPTH);
    expect(depthOf(nest(10_000))).toBe(MAX_JSON_DEPTH + 1);
    const shared = nest(60);
    expect(depthOf({ a: shared, b: { c: { d: { e: { f: shared } } } } })).toBe(MAX_JSON_DEPTH + 1);
  });

  it('the manifest validator refuses what the HTTP body parser refuses', () => {
    const manifest = (defaults: unknown) => ({ apiVersion: 'connectors.svc.io/v1', kind: 'Connector', metadata: { name: 'x' }, spec: { defaults } });
    expect(checkManifest(manifest(nest(MAX_JSON_DEPTH - 1))).errors[0]?.message).toBe(`a manifest may nest objects and arrays at most ${MAX_JSON_DEPTH} levels deep`);
    expect(checkManifest(manifest(nest(MAX_JSON_DEPTH - 2))).errors.map((e) => e.message)).not.toContain(`a manifest may nest objects and arrays at most ${MAX_JSON_DEPTH} levels deep`);
    expect(checkManifest({ ...manifest({}), metadata: { name: 'a\u0000' } }).errors).toContainEqual({ field: 'metadata.name', message: 'metadata.name contains a NUL character (\\u0000)' });
  });
});

describe('the Ajv translator', () => {
  const ajv = new Ajv2020({ allErrors: true, strict: false, verbose: true });
  const issues = (schema: object, value: unknown, root = 'body') => {
    const check = ajv.compile(schema);
    check(value);
    return (check.errors ?? []).map((e) => schemaIssue(e, { root }));
  };

  it('names the field as a path and says what is wrong', () => {
    expect(fieldOf('/spec/endpoints/2/a~1b')).toBe('spec.endpoints[2].a/b');
    const schema = {
      type: 'object',
      required: ['name'],
      additionalProperties: false,
      properties: { name: { type: 'string', minLength: 1 }, n: { type: 'integer', maximum: 5 }, kind: { enum: ['a', 'b'] }, u: { type: ['string', 'null'] } },
    };
    expect(issues(schema, { n: 9, kind: 'c', u: 1, extra: true })).toEqual([
      { field: 'name', message: 'name is required' },
      { field: 'extra', message: 'extra is not a known field' },
      { field: 'n', message: 'n must be at most 5' },
      { field: 'kind', message: 'kind must be one of a, b; got "c"' },
      { field: 'u', message: 'u must be a string or a null' },
    ]);
    expect(issues(schema, { name: '' })).toEqual([{ field: 'name', message: 'name must not be empty' }]);
    expect(issues(schema, 'text')).toEqual([{ field: '', message: 'body must be an object' }]);
  });
});
