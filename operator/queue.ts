import { performance } from 'node:perf_hooks';

/**
 * The reconcile queue, with client-go's workqueue semantics: a key waits at most once however many
 * watch events name it; a key being reconciled is never handed to a second worker, and one added
 * meanwhile is reconciled again afterwards; a failed key comes back after the delay of client-go's
 * default controller rate limiter: the larger of its own exponential backoff (`base · 2^failures`,
 * capped at `max`, reset by `forget` on success) and the wait for a token of one bucket shared by
 * every key (`qps` tokens a second, at most `burst` saved up), so a mass failure (the hub's database
 * down, every resource failing at once) retries at `qps` overall instead of all keys together.
 * Unlike client-go, a token whose retry is not needed (the key was requeued by a change before its
 * delay was out, or was waiting already) is given back, so that a key failing on each change of a
 * storm of changes does not put the bucket in debt for every other key.
 * A queue lives for one leadership term: once closed it hands out nothing again.
 */
export interface QueueOptions {
  backoffBase: number;
  backoffMax: number;
  /** Retries a second across all keys, once the burst is spent (client-go: 10). */
  qps?: number;
  /** Retries taken at once before `qps` applies (client-go: 100). */
  burst?: number;
  /** Monotonic milliseconds (tests move it). */
  now?: () => number;
  /**
   * The group of a key (the operator's: its namespace). Waiting keys are handed out one group after
   * the other in turn, in order within a group. Undefined: one group.
   */
  groupOf?: (key: string) => string;
}

export const DEFAULT_QPS = 10;
export const DEFAULT_BURST = 100;

/** A token bucket that hands out reservations, as golang.org/x/time/rate's `Reserve().Delay()`. */
export class TokenBucket {
  private tokens: number;
  private at: number;

  constructor(
    private readonly qps: number,
    private readonly burst: number,
    private readonly now: () => number,
  ) {
    this.tokens = burst;
    this.at = now();
  }

  /** Takes a token (possibly one not there yet) and returns how long to wait for it, in ms. */
  reserve(): number {
    if (!(this.qps > 0)) return 0;
    this.refill();
    this.tokens -= 1;
    return this.tokens >= 0 ? 0 : Math.ceil((-this.tokens / this.qps) * 1000);
  }

  /** Gives back a token `reserve` took for a wait that ended before it was used (x/time/rate's `Reservation.Cancel`). */
  cancel(): void {
    if (!(this.qps > 0)) return;
    this.refill();
    this.tokens = Math.min(this.burst, this.tokens + 1);
  }

  private refill(): void {
    const now = this.now();
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.at) / 1000) * this.qps);
    this.at = now;
  }
}

export class ReconcileQueue {
  private readonly waiting = new Set<string>();
  /** The waiting keys of each group that has any, in order; the groups in the order they take turns. */
  private readonly lines = new Map<string, string[]>();
  /** Waiting keys, all groups together. */
  private count = 0;
  private readonly active = new Set<string>();
  private readonly dirty = new Set<string>();
  private readonly failures = new Map<string, number>();
  /** Keys waiting out a delay, and when each is due (on `now`). */
  private readonly delayed = new Map<string, number>();
  /** The delayed keys holding a token of the bucket (addRateLimited): one requeued before it is due gives it back. */
  private readonly holding = new Set<string>();
  /** The timer of the earliest delay, and when (on `now`) it was set for. */
  private timer: { handle: NodeJS.Timeout; at: number } | undefined;
  private readonly now: () => number;
  private readonly wakers: Array<() => void> = [];
  private closed = false;
  private readonly bucket: TokenBucket;

  constructor(private readonly options: QueueOptions) {
    this.now = options.now ?? (() => performance.now());
    this.bucket = new TokenBucket(options.qps ?? DEFAULT_QPS, options.burst ?? DEFAULT_BURST, this.now);
  }

  get isClosed(): boolean {
    return this.closed;
  }

  get length(): number {
    return this.count;
  }

  /** No key waits, is handed out, or waits out a delay. */
  get idle(): boolean {
    return this.count === 0 && this.active.size === 0 && this.delayed.size === 0;
  }

  add(key: string): void {
    if (this.closed) return;
    // An earlier add ends the delay (its timer, if it was the earliest, finds nothing due and moves on),
    // and the retry it waited for, and its token, are not used: a resource failing on every change of
    // a storm of them (each reconcile meeting a newer version) takes nothing from the other keys' retries.
    if (this.delayed.delete(key) && this.holding.delete(key)) this.bucket.cancel();
    if (this.active.has(key)) {
      this.dirty.add(key);
      return;
    }
    if (this.waiting.has(key)) return;
    this.waiting.add(key);
    const group = this.options.groupOf?.(key) ?? '';
    const line = this.lines.get(group);
    if (line) line.push(key);
    else this.lines.set(group, [key]);
    this.count++;
    this.wakers.shift()?.();
  }

  /** Adds the key once `delayMs` have passed on the clock (`now`; an earlier `add` wins). */
  /** Returns whether the key waits out this delay (not when closed, waiting already, or waiting out another). */
  addAfter(key: string, delayMs: number): boolean {
    if (this.closed || this.delayed.has(key) || this.waiting.has(key)) return false;
    const at = this.now() + delayMs;
    this.delayed.set(key, at);
    if (!this.timer || at < this.timer.at) this.arm(at);
    return true;
  }

  /** How long (ms on the clock) the key still waits out its delay; undefined when it waits out none. */
  delayOf(key: string): number | undefined {
    const at = this.delayed.get(key);
    return at === undefined ? undefined : at - this.now();
  }

  /**
   * Adds the keys whose delay has passed on the clock, and returns them. The timer of the earliest
   * delay calls it; a clock moved by hand (tests) is followed by calling it.
   */
  addDue(): string[] {
    const now = this.now();
    const due = [...this.delayed].filter(([, at]) => at <= now).map(([key]) => key);
    for (const key of due) {
      // Due: its token is used.
      this.holding.delete(key);
      this.add(key);
    }
    let next: number | undefined;
    for (const at of this.delayed.values()) if (next === undefined || at < next) next = at;
    if (next === undefined) this.disarm();
    else this.arm(next);
    return due;
  }

  /** The timer for a delay ending at `at` (on the clock): it adds what is due then, and sets itself for the next. */
  private arm(at: number): void {
    this.disarm();
    if (this.closed) return;
    const handle = setTimeout(() => {
      this.timer = undefined;
      this.addDue();
    }, Math.max(0, Math.ceil(at - this.now())));
    handle.unref();
    this.timer = { handle, at };
  }

  private disarm(): void {
    if (this.timer) clearTimeout(this.timer.handle);
    this.timer = undefined;
  }

  /**
   * Adds the key after its delay (the larger of its backoff and the shared bucket's) and counts a
   * failure; returns the delay. The token is given back when the key waits already (queued, or
   * delayed holding its own), or once an `add` requeues it before the delay is out.
   */
  addRateLimited(key: string): number {
    const failures = this.failures.get(key) ?? 0;
    this.failures.set(key, failures + 1);
    const delay = Math.max(Math.min(this.options.backoffMax, this.options.backoffBase * 2 ** failures), this.bucket.reserve());
    if (this.addAfter(key, delay)) this.holding.add(key);
    else this.bucket.cancel();
    return delay;
  }

  /** Clears the failure count of a key (it reconciled). */
  forget(key: string): void {
    this.failures.delete(key);
  }

  failuresOf(key: string): number {
    return this.failures.get(key) ?? 0;
  }

  /**
   * The next key, waiting until there is one; undefined once closed. The first of the group whose turn
   * it is, which then goes to the back of the turns: a group with thousands of keys waiting (a flood
   * of resources in one namespace) takes one turn in each round, like any other.
   */
  async get(): Promise<string | undefined> {
    while (!this.closed) {
      const key = this.next();
      if (key !== undefined) {
        this.waiting.delete(key);
        this.active.add(key);
        return key;
      }
      await new Promise<void>((resolve) => this.wakers.push(resolve));
    }
    return undefined;
  }

  private next(): string | undefined {
    for (const [group, line] of this.lines) {
      const key = line.shift()!;
      this.lines.delete(group);
      if (line.length) this.lines.set(group, line);
      this.count--;
      return key;
    }
    return undefined;
  }

  /** Marks a key handed out by `get` as finished; added meanwhile, it waits again. */
  done(key: string): void {
    this.active.delete(key);
    if (this.dirty.delete(key)) this.add(key);
  }

  close(): void {
    this.closed = true;
    this.disarm();
    this.delayed.clear();
    this.holding.clear();
    for (const wake of this.wakers.splice(0)) wake();
  }
}
