import { bodyOf, isBody, list, literalText } from './ast.js';
import type { CardColumn } from './schema-card.js';

/** The card column a column reference reads, with its relation's card name. */
export interface Origin {
  relation: string;
  column: CardColumn;
}

/**
 * The most steps of LIKE matching (likeMatches: one per character of a declared value read, one per
 * step of the match) guard 3 takes for one query, in all its patterns: a few tens of milliseconds
 * of the hub's event loop. Each comparison is linear in the pattern times the value, but a query
 * holds hundreds of patterns and a domain a thousand values of 200 characters (an entity's): 217
 * patterns of 80 characters held the event loop for 21 s. A query that needs more is refused; one
 * LIKE with a short pattern that matches none of such a domain takes some 400,000.
 */
export const LIKE_STEPS = 2_000_000;

/** What is left of one query's LIKE_STEPS. */
export interface LikeBudget {
  left: number;
}

/**
 * Guard 3: a literal compared with a column that declares `values` must be one of them, exactly
 * (case-sensitive, as stored): a model that filters `status = 'deleted'` when the domain is
 * active/dormant gets a refusal naming the value instead of a silent empty answer.
 *
 * Checked: `=`, `<>`, IS [NOT] DISTINCT FROM (either side), [NOT] IN lists, `= ANY`/`<> ALL` over
 * an ARRAY[…] or a '{…}' literal, CASE column WHEN literal, and LIKE/ILIKE, whose pattern must
 * match at least one declared value. Not checked: ordering comparisons, BETWEEN, SIMILAR TO,
 * regular expressions, and a column wrapped in a function (`lower(country) = 'fr'`). LIKE patterns
 * are matched within `budget` (shared by the query's patterns); once it is spent, every LIKE over a
 * domain is refused.
 * Answers the refusal message, or undefined.
 */
export function domainViolation(
  kind: string,
  operator: string,
  leftNode: unknown,
  left: Origin | undefined,
  rightNode: unknown,
  right: Origin | undefined,
  budget: LikeBudget = { left: Number.POSITIVE_INFINITY },
): string | undefined {
  const equality = operator === '=' || operator === '<>';
  if ((kind === 'AEXPR_OP' || kind === 'AEXPR_DISTINCT' || kind === 'AEXPR_NOT_DISTINCT') && equality) {
    if (left && !right) return checkValue(left, literalText(rightNode));
    if (right && !left) return checkValue(right, literalText(leftNode));
    return undefined;
  }
  if (!left) return undefined;
  if (kind === 'AEXPR_IN') {
    for (const item of list(bodyOf(rightNode, 'List')?.items)) {
      const refusal = checkValue(left, literalText(item));
      if (refusal) return refusal;
    }
    return undefined;
  }
  if ((kind === 'AEXPR_OP_ANY' || kind === 'AEXPR_OP_ALL') && equality) {
    for (const value of arrayLiterals(rightNode)) {
      const refusal = checkValue(left, value);
      if (refusal) return refusal;
    }
    return undefined;
  }
  if (kind === 'AEXPR_LIKE' || kind === 'AEXPR_ILIKE') {
    const pattern = literalText(rightNode);
    const values = left.column.values;
    if (pattern === undefined || !values) return undefined;
    const tokens = likeTokens(pattern);
    budget.left -= tokens.length;
    for (const value of values) {
      const matches = likeWithin(tokens, value, kind === 'AEXPR_ILIKE', budget);
      if (matches === undefined) {
        return `The query's LIKE and ILIKE patterns take more than ${LIKE_STEPS} steps to check against declared values (column ${left.column.name} of ${left.relation}): use fewer or shorter patterns.`;
      }
      if (matches) return undefined;
    }
    return `The pattern '${pattern}' matches no declared value of column ${left.column.name} (${left.relation}); declared values: ${values.join(', ')}.`;
  }
  return undefined;
}

function checkValue(origin: Origin, value: string | undefined): string | undefined {
  const values = origin.column.values;
  if (value === undefined || !values || values.includes(value)) return undefined;
  return `'${value}' is not a declared value of column ${origin.column.name} (${origin.relation}); declared values: ${values.join(', ')}.`;
}

/** The elements of `ARRAY['a','b']` or of the array literal `'{a,b}'` (possibly cast). */
function arrayLiterals(node: unknown): (string | undefined)[] {
  const array = bodyOf(node, 'A_ArrayExpr');
  if (array) return list(array.elements).map(literalText);
  const cast = bodyOf(node, 'TypeCast');
  const text = literalText(cast ? cast.arg : node);
  if (text === undefined || !isBody(bodyOf(cast ? cast.arg : node, 'A_Const')?.sval)) return [];
  return parseArrayLiteral(text);
}

/** PostgreSQL's one-dimensional array literal: `{a,"b c",NULL}`. Unreadable text gives one undeclared value (itself). */
export function parseArrayLiteral(text: string): (string | undefined)[] {
  const t = text.trim();
  if (!t.startsWith('{') || !t.endsWith('}')) return [text];
  const inner = t.slice(1, -1);
  const out: (string | undefined)[] = [];
  let i = 0;
  while (i <= inner.length) {
    while (inner[i] === ' ') i++;
    let value = '';
    let quoted = false;
    if (inner[i] === '"') {
      quoted = true;
      i++;
      while (i < inner.length && inner[i] !== '"') {
        if (inner[i] === '\\') i++;
        value += inner[i] ?? '';
        i++;
      }
      i++;
    } else {
      while (i < inner.length && inner[i] !== ',') {
        if (inner[i] === '\\') i++;
        value += inner[i] ?? '';
        i++;
      }
      value = value.trim();
    }
    while (inner[i] === ' ') i++;
    if (inner.length > 0 || quoted) out.push(!quoted && value.toUpperCase() === 'NULL' ? undefined : value);
    if (inner[i] !== ',') break;
    i++;
  }
  return out;
}

const ANY = Symbol('%');
const ONE = Symbol('_');

/**
 * Whether `value` matches LIKE's pattern language (`%` any run of characters, `_` any one
 * character, a backslash escaping the next one), case-insensitively for ILIKE. Greedy with one
 * remembered `%`, as src/validation/wildcard.ts: at most (n + 1) × (m + 1) steps for a pattern of m
 * characters against a value of n, whatever the pattern. As a regular expression
 * (`^[\s\S]*a[\s\S]*a…b$`) it backtracked exponentially: `'%a%a%a%a%a%a%a%b'` against a declared
 * value of 40 `a` held the event loop for seconds, and the pattern is the model's to write.
 */
export function likeMatches(pattern: string, value: string, caseInsensitive: boolean): boolean {
  return likeWithin(likeTokens(pattern), value, caseInsensitive, { left: Number.POSITIVE_INFINITY }) === true;
}

type LikeToken = string | typeof ANY | typeof ONE;

/** A LIKE pattern's tokens: each a character to match, or ANY (`%`) or ONE (`_`); characters are code points. */
function likeTokens(pattern: string): LikeToken[] {
  const tokens: LikeToken[] = [];
  const chars = Array.from(pattern);
  for (let i = 0; i < chars.length; i++) {
    const c = chars[i]!;
    if (c === '\\' && i + 1 < chars.length) tokens.push(chars[++i]!);
    else tokens.push(c === '%' ? ANY : c === '_' ? ONE : c);
  }
  return tokens;
}

/**
 * likeMatches over a pattern's tokens, taking from `budget` one step per character of the value read
 * and one per step of the match; undefined once the budget is spent.
 */
function likeWithin(tokens: LikeToken[], value: string, caseInsensitive: boolean, budget: LikeBudget): boolean | undefined {
  budget.left -= value.length + 1;
  if (budget.left < 0) return undefined;
  const text = Array.from(value);
  const same = (a: string, b: string) => a === b || (caseInsensitive && (a.toLowerCase() === b.toLowerCase() || a.toUpperCase() === b.toUpperCase()));
  let p = 0;
  let t = 0;
  let star = -1;
  let resume = 0;
  while (t < text.length) {
    if (--budget.left < 0) return undefined;
    const token = tokens[p];
    if (token === ANY) {
      star = p++;
      resume = t;
    } else if (token === ONE || (token !== undefined && same(token, text[t]!))) {
      p++;
      t++;
    } else if (star >= 0) {
      // Let the last % take one more character and try the rest of the pattern from there.
      p = star + 1;
      t = ++resume;
    } else return false;
  }
  while (tokens[p] === ANY) p++;
  return p === tokens.length;
}
