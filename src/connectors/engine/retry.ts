import { parseRfcTimestamp } from '../target/timestamp.js';

/**
 * The fixed retry policy of spec 3 (Limits): up to 5 attempts per request on HTTP 429, 500, 502,
 * 503, 504, 408 and on network errors; exponential backoff 1 s, 2 s, 4 s … capped at 60 s, with
 * 10 % jitter; a `Retry-After` (seconds or an HTTP-date) overrides the computed delay (capped as the backoff is).
 */
export interface RetryPolicy {
  /** Attempts per request, the first included. */
  attempts: number;
  baseDelayMs: number;
  maxDelayMs: number;
}

export const DEFAULT_RETRY: Readonly<RetryPolicy> = Object.freeze({ attempts: 5, baseDelayMs: 1000, maxDelayMs: 60_000 });

export const JITTER = 0.1;

/** The longest wait a timer can hold (2^31 − 1 ms, about 24.8 days): a longer one would fire at once. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * The wait before attempt `failed + 1`, after `failed` failed attempts (1-based): base·2^(failed−1)
 * capped at maxDelayMs, then ±10 % jitter. A `Retry-After` (seconds, or an HTTP-date still ahead)
 * replaces it, capped at maxDelayMs too (a source asking for longer is retried after maxDelayMs),
 * without jitter. Never more than MAX_TIMER_MS.
 */
export function backoffDelay(policy: RetryPolicy, failed: number, retryAfter?: string | string[], random: () => number = Math.random, now: () => number = Date.now): number {
  const override = parseRetryAfter(retryAfter, now);
  if (override !== undefined) return Math.min(override, policy.maxDelayMs, MAX_TIMER_MS);
  const exponential = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** Math.max(0, failed - 1));
  return Math.min(MAX_TIMER_MS, Math.max(0, Math.round(exponential * (1 + (random() * 2 - 1) * JITTER))));
}

/**
 * A `Retry-After` in milliseconds: delay-seconds (decimals tolerated), or an HTTP-date (RFC 9110's
 * IMF-fixdate, `Wed, 21 Oct 2015 07:28:00 GMT`) as the time until then. Undefined for junk, and for
 * a date that has passed (a source whose clock is behind would otherwise have every attempt sent at once).
 */
export function parseRetryAfter(value: string | string[] | undefined, now: () => number = Date.now): number | undefined {
  const text = Array.isArray(value) ? value[0] : value;
  if (text === undefined) return undefined;
  const trimmed = text.trim();
  if (/^\d+(\.\d+)?$/.test(trimmed)) return Math.round(Number(trimmed) * 1000);
  const instant = parseRfcTimestamp(trimmed);
  if (instant === undefined) return undefined;
  const wait = Date.parse(instant) - now();
  return wait > 0 ? wait : undefined;
}
