import { JSONPath } from 'jsonpath-plus';

const cache = new Map<string, string[] | null>();

/**
 * The first value a JSONPath selects in `item`, or undefined. Simple paths (`$.a.b`, `$.a[0]`) are
 * read directly (this runs once per promoted column per row); anything else goes to jsonpath-plus.
 */
export function readPath(item: unknown, path: string): unknown {
  let simple = cache.get(path);
  if (simple === undefined) {
    simple = /^\$(\.[A-Za-z_$][\w$]*|\[\d+\])*$/.test(path) ? [...path.matchAll(/\.([A-Za-z_$][\w$]*)|\[(\d+)\]/g)].map((m) => m[1] ?? m[2]!) : null;
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
