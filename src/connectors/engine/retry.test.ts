import { describe, expect, it } from '@jest/globals';
import { quote, TRANSIENT_STATUSES, UpstreamHttpError } from './errors.js';
import { backoffDelay, DEFAULT_RETRY, MAX_TIMER_MS, parseRetryAfter } from './retry.js';

describe('backoff', () => {
  it('is 1 s, 2 s, 4 s … capped at 60 s with the default policy (no jitter at the midpoint)', () => {
    const mid = () => 0.5;
    expect([1, 2, 3, 4, 5, 6, 7, 8].map((n) => backoffDelay(DEFAULT_RETRY, n, undefined, mid))).toEqual([1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000]);
  });

  it('jitters by 10 % either way', () => {
    expect(backoffDelay(DEFAULT_RETRY, 1, undefined, () => 0)).toBe(900);
    expect(backoffDelay(DEFAULT_RETRY, 1, undefined, () => 0.999999)).toBe(1100);
    expect(backoffDelay(DEFAULT_RETRY, 10, undefined, () => 0)).toBe(54000);
  });

  it('a numeric Retry-After wins, without jitter, up to the cap; junk or an HTTP-date gone by does not', () => {
    expect(backoffDelay(DEFAULT_RETRY, 1, '7')).toBe(7000);
    expect(backoffDelay(DEFAULT_RETRY, 3, ['0'])).toBe(0);
    expect(backoffDelay(DEFAULT_RETRY, 6, '45', () => 0.999999)).toBe(45_000);
    // Longer than svc.connectors.retry.max-delay: the wait is the cap (probe 31 M8).
    expect(backoffDelay(DEFAULT_RETRY, 1, '120')).toBe(60_000);
    expect(parseRetryAfter('1.5')).toBe(1500);
    expect(parseRetryAfter('Wed, 21 Oct 2015 07:28:00 GMT')).toBeUndefined();
    expect(parseRetryAfter('-1')).toBeUndefined();
    expect(parseRetryAfter(undefined)).toBeUndefined();
  });

  it('an HTTP-date Retry-After waits until then, up to the cap; one gone by or not an IMF-fixdate is the computed delay', () => {
    const now = () => Date.parse('2026-12-05T20:00:00.000Z');
    const mid = () => 0.5;
    expect(parseRetryAfter('Sat, 05 Dec 2026 20:00:30 GMT', now)).toBe(30_000);
    expect(backoffDelay(DEFAULT_RETRY, 1, 'Sat, 05 Dec 2026 20:00:30 GMT', mid, now)).toBe(30_000);
    // Further than svc.connectors.retry.max-delay: the cap, as a number of seconds is.
    expect(backoffDelay(DEFAULT_RETRY, 1, 'Sun, 06 Dec 2026 20:00:00 GMT', mid, now)).toBe(60_000);
    // A date that has passed (the source's clock behind the hub's), or now: the computed delay.
    expect(backoffDelay(DEFAULT_RETRY, 2, 'Sat, 05 Dec 2026 19:59:00 GMT', mid, now)).toBe(2000);
    expect(backoffDelay(DEFAULT_RETRY, 2, 'Sat, 05 Dec 2026 20:00:00 GMT', mid, now)).toBe(2000);
    // Not an HTTP-date: a weekday that is not the date's, a day the month lacks.
    expect(parseRetryAfter('Fri, 05 Dec 2026 20:00:30 GMT', now)).toBeUndefined();
    expect(parseRetryAfter('Mon, 31 Nov 2026 20:00:30 GMT', now)).toBeUndefined();
  });

  it('never exceeds what a timer can hold (2^31 − 1 ms), whatever the source or the configuration asks', () => {
    // 2147484 s overflowed setTimeout, which then fired after 1 ms: an immediate retry (probe 31 M8).
    expect(backoffDelay(DEFAULT_RETRY, 1, '2147484')).toBe(60_000);
    const days = { attempts: 5, baseDelayMs: 1000, maxDelayMs: 30 * 86_400_000 };
    expect(backoffDelay(days, 1, '2147484')).toBe(MAX_TIMER_MS);
    expect(backoffDelay(days, 40, undefined, () => 0.999999)).toBe(MAX_TIMER_MS);
    expect(MAX_TIMER_MS).toBe(2_147_483_647);
  });

  it('the default policy is 5 attempts on 408, 429, 500, 502, 503, 504', () => {
    expect(DEFAULT_RETRY).toEqual({ attempts: 5, baseDelayMs: 1000, maxDelayMs: 60000 });
    expect([...TRANSIENT_STATUSES].sort()).toEqual([408, 429, 500, 502, 503, 504]);
  });
});

describe('upstream error text', () => {
  it('names transient or permanent and quotes at most 500 characters of the body', () => {
    const long = 'x'.repeat(2000);
    const err = new UpstreamHttpError(502, long);
    expect(err.message).toBe(`upstream returned HTTP 502 (transient) — refusing to ingest its body as data: ${'x'.repeat(500)}…`);
    expect(new UpstreamHttpError(403, 'no').message).toBe('upstream returned HTTP 403 (permanent) — refusing to ingest its body as data: no');
    expect(quote('a\n  b\r\nc')).toBe('a b c');
  });
});
