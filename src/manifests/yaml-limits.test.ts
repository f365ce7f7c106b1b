import fc from 'fast-check';
import { parseAllDocuments, parseDocument, stringify } from 'yaml';
import { depthOf, scanJsonText } from '../validation/input-limits.js';
import { readYamlManifest } from './yaml-body.js';
import { readManifestDocument, readManifestDocuments, scanYamlTokens, yamlNestsDeeperThan } from './yaml-limits.js';
import { KUBECTL_MANIFEST, keysAsKubectl } from './yaml.js';

/** The deepest nesting of the parsed documents (0 for scalars only), or undefined where the text is no YAML. */
function parsedDepth(text: string): number | undefined {
  const docs = parseAllDocuments(text);
  if (!Array.isArray(docs) || docs.some((d) => d.errors.length)) return undefined;
  return Math.max(0, ...docs.map((d) => depthOf(d.toJS(), 10_000)));
}

/** How long `f` takes, in milliseconds. */
function time(f: () => unknown): number {
  const t = performance.now();
  f();
  return performance.now() - t;
}

/** The smallest `max` the pre-scan lets through: its count of the text's nesting. */
function counted(text: string): number {
  let max = 0;
  while (yamlNestsDeeperThan(text, max)) max += 1;
  return max;
}

/** Values whose text holds YAML's indicators, and the styles they are written in (block, flow, indented or not). */
const leaf = fc.oneof(fc.string({ unit: fc.constantFrom('a', '[', ']', '{', '}', '-', '?', ' ', ':', '#', ',', '"', "'", '\n', '|') }), fc.integer(), fc.boolean(), fc.constant(null));
const { tree } = fc.letrec((tie) => ({
  tree: fc.oneof({ depthSize: 'small', withCrossShrink: true }, leaf, fc.array(tie('tree'), { maxLength: 4 }), fc.dictionary(fc.string({ maxLength: 4 }), tie('tree'), { maxKeys: 4 })),
}));
const style = fc.record({ collectionStyle: fc.constantFrom('any', 'block', 'flow' as const), indentSeq: fc.boolean(), indent: fc.integer({ min: 1, max: 4 }) });

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
    const whole = time(() => yamlNestsDeeperThan(flat, 64));
    const refused = time(() => expect(yamlNestsDeeperThan(deep, 64)).toBe(true));
    expect(refused).toBeLessThan(whole);
  });
});

describe('scanYamlTokens: keys and collections', () => {
  const KEYS_OR_OBJECTS = { tooDeep: false };
  /** The keys and collections of the JSON a YAML text reads as (aliases read once: the tokens write them once). */
  function parsedCounts(text: string): { keys: number; containers: number; nodes: number } | undefined {
    const docs = parseAllDocuments(text, { uniqueKeys: false });
    if (!Array.isArray(docs) || docs.some((d) => d.errors.length)) return undefined;
    let keys = 0;
    let containers = 0;
    let values = 0;
    const walk = (v: unknown): void => {
      values += 1;
      if (Array.isArray(v)) v.forEach(walk);
      else if (v !== null && typeof v === 'object') Object.values(v).forEach(walk);
    };
    for (const d of docs) {
      const value = d.toJS() ?? null;
      const scanned = scanJsonText(JSON.stringify(value), Number.POSITIVE_INFINITY);
      keys += scanned.keys;
      containers += scanned.containers;
      walk(value);
    }
    // A node is a key or a value.
    return { keys, containers, nodes: keys + values };
  }

  it('never counts more keys, collections or nodes than the parsed documents hold (a lower bound: what it refuses is surely over)', () => {
    fc.assert(
      fc.property(tree, style, (value, { collectionStyle, indentSeq, indent }) => {
        const text = stringify(value, null, { collectionStyle, indentSeq, indent });
        const parsed = parsedCounts(text);
        if (parsed === undefined) return;
        expect({ text, ...scanYamlTokens(text, Number.POSITIVE_INFINITY, parsed.keys, parsed.containers, parsed.nodes) }).toEqual({ text, ...KEYS_OR_OBJECTS, tooManyKeys: false, tooManyContainers: false, tooManyNodes: false });
      }),
      { numRuns: 400 },
    );
  });

  it('counts a block scalar that is a sequence item once (its header, then its text): a sequence of n block scalars is n nodes, not 2n', () => {
    // Found by the property above (["\n", "\n"] written with indent 1: `- |+` items): each item counted as empty, then its scalar.
    const text = stringify(['\n', '\n', 'a\nb', 'c\n'], null, { indent: 1 });
    expect(text).toContain('|');
    expect(parsedCounts(text)?.nodes).toBe(5);
    expect(scanYamlTokens(text, 64, Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY, 3).tooManyNodes).toBe(true);
    expect(scanYamlTokens(text, 64, Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY, 4).tooManyNodes).toBe(false);
    // Two keys and their block scalars: four nodes.
    expect(scanYamlTokens('a: >-\n  folded\nb: |\n  kept\n', 64, Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY, 3).tooManyNodes).toBe(true);
    expect(scanYamlTokens('a: >-\n  folded\nb: |\n  kept\n', 64, Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY, 4).tooManyNodes).toBe(false);
  });

  it('counts keys written in block and flow mappings, with `?` or `:`, and collections opened in flow or on one line', () => {
    const keys = (text: string, max: number) => scanYamlTokens(text, 64, max).tooManyKeys;
    const objects = (text: string, max: number) => scanYamlTokens(text, 64, Number.POSITIVE_INFINITY, max).tooManyContainers;
    for (const [text, n] of [
      ['a: 1\nb:\nc: [x: 1]\n', 4],
      ['{"a":1,"b":2}\n', 2],
      ['? a\n? b\n? c\n', 3],
      ['? a\n: 1\n? b\n: 2\n', 2],
    ] as const) {
      expect({ text, within: keys(text, n), over: keys(text, n - 1) }).toEqual({ text, within: false, over: true });
    }
    const nodes = (text: string, max: number) => scanYamlTokens(text, 64, Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY, max).tooManyNodes;
    for (const [text, n] of [
      ['- 1\n- "a"\n- \n- [x, *y]\n', 6],
      ['- - - 1\n- a: 1\n', 5],
      ['? a\n?\n  b: 1\n', 4],
    ] as const) {
      expect({ text, within: nodes(text, n), over: nodes(text, n - 1) }).toEqual({ text, within: false, over: true });
    }
    for (const [text, n] of [
      ['a: [{}, [], {b: []}]\n', 5],
      ['- - - x\n- - y\n', 3],
    ] as const) {
      expect({ text, within: objects(text, n), over: objects(text, n - 1) }).toEqual({ text, within: false, over: true });
    }
  });

  it('a manifest of 100,000 keys, collections or nodes is refused from its tokens, before it is parsed: a 413 as for JSON, not the parser\'s verdict', () => {
    const head = 'apiVersion: connectors.svc.io/v1\nkind: Connector\njunk:\n';
    // Each ends in a syntax error the parser would report, had it been reached (it took seconds to reach it).
    const broken = 'x: [unclosed\n';
    const cases: Array<[string, string]> = [
      [`${head}${Array.from({ length: 100_000 }, (_, i) => ` k${i.toString(36)}:\n`).join('')}${broken}`, 'body holds more than 50,000 keys'],
      [`${head} {${Array.from({ length: 100_000 }, (_, i) => `"k${i.toString(36)}":1`).join(',')}}\n${broken}`, 'body holds more than 50,000 keys'],
      [`${head} [${'{},'.repeat(100_000)}{}]\n${broken}`, 'body holds more than 50,000 objects and arrays'],
      [`${head}${' - - 1\n'.repeat(60_000)}${broken}`, 'body holds more than 50,000 objects and arrays'],
    ];
    for (const [text, message] of cases) {
      expect(readYamlManifest(text, 'body')).toEqual({ problem: { message, hint: 'a manifest holds far fewer; split the body into several requests', tooLarge: true } });
    }
    // Under every JSON bound (one array), but 150,000 nodes: held the reader for 10 s (its time limit) on a loaded machine.
    for (const items of [' - 1\n', ' - "a"\n', ' -\n']) {
      expect(readYamlManifest(`${head}${items.repeat(150_000)}${broken}`, 'body')).toEqual({
        problem: { message: 'body holds more than 120,000 keys and values (YAML nodes)', hint: 'send a manifest this large as JSON (Content-Type: application/json), or split it', tooLarge: true },
      });
    }
    // At the bound, the parser's verdict as before.
    const fits = `${head}${Array.from({ length: 49_000 }, (_, i) => ` k${i.toString(36)}:\n`).join('')}${broken}`;
    expect(readYamlManifest(fits, 'body')).toMatchObject({ problem: { message: expect.stringMatching(/^body is not valid YAML/) } });
  });
});

describe('reading a manifest document', () => {
  it('marks errors and warnings with the text the yaml package writes', () => {
    const long = 'x'.repeat(200);
    for (const text of [
      'a: [1, 2\n',
      'a: b: c\n',
      `a: ${long} &x &y 1\n`,
      `${long}: &a &b 1\nb: 2\n`,
      'a:\n  - 1\n - 2\n',
      `k: ${'&a !t '.repeat(30)}x\n`,
      'a: !!binary aGk=\nb: !foo 1\n',
      '"a\n',
      `a: 1\n${' '.repeat(90)}b: [\n`,
      `${'y'.repeat(100)}\n  - z: : :\n`,
    ]) {
      const ours = readManifestDocument(text);
      const theirs = parseDocument(text, KUBECTL_MANIFEST);
      expect({ text, errors: ours.errors.map((e) => e.message), warnings: ours.warnings.map((w) => w.message) }).toEqual({
        text,
        errors: theirs.errors.map((e) => e.message),
        warnings: theirs.warnings.map((w) => w.message),
      });
      expect(readManifestDocuments(text).flatMap((d) => d.errors.map((e) => e.message))).toEqual(parseAllDocuments(text, KUBECTL_MANIFEST).flatMap((d) => d.errors.map((e) => e.message)));
    }
  });

  it('in time growing with its length, however many errors one long line holds', () => {
    // 20,000 anchors on one line: 40,000 errors, each of which the yaml package's own marking
    // copied the whole 120 KB line for (15 s). Ours costs about what the parse without marking does.
    const text = `a: ${'&a !t '.repeat(20_000)}x\n`;
    const plain = time(() => parseDocument(text, { ...KUBECTL_MANIFEST, prettyErrors: false }));
    let doc: ReturnType<typeof readManifestDocument> | undefined;
    const marked = time(() => {
      doc = readManifestDocument(text);
    });
    expect(doc!.errors[0]!.message).toMatch(/^A node can have at most one anchor at line 1, column \d+:\n\n/);
    expect({ plain, marked, within: marked < 3 * plain + 100 }).toMatchObject({ within: true });
  });
});

describe('keysAsKubectl', () => {
  it('costs about a parse, however many alias keys or mappings in a sequence a document holds', () => {
    // Each alias key was resolved by walking the whole document (3,000 of them in 47 KB: 15 s), and
    // each mapping of a sequence had its path found by looking its index up (40,000: ×4 per doubling).
    for (const text of [`x: &k a\n${Array.from({ length: 3000 }, (_, i) => `k${i}: {*k : 1}\n`).join('')}`, `items: [${'{a: 1},'.repeat(40_000)}{}]\n`]) {
      let doc: ReturnType<typeof readManifestDocument> | undefined;
      const parse = time(() => {
        doc = readManifestDocument(text);
      });
      const keys = time(() => expect(keysAsKubectl(doc!, 'body')).toBeUndefined());
      expect({ text: text.slice(0, 12), parse, keys, within: keys < 2 * parse + 100 }).toMatchObject({ within: true });
    }
    // The paths of a refusal are still found: a duplicate inside the last mapping of a long sequence.
    const doc = readManifestDocument(`items: [${'{a: 1},'.repeat(1000)}{a: 1, a: 2}]\n`);
    expect(keysAsKubectl(doc, 'body')?.message).toBe('body.items[1000].a is given twice: a key may appear once in a mapping');
    // An alias key reads what its anchor names, the last one before it (2, not 1).
    const aliased = readManifestDocument('x: &k 1\ny: &k 2\nm: {*k : a, "2": b}\n');
    expect(keysAsKubectl(aliased, 'body')?.message).toBe('body.m.2 is given twice: the keys 2 and "2" are both "2" in JSON');
  });
});
