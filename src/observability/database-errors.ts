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

/** `err.message` as a log line may hold it: a value a PostgreSQL error quotes is masked. */
export function loggableMessage(err: unknown): string {
  if (!quotesValues(err)) return err instanceof Error ? err.message : String(err);
  return maskedMessage(err);
}

function maskedMessage(err: DatabaseErrorFields): string {
  return err.code.startsWith('22') ? maskQuoted(err.message) : err.message;
}

/**
 * `err` as a log line may hold it (the logger's `err` serializer): the same error when nothing of it
 * quotes a value, else a copy (of the same class) whose message, stack, detail and context have the
 * values masked and which has no `internalQuery`. The errors it holds are made loggable the same way:
 * its cause, the members of an AggregateError (`errors`: Promise.any, a connection tried at every
 * address of a name), and any other property holding an error or a list of them, all of which the
 * serializer writes out.
 */
export function loggableError(err: unknown, depth = 0): unknown {
  if (!(err instanceof Error) || depth > 8) return err;
  const held = new Map<string, unknown>();
  for (const key of Object.getOwnPropertyNames(err)) {
    const descriptor = Object.getOwnPropertyDescriptor(err, key)!;
    if (!('value' in descriptor)) continue;
    const loggable = loggableHeld(descriptor.value, depth + 1);
    if (loggable !== descriptor.value) held.set(key, loggable);
  }
  const own = quotesValues(err);
  if (!own && held.size === 0) return err;
  const copy = Object.create(Object.getPrototypeOf(err)) as Record<string, unknown>;
  for (const key of Object.getOwnPropertyNames(err)) {
    const descriptor = Object.getOwnPropertyDescriptor(err, key)!;
    if ('value' in descriptor) descriptor.value = held.has(key) ? held.get(key) : own ? maskedField(err, key) : descriptor.value;
    Object.defineProperty(copy, key, descriptor);
  }
  return copy;
}

/** A value an error holds, loggable: an error as loggableError makes it, a list with its errors so (the same value when nothing changes). */
function loggableHeld(value: unknown, depth: number): unknown {
  if (!Array.isArray(value)) return loggableError(value, depth);
  const items = value.map((item) => loggableError(item, depth));
  return items.some((item, i) => item !== value[i]) ? items : value;
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
