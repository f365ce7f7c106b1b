/**
 * Small helpers over libpg-query's JSON parse tree. A node is an object with one key, its type
 * (`{"SelectStmt": {...}}`); a node's body is a plain object. The guards read the tree through
 * these helpers so that an unexpected shape is refused rather than misread.
 */

export type Body = Record<string, unknown>;

/** A refusal by one of the guards; thrown inside the walk, turned into a GuardResult at the top. */
export class GuardRefusal extends Error {
  constructor(
    readonly guard: 1 | 2 | 3 | 4,
    reason: string,
  ) {
    super(reason);
    this.name = 'GuardRefusal';
  }
}

export function isBody(value: unknown): value is Body {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The type and body of a node, or undefined when `value` is not a one-key node. */
export function nodeOf(value: unknown): { type: string; body: Body } | undefined {
  if (!isBody(value)) return undefined;
  const keys = Object.keys(value);
  if (keys.length !== 1) return undefined;
  const type = keys[0]!;
  const body = value[type];
  return isBody(body) ? { type, body } : undefined;
}

/** The body of `value` when it is a node of `type`. */
export function bodyOf(value: unknown, type: string): Body | undefined {
  const node = nodeOf(value);
  return node?.type === type ? node.body : undefined;
}

export function list(value: unknown): unknown[] {
  return Array.isArray(value) ? value : [];
}

/** The `sval` of a `String` node. */
export function stringOf(value: unknown): string | undefined {
  const s = bodyOf(value, 'String')?.sval;
  return typeof s === 'string' ? s : undefined;
}

/** The strings of a name list (`[{String}, {String}]`), or undefined when one element is not a String. */
export function names(value: unknown): string[] | undefined {
  const out: string[] = [];
  for (const item of list(value)) {
    const s = stringOf(item);
    if (s === undefined) return undefined;
    out.push(s);
  }
  return out;
}

/** A literal's text (strings, numbers, booleans; NULL and bit strings give undefined), seeing through casts. */
export function literalText(value: unknown): string | undefined {
  const cast = bodyOf(value, 'TypeCast');
  if (cast) return literalText(cast.arg);
  const c = bodyOf(value, 'A_Const');
  if (!c || c.isnull) return undefined;
  if (isBody(c.sval)) return typeof c.sval.sval === 'string' ? c.sval.sval : '';
  if (isBody(c.ival)) return String(typeof c.ival.ival === 'number' ? c.ival.ival : 0);
  if (isBody(c.fval)) return typeof c.fval.fval === 'string' ? c.fval.fval : undefined;
  if (isBody(c.boolval)) return c.boolval.boolval === true ? 'true' : 'false';
  return undefined;
}

/** An integer constant node as the parser writes it (zero has an empty `ival`). */
export function integerConst(n: number): Body {
  return { A_Const: { ival: n === 0 ? {} : { ival: n } } };
}

/** A copy of a parse tree without the source positions, with keys sorted: two trees compare equal as text. */
export function canonical(value: unknown): string {
  return JSON.stringify(strip(value));
}

const POSITIONS = new Set(['location', 'list_start', 'list_end', 'rexpr_list_start', 'rexpr_list_end', 'stmt_location', 'stmt_len']);

function strip(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(strip);
  if (!isBody(value)) return value;
  const out: Body = {};
  for (const key of Object.keys(value).sort()) if (!POSITIONS.has(key)) out[key] = strip(value[key]);
  return out;
}
