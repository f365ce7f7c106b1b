import type { PaginationKind } from '../types.js';

/** Where the next request points, as a strategy sees it. */
export interface Position {
  /** Query parameters set on the endpoint's URL (page, size, offset, limit, cursor). */
  params?: Record<string, string>;
  /** A whole next URL given by the source (link-header, body-link), resolved against the request URL. */
  url?: string;
  /** GraphQL variables set on top of the endpoint's static variables (relay). */
  variables?: Record<string, unknown>;
  /** SOAP paging values filled into the operation body (soap). */
  soap?: { pageSize: number; startRow: number };
  /** How messages name this position: `page 3`, `offset 150`, `cursor "abc"`, `next link <url>`. */
  describe: string;
}

/** One answered page as a strategy reads it. */
export interface PageResponse {
  /** The URL that was requested. */
  url: URL;
  headers: Record<string, string | string[] | undefined>;
  /** The parsed JSON body. */
  body: unknown;
  /** The records read at response_path. */
  items: unknown[];
}

/**
 * One pagination strategy, created fresh for each read (it may keep state: the page number, the
 * offset, the last cursor). The engine asks `first()`, sends, reads `items()` and
 * `declaredTotal()`, then asks `next()` until it answers undefined.
 */
export interface PaginationStrategy {
  readonly kind: PaginationKind;
  first(): Position;
  /** The records a body carries (response_path). */
  items(body: unknown): unknown[];
  /** The row count the source declares on this body (total_path), for strategies that have one. */
  declaredTotal(body: unknown): number | undefined;
  /** Whether this strategy declares a total_path at all. */
  readonly hasTotalPath: boolean;
  /** The next position, or undefined after the last page. May throw a PaginationError. */
  next(page: PageResponse): Position | undefined;
}

/** JSON-ish rendering of a cursor value for messages. */
export function describeValue(value: unknown): string {
  const text = typeof value === 'string' ? JSON.stringify(value) : String(value);
  return text.length > 120 ? `${text.slice(0, 120)}…` : text;
}

/** A usable cursor: a non-empty string, or a finite number/bigint/boolean. null, undefined, '' and objects are none. */
export function isCursor(value: unknown): value is string | number | boolean {
  if (typeof value === 'string') return value !== '';
  if (typeof value === 'number') return Number.isFinite(value);
  return typeof value === 'boolean' || typeof value === 'bigint';
}
