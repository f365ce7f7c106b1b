import { MAX_TIMER_MS } from './engine/retry.js';
import type { RateLimit } from './types.js';

/**
 * The token bucket of one connector (spec 3 `default_rate_limit`, `count/window`, default `100/s`),
 * shared by all its endpoints. The bucket holds at most `count` tokens, starts full and refills
 * continuously at `count` per `windowMs`; the engine takes one token before every request it sends,
 * retries included. Waiters are served first come, first served.
 */
export class TokenBucket {
  readonly capacity: number;
  readonly windowMs: number;
  private tokens: number;
  private last: number;
  private queue: Promise<void> = Promise.resolve();
  /** take() calls not served yet (neither holding a token nor cancelled). */
  private waiting = 0;

  constructor(limit: RateLimit, private readonly now: () => number = () => performance.now()) {
    if (!Number.isFinite(limit.count) || limit.count < 1) throw new RangeError(`rate limit count must be at least 1, got ${limit.count}`);
    if (!Number.isFinite(limit.windowMs) || limit.windowMs <= 0) throw new RangeError(`rate limit window must be positive, got ${limit.windowMs} ms`);
    this.capacity = limit.count;
    this.windowMs = limit.windowMs;
    this.tokens = limit.count;
    this.last = now();
  }

  /** Tokens per millisecond. */
  get rate(): number {
    return this.capacity / this.windowMs;
  }

  /**
   * Waits for one token (in arrival order). Rejects with the signal's reason as soon as it aborts,
   * also while earlier waiters are still ahead of it (its turn then passes without taking a token).
   */
  take(signal?: AbortSignal): Promise<void> {
    this.waiting++;
    let left = false;
    const leave = () => {
      if (left) return;
      left = true;
      this.waiting--;
    };
    const turn = this.queue.then(() => this.acquire(signal)).finally(leave);
    this.queue = turn.then(
      () => undefined,
      () => undefined,
    );
    if (!signal) return turn;
    return new Promise<void>((resolve, reject) => {
      const onAbort = () => {
        leave();
        reject(signal.reason);
      };
      if (signal.aborted) onAbort();
      else signal.addEventListener('abort', onAbort, { once: true });
      turn.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
    });
  }

  /**
   * About how long a take() made now would wait, in milliseconds: 0 when a token is there and nobody
   * waits, else the time for the bucket to refill the tokens of every waiter ahead and this one's.
   */
  waitMs(): number {
    this.refill();
    const short = this.waiting + 1 - this.tokens;
    return short <= 0 ? 0 : Math.ceil(short / this.rate);
  }

  /**
   * Nobody waits and the bucket has refilled to its capacity: it holds nothing a new bucket of the
   * same limit would not (a bucket starts full), so whoever keeps it may drop it.
   */
  idle(): boolean {
    this.refill();
    return this.waiting === 0 && this.tokens >= this.capacity;
  }

  /** Takes a token if one is available now; never waits. */
  tryTake(): boolean {
    this.refill();
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }

  private refill(): void {
    const now = this.now();
    // A clock that went back (a clock given that is not monotonic) refills nothing, rather than taking tokens away.
    this.tokens = Math.min(this.capacity, this.tokens + Math.max(0, now - this.last) * this.rate);
    this.last = now;
  }

  private async acquire(signal?: AbortSignal): Promise<void> {
    for (;;) {
      signal?.throwIfAborted();
      this.refill();
      if (this.tokens >= 1) {
        this.tokens -= 1;
        return;
      }
      // A slow limit (`1/1000h`) waits longer than a timer holds (2^31 - 1 ms; a longer one fires after 1 ms, which
      // would poll every millisecond): it waits in steps, the loop checking again after each.
      await delay(Math.min(MAX_TIMER_MS, Math.max(1, Math.ceil((1 - this.tokens) / this.rate))), signal);
    }
  }
}

/** Resolves after `ms`; rejects with the signal's reason if it aborts first. */
export function delay(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
