import type { Now } from '../clock/clock.js';
import type { Config } from '../config/config.js';
import { RateLimited } from '../errors.js';
import { logger } from '../observability/logger.js';
import { lazyCounter } from '../observability/metrics.js';

/**
 * Inbound rate limits: a fixed 60-second window per (bucket, tenant), counted in memory by each
 * process (a restart forgets every count). A window opens at the first request counted for its key
 * and lasts 60 s; the request past the bucket's requests-per-minute in it is refused with 429 and
 * `Retry-After`, the whole seconds left until the window ends (rounded up). Buckets are independent;
 * requests with no resolved tenant share one key, `system`. A bucket of 0 requests per minute is
 * off: nothing is counted, nothing refused. A route names its bucket (`RouteDecl.rateLimit`); the
 * router asks before the body is read and the handler runs (docs/rate-limits.md).
 */

export const RATE_LIMIT_BUCKETS = ['view-generate', 'platform-chat', 'user-chat', 'platform-search'] as const;
export type RateLimitBucket = (typeof RATE_LIMIT_BUCKETS)[number];

/** The length of a window. */
export const WINDOW_MS = 60_000;

/** The key of every request with no resolved tenant. */
const SYSTEM_KEY = 'system';

/** Counter `svc_rate_limited_total{bucket}`: a request refused with 429. */
const rateLimitedTotal = lazyCounter({ name: 'svc_rate_limited_total', help: 'Requests refused with 429 by an inbound rate limit', labelNames: ['bucket'] });

type Decision = { allowed: true } | { allowed: false; retryAfterSeconds: number };

interface Window {
  startedAt: number;
  count: number;
}

/** Requests per minute of every bucket, from `svc.ratelimit.<bucket>.rpm` (read once, at boot). */
export function rateLimitsFrom(config: Config): Record<RateLimitBucket, number> {
  return Object.fromEntries(RATE_LIMIT_BUCKETS.map((bucket) => [bucket, config.int(`svc.ratelimit.${bucket}.rpm`)])) as Record<RateLimitBucket, number>;
}

/** Windows are dropped once this many keys are held and theirs have ended. */
const PRUNE_ABOVE = 10_000;

export class RateLimiter {
  private readonly windows = new Map<string, Window>();

  constructor(
    private readonly limits: Readonly<Record<RateLimitBucket, number>>,
    private readonly now: Now = Date.now,
  ) {}

  /** Requests per minute of a bucket; 0: off. */
  rpm(bucket: RateLimitBucket): number {
    return this.limits[bucket] ?? 0;
  }

  /** Counts one request of `tenantId` (undefined: the system key) in `bucket`, and says whether it may go on. */
  take(bucket: RateLimitBucket, tenantId: number | undefined): Decision {
    const rpm = this.rpm(bucket);
    if (!(rpm > 0)) return { allowed: true };
    const now = this.now();
    const key = `${bucket}\u0000${tenantId ?? SYSTEM_KEY}`;
    let window = this.windows.get(key);
    if (!window || now >= window.startedAt + WINDOW_MS || now < window.startedAt) {
      if (!window && this.windows.size >= PRUNE_ABOVE) this.prune(now);
      window = { startedAt: now, count: 0 };
      this.windows.set(key, window);
    }
    if (window.count >= rpm) {
      return { allowed: false, retryAfterSeconds: Math.max(1, Math.ceil((window.startedAt + WINDOW_MS - now) / 1000)) };
    }
    window.count++;
    return { allowed: true };
  }

  /**
   * Lets a request through or refuses it: 429 `rate limit exceeded` with `Retry-After` (RateLimited),
   * after a warning line naming bucket, tenant, rpm and the seconds to wait, and one more
   * `svc_rate_limited_total{bucket}`.
   */
  admit(bucket: RateLimitBucket, tenantId: number | undefined): void {
    const decision = this.take(bucket, tenantId);
    if (decision.allowed) return;
    const tenant = tenantId ?? SYSTEM_KEY;
    const rpm = this.rpm(bucket);
    logger().warn(
      { bucket, tenant: String(tenant), rpm, retryAfterSeconds: decision.retryAfterSeconds },
      `rate limit exceeded: bucket ${bucket}, tenant ${tenant}, ${rpm} requests per minute; retry in ${decision.retryAfterSeconds} s`,
    );
    rateLimitedTotal().inc({ bucket });
    throw new RateLimited(decision.retryAfterSeconds);
  }

  private prune(now: number): void {
    for (const [key, window] of this.windows) if (now >= window.startedAt + WINDOW_MS) this.windows.delete(key);
  }
}
