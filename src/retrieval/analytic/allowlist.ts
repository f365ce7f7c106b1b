/**
 * What a generated SELECT may call, cast to and compare with. Everything here is an allowlist:
 * a function, operator, type or SQL value function that is not named is refused by guard 2, so a
 * new PostgreSQL function with side effects (or one that reads files, sleeps, or opens
 * connections) is refused without anyone having to think of it.
 */

/** Aggregates usable with GROUP BY (and as window aggregates). */
export const AGGREGATES: ReadonlySet<string> = new Set([
  'count', 'sum', 'avg', 'min', 'max', 'bool_and', 'bool_or', 'every', 'string_agg', 'array_agg',
  'stddev', 'stddev_pop', 'stddev_samp', 'variance', 'var_pop', 'var_samp', 'percentile_cont', 'percentile_disc', 'mode',
]);

/** Window functions (with OVER). */
export const WINDOW_FUNCTIONS: ReadonlySet<string> = new Set([
  'row_number', 'rank', 'dense_rank', 'percent_rank', 'cume_dist', 'ntile', 'lag', 'lead', 'first_value', 'last_value', 'nth_value',
]);

/**
 * Immutable or stable scalar functions without side effects and with output bounded by their
 * input (no repeat/lpad/rpad: one call could build a gigabyte string; no replace: its output is its
 * input's length times the replacement's, so eight nested calls on a 10-character literal make 10^9).
 */
export const SCALAR_FUNCTIONS: ReadonlySet<string> = new Set([
  // text
  'lower', 'upper', 'initcap', 'length', 'char_length', 'character_length', 'btrim', 'ltrim', 'rtrim', 'substring', 'substr',
  'left', 'right', 'concat', 'concat_ws', 'position', 'strpos', 'split_part', 'starts_with', 'similar_to_escape', 'like_escape',
  // numbers
  'abs', 'round', 'ceil', 'ceiling', 'floor', 'trunc', 'sign', 'mod', 'power', 'sqrt', 'div',
  // dates and times
  'date_trunc', 'date_part', 'extract', 'age', 'now', 'make_date', 'to_char', 'timezone', 'date_bin', 'justify_days', 'justify_hours',
]);

/** Every function name a generated SELECT may call (unqualified or `pg_catalog.`-qualified). */
export const ALLOWED_FUNCTIONS: ReadonlySet<string> = new Set([...AGGREGATES, ...WINDOW_FUNCTIONS, ...SCALAR_FUNCTIONS]);

/** Operators on scalars: comparison, arithmetic, concatenation, LIKE (`~~`) and regular expressions (`~`). */
export const ALLOWED_OPERATORS: ReadonlySet<string> = new Set([
  '=', '<>', '<', '>', '<=', '>=', '+', '-', '*', '/', '%', '^', '||', '~~', '!~~', '~~*', '!~~*', '~', '~*', '!~', '!~*',
]);

/** Target types of casts (as the parser names them): numbers, text, booleans, dates and times. Never reg* or oid. */
export const ALLOWED_CAST_TYPES: ReadonlySet<string> = new Set([
  'int2', 'int4', 'int8', 'int', 'integer', 'smallint', 'bigint', 'numeric', 'decimal', 'float4', 'float8', 'real',
  'text', 'varchar', 'bpchar', 'char', 'bool', 'boolean', 'date', 'timestamp', 'timestamptz', 'time', 'timetz', 'interval',
]);

/** SQL value functions of date and time; CURRENT_USER, CURRENT_SCHEMA, CURRENT_CATALOG and the like are refused. */
export const ALLOWED_SQL_VALUE_FUNCTIONS: ReadonlySet<string> = new Set([
  'SVFOP_CURRENT_DATE', 'SVFOP_CURRENT_TIME', 'SVFOP_CURRENT_TIME_N', 'SVFOP_CURRENT_TIMESTAMP', 'SVFOP_CURRENT_TIMESTAMP_N',
  'SVFOP_LOCALTIME', 'SVFOP_LOCALTIME_N', 'SVFOP_LOCALTIMESTAMP', 'SVFOP_LOCALTIMESTAMP_N',
]);
