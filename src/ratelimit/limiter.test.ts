import { describe, expect, it } from '@jest/globals';
import { Config } from '../config/config.js';
import { RateLimited } from '../errors.js';
import { type RateLimitBucket, RateLimiter, rateLimitsFrom, WINDOW_MS } from './limiter.js';

/** The fixed-window counter alone, on a clock the test moves (the router's side: apiserver/rate-limit.test.ts). */

const T0 = Date.UTC(2026, 0, 1, 12, 0, 0);

function limiter(limits: Partial<Record<RateLimitBucket, number>>) {
  let t = T0;
  const all = { 'view-generate': 0, 'platform-chat': 0, 'user-chat': 0, 'platform-search': 0, ...limits };
  return { limiter: new RateLimiter(all, () => t), advance: (ms: number) => (t += ms) };
}

describe('RateLimiter', () => {
  it('lets rpm requests through in a window, refuses the next with the whole seconds left (rounded up)', () => {
    const { limiter: l, advance } = limiter({ 'user-chat': 3 });
    for (let i = 0; i < 3; i++) expect(l.take('user-chat', 7)).toEqual({ allowed: true });
    advance(12_300);
    expect(l.take('user-chat', 7)).toEqual({ allowed: false, retryAfterSeconds: 48 });
    advance(47_699);
    expect(l.take('user-chat', 7)).toEqual({ allowed: false, retryAfterSeconds: 1 });
    advance(1);
    expect(l.take('user-chat', 7)).toEqual({ allowed: true });
  });

  it('a refused request does not extend the window', () => {
    const { limiter: l, advance } = limiter({ 'user-chat': 1 });
    l.take('user-chat', 7);
    for (let i = 0; i < 10; i++) {
      advance(5_000);
      expect(l.take('user-chat', 7).allowed).toBe(false);
    }
    advance(WINDOW_MS - 50_000);
    expect(l.take('user-chat', 7).allowed).toBe(true);
  });

  it('counts tenants and buckets apart; no tenant is the one system key', () => {
    const { limiter: l } = limiter({ 'platform-chat': 1, 'platform-search': 1 });
    expect(l.take('platform-chat', 1).allowed).toBe(true);
    expect(l.take('platform-chat', 1).allowed).toBe(false);
    expect(l.take('platform-chat', 2).allowed).toBe(true);
    expect(l.take('platform-search', 1).allowed).toBe(true);
    expect(l.take('platform-chat', undefined).allowed).toBe(true);
    expect(l.take('platform-chat', undefined).allowed).toBe(false);
  });

  it('a bucket of 0 is off: never refused', () => {
    const { limiter: l } = limiter({ 'view-generate': 0 });
    for (let i = 0; i < 1000; i++) expect(l.take('view-generate', 1).allowed).toBe(true);
  });

  it('admit throws the 429 with Retry-After', () => {
    const { limiter: l } = limiter({ 'user-chat': 1 });
    l.admit('user-chat', 3);
    let thrown: unknown;
    try {
      l.admit('user-chat', 3);
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toBeInstanceOf(RateLimited);
    expect((thrown as RateLimited).render()).toEqual({ status: 429, headers: { 'Retry-After': '60' }, body: { json: { error: 'rate limit exceeded' } } });
  });
});

describe('rateLimitsFrom', () => {
  const load = (env: Record<string, string>, overrides: Record<string, string> = {}) => rateLimitsFrom(Config.load({ env, overrides: { 'svc.config': '/nonexistent-svc-config.yaml', ...overrides } }));

  it('prod defaults: 10 for view-generate, svc.ratelimit.default.rpm (60) for the chat and search buckets', () => {
    expect(load({ SVC_PROFILE: 'prod', SVC_OIDC_ISSUER: 'https://issuer.example', SVC_SECRET_MASTER_KEY: 'a'.repeat(64) })).toEqual({
      'view-generate': 10, 'platform-chat': 60, 'user-chat': 60, 'platform-search': 60,
    });
  });

  it('the dev profile sets 0 (off) for the defaults', () => {
    expect(load({ SVC_PROFILE: 'dev' })).toEqual({ 'view-generate': 0, 'platform-chat': 0, 'user-chat': 0, 'platform-search': 0 });
  });

  it('environment forms: per bucket, and the default the chat and search buckets fall back to', () => {
    expect(load({ SVC_PROFILE: 'dev', SVC_RATELIMIT_DEFAULT_RPM: '5', SVC_RATELIMIT_USER_CHAT_RPM: '7', SVC_RATELIMIT_VIEW_GENERATE_RPM: '2' })).toEqual({
      'view-generate': 2, 'platform-chat': 5, 'user-chat': 7, 'platform-search': 5,
    });
  });
});
