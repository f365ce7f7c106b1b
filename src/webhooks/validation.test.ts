import { describe, expect, it } from '@jest/globals';
import type { ValidationError } from '../errors.js';
import { EgressPolicy } from '../egress/policy.js';
import { normalizeEventTypes, normalizeTargetUrl } from './validation.js';

const strict = new EgressPolicy({ denyPrivate: true });

const field = (fn: () => unknown) => {
  try {
    fn();
  } catch (err) {
    return (err as ValidationError).field;
  }
  return undefined;
};

describe('eventTypes', () => {
  it('accepts exact types and prefix patterns, collapsing duplicates', () => {
    expect(normalizeEventTypes(['org.created', 'connector.run.*', 'decision.dormant.onboarding', 'org.created'])).toEqual([
      'org.created',
      'connector.run.*',
      'decision.dormant.onboarding',
    ]);
  });

  it.each([['*'], ['.*'], ['*.created'], ['org*'], ['org.*.x'], [''], [' org.created'], ['org..x']])('refuses %j naming the entry', (entry) => {
    expect(field(() => normalizeEventTypes(['org.created', entry]))).toBe('eventTypes[1]');
  });

  it('refuses an empty list naming the field', () => {
    expect(field(() => normalizeEventTypes([]))).toBe('eventTypes');
  });
});

describe('targetUrl', () => {
  it('accepts http(s) URLs with a host, port, path and query', () => {
    expect(normalizeTargetUrl(' https://hooks.example.com:8443/a/b?x=1 ')).toBe('https://hooks.example.com:8443/a/b?x=1');
    expect(normalizeTargetUrl('http://127.0.0.1:9000/hook')).toBe('http://127.0.0.1:9000/hook');
  });

  it.each([['ftp://x.example/'], ['file:///etc/passwd'], ['javascript:alert(1)'], ['mailto:a@b.c'], ['//x.example/'], ['x.example/hook'], ['https://u:p@x.example/'], ['https://x.example/#f'], ['']])(
    'refuses %j',
    (url) => {
      expect(field(() => normalizeTargetUrl(url))).toBe('targetUrl');
    },
  );

  it('with deny-private: refuses loopback, private, link-local, localhost and metadata targets, in any spelling', () => {
    for (const url of ['http://127.0.0.1/', 'http://10.1.2.3/', 'http://192.168.0.5/', 'http://172.20.0.1/', 'http://169.254.169.254/latest', 'http://localhost:8080/', 'http://localhost./', 'http://[::1]/', 'http://[fd00::1]/', 'http://2130706433/', 'http://0x7f.1/', 'http://[::ffff:127.0.0.1]/', 'http://metadata.google.internal/']) {
      expect(field(() => normalizeTargetUrl(url, strict))).toBe('targetUrl');
    }
    expect(normalizeTargetUrl('https://93.184.216.34/', strict)).toBe('https://93.184.216.34/');
  });
});
