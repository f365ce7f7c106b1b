/**
 * The reconcile queue, with client-go's workqueue semantics: a key waits at most once however many
 * watch events name it; a key being reconciled is never handed to a second worker, and one added
 * meanwhile is reconciled again afterwards; a failed key comes back after an exponential backoff
 * (`base · 2^failures`, capped at `max`) that `forget` resets on success.
 */
export interface QueueOptions {
  backoffBase: number;
  backoffMax: number;
}

export class ReconcileQueue {
  private readonly waiting = new Set<string>();
  private readonly order: string[] = [];
  private readonly active = new Set<string>();
  private readonly dirty = new Set<string>();
  private readonly failures = new Map<string, number>();
  private readonly timers = new Map<string, NodeJS.Timeout>();
  private readonly wakers: Array<() => void> = [];
  private closed = false;

  constructor(private readonly options: QueueOptions) {}

  get length(): number {
    return this.order.length;
  }

  add(key: string): void {
    if (this.closed) return;
    const timer = this.timers.get(key);
    if (timer) {
      clearTimeout(timer);
      this.timers.delete(key);
    }
    if (this.active.has(key)) {
      this.dirty.add(key);
      return;
    }
    if (this.waiting.has(key)) return;
    this.waiting.add(key);
    this.order.push(key);
    this.wakers.shift()?.();
  }

  /** Adds the key after `delayMs` (an earlier `add` wins). */
  addAfter(key: string, delayMs: number): void {
    if (this.closed || this.timers.has(key) || this.waiting.has(key)) return;
    const timer = setTimeout(() => {
      this.timers.delete(key);
      this.add(key);
    }, delayMs);
    timer.unref();
    this.timers.set(key, timer);
  }

  /** Adds the key after its backoff and counts a failure; returns the delay. */
  addRateLimited(key: string): number {
    const failures = this.failures.get(key) ?? 0;
    this.failures.set(key, failures + 1);
    const delay = Math.min(this.options.backoffMax, this.options.backoffBase * 2 ** failures);
    this.addAfter(key, delay);
    return delay;
  }

  /** Clears the failure count of a key (it reconciled). */
  forget(key: string): void {
    this.failures.delete(key);
  }

  failuresOf(key: string): number {
    return this.failures.get(key) ?? 0;
  }

  /** The next key, waiting until there is one; undefined once closed. */
  async get(): Promise<string | undefined> {
    while (!this.closed) {
      const key = this.order.shift();
      if (key !== undefined) {
        this.waiting.delete(key);
        this.active.add(key);
        return key;
      }
      await new Promise<void>((resolve) => this.wakers.push(resolve));
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
    for (const timer of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
    for (const wake of this.wakers.splice(0)) wake();
  }
}
