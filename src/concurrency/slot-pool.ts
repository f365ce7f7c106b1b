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
 * with `offerEach`, waits a moment for room), and the caller decides what then (a delivery is left to
 * the retry sweep). A key whose queue stayed full for a whole wait is marked stalled (`offerEach`)
 * unless it made progress during it: at least PROGRESS_FACTOR × max(1, jobs it had running) of its
 * queued jobs started within the wait, that is its jobs end on average within 1/PROGRESS_FACTOR of
 * the wait. Further waits on a stalled key are refused at once, so a key whose jobs hang, or take
 * more than that share of the wait each, costs the caller one wait, not one per batch of offers.
 * It is stalled until it makes that progress again (PROGRESS_FACTOR × max(1, jobs it had running
 * when marked) of its queued jobs start within one such wait) or its queue is half empty. A key
 * whose jobs end that fast is never marked, however full its queue stays: each wait for it is
 * bounded by its own length, and a slow process (a machine short of CPU, whose fast jobs still end
 * in milliseconds) is not taken for a stuck key. A queued job runs in the async context it was
 * offered in (src/observability/context.ts `inCurrentContext`), not in that of the job whose end
 * starts it.
 */

/**
 * A job: either it returns a promise, and ends when that settles, or it returns nothing and calls
 * `done` once when it ends (a job of many a second, its end a callback already, need make no promise
 * for the pool: every promise costs the process's async-context hooks). A job that throws ends then.
 */
export type Job = (done: () => void) => Promise<unknown> | undefined;

interface Lane {
  key: string | number;
  group: string | number | undefined;
  /** In `SlotPool.ready` (its turn to come). */
  ready: boolean;
  running: number;
  queue: Job[];
  /** Queued jobs started so far (`offerEach` compares the count before and after a wait). */
  started: number;
  /** Set while the key is stalled (see the class comment): what brings it back. */
  stall: Stall | undefined;
  /** The `offerEach` calls waiting for room in this key's queue, in call order: told when a queued job starts. */
  feeders: Feeder[];
}

/**
 * A stalled key's way back: `needed` (PROGRESS_FACTOR × max(1, jobs running when marked)) of its
 * queued jobs starting within `windowMs` (the wait that marked it), counted from `windowAt`
 * (performance.now()) on.
 */
interface Stall {
  needed: number;
  windowMs: number;
  windowAt: number;
  starts: number;
}

interface Feeder {
  /** Offers what fits now (or gives up, the key stalled or the pool cleared). */
  room(): void;
}

/**
 * How many times its running jobs a full key must start within one wait not to be marked stalled
 * (or to be taken back): a fast endpoint on a starved machine still ends attempts in milliseconds,
 * many times a wait; an endpoint taking over a quarter of the wait per attempt is slow enough to
 * hand its rows to the sweep, rather than hold every batch (and every other key's next jobs) a
 * whole wait for as long as its backlog lasts.
 */
export const PROGRESS_FACTOR = 4;

/** The queued jobs a full key must start within one wait to count as progressing (see PROGRESS_FACTOR). */
function progressNeeded(lane: Lane): number {
  return PROGRESS_FACTOR * Math.max(1, lane.running);
}

export class SlotPool {
  private readonly lanes = new Map<string | number, Lane>();
  /**
   * Lanes with queued work and a free per-key slot, in turn order (each once: `Lane.ready`). An array
   * and a flag, not a Set of keys: a Set's table is replaced as it empties and fills again, many
   * times a second in a drain, and V8 keeps each replaced table pointing at its successor, so the
   * tables (and what they held) outlived the young generation's collections.
   */
  private ready: Lane[] = [];
  /** Groups with jobs running: how many, and their keys that wait for a slot of the group. */
  private readonly groups = new Map<string | number, { running: number; waiting: Set<string | number> }>();
  private running = 0;
  /** Jobs queued over all keys (`size()` is asked per delivery outcome: no walk over the keys). */
  private queued = 0;
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
    if (this.full(lane)) return false;
    this.enqueue(lane, job);
    return true;
  }

  /** Whether the key's queue is full now (`offer` would refuse its next job). */
  isFull(key: string | number): boolean {
    const lane = this.lanes.get(key);
    return lane !== undefined && this.full(lane);
  }

  private full(lane: Lane): boolean {
    return lane.queue.length >= this.maxQueuedPerKey;
  }

  private enqueue(lane: Lane, job: Job): void {
    // In the context of whoever offered it, not of the job whose end starts it (src/observability/context.ts).
    lane.queue.push(inCurrentContext(job));
    this.queued++;
    if (lane.running < this.perKey) this.markReady(lane);
    this.pump();
  }

  /** Puts the lane at the back of the turn order, unless it has its turn already. */
  private markReady(lane: Lane): void {
    if (lane.ready) return;
    lane.ready = true;
    this.ready.push(lane);
  }

  /**
   * Offers `count` jobs of one key in order, `make(i)` making the i-th only once there is room for it
   * (undefined: no more to offer): as many as fit now, then each as soon as a queued job of the key
   * starts, for up to `waitMs` in all, unless the key is stalled (then none waits). A key whose queue
   * is still full when the wait runs out is marked stalled if it made too little progress meanwhile:
   * fewer of its queued jobs started during the wait than PROGRESS_FACTOR × max(1, jobs it had
   * running when the wait began). Resolves with how many were taken: the first ones, the rest not made. The jobs are made and run in the context current at the call (as
   * `offer`'s), whenever the room comes. One timer and one promise per call, none per job: a drain
   * offers thousands of jobs a second to a full queue, one at a time as its room frees.
   */
  offerEach(key: string | number, count: number, make: (index: number) => Job | undefined, waitMs: number, group?: string | number): Promise<number> {
    const lane = this.lane(key, group);
    let taken = 0;
    let ended = false;
    // True once every job was taken or `make` said there are no more.
    const fill = (): boolean => {
      while (!ended && taken < count && lane.queue.length < this.maxQueuedPerKey) {
        const job = make(taken);
        if (!job) ended = true;
        else {
          taken++;
          this.enqueue(lane, job);
        }
      }
      return ended || taken >= count;
    };
    if (fill() || lane.stall || waitMs <= 0) return Promise.resolve(taken);
    // Progress during the wait: PROGRESS_FACTOR times as many queued jobs started as ran when it
    // began (its jobs end on average within 1/PROGRESS_FACTOR of the wait).
    const startedBefore = lane.started;
    const needed = progressNeeded(lane);
    return new Promise((resolve) => {
      let done = false;
      let filling = false;
      const finish = () => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        lane.feeders.splice(lane.feeders.indexOf(feeder), 1);
        resolve(taken);
      };
      const timer = setTimeout(() => {
        // Full at the end of the wait and too little progress during it: stalled, until it progresses again.
        if (!fill() && !lane.stall && lane.started - startedBefore < needed) {
          lane.stall = { needed: progressNeeded(lane), windowMs: waitMs, windowAt: performance.now(), starts: 0 };
        }
        finish();
      }, waitMs);
      const feeder: Feeder = {
        room: inCurrentContext(() => {
          // Room made while this call fills (its own offers start jobs) is taken by the filling loop.
          if (done || filling) return;
          // Stalled meanwhile (another wait ran out): refused at once, as a wait on a stalled key is.
          if (lane.stall) return finish();
          filling = true;
          try {
            if (fill()) finish();
          } finally {
            filling = false;
          }
        }),
      };
      lane.feeders.push(feeder);
    });
  }

  private lane(key: string | number, group: string | number | undefined): Lane {
    let lane = this.lanes.get(key);
    if (!lane) {
      lane = { key, group, ready: false, running: 0, queue: [], started: 0, stall: undefined, feeders: [] };
      this.lanes.set(key, lane);
    }
    return lane;
  }

  /** Jobs running or queued. */
  size(): number {
    return this.running + this.queued;
  }

  /** Resolves when nothing runs and nothing is queued. */
  idle(): Promise<void> {
    if (this.size() === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** Drops every queued job (running ones finish); whoever waits for room gets it at once. */
  clear(): void {
    const lanes = [...this.lanes.values()];
    for (const lane of lanes) lane.queue.length = 0;
    this.queued = 0;
    for (const lane of this.ready) lane.ready = false;
    this.ready = [];
    for (const group of this.groups.values()) if (group.waiting.size > 0) group.waiting.clear();
    for (const lane of lanes) this.roomIn(lane);
    this.checkIdle();
  }

  /** Tells the key's waiting `offerEach` calls, in order, that its queue has room. */
  private roomIn(lane: Lane): void {
    if (lane.feeders.length === 0) return;
    for (const feeder of [...lane.feeders]) feeder.room();
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
    // Keys whose queues got room, told once the loop is done (their offers pump again).
    let roomy: Lane[] | undefined;
    while (this.running < this.total && this.ready.length > 0) {
      const lane = this.ready.shift()!;
      lane.ready = false;
      // A lane dropped meanwhile (nothing queued or running) is never in the map again: its key has a new one.
      if (lane.queue.length === 0) continue;
      const key = lane.key;
      const group = this.group(lane);
      if (group && group.running >= this.perGroup) {
        // Its group is at its cap: the key waits, its jobs queued, until one of the group's ends.
        group.waiting.add(key);
        continue;
      }
      const job = lane.queue.shift();
      if (!job) continue;
      this.queued--;
      lane.started++;
      if (lane.stall) this.progressed(lane, lane.stall);
      if (lane.feeders.length > 0) {
        if (!roomy) roomy = [lane];
        else if (!roomy.includes(lane)) roomy.push(lane);
      }
      lane.running++;
      this.running++;
      if (group) group.running++;
      // Back of the line for its next job.
      if (lane.queue.length > 0 && lane.running < this.perKey) this.markReady(lane);
      this.runJob(job, key, lane, group);
    }
    if (roomy) for (const lane of roomy) this.roomIn(lane);
  }

  /**
   * A queued job of a stalled key started: the key is stalled no more once its queue is half empty,
   * or once `needed` of its queued jobs started within one wait (it answers fast again: a queue the
   * caller keeps refilling may never get half empty).
   */
  private progressed(lane: Lane, stall: Stall): void {
    const now = performance.now();
    if (now - stall.windowAt > stall.windowMs) {
      stall.windowAt = now;
      stall.starts = 0;
    }
    stall.starts++;
    if (stall.starts >= stall.needed || lane.queue.length <= this.maxQueuedPerKey / 2) lane.stall = undefined;
  }

  /**
   * Runs a started job, then frees its slots (`jobEnded`), with one reaction to the job's promise:
   * neither `job().catch().finally()` nor an async function awaiting it, each of which makes more
   * promises, and every promise costs the process's async-context hooks: a drain runs thousands of
   * jobs a second.
   */
  private runJob(job: Job, key: string | number, lane: Lane, group: { running: number; waiting: Set<string | number> } | undefined): void {
    const ended = this.endOf(key, lane, group);
    let running: Promise<unknown> | undefined;
    try {
      running = job(ended);
    } catch {
      // A job handles its own failures; one that throws only ends.
      ended();
      return;
    }
    running?.then(ended, ended);
  }

  /**
   * `jobEnded` of one job, once however often it is called (its promise's reaction, or its `done`;
   * made here: a closure named in place costs the source checkout's transform a property definition).
   */
  private endOf(key: string | number, lane: Lane, group: { running: number; waiting: Set<string | number> } | undefined): () => void {
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.jobEnded(key, lane, group);
    };
  }

  /** A started job ended (or failed): frees its slots and starts what they let start. */
  private jobEnded(key: string | number, lane: Lane, group: { running: number; waiting: Set<string | number> } | undefined): void {
    lane.running--;
    this.running--;
    if (group) {
      group.running--;
      // A slot of the group is free: its waiting keys take their turns again (at the back).
      if (group.waiting.size > 0) {
        for (const waiting of group.waiting) {
          const other = this.lanes.get(waiting);
          if (other && other.queue.length > 0 && other.running < this.perKey) this.markReady(other);
        }
        // Only when it holds keys: clearing replaces a Set's table even when it is empty.
        group.waiting.clear();
      }
      if (group.running === 0) this.groups.delete(lane.group!);
    }
    if (lane.queue.length > 0 && lane.running < this.perKey) this.markReady(lane);
    else if (lane.queue.length === 0 && lane.running === 0 && lane.feeders.length === 0) this.lanes.delete(key);
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
