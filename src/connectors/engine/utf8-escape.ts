/**
 * Bytes of a UTF-8 page that are not valid UTF-8, kept as text the way Python's surrogateescape
 * keeps them: byte 0xXY (0x80 to 0xFF, as no valid UTF-8 is) as the unpaired low surrogate U+DCXY.
 * No valid UTF-8 decodes to a surrogate, so such a character in a page's text is one of those bytes;
 * PostgreSQL stores none (a record holding one is dead-lettered, naming its field), and a value sent
 * back to the source in a URL (a cursor, a next link) gives the bytes back as `%XY`.
 */
import { isUtf8 } from 'node:buffer';

/** The bytes of a UTF-8 character cut off at the end of `bytes` (valid so far), or none. */
export function incompleteUtf8End(bytes: Buffer): Buffer {
  for (let p = bytes.length - 1; p >= 0 && p >= bytes.length - 3; p--) {
    const b = bytes[p]!;
    if ((b & 0xc0) === 0x80) continue;
    const length = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
    return p + length > bytes.length ? bytes.subarray(p) : Buffer.alloc(0);
  }
  return Buffer.alloc(0);
}

/** Each byte as an unpaired low surrogate, U+DC00 plus the byte (0x80 to 0xFF, as no valid UTF-8 is). */
export function escapeBytes(bytes: Uint8Array): string {
  let out = '';
  for (const b of bytes) out += String.fromCharCode(0xdc00 | b);
  return out;
}

/**
 * UTF-8 bytes as text, each byte not part of a valid character (the Encoding Standard's UTF-8:
 * no overlong forms, no surrogates, nothing past U+10FFFF) read as escapeBytes does; `rest` is a
 * character cut off at the end, to be read with the bytes after it. Valid runs are decoded natively.
 * Undefined once more than `maxEscapes` bytes would be escaped (each costs a string of its own and
 * six characters in a row's JSON: a page of them is no UTF-8 with a few bad bytes but another charset).
 */
export function decodeUtf8Escaping(bytes: Buffer, maxEscapes = Number.POSITIVE_INFINITY): { text: string; rest: Buffer; escaped: number } | undefined {
  // Most chunks after the one holding a bad byte hold none: checked natively (simdutf), decoded natively.
  const cut = incompleteUtf8End(bytes.length > 3 ? bytes.subarray(bytes.length - 3) : bytes).length;
  if (isUtf8(bytes.subarray(0, bytes.length - cut))) return { text: bytes.toString('utf8', 0, bytes.length - cut), rest: bytes.subarray(bytes.length - cut), escaped: 0 };
  let escaped = 0;
  let text = '';
  let from = 0;
  let i = 0;
  while (i < bytes.length) {
    const b = bytes[i]!;
    if (b < 0x80) {
      i++;
      continue;
    }
    // The second byte's range by the first (the others are 0x80 to 0xBF), and the length.
    let length = 0;
    let low = 0x80;
    let high = 0xbf;
    if (b >= 0xc2 && b <= 0xdf) length = 2;
    else if (b >= 0xe0 && b <= 0xef) {
      length = 3;
      if (b === 0xe0) low = 0xa0;
      else if (b === 0xed) high = 0x9f;
    } else if (b >= 0xf0 && b <= 0xf4) {
      length = 4;
      if (b === 0xf0) low = 0x90;
      else if (b === 0xf4) high = 0x8f;
    }
    let valid = length > 0;
    let n = 1;
    for (; valid && n < length && i + n < bytes.length; n++) {
      const c = bytes[i + n]!;
      if (n === 1 ? c < low || c > high : c < 0x80 || c > 0xbf) valid = false;
    }
    if (valid && n < length) {
      // Cut off by the end of these bytes: the rest of the character may follow.
      text += bytes.toString('utf8', from, i);
      return { text, rest: bytes.subarray(i), escaped };
    }
    if (valid) {
      i += length;
      continue;
    }
    if (++escaped > maxEscapes) return undefined;
    text += bytes.toString('utf8', from, i) + String.fromCharCode(0xdc00 | b);
    i++;
    from = i;
  }
  text += bytes.toString('utf8', from, bytes.length);
  return { text, rest: Buffer.alloc(0), escaped };
}

/** An unpaired low surrogate U+DC80 to U+DCFF: a byte escapeBytes kept. */
const ESCAPED_BYTE = /(?<![\ud800-\udbff])[\udc80-\udcff]/g;
/** Any unpaired surrogate. */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/** `%XY` for a byte escapeBytes kept. */
function percentByte(c: string): string {
  return `%${(c.charCodeAt(0) & 0xff).toString(16).toUpperCase()}`;
}

/**
 * `encodeURIComponent` for a value read from a page (a cursor sent back): each byte escapeBytes kept
 * is `%XY` again, the source's own byte, and any other unpaired surrogate (a JSON escape such as
 * `\ud800`, which `encodeURIComponent` refuses) is U+FFFD, as a URL's parser writes it.
 */
export function encodeComponent(value: string): string {
  try {
    return encodeURIComponent(value);
  } catch {
    let out = '';
    let from = 0;
    for (const m of value.matchAll(ESCAPED_BYTE)) {
      out += encodeURIComponent(value.slice(from, m.index).replace(LONE_SURROGATE, '\ufffd')) + percentByte(m[0]);
      from = m.index + 1;
    }
    return out + encodeURIComponent(value.slice(from).replace(LONE_SURROGATE, '\ufffd'));
  }
}

/** A URL read from a page (a next link) with each byte escapeBytes kept as `%XY` again, for the URL parser to keep as the source wrote it. */
export function withEscapedBytesAsPercent(url: string): string {
  return url.replace(ESCAPED_BYTE, percentByte);
}
