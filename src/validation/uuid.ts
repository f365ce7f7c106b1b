/**
 * A UUID as the hub writes it (8-4-4-4-12 hex digits, either case). An id taken from a path or a
 * query is checked with this before it reaches a `uuid` column: PostgreSQL also reads other forms
 * (braces, no hyphens) and refuses a text of hyphens alone with a database error, so an id of any
 * other shape is simply unknown (a 404, or nothing listed), whatever its length.
 */
export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export const isUuid = (text: string): boolean => UUID.test(text);
