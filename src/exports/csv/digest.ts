import { createHash, type Hash } from 'node:crypto';
import { Transform, type TransformCallback } from 'node:stream';

/**
 * Passes bytes through unchanged, counting them and hashing them with SHA-256 on the way: an
 * export's byteCount and sha256 are those of exactly the bytes that went out.
 */
export class DigestStream extends Transform {
  /** Bytes passed so far (all of them once the stream has finished). */
  bytes = 0;
  private readonly hash: Hash = createHash('sha256');
  private hex: string | undefined;

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    this.bytes += chunk.length;
    this.hash.update(chunk);
    callback(null, chunk);
  }

  override _flush(callback: TransformCallback): void {
    this.hex = this.hash.digest('hex');
    callback();
  }

  /** The SHA-256 of every byte passed, in lower-case hex; only once the stream has finished. */
  sha256(): string {
    if (this.hex === undefined) throw new Error('the SHA-256 is known only once the stream has finished');
    return this.hex;
  }
}
