/**
 * Lists the API answers as the database serialises them. A list read as rows costs the hub's event
 * loop the parse of every field of every row, an object per row and per record, and then
 * `JSON.stringify` of them all; read as one JSON text made by PostgreSQL (`row_to_json`, in C), it
 * costs the parse of one text field, and the text is the answer's body as it is. On the API's list
 * routes the hub's process is what a burst of requests waits for, PostgreSQL runs beside it in
 * processes of its own (docs/performance.md, "What limits the API").
 *
 * The text is what `JSON.stringify` gives for the same rows read as objects, byte for byte, as long
 * as every column is already what the answer holds (named as its field, times as the text
 * `isoTimestampSql` makes, whole numbers within 2^53): PostgreSQL escapes the same characters the
 * same way (`\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t`, `\u00XX` for the other control characters,
 * nothing else) and writes no whitespace. src/db/json-text.test.ts holds the two to each other.
 */
export class JsonText {
  constructor(readonly text: string) {}
}

/**
 * A statement answering one row with one column, `body`: the rows of `select` (each column named as
 * the answer's field) as a JSON array, in the order `orderBy` gives over those output columns
 * (`r.<column>`; an aggregate's input order is not otherwise guaranteed), `[]` for none. With
 * `limit` (a parameter's placeholder such as `$2`), at most that many of them, the first in that
 * order.
 */
export function jsonArraySql(select: string, orderBy: string, limit?: string): string {
  const rows = limit === undefined ? `(${select}) r` : `(select * from (${select}) r order by ${orderBy} limit ${limit}) r`;
  return `select coalesce('[' || string_agg(row_to_json(r)::text, ',' order by ${orderBy}) || ']', '[]') as body from ${rows}`;
}
