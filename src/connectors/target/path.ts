import { JSONPath } from 'jsonpath-plus';

const cache = new Map<string, string[] | null>();
// `$.a`, `$[0]`, `$["a b"]`, `$['a b']` chains: read without a JSONPath engine.
const SEG = String.raw`\.([A-Za-z_$][\w$]*)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]|\['((?:[^'\\]|\\.)*)'\]`;
const SIMPLE = new RegExp(`^\\$(?:${SEG})*$`);
const SEGMENT = new RegExp(SEG, 'g');

/**
 * The first value a JSONPath selects in `item`, or undefined. Simple paths (`$.a.b`, `$.a[0]`) are
 * read directly (this runs once per promoted column per row); anything else goes to jsonpath-plus.
 */
export function readPath(item: unknown, path: string): unknown {
  let simple = cache.get(path);
  if (simple === undefined) {
    simple = SIMPLE.test(path) ? [...path.matchAll(SEGMENT)].map((m) => m[1] ?? m[2] ?? (m[3] !== undefined ? JSON.parse(m[3]) : m[4]!.replace(/\\'/g, "'"))) : null;
    cache.set(path, simple);
  }
  if (simple) {
    let node: unknown = item;
    for (const segment of simple) {
      if (node === null || typeof node !== 'object') return undefined;
      node = (node as Record<string, unknown>)[segment];
    }
    return node;
  }
  const found = JSONPath({ path, json: item as object, wrap: true }) as unknown[];
  return found[0];
}
