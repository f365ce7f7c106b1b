import { createHash } from 'node:crypto';
import type { PaginationKind } from '../types.js';
import { ExactNumber } from '../engine/exact-json.js';

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
  /**
   * What the strategy keeps beyond the next position (a page count, the largest page so far), as JSON,
   * for a read cut by the page budget that a later run resumes (`resume`). Undefined: nothing.
   */
  saved?(): Record<string, unknown> | undefined;
  /**
   * Starts the read at a position an earlier read handed on (its next position and `saved()`), in
   * place of `first()`: answers the position to request first.
   */
  resume?(point: ResumePoint): Position;
}

/** Where a read cut by the page budget stopped: the position it would have requested next, and the strategy's state then. */
export interface ResumePoint {
  position: Position;
  state?: Record<string, unknown>;
}

/** JSON-ish rendering of a cursor value for messages. */
export function describeValue(value: unknown): string {
  const text = typeof value === 'string' ? JSON.stringify(value) : String(value);
  return text.length > 120 ? `${text.slice(0, 120)}…` : text;
}

/**
 * A usable cursor: a non-empty string, or a finite number/bigint/boolean, or a number past a
 * double's range (an ExactNumber, sent back as written). null, undefined, '' and objects are none.
 */
export function isCursor(value: unknown): value is string | number | bigint | boolean | ExactNumber {
  if (typeof value === 'string') return value !== '';
  if (typeof value === 'number') return Number.isFinite(value);
  return typeof value === 'boolean' || typeof value === 'bigint' || value instanceof ExactNumber;
}

/** Positions longer than this are remembered as their SHA-256, so a read's memory stays small. */
const KEPT_WHOLE = 64;

/**
 * The positions one read has requested (cursor values, next URLs), by the page that read them, so
 * that a source cycling back to any of them, however far back, fails the read instead of looping
 * to the page cap. At most two entries per page (a link strategy notes the URL it read and the one
 * it follows), each a string of at most 64 characters.
 */
export class PositionMemory {
  readonly #pages = new Map<string, number>();
  #read = 0;

  /** One more page was read; `at` is the position it was read at, when the strategy knows it (a link strategy's URL). */
  pageRead(at?: string): void {
    this.#read += 1;
    if (at !== undefined) this.#note(at, this.#read);
  }

  /**
   * The next page would read `position`: undefined when no page of this read has, and it is
   * noted for the next page; otherwise how many pages ago it was read (1: the page just read).
   */
  cameBack(position: string): number | undefined {
    const earlier = this.#pages.get(keyOf(position));
    if (earlier !== undefined) return this.#read + 1 - earlier;
    this.#note(position, this.#read + 1);
    return undefined;
  }

  #note(position: string, page: number): void {
    const key = keyOf(position);
    if (!this.#pages.has(key)) this.#pages.set(key, page);
  }
}

function keyOf(position: string): string {
  return position.length > KEPT_WHOLE ? `sha256:${createHash('sha256').update(position).digest('base64')}` : position;
}

/** The message of a cursor that came back `pages` pages after it was first read. */
export function cursorCameBack(cursor: unknown, pages: number, cursorPath: string): string {
  return pages === 1
    ? `pagination did not advance: the source returned cursor ${describeValue(cursor)} twice in a row (cursor_path ${cursorPath})`
    : `pagination did not advance: cursor ${describeValue(cursor)} came back after ${pages} pages (cursor_path ${cursorPath})`;
}

/**
 * The message of a source whose has_more_path reads true but whose cursor_path holds no usable
 * cursor: the read cannot go on, and ending it would pass a short extract off as complete.
 */
export function noCursorMessage(hasMorePath: string, cursorPath: string, found: unknown): string {
  const what = found === undefined ? '' : found !== null && typeof found === 'object' ? ' (not a scalar)' : ` (${describeValue(found)})`;
  return `pagination cannot continue: has_more_path ${hasMorePath} reads true (more pages) but cursor_path ${cursorPath} gives no cursor${what}`;
}
