/**
 * The text of a one-dimensional PostgreSQL array parameter (`$1::bigint[]`, `$2::text[]`, …) made in
 * one pass. node-postgres turns a JS array into the same literal itself, but element by element
 * through its general conversion (every element a quoted string, two regular-expression replaces
 * each): for the statements that carry hundreds of rows as arrays on a hot path (the webhook
 * journal's batches, several arrays per row), that was a visible share of the hub's CPU per row.
 *
 * Numbers are written as they are, booleans as `t`/`f`, null and undefined as `NULL`, and strings
 * quoted with `\` and `"` escaped (so `NULL`, empty strings, braces, commas and spaces stay
 * strings). Times go as strings (`toISOString()`). PostgreSQL reads it as node-postgres's literal of
 * the same array (src/db/array-literal.test.ts holds the two to each other).
 */
export type ArrayElement = string | number | boolean | null | undefined;

export function arrayLiteral(values: readonly ArrayElement[]): string {
  let out = '{';
  for (let i = 0; i < values.length; i++) {
    if (i > 0) out += ',';
    const value = values[i];
    if (value === null || value === undefined) out += 'NULL';
    else if (typeof value === 'string') out += quoted(value);
    else if (typeof value === 'boolean') out += value ? 't' : 'f';
    else out += String(value);
  }
  return `${out}}`;
}

/** A string element in double quotes, `\` and `"` escaped (each looked for first: most strings hold neither). */
function quoted(value: string): string {
  let text = value;
  if (text.includes('\\')) text = text.replaceAll('\\', '\\\\');
  if (text.includes('"')) text = text.replaceAll('"', '\\"');
  return `"${text}"`;
}
