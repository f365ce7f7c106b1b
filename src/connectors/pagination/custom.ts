import { PaginationError } from '../engine/errors.js';
import { queryItems } from '../jsonpath.js';
import type { Pagination } from '../types.js';
import type { PaginationStrategy } from './types.js';

const CUSTOM_PAGINATION_MESSAGE =
  'pagination kind custom cannot fetch a second page (it is accepted at apply but not implemented); declare one of page, offset, cursor, link-header, body-link or relay';

/**
 * `custom`: applies cleanly and reads its first page, then fails when a second page is needed
 * (spec 3: "do not use"). A first page without records ends the read normally.
 */
export function customPagination(p: Extract<Pagination, { kind: 'custom' }>): PaginationStrategy {
  return {
    kind: 'custom',
    hasTotalPath: false,
    first: () => ({ describe: 'the first page' }),
    items: (body) => queryItems(body, p.response_path || '$'),
    declaredTotal: () => undefined,
    next({ items }) {
      if (items.length === 0) return undefined;
      throw new PaginationError(CUSTOM_PAGINATION_MESSAGE);
    },
  };
}
