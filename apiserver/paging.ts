import type { Context } from 'koa';
import type { Page, PageKey, PageRequest } from '../src/db/keyset.js';
import { ValidationError } from '../src/errors.js';
import { isUuid } from '../src/validation/uuid.js';
import type { JsonSchema, ResponseDecl } from './route.js';

/**
 * `limit` and `before`, declared once for every list that grows (runs, dead letters, deliveries, the audit trail,
 * export runs, the inbox): `limit` is an integer from 1, and a value above the list's most, 200, is
 * either read as that most (up to 2^53 − 1 as every integer parameter: runs, dead letters,
 * deliveries, the audit trail, whose `limit` is documented as capped) or refused (`over: 'refuse'`: export runs and
 * the inbox, documented as 1 to 200, anything else a 400 naming `limit`), and keyset
 * paging: `before` takes the cursor the `Link` header of a page names, and the page after it holds
 * the items that follow that page's last one in the list's order (docs/architecture.md, "Lists:
 * `limit` and paging").
 */

/** The most items one page of a list answers: a larger `limit` reads as this. */
export const MAX_PAGE = 200;

/** What one value of a sort key is: an instant to the microsecond, a UUID, a bigint id, a boolean. */
export type KeyPart = 'instant' | 'uuid' | 'id' | 'flag';

const INSTANT = /^(\d{4})-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/;
const ID = /^[1-9]\d{0,18}$/;

/** Whether `text` is a value of that part as the hub writes it in a key (nothing else reaches a statement's cast). */
function validPart(part: KeyPart, text: string): boolean {
  switch (part) {
    case 'instant': {
      const year = INSTANT.exec(text)?.[1];
      if (year === undefined || Number(year) < 1) return false;
      // A day or time that does not exist (month 13, February 30) is not an instant.
      const millis = `${text.slice(0, 23)}Z`;
      const date = new Date(millis);
      return !Number.isNaN(date.getTime()) && date.toISOString() === millis;
    }
    case 'uuid':
      return isUuid(text);
    case 'id':
      return ID.test(text) && BigInt(text) <= 9223372036854775807n;
    case 'flag':
      return text === 'true' || text === 'false';
  }
}

const LINK_HEADER = {
  Link: {
    description: 'With more items after this page: `<PATH?…&before=CURSOR&limit=N>; rel="next"` (RFC 8288), the same filters and limit, the cursor of this page\'s last item',
    schema: { type: 'string' },
  },
};

type PageProperties = {
  readonly limit: { readonly type: 'integer'; readonly minimum: 1; readonly maximum: number; readonly default: number; readonly description: string };
  readonly before: { readonly type: 'string'; readonly maxLength: number; readonly description: string };
};

export interface Paging<F> {
  /** The route's query schema: the list's filters, `limit` and `before`. */
  readonly query: { readonly type: 'object'; readonly properties: F & PageProperties };
  /** The 200 of the list: a JSON array of `items`, and the `Link` header of the next page. */
  ok(description: string, items: JsonSchema): ResponseDecl;
  /** The page the query asks for: `limit` (its default, capped at the list's most) and the key `before` names (400 naming `before` when it names none of this list). */
  asked(query: { limit?: number; before?: string }): PageRequest;
  /**
   * The page's items, for the body; when more follow, the `Link` header of the next page: the
   * query's filters as given, the limit read, the cursor of the page's last item.
   */
  answer<T>(ctx: Context, query: Record<string, unknown>, page: Page<T>): T;
}

/** Every list paging() was declared for, its name and the parts of its key (the route fuzzer forges cursors of each). */
export const PAGED_LISTS: Array<{ readonly name: string; readonly key: readonly KeyPart[] }> = [];

/**
 * The paging of one list: `name` tells its cursors from any other list's, `key` says what its sort
 * key holds, `filters` are the list's other query parameters (the next page's link repeats them). A
 * cursor is the base64url text of the JSON array `[name, ...key]`: opaque to clients, and read back
 * only as exactly what the hub writes (anything else is a 400 naming `before`).
 */
export function paging<const F extends Record<string, JsonSchema> = Record<never, JsonSchema>>(list: {
  name: string;
  key: readonly KeyPart[];
  defaultLimit: number;
  filters?: F;
  /** A `limit` above MAX_PAGE: read as MAX_PAGE (`cap`, the default) or a 400 naming `limit` (`refuse`). */
  over?: 'cap' | 'refuse';
}): Paging<F> {
  if (!PAGED_LISTS.some((l) => l.name === list.name)) PAGED_LISTS.push({ name: list.name, key: list.key });
  const encode = (key: PageKey) => Buffer.from(JSON.stringify([list.name, ...key])).toString('base64url');
  const refused = () =>
    new ValidationError('before is not a cursor of this list', 'before', 'take the cursor from the Link header (rel="next") of a page of the same list, or leave before out for the first page');
  const decode = (cursor: string): PageKey => {
    if (!/^[A-Za-z0-9_-]+$/.test(cursor)) throw refused();
    let value: unknown;
    try {
      value = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
    } catch {
      throw refused();
    }
    if (!Array.isArray(value) || value.length !== list.key.length + 1 || value[0] !== list.name) throw refused();
    const key = value.slice(1);
    if (!key.every((text, i) => typeof text === 'string' && validPart(list.key[i]!, text)) || encode(key) !== cursor) throw refused();
    return key as string[];
  };
  const asked = (query: { limit?: number; before?: string }): PageRequest => {
    const limit = Math.min(query.limit ?? list.defaultLimit, MAX_PAGE);
    return query.before === undefined ? { limit } : { limit, after: decode(query.before) };
  };
  const filters = (list.filters ?? {}) as F;
  const properties: PageProperties = {
    limit: list.over === 'refuse'
      ? { type: 'integer', minimum: 1, maximum: MAX_PAGE, default: list.defaultLimit, description: `At most this many items: 1 to ${MAX_PAGE} (default ${list.defaultLimit})` }
      : {
          type: 'integer', minimum: 1, maximum: Number.MAX_SAFE_INTEGER, default: list.defaultLimit,
          description: `At most this many items (default ${list.defaultLimit}); a value above ${MAX_PAGE} reads as ${MAX_PAGE}`,
        },
    before: {
      type: 'string', maxLength: 1000,
      description: 'The next page: the cursor the `Link` header (rel="next") of the previous page names; anything else is a 400 naming `before`',
    },
  };
  return {
    query: { type: 'object', properties: { ...filters, ...properties } },
    ok: (description, items) => ({ description, schema: { type: 'array', items }, headers: LINK_HEADER }),
    asked,
    answer(ctx, query, page) {
      if (page.next) {
        const params = new URLSearchParams();
        for (const name of Object.keys(filters)) if (query[name] !== undefined) params.append(name, String(query[name]));
        params.append('before', encode(page.next));
        params.append('limit', String(asked({ limit: query.limit as number | undefined }).limit));
        // The path as requested; a character a URI reference between angle brackets may not hold, escaped.
        const path = ctx.path.replace(/[^A-Za-z0-9\-._~!$&'()*+,;=:@/%]/g, (c) => encodeURIComponent(c));
        ctx.set('Link', `<${path}?${params}>; rel="next"`);
      }
      return page.items;
    },
  };
}
