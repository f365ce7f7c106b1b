import fc from 'fast-check';
import { parseAllDocuments, stringify } from 'yaml';
import { depthOf } from '../validation/input-limits.js';
import { yamlNestsDeeperThan } from './yaml-limits.js';

/** The deepest nesting of the parsed documents (0 for scalars only), or undefined where the text is no YAML. */
function parsedDepth(text: string): number | undefined {
  const docs = parseAllDocuments(text);
  if (!Array.isArray(docs) || docs.some((d) => d.errors.length)) return undefined;
  return Math.max(0, ...docs.map((d) => depthOf(d.toJS(), 10_000)));
}

/** The smallest `max` the pre-scan lets through: its count of the text's nesting. */
function counted(text: string): number {
  let max = 0;
  while (yamlNestsDeeperThan(text, max)) max += 1;
  return max;
}

describe('yamlNestsDeeperThan', () => {
  it('counts flow collections and block indicators on one line, and the two together', () => {
    expect(counted('a: 1\n')).toBe(0);
    expect(counted('a: [1, [2, {b: [3]}]]\n')).toBe(4);
    expect(counted('- - - x\n')).toBe(3);
    expect(counted('? ? x\n: y\n')).toBe(2);
    expect(counted('- - [[x]]\n')).toBe(4);
    // A flow collection over several lines keeps the indicators of the line it opened on.
    expect(counted('- - [\n  [x],\n  y]\n- z\n')).toBe(4);
    // Each line starts again; documents too.
    expect(counted('- - x\n- - y\n')).toBe(2);
    expect(counted('[[[\n---\n[x]\n')).toBeGreaterThanOrEqual(1);
  });

  it('reads brackets, dashes and question marks inside scalars and comments as text', () => {
    // Each text is a block mapping (a level of indentation, not counted) holding scalars or one flow sequence.
    for (const text of [
      'a: "[[[[{{{{"\n',
      "a: '- - - ['\n",
      'a: b[c[d[e\n',
      'a: x - - - y\n',
      'a: |\n  [[[[ - - - ? ?\n  {{{{\n',
      '# [[[[ - - - {{{{\nb: 1\n',
      'a: what? - not a key ?\n',
      'a: [x-y, -1, "]]"]\n',
    ]) {
      expect({ text, counted: counted(text) }).toEqual({ text, counted: parsedDepth(text)! - 1 });
    }
  });

  it('never counts more than the parsed documents nest (a lower bound: what it refuses is too deep)', () => {
    const leaf = fc.oneof(fc.string({ unit: fc.constantFrom('a', '[', ']', '{', '}', '-', '?', ' ', ':', '#', ',', '"', "'", '\n', '|') }), fc.integer(), fc.boolean(), fc.constant(null));
    const { tree } = fc.letrec((tie) => ({
      tree: fc.oneof({ depthSize: 'small', withCrossShrink: true }, leaf, fc.array(tie('tree'), { maxLength: 4 }), fc.dictionary(fc.string({ maxLength: 4 }), tie('tree'), { maxKeys: 4 })),
    }));
    const style = fc.record({ collectionStyle: fc.constantFrom('any', 'block', 'flow' as const), indentSeq: fc.boolean(), indent: fc.integer({ min: 1, max: 4 }) });
    fc.assert(
      fc.property(tree, style, (value, { collectionStyle, indentSeq, indent }) => {
        const text = stringify(value, null, { collectionStyle, indentSeq, indent });
        const depth = parsedDepth(text);
        if (depth === undefined) return;
        expect(counted(text)).toBeLessThanOrEqual(depth);
      }),
      { numRuns: 400 },
    );
  });

  it('counts compact nesting exactly, and stops at the first token past the cap', () => {
    for (const depth of [1, 10, 64, 65, 300]) {
      for (const text of [`a: ${'['.repeat(depth)}${']'.repeat(depth)}\n`, `${'- '.repeat(depth)}x\n`, `${'{a: '.repeat(depth)}1${'}'.repeat(depth)}\n`, `${'- '.repeat(Math.ceil(depth / 2))}${'['.repeat(Math.floor(depth / 2))}${']'.repeat(Math.floor(depth / 2))}\n`]) {
        expect({ text: text.slice(0, 20), depth, counted: counted(text) }).toEqual({ text: text.slice(0, 20), depth, counted: depth });
      }
    }
    // A million levels are refused after the first 65 tokens or so: far sooner than one pass over
    // the text (measured against a lexer pass of a flat text of the same length).
    const deep = `a: ${'['.repeat(1_000_000)}${']'.repeat(1_000_000)}\n`;
    const flat = `a: [${'1,'.repeat(999_999)}1]\n`;
    const time = (f: () => unknown) => {
      const t = performance.now();
      f();
      return performance.now() - t;
    };
    const whole = time(() => yamlNestsDeeperThan(flat, 64));
    const refused = time(() => expect(yamlNestsDeeperThan(deep, 64)).toBe(true));
    expect(refused).toBeLessThan(whole);
  });
});
