import { type Body, bodyOf, GuardRefusal, integerConst, isBody } from './ast.js';

/**
 * Guard 4 on the top-level SELECT: the answer holds at most `maxRows` rows. A missing LIMIT (or
 * LIMIT ALL / LIMIT NULL, which mean no limit) becomes `LIMIT maxRows`; a larger constant is
 * lowered to it. A LIMIT or OFFSET that is not a non-negative whole-number constant (an expression,
 * a subquery, a string, a fraction) is refused, and so is FETCH … WITH TIES, which may return more
 * rows than its count. Rewrites `s` in place; answers the limit that now applies.
 */
export function boundLimit(s: Body, maxRows: number): number {
  if (s.limitOption === 'LIMIT_OPTION_WITH_TIES') throw new GuardRefusal(4, 'FETCH … WITH TIES may return more rows than asked; use LIMIT.');
  if (s.limitOffset !== undefined) {
    const offset = constantCount(s.limitOffset);
    if (offset === undefined || offset === 'all') throw new GuardRefusal(4, 'OFFSET must be a whole number written as a constant.');
  }
  const count = s.limitCount === undefined ? 'all' : constantCount(s.limitCount);
  if (count === undefined) throw new GuardRefusal(4, 'LIMIT must be a whole number written as a constant.');
  const limit = count === 'all' ? maxRows : Math.min(count, maxRows);
  s.limitCount = integerConst(limit);
  s.limitOption = 'LIMIT_OPTION_COUNT';
  return limit;
}

const MAX_BIGINT = 9223372036854775807n;

/** A constant non-negative whole number a bigint holds; `all` for LIMIT ALL/NULL; undefined for anything else. */
function constantCount(node: unknown): number | 'all' | undefined {
  const c = bodyOf(node, 'A_Const');
  if (!c) return undefined;
  if (c.isnull === true) return 'all';
  let n: number | undefined;
  if (isBody(c.ival)) n = typeof c.ival.ival === 'number' ? c.ival.ival : 0;
  else if (isBody(c.fval) && typeof c.fval.fval === 'string') {
    // Past a bigint PostgreSQL refuses the count as out of range: what it cannot take is no whole number here either.
    if (/^\d+$/.test(c.fval.fval)) return BigInt(c.fval.fval) > MAX_BIGINT ? undefined : Number(c.fval.fval);
    n = Number(c.fval.fval);
  }
  if (n === undefined || !Number.isFinite(n) || !Number.isInteger(n) || n < 0 || n >= 2 ** 63) return undefined;
  return n;
}
