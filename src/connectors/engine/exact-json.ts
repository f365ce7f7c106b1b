import { randomBytes } from 'node:crypto';

/**
 * Upstream JSON read without losing integers. `JSON.parse` reads every number as a double, so an
 * integer beyond ±(2^53 − 1) comes back as another integer: two snowflake ids a few apart
 * (1234567890123456789 and 1234567890123456790) become the same number, and the second record would
 * overwrite the first under one key. Such integers are read as `bigint` here; everything else is
 * exactly what `JSON.parse` gives (the same errors, the last of duplicate keys), and a page without a
 * number of 16 digits or more (almost every page) is handed to `JSON.parse` alone.
 *
 * A bigint is a scalar to the rest of the engine: its text (`String`) is its digits, it compares with
 * numbers, `canonicalJson` writes it as a JSON number (so the stored row holds it exactly), and
 * `jsonText` below writes JSON with it; `JSON.stringify` would throw on it.
 */

/**
 * A run of 16 digits that may be part of an integer token (also matches inside strings: then
 * checked). Written out rather than `\d{16}`, which V8 scans about 15 times slower (≈ 112 against
 * 7 µs for a 64 KB page of the demo source), close to what JSON.parse takes for the page.
 */
const MAYBE_LONG_INTEGER = /\d\d\d\d\d\d\d\d\d\d\d\d\d\d\d\d/;

/** A marker no text of the page can hold: a NUL (JSON text carries it only escaped) and a nonce of this process. */
const MARK = `\u0000${randomBytes(8).toString('hex')}:`;
/** The marker as JSON text writes it (the NUL escaped). */
const MARK_JSON = JSON.stringify(MARK).slice(1, -1);
const MARKED = new RegExp(`"${MARK_JSON.replace(/\\/g, '\\\\')}(-?\\d+)"`, 'g');

export function parseJsonExact(text: string): unknown {
  if (!MAYBE_LONG_INTEGER.test(text)) return JSON.parse(text);
  const marked = markLongIntegers(text);
  if (marked === text) return JSON.parse(text);
  return JSON.parse(marked, (_key, value: unknown) => (typeof value === 'string' && value.startsWith(MARK) ? BigInt(value.slice(MARK.length)) : value));
}

/**
 * The text with each integer token outside strings that is not a safe integer written as a marked
 * string instead (`"\u0000<nonce>:<digits>"`), for the reviver to turn into a bigint. Text that is not
 * valid JSON is left for `JSON.parse` to refuse as it would.
 */
function markLongIntegers(text: string): string {
  let out = '';
  let from = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++; // a backslash: skip the escaped character
      else if (c === 0x22) inString = false;
      continue;
    }
    if (c === 0x22) {
      inString = true;
      continue;
    }
    if (c !== 0x2d && (c < 0x30 || c > 0x39)) continue;
    // A number token: -?digits, then perhaps a fraction and an exponent.
    let end = i + 1;
    while (end < text.length && /[0-9.eE+-]/.test(text[end]!)) end++;
    const token = text.slice(i, end);
    if (/^-?[1-9]\d{15,}$/.test(token) && !Number.isSafeInteger(Number(token))) {
      out += `${text.slice(from, i)}"${MARK_JSON}${token}"`;
      from = end;
    }
    i = end - 1;
  }
  return from === 0 ? text : out + text.slice(from);
}

/** `JSON.stringify` for values read by `parseJsonExact`: a bigint is written as its digits, a JSON number. */
export function jsonText(value: unknown, indent?: number): string {
  let found = false;
  const text = JSON.stringify(
    value,
    (_key, v: unknown) => {
      if (typeof v !== 'bigint') return v;
      found = true;
      return `${MARK}${v}`;
    },
    indent,
  );
  return found ? text.replace(MARKED, '$1') : text;
}

/** A copy with each bigint as its digits in a string, for answers that go through `JSON.stringify` (previews). */
export function bigIntsAsText(value: unknown): unknown {
  if (typeof value === 'bigint') return String(value);
  if (typeof value !== 'object' || value === null) return value;
  if (Array.isArray(value)) return value.map(bigIntsAsText);
  const out: Record<string, unknown> = {};
  for (const [key, child] of Object.entries(value as Record<string, unknown>)) out[key] = bigIntsAsText(child);
  return out;
}
