import { describe, expect, it } from '@jest/globals';
import fc from 'fast-check';
import { MAX_JSON_DEPTH } from '../validation/input-limits.js';
import { inDeleteOrder, jsonDocuments, lineDiff, type Manifest, parseManifests, yamlDocuments } from './manifests.js';

/**
 * `svc apply -f x.json`: JSON is read with JSON.parse (about a hundred times faster than the YAML
 * reader) only where that gives exactly what the YAML reader (kubectl's reading) gives; anything else
 * goes to the YAML reader, which reads or refuses it as before.
 */

/** The same value, key order, numbers (-0 included) and prototypes, from both readings. */
function expectSameReading(text: string): boolean {
  const fast = jsonDocuments(text);
  let slow: unknown[] | Error;
  try {
    slow = yamlDocuments(text, 'f.json');
  } catch (err) {
    slow = err as Error;
  }
  if (fast === undefined) return false; // read by the YAML reader alone
  expect(slow).not.toBeInstanceOf(Error);
  expect(fast).toStrictEqual(slow);
  expect(JSON.stringify(fast)).toBe(JSON.stringify(slow));
  const protos = (v: unknown): unknown => (v && typeof v === 'object' ? [Object.getPrototypeOf(v) === Object.prototype || Array.isArray(v), ...Object.values(v).map(protos)] : typeof v);
  expect(protos(fast)).toEqual(protos(slow));
  return true;
}

const CONNECTOR = (spec: string) => `{"apiVersion": "connectors.svc.io/v1", "kind": "Connector", "metadata": {"name": "a"}, "spec": ${spec}}`;

describe('JSON manifests', () => {
  it('reads a JSON file with JSON.parse: the same documents the YAML reader makes, far faster', () => {
    const rows = Array.from({ length: 20000 }, (_, i) => ({ id: `endpoint-${i}`, path: `/p/${i}`, limit: i, ratio: i / 7, on: i % 2 === 0, note: `é ${i} 🚀 "quoted" \\ back\nline` }));
    const text = JSON.stringify({ apiVersion: 'connectors.svc.io/v1', kind: 'Connector', metadata: { name: 'big' }, spec: { endpoints: rows } }, null, 2);
    expect(text.length).toBeGreaterThan(2_000_000);
    const fast = jsonDocuments(text);
    expect(fast).toBeDefined();
    // The baseline, on the same machine at the same moment: both readings of the text and their comparison.
    const bothBegan = performance.now();
    expectSameReading(text);
    const bothMs = performance.now() - bothBegan;
    const began = performance.now();
    const [manifest] = parseManifests(text, 'big.json');
    // The YAML reader takes nearly all of the baseline (seconds); JSON.parse a small part of it.
    const parseMs = performance.now() - began;
    expect(parseMs).toBeLessThan(bothMs / 5);
    expect(manifest).toMatchObject({ kind: 'Connector', name: 'big', source: 'big.json' });
  });

  it.each([
    ['escapes', CONNECTOR('{"a": "x\\/y \\u0000 \\ud83d\\ude00 \\u00e9 \\u2028 \\t\\b\\f\\n\\r \\"", "b": "\\\\"}')],
    ['numbers', CONNECTOR('{"a": 12345678901234567890, "b": 123456789012345678901234567890, "c": 9007199254740993, "d": -0, "e": 1E5, "f": 1.0, "g": 1e-400, "h": -1.5e+300, "i": 1e-7, "j": -0.0, "k": 0.1}')],
    ['keys', CONNECTOR('{"": 1, "<<": {"z": 1}, "1": 2, "01": 3, "true": 4, "~": 5, "null": null, "__proto__": {"x": 1}, "constructor": 2}')],
    ['values YAML reads otherwise when plain', CONNECTOR('{"a": "yes", "b": "0755", "c": "~", "d": "#x", "e": "&x", "f": "*x", "g": "!x", "h": "- x", "i": "a: b", "j": "2024-01-01"}')],
    ['a list', `[${CONNECTOR('{}')}, {"kind": "List", "items": [${CONNECTOR('[]')}]}]`],
    ['nesting', CONNECTOR('[[[], [{}], {"a": [[]]}]]')],
    ['whitespace', `\r\n  ${CONNECTOR('{ "a" :\r\n 1 }')}  \n`],
    ['a long key', CONNECTOR(`{"${'k'.repeat(2000)}": 1}`)],
  ])('%s: JSON.parse reads it as the YAML reader does', (_name, text) => {
    expect(jsonDocuments(text)).toBeDefined();
    expectSameReading(text);
  });

  it.each([
    ['a key given twice', CONNECTOR('{"a": 1, "x": [{"b": 1, "c": {"\\u0062": 0}, "b": 2}]}'), 'f.json document 1: spec.x[0].b is given twice: a key may appear once in a mapping'],
    ['a key given twice, written otherwise', CONNECTOR('{"a": 1, "\\u0061": 2}'), 'f.json document 1: spec.a is given twice: a key may appear once in a mapping'],
    ['a number past a double', CONNECTOR('{"a": 1e400}'), 'f.json document 1: 1e400 is not a finite number, which JSON cannot carry (kubectl refuses it too): quote it to mean the text'],
    ['nesting past the hub\'s depth', CONNECTOR(`${'['.repeat(MAX_JSON_DEPTH)}${']'.repeat(MAX_JSON_DEPTH)}`), `f.json: nests objects and arrays deeper than ${MAX_JSON_DEPTH} levels (the hub accepts at most ${MAX_JSON_DEPTH})`],
  ])('%s: left to the YAML reader, which refuses it as before', (_name, text, refusal) => {
    expect(jsonDocuments(text)).toBeUndefined();
    expect(() => parseManifests(text, 'f.json')).toThrow(refusal);
  });

  it.each([
    ['a tab', '{\n\t"kind": "Connector"\n}'],
    ['a byte order mark', `\uFEFF${CONNECTOR('{}')}`],
    ['a YAML line break', CONNECTOR('{"a": "x\u2028y\u0085z"}')],
    ['a C1 control character', CONNECTOR('{"a": "x\u0080y\u007f"}')],
    ['a lone surrogate', CONNECTOR('{"a": "x\ud800y"}')],
    ['a scalar', '"text"'],
    ['null', 'null'],
    ['not JSON', '{kind: Connector}'],
    ['two values', `${CONNECTOR('{}')}\n${CONNECTOR('{}')}`],
  ])('%s: left to the YAML reader', (_name, text) => {
    expect(jsonDocuments(text)).toBeUndefined();
  });

  it('reads any JSON value as the YAML reader does, or leaves it to it (property)', () => {
    const char = fc.oneof(
      fc.constantFrom('a', ' ', '"', '\\', '/', ':', '#', '&', '*', '!', '-', '?', '{', '[', ',', '\n', '\t', '\r', '\u0000', '\u0085', '\u2028', '\u00a0', '\ufeff', '\ud800', '\udc00', 'é', '🚀', '\u202e', '\x7f', '\x9f'),
      fc.string({ maxLength: 2, unit: 'grapheme' }),
    );
    const text = fc.array(char, { maxLength: 8 }).map((c) => c.join(''));
    const number = fc.oneof(fc.double(), fc.integer(), fc.constantFrom('12345678901234567890', '-0', '1E5', '1.0e-3', '1e-400', '9007199254740993', '0.1', '-1.5e+300', '1e400'));
    const { value } = fc.letrec((tie) => ({
      value: fc.oneof({ depthSize: 'small' }, fc.constantFrom('true', 'false', 'null'), number.map((n) => String(Number.isFinite(Number(n)) ? n : 0)), text.map((t) => JSON.stringify(t)), tie('array'), tie('object')),
      array: fc.array(tie('value'), { maxLength: 4 }).map((items) => `[${(items as string[]).join(', ')}]`),
      object: fc
        .array(fc.tuple(fc.oneof(text, fc.constantFrom('a', 'b', '__proto__', '<<', '')), tie('value')), { maxLength: 4 })
        .map((pairs) => `{${(pairs as Array<[string, string]>).map(([k, v]) => `${JSON.stringify(k)}:\n ${v}`).join(',\r\n')}}`),
    }));
    let fast = 0;
    fc.assert(
      fc.property(fc.oneof(value, fc.constant('{}')), (body) => {
        if (expectSameReading(CONNECTOR(body as string))) fast += 1;
      }),
      { numRuns: 1500 },
    );
    expect(fast).toBeGreaterThan(300); // most values without a tab or another character left to the YAML reader
  });
});

describe('svc diff: lineDiff', () => {
  /** The two texts a diff with all lines as context stands for: its `-` and ` ` lines, its `+` and ` ` lines. */
  function sides(diff: string): [string[], string[]] {
    const lines = diff.split('\n').slice(0, -1).filter((l) => !l.startsWith('@@'));
    return [lines.filter((l) => l[0] !== '+').map((l) => l.slice(1)), lines.filter((l) => l[0] !== '-').map((l) => l.slice(1))];
  }

  it('gives back both texts, and nothing for the same one', () => {
    fc.assert(
      fc.property(fc.array(fc.constantFrom('a', 'b', 'c', 'd'), { maxLength: 30 }), fc.array(fc.constantFrom('a', 'b', 'c', 'd'), { maxLength: 30 }), (a, b) => {
        const diff = lineDiff(a, b, Number.POSITIVE_INFINITY);
        if (a.join('\n') === b.join('\n')) expect(diff).toBe('');
        else expect(sides(diff)).toEqual([a, b]);
        expect(lineDiff(a, a)).toBe('');
      }),
    );
  });

  it('prints hunks with three lines of context, the removed line before the added one, and line numbers from 1', () => {
    const before = Array.from({ length: 20 }, (_, i) => `line ${i + 1}`);
    const after = before.map((l) => (l === 'line 2' ? 'line two' : l === 'line 15' ? 'line fifteen' : l));
    expect(lineDiff(before, after)).toBe(
      '@@ -1,5 +1,5 @@\n line 1\n-line 2\n+line two\n line 3\n line 4\n line 5\n@@ -12,7 +12,7 @@\n line 12\n line 13\n line 14\n-line 15\n+line fifteen\n line 16\n line 17\n line 18\n',
    );
    expect(lineDiff([], ['x', 'y'])).toBe('@@ -0,0 +1,2 @@\n+x\n+y\n');
  });

  it('stays a true diff past the size where the longest common subsequence is not looked for', () => {
    const a = Array.from({ length: 2_100 }, (_, i) => `a${i}`);
    const b = Array.from({ length: 2_100 }, (_, i) => (i % 2 ? `a${i}` : `b${i}`));
    expect(sides(lineDiff(a, b, Number.POSITIVE_INFINITY))).toEqual([a, b]);
  });
});

describe('svc delete: inDeleteOrder', () => {
  it('is apply\'s order reversed: the kinds that may name an Entity, then Entities, then Connectors', () => {
    const m = (kind: string, name: string): Manifest => ({ kind, name, body: {}, source: name });
    const read = [m('Workflow', 'w'), m('Connector', 'c1'), m('Process', 'p'), m('Entity', 'e'), m('Export', 'x'), m('Connector', 'c2')];
    expect(inDeleteOrder(read).map((x) => x.name)).toEqual(['x', 'p', 'w', 'e', 'c2', 'c1']);
  });
});
