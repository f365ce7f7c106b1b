import { GuardRefusal } from './ast.js';

/**
 * How large a value an expression can make, as guard 2 bounds it. PostgreSQL bounds one value
 * (1 GB) but not what one statement holds, and it checks for the statement timeout between
 * operations, not inside one large copy: a value that grows at each level of CTEs (ten copies of
 * the previous level's, eight levels deep) took a server past its machine's memory. So a value may
 * grow only once, from values that did not grow:
 *
 * - level 0, bounded: a literal, a column of a card relation, or what keeps its argument's size
 *   (lower, substr, a cast, coalesce, min, lag …) or has a size of its own (a number, a date);
 *   also a column of a CTE, subquery or VALUES list that is bounded in turn;
 * - level 1, summed: `||` (text, arrays, jsonb) over bounded or summed values, or concat,
 *   concat_ws and to_char over bounded ones: as large as the text of the expression that writes
 *   it times the largest value it reads, never more;
 * - level 2, grown: an aggregate that gathers rows (string_agg, array_agg, ARRAY(subquery)),
 *   ARRAY[…], a cast of a summed value (an array's text doubles its quotes), and any summed or
 *   grown value read back through a CTE or subquery column, or a scalar subquery.
 *
 * An operand of a growing operation that is grown (or, for the operations that expand what they
 * read, summed) is refused.
 */
export type Size = { level: 0 } | { level: 1; op: string } | { level: 2; what: string };

export const BOUNDED: Size = { level: 0 };

/**
 * What each allowlisted function does to the size of what it reads (guards.test.ts checks that every
 * allowed function is here; one that is not counts as growing). `gathers`: aggregates a value over rows; `sums`: one value of its
 * bounded arguments laid end to end; `expands`: can be larger than the sum of its arguments (a
 * to_char pattern, an escaped pattern); `keeps`: its output is (part of) one argument's value;
 * `own`: its output has a bounded size of its own (numbers, booleans, dates).
 */
export const FUNCTION_SIZES: Readonly<Record<string, 'gathers' | 'sums' | 'expands' | 'keeps' | 'own'>> = {
  string_agg: 'gathers',
  array_agg: 'gathers',
  concat: 'sums',
  concat_ws: 'sums',
  to_char: 'expands',
  similar_to_escape: 'expands',
  like_escape: 'expands',
  ...Object.fromEntries(
    [
      'min', 'max', 'mode', 'percentile_disc', 'lag', 'lead', 'first_value', 'last_value', 'nth_value',
      'lower', 'upper', 'initcap', 'btrim', 'ltrim', 'rtrim', 'substring', 'substr', 'left', 'right', 'split_part',
    ].map((f) => [f, 'keeps' as const]),
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

/** The largest of several sizes (bounded when there are none). */
export function largest(sizes: Size[]): Size {
  let out: Size = BOUNDED;
  for (const s of sizes) if (s.level > out.level) out = s;
  return out;
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

/** A value read back through a column of a CTE, subquery or VALUES list (`what` names it). */
export function readBack(size: Size | undefined, what: string): Size {
  return size === undefined || size.level === 0 ? BOUNDED : { level: 2, what };
}

function tooLarge(what: string, op: string): GuardRefusal {
  return new GuardRefusal(2, `The query builds a value from ${what} with ${op}: not allowed, it could grow without bound.`);
}
