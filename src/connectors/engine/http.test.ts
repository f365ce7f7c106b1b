import { Readable } from 'node:stream';
import { describe, expect, it } from '@jest/globals';
import { UnreadableResponseError } from './errors.js';
import { readPage } from './http.js';

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

  it('keeps a byte order mark that is not the first character, and replaces invalid bytes as a decoder does', async () => {
    await expect(readPage(body([Buffer.from('a\ufeffb')]), 200, 1024)).resolves.toBe('a\ufeffb');
    await expect(readPage(body([Buffer.from([0x61, 0xc3]), Buffer.from([0x28, 0x62])]), 200, 1024)).resolves.toBe('a\ufffd(b');
    // A character left incomplete at the end of the body.
    await expect(readPage(body([Buffer.from([0x61, 0xe6, 0x9d])]), 200, 1024)).resolves.toBe('a\ufffd');
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
});
