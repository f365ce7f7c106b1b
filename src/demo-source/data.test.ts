import { describe, expect, it } from '@jest/globals';
import { countUpTo, DEFAULT_ROWS, generatePartners, mulberry32, Partners, YEAR_START } from './data.js';

describe('demo source data', () => {
  it('is identical on every generation, ids 1…N with every field filled', () => {
    const a = generatePartners(DEFAULT_ROWS);
    const b = generatePartners(DEFAULT_ROWS);
    expect(b).toEqual(a);
    expect(a.map((p) => p.id)).toEqual(Array.from({ length: DEFAULT_ROWS }, (_, i) => i + 1));
    for (const p of a) {
      expect(Object.keys(p)).toEqual(['id', 'name', 'city', 'country', 'credit_limit', 'updated_at']);
      expect(p.name.length).toBeGreaterThan(3);
      expect(p.city.length).toBeGreaterThan(1);
      expect(p.country).toMatch(/^[A-Z]{2}$/);
      expect(Number.isInteger(p.credit_limit) && p.credit_limit >= 1000 && p.credit_limit <= 500000).toBe(true);
    }
    // Pinned: docs/demo-source.md shows this record, and fixtures elsewhere may rely on the data.
    expect(a[0]).toEqual({ id: 1, name: 'Aurora Metals KG', city: 'Leipzig', country: 'DE', credit_limit: 76000, updated_at: '2025-12-12T10:56:40Z' });
    expect(a[2399]).toEqual({ id: 2400, name: 'Aurora Chemicals S.A.', city: 'Lisbon', country: 'PT', credit_limit: 152500, updated_at: '2025-08-09T15:42:10Z' });
    expect(new Set(a.map((p) => p.country)).size).toBeGreaterThan(10);
  });

  it('a larger row count keeps the same first rows', () => {
    expect(generatePartners(5000).slice(0, DEFAULT_ROWS)).toEqual(generatePartners(DEFAULT_ROWS));
  });

  it('spreads updated_at over one year, in UTC ISO-8601, not in id order', () => {
    const rows = generatePartners(DEFAULT_ROWS);
    const times = rows.map((p) => Date.parse(p.updated_at));
    for (const p of rows) expect(p.updated_at).toMatch(/^2025-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    const year = 365 * 86400 * 1000;
    expect(Math.min(...times)).toBeGreaterThanOrEqual(YEAR_START);
    expect(Math.max(...times)).toBeLessThan(YEAR_START + year);
    // Spread: every month of the year is present.
    expect(new Set(rows.map((p) => p.updated_at.slice(5, 7))).size).toBe(12);
    // Not in id order: about half of the neighbours are out of order.
    let descents = 0;
    for (let i = 1; i < times.length; i++) if (times[i]! < times[i - 1]!) descents++;
    expect(descents).toBeGreaterThan(DEFAULT_ROWS / 3);
    // The newest row is not the last id, so a watermark cannot be read from the id.
    expect(times.indexOf(Math.max(...times))).not.toBe(DEFAULT_ROWS - 1);
  });

  it('generates 800,000 rows without anything quadratic', () => {
    // Relative, not absolute: eight times the rows may take about eight times as long (a quadratic
    // generator would take sixty-four times), measured on this machine under this load. Both sizes
    // are large enough to pay a large heap's garbage collection alike: against 20,000 rows (a
    // heap that never grows, ≈ 2 ms) a CI run on busy cores measured 84 × for 10 × the rows. The
    // best of three of each, the two sizes taking turns, so that a busy stretch of the machine (the
    // other jest worker, PostgreSQL) falls on both alike. With four times the rows and a bound of
    // 10 (between 4 and 16) CI runs measured 10.7 × and 11.8 × where the generator alone takes
    // 3.9–4.6 ×: eight times the rows leave a wider gap between linear and quadratic for that noise.
    // Speed itself is measured in bench/.
    const once = (rows: number) => {
      const started = performance.now();
      const data = new Partners(rows);
      const ms = performance.now() - started;
      expect(data.size).toBe(rows);
      expect(data.rows[rows - 1]!.id).toBe(rows);
      return ms;
    };
    let small = Number.POSITIVE_INFINITY;
    let large = Number.POSITIVE_INFINITY;
    for (let turn = 0; turn < 3; turn++) {
      small = Math.min(small, once(100_000));
      large = Math.min(large, once(800_000));
    }
    // 24: between linear (8) and quadratic (64), with room for a busy machine.
    expect(large).toBeLessThan(Math.max(small, 1) * 24);
  });

  it('filters updated_since inclusively, in id order, cached per value', () => {
    const data = new Partners(DEFAULT_ROWS);
    const pivot = data.rows[17]!.updated_at;
    const view = data.updatedSince(Date.parse(pivot));
    const expected = data.rows.filter((p) => p.updated_at >= pivot);
    expect(view.rows).toEqual(expected);
    expect(view.length).toBe(expected.length);
    expect(view.rows.some((p) => p.updated_at === pivot)).toBe(true);
    expect(data.updatedSince(Date.parse(pivot)).rows).toBe(view.rows);
  });

  it('counts the rows of a view up to an id', () => {
    const data = new Partners(100);
    expect(countUpTo(data.all(), 0)).toBe(0);
    expect(countUpTo(data.all(), 40)).toBe(40);
    expect(countUpTo(data.all(), 1000)).toBe(100);
  });

  it('mulberry32 is deterministic and in [0, 1)', () => {
    const a = mulberry32(42);
    const b = mulberry32(42);
    for (let i = 0; i < 1000; i++) {
      const x = a();
      expect(x).toBe(b());
      expect(x >= 0 && x < 1).toBe(true);
    }
  });
});
