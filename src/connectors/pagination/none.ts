import { queryItems } from '../jsonpath.js';
import type { Pagination } from '../types.js';
import type { PaginationStrategy } from './types.js';

/** No pagination: one request, records at response_path (default `$`). */
export function nonePagination(p: Extract<Pagination, { kind: 'none' }>): PaginationStrategy {
  return {
    kind: 'none',
    hasTotalPath: false,
    first: () => ({ describe: 'the only page' }),
    items: (body) => queryItems(body, p.response_path || '$'),
    declaredTotal: () => undefined,
    next: () => undefined,
  };
}
