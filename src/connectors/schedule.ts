import { CronExpressionParser } from 'cron-parser';

/**
 * Schedule arithmetic (spec 3: 5-field cron in UTC; a `HH:MM-HH:MM` window fence, end exclusive,
 * possibly crossing midnight). Pure functions: the scheduler and `svc-hub run --scheduled` share them.
 */

/** The latest slot of `cron` at or before `now`. */
export function latestSlot(cron: string, now: Date): Date {
  const expression = CronExpressionParser.parse(cron, { currentDate: new Date(now.getTime() + 1), tz: 'UTC' });
  return expression.prev().toDate();
}

/** `HH:MM-HH:MM` -> minutes after midnight; undefined when malformed. */
export function parseWindow(text: string): { start: number; end: number } | undefined {
  const match = /^([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-3]):([0-5]\d)$/.exec(text);
  if (!match) return undefined;
  return { start: Number(match[1]) * 60 + Number(match[2]), end: Number(match[3]) * 60 + Number(match[4]) };
}

/** Whether a slot falls inside the fence (end exclusive; a window that crosses midnight wraps). */
export function inWindow(slot: Date, window: { start: number; end: number } | undefined): boolean {
  if (!window) return true;
  const minute = slot.getUTCHours() * 60 + slot.getUTCMinutes();
  if (window.start === window.end) return true;
  return window.start < window.end ? minute >= window.start && minute < window.end : minute >= window.start || minute < window.end;
}
