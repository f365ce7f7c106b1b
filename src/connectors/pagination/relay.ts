import { PaginationError } from '../engine/errors.js';
import { queryFirst, queryFlag, queryItems } from '../jsonpath.js';
import type { Pagination } from '../types.js';
import { cursorCameBack, describeValue, isCursor, noCursorMessage, type PaginationStrategy, PositionMemory } from './types.js';

/**
 * GraphQL Relay: every request POSTs `{query, variables}`; the first carries the static variables
 * only, each next one adds `cursor_var` = the scalar at cursor_path (pageInfo.endCursor). Stops
 * when has_more_path (pageInfo.hasNextPage) reads false, or it is absent and there is no cursor; a
 * hasNextPage true without a cursor (endCursor null) fails the read. The page size lives
 * in the query text. A cursor that comes back (the same one twice in a row, or one read pages ago)
 * fails the read.
 */
export function relayPagination(p: Extract<Pagination, { kind: 'relay' }>): PaginationStrategy {
  const seen = new PositionMemory();
  return {
    kind: 'relay',
    hasTotalPath: false,
    first: () => ({ describe: 'the first page' }),
    items: (body) => queryItems(body, p.response_path),
    declaredTotal: () => undefined,
    next({ body, items }) {
      seen.pageRead();
      const more = queryFlag(body, p.has_more_path);
      if (more === false) return undefined;
      const cursor = queryFirst(body, p.cursor_path);
      if (!isCursor(cursor)) {
        if (more) throw new PaginationError(noCursorMessage(p.has_more_path, p.cursor_path, cursor));
        return undefined;
      }
      // Typed: the variable is sent as JSON, where 1 and "1" are different cursors.
      const pages = seen.cameBack(`${typeof cursor}:${String(cursor)}`);
      // An empty page handing back the cursor it was read with is the end, unless hasNextPage says more (cursor.ts).
      if (pages === 1 && items.length === 0 && more === undefined) return undefined;
      if (pages !== undefined) throw new PaginationError(cursorCameBack(cursor, pages, p.cursor_path));
      return { variables: { [p.cursor_var]: cursor }, describe: `cursor ${describeValue(cursor)} (variable $${p.cursor_var})` };
    },
    resume({ position }) {
      const cursor = position.variables?.[p.cursor_var];
      if (cursor !== undefined) seen.cameBack(`${typeof cursor}:${String(cursor)}`);
      return position;
    },
  };
}
