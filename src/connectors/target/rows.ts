import * as crypto from 'node:crypto';
import { queryFirst as readPath } from '../jsonpath.js';
import type { Promote, PromoteType, Target } from '../types.js';
import { ISO_DATE_START, parseIsoTimestamp, parseRfcTimestamp, timestampFromMillis } from './timestamp.js';
import { ExactNumber, jsonText, wholeDigits } from '../engine/exact-json.js';
import { findUnstorableText, MAX_JSON_DEPTH, UNSTORABLE_ESCAPE, unstorableText } from '../../validation/input-limits.js';

/** One source item made ready for its ext.* table. */
export interface PreparedRow {
  /** undefined when unique_key resolves to nothing: the row cannot be stored. */
  externalId: string | undefined;
  data: unknown;
  /** `data` as canonical JSON text (what row_hash is computed over; the writer sends it as is). */
  json: string;
  rowHash: string;
  /** Promoted column -> text form of the typed value, or null (absent, or failed its type/transform). */
  promoted: Record<string, string | null>;
  /** Promoted values that failed their type or transform (kept as NULL; the payload stays intact). */
  rejects: Array<{ column: string; value: unknown; reason: string }>;
  /**
   * Set when the record nests deeper than MAX_JSON_DEPTH: it is not stored (dead-lettered
   * `unstorable` with this reason), and `json` and `rowHash` are empty, no key or promoted value read.
   */
  tooDeep?: string;
}

/**
 * Each key's JSON text with its colon (`"name":`), for the keys seen so far: rows of one source
 * share their keys, and quoting a key is a good part of `canonicalJson`'s work. Bounded: past
 * QUOTED_KEYS distinct keys, new ones are quoted each time.
 */
const quotedKeys = new Map<string, string>();
const QUOTED_KEYS = 10_000;

/** A value nests objects and arrays deeper than MAX_JSON_DEPTH: canonicalJson stops there. */
export class TooDeepError extends Error {
  constructor() {
    super(`nests objects and arrays deeper than ${MAX_JSON_DEPTH} levels`);
    this.name = 'TooDeepError';
  }
}

/**
 * JSON with object keys sorted at every level: the same payload always hashes the same. A value
 * nesting objects and arrays deeper than MAX_JSON_DEPTH (the value itself is level 1) throws
 * TooDeepError: the recursion is bounded by the cap whatever a source sends (a record of 10,000
 * levels would exhaust the stack), and the walk that writes the text is the one that counts.
 */
export function canonicalJson(value: unknown, depth = 1): string {
  // Loops rather than map/filter/join: this runs for every ingested row (twice the throughput).
  // An integer beyond ±(2^53 − 1), read exactly (engine/exact-json.ts): its digits, a JSON number.
  if (typeof value === 'bigint') return String(value);
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  // A number past a double's range, read exactly: its text as the source wrote it, a JSON number.
  if (value instanceof ExactNumber) return value.toString();
  if (depth > MAX_JSON_DEPTH) throw new TooDeepError();
  if (Array.isArray(value)) {
    let out = '[';
    for (let i = 0; i < value.length; i++) out += (i === 0 ? '' : ',') + canonicalJson(value[i], depth + 1);
    return `${out}]`;
  }
  const object = value as Record<string, unknown>;
  let keys = Object.keys(object);
  // Sorted already (many sources write their keys in order): no sort.
  for (let i = 1; i < keys.length; i++) {
    if (keys[i - 1]! > keys[i]!) {
      keys = sortedKeys(keys, depth);
      break;
    }
  }
  let out = '{';
  let first = true;
  for (let i = 0; i < keys.length; i++) {
    const k = keys[i]!;
    const v = object[k];
    if (v === undefined) continue;
    let quoted = quotedKeys.get(k);
    if (quoted === undefined) {
      quoted = `${JSON.stringify(k)}:`;
      if (quotedKeys.size < QUOTED_KEYS) quotedKeys.set(k, quoted);
    }
    if (!first) out += ',';
    out += quoted;
    out += typeof v === 'string' ? JSON.stringify(v) : canonicalJson(v, depth + 1);
    first = false;
  }
  return `${out}}`;
}

/**
 * The last out-of-order key list met at each depth and its sorted copy: the rows of one source share
 * their shape, so the same keys in the same order come again and again, and comparing them with the
 * last list is cheaper than sorting them (the sort was about a third of canonicalJson's time on rows
 * of a few fields). Any other list is sorted and becomes the one kept for its depth.
 */
const lastShapes: Array<{ keys: string[]; sorted: string[] } | undefined> = [];
/** The most keys of an object whose order lastShapes keeps. */
const SHAPE_KEYS = 1_000;

function sortedKeys(keys: string[], depth: number): string[] {
  const last = lastShapes[depth];
  if (last !== undefined && last.keys.length === keys.length) {
    let same = true;
    for (let i = 0; i < keys.length; i++) {
      if (last.keys[i] !== keys[i]) {
        same = false;
        break;
      }
    }
    if (same) return last.sorted;
  }
  const sorted = [...keys].sort();
  // An object of very many keys is not kept: it is not a row shape that comes again.
  lastShapes[depth] = keys.length <= SHAPE_KEYS ? { keys, sorted } : undefined;
  return sorted;
}

export function rowHash(item: unknown): string {
  return hashOf(canonicalJson(item));
}

/**
 * SHA-256 of the text, hex. Node's one-shot `crypto.hash` (Node 20.12 and later) is about three
 * times as fast as a Hash object on rows of a few hundred bytes, and this runs for every ingested
 * row; older Node versions take the Hash object. Both give the same digest.
 */
const hashOf: (json: string) => string =
  typeof (crypto as { hash?: unknown }).hash === 'function'
    ? (json) => (crypto as unknown as { hash(algorithm: string, data: string, encoding: 'hex'): string }).hash('sha256', json, 'hex')
    : (json) => crypto.createHash('sha256').update(json).digest('hex');

/**
 * A record's key: what `uniqueKey` reads from it as text, undefined when that is nothing (absent,
 * null, empty, an object or array). A number past a double's range is its text as written (`1e400`).
 */
export function externalIdOf(item: unknown, uniqueKey: string): string | undefined {
  const key = readPath(item, uniqueKey);
  return key === undefined || key === null || key === '' || (typeof key === 'object' && !(key instanceof ExactNumber)) ? undefined : String(key);
}

/**
 * What is wrong with a record's key when externalIdOf finds none but it is there, as its `missing_key` dead letter
 * says it; undefined when it is not there. A SOAP record (`soap`) is a projection of XML: a key element written more
 * than once reads as an array of its texts, one with attributes or children as an object. Only for records without
 * a key (never on the rows' path).
 */
export function keyProblem(item: unknown, uniqueKey: string, soap: boolean): string | undefined {
  const key = readPath(item, uniqueKey);
  if (Array.isArray(key)) return soap ? `unique_key ${uniqueKey}: the key element appears ${key.length} times in the record, and a record needs exactly one` : `unique_key ${uniqueKey} is an array, not one value`;
  if (key === null) return `unique_key ${uniqueKey} is null`;
  if (key === '') return `unique_key ${uniqueKey} is empty`;
  if (typeof key === 'object') return soap ? `unique_key ${uniqueKey}: the key element has attributes or children, not just a text` : `unique_key ${uniqueKey} is an object, not one value`;
  return undefined;
}

/** The reason a record without a key (externalIdOf undefined) is dead-lettered `missing_key` for. */
export function missingKeyReason(item: unknown, uniqueKey: string, soap: boolean): string {
  return `${keyProblem(item, uniqueKey, soap) ?? `unique_key ${uniqueKey} resolves to nothing`}; the row cannot be stored`;
}

export function prepareRow(item: unknown, target: Target): PreparedRow {
  // First, so that a record too deep to store is never walked further (a JSONPath with `..`, a
  // promoted object's text): it is dead-lettered as it is.
  let json: string;
  try {
    json = canonicalJson(item);
  } catch (err) {
    if (!(err instanceof TooDeepError)) throw err;
    return { externalId: undefined, data: item, json: '', rowHash: '', promoted: {}, rejects: [], tooDeep: err.message };
  }
  const externalId = externalIdOf(item, target.unique_key);
  const promoted: Record<string, string | null> = {};
  const rejects: PreparedRow['rejects'] = [];
  for (const p of target.promote) {
    const raw = readPath(item, p.path);
    const result = coerce(p, raw);
    promoted[p.name] = result.value;
    if (result.reason) rejects.push({ column: p.name, value: raw, reason: result.reason });
  }
  return { externalId, data: item, json, rowHash: hashOf(json), promoted, rejects };
}

/**
 * Why a prepared row (with its key, not too deep) cannot be stored as it is, text PostgreSQL refuses,
 * or undefined: what a run dead-letters it `unstorable` for (`$.name contains a NUL character`), and
 * what a pre-flight warns of.
 */
export function unstorableRow(row: PreparedRow): string | undefined {
  // The row's key and promoted values are made from its payload (no transform makes such text from
  // text without it), and every string of the payload is in its canonical JSON: a row whose JSON
  // shows no such escape is storable, and nothing more is looked at (most rows).
  // A row's canonical JSON (JSON.stringify of every key and string) writes a NUL or an unpaired surrogate as an
  // escape: text without one has neither, so the walk that names the field runs only for rows that match (it ran for
  // every row: ≈ 15 % of `prepareRow`'s time on the demo rows; the scan of the text costs about a tenth of it).
  if (!UNSTORABLE_ESCAPE.test(row.json)) return undefined;
  const key = unstorableText(row.externalId ?? '');
  if (key) return asBytes(row, `its key ${key}`);
  const found = findUnstorableText(row.data, '$', Number.POSITIVE_INFINITY);
  if (found) return asBytes(row, `${found.field} ${found.reason}`);
  for (const [column, value] of Object.entries(row.promoted)) {
    const why = value === null ? undefined : unstorableText(value);
    if (why) return asBytes(row, `promoted column ${column} ${why}`);
  }
  return undefined;
}

/** An unpaired surrogate U+DC80 to U+DCFF as canonical JSON writes it: how a byte of a page that is not valid UTF-8 reads (../engine/http.ts readPageText). */
const ESCAPED_BYTE = /\\udc[89a-f][0-9a-f]/i;

/** The reason, naming bytes that are not valid UTF-8 for what they are when the row holds them. */
function asBytes(row: PreparedRow, why: string): string {
  return ESCAPED_BYTE.test(row.json) ? why.replace('contains an unpaired UTF-16 surrogate', 'holds bytes that are not valid UTF-8 (read as unpaired surrogates U+DC80 to U+DCFF)') : why;
}

function coerce(p: Promote, raw: unknown): { value: string | null; reason?: string } {
  if (raw === undefined || raw === null) return { value: null };
  let value: unknown = raw;
  switch (p.transform) {
    case 'parse_iso8601': {
      const instant = typeof raw === 'string' ? parseIsoTimestamp(raw.trim()) : undefined;
      if (instant === undefined) return { value: null, reason: 'parse_iso8601: not an ISO-8601 timestamp' };
      value = instant;
      // Already what `typed` would make of it (it would parse the text just made a second time).
      if (p.type === 'timestamptz') return { value: value as string };
      break;
    }
    case 'trim':
      value = typeof raw === 'string' ? raw.trim() : raw;
      break;
    case 'lowercase':
      value = typeof raw === 'string' ? raw.toLowerCase() : raw;
      break;
    case 'uppercase':
      value = typeof raw === 'string' ? raw.toUpperCase() : raw;
      break;
    case 'to_string':
      value = typeof raw === 'object' ? jsonText(raw) : String(raw);
      break;
    default:
      break;
  }
  return typed(p.type, value);
}

function typed(type: PromoteType, value: unknown): { value: string | null; reason?: string } {
  switch (type) {
    case 'text':
      return { value: typeof value === 'object' ? jsonText(value) : String(value) };
    case 'bigint': {
      // The common case, a whole number JSON gave as a number, needs neither the pattern nor BigInt.
      if (typeof value === 'number' && Number.isSafeInteger(value)) return { value: String(value) };
      // A number read exactly (engine/exact-json.ts): past a double's range (far beyond a bigint, or a
      // fraction near 0), or beyond 2^53 written with a fraction or an exponent (`9007199254740993.0`).
      let text: string;
      if (value instanceof ExactNumber) {
        const whole = wholeDigits(String(value), 20);
        if (whole === null) return { value: null, reason: 'bigint: out of range' };
        text = whole ?? '';
      } else text = typeof value === 'number' ? (Number.isInteger(value) ? String(value) : '') : String(value).trim();
      if (!/^-?\d{1,19}$/.test(text)) return { value: null, reason: 'bigint: not a whole number' };
      const n = BigInt(text);
      if (n > 9223372036854775807n || n < -9223372036854775808n) return { value: null, reason: 'bigint: out of range' };
      return { value: text };
    }
    case 'numeric': {
      // Any number's text, exactly: `1e400` too (from a source's JSON, or a text). One past what the
      // column holds (`1e200000`) is refused by PostgreSQL, and its row dead-lettered.
      const text = typeof value === 'number' ? String(value) : String(value).trim();
      if (!/^-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(text)) return { value: null, reason: 'numeric: not a number' };
      return { value: text };
    }
    case 'boolean': {
      if (typeof value === 'boolean') return { value: String(value) };
      const text = String(value).trim().toLowerCase();
      if (['true', 't', '1', 'yes'].includes(text)) return { value: 'true' };
      if (['false', 'f', '0', 'no'].includes(text)) return { value: 'false' };
      return { value: null, reason: 'boolean: not true or false' };
    }
    case 'timestamptz': {
      // Text is read strictly, the same on every machine (timestamp.ts): ISO 8601 / RFC 3339, or
      // an RFC 5322 / HTTP date with its zone; a number is milliseconds since the epoch.
      if (typeof value === 'string') {
        const text = value.trim();
        const instant = ISO_DATE_START.test(text) ? parseIsoTimestamp(text) : parseRfcTimestamp(text);
        return instant === undefined ? { value: null, reason: 'timestamptz: not a timestamp (ISO 8601, or an RFC 5322 date with its zone)' } : { value: instant };
      }
      if (typeof value !== 'number') return { value: null, reason: 'timestamptz: not a timestamp' };
      const instant = timestampFromMillis(value);
      return instant === undefined ? { value: null, reason: 'timestamptz: milliseconds outside the years 1 to 9999' } : { value: instant };
    }
  }
}
