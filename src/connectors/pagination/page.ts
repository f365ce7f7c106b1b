import { queryCount, queryItems } from '../jsonpath.js';
import type { Pagination } from '../types.js';
import type { PaginationStrategy } from './types.js';

/**
 * Page numbers: `page_param` from `start_page`, `size_param` = `size` on every request. Stops when
 * the pages read reach the count at total_pages_path (Spring `$.totalPages`), or on an empty page.
 */
export function pagePagination(p: Extract<Pagination, { kind: 'page' }>): PaginationStrategy {
  let page = p.start_page;
  let read = 0;
  const position = (n: number) => ({ params: { [p.page_param]: String(n), [p.size_param]: String(p.size) }, describe: `page ${n}` });
  return {
    kind: 'page',
    hasTotalPath: p.total_path !== undefined,
    first: () => position(page),
    items: (body) => queryItems(body, p.response_path),
    declaredTotal: (body) => (p.total_path ? queryCount(body, p.total_path) : undefined),
    next({ body, items }) {
      read += 1;
      if (items.length === 0) return undefined;
      if (p.total_pages_path) {
        const totalPages = queryCount(body, p.total_pages_path);
        if (totalPages !== undefined && read >= totalPages) return undefined;
      }
      page += 1;
      return position(page);
    },
    saved: () => ({ page, read }),
    resume({ state }) {
      page = Number(state?.page);
      read = Number(state?.read);
      return position(page);
    },
  };
}
