/**
 * Test-only fault routes: failures no product dialect shows, for the connector engine's tests. Served
 * only by `startDemoSource({ faults: true })`; `npm run demo-source` and the DEMO_* variables never
 * enable them. They read the same partner records as the dialects, without authentication.
 * docs/demo-source.md, "Test-only fault routes", lists them.
 */
import { page } from './dialects.js';
import { HttpError, intParam, linkTo, pageSizeParam, type RequestContext, requestBody, sendJson, sendText } from './http.js';

export interface Fault {
  handle: (ctx: RequestContext) => void | Promise<void>;
  /** Answer every method, not only GET and HEAD. */
  anyMethod?: boolean;
}

/** The downward liars declare this many rows fewer than they serve; /drift serves this many fewer than it has. */
const SHORTFALL = 5;
const ELSEWHERE = 'http://example.invalid';

function limitOffset(ctx: RequestContext): { limit: number; offset: number } {
  const q = ctx.url.searchParams;
  return { limit: pageSizeParam(q.get('limit'), 'limit'), offset: intParam(q.get('offset'), 'offset', 0) };
}

/** The /offset envelope over the first `served` rows, declaring `total` (no updated_since filter). */
function offsetEnvelope(ctx: RequestContext, served: number, total: (offset: number) => number): void {
  const { limit, offset } = limitOffset(ctx);
  sendJson(ctx.res, 200, { data: page(ctx.data.all(), offset, limit, served), total: total(offset), offset, limit });
}

/** The /v1 (Stripe) envelope; `follow` turns a `starting_after` into the index of the next row, or throws. */
function cursorFault(follow: (after: string) => number): Fault {
  return {
    handle(ctx) {
      const q = ctx.url.searchParams;
      const limit = pageSizeParam(q.get('limit'), 'limit');
      const after = q.get('starting_after');
      const start = after === null || after === '' ? 0 : follow(after);
      const view = ctx.data.all();
      sendJson(ctx.res, 200, { object: 'list', url: ctx.url.pathname, data: page(view, start, limit), has_more: start + limit < view.length });
    },
  };
}

/** The /drf envelope; `count` is what it declares, `next` rewrites the absolute next URL. */
function drfFault(count: (rows: number) => number, next: (ctx: RequestContext, url: string) => string): Fault {
  return {
    handle(ctx) {
      const { limit, offset } = limitOffset(ctx);
      const view = ctx.data.all();
      const url = offset + limit < view.length ? next(ctx, linkTo(ctx, { limit, offset: offset + limit })) : null;
      sendJson(ctx.res, 200, { count: count(view.length), next: url, previous: null, results: page(view, offset, limit) });
    },
  };
}

const relative = (ctx: RequestContext, url: string) => url.slice(ctx.origin.length);

export const FAULTS: ReadonlyMap<string, Fault> = new Map<string, Fault>([
  // Cursors carried from an earlier page that the source no longer knows, or never moves past.
  [
    '/stale/partners',
    cursorFault((after) => {
      throw new HttpError(404, 'not_found', `No such partner: '${after}' (this fault route forgets every cursor)`);
    }),
  ],
  [
    '/gone/partners',
    cursorFault((after) => {
      throw new HttpError(410, 'gone', `cursor '${after}' expired (this fault route expires every cursor)`);
    }),
  ],
  ['/stuck/partners', cursorFault(() => 0)],
  // Next links: relative ones, and one to another origin.
  ['/relative-drf/partners', drfFault((rows) => rows, relative)],
  [
    '/relative-link/partners',
    {
      handle(ctx) {
        const { limit, offset } = limitOffset(ctx);
        const view = ctx.data.all();
        const headers: Record<string, string> = {};
        if (offset + limit < view.length) headers.Link = `<${relative(ctx, linkTo(ctx, { limit, offset: offset + limit }))}>; rel="next"`;
        sendJson(ctx.res, 200, page(view, offset, limit), headers);
      },
    },
  ],
  ['/elsewhere/partners', drfFault((rows) => rows, (ctx, url) => ELSEWHERE + relative(ctx, url))],
  // Declared totals: lower than what is served, and one that changes from page to page.
  ['/liar-low/partners', { handle: (ctx) => offsetEnvelope(ctx, ctx.data.size, () => ctx.data.size - SHORTFALL) }],
  ['/drf-low/partners', drfFault((rows) => rows - SHORTFALL, (_ctx, url) => url)],
  ['/drift/partners', { handle: (ctx) => offsetEnvelope(ctx, ctx.data.size - SHORTFALL, (offset) => ctx.data.size + offset) }],
  // Broken answers.
  ['/reset/partners', { handle: (ctx) => void ctx.req.socket.destroy() }],
  ['/html/partners', { handle: (ctx) => sendText(ctx.res, 200, 'text/html', '<html><body>maintenance</body></html>') }],
  [
    '/bad-request/partners',
    {
      handle(ctx) {
        // A careless upstream: the refusal quotes the credential it was sent.
        sendJson(ctx.res, 400, { error: 'bad_request', message: 'header X-Api-Version is required', authorization: ctx.req.headers.authorization ?? null });
      },
    },
  ],
  [
    '/retry-after/partners',
    {
      // Per query string, as /flaky: a 429 carrying `Retry-After: <retry_after>` (none without the
      // parameter), then a 503 without Retry-After, then the offset page.
      handle(ctx) {
        const key = `fault:retry-after:${ctx.url.search}`;
        const seen = (ctx.flaky.get(key) ?? 0) + 1;
        ctx.flaky.set(key, seen);
        const retryAfter = ctx.url.searchParams.get('retry_after');
        if (seen === 1) {
          sendJson(ctx.res, 429, { error: 'rate_limited', message: 'too many requests (retry-after fault, first attempt)' }, retryAfter === null ? {} : { 'Retry-After': retryAfter });
        } else if (seen === 2) {
          sendJson(ctx.res, 503, { error: 'unavailable', message: 'service unavailable (retry-after fault, second attempt)' });
        } else {
          offsetEnvelope(ctx, ctx.data.size, () => ctx.data.size);
        }
      },
    },
  ],
  // What the client sent, as one record under `data`.
  [
    '/echo/partners',
    {
      anyMethod: true,
      async handle(ctx) {
        const { req, url } = ctx;
        const body = await requestBody(ctx);
        sendJson(ctx.res, 200, { data: [{ method: req.method, url: url.href, query: Object.fromEntries(url.searchParams), headers: req.headers, body }] });
      },
    },
  ],
  // A GraphQL endpoint whose every answer carries two errors.
  [
    '/errors/graphql',
    {
      anyMethod: true,
      handle(ctx) {
        sendJson(ctx.res, 200, { errors: [{ message: 'boom: the first of two errors' }, { message: 'the second error' }], data: null });
      },
    },
  ],
]);
