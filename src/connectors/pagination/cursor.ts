import { PaginationError } from '../engine/errors.js';
import { queryFirst, queryFlag, queryItems } from '../jsonpath.js';
import type { Pagination } from '../types.js';
import { cursorCameBack, describeValue, isCursor, noCursorMessage, type PaginationStrategy, PositionMemory } from './types.js';

/**
 * Opaque cursor (Stripe style): the first request carries no cursor; each next one sends
 * `cursor_param` = the value at cursor_path (e.g. `$.data[-1:].id`). Stops when has_more_path reads
 * false, or there is no cursor and no has_more_path reads true (an empty page that says has_more
 * fails: it has no last item to take a cursor from). Sends no page size (put one in the endpoint
 * path's query string).
 * A cursor that comes back (the same one twice in a row, or one read pages ago) fails the read
 * instead of looping to the page cap, but for an empty page handing back the cursor it was read
 * with (a change feed at its end), which ends the read unless has_more_path reads true.
 */
export function cursorPagination(p: Extract<Pagination, { kind: 'cursor' }>): PaginationStrategy {
  const seen = new PositionMemory();
  return {
    kind: 'cursor',
    hasTotalPath: false,
    first: () => ({ describe: 'the first page' }),
    items: (body) => queryItems(body, p.response_path),
    declaredTotal: () => undefined,
    next({ body, items }) {
      seen.pageRead();
      const more = p.has_more_path ? queryFlag(body, p.has_more_path) : undefined;
      if (more === false) return undefined;
      const cursor = queryFirst(body, p.cursor_path);
      if (!isCursor(cursor)) {
        if (more && p.has_more_path) throw new PaginationError(noCursorMessage(p.has_more_path, p.cursor_path, cursor));
        return undefined;
      }
      const value = String(cursor);
      const pages = seen.cameBack(value);
      // An empty page that hands back the cursor it was asked with (a change feed's last_seq) is the end:
      // asking again would answer the same nothing. Unless has_more_path says there is more.
      if (pages === 1 && items.length === 0 && more === undefined) return undefined;
      if (pages !== undefined) throw new PaginationError(cursorCameBack(value, pages, p.cursor_path));
      return { params: { [p.cursor_param]: value }, describe: `cursor ${describeValue(value)}` };
    },
    resume({ position }) {
      // Noted as the cursor the first page is read with, as next() notes it.
      const value = position.params?.[p.cursor_param];
      if (value !== undefined) seen.cameBack(value);
      return position;
    },
  };
}
