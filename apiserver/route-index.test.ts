import { describe, expect, it } from '@jest/globals';
import Router, { type Layer } from '@koa/router';
import { routeTable } from './app.js';
import { dispatchOf, indexRouter, layerKey } from './route-index.js';
import { mountRoutes, type BodyReader } from './router.js';
import type { AreaServices } from '../src/runtime/services.js';

/**
 * The route index (apiserver/route-index.ts) finds the same layers, in the same order, as
 * @koa/router's own scan of every layer (and remembers them: asked again, the same answer), for every declared route's path (parameters filled, in other
 * cases, with a trailing slash, a segment more or less) and paths no route declares.
 */

const routes = routeTable({}, () => ({}));
// Registration reads nothing of the services or the body reader: the handlers are never run here.
const router = mountRoutes(routes, {} as AreaServices, (() => undefined) as unknown as BodyReader);
type Match = (path: string, method: string) => { path: Layer[]; pathAndMethod: Layer[]; route: boolean };
const indexed = (router as unknown as { match: Match }).match;
const scanned: Match = (path, method) => (Router.prototype as unknown as { match: Match }).match.call(router, path, method);

function variants(path: string): string[] {
  const filled = path.replace(/\{(\w+)\}/g, (_, name: string) => (name === 'tid' ? '1' : `x-${name}`));
  const upper = filled.toUpperCase();
  const mixed = filled.replace(/[a-z]/g, (c, i: number) => (i % 2 ? c.toUpperCase() : c));
  return [filled, `${filled}/`, upper, mixed, `${filled}/more`, filled.slice(0, filled.lastIndexOf('/')) || '/', `${filled}//`, filled.replace('/api/', '/api//'), filled.replace(/k/gi, '\u212a')];
}

const paths = [
  ...new Set([
    ...routes.flatMap((r) => variants(r.path)),
    '/',
    '',
    '/api',
    '/api/',
    '/API',
    '/api/platform',
    '/api/platform/',
    '/API/PLATFORM/nothing-here',
    '/api/platform/runs/../health',
    '/api/unknown/path',
    '/q',
    '/q/',
    '/nothing',
    '/%61pi/connectors',
    '/api/%63onnectors',
    '/\u0130pi/connectors',
  ]),
];

describe('route index', () => {
  it('indexes the declared routes by their first two segments', () => {
    const keyed = (router.stack as Layer[]).filter((l) => layerKey(l) !== undefined).length;
    // Nearly every route starts with two literal segments; without that the index saves nothing.
    expect(keyed).toBeGreaterThan(router.stack.length * 0.9);
  });

  it('matches the same layers in the same order as the router scanning them all', () => {
    let compared = 0;
    for (const path of paths) {
      for (const method of ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'PROPFIND', 'get']) {
        const a = indexed(path, method);
        const b = scanned(path, method);
        expect({ path, method, layers: a.path.map((l) => l.path), pathAndMethod: a.pathAndMethod.map((l) => l.path), route: a.route }).toEqual({
          path,
          method,
          layers: b.path.map((l) => l.path),
          pathAndMethod: b.pathAndMethod.map((l) => l.path),
          route: b.route,
        });
        expect(a.path).toEqual(b.path);
        expect(a.pathAndMethod).toEqual(b.pathAndMethod);
        // Asked again, the remembered answer: the same, whatever was done to the arrays of the first.
        a.path.push(a.path[0]!);
        a.pathAndMethod.length = 0;
        const again = indexed(path, method);
        expect(again.path).toEqual(b.path);
        expect(again.pathAndMethod).toEqual(b.pathAndMethod);
        expect(again.route).toBe(b.route);
        compared += b.pathAndMethod.length;
      }
    }
    // The paths reached declared routes (not only misses on both sides).
    expect(compared).toBeGreaterThan(routes.length);
  });

  it('keys a layer only by literal segments it must start with', () => {
    const r = new Router();
    const key = (path: string) => layerKey(r.register(path, ['GET'], async () => undefined) as Layer);
    expect(key('/api/connectors')).toBe('api/connectors');
    expect(key('/API/Platform/runs/:id')).toBe('api/platform');
    expect(key('/api/tenants/:tid/x')).toBe('api/tenants');
    expect(key('/api/:area/x')).toBeUndefined();
    expect(key('/api/connectors:x')).toBeUndefined();
    expect(key('/api/connectors{/:x}')).toBeUndefined();
    expect(key('/api')).toBeUndefined();
    r.all(/^\/api\/platform/i, async () => undefined);
    expect(layerKey(r.stack.at(-1) as Layer)).toBeUndefined();
  });

  it('sees a layer registered after the first match', () => {
    const r = new Router();
    r.get('/api/a/b', async () => undefined);
    indexRouter(r);
    const match = (r as unknown as { match: Match }).match;
    expect(match('/api/a/c', 'GET').route).toBe(false);
    r.get('/api/a/c', async () => undefined);
    expect(match('/api/a/c', 'GET').route).toBe(true);
  });
});

describe('dispatch', () => {
  type Ctx = Record<string, unknown> & { method: string; path: string; request: Record<string, unknown> };
  /** A router whose layers record what they saw of the context, as the hub's: params, a floor of any path that goes on, two layers of one path. */
  function recording(seen: string[]): Router {
    const r = new Router();
    const record = (name: string, goOn: boolean) => async (ctx: Ctx, next: () => Promise<unknown>) => {
      seen.push(`${name} ${JSON.stringify(ctx.params)} ${String(ctx.routerPath)} ${String(ctx._matchedRoute)}`);
      if (goOn) await next();
      seen.push(`${name} done`);
    };
    r.register('/api/a/:id', ['GET'], record('audit', true) as never);
    r.register('/api/a/:id', ['GET'], record('route', false) as never);
    r.register('/api/b/:x/:y', ['GET', 'POST'], record('two', true) as never);
    r.get('/api/c', async () => {
      throw new Error('refused');
    });
    r.get('/api/d', (() => {
      throw new Error('thrown at once');
    }) as never);
    r.get('/api/e', (async (_ctx: Ctx, next: () => Promise<unknown>) => {
      await next();
      await next();
    }) as never);
    r.all(/^\/api\/(a|b)(?:\/.*)?$/i, record('floor', true) as never);
    indexRouter(r);
    return r;
  }

  async function run(use: (r: Router) => (ctx: Ctx, next: () => Promise<unknown>) => unknown, method: string, path: string) {
    const seen: string[] = [];
    const r = recording(seen);
    const ctx: Ctx = { method, path, request: {}, host: 'example.org' };
    let outcome: string;
    try {
      await use(r)(ctx, async () => {
        seen.push('next');
      });
      outcome = 'resolved';
    } catch (err) {
      outcome = `rejected: ${(err as Error).message}`;
    }
    const fields = Object.fromEntries(['params', 'captures', 'routerPath', 'routerName', '_matchedRoute', '_matchedRouteName', 'routeMatched'].map((k) => [k, ctx[k]]));
    return { seen, outcome, fields, requestParams: ctx.request.params, matched: (ctx.matched as Layer[] | undefined)?.map((l) => String(l.path)), router: ctx.router === r };
  }

  it('runs the same layers, in the same order, with the same context as the router its own dispatch', async () => {
    const own = (r: Router) => r.routes() as unknown as (ctx: Ctx, next: () => Promise<unknown>) => unknown;
    const ours = (r: Router) => dispatchOf(r) as unknown as (ctx: Ctx, next: () => Promise<unknown>) => unknown;
    const cases: Array<[string, string]> = [
      ['GET', '/api/a/7'],
      ['GET', '/API/A/%C3%A9t%C3%A9'],
      ['POST', '/api/a/7'],
      ['GET', '/api/b/1/2'],
      ['POST', '/api/b/1/2'],
      ['DELETE', '/api/b/1/2'],
      ['GET', '/api/b'],
      ['GET', '/api/c'],
      ['GET', '/api/d'],
      ['GET', '/api/e'],
      ['GET', '/nothing'],
    ];
    for (const [method, path] of cases) {
      const expected = await run(own, method, path);
      expect({ method, path, ...(await run(ours, method, path)) }).toEqual({ method, path, ...expected });
    }
  });

  it('is the router its own for a router with a host, prefix or exclusive option', () => {
    for (const r of [new Router({ host: 'example.org' }), new Router({ prefix: '/api' }), new Router({ exclusive: true })]) {
      expect((dispatchOf(r) as unknown as { router?: Router }).router).toBe(r);
    }
  });
});
