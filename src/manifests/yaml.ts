import type { DocumentOptions, ParseOptions, ScalarTag, SchemaOptions, ToStringOptions } from 'yaml';

/**
 * Integers with a prefix Go reads and YAML 1.1 does not (`0o17`, and `0O`, `0X`, `0B` in capitals):
 * go-yaml drops the underscores and hands the text to Go's `strconv.ParseInt(text, 0, 64)`. Text
 * that is no such number (`0b12`) stays a string, as there. Only read, never chosen to write.
 */
const GO_PREFIXED_INT: ScalarTag = {
  identify: () => false,
  default: true,
  tag: 'tag:yaml.org,2002:int',
  test: /^[-+]?0[oOxXbB][0-9a-fA-F_]+$/,
  resolve: (text: string) => {
    const value = Number(text.replace(/^[-+]/, '').replaceAll('_', ''));
    if (Number.isNaN(value)) return text;
    return text.startsWith('-') ? -value : value;
  },
};

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
  customTags: (tags) => [...tags.filter((tag) => typeof tag === 'string' || !(tag.tag === 'tag:yaml.org,2002:timestamp' || tag.format === 'TIME')), GO_PREFIXED_INT],
};
