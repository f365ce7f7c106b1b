import { queryCount, queryItems } from '../jsonpath.js';
import type { Pagination } from '../types.js';
import type { PaginationStrategy } from './types.js';

/**
 * Offset and limit: `offset_param` from `start_offset` (default 0), `limit_param` = `limit`. The
 * offset advances by the records actually received (a source that caps the limit loses nothing).
 * Stops on an empty page; when the source declares a total (total_path), once the records read
 * reach it (the offset less start_offset: a source counting from 1 has its last record at offset
 * total); otherwise on a short page: fewer records than `limit` and than the pages before it. A
 * first page is never taken for short (a source that caps the limit, asked 1000 and serving 500 at
 * most, answers every page short of `limit`): the next page is asked for, and an empty one ends.
 */
export function offsetPagination(p: Extract<Pagination, { kind: 'offset' }>): PaginationStrategy {
  const start = p.start_offset ?? 0;
  let offset = start;
  /** The most records a page of this read has held so far (0 before the first). */
  let largest = 0;
  const position = (n: number) => ({ params: { [p.offset_param]: String(n), [p.limit_param]: String(p.limit) }, describe: `offset ${n}` });
  return {
    kind: 'offset',
    hasTotalPath: p.total_path !== undefined,
    first: () => position(offset),
    items: (body) => queryItems(body, p.response_path),
    declaredTotal: (body) => (p.total_path ? queryCount(body, p.total_path) : undefined),
    next({ body, items }) {
      if (items.length === 0) return undefined;
      const before = largest;
      largest = Math.max(largest, items.length);
      offset += items.length;
      const total = p.total_path ? queryCount(body, p.total_path) : undefined;
      if (total !== undefined) {
        if (offset - start >= total) return undefined;
      } else if (before > 0 && items.length < Math.min(p.limit, before)) {
        return undefined;
      }
      return position(offset);
    },
    saved: () => ({ offset, largest }),
    resume({ state }) {
      offset = Number(state?.offset);
      largest = Number(state?.largest);
      return position(offset);
    },
  };
}
