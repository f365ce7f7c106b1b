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
        resolved = new URL(headerBytesAsPercent(next), url);
      } catch {
        throw new PaginationError('the next link in the Link header (rel="next") is not a URL');
      }
      const pages = seen.cameBack(resolved.href);
      if (pages === 1) throw new PaginationError('pagination did not advance: the Link header points rel="next" at the page just read');
      if (pages !== undefined) throw new PaginationError(`pagination did not advance: the Link header's rel="next" came back after ${pages} pages`);
      return { url: resolved.href, describe: 'the next link' };
    },
    resume({ position }) {
      if (position.url !== undefined) seen.cameBack(position.url);
      return position;
    },
  };
}

/**
 * A header's link with each byte beyond ASCII as `%XY`: header values arrive with each byte one
 * character (Latin-1), so the URL parser would encode `é` sent in UTF-8 (C3 A9) as four bytes
 * (`%C3%83%C2%A9`) and a Latin-1 `é` (E9) as two, and request a page the source never linked to.
 */
function headerBytesAsPercent(link: string): string {
  return link.replace(/[\u0080-\u00ff]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/** A parameter's name, and a value that is not quoted (a token), read where the parser stands. */
const PARAM_NAME = /[^\s;,="]*/y;
const TOKEN_VALUE = /[^\s;,]*/y;

/**
 * The links of a `Link` header (one value or several) by rel; the first link of each rel wins. Read as RFC 8288
 * writes it: `<target>` then `; name=value` parameters, a value a token or a quoted string (`\\` escapes), links
 * apart by commas. A `<`, `>`, `,`, `;` or `rel=` inside a quoted value is text of it (`title="a<b"`), never a
 * link or a parameter; of a `rel` given twice in one link the first counts (RFC 8288 3.3).
 */
export function parseLinkHeader(value: string | string[] | undefined): Map<string, string> {
  const links = new Map<string, string>();
  if (value === undefined) return links;
  const text = Array.isArray(value) ? value.join(', ') : value;
  let at = 0;
  const skipSpace = () => {
    while (at < text.length && (text[at] === ' ' || text[at] === '\t')) at++;
  };
  /** Past the rest of a link that does not parse: to the next comma outside a quoted string, or the end. */
  const skipLink = () => {
    while (at < text.length && text[at] !== ',') {
      if (text[at] === '"') quoted();
      else at++;
    }
  };
  /** The text `pattern` (sticky) matches at `at`, which then ends past it. */
  const word = (pattern: RegExp): string => {
    pattern.lastIndex = at;
    const found = pattern.exec(text)?.[0] ?? '';
    at += found.length;
    return found;
  };
  /** A quoted string from its opening quote; `at` ends past its closing one (or at the end of an unclosed one). */
  function quoted(): string {
    let out = '';
    for (at++; at < text.length && text[at] !== '"'; at++) {
      if (text[at] === '\\' && at + 1 < text.length) at++;
      out += text[at];
    }
    at++;
    return out;
  }
  while (at < text.length) {
    skipSpace();
    if (text[at] === ',') {
      at++;
      continue;
    }
    if (text[at] !== '<') {
      skipLink();
      continue;
    }
    const close = text.indexOf('>', at);
    if (close < 0) break;
    const target = text.slice(at + 1, close).trim();
    at = close + 1;
    let rel: string | undefined;
    for (;;) {
      skipSpace();
      if (text[at] !== ';') break;
      at++;
      skipSpace();
      const name = word(PARAM_NAME);
      skipSpace();
      let param = '';
      if (text[at] === '=') {
        at++;
        skipSpace();
        if (text[at] === '"') param = quoted();
        else param = word(TOKEN_VALUE);
      }
      if (name.toLowerCase() === 'rel' && rel === undefined) rel = param;
    }
    // Anything else before the next comma is not of this grammar: the link is read as far as it went.
    skipLink();
    for (const name of (rel ?? '').toLowerCase().split(/\s+/)) {
      if (name && !links.has(name)) links.set(name, target);
    }
  }
  return links;
}
