/**
 * ISO-8601 timestamps as promoted columns read them (`parse_iso8601`, and `timestamptz` text in ISO
 * form): a strict reading, the same on every machine, in place of `Date.parse`, which rolls an
 * impossible day over into the next month (`2024-02-30` became `2024-03-01`) and reads a time
 * without an offset in the hub's own time zone.
 *
 * Accepted: `YYYY-MM-DD`, optionally followed by `T` (or `t`, or a space) and `HH:MM`, `HH:MM:SS` or
 * `HH:MM:SS` with a decimal fraction (a point and one digit or more), and optionally by an offset `Z`, `z`,
 * `±HH:MM`, `±HHMM` or `±HH`. A date alone is midnight UTC; a time without an offset is UTC. Every
 * field is checked: a month 01–12, a day that exists in its month (leap years included), hours
 * 00–23 (and `24:00:00` as the next day's midnight, as ISO 8601 and PostgreSQL read it), minutes and
 * seconds 00–59, an offset within ±23:59, a year 0001–9999 once in UTC. The fraction is kept to the
 * millisecond (further digits are dropped, as `Date` did).
 *
 * The result is the instant in `Date.prototype.toISOString()` form (`2024-02-29T10:00:00.000Z`),
 * what the hub has always stored; undefined when the text is not such a timestamp.
 */

/** Text that begins as an ISO-8601 date does (what a `timestamptz` column reads with parseIsoTimestamp rather than Date.parse). */
export const ISO_DATE_START = /^\d{4}-\d{2}-\d{2}/;

const ISO = /^(\d{4})-(\d{2})-(\d{2})(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?)?(?:([Zz])|([+-])(\d{2})(?::?(\d{2}))?)?$/;

const MS_PER_MINUTE = 60_000;
const MS_PER_DAY = 86_400_000;
/** 0001-01-01T00:00:00.000Z and 10000-01-01T00:00:00.000Z */
const EARLIEST = -62_135_596_800_000;
const BEYOND = 253_402_300_800_000;

function isLeap(year: number): boolean {
  return (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
}

function daysIn(year: number, month: number): number {
  return month === 2 ? (isLeap(year) ? 29 : 28) : month === 4 || month === 6 || month === 9 || month === 11 ? 30 : 31;
}

/** Days from 1970-01-01 to the date (proleptic Gregorian; Howard Hinnant's days_from_civil). */
function daysFromCivil(year: number, month: number, day: number): number {
  const y = month <= 2 ? year - 1 : year;
  const era = Math.floor(y / 400);
  const yoe = y - era * 400;
  const doy = Math.floor((153 * (month + (month > 2 ? -3 : 9)) + 2) / 5) + day - 1;
  const doe = yoe * 365 + Math.floor(yoe / 4) - Math.floor(yoe / 100) + doy;
  return era * 146_097 + doe - 719_468;
}

/** The fraction's first three digits as milliseconds ("5" is 500, "12345" is 123). */
function millis(fraction: string | undefined): number {
  if (fraction === undefined) return 0;
  return Number(`${fraction}00`.slice(0, 3));
}

export function parseIsoTimestamp(text: string): string | undefined {
  return plainUtc(text) ?? byPattern(text);
}

/** `text` in the two forms most sources write (`2024-02-29T10:00:00Z`, `2024-02-29T10:00:00.123Z`), read without the pattern. */
const PLAIN = 20;
const PLAIN_MILLIS = 24;

/**
 * The common case read character by character: `YYYY-MM-DDTHH:MM:SSZ` or `YYYY-MM-DDTHH:MM:SS.sssZ`
 * (an upper-case `T` and `Z`, the form `toISOString` writes), a valid date, hours 00–23: already the
 * stored form (the first without `.000`). Undefined for anything else, valid or not, which `byPattern`
 * then reads: this answers only what `byPattern` would answer the same (tested), a few times faster,
 * and it runs for every row of a source promoting a timestamp.
 */
function plainUtc(text: string): string | undefined {
  const length = text.length;
  if (length !== PLAIN && length !== PLAIN_MILLIS) return undefined;
  if (text.charCodeAt(4) !== 0x2d || text.charCodeAt(7) !== 0x2d || text.charCodeAt(10) !== 0x54 || text.charCodeAt(13) !== 0x3a || text.charCodeAt(16) !== 0x3a) return undefined;
  if (text.charCodeAt(length - 1) !== 0x5a) return undefined;
  if (length === PLAIN_MILLIS && (text.charCodeAt(19) !== 0x2e || digits(text, 20, 3) < 0)) return undefined;
  const year = digits(text, 0, 4);
  const month = digits(text, 5, 2);
  const day = digits(text, 8, 2);
  const hour = digits(text, 11, 2);
  const minute = digits(text, 14, 2);
  const second = digits(text, 17, 2);
  if (year < 1 || month < 1 || month > 12 || day < 1 || day > daysIn(year, month) || hour < 0 || hour > 23 || minute < 0 || minute > 59 || second < 0 || second > 59) return undefined;
  return length === PLAIN ? `${text.slice(0, 19)}.000Z` : text;
}

/** The number the `count` ASCII digits of `text` from `at` write, or -1 when one of them is not a digit. */
function digits(text: string, at: number, count: number): number {
  let n = 0;
  for (let i = at; i < at + count; i++) {
    const d = text.charCodeAt(i) - 0x30;
    if (d < 0 || d > 9) return -1;
    n = n * 10 + d;
  }
  return n;
}

/** Any form the module accepts, read with its pattern (parseIsoTimestamp's; exported for the tests that hold plainUtc to it). */
export function byPattern(text: string): string | undefined {
  const m = ISO.exec(text);
  if (m === null) return undefined;
  const year = Number(m[1]);
  const month = Number(m[2]);
  const day = Number(m[3]);
  if (month < 1 || month > 12 || day < 1 || day > daysIn(year, month)) return undefined;
  const hour = m[4] === undefined ? 0 : Number(m[4]);
  const minute = m[5] === undefined ? 0 : Number(m[5]);
  const second = m[6] === undefined ? 0 : Number(m[6]);
  const ms = millis(m[7]);
  if (minute > 59 || second > 59) return undefined;
  // 24:00 only as the end of the day: no minutes, seconds or fraction beyond it.
  if (hour > 24 || (hour === 24 && (minute !== 0 || second !== 0 || (m[7] !== undefined && /[1-9]/.test(m[7]))))) return undefined;
  let offsetMinutes = 0;
  if (m[9] !== undefined) {
    const offsetHours = Number(m[10]);
    const offsetMins = m[11] === undefined ? 0 : Number(m[11]);
    if (offsetHours > 23 || offsetMins > 59) return undefined;
    offsetMinutes = (m[9] === '-' ? -1 : 1) * (offsetHours * 60 + offsetMins);
  }
  // The common case, UTC within the day: the text itself in the stored form, no arithmetic.
  if (offsetMinutes === 0 && hour < 24 && year >= 1) {
    const time = `${m[4] ?? '00'}:${m[5] ?? '00'}:${m[6] ?? '00'}`;
    return `${m[1]}-${m[2]}-${m[3]}T${time}.${String(ms).padStart(3, '0')}Z`;
  }
  const instant = daysFromCivil(year, month, day) * MS_PER_DAY + ((hour * 60 + minute) * 60 + second) * 1000 + ms - offsetMinutes * MS_PER_MINUTE;
  if (instant < EARLIEST || instant >= BEYOND) return undefined;
  return new Date(instant).toISOString();
}

/**
 * RFC 5322 (e-mail) and RFC 9110 (HTTP) dates: `Tue, 05 Mar 2024 10:00:00 GMT`, the weekday
 * optional, seconds optional, a zone required (`GMT`, `UT`, `UTC`, `Z`, `±HHMM`, or the North
 * American zones RFC 5322 keeps). Read as strictly as ISO text: a day the month lacks is not a
 * date (never rolled into the next month), a weekday must be the date's, and the result is the
 * same on every machine. Undefined otherwise.
 */
export function parseRfcTimestamp(text: string): string | undefined {
  const m = RFC.exec(text);
  if (m === null) return undefined;
  const day = Number(m[2]);
  const month = MONTHS.indexOf(m[3]!.toLowerCase()) + 1;
  const year = Number(m[4]);
  const hour = Number(m[5]);
  const minute = Number(m[6]);
  const second = m[7] === undefined ? 0 : Number(m[7]);
  // A leap second (:60) is refused, as the ISO reader refuses it: read strictly, never rolled over.
  if (year < 1 || day < 1 || day > daysIn(year, month) || hour > 23 || minute > 59 || second > 59) return undefined;
  const zone = m[8]!.toUpperCase();
  let offsetMinutes = ZONES[zone];
  if (offsetMinutes === undefined) {
    const hours = Number(zone.slice(1, 3));
    const minutes = Number(zone.slice(3, 5));
    if (hours > 23 || minutes > 59) return undefined;
    offsetMinutes = (zone[0] === '-' ? -1 : 1) * (hours * 60 + minutes);
  }
  const days = daysFromCivil(year, month, day);
  // 1970-01-01 was a Thursday.
  if (m[1] !== undefined && WEEKDAYS[(((days + 4) % 7) + 7) % 7] !== m[1].toLowerCase()) return undefined;
  const instant = days * MS_PER_DAY + ((hour * 60 + minute) * 60 + second) * 1000 - offsetMinutes * MS_PER_MINUTE;
  if (instant < EARLIEST || instant >= BEYOND) return undefined;
  return new Date(instant).toISOString();
}

const MONTHS = ['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'];
const WEEKDAYS = ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'];
const ZONES: Record<string, number> = { GMT: 0, UT: 0, UTC: 0, Z: 0, EST: -300, EDT: -240, CST: -360, CDT: -300, MST: -420, MDT: -360, PST: -480, PDT: -420 };
const RFC = /^(?:(mon|tue|wed|thu|fri|sat|sun),\s*)?(\d{1,2})\s+(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)\s+(\d{4})\s+(\d{2}):(\d{2})(?::(\d{2}))?\s+(gmt|ut|utc|z|est|edt|cst|cdt|mst|mdt|pst|pdt|[+-]\d{4})$/i;

/**
 * Milliseconds since 1970 as the stored form, within the years 1 to 9999 (UTC) every timestamp
 * reader here keeps to; undefined beyond (PostgreSQL would refuse some of those texts, and the
 * row would be dead-lettered for one column).
 */
export function timestampFromMillis(ms: number): string | undefined {
  if (!Number.isFinite(ms) || ms < EARLIEST || ms >= BEYOND) return undefined;
  return new Date(ms).toISOString();
}
