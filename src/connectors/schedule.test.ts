import { describe, expect, it } from '@jest/globals';
import { inWindow, latestSlot, parseWindow, slotWithdrawn, windowText } from './schedule.js';

const at = (iso: string) => new Date(iso);

describe('schedules', () => {
  it('the latest due slot of a UTC cron', () => {
    expect(latestSlot('*/15 * * * *', at('2026-11-22T03:31:10Z')).toISOString()).toBe('2026-11-22T03:30:00.000Z');
    expect(latestSlot('*/15 * * * *', at('2026-11-22T03:30:00Z')).toISOString()).toBe('2026-11-22T03:30:00.000Z');
    expect(latestSlot('0 2 * * *', at('2026-11-22T01:59:59Z')).toISOString()).toBe('2026-11-21T02:00:00.000Z');
  });

  it('window fences are UTC, end exclusive, and may cross midnight', () => {
    const night = parseWindow('22:00-04:00')!;
    expect(night).toEqual({ start: 1320, end: 240 });
    expect(inWindow(at('2026-11-22T23:30:00Z'), night)).toBe(true);
    expect(inWindow(at('2026-11-22T03:59:00Z'), night)).toBe(true);
    expect(inWindow(at('2026-11-22T04:00:00Z'), night)).toBe(false);
    expect(inWindow(at('2026-11-22T12:00:00Z'), night)).toBe(false);
    const day = parseWindow('09:00-17:30')!;
    expect(inWindow(at('2026-11-22T09:00:00Z'), day)).toBe(true);
    expect(inWindow(at('2026-11-22T17:30:00Z'), day)).toBe(false);
    expect(inWindow(at('2026-11-22T08:59:00Z'), day)).toBe(false);
    expect(inWindow(at('2026-11-22T08:59:00Z'), undefined)).toBe(true);
  });

  it('refuses malformed windows', () => {
    for (const text of ['9:00-17:00', '24:00-01:00', '09:00 - 17:00', '09:00']) expect(parseWindow(text)).toBeUndefined();
  });

  it('a claimed slot is withdrawn when the schedule as stored now no longer names it', () => {
    const slot = at('2026-11-22T03:30:00Z');
    const since = 'connector c was re-applied after its slot 2026-11-22T03:30:00.000Z was claimed';
    expect(slotWithdrawn(since, { schedule: '*/15 * * * *' }, slot)).toBeUndefined();
    expect(slotWithdrawn(since, { schedule: '30 3 * * *', window: parseWindow('03:00-04:00') }, slot)).toBeUndefined();
    expect(slotWithdrawn(since, {}, slot)).toBe(`${since}, and has no schedule now: the slot is not run`);
    expect(slotWithdrawn(since, { schedule: '0 * * * *' }, slot)).toBe(`${since}, and its schedule "0 * * * *" has no slot at that time now: the slot is not run`);
    expect(slotWithdrawn(since, { schedule: '*/15 * * * *', window: parseWindow('22:00-03:30') }, slot)).toBe(`${since}, and the slot is outside its window 22:00-03:30 now: the slot is not run`);
    expect(windowText({ start: 0, end: 1439 })).toBe('00:00-23:59');
  });
});
