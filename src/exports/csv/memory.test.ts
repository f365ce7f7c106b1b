import { Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Database } from '../../db/database.js';
import { createTestDatabase } from '../../../test/harness/database.js';
import { retained } from '../../../test/harness/memory.js';
import { DigestStream } from './digest.js';
import { csvSnapshot } from './writer.js';

let db: Database;

beforeAll(async () => {
  const url = await createTestDatabase('csvmem');
  db = new Database({ appUrl: url, workerUrl: url, poolSize: 2 });
});

afterAll(() => db.close());

const ROWS = 300_000;
const PAD = 300;
// About 100 MB of CSV.
const relation = `select lpad(g::text, 7, '0') as id, repeat('x', ${PAD}) || g as payload, case when g % 10 = 0 then null else 'v"' || g end as other
  from generate_series(1, ${ROWS}) g`;

/** The file's size, counted from the rules: every value quoted, `"` doubled, NULL empty, CRLF. */
function expectedBytes(delimiterBytes: number): number {
  let total = 0;
  for (let g = 1; g <= ROWS; g++) {
    const digits = String(g).length;
    total += 2 + 7 + delimiterBytes + 2 + PAD + digits + delimiterBytes + (g % 10 === 0 ? 0 : 2 + 3 + digits) + 2;
  }
  return total;
}

describe.each([
  ['COPY', ','],
  ['the cursor', '§'],
])('an export through %s', (_path, delimiter) => {
  it(`streams ${ROWS} rows to a slow consumer keeping a small fraction of them in memory`, async () => {
    const before = await retained();
    let peak = 0;
    let samples = 0;
    let seen = 0;
    let nextSample = 0;
    // A consumer slower than the database: each chunk waits a turn of the event loop. Without
    // backpressure the rows would pile up in memory.
    const sink = new Writable({
      highWaterMark: 16 * 1024,
      write(chunk: Buffer, _encoding, callback) {
        seen += chunk.length;
        if (seen < nextSample) return setImmediate(callback);
        nextSample = seen + 8 * 2 ** 20;
        samples++;
        retained().then((now) => {
          peak = Math.max(peak, now - before);
          callback();
        }, callback);
      },
    });
    const digest = new DigestStream();
    const rows = await db.withoutTenant(async (tx) => {
      const stream = csvSnapshot(tx, { relation, columns: ['id', 'payload', 'other'], order: ['id'], delimiter, header: false });
      await pipeline(stream, digest, sink);
      return stream.rows;
    });
    expect(rows).toBe(ROWS);
    expect(digest.bytes).toBe(expectedBytes(Buffer.byteLength(delimiter)));
    expect(samples).toBeGreaterThan(8);
    // The whole file would be 100 MB and more; a stream holds a few chunks (COPY, about 2 MB
    // measured) or one fetched batch and its text (the cursor, about 6 MB measured).
    expect(peak).toBeLessThan(digest.bytes / 10);
  }, 300_000); // 300,000 rows with a turn of the event loop per chunk: 120 s was exceeded at load average 10
});
