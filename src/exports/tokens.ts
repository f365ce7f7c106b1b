/**
 * File-name tokens of spec 3 in `path`, `prefix` and `filename`, resolved in UTC against a run's
 * artifact time (the request moment of a manual run, the cron slot of a scheduled one): `${date}`
 * is `YYYY-MM-DD`, `${timestamp}` is `YYYYMMDDTHHMMSSZ`. Any other `${…}` is refused at apply.
 */

export const TOKENS = ['date', 'timestamp'] as const;

const TOKEN = /\$\{([^}]*)\}/g;

/** The first `${…}` that is not a known token (as written), or undefined. */
export function unknownToken(text: string): string | undefined {
  for (const match of text.matchAll(TOKEN)) if (!(TOKENS as readonly string[]).includes(match[1]!)) return match[0];
  return undefined;
}

const two = (n: number) => String(n).padStart(2, '0');

/** `text` with every token replaced, in UTC (the hub's own time zone plays no part). */
export function resolveTokens(text: string, at: Date): string {
  const date = `${at.getUTCFullYear()}-${two(at.getUTCMonth() + 1)}-${two(at.getUTCDate())}`;
  const timestamp = `${at.getUTCFullYear()}${two(at.getUTCMonth() + 1)}${two(at.getUTCDate())}T${two(at.getUTCHours())}${two(at.getUTCMinutes())}${two(at.getUTCSeconds())}Z`;
  return text.replace(TOKEN, (whole, name: string) => (name === 'date' ? date : name === 'timestamp' ? timestamp : whole));
}

/**
 * The length in UTF-8 bytes of `text` once its tokens are resolved: the same for every artifact
 * time (`${date}` is always 10 bytes, `${timestamp}` 16), so a limit on a resolved name is checked at apply.
 */
export function resolvedByteLength(text: string): number {
  return Buffer.byteLength(resolveTokens(text, new Date(0)));
}

/**
 * The S3 object key of `prefix` and `filename` at artifact time `at`: each field's tokens resolved on
 * their own, so a prefix ending in `$` before a filename starting with `{date}` names no token.
 */
export function objectKey(prefix: string, filename: string, at: Date): string {
  return resolveTokens(prefix, at) + resolveTokens(filename, at);
}
