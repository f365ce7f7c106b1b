/**
 * Bounded concurrency for delivery attempts: at most `total` jobs run at once in the process and at
 * most `perKey` of them for one key (an integration), so one slow or hung endpoint holds a few
 * slots and never the whole pool. Keys take turns (round robin). A key's queue is bounded too: a
 * job offered to a full queue is refused (or, with `offerWait`, waits a moment for room), and the
 * caller leaves it to the retry sweep. A key whose queue stayed full for a whole wait is marked
 * stalled: further offers are refused at once until its queue is half empty again, so one endpoint
 * that does not answer costs the caller one wait, not one per job.
 */

type Job = () => Promise<void>;

interface Lane {
  running: number;
  queue: Job[];
  stalled: boolean;
  roomWaiters: Array<() => void>;
}

export class AttemptPool {
  private readonly lanes = new Map<string | number, Lane>();
  /** Keys with queued work and a free per-key slot, in turn order. */
  private readonly ready = new Set<string | number>();
  private running = 0;
  private idleWaiters: Array<() => void> = [];

  constructor(
    private readonly total: number,
    private readonly perKey: number,
    private readonly maxQueuedPerKey: number,
  ) {}

  /** Queues a job; false when the key's queue is full (the job is not taken). */
  offer(key: string | number, job: Job): boolean {
    const lane = this.lane(key);
    if (lane.queue.length >= this.maxQueuedPerKey) return false;
    lane.queue.push(job);
    if (lane.running < this.perKey) this.ready.add(key);
    this.pump();
    return true;
  }

  /** Like `offer`, but waits up to `waitMs` for room in a full queue unless the key is stalled. */
  async offerWait(key: string | number, job: Job, waitMs: number): Promise<boolean> {
    if (this.offer(key, job)) return true;
    const lane = this.lane(key);
    if (lane.stalled || waitMs <= 0) return false;
    const deadline = Date.now() + waitMs;
    while (Date.now() < deadline) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, deadline - Date.now());
        lane.roomWaiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
      if (lane.stalled) return false;
      if (this.offer(key, job)) return true;
    }
    lane.stalled = true;
    return false;
  }

  private lane(key: string | number): Lane {
    let lane = this.lanes.get(key);
    if (!lane) {
      lane = { running: 0, queue: [], stalled: false, roomWaiters: [] };
      this.lanes.set(key, lane);
    }
    return lane;
  }

  /** Jobs running or queued. */
  size(): number {
    let queued = 0;
    for (const lane of this.lanes.values()) queued += lane.queue.length;
    return this.running + queued;
  }

  /** Resolves when nothing runs and nothing is queued. */
  idle(): Promise<void> {
    if (this.size() === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** Drops every queued job (running ones finish); whoever waits for room gets it at once. */
  clear(): void {
    for (const lane of this.lanes.values()) {
      lane.queue.length = 0;
      const waiters = lane.roomWaiters;
      lane.roomWaiters = [];
      for (const wake of waiters) wake();
    }
    this.ready.clear();
    this.checkIdle();
  }

  private pump(): void {
    while (this.running < this.total && this.ready.size > 0) {
      const key = this.ready.values().next().value as string | number;
      const lane = this.lanes.get(key)!;
      this.ready.delete(key);
      const job = lane.queue.shift();
      if (!job) continue;
      if (lane.queue.length <= this.maxQueuedPerKey / 2) lane.stalled = false;
      if (lane.roomWaiters.length > 0) {
        const waiters = lane.roomWaiters;
        lane.roomWaiters = [];
        for (const wake of waiters) wake();
      }
      lane.running++;
      this.running++;
      // Back of the line for its next job.
      if (lane.queue.length > 0 && lane.running < this.perKey) this.ready.add(key);
      void job()
        .catch(() => undefined)
        .finally(() => {
          lane.running--;
          this.running--;
          if (lane.queue.length > 0 && lane.running < this.perKey) this.ready.add(key);
          else if (lane.queue.length === 0 && lane.running === 0 && lane.roomWaiters.length === 0) this.lanes.delete(key);
          this.pump();
          this.checkIdle();
        });
    }
  }

  private checkIdle(): void {
    if (this.size() !== 0 || this.idleWaiters.length === 0) return;
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const resolve of waiters) resolve();
  }
}
