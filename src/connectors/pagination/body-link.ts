import { PaginationError } from '../engine/errors.js';
import { withEscapedBytesAsPercent } from '../engine/utf8-escape.js';
import { ExactNumber } from '../engine/exact-json.js';
import { queryCount, queryFirst, queryItems } from '../jsonpath.js';
import type { Pagination } from '../types.js';
import { type PaginationStrategy, PositionMemory } from './types.js';

/**
 * A whole next URL in the body (DRF `$.next`): followed (absolute or relative to the request URL)
 * until link_path reads null, absent, empty or false. A JSON:API link object (`{"href": "…"}`) is its
 * href. Any other value there (a number, true, an object without href) is no URL and fails the read:
 * ending there would pass the first pages off as the whole extract. Sends no page size. A link to a
 * page this read has already read (the page just read, or one pages ago) fails the read.
 */
export function bodyLinkPagination(p: Extract<Pagination, { kind: 'body-link' }>): PaginationStrategy {
  const seen = new PositionMemory();
  return {
    kind: 'body-link',
    hasTotalPath: p.total_path !== undefined,
    first: () => ({ describe: 'the first page' }),
    items: (body) => queryItems(body, p.response_path),
    declaredTotal: (body) => (p.total_path ? queryCount(body, p.total_path) : undefined),
    next({ url, body }) {
      seen.pageRead(url.href);
      const next = linkOf(queryFirst(body, p.link_path));
      if (next === undefined || next === null || next === false || (typeof next === 'string' && next.trim() === '')) return undefined;
      if (typeof next !== 'string') throw new PaginationError(`the next link at ${p.link_path} is not a URL (${notUrl(next)})`);
      let resolved: URL;
      try {
        // A byte of the page that is not UTF-8 (engine/utf8-escape.ts) goes back as the source wrote it, not as U+FFFD.
        resolved = new URL(withEscapedBytesAsPercent(next.trim()), url);
      } catch {
        throw new PaginationError(`the next link at ${p.link_path} is not a URL`);
      }
      const pages = seen.cameBack(resolved.href);
      if (pages === 1) throw new PaginationError(`pagination did not advance: ${p.link_path} points at the page just read`);
      if (pages !== undefined) throw new PaginationError(`pagination did not advance: the next link at ${p.link_path} came back after ${pages} pages`);
      return { url: resolved.href, describe: 'the next link' };
    },
    resume({ position }) {
      if (position.url !== undefined) seen.cameBack(position.url);
      return position;
    },
  };
}

/** A JSON:API link object (`{"href": …, "meta": …}`) as its href; any other value as it is. */
function linkOf(value: unknown): unknown {
  return value !== null && typeof value === 'object' && !Array.isArray(value) && Object.hasOwn(value, 'href') ? (value as { href: unknown }).href : value;
}

/** What a next-link value that is no URL is, for the message (never its content: it may be large). */
function notUrl(value: unknown): string {
  if (typeof value === 'number' || typeof value === 'bigint' || value instanceof ExactNumber) return 'a number';
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'object' ? 'an object without href' : `a ${typeof value}`;
}
