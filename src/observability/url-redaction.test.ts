import { describe, expect, it } from '@jest/globals';
import { loggableUrl, maskUserinfo } from './url-redaction.js';

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
