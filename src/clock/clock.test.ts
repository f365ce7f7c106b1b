import { afterEach, describe, expect, it, jest } from '@jest/globals';
import { captureLogs } from '../../test/harness/log-capture.js';
import { until } from '../../test/harness/until.js';
import { ClockRunner, msUntilDaily } from './clock.js';

const runners: ClockRunner[] = [];
afterEach(async () => {
  await Promise.all(runners.splice(0).map((r) => r.stop()));
});

function runner(): ClockRunner {
  const r = new ClockRunner();
  runners.push(r);
  return r;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('clock runner', () => {
  it('ticks at the configured cadence', async () => {
    const clock = runner();
    let count = 0;
    clock.schedule('fast', { every: 20 }, async () => {
      count++;
    });
    const started = Date.now();
    clock.start();
    await until('three ticks', () => count >= 3, { everyMs: 5 });
    await clock.stop();
    // At most one tick per 20 ms of the time it ran (and the first at once): a bound relative to
    // the time taken, not a fixed one, since a loaded machine delays the waiting too.
    expect(count).toBeLessThanOrEqual(Math.floor((Date.now() - started) / 20) + 1);
  });

  it('skips a tick that finds its predecessor still running', async () => {
    const clock = runner();
    let concurrent = 0;
    let maxConcurrent = 0;
    clock.schedule('slow', { every: 10 }, async () => {
      concurrent++;
      maxConcurrent = Math.max(maxConcurrent, concurrent);
      await sleep(60); // a slow run (kept: the ticks meanwhile are what is tested)
      concurrent--;
    });
    const started = Date.now();
    clock.start();
    await until('two runs and a skipped tick', () => clock.stats('slow').runs >= 2 && clock.stats('slow').skipped > 0, { everyMs: 5 });
    await clock.stop();
    const stats = clock.stats('slow');
    expect(maxConcurrent).toBe(1);
    // Each run takes at least 60 ms: no more runs than that allows in the time the clock ran.
    expect(stats.runs).toBeLessThanOrEqual(Math.floor((Date.now() - started) / 60) + 1);
  });

  it('a manual trigger obeys the same rule', async () => {
    const clock = runner();
    let release!: () => void;
    clock.schedule('job', { every: 60_000 }, () => new Promise<void>((resolve) => (release = resolve)));
    const first = clock.trigger('job');
    expect(await clock.trigger('job')).toBe(false);
    release();
    expect(await first).toBe(true);
    expect(clock.stats('job')).toMatchObject({ runs: 1, skipped: 1, running: false });
  });

  it('a failing run is counted and does not stop the clock', async () => {
    const clock = runner();
    let calls = 0;
    clock.schedule('flaky', { every: 15 }, async () => {
      calls++;
      if (calls === 1) throw new Error('boom');
    });
    clock.start();
    await until('the clock to tick on after the failure', () => calls > 2, { everyMs: 5 });
    expect(clock.stats('flaky').failures).toBe(1);
  });

  it('stop waits for the run in progress and ends the ticking', async () => {
    const clock = runner();
    let finished = 0;
    clock.schedule('job', { every: 10 }, async () => {
      await sleep(40); // a run that takes its time (kept: the stop must wait for it)
      finished++;
    });
    clock.start();
    await until('a run in progress', () => clock.stats('job').running, { everyMs: 5 });
    await clock.stop();
    const after = finished;
    expect(after).toBe(clock.stats('job').runs);
    // The marker: a timer of the job's cadence armed now fires after any the clock armed before the
    // stop (Node fires timers in the order they are due), and a tick counts its run at once.
    await sleep(10);
    expect(clock.stats('job').runs).toBe(after);
    expect(finished).toBe(after);
  });

  it('after stop() nothing starts a job (a trigger, a wake-up) until start() again; then it runs again', async () => {
    const clock = runner();
    let runs = 0;
    clock.schedule('sweep', { every: 60_000 }, async () => {
      runs++;
    });
    clock.start();
    expect(await clock.trigger('sweep')).toBe(true);
    await clock.stop();
    // Was: run (a sweep begun on a stopped clock, which the stop no longer waits for).
    expect(await clock.trigger('sweep')).toBe(false);
    expect(runs).toBe(1);
    expect(clock.stats('sweep').runs).toBe(1);
    clock.start();
    expect(await clock.trigger('sweep')).toBe(true);
    expect(runs).toBe(2);
  });

  it('stop signals stopSignal before it waits, so a job that can drop its step ends at once', async () => {
    const clock = runner();
    let sawAbort = false;
    clock.schedule('droppable', { every: 10 }, async () => {
      if (clock.stopSignal.aborted) return;
      // A step of a minute, given up on the stop.
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 60_000);
        clock.stopSignal.addEventListener('abort', () => {
          sawAbort = true;
          clearTimeout(timer);
          resolve();
        }, { once: true });
      });
    });
    clock.start();
    await until('the step under way', () => clock.stats('droppable').running, { everyMs: 5 });
    const began = Date.now();
    await clock.stop();
    expect(sawAbort).toBe(true);
    // Not relative to a baseline: the step it must not wait for is a minute long, six times this
    // bound (1 s was sixty, and left a loaded machine's pauses no room).
    expect(Date.now() - began).toBeLessThan(10_000);
    // Started again, the signal is a new one.
    clock.start();
    expect(clock.stopSignal.aborted).toBe(false);
  });

  it('a job failing because the database is away logs one warning until it succeeds again, not an error per tick', async () => {
    const clock = runner();
    let calls = 0;
    clock.schedule('indexer', { every: 1_000_000 }, async () => {
      calls++;
      if (calls <= 3) throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
      if (calls === 5) throw new Error('a real bug');
    });
    const logs = captureLogs('info');
    try {
      for (let i = 0; i < 5; i++) await clock.trigger('indexer');
      const lines = logs.lines().map((l) => `${l.level} ${l.msg}`);
      expect(lines).toEqual([
        'warn clock job indexer: the database is unavailable; trying again at every tick (logged once)',
        'info clock job indexer: the database answers again',
        'error clock job indexer failed',
      ]);
      expect(clock.stats('indexer').failures).toBe(4);
    } finally {
      logs.restore();
    }
  });

  it('daily times are UTC and always in the future', () => {
    const now = Date.parse('2026-11-22T03:00:00Z');
    expect(msUntilDaily('04:30', now)).toBe(90 * 60_000);
    expect(msUntilDaily('03:00', now)).toBe(24 * 3_600_000);
    expect(msUntilDaily('00:15', now)).toBe((21 * 60 + 15) * 60_000);
    expect(() => msUntilDaily('4:30', now)).toThrow(/HH:MM/);
    expect(() => msUntilDaily('24:00', now)).toThrow(/HH:MM/);
  });

  it('a daily job whose timer fires while the wall clock still reads before its time runs once, not again moments later', async () => {
    // The timers' time is jest's (advanced by hand, not slept); the wall clock runs at half its speed
    // (stepped back, or slowed, meanwhile): 200 ms before 04:30 UTC at the start.
    jest.useFakeTimers({ now: 0 });
    try {
      const wall = Date.UTC(2026, 0, 1, 4, 29, 59, 800);
      const clock = new ClockRunner(() => wall + Date.now() / 2);
      let runs = 0;
      clock.schedule('purge', { dailyAt: '04:30' }, async () => {
        runs++;
      });
      clock.start();
      await jest.advanceTimersByTimeAsync(200);
      expect(runs).toBe(1); // the run at 04:30 (the wall clock reads 04:29:59.900)
      // An hour of the timers' time. Was: armed again for the same 04:30 each time it fired (100 ms,
      // then 50 ms, …): a run at each.
      await jest.advanceTimersByTimeAsync(3_600_000);
      expect(runs).toBe(1);
      await clock.stop();
    } finally {
      jest.useRealTimers();
    }
  });

  it('refuses a duplicate name or a non-positive cadence', () => {
    const clock = runner();
    clock.schedule('a', { every: 10 }, async () => {});
    expect(() => clock.schedule('a', { every: 10 }, async () => {})).toThrow(/already scheduled/);
    expect(() => clock.schedule('b', { every: 0 }, async () => {})).toThrow(/positive/);
  });
});
