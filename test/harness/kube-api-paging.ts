import { posix } from 'node:path';

/**
 * Chunked lists (`limit` and `continue`) as kube-apiserver serves them from etcd
 * (k8s.io/apiserver/pkg/storage/continue.go and etcd3/store.go), for the scripted stand-in
 * (kube-api.ts):
 *
 * - a list is ordered by its etcd key (`<namespace>/<name>` across namespaces, `<name>` within one),
 *   compared byte by byte, whether or not it is chunked;
 * - `limit` > 0 answers at most that many items; when keys remain after the last one answered,
 *   `metadata.continue` is set, and so is `metadata.remainingItemCount` (how many remain) unless a
 *   label or field selector filters the list (the server cannot count what would match). With a
 *   selector a page may hold fewer items than `limit`, down to none, and still have a continue token
 *   (the keys after it may all be filtered out): only the token says whether more remain;
 * - the token is base64url (no padding) of `{"v":"meta.k8s.io/v1","rv":<revision>,"start":<the key
 *   after the last item answered, relative to the list's prefix>}`. Every page of one list is read
 *   at that revision (the first page's resourceVersion): objects created, changed or deleted after
 *   the first page do not show in later pages;
 * - a token that does not decode is 400 BadRequest `invalid continue token: continue key is not
 *   valid…`; a token whose revision was compacted is 410 Expired (kube-api.ts).
 */

export const CONTINUE_VERSION = 'meta.k8s.io/v1';

/** What kube-apiserver says of a continue token whose revision etcd has compacted (a 410 Expired, with a token to continue inconsistently). */
export const EXPIRED_CONTINUE =
  'The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.';

/** A continue token: base64url without padding (Go's RawURLEncoding) of its JSON. `rv` -1: continue from the latest revision (inconsistently). */
export function encodeContinue(start: string, rv: number): string {
  return Buffer.from(JSON.stringify({ v: CONTINUE_VERSION, rv, start }), 'utf8').toString('base64url');
}

const RAW_URL_BASE64 = /^[A-Za-z0-9_-]*$/;

/** A continue token decoded as DecodeContinue does, or why it is not valid (its words). */
export function decodeContinue(token: string): { start: string; rv: number } | { error: string } {
  const invalid = (why?: string) => ({ error: `continue key is not valid${why ? `: ${why}` : ''}` });
  // Go's RawURLEncoding: the URL alphabet, no padding, no partial final byte.
  const bad = [...token].findIndex((c) => !RAW_URL_BASE64.test(c));
  if (bad >= 0) return invalid(`illegal base64 data at input byte ${bad}`);
  if (token.length % 4 === 1) return invalid(`illegal base64 data at input byte ${token.length - 1}`);
  let decoded: unknown;
  try {
    decoded = JSON.parse(Buffer.from(token, 'base64url').toString('utf8'));
  } catch (err) {
    return invalid((err as Error).message);
  }
  if (decoded === null || typeof decoded !== 'object' || Array.isArray(decoded)) return invalid(`json: cannot unmarshal ${Array.isArray(decoded) ? 'array' : typeof decoded} into Go value of type storage.continueToken`);
  const { v, rv, start } = decoded as Record<string, unknown>;
  if (v !== undefined && v !== null && typeof v !== 'string') return invalid(`json: cannot unmarshal ${typeof v} into Go struct field continueToken.v of type string`);
  if (rv !== undefined && rv !== null && !(typeof rv === 'number' && Number.isSafeInteger(rv))) return invalid(`json: cannot unmarshal ${typeof rv} into Go struct field continueToken.rv of type int64`);
  if (start !== undefined && start !== null && typeof start !== 'string') return invalid(`json: cannot unmarshal ${typeof start} into Go struct field continueToken.start of type string`);
  if ((v ?? '') !== CONTINUE_VERSION) return invalid(`server does not recognize this encoded version ${v ?? ''}`);
  if (!rv) return invalid(`incorrect encoded start resourceVersion (version ${CONTINUE_VERSION})`);
  if (!start) return invalid(`encoded start key empty (version ${CONTINUE_VERSION})`);
  // Path traversal: the key, made absolute, must be what Go's path.Clean makes of it.
  const key = start.startsWith('/') ? start : `/${start}`;
  const normalized = posix.normalize(key);
  const cleaned = normalized.length > 1 ? normalized.replace(/\/$/, '') : normalized;
  if (cleaned !== key) return invalid(start);
  return { start: cleaned.slice(1), rv };
}

/** Byte order of etcd keys (the keys here are ASCII: code-unit order is byte order). */
export const byKey = (a: { key: string }, b: { key: string }): number => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0);

/** The `limit` query parameter: absent, empty or not above 0 is no limit; not an integer is a 400 (the server cannot decode the ListOptions). */
export function parseLimit(value: string | undefined): number | { error: string } {
  if (value === undefined || value === '') return 0;
  if (!/^[+-]?\d+$/.test(value)) return { error: `limit: Invalid value: "${value}": strconv.ParseInt: parsing "${value}": invalid syntax` };
  const n = Number(value);
  return n > 0 ? n : 0;
}

/**
 * One page of a list ordered by key: the entries from `start` on (inclusive; a token's start is the
 * last key answered followed by NUL) that `matches`, at most `limit` of them (0: all). `hasMore`:
 * keys remain after the last one answered, matching or not, as etcd's range answers it.
 */
export function pageOf<T>(sorted: ReadonlyArray<{ key: string; object: T }>, matches: (o: T) => boolean, limit: number, start?: string): { items: T[]; lastKey?: string; hasMore: boolean; remaining: number } {
  const from = start === undefined ? 0 : sorted.findIndex((e) => e.key >= start);
  const range = from < 0 ? [] : sorted.slice(from);
  const items: T[] = [];
  let i = 0;
  for (; i < range.length; i++) {
    if (limit > 0 && items.length >= limit) break;
    if (matches(range[i]!.object)) items.push(range[i]!.object);
  }
  const hasMore = limit > 0 && i < range.length;
  return { items, lastKey: i > 0 ? range[i - 1]!.key : undefined, hasMore, remaining: range.length - i };
}
