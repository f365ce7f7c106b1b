import { describe, expect, it } from '@jest/globals';
import fc from 'fast-check';
import { firstUndecodable } from './undecodable.js';

/**
 * The definition, as firstUndecodable was first written: a binary search over prefixes, decoding
 * each whole, for the shortest one a strict decoder refuses (a sequence cut at the very end is not
 * refused); the answer is that prefix's last byte. The oracle for the one-pass search.
 */
function byDefinition(encoding: string, bytes: Uint8Array): number | undefined {
  const fails = (length: number) => {
    try {
      new TextDecoder(encoding, { fatal: true }).decode(bytes.subarray(0, length), { stream: true });
      return false;
    } catch {
      return true;
    }
  };
  if (!fails(bytes.length)) return undefined;
  let ok = 0;
  let bad = bytes.length;
  while (bad - ok > 1) {
    const mid = (ok + bad) >> 1;
    if (fails(mid)) bad = mid;
    else ok = mid;
  }
  return bad - 1;
}

/** Every kind of decoder: UTF-8 and UTF-16 (resumed at a character's start), single-byte ones with unmapped bytes, and the multi-byte legacy ones. */
const ENCODINGS = ['utf-8', 'utf-16le', 'utf-16be', 'windows-1253', 'iso-8859-8', 'windows-874', 'shift_jis', 'euc-jp', 'euc-kr', 'gb18030', 'gbk', 'big5', 'iso-2022-jp'];

/** Text in UTF-8 or UTF-16 (so mostly decodable), with stray bytes put in here and there. */
const bodies = fc
  .tuple(
    fc.string({ unit: fc.oneof(fc.constantFrom('a', 'é', '€', '😀', '\u3042', '\ud800', '\udc00', '\x1b$B', '\x1b(B'), fc.string({ unit: 'binary', maxLength: 1 })), maxLength: 60 }),
    fc.constantFrom<BufferEncoding>('utf8', 'utf16le', 'latin1'),
    fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { maxLength: 3 }),
  )
  .map(([text, as, stray]) => {
    const bytes = [...Buffer.from(text, as)];
    for (const [at, byte] of stray) bytes.splice(at % (bytes.length + 1), 0, byte);
    return Uint8Array.from(bytes);
  });

describe('firstUndecodable', () => {
  it('gives the definition\'s answer, whatever the encoding, the bytes and the chunk size (property)', () => {
    fc.assert(
      fc.property(fc.constantFrom(...ENCODINGS), fc.oneof(bodies, fc.uint8Array({ maxLength: 200 })), fc.integer({ min: 1, max: 70 }), (encoding, bytes, chunk) => {
        expect(firstUndecodable(encoding, bytes, chunk)).toBe(byDefinition(encoding, bytes));
      }),
      { numRuns: 5000 },
    );
  });

  it('gives the definition\'s answer with the default chunks, for refusals on either side of a chunk\'s edge', () => {
    const size = 3 * 64 * 1024;
    const text = Buffer.from('é😀a'.repeat(size / 7 + 1), 'utf8').subarray(0, size);
    for (const at of [0, 1, 65_534, 65_535, 65_536, 65_537, 131_071, 131_072, size - 1]) {
      for (const bad of [[0xff], [0xe2, 0x82, 0x41], [0x80]]) {
        const bytes = Buffer.concat([text.subarray(0, at), Buffer.from(bad), text.subarray(at)]);
        expect({ at, bad, found: firstUndecodable('utf-8', bytes) }).toEqual({ at, bad, found: byDefinition('utf-8', bytes) });
      }
    }
    const utf16 = Buffer.from('a😀'.repeat(size / 6), 'utf16le');
    for (const at of [65_534, 65_536, 65_538]) {
      const bytes = Buffer.concat([utf16.subarray(0, at), Buffer.from([0x00, 0xdc]), utf16.subarray(at)]);
      expect(firstUndecodable('utf-16le', bytes)).toBe(byDefinition('utf-16le', bytes));
    }
  });

  it('examples', () => {
    expect(firstUndecodable('utf-8', Buffer.from('abc'))).toBeUndefined();
    expect(firstUndecodable('utf-8', Buffer.from([0x61, 0xff, 0x62]))).toBe(1);
    // Refused at the byte that cannot continue the sequence; one cut at the very end is not refused.
    expect(firstUndecodable('utf-8', Buffer.from([0x61, 0xe2, 0x82, 0x41]))).toBe(3);
    expect(firstUndecodable('utf-8', Buffer.from([0x61, 0xe2, 0x82]))).toBeUndefined();
    expect(firstUndecodable('utf-16le', Buffer.from([0x61, 0x00, 0x00, 0xdc]))).toBe(3);
    expect(firstUndecodable('utf-8', new Uint8Array(0))).toBeUndefined();
  });

  it('costs one pass over the body, not a decode per halving: 10 MB refused at its last byte in less than three plain decodes of it', () => {
    const size = 10 * 1024 * 1024;
    // Characters of one to four bytes (14 bytes together), then ASCII up to 10 MB less one byte.
    const unit = 'a é € 😀 ';
    const units = Math.floor((size - 1) / Buffer.byteLength(unit));
    const valid = Buffer.from(unit.repeat(units) + 'a'.repeat(size - 1 - units * Buffer.byteLength(unit)), 'utf8');
    expect(valid.length).toBe(size - 1);
    const body = Buffer.concat([valid, Buffer.from([0xff])]);
    const fastest = (run: () => void) => {
      let best = Number.POSITIVE_INFINITY;
      for (let i = 0; i < 3; i++) {
        const started = performance.now();
        run();
        best = Math.min(best, performance.now() - started);
      }
      return best;
    };
    const decode = fastest(() => new TextDecoder('utf-8', { fatal: true }).decode(valid));
    let found: number | undefined;
    const search = fastest(() => {
      found = firstUndecodable('utf-8', body);
    });
    expect(found).toBe(size - 1);
    // A binary search over prefixes decodes about log2(10 MB) ≈ 23 of them (measured: 27 to 34 times
    // a plain decode); one streaming pass and a search in one chunk, a fraction of one (0.12 to 0.18:
    // a streaming decode builds no 10 MB string).
    expect(search / decode).toBeLessThan(3);
  });
});
