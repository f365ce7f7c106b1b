/**
 * Keyset paging of the API's growing lists (runs, dead letters, deliveries, export runs, the inbox, the audit trail):
 * a page is the first `limit` items of a list in its order that come after an item's sort key, read
 * in the caller's tenant transaction as every list is (row-level security), so a key says where to
 * start and never which rows may be read. A list reads one row past its limit: that row's presence
 * is what says more items follow, and the last item kept gives the key the next page starts after.
 */

/** A sort key: its values as text, in the order of the list's sort (each cast back in the statement). */
export type PageKey = readonly string[];

/** What a list is asked for: at most `limit` items, after the item whose sort key is `after`. */
export interface PageRequest {
  limit: number;
  after?: PageKey;
}

/** A page of a list: its items (an array, or the array's JSON text) and, when more items follow, the last one's sort key. */
export interface Page<T> {
  items: T;
  next?: PageKey;
}

/** A sort instant to the microsecond, as text a key holds (`2026-12-05T05:23:58.123456Z`): timestamptz's whole precision. */
export function keyInstantSql(expression: string): string {
  return `to_char((${expression}) at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;
}

/** The page of rows read one past `limit` (in the list's order): the first `limit`, and the last one's key when more follow. */
export function pageOfRows<R, T>(rows: readonly R[], limit: number, key: (row: R) => PageKey, item: (row: R) => T): Page<T[]> {
  const kept = rows.slice(0, limit);
  return { items: kept.map(item), ...(rows.length > limit && kept.length ? { next: key(kept[kept.length - 1]!) } : {}) };
}

/**
 * The text of a statement built per call, made once per `shape` (what it is built from: a few short
 * pieces of SQL, never a value) and then the same string each time. A list's text is a kilobyte or two
 * and a named statement is found by it (`statementName`, and node-postgres's own check): a text made
 * anew per request is hashed and compared whole each time (≈ 4 µs a list in the hub's process), the
 * same string only once. `texts` holds one entry per shape: a list's shapes are few (its filters,
 * first page or not, a limit step).
 */
export function textOfShape(texts: Map<string, string>, shape: string, build: () => string): string {
  let text = texts.get(shape);
  if (text === undefined) {
    text = build();
    texts.set(shape, text);
  }
  return text;
}

/**
 * A statement answering one row with `body` (the JSON text of the page's items) and `next` (the
 * last item's sort key as a text array when more follow, else null), from `rows`: a select of the
 * list's rows in its order, already limited to at least one past `limit` (a parameter's placeholder,
 * or an integer). `order` orders those rows by their own columns (unqualified), `record` makes one
 * answer record (a select list over the row, aliased `alias`), `key` the sort key (an array
 * expression over the row's unqualified columns). The records are serialised by the database as
 * `jsonArraySql`'s are (src/db/json-text.ts).
 *
 * One pass over the rows: an aggregate over them numbered in order makes the body (the first `limit`)
 * and the key (of the `limit`-th, when a row follows). A CTE read three times (for the body, the key
 * and whether a row follows) cost PostgreSQL about a fifth more per list, and kept every column of
 * the rows (a delivery's body included) where the planner now drops those the answer does not read.
 * The key is read from its row alone (`k`), so its unqualified columns never meet the record's.
 */
export function jsonPageSql(page: { rows: string; order: string; limit: string; record: string; alias: string; key: string }): string {
  const { rows, order, limit, record, alias, key } = page;
  return `select coalesce('[' || string_agg(row_to_json(r)::text, ',' order by n.page_ord) filter (where n.page_ord <= ${limit}) || ']', '[]') as body,
           case when max(n.page_ord) > ${limit} then max(case when n.page_ord = ${limit} then (select ${key} from (select n.*) k) end) end as next
      from (select p.*, row_number() over (order by ${order}) as page_ord from (${rows}) p) n
      cross join lateral (select ${record} from (select n.*) as ${alias}) r`;
}
