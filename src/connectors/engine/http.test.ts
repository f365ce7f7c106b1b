import { Readable } from 'node:stream';
import { describe, expect, it } from '@jest/globals';
import { UnreadableResponseError } from './errors.js';
import { MAX_ESCAPED_BYTES, readPage, readPageText } from './http.js';

/** A body arriving in the given pieces, as a socket may cut it. */
function body(pieces: Buffer[]): Readable {
  return Readable.from(pieces, { objectMode: false });
}

/** Every way of cutting `bytes` in two, and in single bytes. */
function cuts(bytes: Buffer): Buffer[][] {
  const all: Buffer[][] = [[...bytes].map((b) => Buffer.from([b]))];
  for (let i = 1; i < bytes.length; i++) all.push([bytes.subarray(0, i), bytes.subarray(i)]);
  return all;
}

describe('readPage', () => {
  it('decodes characters cut between chunks at any byte, and drops a byte order mark cut anywhere', async () => {
    const text = '{"name":"Zoë Łódź 東京 🦊"}';
    const bytes = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(text, 'utf8')]);
    for (const pieces of cuts(bytes)) await expect(readPage(body(pieces), 200, 1024)).resolves.toBe(text);
  });

  it('keeps a byte order mark that is not the first character', async () => {
    await expect(readPage(body([Buffer.from('a\ufeffb')]), 200, 1024)).resolves.toBe('a\ufeffb');
  });

  it('refuses invalid UTF-8 naming the offset of the first bad byte, wherever the chunks are cut (probe 31 M4)', async () => {
    // "ab" then a lead byte whose continuation is "(": byte 3 is where it stops being UTF-8.
    const bytes = Buffer.from([0x61, 0x62, 0xc3, 0x28, 0x62]);
    for (const pieces of cuts(bytes)) {
      const err = await readPage(body(pieces), 200, 1024).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(UnreadableResponseError);
      expect((err as Error).message).toMatch(/^upstream answered HTTP 200 with a body that is not valid utf-8: an invalid byte sequence at byte offset [23]$/);
    }
    const one = await readPage(body([bytes]), 200, 1024).catch((e: unknown) => e);
    expect((one as Error).message).toBe('upstream answered HTTP 200 with a body that is not valid utf-8: an invalid byte sequence at byte offset 3');
    // A character left incomplete at the end of the body.
    const cut = await readPage(body([Buffer.from([0x61, 0xe6, 0x9d])]), 200, 1024).catch((e: unknown) => e);
    expect((cut as Error).message).toBe('upstream answered HTTP 200 with a body that is not valid utf-8: an invalid byte sequence at byte offset 3');
  });

  it('decodes a declared charset the Encoding Standard knows, and names one it does not', async () => {
    await expect(readPage(body([Buffer.from('{"n":"Jos\xe9 M\xfcller"}', 'latin1')]), 200, 1024, 'iso-8859-1')).resolves.toBe('{"n":"José Müller"}');
    const err = await readPage(body([Buffer.from('{}')]), 200, 1024, 'x-klingon').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UnreadableResponseError);
    expect((err as Error).message).toBe(
      'upstream answered HTTP 200 with a body in charset x-klingon, which the hub cannot decode (declare UTF-8 or another charset of the WHATWG Encoding Standard)',
    );
  });

  it('refuses a page past maxBytes, as soon as it is past, and stops reading', async () => {
    let read = 0;
    const endless = new Readable({
      read() {
        read++;
        this.push(Buffer.alloc(1000, 0x61));
      },
    });
    const err = await readPage(endless, 200, 10_000).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UnreadableResponseError);
    expect((err as Error).message).toBe('upstream answered HTTP 200 with a page larger than 10000 bytes; refusing to hold it in memory');
    expect(endless.destroyed).toBe(true);
    expect(read).toBeLessThan(30);
    await expect(readPage(body([Buffer.alloc(10_000, 0x62)]), 200, 10_000)).resolves.toHaveLength(10_000);
  });

  it('with escapeInvalidUtf8, reads each byte that is not UTF-8 as U+DC00 plus the byte, wherever the chunks are cut, and keeps the refusal a strict read gives', async () => {
    // Latin-1 é, a lead byte cut by "(", a surrogate's UTF-8 (ED A0 80), an overlong "/" (C0 AF), then
    // valid characters of 2, 3 and 4 bytes, and a character cut off by the end of the body.
    const bytes = Buffer.concat([Buffer.from('Jos'), Buffer.from([0xe9, 0xc3, 0x28, 0xed, 0xa0, 0x80, 0xc0, 0xaf]), Buffer.from('ë東🦊'), Buffer.from([0xf0, 0x9f, 0xa6])]);
    const expected = 'Jos\udce9\udcc3(\udced\udca0\udc80\udcc0\udcafë東🦊\udcf0\udc9f\udca6';
    for (const pieces of cuts(bytes)) {
      const page = await readPageText(body(pieces), 200, 1024, 'utf-8', true);
      expect(page.text).toBe(expected);
      expect(page.undecodable?.message).toMatch(/^upstream answered HTTP 200 with a body that is not valid utf-8: an invalid byte sequence at byte offset 4$/);
    }
    // Only a character cut off by the end.
    const cut = await readPageText(body([Buffer.from([0x61, 0xe6]), Buffer.from([0x9d])]), 200, 1024, 'utf-8', true);
    expect(cut).toEqual({ text: 'a\udce6\udc9d', undecodable: expect.objectContaining({ message: 'upstream answered HTTP 200 with a body that is not valid utf-8: an invalid byte sequence at byte offset 3' }) });
    // Valid UTF-8 (a U+FFFD written by the source included) is read as it is, with nothing refused.
    await expect(readPageText(body([Buffer.from('a\ufffdb')]), 200, 1024, 'utf-8', true)).resolves.toEqual({ text: 'a\ufffdb' });
    // Another charset is read strictly.
    const utf16 = await readPageText(body([Buffer.from([0x00, 0xd8])]), 200, 1024, 'utf-16le', true).catch((e: unknown) => e);
    expect(utf16).toBeInstanceOf(UnreadableResponseError);
  });

  it('refuses a page of more than MAX_ESCAPED_BYTES bytes that are not UTF-8 as a strict read does (another charset, not a few bad bytes), at once', async () => {
    const within = Buffer.concat([Buffer.from('["'), Buffer.alloc(MAX_ESCAPED_BYTES, 0xe9), Buffer.from('"]')]);
    await expect(readPageText(body([within]), 200, 1 << 20, 'utf-8', true)).resolves.toMatchObject({ text: `["${'\udce9'.repeat(MAX_ESCAPED_BYTES)}"]` });
    const past = Buffer.concat([Buffer.from('["'), Buffer.alloc(MAX_ESCAPED_BYTES + 1, 0xe9), Buffer.from('"]')]);
    for (const pieces of [[past], [past.subarray(0, 1000), past.subarray(1000)]]) {
      const err = await readPageText(body(pieces), 200, 1 << 20, 'utf-8', true).catch((e: unknown) => e);
      expect((err as Error).message).toBe('upstream answered HTTP 200 with a body that is not valid utf-8: an invalid byte sequence at byte offset 3');
    }
  });
});
