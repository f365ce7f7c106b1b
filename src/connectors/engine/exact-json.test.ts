import { describe, expect, it } from '@jest/globals';
import fc from 'fast-check';
import { canonicalJson } from '../target/rows.js';
import { bigIntsAsText, jsonText, parseJsonExact } from './exact-json.js';

/** Upstream JSON read without losing integers (src/connectors/engine/exact-json.ts). */

/** The value with each number that is an integer beyond the safe range as the bigint of its digits (how such a number's text reads). */
function exactly(value: unknown): unknown {
  if (Object.is(value, -0)) return 0; // JSON writes -0 as 0
  if (typeof value === 'number') return Number.isInteger(value) && !Number.isSafeInteger(value) && Math.abs(value) < 1e21 ? BigInt(String(value)) : value;
  if (typeof value !== 'object' || value === null) return value;
  if (Array.isArray(value)) return value.map(exactly);
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, exactly(v)]));
}
describe('parseJsonExact', () => {
  it('reads integers beyond ±(2^53 − 1) as bigint, exactly; two ids one apart stay two', () => {
    const page = parseJsonExact('{"items":[{"id":1234567890123456789},{"id":1234567890123456790}],"next":-9223372036854775808}') as {
      items: Array<{ id: unknown }>;
      next: unknown;
    };
    expect(page.items.map((i) => i.id)).toEqual([1234567890123456789n, 1234567890123456790n]);
    expect(page.next).toBe(-9223372036854775808n);
    // What JSON.parse makes of them: one number.
    expect(JSON.parse('[1234567890123456789,1234567890123456790]')).toEqual([1234567890123456800, 1234567890123456800]);
    expect(parseJsonExact('12345678901234567890')).toBe(12345678901234567890n);
  });

  it('leaves everything else as JSON.parse reads it: safe integers, long fractions and exponents, digits in strings and keys', () => {
    const text = '{"safe":9007199254740991,"neg":-9007199254740991,"f":0.12345678901234567,"e":1234567890123456789e3,"big":12345678901234567890.5,"s":"12345678901234567890","12345678901234567890":1,"esc":"a\\"12345678901234567890"}';
    expect(parseJsonExact(text)).toEqual(JSON.parse(text));
  });

  it('refuses what JSON.parse refuses, with its error (a leading zero, a trailing comma)', () => {
    for (const text of ['[012345678901234567890]', '[12345678901234567890,]', '{"a":12345678901234567890', '12345678901234567890x']) {
      expect(() => parseJsonExact(text)).toThrow(SyntaxError);
    }
  });

  it('is JSON.parse for any JSON, but for integers written beyond the safe range, which are their bigint (property)', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        const text = JSON.stringify(value);
        expect(parseJsonExact(text)).toEqual(exactly(JSON.parse(text)));
      }),
      { numRuns: 300 },
    );
  });

  it('reads back exactly what jsonText and canonicalJson write, bigints included (property)', () => {
    const unsafe = fc.bigInt({ min: -(2n ** 70n), max: 2n ** 70n }).filter((n) => n > 9007199254740991n || n < -9007199254740991n);
    const withBig = fc.letrec((tie) => ({
      value: fc.oneof({ depthSize: 'small' }, fc.jsonValue({ maxDepth: 1 }), unsafe, fc.array(tie('value'), { maxLength: 4 }), fc.dictionary(fc.string(), tie('value'), { maxKeys: 4 })),
    })).value;
    fc.assert(
      fc.property(withBig, (value) => {
        expect(parseJsonExact(jsonText(value))).toEqual(exactly(value));
        expect(parseJsonExact(canonicalJson(value))).toEqual(parseJsonExact(jsonText(value)));
      }),
      { numRuns: 300 },
    );
  });
});

describe('jsonText and bigIntsAsText', () => {
  it('write a bigint as its digits: a JSON number in jsonText, a string in bigIntsAsText', () => {
    const value = { id: 1234567890123456789n, list: [1, -98765432109876543210n], s: 'x' };
    expect(jsonText(value)).toBe('{"id":1234567890123456789,"list":[1,-98765432109876543210],"s":"x"}');
    expect(jsonText(value, 2)).toContain('"id": 1234567890123456789');
    expect(jsonText({ a: 1 })).toBe('{"a":1}');
    expect(bigIntsAsText(value)).toEqual({ id: '1234567890123456789', list: [1, '-98765432109876543210'], s: 'x' });
    expect(() => JSON.stringify(value)).toThrow(TypeError);
  });
});
