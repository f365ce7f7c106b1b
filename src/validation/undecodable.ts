/** The bytes read at a time: large enough that a long body costs few calls, small enough to search in. */
const CHUNK = 64 * 1024;

/**
 * Where bytes stop being text in `encoding`: the offset of the last byte of the shortest prefix a
 * strict decoder refuses (a sequence cut at the very end is not refused: in a stream, its rest may
 * follow), or undefined when no prefix is refused.
 *
 * One pass: a streaming decoder reads `chunk` bytes at a time until one is refused; only that chunk
 * is then searched, the same way in chunks a sixteenth the size, down to the byte. Each search starts
 * a fresh decoder a few bytes before the chunk, at the start of the character the chunk begins in
 * (UTF-8, UTF-16 and the single-byte encodings resume there as they were); for the multi-byte legacy
 * encodings (Shift_JIS, EUC-JP, EUC-KR, GB18030, Big5, ISO-2022-JP), whose state the bytes just
 * before do not tell, the decoder reads the body again up to the chunk, then the chunk byte by byte.
 */
export function firstUndecodable(encoding: string, bytes: Uint8Array, chunk = CHUNK): number | undefined {
  return refusedIn(encoding, bytes, 0, 0, bytes.length, Math.max(1, chunk));
}

/**
 * The first byte of bytes[start, end) at which a strict decoder that has read bytes[0, start)
 * without a refusal refuses, reading `size` bytes at a time; undefined when it refuses none. A fresh
 * decoder reading bytes[from, start) is in the same state as one that has read bytes[0, start).
 */
function refusedIn(encoding: string, bytes: Uint8Array, from: number, start: number, end: number, size: number): number | undefined {
  const decoder = new TextDecoder(encoding, { fatal: true });
  if (start > from) decoder.decode(bytes.subarray(from, start), { stream: true });
  for (let at = start; at < end; at += size) {
    const stop = Math.min(at + size, end);
    try {
      decoder.decode(bytes.subarray(at, stop), { stream: true });
    } catch {
      if (stop - at === 1) return at;
      const resume = resumeAt(encoding, bytes, at);
      return refusedIn(encoding, bytes, resume ?? 0, at, stop, resume === undefined ? 1 : Math.max(1, size >> 4));
    }
  }
  return undefined;
}

const SINGLE_BYTE = /^(?:ibm866|iso-8859-\d+(?:-i)?|koi8-[ru]|macintosh|windows-\d+|x-mac-cyrillic)$/;

/**
 * Where a fresh decoder, reading up to `at`, ends in the state of one that has read bytes[0, at)
 * without a refusal: the start of the character `at` falls in (or `at` itself when it starts one).
 * Undefined for the encodings whose state the bytes before `at` do not tell.
 */
function resumeAt(encoding: string, bytes: Uint8Array, at: number): number | undefined {
  if (SINGLE_BYTE.test(encoding)) return at;
  if (encoding === 'utf-8') {
    // In UTF-8 read without a refusal, every byte that is not a continuation byte (10xxxxxx) starts a
    // character, and one has at most three continuation bytes.
    for (let p = at - 1; p >= 0 && p >= at - 4; p--) if ((bytes[p]! & 0xc0) !== 0x80) return p;
    return 0;
  }
  if (encoding === 'utf-16le' || encoding === 'utf-16be') {
    let p = at - (at % 2);
    // A high surrogate just before waits for its low half: the character starts there.
    const high = encoding === 'utf-16le' ? bytes[p - 1] : bytes[p - 2];
    if (p >= 2 && high !== undefined && (high & 0xfc) === 0xd8) p -= 2;
    return p;
  }
  return undefined;
}
