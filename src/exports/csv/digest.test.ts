import { createHash } from 'node:crypto';
import { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { describe, expect, it } from '@jest/globals';
import fc from 'fast-check';
import { DigestStream } from './digest.js';

/** Pipes `chunks` through a DigestStream; answers what came out and the digest. */
async function through(chunks: Buffer[]): Promise<{ out: Buffer; digest: DigestStream }> {
  const digest = new DigestStream();
  const out: Buffer[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      out.push(chunk);
      callback();
    },
  });
  await pipeline(Readable.from(chunks, { objectMode: false }), digest, sink);
  return { out: Buffer.concat(out), digest };
}

describe('DigestStream', () => {
  it('passes the bytes unchanged and counts and hashes exactly them, however they are chunked', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.uint8Array({ maxLength: 300 }), { maxLength: 20 }), async (parts) => {
        const chunks = parts.map((p) => Buffer.from(p));
        const all = Buffer.concat(chunks);
        const { out, digest } = await through(chunks);
        expect(out.equals(all)).toBe(true);
        expect(digest.bytes).toBe(all.length);
        expect(digest.sha256()).toBe(createHash('sha256').update(all).digest('hex'));
      }),
      { numRuns: 100 },
    );
  });

  it('gives the SHA-256 of nothing for an empty stream (a 0-byte export)', async () => {
    const { digest } = await through([]);
    expect(digest.bytes).toBe(0);
    expect(digest.sha256()).toBe('e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855');
  });

  it('hashes several megabytes chunk by chunk as crypto does at once', async () => {
    const chunks = Array.from({ length: 64 }, (_v, i) => Buffer.alloc(64 * 1024 + i, i));
    const { digest } = await through(chunks);
    const all = Buffer.concat(chunks);
    expect(digest.bytes).toBe(all.length);
    expect(digest.sha256()).toBe(createHash('sha256').update(all).digest('hex'));
  });

  it('refuses to answer a SHA-256 before the end', () => {
    const digest = new DigestStream();
    digest.write(Buffer.from('a'));
    expect(() => digest.sha256()).toThrow('only once the stream has finished');
    expect(digest.bytes).toBe(1);
  });
});
