/**
 * The text of a row's chunk: the table, the row's key, then its fields as `path: value` pairs in
 * the payload's order (nested objects flattened with dots, arrays joined), nulls left out. This is
 * what is embedded and what search and chat show, so it names the data in the words the source used.
 */
export const MAX_CHUNK_CHARS = 2000;

export function rowChunkText(table: string, externalId: string, data: unknown, maxChars = MAX_CHUNK_CHARS): string {
  const parts: string[] = [];
  flatten('', data, parts);
  const text = `${table} ${externalId}: ${parts.join('; ')}`;
  return text.length <= maxChars ? text : `${text.slice(0, maxChars - 1)}…`;
}

function flatten(path: string, value: unknown, out: string[], depth = 0): void {
  if (value === null || value === undefined) return;
  if (Array.isArray(value)) {
    if (value.every((v) => v === null || typeof v !== 'object')) {
      if (value.length) out.push(`${path || 'value'}: ${value.filter((v) => v !== null).join(', ')}`);
      return;
    }
    for (const [i, v] of value.entries()) flatten(`${path}[${i}]`, v, out, depth + 1);
    return;
  }
  if (typeof value === 'object') {
    if (depth > 8) return;
    for (const [k, v] of Object.entries(value as Record<string, unknown>)) flatten(path ? `${path}.${k}` : k, v, out, depth + 1);
    return;
  }
  out.push(`${path || 'value'}: ${String(value)}`);
}
