import { createHash } from 'node:crypto';
import { describe, expect, it } from '@jest/globals';
import fc from 'fast-check';
import { ExactNumber, parseJsonExact } from '../engine/exact-json.js';
import { flatten } from '../runs/rows.js';
import { maxOf } from '../runner.js';
import type { Target } from '../types.js';
import { canonicalJson, missingKeyReason, prepareRow, rowHash } from './rows.js';
import { cutDeeperThan, depthOf, toStorable } from '../../validation/input-limits.js';

const target: Target = {
  kind: 'hybrid',
  table: 'ext.partners',
  unique_key: '$.id',
  promote: [
    { name: 'name', path: '$.name', type: 'text' },
    { name: 'credit_limit', path: '$.credit_limit', type: 'bigint' },
    { name: 'ratio', path: '$.ratio', type: 'numeric' },
    { name: 'vip', path: '$.vip', type: 'boolean' },
    { name: 'updated_at', path: '$.updated_at', type: 'timestamptz', transform: 'parse_iso8601' },
    { name: 'city', path: '$.address.city', type: 'text', transform: 'uppercase' },
  ],
};

describe('preparing rows for ext.* tables', () => {
  it('reads the unique key and promotes typed values', () => {
    const row = prepareRow(
      { id: 7, name: 'Acme', credit_limit: 5000, ratio: '0.25', vip: 'yes', updated_at: '2026-03-01T10:00:00+02:00', address: { city: 'Lyon' } },
      target,
    );
    expect(row.externalId).toBe('7');
    expect(row.promoted).toEqual({ name: 'Acme', credit_limit: '5000', ratio: '0.25', vip: 'true', updated_at: '2026-03-01T08:00:00.000Z', city: 'LYON' });
    expect(row.rejects).toEqual([]);
  });

  it('a row whose unique key resolves to nothing has no external id (it is dead-lettered)', () => {
    expect(prepareRow({ name: 'no id' }, target).externalId).toBeUndefined();
    expect(prepareRow({ id: null }, target).externalId).toBeUndefined();
    expect(prepareRow({ id: '' }, target).externalId).toBeUndefined();
    expect(prepareRow({ id: { nested: 1 } }, target).externalId).toBeUndefined();
  });

  it('a promoted value failing its type or transform becomes NULL and the payload stays intact', () => {
    const item = { id: 1, credit_limit: '12.5', ratio: 'lots', vip: 'maybe', updated_at: 'yesterday' };
    const row = prepareRow(item, target);
    expect(row.promoted).toMatchObject({ credit_limit: null, ratio: null, vip: null, updated_at: null, name: null });
    expect(row.rejects.map((r) => r.column)).toEqual(['credit_limit', 'ratio', 'vip', 'updated_at']);
    expect(row.data).toBe(item);
    expect(prepareRow({ id: 1, credit_limit: '99999999999999999999' }, target).promoted.credit_limit).toBeNull();
  });

  it('row_hash is over the canonical payload: key order does not matter, values do', () => {
    expect(rowHash({ a: 1, b: { c: 2, d: [1, 2] } })).toBe(rowHash({ b: { d: [1, 2], c: 2 }, a: 1 }));
    expect(rowHash({ a: 1 })).not.toBe(rowHash({ a: '1' }));
    expect(canonicalJson({ b: 1, a: [{ y: 1, x: 2 }] })).toBe('{"a":[{"x":2,"y":1}],"b":1}');
    expect(rowHash({ a: 1 })).toMatch(/^[0-9a-f]{64}$/);
  });

  it('row_hash is the hex SHA-256 of the canonical JSON text, as any client computes it (stored hashes stay valid)', () => {
    const item = { id: 7, name: 'Ünïcode €', nested: { z: [1, 'two', null], a: true } };
    const json = canonicalJson(item);
    expect(prepareRow(item, target).rowHash).toBe(createHash('sha256').update(json, 'utf8').digest('hex'));
    expect(rowHash({})).toBe('44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a');
  });

  it('canonical JSON is every JSON value with its object keys sorted by code unit, at every level', () => {
    // The definition, written plainly: what row_hash has always been computed over.
    const plain = (v: unknown): string =>
      v === null || typeof v !== 'object'
        ? JSON.stringify(v)
        : Array.isArray(v)
          ? `[${v.map(plain).join(',')}]`
          : `{${Object.keys(v)
              .sort()
              .map((k) => `${JSON.stringify(k)}:${plain((v as Record<string, unknown>)[k])}`)
              .join(',')}}`;
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        expect(canonicalJson(value)).toBe(plain(value));
        expect(JSON.parse(canonicalJson(value))).toEqual(JSON.parse(JSON.stringify(value)));
      }),
      { numRuns: 500 },
    );
    // Rows of a source share their shape: the same keys, in the same order or in another, object
    // after object and level after level (canonicalJson reuses the order it sorted for the last
    // object of a level when the next one has the same keys in the same order).
    const keys = ['id', 'name', 'b', 'a', 'Z', '10', '9', 'é', 'nested'];
    const leaf = fc.oneof(fc.integer(), fc.string(), fc.constant(null));
    const objectOf = (value: fc.Arbitrary<unknown>) =>
      fc
        .tuple(fc.shuffledSubarray(keys, { minLength: 2 }), fc.array(value, { minLength: keys.length, maxLength: keys.length }))
        .map(([names, values]) => Object.fromEntries(names.map((k, i) => [k, values[i]])));
    // Three levels: objects of objects of objects of scalars, or scalars at any level.
    const shaped = objectOf(fc.oneof(leaf, objectOf(fc.oneof(leaf, objectOf(leaf)))));
    fc.assert(
      fc.property(fc.array(shaped, { minLength: 2, maxLength: 30 }), (rows) => {
        for (const row of rows) expect(canonicalJson(row)).toBe(plain(row));
      }),
      { numRuns: 300 },
    );
    // Integer-like keys (enumerated first, in numeric order) and keys already in order.
    expect(canonicalJson({ b: 1, 10: 'x', 9: 'y', a: { '': 0, 'é': 1, Z: 2 } })).toBe('{"10":"x","9":"y","a":{"":0,"Z":2,"é":1},"b":1}');
    expect(canonicalJson(JSON.parse('{"__proto__":{"b":1,"a":2},"x":"q\\"uote"}'))).toBe('{"__proto__":{"a":2,"b":1},"x":"q\\"uote"}');
  });

  it('promotes whole numbers and timestamps the same by every path', () => {
    const one = (credit_limit: unknown, updated_at?: unknown) => prepareRow({ id: 1, credit_limit, updated_at }, target).promoted;
    expect(one(-42).credit_limit).toBe('-42');
    expect(one(-0).credit_limit).toBe('0');
    expect(one(2 ** 53 + 2).credit_limit).toBe('9007199254740994'); // past the safe integers: still whole, still stored
    expect(one(1e21).credit_limit).toBeNull();
    expect(one(' 12 ').credit_limit).toBe('12');
    expect(one(1, '2026-03-01T10:00:00Z').updated_at).toBe('2026-03-01T10:00:00.000Z');
    expect(one(1, 1767225600000).updated_at).toBeNull(); // parse_iso8601 takes text only
  });

  it('reads timestamps strictly: an impossible day is refused, not moved to the next month; no offset is UTC', () => {
    const at: Target = { ...target, promote: [
      { name: 'updated_at', path: '$.updated_at', type: 'timestamptz', transform: 'parse_iso8601' },
      { name: 'seen', path: '$.seen', type: 'timestamptz' },
    ] };
    const row = (updated_at: unknown, seen: unknown) => prepareRow({ id: 1, updated_at, seen }, at);
    const impossible = row('2024-02-30T10:00:00Z', '2023-02-29');
    expect(impossible.promoted).toEqual({ updated_at: null, seen: null });
    expect(impossible.rejects).toEqual([
      { column: 'updated_at', value: '2024-02-30T10:00:00Z', reason: 'parse_iso8601: not an ISO-8601 timestamp' },
      { column: 'seen', value: '2023-02-29', reason: 'timestamptz: not a timestamp (ISO 8601, or an RFC 5322 date with its zone)' },
    ]);
    expect(row('2024-02-29 10:00:00', '2024-02-29T10:00:00').promoted).toEqual({ updated_at: '2024-02-29T10:00:00.000Z', seen: '2024-02-29T10:00:00.000Z' });
    // Without the transform, a number and an RFC 5322 / HTTP date are read too; surrounding blanks are ignored.
    expect(row(null, 'Tue, 05 Mar 2024 10:00:00 GMT').promoted.seen).toBe('2024-03-05T10:00:00.000Z');
    expect(row(null, 1767225600000).promoted.seen).toBe('2026-01-01T00:00:00.000Z');
    // Milliseconds outside the years 1 to 9999: NULL and the row kept (the text of such an instant
    // could be refused by PostgreSQL, and the whole row dead-lettered).
    for (const ms of [8640000000000000, -62135596800001, 253402300800000, 1e20, Number.NaN]) {
      expect([ms, row(null, ms).promoted.seen]).toEqual([ms, null]);
    }
    expect(row(null, -62135596800000).promoted.seen).toBe('0001-01-01T00:00:00.000Z');
    expect(row(null, 253402300799999).promoted.seen).toBe('9999-12-31T23:59:59.999Z');
    expect(row(' 2024-02-28T10:00:00Z ', ' 2024-02-28 ').promoted).toEqual({ updated_at: '2024-02-28T10:00:00.000Z', seen: '2024-02-28T00:00:00.000Z' });
    // Other text is not read by the lenient Date.parse any more: it rolled these into another day or year.
    for (const text of [' 2024-02-30', '2024/02/30', '２０２４-01-01', 'Fri, 30 Feb 2024 10:00:00 GMT', 'March 7, 2024']) {
      expect([text, row(null, text).promoted.seen]).toEqual([text, null]);
      expect(row(null, text).rejects).toEqual([{ column: 'seen', value: text, reason: 'timestamptz: not a timestamp (ISO 8601, or an RFC 5322 date with its zone)' }]);
    }
  });
});

describe('why a record has no key (its missing_key dead letter)', () => {
  it('says what the key is when it is there but is not one value; "resolves to nothing" only when it is not there', () => {
    // A SOAP key element written twice reads as an array of its texts.
    expect(missingKeyReason({ id: ['2', '20'], name: 'Bea' }, '$.id', true)).toBe(
      'unique_key $.id: the key element appears 2 times in the record, and a record needs exactly one; the row cannot be stored',
    );
    expect(missingKeyReason({ id: { '@type': 'x', '#text': '2' } }, '$.id', true)).toBe('unique_key $.id: the key element has attributes or children, not just a text; the row cannot be stored');
    expect(missingKeyReason({ id: [1, 2] }, '$.id', false)).toBe('unique_key $.id is an array, not one value; the row cannot be stored');
    expect(missingKeyReason({ id: { a: 1 } }, '$.id', false)).toBe('unique_key $.id is an object, not one value; the row cannot be stored');
    expect(missingKeyReason({ id: '' }, '$.id', false)).toBe('unique_key $.id is empty; the row cannot be stored');
    expect(missingKeyReason({ id: null }, '$.id', false)).toBe('unique_key $.id is null; the row cannot be stored');
    expect(missingKeyReason({ name: 'x' }, '$.id', true)).toBe('unique_key $.id resolves to nothing; the row cannot be stored');
  });
});

describe('watermark running maximum', () => {
  it('keeps the largest value, numbers numerically and timestamps as instants', () => {
    expect(maxOf(undefined, ['2026-01-05T00:00:00Z', '2026-03-01T00:00:00Z', '2026-02-01T00:00:00Z', null, undefined])).toBe('2026-03-01T00:00:00Z');
    expect(maxOf(undefined, [9, 100, 20])).toBe(100);
    expect(maxOf(undefined, [])).toBeUndefined();
    expect(maxOf('2026-03-01T00:00:00Z', [])).toBe('2026-03-01T00:00:00Z');
  });

  it('compares timestamps with different offsets and fractions as instants, keeping the greatest one\'s text', () => {
    // 10:00+02:00 is 08:00Z: the latest is 09:00:00.500Z (as text, 10:00:00+02:00 sorted last).
    expect(maxOf(undefined, ['2024-03-01T10:00:00+02:00', '2024-03-01T09:00:00Z', '2024-03-01T09:00:00.500Z'])).toBe('2024-03-01T09:00:00.500Z');
    // Across pages: the held maximum is compared as an instant too.
    expect(maxOf('2024-03-01T10:00:00+02:00', ['2024-03-01T09:00:00Z'])).toBe('2024-03-01T09:00:00Z');
    expect(maxOf('2024-03-01T09:00:00.500Z', ['2024-03-01T04:00:01-05:00'])).toBe('2024-03-01T04:00:01-05:00');
    // The same instant written two ways: the first one stays.
    expect(maxOf('2024-03-01T08:00:00Z', ['2024-03-01T10:00:00+02:00'])).toBe('2024-03-01T08:00:00Z');
    // A date alone is midnight UTC.
    expect(maxOf('2024-02-29T23:00:00-02:00', ['2024-03-01'])).toBe('2024-02-29T23:00:00-02:00');
    // Text that is not a timestamp on either side is compared as text, as before.
    expect(maxOf('2024-03-01T10:00:00+02:00', ['zzz'])).toBe('zzz');
    expect(maxOf('abc', ['2024-03-01T09:00:00Z', 'abd'])).toBe('abd');
  });

  it('compares integers beyond ±(2^53 − 1) (bigint, read exactly) numerically with numbers and with each other, kept as digits', () => {
    expect(maxOf(undefined, [5, 1234567890123456791n, 100, 1234567890123456795n, 1234567890123456793n, 9007199254740991])).toBe('1234567890123456795');
    expect(maxOf('1234567890123456793', [1234567890123456795n])).toBe('1234567890123456795');
    expect(maxOf(undefined, [-1234567890123456795n, -5])).toBe(-5);
    // Text as before: a number does not compare with a timestamp.
    expect(maxOf('2026-03-01T00:00:00Z', [1234567890123456795n])).toBe('2026-03-01T00:00:00Z');
  });

  it('compares numbers past a double\'s range (1e400, read exactly) exactly with numbers, bigints and each other, kept as written', () => {
    const [one, twoAndAHalf, minus, tiny] = parseJsonExact('[1e400, 2.5E+400, -1e400, 1e-400]') as ExactNumber[];
    expect(String(maxOf(undefined, [5, one, 1234567890123456795n, twoAndAHalf, 7]))).toBe('2.5E+400');
    expect(String(maxOf(undefined, [minus, -5]))).toBe('-5');
    expect(String(maxOf(undefined, [0, tiny]))).toBe('1e-400');
    expect(String(maxOf(undefined, [tiny, 1e-300]))).toBe('1e-300');
    expect(String(maxOf('1234567890123456793', [one]))).toBe('1e400');
    expect(maxOf('2026-03-01T00:00:00Z', [one])).toBe('2026-03-01T00:00:00Z');
  });
});

describe('flat rows for /api/platform/data/row/{hash}', () => {
  it('makes every value a string and nested objects dotted keys', () => {
    expect(flatten({ id: 7, vip: true, limit: null, address: { city: 'Lyon', geo: { lat: 45.7 } }, tags: ['a', 'b'] })).toEqual({
      id: '7',
      vip: 'true',
      limit: '',
      'address.city': 'Lyon',
      'address.geo.lat': '45.7',
      tags: '["a","b"]',
    });
  });
});

describe('numbers past a double\'s range in rows (engine/exact-json.ts)', () => {
  const item = parseJsonExact(
    '{"id":1e400,"n":[2e400,-1E+400,1e-400],"credit_limit":1e400,"ratio":-2.5e400,"name":1e400,"tiny":1e-400,"deep":{"x":1e400}}',
  ) as Record<string, unknown>;

  it('key, canonical JSON and promoted columns keep the text as the source wrote it', () => {
    const row = prepareRow(item, { ...target, promote: [...target.promote, { name: 'tiny', path: '$.tiny', type: 'bigint' }] });
    expect(row.externalId).toBe('1e400');
    expect(prepareRow(parseJsonExact('{"id":2e400}'), target).externalId).toBe('2e400');
    expect(row.json).toBe('{"credit_limit":1e400,"deep":{"x":1e400},"id":1e400,"n":[2e400,-1E+400,1e-400],"name":1e400,"ratio":-2.5e400,"tiny":1e-400}');
    expect(row.rowHash).not.toBe(prepareRow(parseJsonExact(row.json.replace('"id":1e400', '"id":2e400')), target).rowHash);
    expect(row.promoted).toMatchObject({ name: '1e400', ratio: '-2.5e400', credit_limit: null, tiny: null });
    expect(row.rejects).toEqual([
      { column: 'credit_limit', value: item.credit_limit, reason: 'bigint: out of range' },
      { column: 'tiny', value: item.tiny, reason: 'bigint: not a whole number' },
    ]);
  });

  it('a numeric column takes any number text (a SOAP or CSV text too): PostgreSQL\'s numeric holds 1e400', () => {
    const numeric: Target = { ...target, promote: [{ name: 'ratio', path: '$.ratio', type: 'numeric' }] };
    expect(prepareRow({ id: 1, ratio: '1e400' }, numeric).promoted.ratio).toBe('1e400');
    expect(prepareRow({ id: 1, ratio: ' -1E-400 ' }, numeric).promoted.ratio).toBe('-1E-400');
    expect(prepareRow({ id: 1, ratio: 'Infinity' }, numeric).rejects.map((r) => r.reason)).toEqual(['numeric: not a number']);
  });

  it('is a scalar to the walks over a record: flat rows, depth, cuts and dead letters', () => {
    expect(flatten(item)).toMatchObject({ id: '1e400', n: '[2e400,-1E+400,1e-400]', 'deep.x': '1e400' });
    expect(depthOf(item)).toBe(2);
    expect(cutDeeperThan(item, 64, '-')).toEqual(item);
    expect((cutDeeperThan(item, 64, '-') as Record<string, unknown>).id).toBeInstanceOf(ExactNumber);
    expect(toStorable(item)).toEqual(item);
    // Past what a jsonb number holds: a dead letter keeps its text.
    expect(toStorable(parseJsonExact('{"a":[1e200000]}'))).toEqual({ a: ['1e200000'] });
  });
});

describe('reading paths', () => {
  it('reads dotted, indexed and quoted-bracket paths, and falls back to JSONPath for the rest', async () => {
    const { queryFirst: readPath } = await import('../jsonpath.js');
    const item = { a: { b: [10, { c: 'x' }] }, 'first name': 'Ann', "it's": 1, list: [{ id: 1 }, { id: 2 }] };
    expect(readPath(item, '$.a.b[0]')).toBe(10);
    expect(readPath(item, '$.a.b[1].c')).toBe('x');
    expect(readPath(item, '$["first name"]')).toBe('Ann');
    expect(readPath(item, "$['first name']")).toBe('Ann');
    expect(readPath(item, '$.missing.deeper')).toBeUndefined();
    expect(readPath(item, '$.list[-1:].id')).toBe(2);
    expect(readPath(item, '$..c')).toBe('x');
  });
});
