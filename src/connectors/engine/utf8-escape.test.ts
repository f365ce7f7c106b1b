import { describe, expect, it } from '@jest/globals';
import { decodeUtf8Escaping, encodeComponent, withEscapedBytesAsPercent } from './utf8-escape.js';

describe('bytes that are not UTF-8, kept as U+DC80 to U+DCFF', () => {
  it('go back into a URL as the bytes the source wrote; a character whose low surrogate is in that range stays a character', () => {
    const read = decodeUtf8Escaping(Buffer.concat([Buffer.from('a '), Buffer.from([0xe9, 0xff]), Buffer.from('🂠')]))!.text;
    expect(read).toBe('a \udce9\udcff\ud83c\udca0');
    expect(encodeComponent(read)).toBe('a%20%E9%FF%F0%9F%82%A0');
    expect(withEscapedBytesAsPercent(`/next?p=${read}`)).toBe('/next?p=a %E9%FF🂠');
    // Text without them is encodeURIComponent's; another unpaired surrogate (a JSON escape) is U+FFFD, as a URL's parser writes it.
    expect(encodeComponent('é 1/2')).toBe(encodeURIComponent('é 1/2'));
    expect(encodeComponent('x\ud800y\udce9')).toBe('x%EF%BF%BDy%E9');
  });
});
