import { sha256 } from '../../../test/harness/bytes.js';
import { Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import fc from 'fast-check';
import pg from 'pg';
import { Database, type Tx } from '../../db/database.js';
import { createTestDatabase } from '../../../test/harness/database.js';
import { DigestStream } from './digest.js';
import { type CsvSnapshotSpec, csvSnapshot } from './writer.js';

let db: Database;

beforeAll(async () => {
  const url = await createTestDatabase('csvprop');
  db = new Database({ appUrl: url, workerUrl: url, poolSize: 2 });
});

afterAll(() => db.close());

type Row = Array<string | null>;

/**
 * The export file written the most obvious way, from the spec's words: sort in JavaScript on the
 * UTF-8 bytes of the order columns then the other columns, NULLs last; quote every non-null
 * value, double its quotes, NULL empty; CRLF after every record.
 */
function reference(table: string[], rows: Row[], spec: CsvSnapshotSpec): Buffer {
  const at = (column: string) => table.indexOf(column);
  const keys = [...spec.order, ...spec.columns.filter((c) => !spec.order.includes(c))].map(at);
  const compare = (x: Row, y: Row): number => {
    for (const k of keys) {
      const a = x[k]!;
      const b = y[k]!;
      if (a === b) continue;
      if (a === null) return 1;
      if (b === null) return -1;
      const c = Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
      if (c !== 0) return c;
    }
    return 0;
  };
  const field = (v: string | null) => (v === null ? '' : `"${v.split('"').join('""')}"`);
  let out = spec.header ? `${spec.columns.map(field).join(spec.delimiter)}\r\n` : '';
  for (const row of [...rows].sort(compare)) out += `${spec.columns.map((c) => field(row[at(c)]!)).join(spec.delimiter)}\r\n`;
  return Buffer.from(out, 'utf8');
}

/** The bytes of csvSnapshot, through a DigestStream, with what the digest counted. */
async function digested(tx: Tx, spec: CsvSnapshotSpec): Promise<{ bytes: Buffer; sha256: string; counted: number }> {
  const chunks: Buffer[] = [];
  const digest = new DigestStream();
  const sink = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      chunks.push(chunk);
      callback();
    },
  });
  await pipeline(csvSnapshot(tx, spec), digest, sink);
  return { bytes: Buffer.concat(chunks), sha256: digest.sha256(), counted: digest.bytes };
}


// Characters that trouble CSV, and the rest of Unicode (but NUL, which text cannot hold).
const character = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom('"', ',', ';', '\t', '|', '§', '\r', '\n', 'a', 'B', 'Z', 'é', 'É', '😀', ' ', '\u00a0', '\\') },
  { weight: 1, arbitrary: fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }).filter((c) => c !== '\0') },
);
// Few distinct values often, so that ties, duplicates and NULLs among them are common.
const value = fc.oneof(
  { weight: 2, arbitrary: fc.constantFrom<string | null>(null, '', 'a', 'B', 'é', '"') },
  { weight: 3, arbitrary: fc.string({ unit: character, maxLength: 6 }) },
);
const columnName = fc.string({ unit: fc.constantFrom('a', 'b', 'Z', ' ', '"', 'é', ';', '§'), minLength: 1, maxLength: 4 });

const exportCase = fc
  .uniqueArray(columnName, { minLength: 1, maxLength: 5 })
  .chain((table) =>
    fc
      .shuffledSubarray(table, { minLength: 1 })
      .chain((columns) =>
        fc.record({
          table: fc.constant(table),
          rows: fc.array(fc.array(value, { minLength: table.length, maxLength: table.length }), { maxLength: 30 }),
          duplicates: fc.array(fc.nat(), { maxLength: 5 }),
          columns: fc.constant(columns),
          order: fc.shuffledSubarray(columns),
          delimiter: fc.constantFrom(',', ';', '\t', '|', '§'),
          header: fc.boolean(),
        }),
      ),
  )
  .map(({ rows, duplicates, ...rest }) => ({ ...rest, rows: rows.length ? [...rows, ...duplicates.map((i) => rows[i % rows.length]!)] : rows }));

describe('csvSnapshot against a reference encoder', () => {
  it('gives the reference bytes for random tables, delimiters and headers, the same bytes and SHA-256 every time and through both paths', async () => {
    await fc.assert(
      fc.asyncProperty(exportCase, async ({ table, rows, columns, order, delimiter, header }) => {
        const spec: CsvSnapshotSpec = { relation: 'select * from pg_temp.export_case', columns, order, delimiter, header };
        const expected = reference(table, rows, spec);
        await db.withoutTenant(async (tx) => {
          const names = table.map((c) => pg.escapeIdentifier(c));
          // A linguistic collation, so that only the writer's COLLATE "C" gives byte order.
          await tx.query(`create temp table export_case (${names.map((n) => `${n} text collate "unicode"`).join(', ')}) on commit drop`);
          const fill = async (order: Row[]) => {
            await tx.query('delete from export_case');
            await tx.query(
              `insert into export_case select * from unnest(${names.map((_n, i) => `$${i + 1}::text[]`).join(', ')})`,
              table.map((_c, i) => order.map((r) => r[i])),
            );
          };
          await fill(rows);
          const first = await digested(tx, spec);
          expect(first.bytes.toString('utf8')).toBe(expected.toString('utf8'));
          expect(first.bytes.equals(expected)).toBe(true);
          expect(first.sha256).toBe(sha256(expected));
          expect(first.counted).toBe(expected.length);
          // The same data stored in another order, read again, and read through the cursor.
          await fill([...rows].reverse());
          const again = await digested(tx, spec);
          expect(again.sha256).toBe(first.sha256);
          const cursor = await digested({ tenantId: tx.tenantId, query: tx.query }, spec);
          expect(cursor.sha256).toBe(first.sha256);
        });
      }),
      { numRuns: 100 },
    );
  });
});
