import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';

/** Bytes a test publishes through an export destination, and checks the copy of. */

/** The SHA-256 of `bytes` (a string: of its UTF-8), in hex (as a run's receipt and a download state it). */
export function sha256(bytes: Buffer | string): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/** A byte stream of `bytes` in chunks of `chunk` bytes (as a destination is handed a file's body). */
export function bodyOf(bytes: Buffer, chunk = 64 * 1024): Readable {
  return Readable.from(
    (function* () {
      for (let at = 0; at < bytes.length; at += chunk) yield bytes.subarray(at, at + chunk);
    })(),
    { objectMode: false },
  );
}
