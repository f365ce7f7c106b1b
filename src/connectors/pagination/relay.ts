import { PaginationError } from '../engine/errors.js';
import { queryFirst, queryFlag, queryItems } from '../jsonpath.js';
import type { Pagination } from '../types.js';
import { describeValue, isCursor, type PaginationStrategy } from './types.js';

/**
 * GraphQL Relay: every request POSTs `{query, variables}`; the first carries the static variables
 * only, each next one adds `cursor_var` = the scalar at cursor_path (pageInfo.endCursor). Stops
 * when has_more_path (pageInfo.hasNextPage) reads false or the cursor is null. The page size lives
 * in the query text.
 */
export function relayPagination(p: Extract<Pagination, { kind: 'relay' }>): PaginationStrategy {
  let previous: unknown;
  return {
    kind: 'relay',
    hasTotalPath: false,
    first: () => ({ describe: 'the first page' }),
    items: (body) => queryItems(body, p.response_path),
    declaredTotal: () => undefined,
    next({ body }) {
      if (queryFlag(body, p.has_more_path) === false) return undefined;
      const cursor = queryFirst(body, p.cursor_path);
      if (!isCursor(cursor)) return undefined;
      if (cursor === previous) throw new PaginationError(`pagination did not advance: the source returned cursor ${describeValue(cursor)} twice in a row (cursor_path ${p.cursor_path})`);
      previous = cursor;
      return { variables: { [p.cursor_var]: cursor }, describe: `cursor ${describeValue(cursor)} (variable $${p.cursor_var})` };
    },
  };
}
