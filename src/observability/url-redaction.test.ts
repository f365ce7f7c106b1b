import { describe, expect, it } from '@jest/globals';
import { loggableText, loggableUrl, maskUserinfo } from './url-redaction.js';

// The connector errors' cases are in src/connectors/engine/errors.test.ts, loggableUrl's own in src/auth/verifier.test.ts.
describe('maskUserinfo and loggableUrl', () => {
  it('mask the credentials of every spelling a URL parser reads them from; loggableUrl also the query, and the fragment goes', () => {
    for (const [address, masked, logged] of [
      ['https://u:p@h.example/x?t=1#f', 'https://***@h.example/x?t=1#f', 'https://***@h.example/x?t=***'],
      [' http://u:secret@h.example/x?t=1', 'http://***@h.example/x?t=1', 'http://***@h.example/x?t=***'],
      ['http:u:secret@h.example/x', 'http://***@h.example/x', 'http://***@h.example/x'],
      ['https:\\\\u:p@h.example/x', 'https:\\\\***@h.example/x', 'https://***@h.example/x'],
      ['https://h.example/a@b', 'https://h.example/a@b', 'https://h.example/a@b'],
    ]) {
      expect([maskUserinfo(address!), loggableUrl(address!)]).toEqual([masked, logged]);
    }
  });

  it('mask anything between // and an @ in text that does not parse as a URL, wherever it stands', () => {
    for (const text of ['not a url //user:pass@x', 'http://u:p@bad host/x', 'see http://u:p@h.example/x']) {
      expect(maskUserinfo(text)).not.toMatch(/u(ser)?:p(ass)?@/);
      expect(loggableUrl(text)).toBe(maskUserinfo(text));
    }
    expect(maskUserinfo('see http://u:p@h.example/x')).toBe('see http://***@h.example/x');
  });
});

describe('loggableText', () => {
  it('shows every http(s) URL in a text as loggableUrl does, and masks the credentials of an address of any other scheme', () => {
    expect(loggableText('connect to postgres://svc:pw@db:5432/hub failed; see https://u:p@h.example/x?token=t#f.')).toBe(
      'connect to postgres://***@db:5432/hub failed; see https://***@h.example/x?token=***.',
    );
    expect(loggableText('redis://:pw@cache:6379 and amqp://guest@mq/ and file:///a@b and postgres://db/hub')).toBe('redis://***@cache:6379 and amqp://***@mq/ and file:///a@b and postgres://db/hub');
    expect(loggableText('no address here: a@b')).toBe('no address here: a@b');
  });
});
