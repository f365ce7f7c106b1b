import type { SoapAnswer } from '../soap/envelope.js';
import type { Pagination, SoapCall } from '../types.js';
import type { PaginationStrategy, Position } from './types.js';

/**
 * SOAP paging: `{{start_row}}` from `start_row` (0-based), growing by `page_size` (what the request
 * asked for, as the services' StartRowNum expects), `{{page_size}}` = `page_size`. With a stop flag
 * the read ends when the flag's trimmed text equals `when` (case-insensitive); without one (or when
 * an answer lacks the flag) on a short page. An empty page always ends it, so a service that never
 * says "last" cannot loop.
 */
export function soapPagination(p: Extract<Pagination, { kind: 'soap' }>, stop: SoapCall['stop']): PaginationStrategy {
  let startRow = p.start_row;
  const position = (row: number): Position => ({ soap: { pageSize: p.page_size, startRow: row }, describe: `start_row ${row}` });
  const answer = (body: unknown) => body as SoapAnswer;
  return {
    kind: 'soap',
    hasTotalPath: false,
    first: () => position(startRow),
    items: (body) => answer(body)?.records ?? [],
    declaredTotal: () => undefined,
    next({ body, items }) {
      if (items.length === 0) return undefined;
      const flag = answer(body)?.flag;
      if (stop && flag !== undefined) {
        if (flag.toLowerCase() === stop.when.trim().toLowerCase()) return undefined;
      } else if (items.length < p.page_size) return undefined;
      startRow += p.page_size;
      return position(startRow);
    },
    saved: () => ({ startRow }),
    resume({ state }) {
      startRow = Number(state?.startRow);
      return position(startRow);
    },
  };
}
