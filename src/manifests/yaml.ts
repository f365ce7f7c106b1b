import { type CollectionTag, type Document, type DocumentOptions, type ParseOptions, type ScalarTag, type SchemaOptions, type ToStringOptions, visit } from 'yaml';

/**
 * Integers with a prefix Go reads and YAML 1.1 does not (`0o17`, and `0O`, `0X`, `0B` in capitals):
 * go-yaml drops the underscores and hands the text to Go's `strconv.ParseInt(text, 0, 64)`. Text
 * that is no such number (`0b12`) stays a string, as there. Only read, never chosen to write.
 */
const GO_PREFIXED_INT: ScalarTag = {
  identify: () => false,
  default: true,
  tag: 'tag:yaml.org,2002:int',
  test: /^[-+]?0_*[oOxXbB][0-9a-fA-F_]+$/,
  resolve: (text: string) => {
    // go-yaml drops every underscore first: `0_x1F` is 0x1F.
    const value = Number(text.replace(/^[-+]/, '').replaceAll('_', ''));
    if (Number.isNaN(value)) return text;
    return text.startsWith('-') ? -value : value;
  },
};

const FLOAT = 'tag:yaml.org,2002:float';

/**
 * YAML 1.1's float forms as the yaml package writes them let the mantissa be empty (`e1`, `.e1`,
 * `.`), which it then reads as NaN. go-yaml reads a float only where Go's `strconv.ParseFloat`
 * does, which wants a digit before the exponent: there `e1` (an endpoint id, say) is a string. The
 * same forms with a digit required; `.inf` and `.nan` are left as they are (refused, as kubectl
 * refuses them).
 */
const WITH_DIGIT = (tag: ScalarTag): ScalarTag => {
  if (tag.format === 'EXP') return { ...tag, test: /^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]*[0-9][0-9_]*)[eE][-+]?[0-9]+$/ };
  if (tag.test?.source === '^[-+]?(?:[0-9][0-9_]*)?\\.[0-9_]*$') return { ...tag, test: /^[-+]?(?:[0-9][0-9_]*\.[0-9_]*|\.[0-9_]*[0-9][0-9_]*)$/ };
  return tag;
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
 * those stay strings, and so they do here (YAML 1.1's tags for them are left out); it reads `0o17` as
 * 15, as Go does. Written with the
 * same options, a string such as `"no"` or `"0755"` is quoted, so that kubectl reads it back as a
 * string.
 */
export const KUBECTL_YAML: ParseOptions & DocumentOptions & SchemaOptions & ToStringOptions = {
  version: '1.1',
  customTags: (tags) => [
    ...tags
      .filter((tag) => typeof tag === 'string' || !(NOT_KUBECTL.has(tag.tag) || tag.format === 'TIME'))
      .map((tag) => (typeof tag === 'string' ? tag : tag.tag === MERGE ? MERGE_READ_ONLY(tag) : tag.tag === FLOAT ? WITH_DIGIT(tag as ScalarTag) : tag)),
    GO_PREFIXED_INT,
  ],
};


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
  let infinite: string | undefined;
  visit(doc, {
    Scalar(_key, node) {
      if (infinite === undefined && typeof node.value === 'number' && !Number.isFinite(node.value)) infinite = node.source ?? String(node.value);
    },
  });
  if (infinite !== undefined) return `${infinite} is not a finite number, which JSON cannot carry (kubectl refuses it too): quote it to mean the text`;
  return undefined;
}
