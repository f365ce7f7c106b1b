import pg from 'pg';

/**
 * The snapshot of an export: `columns` of `relation` (a subquery whose columns are text), every
 * row once, sorted by `order`, then by the other columns of `columns` in their declared order, each
 * compared byte-wise (`COLLATE "C"`, which compares the UTF-8 bytes) with NULLs last. Sorting on
 * every column makes the order total: two rows that tie on all of them are the same bytes, so the
 * same data always gives the same file.
 *
 * The result columns are named by position (`c1`, `c2`, …): the file's header comes from
 * `columns`, and a reader of the rows is spared names PostgreSQL truncates (63 bytes) or that a
 * JavaScript object would reorder (`"1"`).
 */
export function snapshotSql(relation: string, columns: string[], order: string[]): string {
  if (columns.length === 0) throw new Error('an export needs at least one column');
  if (new Set(columns).size !== columns.length) throw new Error('export columns must be unique');
  if (new Set(order).size !== order.length) throw new Error('export order columns must be unique');
  const unknown = order.find((c) => !columns.includes(c));
  if (unknown !== undefined) throw new Error(`order column ${JSON.stringify(unknown)} is not one of the export's columns`);
  const sortKeys = [...order, ...columns.filter((c) => !order.includes(c))];
  const select = columns.map((c, i) => `e.${pg.escapeIdentifier(c)} as c${i + 1}`).join(', ');
  const orderBy = sortKeys.map((c) => `e.${pg.escapeIdentifier(c)} collate "C" nulls last`).join(', ');
  return `select ${select} from (${relation}) as e order by ${orderBy}`;
}

/**
 * Session settings, local to the transaction, that fix how PostgreSQL writes values as text, so a
 * relation that casts a typed value to text gives the same text whatever the role's, database's
 * or server's defaults are:
 * - `client_encoding` UTF8: the bytes leave the server as UTF-8, never converted.
 * - `TimeZone` UTC: timestamptz as `2024-01-02 03:04:05+00`, whatever zone the hub runs in.
 * - `DateStyle` ISO, YMD: dates and timestamps as `2024-01-02 03:04:05`, not `01/02/2024`.
 * - `IntervalStyle` postgres: intervals as `1 day 02:00:00`, PostgreSQL's own default, so an
 *   export shows an interval as the hub shows it everywhere else (not `P1DT2H`).
 * - `extra_float_digits` 1: the shortest text that reads back as the same float (the default
 *   since PostgreSQL 12; 0 or less would round).
 * - `bytea_output` hex and `lc_monetary` C: bytea as `\x…`, and money as `$1,234.50` whatever the
 *   server's locale (PostgreSQL's own symbol and separators, used when the locale has none).
 */
export const SNAPSHOT_SETTINGS: ReadonlyArray<readonly [string, string]> = [
  ['client_encoding', 'UTF8'],
  ['TimeZone', 'UTC'],
  ['DateStyle', 'ISO, YMD'],
  ['IntervalStyle', 'postgres'],
  ['extra_float_digits', '1'],
  ['bytea_output', 'hex'],
  ['lc_monetary', 'C'],
];

/**
 * One statement applying SNAPSHOT_SETTINGS until the end of the transaction; it answers the
 * database's encoding (`server_encoding`), which must be UTF8 for `COLLATE "C"` to compare UTF-8 bytes.
 */
export function snapshotSettingsSql(): string {
  const sets = SNAPSHOT_SETTINGS.map(([name, value]) => `set_config(${pg.escapeLiteral(name)}, ${pg.escapeLiteral(value)}, true)`);
  return `select ${sets.join(', ')}, current_setting('server_encoding') as server_encoding`;
}
