/**
 * The ingest benchmark (issue 4 item 10, CONTRACTS.md section 8): the demo source with DEMO_ROWS rows
 * (default 200000) read through the offset and cursor dialects by the real connector engine and
 * runner of an in-process hub, beside two ceilings measured in the same run:
 *
 * - fetch: a plain undici `request()` loop that only fetches and JSON-parses the same pages;
 * - copy: a plain `COPY … FROM STDIN` of the same rows into a table of the same shape (same columns,
 *   same indexes) as the ext.* table the hub writes, in one stream and in two and three concurrent
 *   streams (as many connections, an equal share of the rows each: the hub writes up to three chunks
 *   at once); the ceiling of a round is the fastest of the three.
 *
 * Every table is made before its clock starts: the COPY's by the ceiling, the hub's by the same
 * ExtSchema.ensureTable the runner calls (timed apart as `tableSetupSeconds`), so the run finds it in
 * the catalog and sends no DDL. Every table is checked before anything is reported: count(*) and the
 * distinct keys equal DEMO_ROWS, every key one of the source's ids.
 *
 * A breakdown measures the hub's write path alone (prepareRow, then the writer's upsert chunks, as a
 * first load inserts them and as a run that met stored keys merges them) so
 * the gap to the ceilings can be read. After every run and COPY the GIN index's pending list is
 * merged and timed (the index work each leaves for later). Prints a table and writes
 * bench/results/ingest.json.
 * docs/performance.md explains every figure.
 *
 *   npm run bench:ingest                       # 200000 rows
 *   DEMO_ROWS=20000 npm run bench:ingest       # a quick look
 *
 * Each figure is measured in BENCH_ROUNDS rounds (default 3; a round = both hub runs, both fetch
 * loops, the COPY in one, two and three streams, each into fresh tables) and reported as the median,
 * ratios as the median of the per-round ratios: a 2-core machine shared with other work gives noisy
 * single figures.
 *
 * Other knobs: BENCH_CHUNK_SIZE (svc.connectors.chunk-size, default the hub's 1000),
 * BENCH_RATE_LIMIT (the manifests' default_rate_limit, default `1000000/s`: a bucket that starts
 * with more tokens than a run sends requests, so it never makes a run wait, as neither ceiling waits
 * on one; a connector without the field gets the hub's `100/s`; the results record the limit and
 * the shortest run it allows),
 * BENCH_CPU_PROFILE=<file> (a V8 .cpuprofile of this process during the first round's hub runs; the
 * SOAP run's in `<file without .cpuprofile>.soap.cpuprofile`).
 */
import { randomUUID } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { request } from 'undici';
import { type Hub, startHub } from '../cmd/compose.js';
import { type PreparedRow, prepareRow } from '../src/connectors/target/rows.js';
import { dataIndexName, extTableName, tenantSchema, tenantTableSql } from '../src/connectors/target/ddl.js';
import { upsertChunk, type WriteOptions } from '../src/connectors/target/writer.js';
import type { Target } from '../src/connectors/types.js';
import { RATE_LIMIT_PATTERN } from '../src/connectors/manifest/schema.js';
import { parseRateLimit } from '../src/connectors/manifest/validate.js';
import { startEmbedded } from '../src/db/embedded.js';
import { generatePartners, type Partner } from '../src/demo-source/data.js';
import { createLogger, setLogger } from '../src/observability/logger.js';
import { type CopyFigures, type CopyStreams, copyCeilingInProcess } from './support/copy-ceiling.js';
import { CpuMeter, type CpuSplit, type DemoSourceProcess, machineFacts, probeMachine, mib, perSecond, postmasterPid, profiled, RssSampler, round, startDemoSourceProcess, table } from './support/measure.js';
import { benchConfig } from './support/hub-config.js';
import { formatWaits, startWaitSampler } from './support/wait-sampler.js';

const ROWS = positiveInt('DEMO_ROWS', 200_000);
const CHUNK = positiveInt('BENCH_CHUNK_SIZE', 1000);
const ROUNDS = positiveInt('BENCH_ROUNDS', 3);
/**
 * The manifests' default_rate_limit. The bench's default is far above anything a run sends (a run
 * of 200,000 rows is 400 requests; the bucket starts with 1,000,000 tokens), so the token bucket
 * never paces the hub's runs: the ceilings are not paced either.
 */
const RATE_LIMIT = process.env.BENCH_RATE_LIMIT || '1000000/s';
if (!new RegExp(RATE_LIMIT_PATTERN).test(RATE_LIMIT)) throw new Error(`BENCH_RATE_LIMIT must be count/window as a manifest's default_rate_limit (100/s, 100/5m, 1000/h), got '${RATE_LIMIT}'`);
const CPU_PROFILE = process.env.BENCH_CPU_PROFILE || undefined;
/** `BENCH_WAITS=1`: each hub run's backend states sampled and logged (bench/support/wait-sampler.ts); a diagnosis, a load of its own. */
const WAITS = process.env.BENCH_WAITS === '1';
/** The embedded PostgreSQL's URL (the owner's), once started. */
let databaseUrl = '';
/** The demo source's largest page; the hub and the fetch ceiling both ask for it. */
const PAGE = 500;
const TENANT = 1;
const BASIC = `Basic ${Buffer.from('demo:demo-password').toString('base64')}`;
const BEARER = 'Bearer demo-bearer-token';
const PROMOTE: Target['promote'] = [
  { name: 'name', path: '$.name', type: 'text' },
  { name: 'credit_limit', path: '$.credit_limit', type: 'bigint' },
  { name: 'updated_at', path: '$.updated_at', type: 'timestamptz', transform: 'parse_iso8601' },
];
const RESULTS = fileURLToPath(new URL('./results/', import.meta.url));

type Dialect = 'offset' | 'cursor';

interface HubFigures {
  status: string;
  recordsOut: number;
  chunkCount: number;
  /** endedAt − startedAt of the run record. */
  seconds: number;
  /** Trigger to terminal status as the client saw it (includes polling granularity). */
  wallSeconds: number;
  /** The target table made before the clock started (ExtSchema.ensureTable: DDL, indexes, row-level security), timed apart. */
  tableSetupSeconds: number;
  rowsPerSec: number;
  peakRssMb: number;
  /** CPU seconds per process during the run. */
  cpu: CpuSplit;
  /** What the target table holds after the run, counted by the bench (checked against the rows the source served). */
  stored?: StoredRows;
  /** The GIN pending list the run left, merged by the bench after the run (gin_clean_pending_list). */
  merge?: MergeFigures;
}

/** One `gin_clean_pending_list()` of a table's `data` index: the part of the index work left for later. */
interface MergeFigures {
  seconds: number;
  cpu: CpuSplit;
}

interface StoredRows {
  rows: number;
  distinctKeys: number;
  /** Stored keys that are not an id the source served (1 … DEMO_ROWS). */
  foreignKeys: number;
}

interface FetchFigures {
  rows: number;
  pages: number;
  seconds: number;
  rowsPerSec: number;
  cpu?: CpuSplit;
}

function positiveInt(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  if (!/^\d+$/.test(raw.trim()) || Number(raw) < 1) throw new Error(`${name} must be a positive integer, got '${raw}'`);
  return Number(raw);
}

const log = (line: string) => process.stdout.write(`${line}\n`);
const seconds = (ms: number) => round(ms / 1000, 2);

// ---------------------------------------------------------------------------------------------
// The hub: manifests applied over HTTP, one run per dialect, polled to its terminal status.

function manifests(sourceUrl: string, round: number): Record<Dialect, unknown> {
  const target = (table: string) => ({ kind: 'hybrid', table, unique_key: '$.id', promote: PROMOTE });
  const spec = (auth: unknown, endpoint: unknown) => ({
    base_url: sourceUrl,
    auth,
    default_rate_limit: RATE_LIMIT,
    endpoints: [endpoint],
  });
  const connector = (name: string, body: unknown) => ({ apiVersion: 'connectors.svc.io/v1', kind: 'Connector', metadata: { name }, connector_type: 'rest-generic', scopes: ['partners'], spec: body });
  return {
    offset: connector(
      `bench-offset-${round}`,
      spec(
        { kind: 'basic', username: 'demo', password_env: 'BENCH_DEMO_PASSWORD' },
        {
          id: 'partners',
          path: '/offset/partners',
          pagination: { kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit: PAGE, response_path: '$.data', total_path: '$.total' },
          target: target(`ext.bench_offset_${round}`),
        },
      ),
    ),
    cursor: connector(
      `bench-cursor-${round}`,
      spec(
        { kind: 'bearer', token_env: 'BENCH_DEMO_TOKEN' },
        { id: 'partners', path: `/v1/partners?limit=${PAGE}`, pagination: { kind: 'stripe' }, target: target(`ext.bench_cursor_${round}`) },
      ),
    ),
  };
}

async function api<T>(hub: Hub, method: string, path: string, body?: unknown): Promise<{ status: number; json: T }> {
  const res = await request(`${hub.url}${path}`, {
    method: method as 'GET' | 'POST',
    headers: { 'X-Tenant-ID': String(TENANT), 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.body.text();
  return { status: res.statusCode, json: (text ? JSON.parse(text) : undefined) as T };
}

/**
 * One run, timed from its trigger to its terminal status. Its target table is made first, outside
 * the clock, by the function the runner calls at a run's start (as the COPY ceiling makes its table
 * before its clock): the run then finds the table in the catalog and sends no DDL.
 */
async function hubRun(hub: Hub, owner: pg.Client, name: string, table: string, meter: CpuMeter): Promise<HubFigures> {
  const ddl0 = performance.now();
  await hub.services.connectors.ext.ensureTable(TENANT, table, PROMOTE);
  const tableSetupMs = performance.now() - ddl0;
  await owner.query('checkpoint');
  const sampler = new RssSampler();
  sampler.start(50);
  meter.start();
  const waits = WAITS ? startWaitSampler(databaseUrl) : undefined;
  const t0 = performance.now();
  const started = await api<{ runs: Array<{ id: string }> }>(hub, 'POST', `/api/connectors/${name}/runs`, {});
  if (started.status !== 202) throw new Error(`POST /api/connectors/${name}/runs answered ${started.status}: ${JSON.stringify(started.json)}`);
  const id = started.json.runs[0]!.id;
  type Run = { status: string; startedAt: string; endedAt: string; recordsOut: number; chunkCount: number; errorMessage: string | null };
  let run: Run;
  for (;;) {
    run = (await api<Run>(hub, 'GET', `/api/platform/runs/${id}`)).json;
    if (run.status !== 'Running') break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const wall = performance.now() - t0;
  const cpu = meter.stop();
  if (waits) log(formatWaits(`the run ${name}`, await waits.stop()));
  const peakRssMb = sampler.stop();
  if (run.status !== 'Completed') throw new Error(`run ${name} ended ${run.status}: ${run.errorMessage}`);
  const ms = Date.parse(run.endedAt) - Date.parse(run.startedAt);
  return {
    status: run.status,
    recordsOut: run.recordsOut,
    chunkCount: run.chunkCount,
    seconds: seconds(ms),
    wallSeconds: seconds(wall),
    tableSetupSeconds: round(tableSetupMs / 1000, 3),
    rowsPerSec: perSecond(run.recordsOut, ms),
    peakRssMb,
    cpu,
  };
}

/**
 * Counts the rows the run left in its table, read as the tenant reads its ext.* tables (the
 * application role, row-level security on), and fails loudly unless they are exactly the rows the
 * source served: `count(*)` and the distinct keys both equal DEMO_ROWS, every key one of its ids.
 */
/** The offset run on the hub without the retrieval hand-off (`bare`), into its own table: what indexing costs ingestion. */
async function unindexedRun(bare: Hub, owner: pg.Client, offset: unknown, r: number, meter: CpuMeter): Promise<HubFigures> {
  log(`round ${r}/${ROUNDS}: hub run (offset) without the retrieval hand-off …`);
  const name = `bench-offset-unindexed-${r}`;
  const manifest = structuredClone(offset) as { metadata: { name: string }; spec: { endpoints: Array<{ target: { table: string } }> } };
  manifest.metadata.name = name;
  manifest.spec.endpoints[0]!.target.table = `ext.bench_unindexed_${r}`;
  const applied = await api(bare, 'POST', '/api/connectors/apply', manifest);
  if (applied.status !== 201) throw new Error(`apply ${name} answered ${applied.status}: ${JSON.stringify(applied.json)}`);
  const figures = await hubRun(bare, owner, name, `ext.bench_unindexed_${r}`, meter);
  if (figures.recordsOut !== ROWS) throw new Error(`the unindexed run wrote ${figures.recordsOut} rows, expected ${ROWS}`);
  await settle(bare, owner, `ext.bench_unindexed_${r}`, figures, meter);
  return figures;
}

/**
 * The same rows through `soap-generic` from the demo source's SOAP 1.1 service (siebel: 500-row
 * pages, a LastPage flag), the same promoted columns, into its own table: SOAP against REST.
 */
async function soapRun(hub: Hub, owner: pg.Client, sourceUrl: string, r: number, meter: CpuMeter): Promise<HubFigures> {
  log(`round ${r}/${ROUNDS}: hub run (soap) …`);
  const name = `bench-soap-${r}`;
  const table = `ext.bench_soap_${r}`;
  const manifest = {
    apiVersion: 'connectors.svc.io/v1',
    kind: 'Connector',
    metadata: { name },
    connector_type: 'soap-generic',
    scopes: ['partners'],
    spec: {
      base_url: sourceUrl,
      auth: { kind: 'basic', username: 'demo', password_env: 'BENCH_DEMO_PASSWORD' },
      default_rate_limit: RATE_LIMIT,
      endpoints: [
        {
          id: 'partners',
          path: '/siebel/start.swe',
          soap: {
            version: '1.1',
            action: 'QueryPartners',
            body: '<ns:QueryPartners xmlns:ns="urn:demo:siebel:partners"><ns:PageSize>{{page_size}}</ns:PageSize><ns:StartRowNum>{{start_row}}</ns:StartRowNum></ns:QueryPartners>',
            records: 'Partner',
            stop: { flag: 'LastPage', when: 'true' },
          },
          pagination: { kind: 'soap', page_size: PAGE, start_row: 0 },
          target: { kind: 'hybrid', table, unique_key: 'id', promote: PROMOTE.map((p) => ({ ...p, path: p.path.replace(/^\$\./, '') })) },
        },
      ],
    },
  };
  const applied = await api(hub, 'POST', '/api/connectors/apply', manifest);
  if (applied.status !== 201) throw new Error(`apply ${name} answered ${applied.status}: ${JSON.stringify(applied.json)}`);
  const figures = await hubRun(hub, owner, name, table, meter);
  if (figures.recordsOut !== ROWS) throw new Error(`the soap run wrote ${figures.recordsOut} rows, expected ${ROWS}`);
  await settle(hub, owner, table, figures, meter);
  return figures;
}

/**
 * After a run: the table's rows counted (the run record's counter is the hub's own word), the GIN
 * pending list the run left merged and timed, then the table dropped so the database does not grow
 * round after round (every round writes into fresh tables).
 */
async function settle(hub: Hub, owner: pg.Client, table: string, figures: HubFigures, meter: CpuMeter): Promise<void> {
  figures.stored = await storedRows(hub, table);
  figures.merge = await mergePendingList(owner, `${tenantSchema(TENANT)}.${dataIndexName(extTableName(table)!)}`, meter);
  await owner.query(`drop table ${tenantTableSql(TENANT, table)}`);
}

/**
 * Merges a GIN index's pending list into the index now (what the insert crossing the list's limit,
 * autovacuum or a vacuum would do later) and times it: the index work a run or a COPY deferred.
 */
async function mergePendingList(owner: pg.Client, index: string, meter: CpuMeter): Promise<MergeFigures> {
  meter.start();
  const t0 = performance.now();
  await owner.query('select gin_clean_pending_list($1::regclass)', [index]);
  const ms = performance.now() - t0;
  return { seconds: round(ms / 1000, 2), cpu: meter.stop() };
}

/** Rows handed to the retrieval indexer by the indexed runs and by the run without the hand-off. */
async function pendingRows(owner: pg.Client): Promise<{ indexed: number; unindexed: number }> {
  const { rows } = await owner.query<{ unindexed: boolean; n: number }>(
    `select corpus like 'bench-offset-unindexed-%' as unindexed, coalesce(sum(cardinality(row_hashes)), 0)::int as n from retrieval.pending group by 1`,
  );
  return { indexed: rows.find((r) => !r.unindexed)?.n ?? 0, unindexed: rows.find((r) => r.unindexed)?.n ?? 0 };
}

async function storedRows(hub: Hub, table: string): Promise<StoredRows> {
  const { rows } = await hub.services.db.withTenant(TENANT, (tx) =>
    tx.query<{ n: number; k: number; foreign: number }>(
      `select count(*)::int as n, count(distinct external_id)::int as k,
              count(*) filter (where external_id !~ '^[1-9][0-9]*$' or external_id::numeric > $1)::int as foreign
         from ${tenantTableSql(TENANT, table)}`,
      [ROWS],
    ),
  );
  const stored = { rows: rows[0]!.n, distinctKeys: rows[0]!.k, foreignKeys: rows[0]!.foreign };
  if (stored.rows !== ROWS || stored.distinctKeys !== ROWS || stored.foreignKeys !== 0) {
    throw new Error(
      `${table} holds ${stored.rows} rows with ${stored.distinctKeys} distinct keys (${stored.foreignKeys} not served by the source); the source served ${ROWS} rows with ${ROWS} distinct keys`,
    );
  }
  return stored;
}

// ---------------------------------------------------------------------------------------------
// Ceiling A: fetch and JSON-parse the same pages, nothing else.

async function getJson<T>(url: string, authorization: string): Promise<T> {
  const res = await request(url, { headers: { authorization } });
  if (res.statusCode !== 200) throw new Error(`GET ${url} answered ${res.statusCode}: ${await res.body.text()}`);
  return (await res.body.json()) as T;
}

async function fetchOffset(sourceUrl: string, maxPages = Number.POSITIVE_INFINITY): Promise<FetchFigures> {
  const t0 = performance.now();
  let offset = 0;
  let pages = 0;
  let rows = 0;
  while (pages < maxPages) {
    const body = await getJson<{ data: Partner[]; total: number }>(`${sourceUrl}/offset/partners?offset=${offset}&limit=${PAGE}`, BASIC);
    pages += 1;
    rows += body.data.length;
    offset += body.data.length;
    if (body.data.length === 0 || offset >= body.total) break;
  }
  const ms = performance.now() - t0;
  return { rows, pages, seconds: seconds(ms), rowsPerSec: perSecond(rows, ms) };
}

async function fetchCursor(sourceUrl: string, maxPages = Number.POSITIVE_INFINITY): Promise<FetchFigures> {
  const t0 = performance.now();
  let after: number | undefined;
  let pages = 0;
  let rows = 0;
  while (pages < maxPages) {
    const query = after === undefined ? '' : `&starting_after=${after}`;
    const body = await getJson<{ data: Partner[]; has_more: boolean }>(`${sourceUrl}/v1/partners?limit=${PAGE}${query}`, BEARER);
    pages += 1;
    rows += body.data.length;
    if (!body.has_more || body.data.length === 0) break;
    after = body.data[body.data.length - 1]!.id;
  }
  const ms = performance.now() - t0;
  return { rows, pages, seconds: seconds(ms), rowsPerSec: perSecond(rows, ms) };
}

// ---------------------------------------------------------------------------------------------
// Ceiling B: COPY the same rows into a same-shape table, in a child process (bench/support/copy-ceiling.ts),
// in one stream and in two and three concurrent streams; the round's ceiling is the fastest.

/** The forms of the COPY ceiling, by streams. */
const COPY_FORMS = [1, 2, 3] as const satisfies readonly CopyStreams[];
const STREAMS_NAME: Record<CopyStreams, string> = { 1: 'one stream', 2: 'two streams', 3: 'three streams' };

/**
 * A round's COPY ceiling: the fastest of the forms by rows/s; with the merge, the shortest of the
 * forms' COPY + pending-list merge. Every form stays in the results.
 */
function copyCeilingOf(forms: readonly CopyRound[]): { copy: CopyRound; copyWithMergeSeconds: number } {
  return {
    copy: forms.reduce((best, form) => (form.rowsPerSec > best.rowsPerSec ? form : best)),
    copyWithMergeSeconds: Math.min(...forms.map((form) => form.seconds + form.merge!.seconds)),
  };
}

async function copyRound(owner: pg.Client, ownerUrl: string, name: string, gin: boolean, streams: CopyStreams, meter: CpuMeter): Promise<CopyRound> {
  meter.start();
  const figures = await copyCeilingInProcess({ ownerUrl, rows: ROWS, table: name, gin, streams });
  const around = meter.stop();
  const merge = gin ? await mergePendingList(owner, `bench.${dataIndexName(name)}`, meter) : undefined;
  // The next round creates it again; dropping it keeps the database from growing round after round.
  await owner.query(`drop table bench.${name}`);
  // The client is the COPY process, not this one (which only waited).
  return { ...figures, cpu: { ...around, benchProcess: figures.clientCpuSeconds }, merge };
}

// ---------------------------------------------------------------------------------------------
// Breakdown: the hub's write path alone, on rows already fetched (same functions the runner calls).

async function writePath(hub: Hub, owner: pg.Client, rows: readonly Partner[], meter: CpuMeter) {
  const target: Target = { kind: 'hybrid', table: 'ext.bench_write_path', unique_key: '$.id', promote: PROMOTE };
  const t0 = performance.now();
  const prepared: PreparedRow[] = rows.map((item) => prepareRow(item, target));
  const prepareMs = performance.now() - t0;

  // Into a fresh table the runner inserts (a first load: `expectNew`); the merge is what it does
  // once a run meets stored keys. Both are measured into fresh tables of the same shape, one after
  // the other, and each table's rows are counted.
  const ids = { tenantId: TENANT, connectorId: randomUUID(), endpointUuid: randomUUID() };
  const timed = async (table: string, options: WriteOptions) => {
    const into: Target = { ...target, table };
    await hub.services.connectors.ext.ensureTable(TENANT, into.table, into.promote);
    await owner.query('checkpoint');
    meter.start();
    const t1 = performance.now();
    for (let i = 0; i < prepared.length; i += CHUNK) {
      const chunk = prepared.slice(i, i + CHUNK);
      await hub.services.db.withTenant(TENANT, (tx) => upsertChunk(tx, into, chunk, ids, options));
    }
    const ms = performance.now() - t1;
    const cpu = meter.stop();
    const { rows: counted } = await owner.query<{ n: number }>(`select count(distinct external_id)::int as n from ${tenantTableSql(TENANT, into.table)}`);
    if (counted[0]!.n !== rows.length) throw new Error(`${into.table} holds ${counted[0]!.n} distinct keys after the write path, expected ${rows.length}`);
    await owner.query(`drop table ${tenantTableSql(TENANT, into.table)}`);
    return { ms, cpu };
  };
  const insert = await timed('ext.bench_write_path', { expectNew: true });
  const merge = await timed('ext.bench_write_path_merge', {});
  return {
    prepareRowsPerSec: perSecond(rows.length, prepareMs),
    prepareSeconds: seconds(prepareMs),
    upsertRowsPerSec: perSecond(rows.length, insert.ms),
    upsertSeconds: seconds(insert.ms),
    upsertCpu: insert.cpu,
    mergeRowsPerSec: perSecond(rows.length, merge.ms),
    mergeSeconds: seconds(merge.ms),
    mergeCpu: merge.cpu,
  };
}

// ---------------------------------------------------------------------------------------------

/**
 * The token bucket a run's requests pass (src/connectors/rate-limit.ts: `count` tokens, full at
 * the start, refilled at `count` per window): the run's requests (one per page, the SOAP run's too)
 * cannot all have been sent before (requests − count) × window / count, the shortest run it allows.
 */
function rateLimitFacts(pages: number) {
  const limit = parseRateLimit(RATE_LIMIT);
  const minimumRunSeconds = round((Math.max(0, pages - limit.count) * limit.windowMs) / limit.count / 1000, 3);
  return {
    limit: RATE_LIMIT,
    setBy: process.env.BENCH_RATE_LIMIT ? 'BENCH_RATE_LIMIT' : 'bench default',
    note: "a connector whose manifest has no default_rate_limit keeps the hub's 100/s",
    bucketTokens: limit.count,
    refillPerSecond: round((limit.count * 1000) / limit.windowMs, 3),
    requestsPerRun: pages,
    /** 0: the bucket holds every request of a run from the start and never makes one wait. */
    minimumRunSeconds,
    binds: minimumRunSeconds > 0,
  };
}

/** Rows/s of stages run one after the other (no overlap): 1 / Σ (1 / rate). */
const serial = (...rates: number[]) => Math.round(1 / rates.reduce((sum, r) => sum + 1 / r, 0));

const DIALECTS = ['offset', 'cursor'] as const;

interface Round {
  hub: Record<Dialect, HubFigures>;
  /** The offset run on the hub without the retrieval hand-off. */
  unindexed: HubFigures;
  /** The same rows read from the demo source's SOAP 1.1 service (`soap-generic`). */
  soap: HubFigures;
  fetch: Record<Dialect, FetchFigures>;
  /** The round's COPY ceiling: the fastest of `copyOne`, `copyTwo` and `copyThree`. */
  copy: CopyRound;
  /** The shortest of the forms' COPY + GIN pending-list merge: the ceiling of the ratios "with the merge". */
  copyWithMergeSeconds: number;
  /** One COPY on one connection. */
  copyOne: CopyRound;
  /** Two concurrent COPYs on two connections, half the rows each. */
  copyTwo: CopyRound;
  /** Three concurrent COPYs on three connections, a third of the rows each. */
  copyThree: CopyRound;
  /** RSS of this process before the round's hub runs. */
  baselineRssMb: number;
}

type CopyRound = CopyFigures & { cpu: CpuSplit; merge: MergeFigures | undefined };

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

function meanCpu(splits: CpuSplit[]): CpuSplit {
  const mean = (pick: (c: CpuSplit) => number | null) => {
    const values = splits.map(pick);
    return values.some((v) => v === null) ? null : round(values.reduce<number>((sum, v) => sum + v!, 0) / values.length, 2);
  };
  return { benchProcess: mean((c) => c.benchProcess)!, demoSource: mean((c) => c.demoSource), postgres: mean((c) => c.postgres) };
}

async function main(): Promise<void> {
  const benchStart = performance.now();
  setLogger(createLogger({ level: 'warn', json: true }));
  process.env.BENCH_DEMO_PASSWORD = 'demo-password';
  process.env.BENCH_DEMO_TOKEN = 'demo-bearer-token';
  log(`ingest benchmark: ${ROWS.toLocaleString('en-US')} rows, page size ${PAGE}, chunk size ${CHUNK}, ${process.version}, ${cpus().length} CPUs`);
  const loadAtStart = loadavg().map((l) => round(l, 2));
  if (loadAtStart[0]! > 1) log(`note: load average ${loadAtStart.join(' ')} before the start: something else is busy here, absolute figures will be low (ratios suffer less)`);
  await probeMachine(log);
  const rateLimit = rateLimitFacts(Math.ceil(ROWS / PAGE));
  log(
    `rate limit ${rateLimit.limit} (${rateLimit.setBy}): ${rateLimit.requestsPerRun} requests per run, no run shorter than ${rateLimit.minimumRunSeconds} s${rateLimit.binds ? ' — it paces the hub runs, which the ceilings are not' : ''}`,
  );

  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-ingest-'));
  chmodSync(dir, 0o755);
  let database: Awaited<ReturnType<typeof startEmbedded>> | undefined;
  let source: DemoSourceProcess | undefined;
  let hub: Hub | undefined;
  /** The same hub without the retrieval hand-off (`svc.retrieval.index-rows: false`), for the indexing cost. */
  let bare: Hub | undefined;
  let owner: pg.Client | undefined;
  try {
    database = await startEmbedded({ dataDir: join(dir, 'pg-data'), database: 'svc' });
    databaseUrl = database.url;
    source = await startDemoSourceProcess(ROWS);
    const config = benchConfig(database.url, dir, { 'svc.connectors.chunk-size': CHUNK, 'svc.credentials.env-allow': 'BENCH_DEMO_*' });
    hub = await startHub(config, { api: true, background: false });
    bare = await startHub(benchConfig(database.url, dir, { 'svc.connectors.chunk-size': CHUNK, 'svc.credentials.env-allow': 'BENCH_DEMO_*', 'svc.retrieval.index-rows': false, 'svc.migrate.on-start': false }), {
      api: true,
      background: false,
    });
    owner = new pg.Client({ connectionString: database.url });
    await owner.connect();
    const ready = performance.now();
    log(`set up in ${seconds(ready - benchStart)} s (embedded PostgreSQL, demo source pid ${source.pid} at ${source.url}, hub at ${hub.url})`);

    // A short warm-up of the HTTP path, so neither side pays for the first connections and JIT alone.
    await fetchOffset(source.url, 10);
    await fetchCursor(source.url, 10);

    const meter = new CpuMeter({ demoSource: source.pid, postgres: postmasterPid(join(dir, 'pg-data', 'pg')) });
    const rounds: Round[] = [];
    for (let r = 1; r <= ROUNDS; r++) {
      const baselineRssMb = mib(process.memoryUsage().rss);
      const defs = manifests(source.url, r);
      for (const dialect of DIALECTS) {
        const applied = await api(hub, 'POST', '/api/connectors/apply', defs[dialect]);
        if (applied.status !== 200 && applied.status !== 201) throw new Error(`apply ${dialect} answered ${applied.status}: ${JSON.stringify(applied.json)}`);
      }
      const profileFile = r === 1 ? CPU_PROFILE : undefined;
      const hubFigures = {} as Record<Dialect, HubFigures>;
      // Alternating order (before the indexed runs in odd rounds, after them in even ones), so that
      // warming up does not favour either side of the indexing ratio.
      let unindexed = await profiled(profileFile, "the round's hub runs", async () => {
        const before = r % 2 === 1 ? await unindexedRun(bare!, owner!, defs.offset, r, meter) : undefined;
        for (const dialect of DIALECTS) {
          log(`round ${r}/${ROUNDS}: hub run (${dialect}) …`);
          hubFigures[dialect] = await hubRun(hub!, owner!, `bench-${dialect}-${r}`, `ext.bench_${dialect}_${r}`, meter);
          if (hubFigures[dialect].recordsOut !== ROWS) throw new Error(`the ${dialect} run wrote ${hubFigures[dialect].recordsOut} rows, expected ${ROWS}`);
          await settle(hub!, owner!, `ext.bench_${dialect}_${r}`, hubFigures[dialect], meter);
        }
        return before;
      });

      unindexed ??= await unindexedRun(bare, owner, defs.offset, r, meter);
      // The hand-off is checked, not assumed: the indexed run left pending entries for all its rows, the other none.
      const handedOff = await pendingRows(owner);
      if (handedOff.indexed !== ROWS * DIALECTS.length) throw new Error(`the indexed runs handed ${handedOff.indexed} rows to the indexer, expected ${ROWS * DIALECTS.length}`);
      if (handedOff.unindexed !== 0) throw new Error(`the run without the hand-off handed ${handedOff.unindexed} rows to the indexer`);
      await owner.query('truncate retrieval.pending');

      const soap = await profiled(profileFile?.replace(/(\.cpuprofile)?$/, '.soap.cpuprofile'), "the round's soap run", () => soapRun(hub!, owner!, source!.url, r, meter));
      await owner.query('truncate retrieval.pending');

      log(`round ${r}/${ROUNDS}: fetch ceiling …`);
      const fetchFigures = {} as Record<Dialect, FetchFigures>;
      meter.start();
      fetchFigures.offset = { ...(await fetchOffset(source.url)), cpu: meter.stop() };
      meter.start();
      fetchFigures.cursor = { ...(await fetchCursor(source.url)), cpu: meter.stop() };
      for (const dialect of DIALECTS) {
        if (fetchFigures[dialect].rows !== ROWS) throw new Error(`the ${dialect} fetch ceiling read ${fetchFigures[dialect].rows} rows, expected ${ROWS}`);
      }

      // Alternating order (one stream first in odd rounds, three streams first in even ones), so warming up favours none.
      const copies = {} as Record<CopyStreams, CopyRound>;
      for (const streams of r % 2 === 1 ? COPY_FORMS : [...COPY_FORMS].reverse()) {
        log(`round ${r}/${ROUNDS}: copy ceiling, ${STREAMS_NAME[streams]} …`);
        copies[streams] = await copyRound(owner, database.url, `copy_partners_${streams}`, true, streams, meter);
      }
      const ceiling = copyCeilingOf(COPY_FORMS.map((streams) => copies[streams]));
      rounds.push({ hub: hubFigures, unindexed, soap, fetch: fetchFigures, ...ceiling, copyOne: copies[1], copyTwo: copies[2], copyThree: copies[3], baselineRssMb });
    }
    const maxRssMb = mib(process.resourceUsage().maxRSS * 1024);

    log('write path alone …');
    const copyNoGin = await copyRound(owner, database.url, 'copy_partners_no_gin', false, 1, meter);
    // The rows the source serves (same generator, same seed), held here only now that the runs are measured.
    const write = await writePath(hub, owner, generatePartners(ROWS), meter);

    const copyRowsPerSec = Math.round(median(rounds.map((r) => r.copy.rowsPerSec)));
    const figures = (d: Dialect) => {
      const rowsPerSec = Math.round(median(rounds.map((r) => r.hub[d].rowsPerSec)));
      const fetchRowsPerSec = Math.round(median(rounds.map((r) => r.fetch[d].rowsPerSec)));
      return {
        /** Median over the rounds of recordsOut / (endedAt − startedAt). */
        rowsPerSec,
        rowsPerSecRange: [Math.min(...rounds.map((r) => r.hub[d].rowsPerSec)), Math.max(...rounds.map((r) => r.hub[d].rowsPerSec))],
        seconds: round(median(rounds.map((r) => r.hub[d].seconds)), 2),
        pages: rounds[0]!.fetch[d].pages,
        chunks: rounds[0]!.hub[d].chunkCount,
        peakRssMb: Math.max(...rounds.map((r) => r.hub[d].peakRssMb)),
        ceilingFetchRowsPerSec: fetchRowsPerSec,
        /** Medians of the per-round ratios (each round's figure against the ceiling of the same round). */
        ratioToFetch: round(median(rounds.map((r) => r.hub[d].rowsPerSec / r.fetch[d].rowsPerSec)), 3),
        ratioToCopy: round(median(rounds.map((r) => r.hub[d].rowsPerSec / r.copy.rowsPerSec)), 3),
        /** Seconds of the GIN pending-list merge left after the run (median). */
        mergeSeconds: round(median(rounds.map((r) => r.hub[d].merge!.seconds)), 2),
        /** The same ratio with each side's deferred pending-list merge added to its time. */
        ratioToCopyWithMerge: round(median(rounds.map((r) => r.copyWithMergeSeconds / (r.hub[d].seconds + r.hub[d].merge!.seconds))), 3),
        /** Fetch then COPY, one after the other: what a loop that does not overlap them could reach. */
        serialCeilingRowsPerSec: serial(fetchRowsPerSec, copyRowsPerSec),
        ratioToSerialCeiling: round(median(rounds.map((r) => r.hub[d].rowsPerSec / serial(r.fetch[d].rowsPerSec, r.copy.rowsPerSec))), 3),
        /** Fetch, prepareRow and the writer's upsert measured apart, added up: where the hub's time goes. */
        stagesAddedUpRowsPerSec: serial(fetchRowsPerSec, write.prepareRowsPerSec, write.upsertRowsPerSec),
        /** Mean CPU seconds per process during one run. */
        cpuSeconds: meanCpu(rounds.map((r) => r.hub[d].cpu)),
        /** Making the run's table before its clock (DDL, indexes, row-level security), median seconds: not in `seconds`. */
        tableSetupSeconds: round(median(rounds.map((r) => r.hub[d].tableSetupSeconds)), 3),
      };
    };
    const dialects = { offset: figures('offset'), cursor: figures('cursor') };

    const peakRssMb = Math.max(dialects.offset.peakRssMb, dialects.cursor.peakRssMb);
    const soap = {
      note: 'soap-generic from the demo source\'s SOAP 1.1 service (siebel), same rows, page size and promoted columns as the REST runs',
      rowsPerSec: Math.round(median(rounds.map((r) => r.soap.rowsPerSec))),
      /** Median of the per-round ratios against the REST offset run of the same round. */
      ratioToRestOffset: round(median(rounds.map((r) => r.soap.rowsPerSec / r.hub.offset.rowsPerSec)), 3),
      ratioToCopy: round(median(rounds.map((r) => r.soap.rowsPerSec / r.copy.rowsPerSec)), 3),
      target: 0.8,
      /** Mean CPU seconds per process during one run. */
      cpuSeconds: meanCpu(rounds.map((r) => r.soap.cpu)),
    };
    const indexing = {
      note: 'the offset run with the retrieval hand-off (one retrieval.pending entry per written chunk, in the ingestion transaction) against the same run on a hub without it; chunks and vectors are made after commit by the indexer, which does not run here',
      withRowsPerSec: dialects.offset.rowsPerSec,
      withoutRowsPerSec: Math.round(median(rounds.map((r) => r.unindexed.rowsPerSec))),
      /** Median of the per-round ratios (with / without). */
      ratio: round(median(rounds.map((r) => r.hub.offset.rowsPerSec / r.unindexed.rowsPerSec)), 3),
      target: 0.9,
    };
    const result = {
      rows: ROWS,
      rounds: ROUNDS,
      pageSize: PAGE,
      chunkSize: CHUNK,
      /** The manifests' default_rate_limit and what it allows: minimumRunSeconds 0 means it never paced a run. */
      rateLimit,
      dialects,
      soap,
      indexing,
      /**
       * Every table was counted before this report: count(*) = count(distinct external_id) = rows, all
       * of them the source's ids (the hub's runs: offset, cursor, soap, without the hand-off; the
       * COPYs: one, two and three streams, without the GIN index).
       */
      verified: { storedRowsMatchSource: true, runsChecked: rounds.length * (DIALECTS.length + 2), copiesChecked: rounds.length * COPY_FORMS.length + 1 },
      /** Median over the rounds of each round's ceiling: the fastest of the one-, two- and three-stream COPY. */
      ceilingCopyRowsPerSec: copyRowsPerSec,
      ceilingCopy: {
        note: "the round's ceiling is the fastest of one COPY on one connection and two and three concurrent COPYs on as many connections (an equal share of the rows each, the same table, bytes and indexes); the hub writes up to three chunks at once",
        oneStreamRowsPerSec: Math.round(median(rounds.map((r) => r.copyOne.rowsPerSec))),
        twoStreamsRowsPerSec: Math.round(median(rounds.map((r) => r.copyTwo.rowsPerSec))),
        threeStreamsRowsPerSec: Math.round(median(rounds.map((r) => r.copyThree.rowsPerSec))),
        /** Which form was the ceiling, round by round. */
        fasterByRound: rounds.map((r) => STREAMS_NAME[r.copy.streams]),
        oneStreamCpuSeconds: meanCpu(rounds.map((r) => r.copyOne.cpu)),
        twoStreamsCpuSeconds: meanCpu(rounds.map((r) => r.copyTwo.cpu)),
        threeStreamsCpuSeconds: meanCpu(rounds.map((r) => r.copyThree.cpu)),
        oneStreamMergeSeconds: round(median(rounds.map((r) => r.copyOne.merge!.seconds)), 2),
        twoStreamsMergeSeconds: round(median(rounds.map((r) => r.copyTwo.merge!.seconds)), 2),
        threeStreamsMergeSeconds: round(median(rounds.map((r) => r.copyThree.merge!.seconds)), 2),
        /** Median of the rounds' ceiling with the merge: the shortest of the forms' COPY + merge. */
        withMergeRowsPerSec: Math.round(median(rounds.map((r) => ROWS / r.copyWithMergeSeconds))),
      },
      breakdown: {
        prepareRowRowsPerSec: write.prepareRowsPerSec,
        upsertChunksRowsPerSec: write.upsertRowsPerSec,
        upsertChunksCpuSeconds: write.upsertCpu,
        /** The same chunks merged (`on conflict … do update`, what a run does once it met a stored key) into a fresh table. */
        mergeChunksRowsPerSec: write.mergeRowsPerSec,
        mergeChunksCpuSeconds: write.mergeCpu,
        copyCpuSeconds: meanCpu(rounds.map((r) => r.copy.cpu)),
        /** One stream, once. */
        copyWithoutGinIndexRowsPerSec: copyNoGin.rowsPerSec,
        /** The GIN pending-list merge after the COPY (median seconds, mean CPU). */
        copyMergeSeconds: round(median(rounds.map((r) => r.copy.merge!.seconds)), 2),
        copyMergeCpuSeconds: meanCpu(rounds.map((r) => r.copy.merge!.cpu)),
        hubMergeCpuSeconds: { offset: meanCpu(rounds.map((r) => r.hub.offset.merge!.cpu)), cursor: meanCpu(rounds.map((r) => r.hub.cursor.merge!.cpu)) },
      },
      peakRssMb,
      rss: {
        note: 'the hub runs in-process: RSS is the benchmark process (hub + harness); the demo source runs in a child process and PostgreSQL in its own',
        baselineMb: round(median(rounds.map((r) => r.baselineRssMb)), 1),
        peakDuringRunsMb: peakRssMb,
        maxRssBeforeBreakdownMb: maxRssMb,
      },
      perRound: rounds.map((r) => ({
        /** The round's four hub runs: the two REST dialects, the SOAP run and the offset run without the retrieval hand-off. */
        hubRowsPerSec: { offset: r.hub.offset.rowsPerSec, cursor: r.hub.cursor.rowsPerSec, soap: r.soap.rowsPerSec, unindexed: r.unindexed.rowsPerSec },
        /** The round's own ratios whose medians are `soap.ratioToRestOffset` and `indexing.ratio`. */
        soapToRestOffset: round(r.soap.rowsPerSec / r.hub.offset.rowsPerSec, 3),
        withToWithoutHandOff: round(r.hub.offset.rowsPerSec / r.unindexed.rowsPerSec, 3),
        storedRows: { offset: r.hub.offset.stored, cursor: r.hub.cursor.stored },
        baselineRssMb: r.baselineRssMb,
        peakRssMb: { offset: r.hub.offset.peakRssMb, cursor: r.hub.cursor.peakRssMb },
        fetchRowsPerSec: { offset: r.fetch.offset.rowsPerSec, cursor: r.fetch.cursor.rowsPerSec },
        copyRowsPerSec: r.copy.rowsPerSec,
        copyOneStreamRowsPerSec: r.copyOne.rowsPerSec,
        copyTwoStreamsRowsPerSec: r.copyTwo.rowsPerSec,
        copyThreeStreamsRowsPerSec: r.copyThree.rowsPerSec,
        copyStoredRows: { oneStream: r.copyOne.stored, twoStreams: r.copyTwo.stored, threeStreams: r.copyThree.stored },
        tableSetupSeconds: { offset: r.hub.offset.tableSetupSeconds, cursor: r.hub.cursor.tableSetupSeconds, soap: r.soap.tableSetupSeconds, unindexed: r.unindexed.tableSetupSeconds },
      })),
      ...machineFacts(benchStart, loadAtStart),
    };

    log('');
    log(`medians of ${ROUNDS} round${ROUNDS > 1 ? 's' : ''}; ratios are medians of each round's ratio`);
    log(
      table(
        ['dialect', 'hub rows/s', 'min–max', 'fetch ceiling', 'hub/fetch', 'copy ceiling', 'hub/copy', 'with merge', 'fetch→copy serial', 'hub/serial', 'run s', 'peak RSS MB'],
        DIALECTS.map((d) => {
          const x = dialects[d];
          return [
            d,
            x.rowsPerSec,
            x.rowsPerSecRange.map((n) => n.toLocaleString('en-US')).join('–'),
            x.ceilingFetchRowsPerSec,
            x.ratioToFetch.toFixed(3),
            copyRowsPerSec,
            x.ratioToCopy.toFixed(3),
            x.ratioToCopyWithMerge.toFixed(3),
            x.serialCeilingRowsPerSec,
            x.ratioToSerialCeiling.toFixed(3),
            x.seconds,
            x.peakRssMb,
          ];
        }),
      ),
    );
    log('');
    log(
      table(
        ['write path alone (same rows, once)', 'rows/s', 's'],
        [
          ['prepareRow (canonical JSON, sha256, promote)', write.prepareRowsPerSec, write.prepareSeconds],
          [`upsert chunks of ${CHUNK}, a first load (staged COPY, one insert)`, write.upsertRowsPerSec, write.upsertSeconds],
          [`upsert chunks of ${CHUNK}, merged (staged COPY, one merge)`, write.mergeRowsPerSec, write.mergeSeconds],
          ['COPY, same shape: the ceiling (median of the rounds)', copyRowsPerSec, round(median(rounds.map((r) => r.copy.seconds)), 2)],
          ['COPY, same shape, one stream', result.ceilingCopy.oneStreamRowsPerSec, round(median(rounds.map((r) => r.copyOne.seconds)), 2)],
          ['COPY, same shape, two concurrent streams', result.ceilingCopy.twoStreamsRowsPerSec, round(median(rounds.map((r) => r.copyTwo.seconds)), 2)],
          ['COPY, same shape, three concurrent streams', result.ceilingCopy.threeStreamsRowsPerSec, round(median(rounds.map((r) => r.copyThree.seconds)), 2)],
          ['COPY, same shape without the GIN index on data', copyNoGin.rowsPerSec, copyNoGin.seconds],
        ],
      ),
    );
    log('');
    const cpuRow = (stage: string, wall: number, c: CpuSplit | undefined) => [stage, wall.toFixed(2), c?.benchProcess.toFixed(2) ?? '-', c?.demoSource?.toFixed(2) ?? '-', c?.postgres?.toFixed(2) ?? '-'];
    const meanWall = (pick: (r: Round) => number) => rounds.reduce((sum, r) => sum + pick(r), 0) / rounds.length;
    log(
      table(
        ['where the CPU went (s, mean of the rounds)', 'wall', 'this process', 'demo source', 'PostgreSQL'],
        [
          cpuRow('hub run, offset', meanWall((r) => r.hub.offset.seconds), dialects.offset.cpuSeconds),
          cpuRow('hub run, cursor', meanWall((r) => r.hub.cursor.seconds), dialects.cursor.cpuSeconds),
          cpuRow('hub run, soap', meanWall((r) => r.soap.seconds), soap.cpuSeconds),
          cpuRow('fetch ceiling, offset', meanWall((r) => r.fetch.offset.seconds), meanCpu(rounds.map((r) => r.fetch.offset.cpu!))),
          cpuRow('fetch ceiling, cursor', meanWall((r) => r.fetch.cursor.seconds), meanCpu(rounds.map((r) => r.fetch.cursor.cpu!))),
          cpuRow('COPY ceiling, one stream', meanWall((r) => r.copyOne.seconds), result.ceilingCopy.oneStreamCpuSeconds),
          cpuRow('COPY ceiling, two streams', meanWall((r) => r.copyTwo.seconds), result.ceilingCopy.twoStreamsCpuSeconds),
          cpuRow('COPY ceiling, three streams', meanWall((r) => r.copyThree.seconds), result.ceilingCopy.threeStreamsCpuSeconds),
          cpuRow('pending-list merge after a hub run, offset', meanWall((r) => r.hub.offset.merge!.seconds), result.breakdown.hubMergeCpuSeconds.offset),
          cpuRow('pending-list merge after a hub run, cursor', meanWall((r) => r.hub.cursor.merge!.seconds), result.breakdown.hubMergeCpuSeconds.cursor),
          cpuRow('pending-list merge after the COPY', meanWall((r) => r.copy.merge!.seconds), result.breakdown.copyMergeCpuSeconds),
          cpuRow('upsert chunks alone, first load (once)', write.upsertSeconds, write.upsertCpu),
          cpuRow('upsert chunks alone, merged (once)', write.mergeSeconds, write.mergeCpu),
        ],
      ),
    );
    log('');
    log(`COPY ceiling by round: ${result.ceilingCopy.fasterByRound.join(', ')}; table made before each run's clock: ${dialects.offset.tableSetupSeconds} s (offset), ${dialects.cursor.tableSetupSeconds} s (cursor), median`);
    log(`peak RSS of this process (hub in-process, demo source in a child): ${peakRssMb} MB during the runs (baseline before a round's runs: ${result.rss.baselineMb} MB, median)`);

    mkdirSync(RESULTS, { recursive: true });
    writeFileSync(join(RESULTS, 'ingest.json'), `${JSON.stringify(result, null, 2)}\n`);
    log(`wrote bench/results/ingest.json (${result.benchSeconds} s in all)`);
  } finally {
    await bare?.stop();
    await owner?.end().catch(() => undefined);
    await hub?.stop().catch(() => undefined);
    await source?.close().catch(() => undefined);
    await database?.stop().catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
