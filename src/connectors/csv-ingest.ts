import { parse } from 'csv-parse/sync';
import type { Tx } from '../db/database.js';
import { csvSourceId, stableUuid } from './csv-source.js';
import { NotFoundError, ValidationError } from '../errors.js';
import { connectorLabel, csvBytesReadTotal, csvOpenTotal } from './metrics.js';
import type { ConnectorRunner, PageReader } from './runner.js';
import type { RunRecord } from './runs/ledger.js';
import { extTableName, promoteColumnName } from './target/ddl.js';
import type { ConnectorSpec, EndpointSpec, Page } from './types.js';

export interface CsvIngestRequest {
  connector: string;
  table: string;
  key: string;
  csv: string;
  triggeredBy: string;
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

export async function ingestCsv(
  runner: ConnectorRunner,
  tenantId: number,
  findConnectorId: (tx: Tx, name: string) => Promise<string | undefined>,
  withTenant: <T>(fn: (tx: Tx) => Promise<T>) => Promise<T>,
  request: CsvIngestRequest,
): Promise<RunRecord> {
  const table = request.table.startsWith('ext.') ? request.table : `ext.${request.table}`;
  if (!extTableName(table)) throw new ValidationError('table must be a lower-case identifier (letters, digits, underscores), optionally prefixed ext.', 'table');
  if (!/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/.test(request.connector)) throw new ValidationError('connector must be a lower-case name (letters, digits, dashes)', 'connector');
  let records: Array<Record<string, string>>;
  let header: string[];
  const file = { transport: 'upload', connector: connectorLabel(tenantId, request.connector) };
  csvBytesReadTotal().inc(file, Buffer.byteLength(request.csv));
  try {
    // The header record alone first (a quoted name may span lines): each name once, none empty.
    header = (parse(request.csv, { bom: true, to: 1, relax_column_count: true, record_delimiter: LINE_ENDS }) as string[][])[0] ?? [];
    const seen = new Set<string>();
    for (const name of header) {
      if (name.trim() === '') throw new ValidationError('the CSV header has an empty column name', 'body');
      if (seen.has(name)) throw new ValidationError(`the CSV header names column ${JSON.stringify(name)} twice: each column once`, 'body');
      seen.add(name);
    }
    records = parse(request.csv, { columns: true, skip_empty_lines: true, bom: true, relax_column_count: false, record_delimiter: LINE_ENDS }) as Array<Record<string, string>>;
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
  const reader: PageReader = {
    async *read(): AsyncIterable<Page> {
      const size = 1000;
      for (let i = 0; i < records.length; i += size) yield { number: i / size + 1, items: records.slice(i, i + size) };
    },
  };
  const trigger = (id: string, connectorStored: boolean) =>
    runner.trigger(tenantId, connectorOf(id), { triggeredBy: request.triggeredBy, emitsRowChanges: true, reader, connectorStored });
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

