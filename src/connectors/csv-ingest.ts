import { setImmediate as turn } from 'node:timers/promises';
import { type Options, Parser } from 'csv-parse';
import type { Tx } from '../db/database.js';
import { csvSourceId, stableUuid } from './csv-source.js';
import { type Caller, requireEvery, scopeAccess } from '../admin/scope-access.js';
import { NotFoundError, ValidationError } from '../errors.js';
import { takeTablePlace } from '../manifests/tenant-cap.js';
import { registerTargetTable } from './target/register.js';
import { requireTableWriters } from './target/writers.js';
import { pieceEnd } from '../validation/input-limits.js';
import { connectorLabel, csvBytesReadTotal, csvOpenTotal } from './metrics.js';
import type { ConnectorRunner, PageReader } from './runner.js';
import type { RunRecord } from './runs/ledger.js';
import { columnRoomRefusal, EXT_COLUMNS, extTableName, promoteColumnName, tableColumns, tenantTableText } from './target/ddl.js';
import type { ConnectorSpec, EndpointSpec, Page } from './types.js';

/**
 * A CSV body: its text, or its text in the pieces it was decoded in with its size in bytes (the route's body, read
 * through its pieces: the text of 10 MB is never copied or measured whole in one turn of the event loop).
 */
export type CsvText = string | { pieces: readonly string[]; bytes: number };

export interface CsvIngestRequest {
  connector: string;
  table: string;
  key: string;
  csv: CsvText;
  triggeredBy: string;
}

/**
 * Tables one tenant may have (ext tables, whoever writes them: connectors' endpoints and CSV
 * ingests): a CSV ingest makes a new one for each table name it is given, and each is a table of the
 * shared database's catalog with its indexes, so an ingest into a new table past this is refused
 * (409); one into a table the tenant has is not.
 */
export const MAX_TABLES_PER_TENANT = 1000;

/** A CSV text's pieces (one, for a text given whole). */
export const csvPieces = (csv: CsvText): readonly string[] => (typeof csv === 'string' ? [csv] : csv.pieces);

/** The first `chars` characters of a CSV text (of its first pieces: one may be empty, or hold a character). */
function headOf(csv: CsvText, chars: number): string {
  let head = '';
  for (const piece of csvPieces(csv)) {
    if (head.length >= chars) break;
    head += piece.slice(0, chars - head.length);
  }
  return head;
}

/**
 * Most columns of an ingested CSV: a PostgreSQL table holds at most 1,600, and each column named as an identifier
 * becomes one. Each row is an object of every column, made at once: a header of 655,000 names held the event loop
 * for 1.8 s. (How many new columns the table still has room for, its own and its dropped ones counted, is checked
 * as the run is recorded: `admit` below.)
 */
export const MAX_CSV_COLUMNS = 1600;

/**
 * Most values (columns × rows) of a page of an ingest's rows, and of a chunk of its run (PageReader.chunkRows): a row
 * of 1,600 columns is held as an object of 1,600 properties, about 100 KB of heap (and 18 KB of JSON); in pages and
 * chunks of 1,000 such rows, an ingest of 10 MB of them held 440 MB of heap (5 MB, 200 MB; 37 MB now), and on a busy
 * machine the collections of so much young garbage held the event loop up to 0.17 s at a time.
 */
const CSV_CHUNK_CELLS = 100_000;

/** Characters of CSV parsed between two turns of the event loop: a few milliseconds of parsing, whatever the text holds. */
const CSV_SLICE_CHARS = 16 * 1024;

/**
 * The records of a CSV text, parsed a slice at a time with a turn of the event loop between two slices: parsed in one
 * go, 10 MB (svc.http.body-limit) of a text built to be slow (one long field, empty lines, tiny rows) held the event
 * loop every tenant shares for half a second. 16 KiB is a few milliseconds of parsing whatever the text holds (20 rows
 * of 1,600 columns at 64 KiB, and the garbage they make, took 0.2 s). The parser keeps a record (a field, a quoted value, a line end) that
 * spans slices.
 *
 * The records are handed over as they are parsed, those of one slice at a time (at most 8,192: a record takes two
 * characters at least, empty lines being skipped), and the next slice is parsed only when the consumer asks for more:
 * what is held is the records of one slice, never those of the whole text (10 MB of tiny rows are millions of
 * records, hundreds of MB). Left early (`return`), the parser is dropped.
 */
async function* csvRecords(csv: CsvText, options: Options): AsyncGenerator<Array<Record<string, string>>> {
  const parser = new Parser(options);
  let records: Array<Record<string, string>> = [];
  parser.on('data', (record: Record<string, string>) => records.push(record));
  const ended = new Promise<void>((resolve, reject) => {
    parser.on('end', resolve);
    parser.on('error', reject);
  });
  ended.catch(() => undefined); // awaited below; refused meanwhile, the slices stop
  const taken = () => {
    const slice = records;
    records = [];
    return slice;
  };
  try {
    for (const text of csvPieces(csv)) {
      for (let at = 0; at < text.length && !parser.destroyed; ) {
        // Slices of the text, each made bytes as it is written: a surrogate pair is never cut in two.
        const end = pieceEnd(text, at, CSV_SLICE_CHARS);
        parser.write(Buffer.from(text.slice(at, end)));
        at = end;
        await turn();
        if (records.length > 0 && !parser.destroyed) yield taken();
      }
    }
    if (!parser.destroyed) parser.end();
    await ended;
    if (records.length > 0) yield taken();
  } finally {
    if (!parser.destroyed) parser.destroy();
  }
}

/**
 * POST /api/platform/sources/csv/ingest: one run that upserts the CSV's rows into `ext.<table>`,
 * keyed by the `key` column, every column named as a lower-case identifier also promoted as a text
 * column (the others stay in `data`). It goes through the same
 * runner as REST connectors (ledger, chunks, dead letters, events); unlike them it emits
 * `data.row.changed` for new or changed rows when something subscribes.
 */
/** Records end at CRLF, LF or CR, mixed in one body (files pasted together); inside quotes each is data. */
const LINE_ENDS = ['\r\n', '\n', '\r'];

/** How an ingest's body is parsed, `columns` naming (or skipping: `false`) each column of the header record. */
const csvOptions = (columns: (header: string[]) => Array<string | false>): Options => ({
  columns,
  skip_empty_lines: true,
  bom: true,
  relax_column_count: false,
  record_delimiter: LINE_ENDS,
});

export async function ingestCsv(
  runner: ConnectorRunner,
  tenantId: number,
  findConnectorId: (tx: Tx, name: string) => Promise<string | undefined>,
  withTenant: <T>(fn: (tx: Tx) => Promise<T>) => Promise<T>,
  request: CsvIngestRequest,
  caller?: Caller,
): Promise<RunRecord> {
  const table = request.table.startsWith('ext.') ? request.table : `ext.${request.table}`;
  if (!extTableName(table)) throw new ValidationError('table must be a lower-case identifier (letters, digits, underscores), optionally prefixed ext.', 'table');
  if (!/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/.test(request.connector)) throw new ValidationError('connector must be a lower-case name (letters, digits, dashes)', 'connector');
  let header: string[] | undefined;
  const file = { transport: 'upload', connector: connectorLabel(tenantId, request.connector), tenant: String(tenantId) };
  csvBytesReadTotal().inc(file, typeof request.csv === 'string' ? Buffer.byteLength(request.csv) : request.csv.bytes);
  try {
    // The header record (a quoted name may span lines): each name once, none empty, at most MAX_CSV_COLUMNS.
    const columns = (names: string[]): string[] => {
      if (names.length > MAX_CSV_COLUMNS) throw new ValidationError(`the CSV header names ${names.length.toLocaleString('en-US')} columns: at most ${MAX_CSV_COLUMNS.toLocaleString('en-US')}`, 'body');
      const seen = new Set<string>();
      for (const name of names) {
        if (name.trim() === '') throw new ValidationError('the CSV header has an empty column name', 'body');
        if (seen.has(name)) throw new ValidationError(`the CSV header names column ${JSON.stringify(name)} twice: each column once`, 'body');
        seen.add(name);
      }
      header = names;
      return names;
    };
    // An empty first line is a header of one empty name, not a line to skip.
    if (/^\ufeff?[\r\n]/.test(headOf(request.csv, 2))) columns(['']);
    // The whole body is parsed once before anything is stored, only to find what refuses it (a bad header, an unclosed
    // quote, a row of another number of fields, wherever it is): an ingest that is refused writes nothing. Every column
    // is skipped (`false`), so each record is an empty object, dropped at once, at half the cost of a row's; the same
    // parser with the same options then reads the rows again as the run writes them (`reader` below).
    for await (const _ of csvRecords(request.csv, csvOptions((names) => columns(names).map(() => false)))) {
      // each slice's empty objects are dropped
    }
    header ??= [];
  } catch (err) {
    csvOpenTotal().inc({ ...file, result: 'error' });
    if (err instanceof ValidationError) throw err;
    throw new ValidationError(`body is not valid CSV: ${(err as Error).message}`, 'body');
  }
  csvOpenTotal().inc({ ...file, result: 'ok' });
  if (!header.includes(request.key)) throw new ValidationError(`key column ${request.key} is not in the CSV header`, 'key');

  const storedId = await withTenant((tx) => findConnectorId(tx, request.connector));
  const endpoint: EndpointSpec = {
    id: `csv-${extTableName(table)!.replace(/_/g, '-')}`,
    uuid: stableUuid(`csv:${tenantId}:${request.connector}:${table}`),
    enabled: true,
    method: 'POST',
    path: '/api/platform/sources/csv/ingest',
    graphql: false,
    pagination: { kind: 'none', response_path: '$' },
    incremental: { mode: 'full' },
    target: {
      kind: 'hybrid',
      table,
      unique_key: `$[${JSON.stringify(request.key)}]`,
      promote: header.filter((c) => promoteColumnName(c)).map((c) => ({ name: c, path: `$[${JSON.stringify(c)}]`, type: 'text' as const })),
      // A column a connector's endpoint made typed (bigint, timestamptz…) is written as that type.
      typesFromTable: true,
    },
  };
  const connectorOf = (id: string): ConnectorSpec => ({
    id,
    name: request.connector,
    tenantId,
    connectorType: 'rest-generic',
    scopes: [],
    baseUrl: 'csv:',
    auth: { kind: 'none' },
    rateLimit: { count: 1, windowMs: 1000 },
    graphqlPath: '/graphql',
    headers: [],
    endpoints: [endpoint],
  });
  // The rows flow: a slice of the body is parsed when the run asks for its next page, so what is held of the rows at
  // any moment is the runner's chunks (up to three: docs/connector-runs.md) and the records of one slice, whatever
  // the body's size. The body parsed without an error above parses without one here.
  const names = header;
  // Pages and chunks of at most CSV_CHUNK_CELLS values (1,000 rows of up to 100 columns; 62 rows of 1,600).
  const rows = Math.max(1, Math.min(1000, Math.floor(CSV_CHUNK_CELLS / Math.max(1, names.length))));
  const reader: PageReader = {
    chunkRows: rows,
    async *read(): AsyncIterable<Page> {
      const size = rows;
      let number = 0;
      let items: Array<Record<string, string>> = [];
      for await (const records of csvRecords(request.csv, csvOptions(() => names))) {
        for (const record of records) {
          items.push(record);
          if (items.length === size) {
            yield { number: ++number, items };
            items = [];
          }
        }
      }
      if (items.length > 0) yield { number: ++number, items };
    },
  };
  // In the transaction recording the run: a scope-bound caller ingests only under a stored connector
  // whose scopes they hold (a CSV source with no manifest has none), into a table whose other writers'
  // scopes they hold; a new table takes its place among the tenant's tables, registered at once.
  const admit = (id: string) => async (tx: Tx, scopes: readonly string[]) => {
    const access = await scopeAccess(tx, caller);
    requireEvery(access, scopes);
    await requireTableWriters(tx, access, [table], { except: id });
    await takeTablePlace(tx, { plural: 'tables', max: MAX_TABLES_PER_TENANT, advice: `ingest into a table it has, or delete a connector or CSV source to drop the tables only it writes` }, table, () =>
      registerTargetTable(tx, id, endpoint.uuid, table),
    );
    // The header's new columns must fit beside those the table has taken (its own, its promoted ones, the dropped ones):
    // past PostgreSQL's limit the run was recorded and then failed making them, a 400 here stores nothing.
    const have = await tableColumns(tx, tenantTableText(tenantId, table));
    const adding = endpoint.target.promote.filter((p) => !have?.types.has(p.name)).length;
    const refusal = columnRoomRefusal(table, have?.numbered ?? EXT_COLUMNS.length, adding, 'the CSV header names');
    if (refusal) throw new ValidationError(refusal, 'body');
  };
  const trigger = (id: string, connectorStored: boolean) =>
    runner.trigger(tenantId, connectorOf(id), { triggeredBy: request.triggeredBy, emitsRowChanges: true, reader, connectorStored, admit: admit(id) });
  // The rows of a stored connector carry its id (its delete removes them); those of a name no connector
  // has, a stable id of the name. A connector found stored whose delete commits before the run is
  // recorded (the trigger waits for it: ConnectorRunner.trigger) is gone: the rows are the name's.
  const triggered = storedId
    ? await trigger(storedId, true).catch((err: unknown) => {
        if (!(err instanceof NotFoundError)) throw err;
        return trigger(csvSourceId(tenantId, request.connector), false);
      })
    : await trigger(csvSourceId(tenantId, request.connector), false);
  const [run] = await triggered.done;
  return run!;
}

