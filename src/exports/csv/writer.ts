import { Readable } from 'node:stream';
import pg from 'pg';
import type { Tx } from '../../db/database.js';
import { snapshotSettingsSql, snapshotSql } from './query.js';

/** What to write: `columns` of `relation` (a subquery of text columns), in the file's order. */
export interface CsvSnapshotSpec {
  relation: string;
  columns: string[];
  /** Sort columns, taken from `columns`; the others follow them as tie-breaks. */
  order: string[];
  /** One character (any Unicode character), never `"`, CR, LF or NUL. */
  delimiter: string;
  header: boolean;
}

/** The bytes of an export file; `rows` counts the data records produced so far (all of them after `end`). */
export interface CsvSnapshot extends Readable {
  readonly rows: number;
}

/**
 * Rows per FETCH of the cursor path: enough that round trips cost little, few enough that one
 * batch (held whole while it is encoded) stays a few MB even for wide rows.
 */
export const FETCH_ROWS = 5000;

/**
 * The export file of `spec`, byte for byte (docs/exports-csv.md): UTF-8 without BOM, CRLF after
 * every record, every non-null value and every header name quoted with inner quotes doubled, NULL
 * an empty unquoted field, rows sorted as snapshotSql sorts them. Read from the database only as
 * fast as the stream is consumed. `tx` must be a transaction (the settings are local to it, the
 * cursor lives in it), and run nothing else until the stream has ended.
 *
 * A one-byte (ASCII) delimiter goes through `COPY … TO STDOUT (FORMAT csv, FORCE_QUOTE *)`, whose
 * `\n` record ends become `\r\n` as they are read (one record per protocol message); any other
 * delimiter, or a `tx` without copyTo, goes through a cursor and an encoder here. Both give the
 * same bytes.
 */
export function csvSnapshot(tx: Tx, spec: CsvSnapshotSpec): CsvSnapshot {
  checkDelimiter(spec.delimiter);
  const sql = snapshotSql(spec.relation, spec.columns, spec.order);
  const progress = { rows: 0 };
  const header = spec.header ? Buffer.from(encodeRecord(spec.columns, spec.delimiter), 'utf8') : undefined;
  const copying: { copy?: Readable } = {};
  const source = tx.copyTo && spec.delimiter.charCodeAt(0) < 0x80 ? viaCopy(tx, sql, spec.delimiter, header, progress, copying) : viaCursor(tx, sql, spec, header, progress);
  const stream = Readable.from(source, { objectMode: false });
  // Destroyed before its end (a run cancelled, stopped or failed): the COPY goes at once. Readable.from
  // would only return from the generator, which waits until the generator next yields: a generator
  // awaiting the COPY's next bytes is not returned from, and a COPY waiting on a lock held on a
  // source table sends none, so the destruction (and the run) would wait for that lock.
  const destroy = stream._destroy.bind(stream);
  stream._destroy = (err, callback) => {
    if (!stream.readableEnded) copying.copy?.destroy();
    destroy(err, callback);
  };
  Object.defineProperty(stream, 'rows', { get: () => progress.rows, enumerable: true });
  return stream as CsvSnapshot;
}

/** Throws unless `delimiter` is one character an export may use. */
export function checkDelimiter(delimiter: string): void {
  // One code point, and not a lone half of a surrogate pair (which has no UTF-8 form). Not the
  // byte-order mark either: a record whose first value is NULL starts with the delimiter, so a file
  // without a header would start with one, which the file never does (a reader drops it, and the
  // separator with it).
  const code = delimiter.codePointAt(0) ?? 0;
  const surrogate = code >= 0xd800 && code <= 0xdfff;
  if ([...delimiter].length !== 1 || surrogate || ['"', '\r', '\n', '\0', '\ufeff'].includes(delimiter)) {
    throw new Error(`the delimiter must be one character other than a double quote, CR, LF, NUL or the byte-order mark (U+FEFF), not ${JSON.stringify(delimiter)}`);
  }
}

async function applySettings(tx: Tx): Promise<void> {
  const { rows } = await tx.query<{ server_encoding: string }>(snapshotSettingsSql());
  const encoding = rows[0]?.server_encoding;
  if (encoding !== 'UTF8') throw new Error(`exports need a UTF8 database (byte-wise order is on UTF-8 bytes), not ${encoding}`);
}

async function* viaCopy(tx: Tx, sql: string, delimiter: string, header: Buffer | undefined, progress: { rows: number }, copying: { copy?: Readable }): AsyncGenerator<Buffer> {
  await applySettings(tx);
  if (header) yield header;
  // PostgreSQL sends each record in a message of its own: its `\n` becomes `\r\n` as the bytes
  // are read (src/db/copy-records.ts).
  const copy = tx.copyTo!(`copy (${sql}) to stdout (format csv, force_quote *, delimiter ${pg.escapeLiteral(delimiter)}, null '')`, { crlf: true });
  copying.copy = copy;
  for await (const chunk of copy) {
    progress.rows = copy.records;
    yield chunk as Buffer;
  }
}

async function* viaCursor(tx: Tx, sql: string, spec: CsvSnapshotSpec, header: Buffer | undefined, progress: { rows: number }): AsyncGenerator<Buffer> {
  await applySettings(tx);
  if (header) yield header;
  const cursor = `svc_csv_${++cursors}`;
  const keys = spec.columns.map((_c, i) => `c${i + 1}`);
  await tx.query(`declare ${cursor} no scroll cursor for ${sql}`);
  for (;;) {
    const { rows } = await tx.query<Record<string, string | null>>(`fetch forward ${FETCH_ROWS} from ${cursor}`);
    if (rows.length === 0) break;
    let text = '';
    for (const row of rows) {
      for (let i = 0; i < keys.length; i++) {
        if (i > 0) text += spec.delimiter;
        text += field(row[keys[i]!] ?? null);
      }
      text += '\r\n';
    }
    progress.rows += rows.length;
    yield Buffer.from(text, 'utf8');
    if (rows.length < FETCH_ROWS) break;
  }
  await tx.query(`close ${cursor}`);
}

let cursors = 0;

/** A field: a non-null value quoted with its quotes doubled, NULL nothing. */
function field(value: string | null): string {
  if (value === null) return '';
  return `"${value.includes('"') ? value.replaceAll('"', '""') : value}"`;
}

/** One record: the fields joined by the delimiter, CRLF at the end. */
export function encodeRecord(values: ReadonlyArray<string | null>, delimiter: string): string {
  return `${values.map(field).join(delimiter)}\r\n`;
}
