import { describe, expect, it } from '@jest/globals';
import fc from 'fast-check';
import { canonicalJson } from '../target/rows.js';
import { compareNumbers, ExactNumber, exactNumbersAsText, fitsNumeric, jsonText, parseJsonExact } from './exact-json.js';

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
    const text = '{"safe":9007199254740991,"neg":-9007199254740991,"f":0.12345678901234567,"e":1.2345678901234568e21,"avogadro":6.02214076e23,"big":12345678901234568.0,"s":"12345678901234567890","12345678901234567890":1,"esc":"a\\"12345678901234567890"}';
    expect(parseJsonExact(text)).toEqual(JSON.parse(text));
  });

  it('keeps a number from 2^53 on written with a fraction or an exponent as written when its double would be another number (two ids would meet)', () => {
    const read = parseJsonExact('[9007199254740993.0,9007199254740992.0,12345678901234567890.5,1234567890123456789e3,-1.2345678901234567891e18]') as unknown[];
    expect(read.map((v) => (v instanceof ExactNumber ? `exact ${v}` : v))).toEqual(['exact 9007199254740993.0', 9007199254740992, 'exact 12345678901234567890.5', 'exact 1234567890123456789e3', 'exact -1.2345678901234567891e18']);
    expect(JSON.parse('[9007199254740993.0,9007199254740992.0]')).toEqual([9007199254740992, 9007199254740992]);
  });

  it('keeps such a number as written when a point splits its digits into runs shorter than 16 and its exponent is short (two ids would meet): such a page is not handed to JSON.parse alone', () => {
    // 16 to 18 significant digits (8 + 9, 9 + 9, 8 + 10, 1 + 15 either side of the point), an exponent of
    // two digits: 12345678.1234567809e10 and 12345678.1234567812e10 are one double (123456781234567808).
    const text = '[{"id":12345678.123456781e10},{"id":12345678.123456781e+10},{"id":-123456789.123456789E10},{"id":12345678.1234567809e10},{"id":12345678.1234567812e10},{"id":9.007199254740993e15}]';
    const [a, b] = JSON.parse('[12345678.1234567809e10,12345678.1234567812e10]') as number[];
    expect(a).toBe(b);
    const read = (parseJsonExact(text) as Array<{ id: unknown }>).map((r) => (r.id instanceof ExactNumber ? `exact ${r.id}` : r.id));
    expect(read).toEqual(['exact 12345678.123456781e10', 'exact 12345678.123456781e+10', 'exact -123456789.123456789E10', 'exact 12345678.1234567809e10', 'exact 12345678.1234567812e10', 'exact 9.007199254740993e15']);
    // 1.234567890123456789e20 holds a run of 18 digits: kept as written already.
    expect(String((parseJsonExact('[1.234567890123456789e20]') as unknown[])[0])).toBe('1.234567890123456789e20');
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

describe('jsonText and exactNumbersAsText', () => {
  it('write a bigint as its digits: a JSON number in jsonText, a string in exactNumbersAsText', () => {
    const value = { id: 1234567890123456789n, list: [1, -98765432109876543210n], s: 'x' };
    expect(jsonText(value)).toBe('{"id":1234567890123456789,"list":[1,-98765432109876543210],"s":"x"}');
    expect(jsonText(value, 2)).toContain('"id": 1234567890123456789');
    expect(jsonText({ a: 1 })).toBe('{"a":1}');
    expect(exactNumbersAsText(value)).toEqual({ id: '1234567890123456789', list: [1, '-98765432109876543210'], s: 'x' });
    expect(() => JSON.stringify(value)).toThrow(TypeError);
  });
});

describe('numbers past a double\'s range', () => {
  it('are kept as their text where JSON.parse reads ±Infinity or 0: ids 1e400 and 2e400 stay two', () => {
    const text = '{"items":[{"id":1e400},{"id":2e400},{"id":-2.5E+400},{"id":1e-400},{"id":-0.5e-999}],"big":1' + '0'.repeat(400) + '.5}';
    const page = parseJsonExact(text) as { items: Array<{ id: unknown }>; big: unknown };
    expect(page.items.map((i) => i.id instanceof ExactNumber)).toEqual([true, true, true, true, true]);
    expect(page.items.map((i) => String(i.id))).toEqual(['1e400', '2e400', '-2.5E+400', '1e-400', '-0.5e-999']);
    expect(String(page.big)).toBe(`1${'0'.repeat(400)}.5`);
    // What JSON.parse makes of them.
    expect(JSON.parse(text).items.map((i: { id: number }) => String(i.id))).toEqual(['Infinity', 'Infinity', '-Infinity', '0', '0']);
    // Compared with < and >, they are what JSON.parse read.
    expect((page.items[0]!.id as number) > 1e308).toBe(true);
    // An integer written out in digits past a double's range is a bigint, as any long integer.
    expect(parseJsonExact(`[1${'0'.repeat(400)}]`)).toEqual([10n ** 400n]);
  });

  it('leaves what a double holds as JSON.parse reads it: 1e308, 1e-320 (rounded, not lost), 0e-999, exponents in strings', () => {
    const text = String.raw`{"a":1e308,"b":1e-320,"c":0e-999,"d":-0.0e500,"e":1.5e300,"s":"1e400","k":{"1e400":"x\\"},"t":"\"1e400","u":"a\\\"1e400"}`;
    expect(parseJsonExact(text)).toEqual(JSON.parse(text));
  });

  it('marks only numbers outside strings, whatever the strings hold (property)', () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.string(), (value, text) => {
        const page = `[${JSON.stringify(value)},${JSON.stringify(`${text}"1e400,\\`)},1e400]`;
        const read = parseJsonExact(page) as unknown[];
        expect(read.slice(0, 2)).toEqual(exactly(JSON.parse(page).slice(0, 2)));
        expect(String(read[2])).toBe('1e400');
      }),
      { numRuns: 300 },
    );
  });

  it('refuses what JSON.parse refuses (an invalid token with a large exponent)', () => {
    for (const text of ['[01e400]', '[1.e400]', '[1e400e5]', '[1e400x]', '[1e+-400]', '[.5e400]', '{"a":1e400']) expect(() => parseJsonExact(text)).toThrow(SyntaxError);
  });

  it('jsonText writes them as JSON numbers as written, JSON.stringify and exactNumbersAsText as their text in a string', () => {
    const value = parseJsonExact('{"id":1e400,"list":[-2E+400,1e-400,3]}');
    expect(jsonText(value)).toBe('{"id":1e400,"list":[-2E+400,1e-400,3]}');
    expect(jsonText(value, 1)).toContain('"id": 1e400');
    expect(jsonText((value as { id: unknown }).id)).toBe('1e400');
    expect(JSON.stringify(value)).toBe('{"id":"1e400","list":["-2E+400","1e-400",3]}');
    expect(exactNumbersAsText(value)).toEqual({ id: '1e400', list: ['-2E+400', '1e-400', 3] });
  });

  it('read back exactly what jsonText and canonicalJson write (property)', () => {
    const huge = fc
      .tuple(fc.boolean(), fc.integer({ min: 1, max: 9 }), fc.nat({ max: 999 }), fc.integer({ min: 330, max: 5000 }), fc.boolean(), fc.constantFrom('e', 'E', 'e+', 'E-', 'e-'))
      .map(([neg, lead, frac, exp, withFrac, e]) => `${neg ? '-' : ''}${lead}${withFrac ? `.${frac}` : ''}${e}${exp}`);
    fc.assert(
      fc.property(fc.array(fc.oneof(huge, fc.integer().map(String)), { maxLength: 6 }), (tokens) => {
        const text = `[${tokens.join(',')}]`;
        const value = parseJsonExact(text) as unknown[];
        expect(jsonText(value)).toBe(text);
        expect(canonicalJson(value)).toBe(text);
        expect(value.map(String)).toEqual(tokens);
      }),
      { numRuns: 200 },
    );
  });

  it('compareNumbers compares exactly, fitsNumeric says what PostgreSQL\'s numeric holds', () => {
    const [a, b, c] = parseJsonExact('[1e400, 10e399, 1.0000000000000000001e400]') as ExactNumber[];
    expect([compareNumbers(a, b), compareNumbers(a, c), compareNumbers(c, a), compareNumbers(-1, a), compareNumbers('1e-400', 0), compareNumbers('-1e-400', '-2e-400')]).toEqual([0, -1, 1, -1, 1, 1]);
    expect([compareNumbers(1e21, '1000000000000000000000'), compareNumbers(12345678901234567891n, '1.2345678901234567890e19'), compareNumbers('x', 1), compareNumbers(Number.NaN, 1)]).toEqual([0, 1, undefined, undefined]);
    expect(['1e131071', '1e131072', '1e-16383', '1e-16384', '0.5e-16382', `1${'0'.repeat(20000)}`, '12.5'].map(fitsNumeric)).toEqual([true, false, true, false, true, true, true]);
  });
});
