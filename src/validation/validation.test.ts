import { describe, expect, it } from '@jest/globals';
import { Ajv2020 } from 'ajv/dist/2020.js';
import fc from 'fast-check';
import { checkManifest } from '../connectors/manifest/validate.js';
import { depthOf, duplicateJsonKey, findUnstorableText, MAX_JSON_CONTAINERS, MAX_JSON_DEPTH, MAX_JSON_KEYS, scanJsonText, toStorable, unstorableText } from './input-limits.js';
import { fieldOf, joinField, QUOTED_MAX, schemaIssue } from './schema-errors.js';

/** The keys (and indexes) a field path names: `body.a["b.c"][2]` -> ['body', 'a', 'b.c', 2]. */
function readPath(field: string): Array<string | number> {
  const out: Array<string | number> = [];
  const step = /^(?:\.([^.[]+)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\])/;
  const first = /^[^.[]+/.exec(field)![0];
  out.push(first);
  let rest = field.slice(first.length);
  while (rest) {
    const m = step.exec(rest);
    if (!m) throw new Error(`not a field path: ${field} (at ${rest})`);
    out.push(m[1] ?? (m[2] !== undefined ? Number(m[2]) : (JSON.parse(m[3]!) as string)));
    rest = rest.slice(m[0].length);
  }
  return out;
}

const nest = (depth: number): unknown => (depth <= 1 ? {} : { a: nest(depth - 1) });

describe('input limits', () => {
  it('finds text PostgreSQL cannot store, in values and keys, naming the path', () => {
    expect(unstorableText('fine ✓ 😀')).toBeUndefined();
    expect(unstorableText('a\u0000b')).toMatch(/NUL/);
    expect(unstorableText('\ud800')).toMatch(/surrogate/);
    expect(unstorableText('x\udc00')).toMatch(/surrogate/);
    expect(findUnstorableText({ spec: { list: [1, { name: 'a\u0000' }] } }, 'body')).toEqual({ field: 'body.spec.list[1].name', reason: 'contains a NUL character (\\u0000)' });
    expect(findUnstorableText({ 'k\u0000': 1 }, 'body')?.field).toBe('body["k\\u0000"]');
    expect(findUnstorableText({ '': { 'a.b': ['\u0000'] } }, 'body')?.field).toBe('body[""]["a.b"][0]');
    expect(findUnstorableText({ 'x\ud800': 1 }, 'body')?.field).toBe('body["x\\ud800"]');
    expect(findUnstorableText({ '😀': '\udc00' }, 'body')?.field).toBe('body.😀');
    expect(findUnstorableText({ ok: ['x'] }, 'body')).toBeUndefined();
    // An object of text only (path parameters, a query) is read without the walk, naming the same fields in the same order.
    expect(findUnstorableText({}, 'query')).toBeUndefined();
    expect(findUnstorableText({ a: 'fine', b: 2 }, 'query')).toBeUndefined();
    expect(findUnstorableText({ a: 'fine', 'b\u0000': 'x\u0000' }, 'query')).toEqual({ field: 'query["b\\u0000"]', reason: 'has a key that contains a NUL character (\\u0000)' });
    expect(findUnstorableText({ a: 'x\ud800', b: { c: '\u0000' } }, 'query')).toEqual({ field: 'query.a', reason: 'contains an unpaired UTF-16 surrogate' });
    // From its first object or array value on, the walk: what it finds after it, and inside it, as before.
    expect(findUnstorableText({ a: 'fine', b: { c: '\u0000' }, d: '\u0000' }, 'query')?.field).toBe('query.b.c');
    expect(findUnstorableText({ a: 'fine', b: ['ok', '\u0000'] }, 'query')?.field).toBe('query.b[1]');
    expect(findUnstorableText({ a: 'fine', b: [], d: '\u0000' }, 'query')?.field).toBe('query.d');
    expect(toStorable({ 'k\u0000': ['a\u0000', '\ud800x'] })).toEqual({ 'k\ufffd': ['a\ufffd', '\ufffdx'] });
  });

  it('measures depth the same in text and in parsed values, shared references at their deepest use', () => {
    const jsonTextTooDeep = (text: string) => scanJsonText(text).tooDeep;
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

  it('finds a key written twice in one object, naming its path, and nothing in documents without one', () => {
    const twice = (text: string) => duplicateJsonKey(text, JSON.parse(text), scanJsonText(text).keys, 'body');
    expect(twice('{"a": 1, "a": 2}')).toBe('body.a');
    expect(twice('{"spec": {"list": [1, {"x": ":", "y": "a,b", "x" : 3}]}}')).toBe('body.spec.list[1].x');
    expect(twice('[{"k": 1}, {"k": 2}, {"n": {"k": 1, "k": 1}}]')).toBe('body[2].n.k');
    expect(twice('{"\\u0061": 1, "a": 2}')).toBe('body.a'); // the same key, once escaped
    expect(twice('{"a\\"": 1, "a\\"" :2}')).toBe('body["a\\""]');
    // A key that is empty, or holds a dot, a bracket, a quote, white space or a control character, is
    // quoted in brackets (JSON's escapes), as the hub names such keys elsewhere (`columns["a b"]`).
    expect(twice('{"": 1, "": 2}')).toBe('body[""]');
    expect(twice('{"x": {"a.b": 1, "a.b": 2}}')).toBe('body.x["a.b"]');
    expect(twice('{"a[0]": 1, "a[0]": 2}')).toBe('body["a[0]"]');
    expect(twice('{"": {"k": 1, "k": 2}}')).toBe('body[""].k');
    expect(twice('{"a b": [{"k": 1}, {"k": 1, "k": 2}]}')).toBe('body["a b"][1].k');
    expect(twice('{"\\n": 1, "\\n": 2}')).toBe('body["\\n"]');
    expect(twice('{"x-api-key": 1, "x-api-key": 2}')).toBe('body.x-api-key');
    expect(twice('{"__proto__": 1, "__proto__": 2}')).toBe('body.__proto__');
    // Keys repeated in sibling or nested objects, keys that look like values, colons and quotes inside strings: no duplicate.
    const plain: Array<[string, number]> = [
      ['{"a": {"a": {"a": 1}}, "b": [{"a": 1}, {"a": 2}]}', 6],
      ['{"a": "b", "c": "a:", "d": ["a", "a"]}', 3],
      ['{"x\\"": ":", "x": 1}', 2],
      ['{ "a" :\n\t1 }', 1],
      ['{}', 0],
      ['[]', 0],
      ['"a"', 0],
      ['{"__proto__": {"__proto__": 1}}', 2],
    ];
    for (const [text, keys] of plain) {
      expect(scanJsonText(text).keys).toBe(keys);
      expect(twice(text)).toBeUndefined();
    }
  });

  it('names every key so that the path reads back as the keys it was made of (property)', () => {
    const keys = fc.array(fc.oneof(fc.string(), fc.string({ unit: 'binary', maxLength: 4 }), fc.constantFrom('', '.', 'a.b', '[0]', 'a"b', ' ', 'x-y', 'k\\', '\n', '😀')), { minLength: 1, maxLength: 4 });
    fc.assert(
      fc.property(keys, (path) => {
        const field = path.reduce((acc, key) => joinField(acc, key), 'body');
        expect(readPath(field)).toEqual(['body', ...path]);
      }),
      { numRuns: 1000 },
    );
  });

  it('finds no duplicate in any serialised document, and one in any object given a key again', () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.constantFrom(undefined, 1, '\t'), (value, indent) => {
        const text = JSON.stringify(value, null, indent);
        expect(duplicateJsonKey(text, JSON.parse(text), scanJsonText(text).keys, 'body')).toBeUndefined();
        // The same document with its first key written again at the end of the object.
        if (typeof value === 'object' && value !== null && !Array.isArray(value) && Object.keys(value).length > 0) {
          const first = Object.keys(value)[0]!;
          const doubled = `${text.slice(0, text.lastIndexOf('}'))}, ${JSON.stringify(first)}: 0}`;
          const named = duplicateJsonKey(doubled, JSON.parse(doubled), scanJsonText(doubled).keys, 'body');
          expect(named === undefined ? undefined : readPath(named)).toEqual(['body', first]);
        }
      }),
      { numRuns: 300 },
    );
  });

  it('the manifest validator refuses what the HTTP body parser refuses', () => {
    const manifest = (defaults: unknown) => ({ apiVersion: 'connectors.svc.io/v1', kind: 'Connector', metadata: { name: 'x' }, spec: { defaults } });
    expect(checkManifest(manifest(nest(MAX_JSON_DEPTH - 1))).errors[0]?.message).toBe(`a manifest may nest objects and arrays at most ${MAX_JSON_DEPTH} levels deep`);
    expect(checkManifest(manifest(nest(MAX_JSON_DEPTH - 2))).errors.map((e) => e.message)).not.toContain(`a manifest may nest objects and arrays at most ${MAX_JSON_DEPTH} levels deep`);
    expect(checkManifest({ ...manifest({}), metadata: { name: 'a\u0000' } }).errors).toContainEqual({ field: 'metadata.name', message: 'metadata.name contains a NUL character (\\u0000)' });
    // More objects and arrays, or keys, than a body may hold: a custom resource brings them past the
    // HTTP parser (kube-apiserver stores up to 1.5 MB: 400,000 `{}` under an open key of spec held the
    // validator 1.4 s, at every reconcile).
    const containers = Array.from({ length: MAX_JSON_CONTAINERS }, () => ({}));
    expect(checkManifest(manifest(containers)).errors).toEqual([{ field: '', message: 'a manifest holds more than 50,000 objects and arrays' }]);
    expect(checkManifest(manifest(containers.slice(4))).errors.map((e) => e.message)).not.toContainEqual(expect.stringContaining('holds more than'));
    const keys = Object.fromEntries(Array.from({ length: MAX_JSON_KEYS }, (_, i) => [`k${i}`, 0]));
    expect(checkManifest(manifest(keys)).errors).toEqual([{ field: '', message: 'a manifest holds more than 50,000 keys' }]);
    // A value that contains itself is counted no further than the limit.
    const loop: unknown[] = [];
    loop.push(loop);
    expect(checkManifest(manifest(loop)).errors).toEqual([{ field: '', message: 'a manifest holds more than 50,000 objects and arrays' }]);
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
    // A long value is quoted cut, its length said: an answer does not echo 100 KB of the caller's body.
    const long = 'x'.repeat(100_000);
    expect(issues(schema, { name: 'n', kind: long })).toEqual([{ field: 'kind', message: `kind must be one of a, b; got "${'x'.repeat(QUOTED_MAX - 1)}… (100002 characters)` }]);
    // Not half a surrogate pair at the cut.
    const emoji = `"${'😀'.repeat(150)}"`.length;
    const [cut] = issues(schema, { name: 'n', kind: '😀'.repeat(150) });
    expect(cut!.message).toBe(`kind must be one of a, b; got "${'😀'.repeat((QUOTED_MAX - 2) / 2)}… (${emoji} characters)`);
    expect(issues(schema, 'text')).toEqual([{ field: '', message: 'body must be an object' }]);
  });
});
