/**
 * Durations of `spec.dormancy.after`: the short form `<n>s|m|h|d` (90s, 15m, 2h, 30d) or ISO-8601
 * (P30D, PT15M, P1Y2M, P2W). Answers the PostgreSQL interval text the sweep compares with, or
 * undefined when the text is neither form or is zero.
 */
const SHORT = /^([0-9]{1,9})([smhd])$/;
const ISO = /^P(?!$)([0-9]{1,9}Y)?([0-9]{1,9}M)?([0-9]{1,9}W)?([0-9]{1,9}D)?(T(?=[0-9])([0-9]{1,9}H)?([0-9]{1,9}M)?([0-9]{1,9}(\.[0-9]{1,6})?S)?)?$/;
const UNITS: Record<string, string> = { s: 'seconds', m: 'minutes', h: 'hours', d: 'days' };

export function durationInterval(text: string): string | undefined {
  const short = SHORT.exec(text);
  if (short) return Number(short[1]) > 0 ? `${Number(short[1])} ${UNITS[short[2]!]}` : undefined;
  if (!ISO.test(text)) return undefined;
  // Every number zero is no duration at all.
  if (!/[1-9]/.test(text)) return undefined;
  return text;
}
