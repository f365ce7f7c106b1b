import type Router from '@koa/router';
import type { Layer } from '@koa/router';
import type { Context } from 'koa';

/**
 * @koa/router finds a request's routes by testing the path against every layer's pattern, in the
 * order they were registered: a hundred and more regular expressions per request, a noticeable part
 * of a short read's cost in the hub's process (docs/performance.md, "What limits the API"). This
 * narrows the test to the layers that can match: a layer whose pattern starts with two literal path
 * segments (`/api/platform/…`, `/api/connectors`) can only match a path whose first two segments
 * are those, so it is tested only against such paths; every other layer (a parameter or a pattern
 * within the first two segments, a RegExp path) is tested against every path, as before. Each
 * candidate is still tested with its own pattern, in the order of registration, and the result is
 * built exactly as the router's own `match` builds it: the same layers in the same order, so routing,
 * 405's Allow list and HEAD are what they were.
 *
 * The patterns are case-insensitive and not Unicode-aware (`/…/i`): a non-ASCII character never
 * matches an ASCII letter of the pattern, so a path a layer matches has those two segments in ASCII,
 * equal to the layer's up to ASCII case, and the path's two segments lowercased find them.
 */

/** The router's match result (`Router.prototype.match`). */
interface MatchResult {
  path: Layer[];
  pathAndMethod: Layer[];
  route: boolean;
}

/** Two literal segments at the start of a layer's path, then `/` or the end of the path (path-to-regexp's syntax starts at any of these characters). */
const LEADING_SEGMENTS = /^\/([A-Za-z0-9_.~-]+)\/([A-Za-z0-9_.~-]+)(?:$|\/)/;
const SYNTAX = /[:*?+(){}[\]!\\]/;

/** The key of a layer's first two literal segments, lowercased, or undefined when the layer may match paths of any first two segments. */
export function layerKey(layer: Layer): string | undefined {
  const path = layer.path as unknown;
  if (typeof path !== 'string') return undefined;
  const syntaxAt = path.search(SYNTAX);
  const literal = syntaxAt === -1 ? path : path.slice(0, syntaxAt);
  const m = LEADING_SEGMENTS.exec(literal);
  if (!m) return undefined;
  // `/a/b` ends the literal part: only a pattern that ends there too (no parameter glued to `b`).
  if (m[0].length === literal.length && !m[0].endsWith('/') && literal !== path) return undefined;
  return `${m[1]!}/${m[2]!}`.toLowerCase();
}

/** The first two segments of a request's path, lowercased (their characters as they are otherwise). */
function pathKey(path: string): string {
  const second = path.indexOf('/', 1);
  if (second === -1) return '';
  const third = path.indexOf('/', second + 1);
  return path.slice(1, third === -1 ? path.length : third).toLowerCase();
}

/** Paths longer than this are matched afresh each time (a path is the caller's to make up, up to Node's 16 KiB header limit). */
const CACHED_PATH_MAX = 256;
/** Matches remembered at most; past that the cache is emptied and fills again with the paths in use. */
const CACHED_MATCHES_MAX = 2_000;

/**
 * Makes `router.match` test only the layers that can match the path (see above), and remember the
 * answer for a path and method it has seen (up to CACHED_MATCHES_MAX of them, paths of at most
 * CACHED_PATH_MAX characters): a busy route's requests test no pattern at all. The answer depends on
 * the path, the method and the layers alone, and each call gets arrays of its own (the router keeps
 * the first in `ctx.matched`). Call once every layer is registered; a layer registered afterwards
 * rebuilds the index, and empties the cache, on the next request.
 */
export function indexRouter(router: Router): void {
  let built: { size: number; byKey: Map<string, Layer[]>; anyPath: Layer[]; cache: Map<string, MatchResult> } | undefined;
  const build = () => {
    const stack = router.stack as Layer[];
    const keys = stack.map(layerKey);
    const anyPath = stack.filter((_, i) => keys[i] === undefined);
    const byKey = new Map<string, Layer[]>();
    // Each key's candidates in the order of registration, the layers of any path among them.
    for (const key of new Set(keys)) if (key !== undefined) byKey.set(key, stack.filter((_, i) => keys[i] === undefined || keys[i] === key));
    return { size: stack.length, byKey, anyPath, cache: new Map<string, MatchResult>() };
  };
  (router as unknown as { match(path: string, method: string): MatchResult }).match = (path, method) => {
    if (built?.size !== router.stack.length) built = build();
    const cacheable = path.length <= CACHED_PATH_MAX;
    const cacheKey = cacheable ? `${method} ${path}` : '';
    const known = cacheable ? built.cache.get(cacheKey) : undefined;
    if (known) return { path: [...known.path], pathAndMethod: [...known.pathAndMethod], route: known.route };
    const candidates = built.byKey.get(pathKey(path)) ?? built.anyPath;
    // As Router.prototype.match, over the candidates.
    const result: MatchResult = { path: [], pathAndMethod: [], route: false };
    const normalizedMethod = method.toUpperCase();
    for (const layer of candidates) {
      if (!layer.match(path)) continue;
      result.path.push(layer);
      if (layer.methods.length === 0 || layer.methods.includes(normalizedMethod)) {
        result.pathAndMethod.push(layer);
        if (layer.methods.length > 0) result.route = true;
      }
    }
    if (cacheable) {
      if (built.cache.size >= CACHED_MATCHES_MAX) built.cache.clear();
      built.cache.set(cacheKey, { path: [...result.path], pathAndMethod: [...result.pathAndMethod], route: result.route });
    }
    return result;
  };
}

type Middleware = (ctx: Context, next: () => Promise<unknown>) => unknown;
/** What @koa/router's dispatch reads and writes on the request's context. */
type RoutedContext = Context & {
  matched?: Layer[];
  router?: Router;
  routeMatched?: boolean;
  captures?: string[];
  routerPath?: string;
  routerName?: string;
  newRouterPath?: string;
  _matchedRoute?: string | RegExp;
  _matchedRouteName?: string;
};

/**
 * The router's dispatch (`router.routes()`), as @koa/router's own does it for a router without a
 * host, prefix, `exclusive` or `routerPath` option (the hub's; for any other, the router's own): the
 * same layers run in the same order with the same `ctx.params`, `ctx.matched`, `ctx.routerPath` and
 * `ctx._matchedRoute`, and a request no route serves goes on to the next middleware (through the
 * router's `not-found` event, as its own). Without what it does per request for nothing here: reading
 * `ctx.host` (Koa splits the Host header) to match no host, composing a new chain of closures and
 * copying the matched layers reversed.
 */
export function dispatchOf(router: Router): Middleware {
  const opts = (router as unknown as { opts: Record<string, unknown> }).opts;
  if (router.host || router.exclusive || opts.prefix || opts.routerPath) return router.routes() as unknown as Middleware;
  const events = (router as unknown as { _events: { emit(event: string, ctx: Context, next: () => Promise<unknown>): unknown } })._events;
  return (context, next) => {
    const ctx = context as RoutedContext;
    const path = ctx.newRouterPath || ctx.path || ctx.routerPath || '';
    const matched = (router as unknown as { match(path: string, method: string): MatchResult }).match(path, ctx.method);
    if (ctx.matched) ctx.matched.push(...matched.path);
    else ctx.matched = matched.path;
    ctx.router = router;
    ctx.routeMatched = matched.route;
    if (!matched.route) return events.emit('not-found', ctx, next);
    const layers = matched.pathAndMethod;
    for (let i = layers.length - 1; i >= 0; i--) {
      const layer = layers[i]!;
      if (layer.methods.length === 0) continue;
      ctx._matchedRoute = layer.path;
      if (layer.name) ctx._matchedRouteName = layer.name;
      break;
    }
    return step(ctx, layers, 0, 0, path, next);
  };
}

/**
 * Runs the stack of `layers[li]` from its `si`-th middleware, then the next layers' (each entered as
 * the router enters it: its captures and parameters on `ctx`), then `done`: koa-compose's rules (a
 * promise from every step, a throw as a rejection, `next()` at most once per step).
 */
function step(ctx: RoutedContext, layers: Layer[], li: number, si: number, path: string, done: () => Promise<unknown>): Promise<unknown> {
  if (li === layers.length) return done();
  const layer = layers[li]!;
  if (si === 0) {
    ctx.captures = layer.captures(path);
    const params = layer.params(path, ctx.captures || [], ctx.params);
    (ctx.request as Context["request"] & { params?: Record<string, string> }).params = params;
    ctx.params = params;
    ctx.routerPath = layer.path as string;
    ctx.routerName = layer.name || undefined;
    ctx._matchedRoute = layer.path;
    if (layer.name) ctx._matchedRouteName = layer.name;
  }
  const stack = layer.stack as unknown as Middleware[];
  if (si === stack.length) return step(ctx, layers, li + 1, 0, path, done);
  let called = false;
  try {
    return Promise.resolve(
      stack[si]!(ctx, () => {
        if (called) return Promise.reject(new Error('next() called multiple times'));
        called = true;
        return step(ctx, layers, li, si + 1, path, done);
      }),
    );
  } catch (err) {
    return Promise.reject(err);
  }
}
