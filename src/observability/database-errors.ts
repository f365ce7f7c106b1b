import { loggableText } from './url-redaction.js';

/**
 * PostgreSQL's texts of an error that refuses a value quote the value: `invalid input syntax for type
 * integer: "<value>"`, `Key (email)=(<value>) already exists.`, `Failing row contains (<the row>).`,
 * `JSON data, line 1: <the document>`. The value is an upstream record's content or a tenant's data,
 * which has no place in the hub's log. What such an error is logged with keeps what locates the
 * fault (the SQLSTATE, the schema, table, column, constraint and type names, the quoted identifiers
 * of the other classes) and replaces each quoted value by `…`.
 */

/** The classes whose texts may quote a value: 22 data exception, 23 integrity constraint violation, 54 program limit exceeded. */
const VALUE_CLASSES = /^(22|23|54)[0-9A-Z]{3}$/;

const HIDDEN = '…';

interface DatabaseErrorFields {
  code: string;
  message: string;
  detail?: string;
  where?: string;
  internalQuery?: string;
  stack?: string;
}

/** A PostgreSQL error (node-postgres gives it a `severity`) of a class whose texts may quote a value. */
function quotesValues(err: unknown): err is Error & DatabaseErrorFields {
  if (!(err instanceof Error) || !('severity' in err)) return false;
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' && VALUE_CLASSES.test(code);
}

/**
 * Everything from the first double quote to the last one: PostgreSQL quotes a value without escaping
 * the quotes or the newlines inside it, so only that span is sure to hold all of it.
 */
function maskQuoted(text: string): string {
  return text.replace(/"[\s\S]*"/, `"${HIDDEN}"`);
}

/**
 * The detail of a constraint violation without the values: `Key (a, b)=(…) already exists.`,
 * `Key (a)=(…) is not present in table "t".`, `Failing row contains (…).`; any other detail
 * with its quoted text masked.
 */
function maskDetail(detail: string): string {
  const key = /^Key \((.*?)\)=\(/.exec(detail);
  if (key) {
    const tail = /\) ((?:already exists|is not present in table "[^"]*"|is still referenced from table "[^"]*")\.)$/.exec(detail);
    return `Key (${key[1]})=(${HIDDEN})${tail ? ` ${tail[1]}` : ''}`;
  }
  if (detail.startsWith('Failing row contains (')) return `Failing row contains (${HIDDEN}).`;
  return maskQuoted(detail);
}

/**
 * The context of an error (the JSON text read, a statement of a function, its PL/pgSQL lines)
 * without values: the JSON text, and everything from the first quote to the last.
 */
function maskWhere(where: string): string {
  return maskQuoted(where.replace(/^(JSON data, line \d+: ).*$/gm, `$1${HIDDEN}`));
}

/**
 * `err.message` as a log line may hold it: a value a PostgreSQL error quotes is masked, and so are
 * the credentials of an address it quotes (a URL's userinfo and query values, url-redaction.ts).
 */
export function loggableMessage(err: unknown): string {
  const text = !(err instanceof Error) ? String(err) : quotesValues(err) ? maskedMessage(err) : String(err.message);
  return loggableText(text);
}

function maskedMessage(err: DatabaseErrorFields): string {
  return err.code.startsWith('22') ? maskQuoted(err.message) : err.message;
}

/**
 * How many levels of a logged value are looked into for errors: a log line rarely holds more. An
 * error held deeper is written as its masked message only, any other object or list deeper as
 * `[Object]` or `[Array]` (as pino writes a circular object's deep levels).
 */
export const MAX_LOGGED_DEPTH = 10;

/** What one walk over a logged value keeps: the objects on the path to the current one (a cycle), the errors already made loggable. */
export interface ErrorWalk {
  /** At most MAX_LOGGED_DEPTH of them: a list is cheaper to keep than a set. */
  ancestors: object[];
  errors: Map<Error, Error>;
}

export const newErrorWalk = (): ErrorWalk => ({ ancestors: [], errors: new Map() });

/**
 * `value` with every error it holds at any depth (in objects and lists, to MAX_LOGGED_DEPTH) replaced by
 * `onError`'s answer; the same value when it holds none, else a copy of the objects and lists on the
 * way to each one (plain objects, as JSON writes them: their own enumerable fields). A circular
 * reference becomes `[Circular]` (pino's own word for one). Objects JSON writes by their own `toJSON`
 * (a Date, a Buffer) or as `{}` (a Map, a Set) are left as they are. It reads each value once, so it
 * costs less than the JSON text pino writes of the same value.
 */
export function withLoggableErrors(value: unknown, depth: number, walk: ErrorWalk, onError: (err: Error, depth: number, walk: ErrorWalk) => unknown): unknown {
  if (typeof value !== 'object' || value === null) return value;
  if (value instanceof Error) return onError(value, depth, walk);
  if (typeof (value as { toJSON?: unknown }).toJSON === 'function' || ArrayBuffer.isView(value) || value instanceof Map || value instanceof Set) return value;
  if (walk.ancestors.includes(value)) return '[Circular]';
  if (depth > MAX_LOGGED_DEPTH) return Array.isArray(value) ? '[Array]' : '[Object]';
  walk.ancestors.push(value);
  let copy: unknown[] | Record<string, unknown> | undefined;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const item: unknown = value[i];
      // (a text or a number, most of what a log holds, without a call)
      if (typeof item !== 'object' || item === null) continue;
      const loggable = withLoggableErrors(item, depth + 1, walk, onError);
      if (loggable === item) continue;
      copy ??= value.slice();
      (copy as unknown[])[i] = loggable;
    }
  } else {
    for (const key of Object.keys(value)) {
      const item = (value as Record<string, unknown>)[key];
      if (typeof item !== 'object' || item === null) continue;
      const loggable = withLoggableErrors(item, depth + 1, walk, onError);
      if (loggable === item) continue;
      copy ??= { ...value };
      (copy as Record<string, unknown>)[key] = loggable;
    }
  }
  walk.ancestors.pop();
  return copy ?? value;
}

/**
 * `err` as a log line may hold it (the logger's `err` serializer): a copy (of the same class) whose
 * message and stack, and every other text of its own, have the credentials of an address masked
 * (`loggableText`); a PostgreSQL error's copy has the values its message, stack, detail and context
 * quote masked too, and no `internalQuery`. The errors it holds are made loggable the same way, at
 * any depth: its cause, the members of an AggregateError (`errors`: Promise.any, a connection tried
 * at every address of a name), and an error under any other property, or in an object or a list
 * there, all of which the serializer writes out. An error met again (a cause that is the error
 * itself) is the same copy; deeper than MAX_LOGGED_DEPTH, an error is its masked message.
 */
export function loggableError(err: unknown, depth = 0, walk: ErrorWalk = newErrorWalk()): unknown {
  if (!(err instanceof Error)) return err;
  const known = walk.errors.get(err);
  if (known) return known;
  if (depth > MAX_LOGGED_DEPTH) return loggableMessage(err);
  const copy = Object.create(Object.getPrototypeOf(err)) as Error;
  walk.errors.set(err, copy);
  const own = quotesValues(err);
  for (const key of Object.getOwnPropertyNames(err)) {
    const descriptor = Object.getOwnPropertyDescriptor(err, key)!;
    if ('value' in descriptor) {
      const value = own ? maskedField(err, key) : descriptor.value;
      descriptor.value = typeof value === 'string' ? loggableText(value) : withLoggableErrors(value, depth + 1, walk, loggableError);
    }
    Object.defineProperty(copy, key, descriptor);
  }
  return copy;
}

function maskedField(err: Error & DatabaseErrorFields, key: string): unknown {
  switch (key) {
    case 'message':
      return maskedMessage(err);
    case 'stack': {
      const masked = maskedMessage(err);
      return err.stack?.replace(err.message, () => masked);
    }
    case 'detail':
      return err.detail === undefined ? undefined : maskDetail(err.detail);
    case 'where':
      return err.where === undefined ? undefined : maskWhere(err.where);
    case 'internalQuery':
      return undefined;
    default:
      return (err as unknown as Record<string, unknown>)[key];
  }
}

/**
 * A PostgreSQL error in a few fields for a log line: its code, the names it gives (schema, table,
 * column, type, constraint) and its message, every value masked.
 */
export function databaseErrorFields(err: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  const fields = err as Partial<Record<'code' | 'schema' | 'table' | 'column' | 'dataType' | 'constraint', unknown>>;
  for (const key of ['code', 'schema', 'table', 'column', 'dataType', 'constraint'] as const) {
    const value = fields?.[key];
    if (typeof value === 'string') out[key] = value;
  }
  out.err = loggableMessage(err);
  return out;
}
