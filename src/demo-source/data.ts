/**
 * The demo source's partner records: generated from a fixed seed, so every start (and every row
 * count) serves the same rows. Rows come from one sequential PRNG stream, so the first 2400 rows of
 * a DEMO_ROWS=200000 start are exactly the 2400 rows of a default start.
 */

export interface Partner {
  id: number;
  name: string;
  city: string;
  country: string;
  credit_limit: number;
  updated_at: string;
}

export const DEFAULT_ROWS = 2400;
const SEED = 0x5eed2400;
/** updated_at values fall in [YEAR_START, YEAR_START + one year). */
export const YEAR_START = Date.UTC(2025, 0, 1);
const YEAR_SECONDS = 365 * 86400;

// Module-level copies: under jest's vm sandbox every `Math.x` lookup in a hot loop costs ~0.7 µs.
const { floor, imul, round } = Math;

/** mulberry32: a tiny, fast, well-mixed 32-bit PRNG; returns floats in [0, 1). */
export function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = imul(t ^ (t >>> 15), t | 1);
    t ^= t + imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const FIRST = [
  'Acme', 'Blue', 'Northwind', 'Silver', 'Granite', 'Harbor', 'Summit', 'Cedar', 'Aurora', 'Falcon',
  'Meridian', 'Orchid', 'Pioneer', 'Quartz', 'Redwood', 'Saffron', 'Tidal', 'Vertex', 'Willow', 'Zenith',
  'Amber', 'Beacon', 'Cobalt', 'Delta', 'Evergreen', 'Fjord', 'Golden', 'Horizon', 'Ivory', 'Juniper',
];
const SECOND = [
  'Logistics', 'Trading', 'Foods', 'Textiles', 'Systems', 'Freight', 'Pharma', 'Energy', 'Metals', 'Labs',
  'Robotics', 'Paper', 'Motors', 'Optics', 'Furniture', 'Analytics', 'Chemicals', 'Marine', 'Retail', 'Tools',
];
/** [country (ISO 3166-1 alpha-2), legal suffixes, cities] */
const PLACES: ReadonlyArray<readonly [string, readonly string[], readonly string[]]> = [
  ['FR', ['SAS', 'SARL', 'SA'], ['Paris', 'Lyon', 'Marseille', 'Toulouse', 'Nantes', 'Lille', 'Bordeaux']],
  ['DE', ['GmbH', 'AG', 'KG'], ['Berlin', 'Hamburg', 'Munich', 'Cologne', 'Frankfurt', 'Leipzig']],
  ['GB', ['Ltd', 'PLC', 'LLP'], ['London', 'Manchester', 'Leeds', 'Glasgow', 'Bristol']],
  ['US', ['Inc.', 'LLC', 'Corp.'], ['New York', 'Chicago', 'Austin', 'Seattle', 'Denver', 'Boston']],
  ['ES', ['S.L.', 'S.A.'], ['Madrid', 'Barcelona', 'Valencia', 'Seville']],
  ['IT', ['S.r.l.', 'S.p.A.'], ['Milan', 'Rome', 'Turin', 'Bologna', 'Naples']],
  ['NL', ['B.V.', 'N.V.'], ['Amsterdam', 'Rotterdam', 'Utrecht', 'Eindhoven']],
  ['BE', ['NV', 'SRL'], ['Brussels', 'Antwerp', 'Ghent', 'Liège']],
  ['CH', ['AG', 'SA', 'GmbH'], ['Zurich', 'Geneva', 'Basel', 'Lausanne']],
  ['SE', ['AB'], ['Stockholm', 'Gothenburg', 'Malmö']],
  ['PL', ['Sp. z o.o.', 'S.A.'], ['Warsaw', 'Kraków', 'Wrocław', 'Gdańsk']],
  ['PT', ['Lda', 'S.A.'], ['Lisbon', 'Porto', 'Braga']],
  ['IE', ['Ltd', 'DAC'], ['Dublin', 'Cork', 'Galway']],
  ['CA', ['Inc.', 'Ltd'], ['Toronto', 'Montreal', 'Vancouver', 'Calgary']],
  ['JP', ['K.K.', 'G.K.'], ['Tokyo', 'Osaka', 'Nagoya', 'Fukuoka']],
];

function pick<T>(list: readonly T[], r: number): T {
  return list[floor(r * list.length)]!;
}

// Date#toISOString costs ~3 µs a call here; formatting from tables keeps 200,000 rows well under a second.
const TWO_DIGITS = Array.from({ length: 60 }, (_, i) => String(i).padStart(2, '0'));
const DAYS = Array.from({ length: 365 }, (_, d) => new Date(YEAR_START + d * 86400_000).toISOString().slice(0, 11));

/** `YYYY-MM-DDTHH:MM:SSZ` for a second of the demo year. */
function isoSecond(second: number): string {
  const time = second % 86400;
  return `${DAYS[(second - time) / 86400]}${TWO_DIGITS[floor(time / 3600)]}:${TWO_DIGITS[floor(time / 60) % 60]}:${TWO_DIGITS[time % 60]}Z`;
}

/** Every name a country can give, built once: rows share these strings instead of allocating their own. */
const NAMES = PLACES.map(([, suffixes]) => FIRST.flatMap((first) => SECOND.flatMap((second) => suffixes.map((suffix) => `${first} ${second} ${suffix}`))));

function index(length: number, r: number): number {
  return floor(r * length);
}

function generate(count: number, updatedMs?: Float64Array): Partner[] {
  const random = mulberry32(SEED);
  const rows = new Array<Partner>(count);
  for (let i = 0; i < count; i++) {
    const place = index(PLACES.length, random());
    const [country, suffixes, cities] = PLACES[place]!;
    const first = index(FIRST.length, random());
    const second = index(SECOND.length, random());
    const suffix = index(suffixes.length, random());
    const name = NAMES[place]![(first * SECOND.length + second) * suffixes.length + suffix]!;
    const city = pick(cities, random());
    // Skewed towards small limits: most partners get a few thousand, a few get hundreds of thousands.
    const r = random();
    const credit_limit = 1000 + round((r * r * 499000) / 500) * 500;
    const at = floor(random() * YEAR_SECONDS);
    if (updatedMs) updatedMs[i] = YEAR_START + at * 1000;
    rows[i] = { id: i + 1, name, city, country, credit_limit, updated_at: isoSecond(at) };
  }
  return rows;
}

/** Generates rows 1…count in O(count). */
export function generatePartners(count: number): Partner[] {
  return generate(count);
}

/** A read-only window on the rows in id order: the first `length` entries of `rows`. */
export interface View {
  rows: readonly Partner[];
  length: number;
}

const FILTER_CACHE_SIZE = 16;

/** The dataset one server serves; pages are sliced from it, never copied whole per request. */
export class Partners {
  readonly rows: readonly Partner[];
  private readonly updatedMs: Float64Array;
  /** updated_since (epoch ms) -> the matching rows in id order; bounded, oldest evicted first. */
  private readonly filtered = new Map<number, readonly Partner[]>();

  constructor(count: number) {
    this.updatedMs = new Float64Array(count);
    this.rows = generate(count, this.updatedMs);
  }

  get size(): number {
    return this.rows.length;
  }

  all(): View {
    return { rows: this.rows, length: this.rows.length };
  }

  /** Rows whose updated_at is at or after `sinceMs` (inclusive), in id order. */
  updatedSince(sinceMs: number): View {
    let rows = this.filtered.get(sinceMs);
    if (!rows) {
      const kept: Partner[] = [];
      for (let i = 0; i < this.rows.length; i++) if (this.updatedMs[i]! >= sinceMs) kept.push(this.rows[i]!);
      rows = kept;
      if (this.filtered.size >= FILTER_CACHE_SIZE) this.filtered.delete(this.filtered.keys().next().value!);
      this.filtered.set(sinceMs, rows);
    }
    return { rows, length: rows.length };
  }
}

/** The number of rows of an id-ordered view whose id is at most `maxId` (binary search). */
export function countUpTo(view: View, maxId: number): number {
  let lo = 0;
  let hi = view.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (view.rows[mid]!.id <= maxId) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
