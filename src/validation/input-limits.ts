import { ExactNumber, fitsNumeric } from '../connectors/engine/exact-json.js';
import { joinField } from './schema-errors.js';

/**
 * Limits every input of the hub shares: how deep a JSON or YAML document may nest, and text that
 * PostgreSQL cannot store (a NUL character, or half of a UTF-16 surrogate pair). The HTTP body
 * parser, the manifest validators and the connector runner all use these, so a document one of
 * them accepts the others accept too.
 */

/** Deepest nesting of objects and arrays in any body or manifest (the document itself is level 1). */
export const MAX_JSON_DEPTH = 64;

/**
 * Most bytes of a JSON or YAML body, as sent (every route but the CSV ingest, which reads up to
 * `svc.http.body-limit`), and of the JSON a YAML body reads as. What the hub does with such a body runs
 * on the event loop every tenant shares and grows with its size whatever the caps below: a 10 MB body
 * built to be slow (five million numbers in an array, two and a half million empty strings) held it
 * 0.3 to 0.6 s, about twice what `JSON.parse` alone takes of it; 1 MiB holds it some tens of
 * milliseconds. A manifest, the largest body an API route takes, is a few kilobytes to some hundreds,
 * and its YAML is read up to the same 1 MiB.
 */
export const MAX_JSON_BODY_BYTES = 1024 * 1024;

/**
 * Most objects and arrays in one body (JSON, or YAML once read). Parsing a body and walking it (the
 * checks below, a manifest's validation) run on the event loop every tenant shares, at about a
 * microsecond per object: a 10 MB body of three million `{}` held it for seconds. A manifest holds a
 * few thousand at most.
 */
export const MAX_JSON_CONTAINERS = 50_000;

/**
 * Most object keys in one body, all objects together: one object of 880,000 keys is one container, and
 * the checks that read every key (a warning per unknown key, the duplicate-key count) held the event
 * loop for seconds on it.
 */
export const MAX_JSON_KEYS = 50_000;

/**
 * What JSON text holds more of than a body may (scanJsonText's counts): `holds more than 50,000 objects
 * and arrays (<n>)` or `… keys (<n>)`, completing a sentence about the text; undefined when it holds less.
 */
export function overJsonLimits(scanned: { containers: number; keys: number }): string | undefined {
  const n = (count: number) => count.toLocaleString('en-US');
  if (scanned.containers > MAX_JSON_CONTAINERS) return `holds more than ${n(MAX_JSON_CONTAINERS)} objects and arrays (${n(scanned.containers)})`;
  if (scanned.keys > MAX_JSON_KEYS) return `holds more than ${n(MAX_JSON_KEYS)} keys (${n(scanned.keys)})`;
  return undefined;
}

/**
 * Where a piece of `text` that starts at `at` and holds at most `chars` characters ends: never between the two halves
 * of a surrogate pair, as each piece of a text written in pieces is encoded to UTF-8 on its own (half a pair is
 * encoded as U+FFFD).
 */
export function pieceEnd(text: string, at: number, chars: number): number {
  const end = Math.min(at + chars, text.length);
  const last = text.charCodeAt(end - 1);
  return end < text.length && end - 1 > at && last >= 0xd800 && last <= 0xdbff ? end - 1 : end;
}

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
const LONE_SURROGATES = new RegExp(LONE_SURROGATE.source, 'g');

/** A NUL or a lone surrogate as JSON text writes it (an escape; JSON.stringify escapes lone surrogates). */
export const UNSTORABLE_ESCAPE = /\\u0000|\\ud[89a-f][0-9a-f]{2}/i;

/**
 * Whether JSON text may give, once parsed, text PostgreSQL cannot store: it writes an escape of a NUL or
 * of a surrogate, or holds one as it is. Text without them gives none, so a parsed body is walked for
 * the field to name only when this is true (an escaped backslash before `u0000` is walked and found
 * storable).
 */
export function jsonTextMayHoldUnstorable(text: string): boolean {
  return UNSTORABLE_ESCAPE.test(text) || unstorableText(text) !== undefined;
}

/** Why a text cannot be stored as PostgreSQL text or jsonb, or undefined when it can. */
export function unstorableText(text: string): string | undefined {
  if (text.includes('\u0000')) return 'contains a NUL character (\\u0000)';
  if (LONE_SURROGATE.test(text)) return 'contains an unpaired UTF-16 surrogate';
  return undefined;
}

/**
 * The first place in a parsed document holding text PostgreSQL cannot store, in a key or a string
 * value at any depth: `{field, reason}` with the field as a path under `root`
 * (`body.spec.name`, `body.items[2]`), or undefined. Walks at most `maxDepth` levels. Only objects
 * and arrays are stacked, each with its parent and key, and a field's path is written only for what
 * it names (the walk of a large document writes none).
 */
export function findUnstorableText(value: unknown, root: string, maxDepth = MAX_JSON_DEPTH): { field: string; reason: string } | undefined {
  if (typeof value === 'string') {
    const reason = unstorableText(value);
    return reason ? { field: root, reason } : undefined;
  }
  if (typeof value !== 'object' || value === null) return undefined;
  if (!Array.isArray(value)) {
    const flat = flatUnstorableText(value as Record<string, unknown>, root);
    if (flat !== NOT_FLAT) return flat;
  }
  // Depth first in document order: each frame is an object or array being read, with where it is in it.
  type Frame = { value: object; keys: string[] | undefined; next: number; parent: Frame | undefined; key: string | number; depth: number };
  const pathOf = (frame: Frame, last: string | number): string => {
    const keys: Array<string | number> = [last];
    for (let f: Frame | undefined = frame; f?.parent; f = f.parent) keys.push(f.key);
    let field = root;
    for (let i = keys.length - 1; i >= 0; i--) {
      const key = keys[i]!;
      field = typeof key === 'number' ? `${field}[${key}]` : joinField(field, key);
    }
    return field;
  };
  const seen = new Set<object>([value]);
  const open = (v: object, parent: Frame | undefined, key: string | number, depth: number): Frame => ({ value: v, keys: Array.isArray(v) ? undefined : Object.keys(v), next: 0, parent, key, depth });
  const stack: Frame[] = [open(value, undefined, '', 0)];
  while (stack.length) {
    const frame = stack[stack.length - 1]!;
    const length = frame.keys ? frame.keys.length : (frame.value as unknown[]).length;
    if (frame.next >= length) {
      stack.pop();
      continue;
    }
    const at = frame.next++;
    let key: string | number = at;
    let child: unknown;
    if (frame.keys) {
      key = frame.keys[at]!;
      const keyReason = unstorableText(key);
      // Such a key is named quoted, with JSON's escapes: `body["k\u0000"]`.
      if (keyReason) return { field: pathOf(frame, key), reason: `has a key that ${keyReason}` };
      child = (frame.value as Record<string, unknown>)[key];
    } else child = (frame.value as unknown[])[at];
    if (typeof child === 'string') {
      const reason = unstorableText(child);
      if (reason) return { field: pathOf(frame, key), reason };
    } else if (typeof child === 'object' && child !== null && frame.depth < maxDepth && !seen.has(child)) {
      seen.add(child);
      stack.push(open(child, frame, key, frame.depth + 1));
    }
  }
  return undefined;
}

const NOT_FLAT = Symbol('not flat');

/**
 * `findUnstorableText` of an object holding no object or array (a request's path parameters and
 * query: every request reads both), in the same order and naming the same fields, without the
 * walk's frames; NOT_FLAT, having found nothing, at its first object or array value.
 */
function flatUnstorableText(value: Record<string, unknown>, root: string): { field: string; reason: string } | undefined | typeof NOT_FLAT {
  for (const key of Object.keys(value)) {
    const keyReason = unstorableText(key);
    if (keyReason) return { field: joinField(root, key), reason: `has a key that ${keyReason}` };
    const child = value[key];
    if (typeof child === 'string') {
      const reason = unstorableText(child);
      if (reason) return { field: joinField(root, key), reason };
    } else if (typeof child === 'object' && child !== null) return NOT_FLAT;
  }
  return undefined;
}

/** JSON's insignificant whitespace: space, tab, line feed, carriage return. */
const isJsonSpace = (c: number) => c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d;

/**
 * One pass over JSON text without parsing it (so a document of a million brackets costs one pass
 * and no stack): whether it nests objects and arrays deeper than `max` (it stops there), how many
 * object keys it writes (a string followed by `:`), duplicates included, and how many objects and
 * arrays it opens.
 */
export function scanJsonText(text: string, max = MAX_JSON_DEPTH): { tooDeep: boolean; keys: number; containers: number } {
  let depth = 0;
  let keys = 0;
  let containers = 0;
  let inString = false;
  let afterString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++; // backslash: skip the escaped character
      else if (c === 0x22) {
        inString = false;
        afterString = true;
      }
      continue;
    }
    if (isJsonSpace(c)) continue;
    if (afterString) {
      afterString = false;
      if (c === 0x3a) {
        keys++;
        continue;
      }
    }
    if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      containers++;
      if (++depth > max) return { tooDeep: true, keys, containers };
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return { tooDeep: false, keys, containers };
}

/** How many keys the objects of a parsed JSON document hold, all levels together. */
function keysHeld(value: unknown): number {
  let count = 0;
  const stack: unknown[] = [value];
  while (stack.length) {
    const v = stack.pop();
    if (typeof v !== 'object' || v === null) continue;
    if (Array.isArray(v)) {
      for (const child of v) if (typeof child === 'object' && child !== null) stack.push(child);
      continue;
    }
    // Keys, then each value: Object.values of an object of many keys costs several times as much.
    const keys = Object.keys(v);
    count += keys.length;
    for (const key of keys) {
      const child = (v as Record<string, unknown>)[key];
      if (typeof child === 'object' && child !== null) stack.push(child);
    }
  }
  return count;
}

/**
 * The first key written twice in one object of JSON `text` (which parsed as `value`), as a path under
 * `root` (`body.spec.name`), or undefined. `JSON.parse` keeps the last of such keys without a word;
 * YAML readers and Kubernetes' strict field validation refuse them. `keysWritten` is
 * scanJsonText's count: when the parsed document holds as many keys, there is no duplicate and the
 * text is not read again.
 */
export function duplicateJsonKey(text: string, value: unknown, keysWritten: number, root: string): string | undefined {
  if (keysHeld(value) === keysWritten) return undefined;
  type Frame = { field: string; keys?: Set<string>; index: number; key?: string };
  const stack: Frame[] = [];
  const childField = (frame: Frame | undefined) =>
    frame === undefined ? root : frame.keys ? joinField(frame.field, frame.key ?? '') : `${frame.field}[${frame.index}]`;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    const top = stack[stack.length - 1];
    if (c === 0x22) {
      const start = i;
      for (i++; i < text.length; i++) {
        const d = text.charCodeAt(i);
        if (d === 0x5c) i++;
        else if (d === 0x22) break;
      }
      let j = i + 1;
      while (j < text.length && isJsonSpace(text.charCodeAt(j))) j++;
      if (top?.keys && text.charCodeAt(j) === 0x3a) {
        const raw = text.slice(start, i + 1);
        const key = raw.includes('\\') ? (JSON.parse(raw) as string) : raw.slice(1, -1);
        if (top.keys.has(key)) return joinField(top.field, key);
        top.keys.add(key);
        top.key = key;
        i = j;
      }
    } else if (c === 0x7b || c === 0x5b) {
      stack.push({ field: childField(top), index: 0, ...(c === 0x7b ? { keys: new Set<string>() } : {}) });
    } else if (c === 0x7d || c === 0x5d) stack.pop();
    else if (c === 0x2c && top && !top.keys) top.index++;
  }
  return undefined;
}

/**
 * The nesting depth of a parsed value, up to `max + 1` (it stops looking there): scalars are 0, `{}`
 * and `[]` are 1. Shared references (YAML aliases) are measured at their deepest use, each at most
 * `max` times.
 */
export function depthOf(value: unknown, max = MAX_JSON_DEPTH): number {
  let deepest = 0;
  const stack: Array<{ value: unknown; depth: number }> = [{ value, depth: 1 }];
  const reached = new Map<object, number>();
  while (stack.length) {
    const { value: v, depth } = stack.pop()!;
    if (typeof v !== 'object' || v === null || v instanceof ExactNumber) continue;
    if (depth > max) return max + 1;
    if ((reached.get(v) ?? 0) >= depth) continue;
    reached.set(v, depth);
    if (depth > deepest) deepest = depth;
    const push = (child: unknown) => {
      if (typeof child === 'object' && child !== null) stack.push({ value: child, depth: depth + 1 });
    };
    if (Array.isArray(v)) v.forEach(push);
    else for (const key of Object.keys(v)) push((v as Record<string, unknown>)[key]);
  }
  return deepest;
}

/**
 * Whether a parsed value holds more objects and arrays, or more keys in all its objects, than a body may
 * (MAX_JSON_CONTAINERS, MAX_JSON_KEYS): `holds more than 50,000 objects and arrays` or `… keys`,
 * completing a sentence about the value; undefined when it holds less. For a document that did not come
 * through the HTTP body parser (a custom resource the operator applies). It stops at one past the limit
 * (so no count is given): a value whose parts are shared (YAML aliases) or that contains itself is
 * walked no further than that.
 */
export function overValueLimits(value: unknown): string | undefined {
  let containers = 0;
  let keys = 0;
  const stack: unknown[] = [value];
  while (stack.length) {
    const v = stack.pop();
    if (typeof v !== 'object' || v === null || v instanceof ExactNumber) continue;
    if (++containers > MAX_JSON_CONTAINERS) return `holds more than ${MAX_JSON_CONTAINERS.toLocaleString('en-US')} objects and arrays`;
    if (Array.isArray(v)) {
      for (const child of v) stack.push(child);
      continue;
    }
    for (const key of Object.keys(v)) {
      if (++keys > MAX_JSON_KEYS) return `holds more than ${MAX_JSON_KEYS.toLocaleString('en-US')} keys`;
      stack.push((v as Record<string, unknown>)[key]);
    }
  }
  return undefined;
}

/**
 * A copy of `value` down to `max` levels (the value itself is level 1): each object or array below
 * that becomes `marker` (a text saying so). Without recursion, so that a document of any depth can
 * be cut. For keeping a record too deep to store (a dead letter's payload, and reading its key from
 * what is kept), never for data.
 */
export function cutDeeperThan(value: unknown, max: number, marker: unknown): unknown {
  const root: { value: unknown } = { value: undefined };
  const stack: Array<{ from: unknown; into: Record<string, unknown> | unknown[]; key: string | number; depth: number }> = [{ from: value, into: root as Record<string, unknown>, key: 'value', depth: 1 }];
  while (stack.length) {
    const { from, into, key, depth } = stack.pop()!;
    let copy: unknown = from;
    if (typeof from === 'object' && from !== null && !(from instanceof ExactNumber)) {
      if (depth > max) copy = marker;
      else if (Array.isArray(from)) {
        const array: unknown[] = new Array(from.length);
        for (let i = 0; i < from.length; i++) stack.push({ from: from[i], into: array, key: i, depth: depth + 1 });
        copy = array;
      } else {
        const object: Record<string, unknown> = {};
        for (const [k, child] of Object.entries(from as Record<string, unknown>)) {
          object[k] = undefined; // the source's key order
          stack.push({ from: child, into: object, key: k, depth: depth + 1 });
        }
        copy = object;
      }
    }
    (into as Record<string | number, unknown>)[key] = copy;
  }
  return root.value;
}

/**
 * A text PostgreSQL can store: NUL characters and unpaired surrogates become U+FFFD (a text column
 * refuses a NUL, a JSON document either); the text itself when it holds neither.
 */
export function storableText(text: string): string {
  return unstorableText(text) ? text.replaceAll('\u0000', '\ufffd').replace(LONE_SURROGATES, '\ufffd') : text;
}

/**
 * A copy of a document PostgreSQL can store: NUL characters and unpaired surrogates in keys and
 * string values become U+FFFD, and a number past what a jsonb number holds (`1e200000`) its text in
 * a string. For keeping what could not be stored (dead letters), never for data.
 */
export function toStorable(value: unknown): unknown {
  if (typeof value === 'string') return storableText(value);
  if (typeof value !== 'object' || value === null) return value;
  if (value instanceof ExactNumber) return fitsNumeric(String(value)) ? value : String(value);
  if (Array.isArray(value)) return value.map(toStorable);
  const out: Record<string, unknown> = {};
  for (const [key, child] of Object.entries(value as Record<string, unknown>)) out[toStorable(key) as string] = toStorable(child);
  return out;
}
