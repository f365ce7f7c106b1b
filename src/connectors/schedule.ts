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
  return minuteInWindow(slot.getUTCHours() * 60 + slot.getUTCMinutes(), window);
}

/** Whether a minute of the day (0 to 1439, UTC) falls inside the fence. */
function minuteInWindow(minute: number, window: { start: number; end: number }): boolean {
  if (window.start === window.end) return true;
  return window.start < window.end ? minute >= window.start && minute < window.end : minute >= window.start || minute < window.end;
}

/**
 * Whether some slot of `cron` (a valid one) falls inside the fence: a slot's time of day is one its
 * minute and hour fields name, whatever its day fields, so a cron none of whose times of day the
 * window holds (`0 12 * * *` with `00:00-06:00`) has every slot skipped.
 */
export function someSlotInWindow(cron: string, window: { start: number; end: number }): boolean {
  const { fields } = CronExpressionParser.parse(cron, { tz: 'UTC' });
  return fields.hour.values.some((hour) => fields.minute.values.some((minute) => minuteInWindow(Number(hour) * 60 + Number(minute), window)));
}

/** `{start, end}` minutes after midnight -> `HH:MM-HH:MM` (as a manifest writes it). */
export function windowText(window: { start: number; end: number }): string {
  const hhmm = (minutes: number) => `${String(Math.floor(minutes / 60)).padStart(2, '0')}:${String(minutes % 60).padStart(2, '0')}`;
  return `${hhmm(window.start)}-${hhmm(window.end)}`;
}

/**
 * Why a slot found due on a schedule is not one of the schedule as stored now (a re-apply committed
 * since the slot was claimed removed the schedule, changed its cron, or moved its window away from
 * the slot), or undefined when the stored schedule still names it. `since` says what happened after
 * what (`connector NAME was re-applied after its slot … was claimed`).
 */
export function slotWithdrawn(since: string, stored: { schedule?: string; window?: { start: number; end: number } }, slot: Date): string | undefined {
  if (!stored.schedule) return `${since}, and has no schedule now: the slot is not run`;
  if (latestSlot(stored.schedule, slot).getTime() !== slot.getTime()) return `${since}, and its schedule "${stored.schedule}" has no slot at that time now: the slot is not run`;
  if (!inWindow(slot, stored.window)) return `${since}, and the slot is outside its window ${windowText(stored.window!)} now: the slot is not run`;
  return undefined;
}

/** A scheduled trigger whose slot the connector or export as stored when its runs would be recorded no longer names (slotWithdrawn): no run is recorded. */
export class SlotWithdrawn extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SlotWithdrawn';
  }
}
