import { JSONPath } from 'jsonpath-plus';
import { depthOf } from '../validation/input-limits.js';

/**
 * A thin wrapper over jsonpath-plus for the paths a connector declares (response_path, cursor_path,
 * total_path, link_path, has_more_path, ...), read against one parsed response body.
 *
 * jsonpath-plus runs filter expressions (`?(@.x > 1)`) in its "safe" evaluator, never `eval`.
 */

/**
 * How deep a value a path searching at any depth (`..`) is run over. jsonpath-plus walks such paths
 * recursively, so a hostile value (10,000 levels) would overflow the stack; a thousand levels is
 * far from that and far past anything storable (rows nest MAX_JSON_DEPTH levels at most), so a page
 * of storable records is never refused.
 */
const PATH_DEPTH_LIMIT = 1_000;

/** A path searching at any depth (`..`) met a value nested past PATH_DEPTH_LIMIT. */
export class TooDeepForPath extends Error {
  constructor(readonly path: string) {
    super(`the path ${path} searches at any depth (..), and the value nests objects and arrays deeper than ${PATH_DEPTH_LIMIT} levels`);
  }
}

/** Every value the path selects, in document order; `[]` when nothing matches or the body is not JSON-shaped. */
function queryAll(json: unknown, path: string): unknown[] {
  if (json === null || json === undefined) return [];
  if (typeof json !== 'object') return path === '$' ? [json] : [];
  // Measured without recursion (depthOf stops past the limit), and only for such paths.
  if (path.includes('..') && depthOf(json, PATH_DEPTH_LIMIT) > PATH_DEPTH_LIMIT) throw new TooDeepForPath(path);
  const members = membersOf(json, path);
  if (members) return members;
  const found = JSONPath({ path, json: json as object, wrap: true, eval: 'safe' }) as unknown[] | undefined;
  return Array.isArray(found) ? found : [];
}

// `$.a`, `$[0]`, `$["a b"]`, `$['a b']` chains are read without the JSONPath engine: promoted columns
// and unique keys are read once per row, and these are nearly all of them.
const SEG = String.raw`\.([A-Za-z_$][\w$]*)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]|\['((?:[^'\\]|\\.)*)'\]`;
const SIMPLE = new RegExp(`^\\$(?:${SEG})*$`);
const SEGMENT = new RegExp(SEG, 'g');
const simplePaths = new Map<string, string[] | null>();

function simpleSegments(path: string): string[] | null {
  let segments = simplePaths.get(path);
  if (segments === undefined) {
    segments = SIMPLE.test(path)
      ? [...path.matchAll(SEGMENT)].map((m) => m[1] ?? m[2] ?? (m[3] !== undefined ? (JSON.parse(m[3]) as string) : m[4]!.replace(/\\'/g, "'")))
      : null;
    simplePaths.set(path, segments);
  }
  return segments;
}

/**
 * What a plain chain ending in a wildcard (`$.data[*]`, `$.rows.*`, `$[*]`) selects, as JSONPath
 * selects it (an array's elements, an object's member values, nothing of anything else), read
 * without the JSONPath engine; undefined for any other path. jsonpath-plus builds a match of its own
 * per member (2.6 µs and 360 bytes each): a page's million records took 2.6 s of the event loop, and
 * 30 million numbers in a 64 MiB page more heap than the process has.
 */
function membersOf(json: unknown, path: string): unknown[] | undefined {
  const chain = path.endsWith('[*]') ? path.slice(0, -3) : path.endsWith('.*') ? path.slice(0, -2) : undefined;
  const segments = chain === undefined ? null : simpleSegments(chain);
  if (!segments) return undefined;
  const node = queryFirst(json, chain!);
  if (Array.isArray(node)) return node;
  return node !== null && typeof node === 'object' ? Object.values(node) : [];
}

/**
 * Whether two paths select the same: written alike, or both plain chains of the same names and
 * indexes however they are spelt (`$.id`, `$['id']`, `$["id"]`).
 */
export function samePath(a: string, b: string): boolean {
  if (a === b) return true;
  const [x, y] = [simpleSegments(a), simpleSegments(b)];
  return x !== null && y !== null && x.length === y.length && x.every((segment, i) => segment === y[i]);
}

/** The first value the path selects, or undefined. */
export function queryFirst(json: unknown, path: string): unknown {
  const segments = simpleSegments(path);
  if (segments) {
    let node: unknown = json;
    for (const segment of segments) {
      if (node === null || typeof node !== 'object') return undefined;
      node = (node as Record<string, unknown>)[segment];
    }
    return node;
  }
  return queryAll(json, path)[0];
}

/**
 * Whether a path's last selector picks members, each a record of its own: a wildcard (`[*]`, `.*`), a filter
 * (`[?(…)]`), a slice (`[-1:]`) or a union (`[0,5]`), names in quotes read as text (`['a:b']` is one name).
 */
function endsPickingMembers(path: string): boolean {
  const p = path.trim();
  if (p.endsWith('.*')) return true;
  if (!p.endsWith(']')) return false;
  let depth = 0;
  let last = -1;
  let quote: string | undefined;
  for (let i = 0; i < p.length; i++) {
    const c = p[i]!;
    if (quote) {
      if (c === '\\') i++;
      else if (c === quote) quote = undefined;
    } else if (c === '"' || c === "'") quote = c;
    else if (c === '[' || c === '(') {
      if (depth === 0) last = i;
      depth++;
    } else if (c === ']' || c === ')') depth--;
  }
  if (last < 0) return false;
  const inside = p.slice(last + 1, -1).trim();
  if (inside === '*' || inside.startsWith('?')) return true;
  return /[:,]/.test(inside.replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'/g, ''));
}

/**
 * The records a response carries at `path` (a response_path):
 * - the path selects one array (`$.content`, `$.data`, `$` on a bare array, `$..results`): its elements,
 *   unless its last selector picks members (`$.rows[*]`, a filter, a slice, a union): each value it selects is
 *   a record, so rows sent as arrays are one record each also on a page holding one;
 * - it selects several values (`$.data.partners.edges[*].node`): those values;
 * - it selects one object: that object as a single record;
 * - it selects nothing, null or undefined: no records.
 */
export function queryItems(json: unknown, path: string): unknown[] {
  const members = membersOf(json, path);
  const found = members ?? queryAll(json, path);
  if (found.length === 1) {
    const only = found[0];
    if (Array.isArray(only)) return endsPickingMembers(path) ? [only] : only;
    if (only === null || only === undefined) return [];
    return [only];
  }
  // JSON holds no undefined: the members a plain chain selects are the records as they are (no copy of a page's array).
  return members ?? found.filter((v) => v !== undefined);
}

/** A count the source publishes (total_path, total_pages_path): a finite non-negative number or a numeric string. */
export function queryCount(json: unknown, path: string): number | undefined {
  const value = queryFirst(json, path);
  if (typeof value === 'number' && Number.isFinite(value) && value >= 0) return value;
  if (typeof value === 'string' && /^\d+$/.test(value.trim())) return Number(value.trim());
  return undefined;
}

/** A flag the source publishes (has_more_path): `false`, `"false"`, `0` and null read as false. Undefined when absent. */
export function queryFlag(json: unknown, path: string): boolean | undefined {
  const found = queryAll(json, path);
  if (found.length === 0) return undefined;
  const value = found[0];
  if (value === undefined) return undefined;
  if (value === null || value === false || value === 0) return false;
  if (typeof value === 'string') return !['false', '0', '', 'no'].includes(value.trim().toLowerCase());
  return Boolean(value);
}
