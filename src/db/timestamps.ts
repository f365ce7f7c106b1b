/**
 * A timestamptz expression as the text JavaScript's `Date.prototype.toISOString` gives for the same
 * instant (`2026-11-28T21:37:16.633Z`: UTC, milliseconds, the microseconds cut off as node-postgres's
 * `Date` does), made by the server. For rows read often and returned as text (the API's lists):
 * the client then parses no date and formats none (parsing and formatting were ≈ 9 % of the hub's
 * busy time in a profile of the API bench's load). For instants of the years 1 to 9999 (every
 * timestamp the hub writes).
 */
export function isoTimestampSql(expression: string): string {
  return `to_char((${expression}) at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;
}
