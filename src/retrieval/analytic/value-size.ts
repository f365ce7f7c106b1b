import { GuardRefusal } from './ast.js';

/**
 * How large a value an expression can make, as guard 2 bounds it. PostgreSQL bounds one value
 * (1 GB) but not what one statement holds, and it checks for the statement timeout between
 * operations, not inside one large copy: a value that grows at each level of CTEs (ten copies of
 * the previous level's, eight levels deep) took a server past its machine's memory. So a value may
 * grow only once, from values that did not grow:
 *
 * - level 0, bounded: a literal, a column of a card relation, what has a size of its own (a
 *   number, a date, to_char with a short literal pattern) or keeps its argument's (coalesce, CASE,
 *   min); also a column of a CTE, subquery or VALUES list that is bounded in turn. A number the
 *   query made may be long (NumberClass): it then weighs LONG_NUMBER_WEIGHT nodes and pieces;
 * - level 1, built: `||` (text, arrays, jsonb) over bounded or built values, or concat, concat_ws
 *   and to_char over bounded ones, at most MAX_PIECES of them: never more than MAX_PIECES times
 *   the largest value it reads;
 * - level 2, grown: an aggregate that gathers rows (string_agg, array_agg, ARRAY(subquery)),
 *   ARRAY[…], a cast of a built value (an array's text doubles its quotes), and any built or
 *   grown value read back through a CTE or subquery column, or a scalar subquery.
 *
 * A grown operand of a growing operation is refused, and so is a built one of an operation that
 * expands what it reads; a grown operand of an operation that copies it (lower, a cast, lag, LIKE)
 * is refused too, since every copy is kept until the row is done.
 */
export type Size = { level: 0; number?: NumberClass; chars?: number } | { level: 1; op: string; pieces: number; held: number } | { level: 2; what: string };

/**
 * What a bounded value may be as a number (level 0 only). `long`: a number the query made, or its
 * text, that may be LONG_NUMBER_CHARS characters long however short the query's text of it (a literal
 * `1e131000`, a product, a power, `round(x, 16383)`…); `composed`: text to_char made, which reads as
 * such a number once cast to numeric (`to_char(131000, '"1e"FM999999')`). Neither: a stored value, a
 * number whose digits lie within its literals' (exponents within ±MAX_SHORT_EXPONENT), or other text.
 */
export type NumberClass = 'long' | 'composed';

/** The most characters of a number's text: PostgreSQL's numeric holds 131,072 digits before the point and 16,383 after. */
export const LONG_NUMBER_CHARS = 147_457;

/**
 * A bounded value's `chars` (level 0): the most characters of the query's own text it may be, or copy
 * (a string literal's, a char(n) cast's n); stored values and what has a size of its own have none.
 * It weighs as many nodes and pieces as it has thousands of them, as a long number does: an
 * 18,000-character literal copied by upper 4,096 times (11 levels of CTEs, each reading the one below
 * twice: a query of 18,772 characters) took a backend to 235 MB when each copy counted one.
 */
export const CHARS_PER_WEIGHT = 1000;

/**
 * What a long number weighs, in expression nodes (MAX_INLINED_NODES) and in pieces held
 * (MAX_HELD_PIECES): its characters at 1,000 a node or a piece, so that the query's bounds on those
 * bound its numbers' texts as they bound values of a thousand characters.
 */
export const LONG_NUMBER_WEIGHT = Math.ceil(LONG_NUMBER_CHARS / CHARS_PER_WEIGHT);

/**
 * A number literal's (or a string's, which PostgreSQL may read as a number) exponent beyond which
 * the number is long: `1e1000` is 1,001 digits from 6 characters, `1e131000` 131,001.
 */
export const MAX_SHORT_EXPONENT = 1000;

/** The more number-like of two classes: long over composed over neither. */
export function numberOf(...classes: (NumberClass | undefined)[]): NumberClass | undefined {
  return classes.includes('long') ? 'long' : classes.includes('composed') ? 'composed' : undefined;
}

/**
 * The most bounded values one built value may join (`a || b || c` joins three). Each `||` keeps its
 * result until the row is done, so a chain of n pieces holds about n²/2 pieces' worth: 3,000
 * column references (the most a query's text can hold) would be 4.5 million copies of a stored value.
 */
export const MAX_PIECES = 100;

export const BOUNDED: Size = { level: 0 };

/**
 * What each allowlisted function does to the size of what it reads (guards.test.ts checks that
 * every allowed function is here; one that is not counts as growing). `gathers`: aggregates a
 * value over rows; `sums`: one value of its bounded arguments laid end to end; `expands`: can be larger than the sum of its arguments (a
 * to_char pattern, an escaped pattern); `keeps`: its output is one argument's value (an aggregate
 * picking one); `copies`: a new value no larger than its argument's (lag, lower, substr);
 * `own`: its output has a bounded size of its own (numbers, booleans, dates).
 */
export const FUNCTION_SIZES: Readonly<Record<string, 'gathers' | 'sums' | 'expands' | 'copies' | 'keeps' | 'own'>> = {
  string_agg: 'gathers',
  array_agg: 'gathers',
  concat: 'sums',
  concat_ws: 'sums',
  to_char: 'expands',
  similar_to_escape: 'expands',
  like_escape: 'expands',
  ...Object.fromEntries(
    ['min', 'max', 'mode', 'percentile_disc'].map((f) => [f, 'keeps' as const]),
  ),
  ...Object.fromEntries(
    [
      'lower', 'upper', 'initcap', 'btrim', 'ltrim', 'rtrim', 'substring', 'substr', 'left', 'right', 'split_part',
      // A window function's value is copied out of the row it was read from.
      'lag', 'lead', 'first_value', 'last_value', 'nth_value',
    ].map((f) => [f, 'copies' as const]),
  ),
  ...Object.fromEntries(
    [
      'count', 'sum', 'avg', 'bool_and', 'bool_or', 'every', 'stddev', 'stddev_pop', 'stddev_samp', 'variance', 'var_pop',
      'var_samp', 'percentile_cont', 'row_number', 'rank', 'dense_rank', 'percent_rank', 'cume_dist', 'ntile', 'length',
      'char_length', 'character_length', 'position', 'strpos', 'starts_with', 'abs', 'round', 'ceil', 'ceiling', 'floor',
      'trunc', 'sign', 'mod', 'power', 'sqrt', 'div', 'date_trunc', 'date_part', 'extract', 'age', 'now', 'make_date',
      'timezone', 'date_bin', 'justify_days', 'justify_hours',
    ].map((f) => [f, 'own' as const]),
  ),
};

/** The largest of several sizes (bounded when there are none); of bounded ones, the most number-like. */
export function largest(sizes: Size[]): Size {
  let out: Size = BOUNDED;
  for (const s of sizes) if (s.level > out.level) out = s;
  if (out.level !== 0) return out;
  return bounded(
    numberOf(...sizes.map((s) => (s.level === 0 ? s.number : undefined))),
    Math.max(0, ...sizes.map((s) => (s.level === 0 ? (s.chars ?? 0) : 0))),
  );
}

/** A bounded size of this number class and these characters of the query's text. */
export function bounded(number: NumberClass | undefined, chars: number | undefined): Size {
  return number === undefined && !chars ? BOUNDED : { level: 0, ...(number === undefined ? {} : { number }), ...(chars ? { chars } : {}) };
}

/** What a bounded value weighs as a node or a piece: LONG_NUMBER_WEIGHT for a long number, else its thousands of characters of the query's text, at least 1. */
export function weightOf(s: Size): number {
  if (s.level !== 0) return 1;
  return s.number === 'long' ? LONG_NUMBER_WEIGHT : Math.max(1, Math.ceil((s.chars ?? 0) / CHARS_PER_WEIGHT));
}

/**
 * The size of `op`'s result, `result`, once its operands are checked: a grown operand is refused,
 * and so is a summed one unless `summedOk` (`||` over `||`, string_agg over a concatenation).
 */
export function grow(op: string, operands: Size[], summedOk: boolean, result: Size): Size {
  for (const s of operands) {
    if (s.level === 2) throw tooLarge(s.what, op);
    if (s.level === 1 && !summedOk) throw tooLarge(`the result of ${s.op}`, op);
  }
  return result;
}

/**
 * An operation that makes a new value no larger than its operands (lower, substr, a cast, LIKE):
 * a grown operand is refused, since each copy is kept until the row is done (a thousand calls on a
 * 100 MB value of string_agg would hold 100 GB). Answers the largest operand's size.
 */
export function copy(op: string, operands: Size[]): Size {
  for (const s of operands) {
    if (s.level === 2) throw new GuardRefusal(2, `The query copies ${s.what} with ${op}: not allowed, each copy is kept until the row is done.`);
  }
  return largest(operands);
}

/** A built value joining `operands` (each bounded value one piece), checked as grow() does and held to MAX_PIECES. */
export function build(op: string, operands: Size[], summedOk: boolean): Size {
  grow(op, operands, summedOk, BOUNDED);
  const pieces = operands.reduce((n, s) => n + (s.level === 1 ? s.pieces : 1), 0);
  if (pieces > MAX_PIECES) {
    throw new GuardRefusal(2, `The query joins ${pieces} values into one with ${op}: not allowed, more than ${MAX_PIECES} could grow without bound.`);
  }
  // What it holds: a long number's text weighs LONG_NUMBER_WEIGHT pieces, a long literal its thousands of characters.
  const held = operands.reduce((n, s) => n + (s.level === 1 ? s.held : weightOf(s)), 0);
  return { level: 1, op, pieces, held };
}

/** A value read back through a column of a CTE, subquery or VALUES list (`what` names it). */
export function readBack(size: Size | undefined, what: string): Size {
  if (size === undefined) return BOUNDED;
  return size.level === 0 ? size : { level: 2, what };
}

function tooLarge(what: string, op: string): GuardRefusal {
  return new GuardRefusal(2, `The query builds a value from ${what} with ${op}: not allowed, it could grow without bound.`);
}
