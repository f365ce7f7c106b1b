import { isDatabaseUnavailable } from '../db/unavailable.js';
import { runWithContext } from '../observability/context.js';
import { loggableMessage } from '../observability/database-errors.js';
import { logger } from '../observability/logger.js';

/**
 * The one clock runner every periodic job uses (spec 1 Clocks): a cadence from configuration, UTC
 * for daily times, and a tick that finds its predecessor still running is skipped, not queued.
 */

export type Cadence = { every: number } | { dailyAt: string };

/**
 * The time in milliseconds since the epoch. Whatever measures time takes one (default `Date.now`),
 * so a test moves time forward by handing in its own instead of sleeping.
 */
export type Now = () => number;

interface JobStats {
  runs: number;
  skipped: number;
  failures: number;
  running: boolean;
  lastStartedAt?: Date;
}

interface Job {
  name: string;
  cadence: Cadence;
  task: () => Promise<void>;
  stats: JobStats;
  current?: Promise<void>;
  timer?: NodeJS.Timeout;
  /** The database was unavailable at the last run (logged once, until a run succeeds). */
  databaseDown?: boolean;
  /** A daily job: the time (ms since the epoch) its timer is armed for. */
  due?: number;
}

export class ClockRunner {
  private readonly jobs = new Map<string, Job>();
  private started = false;
  /** stop() was called and start() not since: no job begins (a trigger, a timer, a wake-up). */
  private stopped = false;
  private stopping = new AbortController();

  constructor(private readonly now: Now = Date.now) {}

  /** Registers a job; started jobs begin ticking at once. */
  schedule(name: string, cadence: Cadence, task: () => Promise<void>): void {
    if (this.jobs.has(name)) throw new Error(`clock job ${name} is already scheduled`);
    if ('every' in cadence && !(cadence.every > 0)) throw new Error(`clock job ${name}: cadence must be positive`);
    if ('dailyAt' in cadence) msUntilDaily(cadence.dailyAt, this.now()); // validates the time
    const job: Job = { name, cadence, task, stats: { runs: 0, skipped: 0, failures: 0, running: false } };
    this.jobs.set(name, job);
    if (this.started) this.arm(job);
  }

  start(): void {
    if (this.started) return;
    this.started = true;
    this.stopped = false;
    if (this.stopping.signal.aborted) this.stopping = new AbortController();
    for (const job of this.jobs.values()) this.arm(job);
  }

  /**
   * Runs a job now (a NOTIFY wake-up, a test). Follows the same rule as a tick: if the previous run
   * is still going, this one is skipped. Resolves when the run it started (or skipped) is over.
   * After stop() (until start() again) it runs nothing and resolves false: a trigger that comes
   * late (a NOTIFY, a leadership won, a loop's wake-up timer) does not begin a job the stop no
   * longer waits for, on a process that closes its database. A runner never started runs it.
   */
  trigger(name: string): Promise<boolean> {
    const job = this.jobs.get(name);
    if (!job) throw new Error(`no clock job ${name}`);
    return this.tick(job);
  }

  stats(name: string): JobStats {
    const job = this.jobs.get(name);
    if (!job) throw new Error(`no clock job ${name}`);
    return { ...job.stats };
  }

  /** Ticking: started and not stopped (a long job checks it to give up early). */
  running(): boolean {
    return this.started;
  }

  /**
   * Aborted when stop() is called: a job whose work can be dropped halfway without harm (work that
   * is picked up again by the next tick or the next start) gives up at once on it, rather than
   * holding the stop until its step ends.
   */
  get stopSignal(): AbortSignal {
    return this.stopping.signal;
  }

  /**
   * Stops ticking and waits for the runs in progress (signalling stopSignal first). From then until
   * start() no job begins, whoever triggers it.
   */
  async stop(): Promise<void> {
    this.started = false;
    this.stopped = true;
    this.stopping.abort(new Error('the clocks are stopping'));
    for (const job of this.jobs.values()) {
      if (job.timer) clearTimeout(job.timer);
      job.timer = undefined;
    }
    await Promise.allSettled([...this.jobs.values()].map((j) => j.current));
  }

  private arm(job: Job): void {
    let delay: number;
    if ('every' in job.cadence) delay = job.cadence.every;
    else {
      // The next time after the one the timer was armed for, not after now: a timer measures elapsed
      // time, and one that fires while the wall clock still reads a little before its time (the
      // clock stepped back, or slowed by NTP, meanwhile) would otherwise be armed for that same
      // time again, moments later, and the daily job run twice (or more) that day.
      const now = this.now();
      const from = Math.max(now, job.due ?? now);
      job.due = from + msUntilDaily(job.cadence.dailyAt, from);
      delay = job.due - now;
    }
    job.timer = setTimeout(() => {
      if (!this.started) return;
      void this.tick(job);
      this.arm(job);
    }, delay);
    job.timer.unref();
  }

  private async tick(job: Job): Promise<boolean> {
    if (this.stopped) {
      logger().debug({ job: job.name }, 'clock job not run: the clocks are stopped');
      return false;
    }
    if (job.current) {
      job.stats.skipped++;
      logger().debug({ job: job.name }, 'clock tick skipped: the previous run is still going');
      return false;
    }
    job.stats.runs++;
    job.stats.running = true;
    job.stats.lastStartedAt = new Date(this.now());
    job.current = runWithContext({ job: job.name }, async () => {
      try {
        await job.task();
        if (job.databaseDown) logger().info({ job: job.name }, `clock job ${job.name}: the database answers again`);
        job.databaseDown = false;
      } catch (err) {
        job.stats.failures++;
        // The database away (stopped, restarting): one line, not an error with its stack every tick.
        if (isDatabaseUnavailable(err)) {
          if (!job.databaseDown) logger().warn({ job: job.name, err: loggableMessage(err) }, `clock job ${job.name}: the database is unavailable; trying again at every tick (logged once)`);
          job.databaseDown = true;
        } else logger().error({ err, job: job.name }, `clock job ${job.name} failed`);
      }
    }).finally(() => {
      job.current = undefined;
      job.stats.running = false;
    });
    await job.current;
    return true;
  }
}

/** Milliseconds from `now` to the next `HH:MM` (UTC), strictly in the future. */
export function msUntilDaily(time: string, now: number): number {
  const match = /^([01]\d|2[0-3]):([0-5]\d)$/.exec(time);
  if (!match) throw new Error(`daily time must be HH:MM (UTC), not ${time}`);
  const at = new Date(now);
  at.setUTCHours(Number(match[1]), Number(match[2]), 0, 0);
  if (at.getTime() <= now) at.setUTCDate(at.getUTCDate() + 1);
  return at.getTime() - now;
}
