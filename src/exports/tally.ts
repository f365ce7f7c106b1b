import { createHash } from 'node:crypto';
import { Transform, type TransformCallback } from 'node:stream';

/** Counts records as the CSV flows by (a record ends at a CRLF outside quotes) and bytes, and hashes. */
export class Tally extends Transform {
  bytes = 0;
  rows = 0;
  private quoted = false;
  private readonly hash = createHash('sha256');
  private digestHex: string | undefined;

  override _transform(chunk: Buffer, _enc: BufferEncoding, done: TransformCallback): void {
    this.bytes += chunk.length;
    this.hash.update(chunk);
    // Native searches from quote to quote; the next line feed is looked up once per record.
    let i = 0;
    let newline = -1;
    while (i < chunk.length) {
      const quote = chunk.indexOf(0x22, i);
      if (this.quoted) {
        if (quote < 0) break;
        this.quoted = false;
        i = quote + 1;
        continue;
      }
      if (newline < i) newline = chunk.indexOf(0x0a, i);
      if (newline >= 0 && (quote < 0 || newline < quote)) {
        this.rows++;
        i = newline + 1;
      } else if (quote >= 0) {
        this.quoted = true;
        i = quote + 1;
      } else break;
    }
    done(null, chunk);
  }

  sha256(): string {
    this.digestHex ??= this.hash.digest('hex');
    return this.digestHex;
  }
}

