/** A PostgreSQL unique violation (23505), on the named constraint when one is given. */
export function isUniqueViolation(err: unknown, constraint?: string): boolean {
  const e = err as { code?: string; constraint?: string } | undefined;
  return e?.code === '23505' && (constraint === undefined || e.constraint === constraint);
}

/**
 * PostgreSQL errors that refuse a value rather than report a failure of the hub: class 22 (data
 * exception: invalid text 22P02, untranslatable character 22P05, character not in repertoire 22021,
 * numeric out of range 22003, datetime 22007/22008/22009, string too long 22001) and class 54 (program
 * limit exceeded: an index row too large 54000, too complex 54001). The API answers them with a 400;
 * the connector runner dead-letters the row that caused one.
 */
export function refusedValueCode(err: unknown): string | undefined {
  if (!(err instanceof Error) || !('severity' in err)) return undefined;
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' && /^(22|54)[0-9A-Z]{3}$/.test(code) ? code : undefined;
}

const WHAT: Record<string, string> = {
  '22P02': 'a value is not valid for its type',
  '22P05': 'a value holds a character the database cannot store',
  '22021': 'a value holds a character the database cannot store',
  '22003': 'a number is out of range',
  '22007': 'a date or time is not valid',
  '22008': 'a date or time is out of range',
  '22009': 'a date or time is out of range',
  '22001': 'a value is too long',
  '54000': 'a value is too large to be stored or indexed',
  '54001': 'a value is too complex',
};

/** A sentence for a refused value's code (the database's own text may quote stored data). */
export function describeRefusal(code: string): string {
  return `${WHAT[code] ?? 'a value cannot be stored'} (database error ${code})`;
}
