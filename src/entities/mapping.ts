/**
 * What a source mapping of an Entity (`key`, or a value of `columns`) names: a column of the ext
 * table, or a JSONPath into its `data`. Pure; validate.ts refuses what `parseMapping` cannot read,
 * relation.ts turns what it reads into SQL.
 *
 * The JSONPath dialect is deliberately small: `$` followed by one or more of `.name` (a letter or
 * `_`, then letters, digits, `_`), `['any key']` or `["any key"]` (a backslash escapes the quote
 * or itself) and `[n]` (an array index). No wildcards, filters, slices or recursive descent: a
 * mapping names one value. It becomes a PostgreSQL jsonpath with every key double-quoted
 * (`$."contact"."email"`), so no key can read as a jsonpath keyword or method.
 */

/** Columns every ext table has that are bookkeeping, not data; `external_id` (the row's key) may be mapped. */
export const BOOKKEEPING_COLUMNS: ReadonlySet<string> = new Set(['id', 'tenant_id', 'row_hash', 'data', 'indexed_at', 'connector_id', 'endpoint_id']);

const TABLE_COLUMN = /^[a-z_][a-z0-9_]{0,62}$/;
const NAME = /^[A-Za-z_][A-Za-z0-9_]*/;
const INDEX = /^\[(0|[1-9][0-9]{0,8})\]/;

export type Mapping =
  | { kind: 'column'; column: string }
  /** `pgPath`: the PostgreSQL jsonpath text (to be passed as a quoted literal). */
  | { kind: 'path'; pgPath: string };

/**
 * A mapping as what it names, or a reason it names nothing: the reason follows the quoted mapping
 * (`"data" is a bookkeeping column …`), so it never repeats it.
 */
export function parseMapping(text: string): Mapping | { problem: string } {
  if (text.startsWith('$')) {
    const segments = jsonPathSegments(text);
    if (typeof segments === 'string') return { problem: segments };
    return { kind: 'path', pgPath: `$${segments.map((s) => (typeof s === 'number' ? `[${s}]` : `.${pgString(s)}`)).join('')}` };
  }
  if (!TABLE_COLUMN.test(text)) return { problem: 'must be a column of the table (a lower-case identifier) or a JSONPath into data starting with $' };
  if (BOOKKEEPING_COLUMNS.has(text)) return { problem: 'is a bookkeeping column of every ext table, not data; map external_id, a promoted column or a JSONPath into data' };
  return { kind: 'column', column: text };
}

/** The keys (strings) and indexes (numbers) of a JSONPath, or why it is not one of the dialect. */
function jsonPathSegments(text: string): Array<string | number> | string {
  const out: Array<string | number> = [];
  let rest = text.slice(1);
  if (rest === '') return 'must name a value inside data: $ alone is the whole payload (add .name, [\'name\'] or [0])';
  while (rest !== '') {
    if (rest.startsWith('.')) {
      const name = NAME.exec(rest.slice(1));
      if (!name) return `must continue after "." with a name (a letter or _, then letters, digits, _; use ['…'] for other keys) at "${rest}"`;
      out.push(name[0]);
      rest = rest.slice(1 + name[0].length);
      continue;
    }
    const index = INDEX.exec(rest);
    if (index) {
      out.push(Number(index[1]));
      rest = rest.slice(index[0].length);
      continue;
    }
    const quote = rest[0] === '[' ? rest[1] : undefined;
    if (quote === "'" || quote === '"') {
      let key = '';
      let i = 2;
      for (; i < rest.length && rest[i] !== quote; i++) {
        if (rest[i] === '\\') {
          const next = rest[i + 1];
          if (next !== quote && next !== '\\') return `may escape only ${quote} and \\ inside [${quote}…${quote}]`;
          key += next;
          i++;
        } else key += rest[i];
      }
      if (rest[i] !== quote || rest[i + 1] !== ']') return `has an unterminated [${quote}…${quote}] at "${rest}"`;
      out.push(key);
      rest = rest.slice(i + 2);
      continue;
    }
    return `must be a simple path: $ then .name, ['key'], ["key"] or [n] (no wildcards, filters or slices); stopped at "${rest}"`;
  }
  return out;
}

/** A jsonpath string literal: double quotes, with `"`, `\` and control characters escaped. */
function pgString(key: string): string {
  let out = '"';
  for (const ch of key) {
    const code = ch.codePointAt(0)!;
    if (ch === '"' || ch === '\\') out += `\\${ch}`;
    else if (code < 0x20) out += `\\u${code.toString(16).padStart(4, '0')}`;
    else out += ch;
  }
  return `${out}"`;
}
