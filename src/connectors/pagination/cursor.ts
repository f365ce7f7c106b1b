import { PaginationError } from '../engine/errors.js';
import { queryFirst, queryFlag, queryItems } from '../jsonpath.js';
import type { Pagination } from '../types.js';
import { describeValue, isCursor, type PaginationStrategy } from './types.js';

/**
 * Opaque cursor (Stripe style): the first request carries no cursor; each next one sends
 * `cursor_param` = the value at cursor_path (e.g. `$.data[-1:].id`). Stops when has_more_path reads
 * false or there is no cursor. Sends no page size (put one in the endpoint path's query string).
 * A cursor that does not advance fails the read instead of looping to the page cap.
 */
export function cursorPagination(p: Extract<Pagination, { kind: 'cursor' }>): PaginationStrategy {
  let previous: string | undefined;
  return {
    kind: 'cursor',
    hasTotalPath: false,
    first: () => ({ describe: 'the first page' }),
    items: (body) => queryItems(body, p.response_path),
    declaredTotal: () => undefined,
    next({ body }) {
      if (p.has_more_path && queryFlag(body, p.has_more_path) === false) return undefined;
      const cursor = queryFirst(body, p.cursor_path);
      if (!isCursor(cursor)) return undefined;
      const value = String(cursor);
      if (value === previous) throw new PaginationError(`pagination did not advance: the source returned cursor ${describeValue(value)} twice in a row (cursor_path ${p.cursor_path})`);
      previous = value;
      return { params: { [p.cursor_param]: value }, describe: `cursor ${describeValue(value)}` };
    },
  };
}
