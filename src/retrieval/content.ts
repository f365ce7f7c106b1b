import { flatten } from '../connectors/runs/rows.js';

/**
 * The text of a row's chunk: the table, the row's key, then its fields as `path: value` pairs in
 * the payload's order, flattened as `GET /api/platform/data/row/{hash}` shows a row (nested objects
 * with dotted paths, arrays as their JSON), empty values left out. This is what is embedded and what
 * search and chat show, so it names the data in the words the source used.
 */
export const MAX_CHUNK_CHARS = 2000;

export function rowChunkText(table: string, externalId: string, data: unknown, maxChars = MAX_CHUNK_CHARS): string {
  const parts: string[] = [];
  for (const [path, value] of Object.entries(flatten(data))) if (value !== '') parts.push(`${path}: ${value}`);
  const text = `${table} ${externalId}: ${parts.join('; ')}`;
  return text.length <= maxChars ? text : `${text.slice(0, maxChars - 1)}…`;
}
