import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import fc from 'fast-check';
import pg from 'pg';
import { serverUrl } from '../../../test/harness/database.js';
import { byPattern, parseIsoTimestamp, parseRfcTimestamp } from './timestamp.js';

/**
 * parseIsoTimestamp against two readers of the same text: V8's `Date.parse` on the ECMAScript
 * date-time form (which it reads exactly, with an explicit offset), and PostgreSQL's `timestamptz`
 * input in a UTC session, where the value ends up. Both refuse what it refuses among impossible
 * dates; `Date.parse` alone rolls them over, which is why it is no longer used.
 */

const pad = (n: number, width = 2) => String(n).padStart(width, '0');
const leap = (y: number) => (y % 4 === 0 && y % 100 !== 0) || y % 400 === 0;
const daysIn = (y: number, m: number) => [31, leap(y) ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][m - 1]!;

interface Fields {
  year: number;
  month: number;
  day: number;
  hour: number;
  minute: number;
  second: number;
  fraction: string;
  offset: number;
}

const fields: fc.Arbitrary<Fields> = fc
  .record({
    year: fc.integer({ min: 1001, max: 9998 }),
    month: fc.integer({ min: 1, max: 12 }),
    day: fc.integer({ min: 1, max: 31 }),
    hour: fc.integer({ min: 0, max: 23 }),
    minute: fc.integer({ min: 0, max: 59 }),
    second: fc.integer({ min: 0, max: 59 }),
    fraction: fc.stringMatching(/^\d{0,7}$/),
    offset: fc.integer({ min: -(23 * 60 + 59), max: 23 * 60 + 59 }),
  })
  .map((f) => ({ ...f, day: Math.min(f.day, daysIn(f.year, f.month)) }));

const date = (f: Fields) => `${pad(f.year, 4)}-${pad(f.month)}-${pad(f.day)}`;
const offsetText = (minutes: number, colon: boolean) => `${minutes < 0 ? '-' : '+'}${pad(Math.floor(Math.abs(minutes) / 60))}${colon ? ':' : ''}${pad(Math.abs(minutes) % 60)}`;

/** The ECMAScript form, which Date.parse reads by the standard: milliseconds and an explicit offset. */
function ecmaForm(f: Fields): string {
  return `${date(f)}T${pad(f.hour)}:${pad(f.minute)}:${pad(f.second)}.${`${f.fraction}000`.slice(0, 3)}${offsetText(f.offset, true)}`;
}

/** The same instant written another accepted way, chosen by `style`. */
function variant(f: Fields, style: number): string {
  const separator = ['T', 't', ' '][style % 3]!;
  const fraction = f.fraction === '' ? '' : `.${f.fraction}`;
  const zone = f.offset === 0 ? ['Z', 'z', '+00:00', '-0000', '+00', ''][style % 6]! : f.offset % 60 === 0 && style % 4 === 0 ? `${f.offset < 0 ? '-' : '+'}${pad(Math.abs(f.offset) / 60)}` : offsetText(f.offset, style % 2 === 1);
  return `${date(f)}${separator}${pad(f.hour)}:${pad(f.minute)}:${pad(f.second)}${fraction}${zone}`;
}

describe('parseIsoTimestamp', () => {
  it('reads the accepted forms to the stored form', () => {
    expect(parseIsoTimestamp('2026-03-01T10:00:00Z')).toBe('2026-03-01T10:00:00.000Z');
    expect(parseIsoTimestamp('2026-03-01T10:00:00.000Z')).toBe('2026-03-01T10:00:00.000Z');
    expect(parseIsoTimestamp('2026-03-01T10:00:00+02:00')).toBe('2026-03-01T08:00:00.000Z');
    expect(parseIsoTimestamp('2026-03-01T01:30:00+0200')).toBe('2026-02-28T23:30:00.000Z');
    expect(parseIsoTimestamp('2026-03-01T23:30:00-01')).toBe('2026-03-02T00:30:00.000Z');
    expect(parseIsoTimestamp('2026-03-01')).toBe('2026-03-01T00:00:00.000Z');
    expect(parseIsoTimestamp('2026-03-01 10:15')).toBe('2026-03-01T10:15:00.000Z');
    expect(parseIsoTimestamp('2026-03-01t10:15:07.5z')).toBe('2026-03-01T10:15:07.500Z');
    expect(parseIsoTimestamp('2026-03-01T10:15:07.123456789Z')).toBe('2026-03-01T10:15:07.123Z');
    expect(parseIsoTimestamp('2024-02-29T12:00:00Z')).toBe('2024-02-29T12:00:00.000Z');
    expect(parseIsoTimestamp('2000-02-29')).toBe('2000-02-29T00:00:00.000Z');
    expect(parseIsoTimestamp('2026-12-31T24:00:00Z')).toBe('2027-01-01T00:00:00.000Z');
    expect(parseIsoTimestamp('2026-12-31T24:00:00.000+01:00')).toBe('2026-12-31T23:00:00.000Z');
    expect(parseIsoTimestamp('0001-01-01T00:00:00Z')).toBe('0001-01-01T00:00:00.000Z');
    expect(parseIsoTimestamp('9999-12-31T23:59:59.999Z')).toBe('9999-12-31T23:59:59.999Z');
  });

  it('refuses impossible dates and times instead of rolling them over, and anything but the forms above', () => {
    for (const text of [
      '2024-02-30',
      '2024-02-30T10:00:00Z',
      '2023-02-29T00:00:00Z',
      '1900-02-29',
      '2024-04-31T00:00:00.000Z',
      '2024-13-01',
      '2024-00-10',
      '2024-01-00',
      '2024-01-32',
      '2024-01-01T24:00:01Z',
      '2024-01-01T24:30Z',
      '2024-01-01T24:00:00.001Z',
      '2024-01-01T25:00:00Z',
      '2024-01-01T23:60:00Z',
      '2024-01-01T23:59:60Z',
      '2024-01-01T10:00:00+24:00',
      '2024-01-01T10:00:00+05:60',
      '0000-01-01T00:00:00Z',
      '0001-01-01T00:30:00+01:00',
      '9999-12-31T24:00:00Z',
      '2024-01-01T10:00:00 GMT',
      '2024-01-01T10Z',
      '2024-01-01T10:00:00.Z',
      '2024-01-01T10:00:00,5Z',
      '2024-1-01',
      '24-01-01',
      '+002024-01-01',
      '2024-01-01foo',
      ' 2024-01-01',
      '2024-01-01\n',
      'yesterday',
      '',
    ]) {
      expect([text, parseIsoTimestamp(text)]).toEqual([text, undefined]);
    }
  });

  it('gives the instant Date.parse gives for the ECMAScript form, whichever accepted way it is written', () => {
    fc.assert(
      fc.property(fields, fc.nat(), (f, style) => {
        const expected = new Date(Date.parse(ecmaForm(f))).toISOString();
        expect(parseIsoTimestamp(ecmaForm(f))).toBe(expected);
        expect(parseIsoTimestamp(variant(f, style))).toBe(expected);
      }),
      { numRuns: 2000 },
    );
  });

  it('refuses every day past the end of its month, which Date.parse rolls over', () => {
    const pastTheEnd = fc
      .record({ year: fc.integer({ min: 1, max: 9999 }), month: fc.integer({ min: 1, max: 12 }), extra: fc.integer({ min: 1, max: 3 }) })
      .filter((f) => daysIn(f.year, f.month) + f.extra <= 31);
    fc.assert(
      fc.property(pastTheEnd, (f) => {
        const text = `${pad(f.year, 4)}-${pad(f.month)}-${pad(daysIn(f.year, f.month) + f.extra)}T00:00:00Z`;
        expect(parseIsoTimestamp(text)).toBeUndefined();
      }),
      { numRuns: 500 },
    );
  });
});

describe("parseIsoTimestamp's reading of the common forms without the pattern", () => {
  // `YYYY-MM-DDTHH:MM:SSZ` and `…SS.sssZ` are read character by character (most rows of most
  // sources): the answer must be the pattern's for every text of those lengths and shapes, valid or not.
  const digit = fc.constantFrom(...'0123456789');
  const near = fc.oneof(digit, fc.constantFrom('-', ':', 'T', 't', ' ', 'Z', 'z', '.', '+', 'x', '٣'));
  const shaped = (millis: boolean) =>
    fc
      .tuple(
        fc.array(digit, { minLength: 4, maxLength: 4 }),
        fc.record({ month: fc.integer({ min: 0, max: 13 }), day: fc.integer({ min: 0, max: 32 }), hour: fc.integer({ min: 0, max: 25 }), minute: fc.integer({ min: 0, max: 60 }), second: fc.integer({ min: 0, max: 60 }) }),
        fc.array(digit, { minLength: 3, maxLength: 3 }),
        fc.array(fc.tuple(fc.nat({ max: millis ? 23 : 19 }), near), { maxLength: 2 }),
      )
      .map(([year, f, ms, swaps]) => {
        const chars = [...`${year.join('')}-${pad(f.month)}-${pad(f.day)}T${pad(f.hour)}:${pad(f.minute)}:${pad(f.second)}${millis ? `.${ms.join('')}` : ''}Z`];
        for (const [at, c] of swaps) chars[at] = c;
        return chars.join('');
      });

  it('answers what the pattern answers, for texts of either form with any fields and any character swapped', () => {
    fc.assert(
      fc.property(fc.oneof(shaped(false), shaped(true)), (text) => {
        expect(parseIsoTimestamp(text)).toBe(byPattern(text));
      }),
      { numRuns: 20_000 },
    );
  });

  it('reads the edges as the pattern does: leap days, the last second, year 0001 and 0000, 24:00', () => {
    for (const text of [
      '2024-02-29T23:59:59Z',
      '2023-02-29T00:00:00Z',
      '1900-02-29T00:00:00.000Z',
      '2000-02-29T12:00:00.999Z',
      '0001-01-01T00:00:00Z',
      '0000-12-31T23:59:59Z',
      '2024-01-01T24:00:00Z',
      '9999-12-31T23:59:59.999Z',
      '2024-12-31t10:00:00Z',
      '2024-12-31T10:00:00z',
    ]) {
      expect(parseIsoTimestamp(text)).toBe(byPattern(text));
    }
    expect(parseIsoTimestamp('2024-02-29T23:59:59Z')).toBe('2024-02-29T23:59:59.000Z');
    expect(parseIsoTimestamp('2000-02-29T12:00:00.999Z')).toBe('2000-02-29T12:00:00.999Z');
    expect(parseIsoTimestamp('2023-02-29T00:00:00Z')).toBeUndefined();
  });
});

describe('parseIsoTimestamp and PostgreSQL', () => {
  let client: pg.Client;

  beforeAll(async () => {
    client = new pg.Client({ connectionString: serverUrl() });
    await client.connect();
    await client.query(`set time zone 'UTC'`);
  });

  afterAll(async () => {
    await client.end();
  });

  it("agrees with timestamptz input in a UTC session on what it accepts (to the millisecond) and refuses impossible dates as it does", async () => {
    // PostgreSQL takes offsets up to ±15:59 (real zones lie within −12 and +14); RFC 3339's up to ±23:59 are read here.
    const withinPostgres = fields.filter((f) => Math.abs(f.offset) < 16 * 60);
    const accepted = fc.sample(fc.tuple(withinPostgres, fc.nat()), { numRuns: 1000, seed: 20261202 }).map(([f, style]) => variant(f, style));
    accepted.push('2026-03-01', '2026-03-01 10:15', '2026-12-31T24:00:00Z', '2024-02-29T00:00:00Z', '0001-01-01T00:00:00Z', '9999-12-31T23:59:59.999Z');
    const { rows } = await client.query<{ v: string; ms: string }>(
      `select v, floor(extract(epoch from v::timestamptz) * 1000)::bigint::text as ms from unnest($1::text[]) as v`,
      [accepted],
    );
    for (const row of rows) expect([row.v, parseIsoTimestamp(row.v)]).toEqual([row.v, new Date(Number(row.ms)).toISOString()]);

    const impossible = ['2024-02-30', '2023-02-29T00:00:00Z', '1900-02-29', '2024-04-31T10:00:00Z', '2024-13-01', '2024-01-01T25:00:00Z', '2024-01-01T10:60:00Z'];
    const { rows: checks } = await client.query<{ v: string; valid: boolean }>(`select v, pg_input_is_valid(v, 'timestamptz') as valid from unnest($1::text[]) as v`, [impossible]);
    for (const check of checks) {
      expect([check.v, check.valid]).toEqual([check.v, false]);
      expect(parseIsoTimestamp(check.v)).toBeUndefined();
    }
  });
});

const MONTH_NAMES = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
const DAY_NAMES = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'];

/** An RFC 5322 date of the fields (whole seconds), with its weekday or without, a numeric offset or GMT. */
function rfcForm(f: Fields, style: number): string {
  const weekday = DAY_NAMES[new Date(Date.UTC(f.year, f.month - 1, f.day)).getUTCDay()]!;
  const zone = style % 3 === 0 ? 'GMT' : offsetText(f.offset, false);
  const seconds = style % 5 === 0 ? '' : `:${pad(f.second)}`;
  return `${style % 2 === 0 ? `${weekday}, ` : ''}${style % 7 === 0 ? f.day : pad(f.day)} ${MONTH_NAMES[f.month - 1]} ${f.year} ${pad(f.hour)}:${pad(f.minute)}${seconds} ${zone}`;
}

describe('parseRfcTimestamp', () => {
  it('gives the instant Date.parse gives for valid RFC 5322 and HTTP dates', () => {
    fc.assert(
      fc.property(fields, fc.nat(), (f, style) => {
        const text = rfcForm(f, style);
        expect([text, parseRfcTimestamp(text)]).toEqual([text, new Date(Date.parse(text)).toISOString()]);
      }),
      { numRuns: 2000, seed: 20261202 },
    );
    expect(parseRfcTimestamp('Tue, 05 Mar 2024 10:00:00 GMT')).toBe('2024-03-05T10:00:00.000Z');
    expect(parseRfcTimestamp('5 mar 2024 10:00 -0130')).toBe('2024-03-05T11:30:00.000Z');
    expect(parseRfcTimestamp('05 Mar 2024 10:00:00 PST')).toBe('2024-03-05T18:00:00.000Z');
  });

  it('refuses what Date.parse rolls over or reads in the local zone: a day the month lacks, a wrong weekday, no zone', () => {
    for (const text of [
      'Fri, 30 Feb 2024 10:00:00 GMT',
      '31 Apr 2024 10:00:00 GMT',
      'Mon, 05 Mar 2024 10:00:00 GMT',
      '05 Mar 2024 10:00:00',
      '05 Mar 2024 24:00:00 GMT',
      '05 Mar 2024 10:61:00 GMT',
      'Sat, 31 Dec 2016 23:59:60 GMT',
      '05 Mar 2024 10:00:00 +2400',
      'March 7, 2024',
      '2024/02/30',
      '２０２４-01-01',
      '1700000000000',
    ]) {
      expect([text, parseRfcTimestamp(text)]).toEqual([text, undefined]);
    }
    // Date.parse reads several of them, into another day or the process's zone.
    expect(Number.isNaN(Date.parse('Fri, 30 Feb 2024 10:00:00 GMT'))).toBe(false);
    expect(Number.isNaN(Date.parse('２０２４-01-01'))).toBe(false);
  });

  it('agrees with PostgreSQL on the instant of RFC dates it reads', async () => {
    const client = new pg.Client({ connectionString: serverUrl() });
    await client.connect();
    try {
      await client.query(`set time zone 'UTC'`);
      // PostgreSQL reads these forms with a numeric offset or GMT, the weekday optional.
      const texts = fc.sample(fc.tuple(fields.filter((f) => Math.abs(f.offset) < 16 * 60), fc.nat()), { numRuns: 500, seed: 20261203 }).map(([f, style]) => rfcForm(f, style));
      const { rows } = await client.query<{ v: string; ms: string }>(`select v, floor(extract(epoch from v::timestamptz) * 1000)::bigint::text as ms from unnest($1::text[]) as v`, [texts]);
      for (const row of rows) expect([row.v, parseRfcTimestamp(row.v)]).toEqual([row.v, new Date(Number(row.ms)).toISOString()]);
    } finally {
      await client.end();
    }
  });
});
