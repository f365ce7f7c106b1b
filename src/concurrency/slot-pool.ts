import { inCurrentContext } from '../observability/context.js';

/**
 * Bounded concurrency with a lane per key: at most `total` jobs run at once in the process, at most
 * `perKey` of them for one key, and at most `perGroup` for one group of keys (given with the job).
 * Its users: delivery attempts (key an integration, group its tenant: one slow or hung endpoint
 * holds a few slots and never the whole pool, and neither do many of them of one tenant), export
 * runs and analytic queries (`svc.export.concurrency`, the analytic gate) and connector chunk
 * writes (a lane per tenant, so tenants take turns for the database pool). Keys take turns (round
 * robin); a key whose group is at its cap waits (its jobs stay queued, not started) and the other
 * groups' keys go first. A key's queue is bounded too: a job offered to a full queue is refused (or,
 * with `offerWait`, waits a moment for room), and the caller decides what then (a delivery is left to
 * the retry sweep). A key whose queue stayed full for a whole wait is marked stalled: further offers
 * are refused at once until its queue is half empty again, so one endpoint that does not answer
 * costs the caller one wait, not one per job. A queued job runs in the async context it was offered
 * in (src/observability/context.ts `inCurrentContext`), not in that of the job whose end starts it.
 */

type Job = () => Promise<void>;

interface Lane {
  group: string | number | undefined;
  running: number;
  queue: Job[];
  stalled: boolean;
  roomWaiters: Array<() => void>;
}

export class SlotPool {
  private readonly lanes = new Map<string | number, Lane>();
  /** Keys with queued work and a free per-key slot, in turn order. */
  private readonly ready = new Set<string | number>();
  /** Groups with jobs running: how many, and their keys that wait for a slot of the group. */
  private readonly groups = new Map<string | number, { running: number; waiting: Set<string | number> }>();
  private running = 0;
  private idleWaiters: Array<() => void> = [];

  /** `perGroup`: jobs of one group at once at most (default: no cap beyond `total`). */
  constructor(
    private readonly total: number,
    private readonly perKey: number,
    private readonly maxQueuedPerKey: number,
    private readonly perGroup: number = Number.POSITIVE_INFINITY,
  ) {}

  /**
   * Queues a job; false when the key's queue is full (the job is not taken). `group`: the key's
   * group (a key keeps the group it was first offered with while it has jobs).
   */
  offer(key: string | number, job: Job, group?: string | number): boolean {
    const lane = this.lane(key, group);
    if (lane.queue.length >= this.maxQueuedPerKey) return false;
    // In the context of whoever offered it, not of the job whose end starts it (src/observability/context.ts).
    lane.queue.push(inCurrentContext(job));
    if (lane.running < this.perKey) this.ready.add(key);
    this.pump();
    return true;
  }

  /** Like `offer`, but waits up to `waitMs` for room in a full queue unless the key is stalled. */
  async offerWait(key: string | number, job: Job, waitMs: number, group?: string | number): Promise<boolean> {
    if (this.offer(key, job, group)) return true;
    const lane = this.lane(key, group);
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
      if (this.offer(key, job, group)) return true;
    }
    lane.stalled = true;
    return false;
  }

  private lane(key: string | number, group: string | number | undefined): Lane {
    let lane = this.lanes.get(key);
    if (!lane) {
      lane = { group, running: 0, queue: [], stalled: false, roomWaiters: [] };
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
    for (const group of this.groups.values()) group.waiting.clear();
    this.checkIdle();
  }

  /** The group's state while it has jobs running; undefined for a key without a group. */
  private group(lane: Lane): { running: number; waiting: Set<string | number> } | undefined {
    if (lane.group === undefined) return undefined;
    let group = this.groups.get(lane.group);
    if (!group) {
      group = { running: 0, waiting: new Set() };
      this.groups.set(lane.group, group);
    }
    return group;
  }

  private pump(): void {
    while (this.running < this.total && this.ready.size > 0) {
      const key = this.ready.values().next().value as string | number;
      const lane = this.lanes.get(key)!;
      this.ready.delete(key);
      if (lane.queue.length === 0) continue;
      const group = this.group(lane);
      if (group && group.running >= this.perGroup) {
        // Its group is at its cap: the key waits, its jobs queued, until one of the group's ends.
        group.waiting.add(key);
        continue;
      }
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
      if (group) group.running++;
      // Back of the line for its next job.
      if (lane.queue.length > 0 && lane.running < this.perKey) this.ready.add(key);
      void this.runJob(job, key, lane, group);
    }
  }

  /**
   * Runs a started job, then frees its slots. One async function, not `job().catch().finally()`:
   * every promise costs the process's async-context hooks, and a drain runs thousands of jobs a second.
   */
  private async runJob(job: Job, key: string | number, lane: Lane, group: { running: number; waiting: Set<string | number> } | undefined): Promise<void> {
    try {
      await job();
    } catch {
      // A job handles its own failures; one that throws only ends.
    }
    lane.running--;
    this.running--;
    if (group) {
      group.running--;
      // A slot of the group is free: its waiting keys take their turns again (at the back).
      for (const waiting of group.waiting) {
        const other = this.lanes.get(waiting);
        if (other && other.queue.length > 0 && other.running < this.perKey) this.ready.add(waiting);
      }
      group.waiting.clear();
      if (group.running === 0) this.groups.delete(lane.group!);
    }
    if (lane.queue.length > 0 && lane.running < this.perKey) this.ready.add(key);
    else if (lane.queue.length === 0 && lane.running === 0 && lane.roomWaiters.length === 0) this.lanes.delete(key);
    this.pump();
    this.checkIdle();
  }

  private checkIdle(): void {
    if (this.size() !== 0 || this.idleWaiters.length === 0) return;
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const resolve of waiters) resolve();
  }
}
