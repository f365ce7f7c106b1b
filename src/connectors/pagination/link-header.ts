import { PaginationError } from '../engine/errors.js';
import { queryItems } from '../jsonpath.js';
import type { Pagination } from '../types.js';
import { type PaginationStrategy, PositionMemory } from './types.js';

/**
 * RFC 5988 / 8288 `Link` header: follows the link whose rel includes `next` (absolute or relative
 * to the request URL) until there is none. Sends no page size. A link to a page this read has
 * already read (the page just read, or one pages ago) fails the read.
 */
export function linkHeaderPagination(p: Extract<Pagination, { kind: 'link-header' }>): PaginationStrategy {
  const seen = new PositionMemory();
  return {
    kind: 'link-header',
    hasTotalPath: false,
    first: () => ({ describe: 'the first page' }),
    items: (body) => queryItems(body, p.response_path),
    declaredTotal: () => undefined,
    next({ url, headers }) {
      seen.pageRead(url.href);
      const next = parseLinkHeader(headers.link).get('next');
      if (!next) return undefined;
      let resolved: URL;
      try {
        resolved = new URL(next, url);
      } catch {
        throw new PaginationError('the next link in the Link header (rel="next") is not a URL');
      }
      const pages = seen.cameBack(resolved.href);
      if (pages === 1) throw new PaginationError('pagination did not advance: the Link header points rel="next" at the page just read');
      if (pages !== undefined) throw new PaginationError(`pagination did not advance: the Link header's rel="next" came back after ${pages} pages`);
      return { url: resolved.href, describe: 'the next link' };
    },
  };
}

/** The links of a `Link` header (one value or several) by rel; the first link of each rel wins. */
export function parseLinkHeader(value: string | string[] | undefined): Map<string, string> {
  const links = new Map<string, string>();
  if (value === undefined) return links;
  const text = Array.isArray(value) ? value.join(', ') : value;
  for (const match of text.matchAll(/<([^>]*)>([^<]*)/g)) {
    const target = match[1]!.trim();
    const params = match[2] ?? '';
    const rel = /;\s*rel\s*=\s*(?:"([^"]*)"|([^\s;,]+))/i.exec(params);
    if (!rel) continue;
    for (const name of (rel[1] ?? rel[2] ?? '').toLowerCase().split(/\s+/)) {
      if (name && !links.has(name)) links.set(name, target);
    }
  }
  return links;
}
