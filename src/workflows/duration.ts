/**
 * Durations of `spec.dormancy.after`: the short form `<n>s|m|h|d` (90s, 15m, 2h, 30d) or ISO-8601
 * (P30D, PT15M, P1Y2M, P2W). Answers the PostgreSQL interval text the sweep compares with, or
 * undefined when the text is neither form, is zero, or is longer than MAX_DAYS (a timestamp minus
 * such an interval would leave PostgreSQL's range).
 */
const SHORT = /^([0-9]{1,9})([smhd])$/;
const ISO = /^P(?!$)(?:([0-9]{1,9})Y)?(?:([0-9]{1,9})M)?(?:([0-9]{1,9})W)?(?:([0-9]{1,9})D)?(?:T(?=[0-9])(?:([0-9]{1,9})H)?(?:([0-9]{1,9})M)?(?:([0-9]{1,9}(?:\.[0-9]{1,6})?)S)?)?$/;
const UNITS: Record<string, string> = { s: 'seconds', m: 'minutes', h: 'hours', d: 'days' };
const SHORT_DAYS: Record<string, number> = { s: 1 / 86400, m: 1 / 1440, h: 1 / 24, d: 1 };

/** 100 years. */
export const MAX_DAYS = 36_600;

export function durationInterval(text: string): string | undefined {
  const short = SHORT.exec(text);
  if (short) {
    const n = Number(short[1]);
    const days = n * SHORT_DAYS[short[2]!]!;
    return n > 0 && days <= MAX_DAYS ? `${n} ${UNITS[short[2]!]}` : undefined;
  }
  const iso = ISO.exec(text);
  if (!iso) return undefined;
  const [y, mo, w, d, h, mi, s] = iso.slice(1).map((v) => Number(v ?? 0)) as [number, number, number, number, number, number, number];
  const days = y * 366 + mo * 31 + w * 7 + d + h / 24 + mi / 1440 + s / 86400;
  return days > 0 && days <= MAX_DAYS ? text : undefined;
}
