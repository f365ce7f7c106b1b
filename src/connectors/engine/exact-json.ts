import { randomBytes } from 'node:crypto';

/**
 * Upstream JSON read without losing numbers. `JSON.parse` reads every number as a double, so an
 * integer beyond ±(2^53 − 1) comes back as another integer: two snowflake ids a few apart
 * (1234567890123456789 and 1234567890123456790) become the same number, and the second record would
 * overwrite the first under one key. Such integers are read as `bigint` here, and a number past a
 * double's range as an ExactNumber (below); everything else is exactly what `JSON.parse` gives (the
 * same errors, the last of duplicate keys), and a page without a number of 16 digits or more (a point
 * among them or not) or an exponent of three digits (almost every page) is handed to `JSON.parse` alone.
 *
 * A bigint is a scalar to the rest of the engine: its text (`String`) is its digits, it compares with
 * numbers, `canonicalJson` writes it as a JSON number (so the stored row holds it exactly), and
 * `jsonText` below writes JSON with it; `JSON.stringify` would throw on it.
 */

/**
 * A number JSON writes that no double holds at all: beyond ±1.8 × 10^308 (`1e400`, which `JSON.parse`
 * reads as Infinity, so that ids 1e400 and 2e400 became one key, "Infinity"), or not zero and below
 * 5 × 10^-324 (`1e-400`, read as 0). It is kept as the token's own text, as written: `String` gives
 * that text (the row's key, a cursor or watermark sent back upstream), `jsonText` and `canonicalJson`
 * write it as that JSON number, and PostgreSQL's numeric (a jsonb number) holds it exactly. Compared
 * with `<` and `>` it is what `JSON.parse` made of it (±Infinity, ±0); `compareNumbers` compares
 * exactly. `JSON.stringify` writes it as its text in a string (its `toJSON`), as a preview shows it.
 * A number a double holds only approximately (`0.12345678901234567`, `1e-320`) is a double, as in
 * `JSON.parse`.
 */
export class ExactNumber {
  readonly #text: string;
  /** `text` is a JSON number token (parseJsonExact makes these). */
  constructor(text: string) {
    this.#text = text;
  }
  toString(): string {
    return this.#text;
  }
  valueOf(): number {
    return Number(this.#text);
  }
  toJSON(): string {
    return this.#text;
  }
  [Symbol.for('nodejs.util.inspect.custom')](): string {
    return `ExactNumber(${this.#text})`;
  }
}

/**
 * A run of 16 characters, digits and perhaps a point, that may be part of a number token with 16
 * significant digits or more (also matches inside strings: then checked): an integer of 16 digits,
 * or a mantissa whose point splits them into shorter runs (`12345678.1234567809e10`, which with its
 * exponent of two digits MAYBE_HUGE_EXPONENT does not find either). A number a double would read as
 * another needs 16 significant digits at least (one of 15 is written back as itself). Written out
 * rather than `[.\d]{16}`, which V8 scans many times slower, close to what JSON.parse takes for the
 * page; the point in the class costs a few µs for a 70 KB page beside `\d` alone.
 */
const MAYBE_LONG_NUMBER = new RegExp('[.\\d]'.repeat(16));

/**
 * An exponent of three digits or more after a digit, ending a token (`1e400,`, `2.5E-400]`), which a
 * number a double cannot hold needs unless its digits run to 16 or more (MAYBE_LONG_NUMBER finds
 * those). The end is required so that hex text (`"…5e123-4a…"`, a UUID) does not send the page
 * through markInexactNumbers for nothing. Measured (least of 30 rounds) against JSON.parse: ≈ 9 µs
 * for a 50 KB page of the demo source (≈ 165 µs), ≈ 33 µs for a 52 KB page of UUID-keyed records
 * (≈ 120 µs).
 */
const MAYBE_HUGE_EXPONENT = /\d[eE][+-]?\d\d\d+(?=[,\]}\s]|$)/;

/** A marker no text of the page can hold: a NUL (JSON text carries it only escaped) and a nonce of this process. */
const MARK = `\u0000${randomBytes(8).toString('hex')}:`;
/** The marker as JSON text writes it (the NUL escaped). */
const MARK_JSON = JSON.stringify(MARK).slice(1, -1);
const MARKED = new RegExp(`"${MARK_JSON.replace(/\\/g, '\\\\')}(-?[0-9.eE+-]+)"`, 'g');

const INTEGER = /^-?\d+$/;
const TWO_TO_53 = 2 ** 53;
const LONG_INTEGER = /^-?[1-9]\d{15,}$/;
const JSON_NUMBER = /^-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?$/;

export function parseJsonExact(text: string): unknown {
  if (!MAYBE_LONG_NUMBER.test(text) && !MAYBE_HUGE_EXPONENT.test(text)) return JSON.parse(text);
  const marked = markInexactNumbers(text);
  if (marked === text) return JSON.parse(text);
  return JSON.parse(marked, (_key, value: unknown) => (typeof value === 'string' && value.startsWith(MARK) ? exactValue(value.slice(MARK.length)) : value));
}

/** A marked token's value: an integer as its bigint, any other number as an ExactNumber. */
function exactValue(token: string): bigint | ExactNumber {
  return INTEGER.test(token) ? BigInt(token) : new ExactNumber(token);
}

/**
 * Whether `JSON.parse` would read a number token as another number: an integer beyond ±(2^53 − 1),
 * a number past a double's range (±Infinity), or a non-zero number read as 0. Not a token JSON
 * allows (a leading zero, `1.e5`): false, for `JSON.parse` to refuse as it would.
 */
function isInexact(token: string): boolean {
  if (LONG_INTEGER.test(token)) return !Number.isSafeInteger(Number(token));
  if (!JSON_NUMBER.test(token)) return false;
  const n = Number(token);
  // From 2^53 on a double holds whole numbers only, and not all of them: a number there written with
  // a fraction or an exponent and more digits than its double keeps (`9007199254740993.0`,
  // `1.2345678901234567891e18`) would meet another, as whole ones would. One its double writes back
  // as the same number (`6.02214076e23`, anything JSON.stringify wrote) is that double.
  if (Math.abs(n) >= TWO_TO_53 && Number.isFinite(n)) return compareNumbers(token, String(n)) !== 0;
  if (n !== 0) return !Number.isFinite(n);
  const e = token.search(/[eE]/);
  return /[1-9]/.test(e < 0 ? token : token.slice(0, e));
}

/**
 * The text with each number token outside strings that `JSON.parse` would not read exactly
 * (isInexact) written as a marked string instead (`"\u0000<nonce>:<token>"`), for the reviver to turn
 * into a bigint or an ExactNumber. Only tokens of 16 characters or more, or with an exponent, are
 * looked at. Text that is not valid JSON is left for `JSON.parse` to refuse as it would.
 */
function markInexactNumbers(text: string): string {
  let out = '';
  let from = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      i = stringEnd(text, i);
      continue;
    }
    if (c !== 0x2d && (c < 0x30 || c > 0x39)) continue;
    // A number token: -?digits, then perhaps a fraction and an exponent.
    let end = i + 1;
    let exponent = false;
    for (; end < text.length; end++) {
      const d = text.charCodeAt(end);
      if (d === 0x65 || d === 0x45) exponent = true;
      else if (!((d >= 0x30 && d <= 0x39) || d === 0x2e || d === 0x2b || d === 0x2d)) break;
    }
    if (end - i >= 16 || exponent) {
      const token = text.slice(i, end);
      if (isInexact(token)) {
        out += `${text.slice(from, i)}"${MARK_JSON}${token}"`;
        from = end;
      }
    }
    i = end - 1;
  }
  return from === 0 ? text : out + text.slice(from);
}

/** Bounds on what `JSON.parse` builds from a page (pageOverBounds). */
export interface PageBounds {
  /** Objects and arrays (each `{` and `[` outside strings). */
  containers: number;
  /** Distinct object keys, but for integer ones (`"123"`). */
  keys: number;
  /** Distinct strings of up to SHORT_STRING characters that are no key. */
  shortStrings: number;
}

/**
 * Strings `JSON.parse` (V8) keeps one shared copy of, looked up in a process-wide table, when they are
 * at most this long (decoded); a key is kept so whatever its length.
 */
export const SHORT_STRING = 10;
/** The most characters a string of SHORT_STRING characters takes in JSON text (each a `\uXXXX` escape). */
const SHORT_STRING_TEXT = 6 * SHORT_STRING;

/**
 * Which bound JSON text passes, counted in one pass without parsing it, or undefined: what
 * `JSON.parse` would build is bounded before it is built, in time as in memory. Objects and arrays:
 * a page of 64 MiB of `{},` is 22 million objects, 1.5 GB of heap and a minute of the event loop. Keys
 * and short strings: `JSON.parse` keeps each distinct one in a process-wide table, and gives objects
 * with keys no object had before hidden classes of their own, about 1 to 3 µs a key (7 million
 * distinct keys in one 64 MiB object held the event loop for seconds, and what the run then did
 * with such a record for a minute), while a key repeated (the same fields in every record), an
 * integer key (`"123"`, an array index to V8) or a longer string costs next to nothing. A string
 * is told apart by its text as written (an escaped one may count twice; never too few), in place:
 * nothing is cut out of the text. Stops at the first bound passed. About 4 ms per MB of records (measured on
 * 10 MiB of them: 45 ms, against 16 ms counting objects and arrays alone and 90 ms for JSON.parse).
 */
export function pageOverBounds(text: string, max: PageBounds): keyof PageBounds | undefined {
  let containers = 0;
  const keys = new DistinctText(text);
  const strings = new DistinctText(text);
  const length = text.length;
  for (let i = 0; i < length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x7b || c === 0x5b) {
      if (++containers > max.containers) return 'containers';
      continue;
    }
    if (c !== 0x22) continue;
    const end = stringEnd(text, i);
    const start = i + 1;
    const size = end - start;
    i = end;
    let next = end + 1;
    let after = text.charCodeAt(next);
    while (after === 0x20 || after === 0x0a || after === 0x0d || after === 0x09) after = text.charCodeAt(++next);
    if (after === 0x3a) {
      if (!isIndexKey(text, start, end) && keys.add(start, end) > max.keys) return 'keys';
    } else if ((size <= SHORT_STRING || (size <= SHORT_STRING_TEXT && hasBackslash(text, start, end))) && strings.add(start, end) > max.shortStrings) {
      return 'shortStrings';
    }
  }
  return undefined;
}

/** A hash seed of this process: which texts share a slot cannot be known from outside. */
const SEED = randomBytes(4).readInt32LE(0);
/**
 * Slots probed for a text before it is counted as one more without being kept: a run of texts
 * sharing slots that long does not happen by chance in a table never half full, and counting too
 * many only refuses such a page.
 */
const MAX_PROBES = 1024;

/**
 * The distinct strings of one text, each kept as where it is (start and end in an open-addressing
 * table, never half full), compared in place. `add` gives how many there are.
 */
class DistinctText {
  #starts = new Int32Array(1024);
  #ends = new Int32Array(1024);
  #hashes = new Int32Array(1024);
  #kept = 0;
  #count = 0;
  constructor(readonly text: string) {}

  add(start: number, end: number): number {
    const text = this.text;
    const size = end - start;
    let h = SEED ^ size;
    for (let at = start; at < end; at++) h = Math.imul(h ^ text.charCodeAt(at), 0x01000193);
    h ^= h >>> 16;
    h = Math.imul(h, 0x85ebca6b);
    h ^= h >>> 13;
    const mask = this.#starts.length - 1;
    for (let probe = 0, slot = h & mask; probe < MAX_PROBES; probe++, slot = (slot + 1) & mask) {
      const at = this.#ends[slot]!;
      if (at === 0) {
        this.#starts[slot] = start;
        this.#ends[slot] = end;
        this.#hashes[slot] = h;
        if (++this.#kept * 2 > mask) this.#grow();
        return ++this.#count;
      }
      if (this.#hashes[slot] === h && at - this.#starts[slot]! === size && sameText(text, this.#starts[slot]!, start, size)) return this.#count;
    }
    return ++this.#count;
  }

  #grow(): void {
    const [starts, ends, hashes] = [this.#starts, this.#ends, this.#hashes];
    const size = starts.length * 2;
    const mask = size - 1;
    this.#starts = new Int32Array(size);
    this.#ends = new Int32Array(size);
    this.#hashes = new Int32Array(size);
    for (let i = 0; i < starts.length; i++) {
      if (ends[i] === 0) continue;
      let slot = hashes[i]! & mask;
      while (this.#ends[slot] !== 0) slot = (slot + 1) & mask;
      this.#starts[slot] = starts[i]!;
      this.#ends[slot] = ends[i]!;
      this.#hashes[slot] = hashes[i]!;
    }
  }
}

/** Whether text holds the same `size` characters at `a` and at `b`. */
function sameText(text: string, a: number, b: number, size: number): boolean {
  for (let k = 0; k < size; k++) if (text.charCodeAt(a + k) !== text.charCodeAt(b + k)) return false;
  return true;
}

/** Whether text[start, end) is an integer key V8 keeps as an array index (0, or up to 9 digits not starting with 0). */
function isIndexKey(text: string, start: number, end: number): boolean {
  const size = end - start;
  if (size === 0 || size > 9 || (text.charCodeAt(start) === 0x30 && size > 1)) return false;
  for (let at = start; at < end; at++) {
    const d = text.charCodeAt(at);
    if (d < 0x30 || d > 0x39) return false;
  }
  return true;
}

function hasBackslash(text: string, start: number, end: number): boolean {
  for (let at = start; at < end; at++) if (text.charCodeAt(at) === 0x5c) return true;
  return false;
}

/** Where the string opened at `open` ends (its closing quote), or the end of the text. */
function stringEnd(text: string, open: number): number {
  let at = open;
  for (;;) {
    at = text.indexOf('"', at + 1);
    if (at < 0) return text.length;
    let backslashes = 0;
    while (text.charCodeAt(at - 1 - backslashes) === 0x5c) backslashes++;
    if (backslashes % 2 === 0) return at;
  }
}

/**
 * `JSON.stringify` for values read by `parseJsonExact`: a bigint is written as its digits, an
 * ExactNumber as its text, each a JSON number.
 */
export function jsonText(value: unknown, indent?: number): string {
  let found = false;
  const text = JSON.stringify(
    value,
    function (this: Record<string, unknown>, key, v: unknown) {
      // An ExactNumber's toJSON has made it a string already: the holder has it as it is.
      if (typeof v !== 'bigint' && !(typeof v === 'string' && this[key] instanceof ExactNumber)) return v;
      found = true;
      return `${MARK}${v}`;
    },
    indent,
  );
  return found ? text.replace(MARKED, '$1') : text;
}

/**
 * A copy with each bigint and ExactNumber as its text in a string, for answers that go through
 * `JSON.stringify` (previews): a JSON number there would be read back rounded by most clients.
 */
export function exactNumbersAsText(value: unknown): unknown {
  if (typeof value === 'bigint' || value instanceof ExactNumber) return String(value);
  if (typeof value !== 'object' || value === null) return value;
  if (Array.isArray(value)) return value.map(exactNumbersAsText);
  const out: Record<string, unknown> = {};
  for (const [key, child] of Object.entries(value as Record<string, unknown>)) out[key] = exactNumbersAsText(child);
  return out;
}

/** A number's text as sign, significant digits and the power of ten of the point before them (0.digits × 10^exp). */
function decimalOf(text: string): { sign: number; digits: string; exp: bigint } | undefined {
  const m = /^([+-]?)(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?$/.exec(text.trim());
  if (!m || (m[2] === '' && !m[3])) return undefined;
  const all = m[2]! + (m[3] ?? '');
  const lead = all.search(/[1-9]/);
  if (lead < 0) return { sign: 0, digits: '', exp: 0n };
  return { sign: m[1] === '-' ? -1 : 1, digits: all.slice(lead).replace(/0+$/, ''), exp: BigInt(m[4] ?? 0) + BigInt(m[2]!.length - lead) };
}

/**
 * A whole number's text as its digits (`9007199254740993.0` and `9.007199254740993e15` as
 * `9007199254740993`, `-0.0` as `0`); undefined when the text has a fraction or is no number, null
 * when the number has more than `maxDigits` digits (never written out: `1e999999999`).
 */
export function wholeDigits(text: string, maxDigits: number): string | null | undefined {
  const decimal = decimalOf(text);
  if (!decimal) return undefined;
  if (decimal.sign === 0) return '0';
  if (BigInt(decimal.digits.length) > decimal.exp) return undefined;
  if (decimal.exp > BigInt(maxDigits)) return null;
  return `${decimal.sign < 0 ? '-' : ''}${decimal.digits}${'0'.repeat(Number(decimal.exp) - decimal.digits.length)}`;
}

/**
 * Two numbers compared exactly, each a number, a bigint, an ExactNumber or a number's text
 * (`1e400`, `-2.5E-400`, `12345678901234567890`): negative, zero or positive as `a` is below, equal
 * to or above `b`; undefined when either is no number (NaN, ±Infinity, text of no number).
 */
export function compareNumbers(a: unknown, b: unknown): number | undefined {
  if ((typeof a === 'number' || typeof a === 'bigint') && (typeof b === 'number' || typeof b === 'bigint')) {
    if (typeof a === 'number' && !Number.isFinite(a)) return undefined;
    if (typeof b === 'number' && !Number.isFinite(b)) return undefined;
    return a < b ? -1 : a > b ? 1 : 0;
  }
  const x = decimalOf(String(a));
  const y = decimalOf(String(b));
  if (!x || !y) return undefined;
  if (x.sign !== y.sign) return x.sign < y.sign ? -1 : 1;
  // The same sign: the magnitudes, by the power of ten first, then digit by digit.
  const magnitude = x.exp !== y.exp ? (x.exp < y.exp ? -1 : 1) : x.digits < y.digits ? -1 : x.digits > y.digits ? 1 : 0;
  return x.sign * magnitude;
}

/**
 * Whether PostgreSQL's numeric (and so a jsonb number) holds the number `text`: at most 131,072 digits
 * before the point and 16,383 after it as written (`1e131071` and `1e-16383` are the extremes;
 * beyond, PostgreSQL refuses the value: "value overflows numeric format").
 */
export function fitsNumeric(text: string): boolean {
  // Without an exponent, only text longer than the digits after the point may hold is out of range.
  if (text.length <= 16_383 && !/[eE]/.test(text)) return true;
  const m = /^[+-]?(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?$/.exec(text.trim());
  if (!m || (m[1] === '' && !m[2])) return false;
  const exp = BigInt(m[3] ?? 0);
  const scale = BigInt((m[2] ?? '').length) - exp;
  if (scale > 16_383n) return false;
  const decimal = decimalOf(text);
  return decimal === undefined || decimal.exp <= 131_072n;
}
