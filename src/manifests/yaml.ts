import { type CollectionTag, type Document, type DocumentOptions, isAlias, isMap, isPair, isScalar, isSeq, type Node, type Pair, type ParseOptions, Scalar, type ScalarTag, type SchemaOptions, type ToStringOptions, visit, type YAMLMap } from 'yaml';
import { joinField } from '../validation/schema-errors.js';

const INT = 'tag:yaml.org,2002:int';
const FLOAT = 'tag:yaml.org,2002:float';

/** A `test` for a tag that is a function, not a pattern (the yaml package only calls its `test`). */
const testedBy = (test: (text: string) => boolean): RegExp => ({ test }) as unknown as RegExp;

/**
 * What go-yaml v2 (kubectl's reader, its resolve.go) makes of a plain scalar that may be a number:
 * `{value, int}`, or undefined for text it keeps as a string. A scalar that starts with a digit or a
 * sign has every underscore dropped first, wherever it stands (`1_000`, `1e1_0`, `0_x1F`), then is an
 * integer where Go's `strconv.ParseInt(text, 0, 64)` (else `ParseUint`) reads one (`0755` octal, the
 * `0x`, `0o`, `0b` prefixes in either case, `+12`), else a float where it has go-yaml's float form (a
 * digit before any exponent: `e1` is text) and `ParseFloat` reads it (`08` is 8), else the binary
 * number after a `0b` or `-0b` (a sign after the prefix read too, as there). One that starts with a dot
 * is a float only as `ParseFloat` reads it, an underscore only between two digits (`.5`, `.5_5`;
 * `._5` and `.5_` are text). A float past a double's range is answered as an infinity, refused as one
 * (kubectlRefusal), where Go keeps the text. `.inf` and `.nan` are the float tag's, as before.
 */
function goNumber(text: string): { value: number; int: boolean } | undefined {
  const first = text[0];
  // Go's float literal: an underscore only between two digits.
  if (first === '.') return /^\.[0-9](?:_?[0-9])*(?:[eE][-+]?[0-9](?:_?[0-9])*)?$/.test(text) ? { value: Number(text.replaceAll('_', '')), int: false } : undefined;
  if (first === undefined || !/[-+0-9]/.test(first)) return undefined;
  const plain = text.replaceAll('_', '');
  const n = goInteger(plain);
  // `-0` stays -0, as JSON.parse reads it (both write 0).
  if (n !== undefined && ((n >= INT64_MIN && n <= INT64_MAX) || (!/^[-+]/.test(plain) && n <= UINT64_MAX))) return { value: n === 0n && plain.startsWith('-') ? -0 : Number(n), int: true };
  if (GO_YAML_FLOAT.test(plain)) return { value: Number(plain), int: false };
  const binary = /^0b([-+]?[01]+)$/.exec(plain) ?? /^-0b()([01]+)$/.exec(plain);
  if (binary) {
    const digits = binary[2] ?? binary[1]!;
    const negative = plain.startsWith('-') || digits.startsWith('-');
    const magnitude = BigInt(`0b${digits.replace(/^[-+]/, '')}`);
    const b = negative ? -magnitude : magnitude;
    // ParseUint takes no sign: past int64 only an unsigned text is a number.
    if ((b >= INT64_MIN && b <= INT64_MAX) || (!negative && !digits.startsWith('+') && b <= UINT64_MAX)) return { value: Number(b), int: true };
  }
  return undefined;
}

/** Integers and floats as go-yaml reads them (goNumber); only read, never chosen to write. */
const GO_INT_TAG: ScalarTag = { identify: () => false, default: true, tag: INT, test: testedBy((text) => goNumber(text)?.int === true), resolve: (text) => goNumber(text)!.value };
const GO_FLOAT_TAG: ScalarTag = { identify: () => false, default: true, tag: FLOAT, test: testedBy((text) => goNumber(text)?.int === false), resolve: (text) => goNumber(text)!.value };

/**
 * YAML 1.1's own integer and float forms, held to what go-yaml reads as such: they still write numbers
 * and answer an explicit `!!int` or `!!float`, but no longer take text go-yaml keeps as a string
 * (`0x_`, `._5`, `e1`, which the yaml package read as NaN or a number). `.inf` and `.nan` stay.
 */
const GO_READS = (tag: ScalarTag): ScalarTag => {
  const own = tag.test;
  if (!own || own.test('.inf')) return tag;
  const int = tag.tag === INT;
  return { ...tag, test: testedBy((text) => goNumber(text)?.int === int && own.test(text)) };
};

const MERGE = 'tag:yaml.org,2002:merge';

/**
 * The merge key, read as YAML 1.1 reads it (a plain `<<` key merges a mapping) but never chosen
 * to write a string: a stored key `<<` (a header's, a data field's) is written quoted, `"<<"`, which
 * kubectl and this reading take as the text. The yaml package would write it plain, a merge.
 */
const MERGE_READ_ONLY = (tag: ScalarTag | CollectionTag): ScalarTag | CollectionTag => ({
  ...tag,
  identify: (value: unknown) => typeof value === 'symbol' && value.description === '<<',
});

/**
 * YAML as kubectl reads it, for manifests: the same bytes go to `kubectl apply`, `svc apply -f` and
 * the apply routes, so they must become the same object. kubectl (sigs.k8s.io/yaml over go-yaml v2)
 * reads YAML 1.1's plain scalars: `yes`, `no`, `on`, `off`, `y`, `n` (any of their capitalisations
 * YAML 1.1 lists) are booleans, `0755` is octal (493), `0b11` binary, `1_000` is 1000, and `<<`
 * merges a mapping. It does not resolve a timestamp (`2024-01-01`) or a base-60 number (`02:30`):
 * those stay strings, and so they do here (YAML 1.1's tags for them are left out); numbers are
 * read as go-yaml reads them (goNumber: `0o17` is 15, `1e1_0` a number, `._5` text). Written with
 * the same options, a string such as `"no"`, `"0755"` or `"1e1_0"` is quoted, so that kubectl reads
 * it back as a string.
 */
export const KUBECTL_YAML: ParseOptions & DocumentOptions & SchemaOptions & ToStringOptions = {
  version: '1.1',
  customTags: (tags) => [
    GO_INT_TAG,
    GO_FLOAT_TAG,
    ...tags
      .filter((tag) => typeof tag === 'string' || !(NOT_KUBECTL.has(tag.tag) || tag.format === 'TIME'))
      .map((tag) => (typeof tag === 'string' ? tag : tag.tag === MERGE ? MERGE_READ_ONLY(tag) : tag.tag === FLOAT || tag.tag === INT ? GO_READS(tag as ScalarTag) : tag)),
  ],
};

/**
 * KUBECTL_YAML for reading a manifest whose keys `keysAsKubectl` then checks: a key given twice is
 * found there, as kubectl's JSON has the keys, and named by its path. The yaml package's own check
 * compares parsed values, which is not the same: it takes `-0` and `-0.0` (kubectl's "0" and "-0")
 * for one key, and `1` and `"1"` (both "1") for two.
 */
export const KUBECTL_MANIFEST: typeof KUBECTL_YAML = { ...KUBECTL_YAML, uniqueKeys: false };

/**
 * YAML 1.1 tags kubectl does not give their YAML meaning: a timestamp stays a string there, and
 * `!!binary`, `!!set`, `!!omap`, `!!pairs` become other values than YAML's. Left out, an explicit one
 * is an unresolved tag, which `kubectlRefusal` refuses.
 */
const NOT_KUBECTL = new Set(['tag:yaml.org,2002:timestamp', 'tag:yaml.org,2002:binary', 'tag:yaml.org,2002:set', 'tag:yaml.org,2002:omap', 'tag:yaml.org,2002:pairs']);

/**
 * Why a parsed manifest document cannot be taken as kubectl would take it, or undefined: a `%YAML`
 * directive (kubectl refuses one; here it would switch the reading), a YAML tag the reading does not
 * resolve as kubectl does (`!!binary`, `!!set`, `!!float 1`; a local tag such as `!foo` is read as
 * if untagged, as kubectl reads it), another warning of the parser, or a number that is not finite
 * (`.inf`, `.nan`, `1e400`: JSON cannot carry it; kubectl refuses the first two). Refusing is the
 * safe side: what is accepted reads as kubectl reads it.
 */
export function kubectlRefusal(doc: Document): string | undefined {
  if (doc.directives?.yaml.explicit) return 'a %YAML directive is not accepted: manifests are read as kubectl reads them (YAML 1.1 plain scalars), whatever version it names';
  for (const warning of doc.warnings) {
    const first = warning.message.split('\n')[0]!.replace(/:$/, '');
    if (warning.code !== 'TAG_RESOLVE_FAILED') return first;
    // A local tag (`!foo`) is read as if untagged, as go-yaml reads it; a YAML tag it does not resolve as kubectl would is refused.
    if (first.includes('tag:yaml.org,2002:')) return `${first}: write the value without the tag (kubectl would read it otherwise, or refuse it)`;
  }
  const circular = selfContainingAlias(doc);
  if (circular) return circular;
  let infinite: string | undefined;
  visit(doc, {
    Scalar(_key, node) {
      if (infinite === undefined && typeof node.value === 'number' && !Number.isFinite(node.value)) infinite = node.source ?? String(node.value);
    },
  });
  if (infinite !== undefined) return `${infinite} is not a finite number, which JSON cannot carry (kubectl refuses it too): quote it to mean the text`;
  return undefined;
}

/** What each alias of a document names, and the first alias inside the very node its anchor names. */
interface Aliases {
  named: Map<Node, Node | undefined>;
  circular: string | undefined;
}

const aliasesRead = new WeakMap<Document, Aliases>();

/**
 * The aliases of `doc`, found in one pass as the yaml package finds them (each names the last node
 * before it with its anchor) and kept for the document: `Alias.resolve` walks the whole document on
 * every call, so a body of a few thousand alias keys took minutes. An alias is circular when the node
 * it names is one of its ancestors. Read before keysAsKubectl rewrites any key.
 */
function aliasesOf(doc: Document): Aliases {
  let read = aliasesRead.get(doc);
  if (read) return read;
  const anchored = new Map<string, Node>();
  const found: Aliases = { named: new Map(), circular: undefined };
  visit(doc, {
    Node(_key, node, path) {
      if (isAlias(node)) {
        const target = anchored.get(node.source);
        found.named.set(node, target);
        if (found.circular === undefined && target && path.includes(target)) {
          found.circular = `the alias *${node.source} is inside the value its anchor &${node.source} names, a value that would contain itself (kubectl refuses it too): repeat the part instead of aliasing it`;
        }
      } else if (node.anchor) anchored.set(node.anchor, node);
    },
  });
  read = found;
  aliasesRead.set(doc, read);
  return read;
}

/**
 * Why `doc` holds a value that contains itself, or undefined: an alias inside the very node its anchor names
 * (`a: &a [*a]`). The yaml package reads it as a circular value, which no JSON can carry; kubectl refuses it ("anchor
 * 'a' value contains itself").
 */
export function selfContainingAlias(doc: Document): string | undefined {
  return aliasesOf(doc).circular;
}

/** A key kubectl would not read as the hub does: where, and why. */
export interface KeyRefusal {
  /** The path of the key (`body.data["1"]`), or of the mapping holding it when the key has no text. */
  field: string;
  message: string;
  hint: string;
}

/**
 * Writes every mapping key of `doc` as the text kubectl's conversion to JSON makes of it
 * (sigs.k8s.io/yaml's convertToJSONableObject), so that `doc.toJS()` gives kubectl's keys: a string
 * as it is, an integer in decimal (`0x10` is "16", `9223372036854775807` exactly), a float as Go's
 * `strconv.FormatFloat(f, 'g', -1, 32)` writes it (`1.0e6` is "1e+06", `3.14159265` "3.1415927",
 * `-0.0` "-0"), a boolean "true" or "false". Answers the first key that cannot be written so, as
 * kubectl refuses it (a null key: `~`, `null`, an empty key; a sequence or mapping as a key; an
 * integer past int64 that fits 64 bits unsigned), or that gives a mapping a key twice once written
 * (`1` and `"1"`: kubectl keeps one of the two, not always the same one), naming it under `root`. The pairs of a
 * mapping holding a `<<` merge are first ordered so that its merge gives kubectl's values (`orderMergesAsKubectl`).
 */
export function keysAsKubectl(doc: Document, root: string): KeyRefusal | undefined {
  const { named } = aliasesOf(doc);
  const through = (node: unknown): unknown => (isAlias(node) ? named.get(node) : node);
  const mergedKeys = new Map<YAMLMap, Set<string>>();
  let refusal: KeyRefusal | undefined;
  visit(doc, {
    Map(_key, map, path) {
      if (map.items.some(isMergePair)) orderMergesAsKubectl(map, through, mergedKeys);
      // The path only for a refusal: found for every mapping, a sequence of n mappings cost n² (each
      // one's index looked up among the sequence's items).
      let found: string | undefined;
      const fieldHere = () => (found ??= fieldOf(root, path, map));
      const whereHere = () => fieldHere() || 'the document';
      const seen = new Map<string, string>();
      for (const pair of map.items) {
        const given = pair.key as Node | null;
        const key = isAlias(given) ? named.get(given) : given;
        // A `<<` merge key: the yaml package merges it as go-yaml does.
        if (isScalar(key) && typeof key.value === 'symbol') continue;
        if (key === null || key === undefined || (isScalar(key) && key.value === null)) {
          const where = whereHere();
          refusal = { field: where, message: `${where} has a null key (${written(given)}), which kubectl refuses`, hint: 'quote the key to mean the text ("~"), or remove it' };
          return visit.BREAK;
        }
        if (!isScalar(key)) {
          const where = whereHere();
          refusal = { field: where, message: `${where} has a key that is a ${isSeq(key) ? 'sequence' : 'mapping'}, which kubectl refuses`, hint: 'a key must be text, a number or a boolean' };
          return visit.BREAK;
        }
        const text = kubectlKey(key);
        if (text === undefined) {
          const where = whereHere();
          refusal = { field: where, message: `${where} has the key ${written(key)}, an integer past 64 bits signed, which kubectl refuses`, hint: 'quote the key to mean the text' };
          return visit.BREAK;
        }
        const before = seen.get(text);
        if (before !== undefined) {
          const at = joinField(fieldHere(), text);
          const same = before === written(key) ? 'a key may appear once in a mapping' : `the keys ${before} and ${written(key)} are both ${JSON.stringify(text)} in JSON`;
          refusal = { field: at, message: `${at} is given twice: ${same}`, hint: 'remove one of the two (kubectl keeps one of them, not always the same one)' };
          return visit.BREAK;
        }
        seen.set(text, written(key));
        // A new node, not the key's own changed: an alias key's anchor may be a value elsewhere.
        // An anchored key keeps its anchor on the text (an alias of it then reads the text too).
        if (key.value !== text) {
          const replaced = new Scalar(text);
          if (!isAlias(given) && key.anchor) replaced.anchor = key.anchor;
          pair.key = replaced;
        }
      }
      return undefined;
    },
  });
  return refusal;
}

/** A `<<` merge key (the merge tag resolves a plain `<<` to a symbol). */
const isMergePair = (pair: Pair): boolean => isScalar(pair.key) && typeof pair.key.value === 'symbol';

/**
 * Orders the pairs of `map`, which holds a `<<` merge, so that the yaml package's merge gives go-yaml v2's answer,
 * kubectl's. go-yaml assigns a mapping's pairs in order, each assignment replacing the one before: a merge after an
 * explicit key it also holds replaces that key's value, and of two merges giving a key the later one's value stays
 * (inside one merge of a sequence of mappings, the earliest mapping's). The yaml package lets an explicit key win
 * wherever it stands, and the first merge giving a key win over later ones. So an explicit pair whose key a later
 * merge gives is dropped, and the merge pairs are put in the reverse order, in the places they held; a sequence
 * merged stays as it is (both read it alike). Keys are compared as the text kubectl makes of them (`yes` and `true`
 * are one key), the same before and after keysAsKubectl writes them; aliases read through `through`.
 */
function orderMergesAsKubectl(map: YAMLMap, through: (node: unknown) => unknown, given: Map<YAMLMap, Set<string>>): void {
  const sources = (value: unknown): YAMLMap[] => {
    const source = through(value);
    if (isMap(source)) return [source];
    if (!isSeq(source)) return [];
    return source.items.map(through).filter((item): item is YAMLMap => isMap(item));
  };
  const textOf = (node: unknown): string | undefined => {
    const key = through(node);
    return isScalar(key) ? kubectlKey(key) : undefined;
  };
  // The keys a mapping holds once its merges are done: its own and every merged mapping's.
  const keysOf = (of: YAMLMap, seen: Set<YAMLMap>): Set<string> => {
    let keys = given.get(of);
    if (keys) return keys;
    keys = new Set();
    seen.add(of);
    for (const pair of of.items) {
      if (isMergePair(pair)) {
        for (const source of sources(pair.value)) if (!seen.has(source)) for (const key of keysOf(source, seen)) keys.add(key);
      } else {
        const text = textOf(pair.key);
        if (text !== undefined) keys.add(text);
      }
    }
    given.set(of, keys);
    return keys;
  };
  const later = new Set<string>();
  // A key also written explicitly later is kept: the mapping gives it twice, which keysAsKubectl refuses.
  const written = new Set<string>();
  const kept: Pair[] = [];
  for (const pair of [...map.items].reverse() as Pair[]) {
    if (isMergePair(pair)) {
      for (const source of sources(pair.value)) for (const key of keysOf(source, new Set([map]))) later.add(key);
    } else {
      const text = textOf(pair.key);
      if (text !== undefined && later.has(text) && !written.has(text)) continue;
      if (text !== undefined) written.add(text);
    }
    kept.unshift(pair);
  }
  const merges = kept.filter(isMergePair).reverse();
  map.items = kept.map((pair) => (isMergePair(pair) ? merges.shift()! : pair));
}

/** The path of `node` under `root`, from the keys (already written as kubectl's) and indexes above it. */
function fieldOf(root: string, path: readonly unknown[], node: unknown): string {
  let field = root;
  const chain = [...path, node];
  for (let i = 0; i < chain.length - 1; i++) {
    const at = chain[i];
    const next = chain[i + 1];
    if (isPair(at) && at.value === next) {
      const key = at.key as Node | null;
      field = joinField(field, String((isScalar(key) ? key.value : null) ?? ''));
    } else if (isSeq(at)) field = `${field}[${at.items.indexOf(next as Node)}]`;
  }
  return field;
}

/** A key as written: `1`, `"1"`, `'1'`, `~`. */
function written(node: Node | Pair | null | undefined): string {
  if (isAlias(node)) return `*${node.source}`;
  if (!isScalar(node)) return 'an empty key';
  const source = node.source ?? String(node.value);
  if (source === '' && node.type === Scalar.PLAIN) return 'an empty key';
  if (node.type === Scalar.QUOTE_DOUBLE) return JSON.stringify(source);
  if (node.type === Scalar.QUOTE_SINGLE) return `'${source}'`;
  return source;
}

/** An integer as Go's `strconv.ParseInt(text, 0, 64)` reads one (underscores already dropped). */
const GO_INT = /^[-+]?(?:0[xX][0-9a-fA-F]+|0[bB][01]+|0[oO]?[0-7]+|[1-9][0-9]*|0)$/;
/** The integer Go's `strconv.ParseInt(text, 0, …)` reads from `text` (underscores already dropped), at any size; undefined for none. */
function goInteger(text: string): bigint | undefined {
  if (!GO_INT.test(text)) return undefined;
  const digits = text.replace(/^[-+]/, '');
  const magnitude = /^0[0-7]+$/.test(digits) ? BigInt(`0o${digits.slice(1)}`) : BigInt(digits);
  return text.startsWith('-') ? -magnitude : magnitude;
}

/** go-yaml v2's float syntax (`yamlStyleFloat`). */
const GO_YAML_FLOAT = /^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$/;
const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;
const UINT64_MAX = 2n ** 64n - 1n;

/**
 * The text sigs.k8s.io/yaml makes of a scalar key: undefined for one it refuses (go-yaml reads an
 * integer past int64 that fits 64 bits unsigned as a uint64, a key type the conversion refuses).
 */
function kubectlKey(key: Scalar): string | undefined {
  const value = key.value;
  if (typeof value === 'string') return value;
  if (typeof value === 'boolean') return String(value);
  if (typeof value !== 'number' && typeof value !== 'bigint') return String(value);
  const text = (key.source ?? String(value)).replaceAll('_', '');
  const n = goInteger(text);
  if (n !== undefined) {
    if (n >= INT64_MIN && n <= INT64_MAX) return n.toString();
    if (!/^[-+]/.test(text) && n <= UINT64_MAX) return undefined;
    // Past 64 bits: go-yaml reads a decimal as a float, anything else as the text itself.
    if (!GO_YAML_FLOAT.test(text)) return key.source;
  }
  return goFloat32(Number(value));
}

/** `strconv.FormatFloat(value, 'g', -1, 32)` as sigs.k8s.io/yaml writes a float key (`+Inf` as `.inf`). */
export function goFloat32(value: number): string {
  const f = Math.fround(value);
  if (Number.isNaN(f)) return '.nan';
  if (!Number.isFinite(f)) return f > 0 ? '.inf' : '-.inf';
  if (f === 0) return Object.is(f, -0) ? '-0' : '0';
  // The fewest significant digits that read back as the same float32.
  let mantissa = '';
  let exp = 0;
  for (let precision = 1; precision <= 9; precision++) {
    const [m, e] = Math.abs(f).toExponential(precision - 1).split('e') as [string, string];
    if (Math.fround(Number(`${m}e${e}`)) === Math.abs(f)) {
      mantissa = m.replace('.', '').replace(/0+$/, '') || '0';
      exp = Number(e);
      break;
    }
  }
  const sign = f < 0 ? '-' : '';
  // Go's shortest %g: the exponent form below 1e-4 and from 1e+06 on.
  if (exp < -4 || exp >= 6) {
    const digits = mantissa.length > 1 ? `${mantissa[0]}.${mantissa.slice(1)}` : mantissa;
    return `${sign}${digits}e${exp < 0 ? '-' : '+'}${String(Math.abs(exp)).padStart(2, '0')}`;
  }
  if (exp < 0) return `${sign}0.${'0'.repeat(-exp - 1)}${mantissa}`;
  const whole = mantissa.slice(0, exp + 1).padEnd(exp + 1, '0');
  const fraction = mantissa.slice(exp + 1);
  return `${sign}${whole}${fraction ? `.${fraction}` : ''}`;
}
