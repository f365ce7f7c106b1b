/**
 * The REST path dialects: `/<dialect>/partners`. The dialect picks the envelope and the paging
 * mechanism; the rows are always the same dataset in id order.
 */
import type { AuthKind } from './credentials.js';
import { countUpTo, type View } from './data.js';
import { HttpError, intParam, linkTo, pageSizeParam, type RequestContext, sendJson } from './http.js';

export interface Dialect {
  auth: AuthKind;
  /** Checked before authentication (a missing X-Api-Version is a 400 even without credentials). */
  precheck?: (ctx: RequestContext) => void;
  handle: (ctx: RequestContext) => void;
  /** Answer every method, not only GET and HEAD. */
  anyMethod?: boolean;
}

/** The liar serves this many rows fewer than it declares. */
const LIAR_SHORTFALL = 100;

/** Rows `offset`… of a view, at most `limit`, none at or past `end`. */
export function page(view: View, offset: number, limit: number, end = view.length) {
  return view.rows.slice(Math.min(offset, end), Math.min(offset + limit, end));
}

/** The offset family's optional `updated_since` filter: inclusive, any ISO-8601 timestamp Date.parse reads. */
function filtered(ctx: RequestContext): View {
  const raw = ctx.url.searchParams.get('updated_since');
  if (raw === null || raw === '') return ctx.data.all();
  const since = Date.parse(raw);
  if (Number.isNaN(since)) throw new HttpError(400, 'bad_request', `updated_since must be an ISO-8601 timestamp, got '${raw}'`);
  return ctx.data.updatedSince(since);
}

function offsetPage(ctx: RequestContext, lie = false): void {
  const q = ctx.url.searchParams;
  const limit = pageSizeParam(q.get('limit'), 'limit');
  const offset = intParam(q.get('offset'), 'offset', 0);
  const view = filtered(ctx);
  const served = lie ? countUpTo(view, ctx.data.size - LIAR_SHORTFALL) : view.length;
  sendJson(ctx.res, 200, { data: page(view, offset, limit, served), total: view.length, offset, limit });
}

const spring: Dialect = {
  auth: 'basic',
  handle(ctx) {
    const q = ctx.url.searchParams;
    const size = pageSizeParam(q.get('size'), 'size');
    const number = intParam(q.get('page'), 'page', 0);
    const view = ctx.data.all();
    const content = page(view, number * size, size);
    const totalPages = Math.ceil(view.length / size);
    sendJson(ctx.res, 200, {
      content,
      totalPages,
      totalElements: view.length,
      number,
      size,
      numberOfElements: content.length,
      first: number === 0,
      last: number >= totalPages - 1,
      empty: content.length === 0,
    });
  },
};

/** Stripe-style: `starting_after` names the id of the last row already read. */
const stripe: Dialect = {
  auth: 'bearer',
  handle(ctx) {
    const q = ctx.url.searchParams;
    const limit = pageSizeParam(q.get('limit'), 'limit');
    const after = q.get('starting_after');
    let start = 0;
    if (after !== null && after !== '') {
      const id = /^\d+$/.test(after) ? Number(after) : Number.NaN;
      if (!(id >= 1 && id <= ctx.data.size)) throw new HttpError(400, 'resource_missing', `No such partner: '${after}'`);
      start = id; // ids run 1…N in array order, so the row after id k sits at index k
    }
    const view = ctx.data.all();
    sendJson(ctx.res, 200, { object: 'list', url: '/v1/partners', data: page(view, start, limit), has_more: start + limit < view.length });
  },
};

/** Django REST framework LimitOffsetPagination: whole next/previous URLs in the body. */
const drf: Dialect = {
  auth: 'bearer',
  handle(ctx) {
    const q = ctx.url.searchParams;
    const limit = pageSizeParam(q.get('limit'), 'limit');
    const offset = intParam(q.get('offset'), 'offset', 0);
    const view = ctx.data.all();
    const next = offset + limit < view.length ? linkTo(ctx, { limit, offset: offset + limit }) : null;
    const previous = offset > 0 ? linkTo(ctx, { limit, offset: Math.max(0, offset - limit) }) : null;
    sendJson(ctx.res, 200, { count: view.length, next, previous, results: page(view, offset, limit) });
  },
};

/** A bare JSON array; the next page's absolute URL in `Link: <…>; rel="next"` until the last page. */
const link: Dialect = {
  auth: 'api-key',
  handle(ctx) {
    const q = ctx.url.searchParams;
    const limit = pageSizeParam(q.get('limit'), 'limit');
    const offset = intParam(q.get('offset'), 'offset', 0);
    const view = ctx.data.all();
    const headers: Record<string, string> = {};
    if (offset + limit < view.length) headers.Link = `<${linkTo(ctx, { limit, offset: offset + limit })}>; rel="next"`;
    sendJson(ctx.res, 200, page(view, offset, limit), headers);
  },
};

const offset: Dialect = { auth: 'basic', handle: (ctx) => offsetPage(ctx) };

const open: Dialect = { auth: 'none', handle: (ctx) => offsetPage(ctx) };

const hdr: Dialect = {
  auth: 'basic',
  precheck(ctx) {
    const version = ctx.req.headers['x-api-version'];
    if (typeof version !== 'string' || version.trim() === '') throw new HttpError(400, 'bad_request', 'header X-Api-Version is required');
  },
  handle: (ctx) => offsetPage(ctx),
};

/** Declares the whole dataset in `total` but never serves the last 100 rows. */
const liar: Dialect = { auth: 'none', handle: (ctx) => offsetPage(ctx, true) };

const down: Dialect = {
  auth: 'none',
  anyMethod: true,
  handle(ctx) {
    sendJson(ctx.res, 500, { error: 'internal_error', message: 'the demo source is down (this dialect always fails)' });
  },
};

/** Per distinct query string: first 429, then 503 (both Retry-After: 0), then 200 until /admin/reset. */
const flaky: Dialect = {
  auth: 'none',
  handle(ctx) {
    const key = `rest:${ctx.url.search}`;
    const seen = (ctx.flaky.get(key) ?? 0) + 1;
    ctx.flaky.set(key, seen);
    if (seen === 1) {
      sendJson(ctx.res, 429, { error: 'rate_limited', message: 'too many requests (flaky dialect, first attempt)' }, { 'Retry-After': '0' });
    } else if (seen === 2) {
      sendJson(ctx.res, 503, { error: 'unavailable', message: 'service unavailable (flaky dialect, second attempt)' }, { 'Retry-After': '0' });
    } else {
      offsetPage(ctx);
    }
  },
};

export const DIALECTS: Readonly<Record<string, Dialect>> = {
  spring,
  v1: stripe,
  drf,
  link,
  offset,
  open,
  hdr,
  liar,
  down,
  flaky,
};
