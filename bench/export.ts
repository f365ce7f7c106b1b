/**
 * The export benchmark: snapshots of EXPORT_ROWS rows (default 1,000,000 and 10,000,000) exported
 * through the hub's real export path to SFTP (a real OpenSSH sshd on loopback, test/harness/sshd.ts)
 * and to S3 (the S3-compatible stand-in of test/harness/s3.ts, in a child process), beside a
 * ceiling measured in the same run on the same data and the same destination:
 *
 * - hub: an Entity over one ext table (created by the hub's ExtSchema, filled by the owner with
 *   `insert … select … from generate_series`) and one Export per run (six columns ordered by the
 *   key, header on, comma), applied over HTTP; a run started with `POST /api/exports/{name}/runs`
 *   and polled until it ends. rows/s = rows / (endedAt − startedAt) of the run record.
 * - ceiling: `COPY (the same snapshot query) TO STDOUT (format csv, force_quote *)` in a tenant
 *   transaction of the application role with the same snapshot settings, piped straight to the
 *   destination, in a process of its own (bench/support/export-ceiling-process.ts, with this
 *   process's node flags and environment): for SFTP ssh2-sftp-client's `put` of the COPY stream
 *   (same write-stream buffer and TCP_NODELAY as the hub's), for S3 the destination's requests on
 *   clients configured as its own (a HeadObject; 8 MiB parts, one uploading while the next is read,
 *   on one kept-alive connection, each body sent at once; a conditional CompleteMultipartUpload on a
 *   fresh connection) of the raw COPY stream. COPY is read through the hub's own COPY reader
 *   (src/db/copy-records.ts, without its CRLF). No CRLF, no digest, no header.
 *
 * Each run is verified before anything is reported: the receipt's rowCount equals the rows; the
 * file read back (SFTP: from the local directory the sshd serves, hashed by sha256sum; S3: GetObject
 * streamed into a SHA-256, in the stand-in's process) has the receipt's byte count and SHA-256; no
 * `.part` and no second file or object is left, no multipart upload open; the hub's file is the
 * ceiling's bytes plus one CR per record plus the header line. The ceiling's file has the bytes
 * its COPY produced and COPY reported every row.
 *
 * Each size runs in a fresh process of its own, one after the other: this file, started once, probes
 * the machine, starts itself again per size (EXPORT_ONE_SIZE, EXPORT_ONE_SIZE_RESULTS; with the hub's
 * node flag and allocator setting, as bench/run.ts starts every bench), and merges what each size's
 * process wrote into bench/results/export.json. A size's process sets up its own embedded PostgreSQL,
 * hub, sshd, S3 stand-in and ceilings' process, runs the warm-up, then every round of its size: no
 * size's peaks start from what the sizes before left in the process, so the flatness target (the
 * largest size's peak ÷ the smallest's) compares the sizes more fairly. They need not start from the
 * same state of V8's heap all the same (its young generation grows while a process fills its table,
 * and shrinks later, at V8's choice): each run's RSS before, growth and young generation are recorded.
 *
 * The peak RSS and the CPU time of "the exporting process" are those of the size's process, which
 * runs the hub, for the hub's runs, and of the ceilings' process for the ceiling's (sshd, the S3 stand-in and
 * PostgreSQL run in processes of their own, measured apart): RSS sampled every 50 ms during each
 * run, and the kernel's VmHWM, reset before each run (`/proc/self/clear_refs`). Nothing the
 * ceiling's run leaves resident counts in the hub's process. Each run also records the RSS before it
 * (after a full GC) and its growth (peak − before): the peak mostly follows what the process held
 * before the run, the growth is what the export itself added.
 *
 * The ratio of a size and destination is the median of the rounds' ratios (each round's hub rows/s
 * ÷ the same round's ceiling rows/s; with two rounds, their mean), as bench/ingest.ts reports its
 * ratios; the target's verdict is judged on it. The rows/s figures beside it are the faster run of
 * each side.
 *
 *   npm run bench:export                              # 1 M and 10 M rows, both destinations, 2 rounds
 *   EXPORT_ROWS=100000 npm run bench:export           # a quick look
 *
 * Knobs: EXPORT_ROWS (comma-separated sizes), EXPORT_ROUNDS (default 2: every configuration runs
 * that many times; the faster run and the median of the rounds' ratios are reported), EXPORT_DESTINATIONS (`sftp,s3`),
 * BENCH_CPU_PROFILE=<file> (V8 .cpuprofile files of the exporting processes for the first round of
 * the first size: `<file>-<destination>-hub.cpuprofile` and `…-ceiling.cpuprofile`).
 */
import { execFile, spawn } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { dirname, join, posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';
import { request } from 'undici';
import { type Hub, startHub } from '../cmd/compose.js';
import type { Promote } from '../src/connectors/types.js';
import { startEmbedded } from '../src/db/embedded.js';
import { roleUrl } from '../src/db/roles.js';
import { entityRelation } from '../src/entities/relation.js';
import { loadEntity } from '../src/entities/store.js';
import { snapshotSql } from '../src/exports/csv/query.js';
import { encodeRecord } from '../src/exports/csv/writer.js';
import { createLogger, setLogger } from '../src/observability/logger.js';
import { startSshd, type TestSshd } from '../test/harness/sshd.js';
import { benchConfig } from './support/hub-config.js';
import { HUB_MALLOC_ENV, HUB_NODE_FLAGS } from './support/hub-flags.js';
import type { CeilingDestination, CeilingRequest, CeilingRun } from './support/export-ceiling-process.js';
import { collectGarbage, inThisProcess, machineFacts, mib, type ProcessRun, perSecond, postmasterPid, probeMachine, round, TreeCpuSampler, table, treeCpuSeconds } from './support/measure.js';
import type { S3Ready, S3Request, S3Stored } from './support/s3-process.js';
import { forkService, type ServiceProcess } from './support/service-process.js';

const SIZES = sizes('EXPORT_ROWS', [1_000_000, 10_000_000]);
const ROUNDS = positiveInt('EXPORT_ROUNDS', 2);
/** Rows of the unmeasured warm-up export through every path. */
const WARMUP_ROWS = 10_000;
const DESTINATIONS = destinationList('EXPORT_DESTINATIONS');
const CPU_PROFILE = process.env.BENCH_CPU_PROFILE || undefined;
const TENANT = 1;
/** The figures the hub is held to. */
const TARGETS = { ratio: 0.5, peakRssMb: 300, flatRatio: 1.1 };
/** The S3 destination's default part size (src/exports/destinations/s3.ts), which the ceiling uses too. */
const PART_SIZE = 8 * 1024 * 1024;
/** The SFTP destination's write-stream buffer (src/exports/destinations/sftp.ts), which the ceiling uses too. */
const SFTP_HIGH_WATER_MARK = 1024 * 1024;
const SFTP_USER = 'svc-sftp-bench';
const POLL_MS = 100;
const RESULTS = fileURLToPath(new URL('./results/', import.meta.url));
const CONNECTOR = '00000000-0000-0000-0000-0000000000c1';
const ENDPOINT = '00000000-0000-0000-0000-0000000000e1';

type Destination = 'sftp' | 's3';

/** The ext table's promoted columns (all typed), and what the entity and the export take from them. */
const PROMOTE: Promote[] = [
  { name: 'name', path: '$.name', type: 'text' },
  { name: 'city', path: '$.city', type: 'text' },
  { name: 'credit_limit', path: '$.credit_limit', type: 'bigint' },
  { name: 'balance', path: '$.balance', type: 'numeric' },
  { name: 'updated_at', path: '$.updated_at', type: 'timestamptz' },
  { name: 'active', path: '$.active', type: 'boolean' },
];
const EXPORT_COLUMNS = ['partner_id', 'name', 'city', 'credit_limit', 'balance', 'updated_at'];

function positiveInt(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  if (!/^\d+$/.test(raw.trim()) || Number(raw) < 1) throw new Error(`${name} must be a positive integer, got '${raw}'`);
  return Number(raw);
}

function sizes(name: string, fallback: number[]): number[] {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  const list = raw.split(',').map((s) => s.trim().replaceAll('_', ''));
  if (list.some((s) => !/^\d+$/.test(s) || Number(s) < 1)) throw new Error(`${name} must be comma-separated positive integers, got '${raw}'`);
  return [...new Set(list.map(Number))].sort((a, b) => a - b);
}

function destinationList(name: string): Destination[] {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === '') return ['sftp', 's3'];
  const list = raw.split(',').map((s) => s.trim().toLowerCase());
  if (list.some((d) => d !== 'sftp' && d !== 's3')) throw new Error(`${name} must name sftp and/or s3, got '${raw}'`);
  return [...new Set(list)] as Destination[];
}

const log = (line: string) => process.stdout.write(`${line}\n`);
const seconds = (ms: number) => round(ms / 1000, 2);
const mbPerSec = (bytes: number, ms: number) => (ms > 0 ? round(bytes / 1024 / 1024 / (ms / 1000), 1) : 0);
const n = (value: number) => value.toLocaleString('en-US');
const signed = (value: number) => `${value >= 0 ? '+' : ''}${value}`;

// ---------------------------------------------------------------------------------------------
// Memory and CPU of a run.

interface CpuSeconds {
  /** The process that exported: the hub's (this one) for the hub's run, the ceiling's own for the ceiling's. */
  exportProcess: number;
  postgres: number | null;
  /** sshd and its sessions, or the S3 stand-in's process. */
  destinationServer: number | null;
}

/** CPU time of PostgreSQL and of the destination's server over a run. */
class CpuMeter {
  private pgAt: number | undefined;
  private readonly server: TreeCpuSampler | undefined;

  constructor(private readonly pids: { postmaster: number | undefined; server: number | undefined }) {
    this.server = pids.server === undefined ? undefined : new TreeCpuSampler(pids.server);
  }

  start(): void {
    this.pgAt = this.pids.postmaster === undefined ? undefined : treeCpuSeconds(this.pids.postmaster);
    this.server?.start(250);
  }

  stop(): Omit<CpuSeconds, 'exportProcess'> {
    const pgNow = this.pids.postmaster === undefined ? undefined : treeCpuSeconds(this.pids.postmaster);
    const server = this.server?.stop() ?? null;
    return {
      postgres: pgNow !== undefined && this.pgAt !== undefined ? round(pgNow - this.pgAt, 2) : null,
      destinationServer: server === null ? null : round(server, 2),
    };
  }
}

/** What one run measured, hub or ceiling. The memory figures are of the process that exported (see CpuSeconds). */
interface RunFigures {
  round: number;
  /** Wall time of the run (hub: endedAt − startedAt of the run record; ceiling: connect to the end of the upload). */
  seconds: number;
  rowsPerSec: number;
  mbPerSec: number;
  bytes: number;
  /** RSS of the exporting process before the run, after a full GC. */
  baselineRssMb: number;
  /** Peak RSS sampled every 50 ms during the run. */
  peakRssMb: number;
  /** The kernel's peak RSS (VmHWM) over the run; null when it could not be reset. */
  vmHwmMb: number | null;
  /** What the run added: its peak (VmHWM, else the sampled peak) − baselineRssMb. */
  rssGrowthMb: number;
  /** V8's young generation (new space), MiB, before and at the end of the run (ProcessRun.youngGenMb). */
  youngGenMb: { before: number; after: number } | null;
  /** process.memoryUsage() before and at the end of the run, MiB (ProcessRun.memoryMb); null for a ceiling measured in its own process. */
  memoryMb: ProcessRun<unknown>['memoryMb'] | null;
  cpu: CpuSeconds;
}

function runFigures(roundNo: number, run: Omit<ProcessRun<unknown>, 'value'>, rows: number, bytes: number, others: Omit<CpuSeconds, 'exportProcess'>): RunFigures {
  return {
    round: roundNo,
    seconds: seconds(run.ms),
    rowsPerSec: perSecond(rows, run.ms),
    mbPerSec: mbPerSec(bytes, run.ms),
    bytes,
    baselineRssMb: run.baselineRssMb,
    peakRssMb: run.peakRssMb,
    vmHwmMb: run.vmHwmMb,
    rssGrowthMb: round((run.vmHwmMb ?? run.peakRssMb) - run.baselineRssMb, 1),
    youngGenMb: run.youngGenMb ?? null,
    memoryMb: run.memoryMb ?? null,
    cpu: { exportProcess: run.cpuSeconds, ...others },
  };
}

/** Runs the hub's export `work` in this process, measured (`inThisProcess`), with PostgreSQL's and the destination server's CPU. */
async function measuredHub<T>(roundNo: number, meter: CpuMeter, profileFile: string | undefined, work: () => Promise<{ result: T; bytes: number; rows: number; ms?: number }>): Promise<{ figures: RunFigures; result: T }> {
  meter.start();
  const run = await inThisProcess(profileFile, 'the run', work);
  const others = meter.stop();
  const out = run.value;
  return { result: out.result, figures: runFigures(roundNo, { ...run, ms: out.ms ?? run.ms }, out.rows, out.bytes, others) };
}

/** Runs a ceiling in its own process (measured there), with PostgreSQL's and the destination server's CPU. */
async function measuredCeiling(roundNo: number, meter: CpuMeter, ceiling: CeilingProcess, request: CeilingRequest): Promise<{ figures: RunFigures; result: { bytes: number; copiedRows: number } }> {
  meter.start();
  const run = await ceiling.ask(request);
  const others = meter.stop();
  return { result: { bytes: run.bytes, copiedRows: run.copiedRows }, figures: runFigures(roundNo, run, run.copiedRows, run.bytes, others) };
}

// ---------------------------------------------------------------------------------------------
// The hub's side: HTTP API, entity, exports, runs.

async function api<T>(hub: Hub, method: 'GET' | 'POST', path: string, body?: unknown): Promise<{ status: number; json: T }> {
  const res = await request(`${hub.url}${path}`, {
    method,
    headers: { 'X-Tenant-ID': String(TENANT), 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.body.text();
  return { status: res.statusCode, json: (text ? JSON.parse(text) : undefined) as T };
}

async function mustApply(hub: Hub, path: string, manifest: unknown): Promise<void> {
  const res = await api(hub, 'POST', path, manifest);
  if (res.status !== 200 && res.status !== 201) throw new Error(`POST ${path} answered ${res.status}: ${JSON.stringify(res.json)}`);
}

const entityName = (rows: number) => `bench-partners-${rows}`;
const tableName = (rows: number) => `bench_export_${rows}`;

function entityManifest(rows: number) {
  return {
    apiVersion: 'apps.svc.io/v1',
    kind: 'Entity',
    metadata: { name: entityName(rows) },
    spec: {
      scope: ['crm'],
      key: 'partner_id',
      columns: [
        { name: 'partner_id', type: 'text' },
        { name: 'name', type: 'text' },
        { name: 'city', type: 'text' },
        { name: 'credit_limit', type: 'bigint' },
        { name: 'balance', type: 'numeric' },
        { name: 'updated_at', type: 'timestamptz' },
        { name: 'active', type: 'boolean' },
      ],
      sources: [
        {
          table: `ext.${tableName(rows)}`,
          key: 'external_id',
          columns: { name: 'name', city: 'city', credit_limit: 'credit_limit', balance: 'balance', updated_at: 'updated_at', active: 'active' },
        },
      ],
    },
  };
}

function exportManifest(name: string, rows: number, destination: Record<string, unknown>) {
  return {
    apiVersion: 'apps.svc.io/v1',
    kind: 'Export',
    metadata: { name },
    spec: {
      scope: 'crm',
      source: { entity: entityName(rows) },
      columns: EXPORT_COLUMNS,
      order: ['partner_id'],
      format: { kind: 'csv' },
      destination,
      mode: 'snapshot',
    },
  };
}

type Run = {
  id: string;
  status: string;
  startedAt: string;
  endedAt: string | null;
  rowCount: number | null;
  byteCount: number | null;
  sha256: string | null;
  location: string | null;
  failureCode: string | null;
  failureReason: string | null;
};

/** Starts a run of `name` over HTTP and polls it to its end. */
async function hubRun(hub: Hub, name: string): Promise<Run> {
  const started = await api<{ runId: string }>(hub, 'POST', `/api/exports/${name}/runs`);
  if (started.status !== 202) throw new Error(`POST /api/exports/${name}/runs answered ${started.status}: ${JSON.stringify(started.json)}`);
  for (;;) {
    await new Promise((r) => setTimeout(r, POLL_MS));
    const run = (await api<Run>(hub, 'GET', `/api/exports/${name}/runs/${started.json.runId}`)).json;
    if (run.status !== 'Running') return run;
  }
}

// ---------------------------------------------------------------------------------------------
// Data: the ext table, filled by the owner.

/**
 * Creates `ext.<table>` with the hub's ExtSchema and fills it with `rows` rows by one
 * `insert … select … from generate_series`. The indexes the ExtSchema creates beside its keys (GIN
 * on `data`, `row_hash`, `endpoint_id`) are dropped for the insert and created again after it,
 * with their own definitions: the same table, filled in a fraction of the time. Then VACUUM
 * (FREEZE, ANALYZE), so that no run pays for setting hint bits or lacks statistics.
 */
async function fill(hub: Hub, owner: pg.Client, rows: number): Promise<{ seconds: number; tableMb: number }> {
  const t0 = performance.now();
  const schema = `ext_t${TENANT}`;
  const name = tableName(rows);
  await hub.services.connectors.ext.ensureTable(TENANT, `ext.${name}`, PROMOTE);
  const qualified = `${pg.escapeIdentifier(schema)}.${pg.escapeIdentifier(name)}`;
  const { rows: secondary } = await owner.query<{ indexname: string; indexdef: string }>(
    `select i.indexname, i.indexdef from pg_indexes i
      where i.schemaname = $1 and i.tablename = $2
        and not exists (select 1 from pg_constraint c where c.conindid = format('%I.%I', i.schemaname, i.indexname)::regclass)`,
    [schema, name],
  );
  for (const index of secondary) await owner.query(`drop index ${pg.escapeIdentifier(schema)}.${pg.escapeIdentifier(index.indexname)}`);
  // About 100 bytes per CSV record: text with commas, quotes and non-ASCII letters, NULLs in two
  // columns, a bigint, a numeric with two decimals, a timestamptz and a boolean (not exported).
  await owner.query(
    `insert into ${qualified} (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, name, city, credit_limit, balance, updated_at, active)
     select ${TENANT}, 'P' || lpad(i::text, 9, '0'), md5(i::text), '{}'::jsonb, '${CONNECTOR}', '${ENDPOINT}',
            case when i % 17 = 0 then null
                 when i % 5 = 0 then 'Partner ' || i || ', "Holding" S.A.'
                 when i % 7 = 0 then 'Müller & Söhne ' || i || ' KG'
                 else 'Partner ' || i || ' Trading GmbH' end,
            case when i % 11 = 0 then null else (array['Paris', 'Berlin', 'Zürich', 'New York, NY', 'São Paulo', 'Lyon'])[1 + i % 6] end,
            (i::bigint * 7919) % 1000000,
            round(((i::bigint * 104729) % 100000000) / 100.0, 2),
            timestamptz '2024-01-01 00:00:00+00' + ((i::bigint * 37) % 31536000) * interval '1 second',
            i % 3 <> 0
       from generate_series(1, $1::bigint) as i`,
    [rows],
  );
  await owner.query(`set maintenance_work_mem = '256MB'`);
  for (const index of secondary) await owner.query(index.indexdef);
  await owner.query('reset maintenance_work_mem');
  await owner.query(`vacuum (freeze, analyze) ${qualified}`);
  const size = await owner.query<{ bytes: string }>(`select pg_total_relation_size($1::regclass)::text as bytes`, [`${schema}.${name}`]);
  return { seconds: seconds(performance.now() - t0), tableMb: mib(Number(size.rows[0]!.bytes)) };
}

// ---------------------------------------------------------------------------------------------
// The destinations: where each run writes, how it is read back, and the ceilings.

interface Destinations {
  sshd?: TestSshd;
  s3?: S3Process;
}

type S3Process = ServiceProcess<S3Ready, S3Request, S3Stored | undefined>;
type CeilingProcess = ServiceProcess<object, CeilingRequest, CeilingRun>;

/** The S3 stand-in in a process of its own (bench/support/s3-process.ts). */
const startS3Process = (): Promise<S3Process> => forkService(fileURLToPath(new URL('./support/s3-process.ts', import.meta.url)), "the S3 stand-in's process", { execArgv: ['--import', 'tsx'] });

/** The ceilings' process (bench/support/export-ceiling-process.ts), with this process's node flags and environment. */
const startCeilingProcess = (): Promise<CeilingProcess> => forkService(fileURLToPath(new URL('./support/export-ceiling-process.ts', import.meta.url)), "the ceilings' process");

/** A directory the SFTP user owns, under the sshd's root. */
function sftpDir(sshd: TestSshd, ...parts: string[]): string {
  const { uid, gid } = statSync(sshd.root);
  let dir = sshd.root;
  for (const part of parts) {
    dir = join(dir, part);
    if (!existsSync(dir)) {
      mkdirSync(dir, { mode: 0o755 });
      chownSync(dir, uid, gid);
    }
  }
  return dir;
}

/** The pid in a pid file, waiting up to 5 s for it to be written (sshd writes it after it listens); undefined without one. */
async function pidFile(file: string): Promise<number | undefined> {
  for (let waited = 0; waited < 5000; waited += 50) {
    try {
      const pid = Number(readFileSync(file, 'utf8').trim());
      if (pid > 0) return pid;
    } catch {
      // Not written yet.
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  log(`note: no pid in ${file}: the destination server's CPU is not measured`);
  return undefined;
}

const sha256sum = async (file: string): Promise<string> => {
  const { stdout } = await promisify(execFile)('sha256sum', ['--', file]);
  const hex = /^([0-9a-f]{64})\s/.exec(stdout)?.[1];
  if (!hex) throw new Error(`sha256sum printed no hash for ${file}`);
  return hex;
};

interface Verified {
  /** The receipt's row count equals the rows of the table. */
  rowCount: number;
  bytes: number;
  sha256: string;
  /** What the destination holds, read back independently. */
  storedBytes: number;
  storedSha256: string;
}

/** Reads back what a hub run stored and checks it against its receipt; throws on any difference. Removes the file or object afterwards. */
async function verifyHubRun(dest: Destination, d: Destinations, run: Run, rows: number, where: { dir?: string; bucket?: string; prefix?: string }): Promise<Verified> {
  if (run.status !== 'Completed') throw new Error(`the ${dest} run ended ${run.status} (${run.failureCode}): ${run.failureReason}`);
  if (run.rowCount !== rows) throw new Error(`the ${dest} run's receipt says ${run.rowCount} rows, the table holds ${rows}`);
  const bytes = run.byteCount!;
  const sha256 = run.sha256!;
  if (dest === 'sftp') {
    const sshd = d.sshd!;
    const prefix = `sftp://${sshd.user}@${sshd.host}:${sshd.port}`;
    if (!run.location?.startsWith(`${prefix}${where.dir}/`)) throw new Error(`the receipt's location ${run.location} is not under ${prefix}${where.dir}`);
    const file = run.location.slice(prefix.length);
    const entries = readdirSync(where.dir!);
    if (entries.length !== 1 || entries[0] !== posix.basename(file)) throw new Error(`${where.dir} holds ${JSON.stringify(entries)} after the run, expected only ${posix.basename(file)}`);
    const storedBytes = statSync(file).size;
    const storedSha256 = await sha256sum(file);
    if (storedBytes !== bytes || storedSha256 !== sha256) throw new Error(`${file} has ${storedBytes} bytes, SHA-256 ${storedSha256}; the receipt says ${bytes} bytes, ${sha256}`);
    rmSync(file);
    return { rowCount: run.rowCount, bytes, sha256, storedBytes, storedSha256 };
  }
  const s3 = d.s3!;
  const location = `s3://${where.bucket}/${where.prefix}`;
  if (!run.location?.startsWith(location)) throw new Error(`the receipt's location ${run.location} is not under ${location}`);
  const key = run.location.slice(`s3://${where.bucket}/`.length);
  const stored = (await s3.ask({ op: 'verify', bucket: where.bucket!, prefix: where.prefix!, key }))!;
  if (stored.keys.length !== 1 || stored.keys[0] !== key) throw new Error(`${location} holds ${JSON.stringify(stored.keys)} after the run, expected only ${key}`);
  if (stored.openUploads !== 0) throw new Error(`${stored.openUploads} multipart uploads were left open in ${where.bucket}`);
  if (stored.bytes !== bytes || stored.sha256 !== sha256) throw new Error(`${run.location} has ${stored.bytes} bytes, SHA-256 ${stored.sha256}; the receipt says ${bytes} bytes, ${sha256}`);
  await s3.ask({ op: 'delete', bucket: where.bucket!, key });
  return { rowCount: run.rowCount, bytes, sha256, storedBytes: stored.bytes, storedSha256: stored.sha256! };
}

/** The snapshot query of `rows`' entity, as the hub's export builds it. */
function ceilingSql(hub: Hub, rows: number): Promise<string> {
  return hub.services.db.withTenant(TENANT, async (tx) => {
    const entity = await loadEntity(tx, entityName(rows));
    if (!entity) throw new Error(`entity ${entityName(rows)} is missing`);
    return snapshotSql(await entityRelation(tx, entity), EXPORT_COLUMNS, ['partner_id']);
  });
}

// ---------------------------------------------------------------------------------------------

interface Pair {
  hub: RunFigures;
  ceiling: RunFigures;
  /** hub rows/s ÷ ceiling rows/s of the same round. */
  ratio: number;
  verified: Verified & { ceilingBytes: number; ceilingRows: number; headerBytes: number };
}

interface SizeResult {
  rows: number;
  fill: { seconds: number; tableMb: number };
  /** Bytes of the hub's file (CRLF, header) and per record. */
  fileBytes: number;
  bytesPerRow: number;
  destinations: Partial<Record<Destination, { rounds: Pair[] }>>;
}

/** What one size's process hands its parent (EXPORT_ONE_SIZE_RESULTS). */
interface SizePart {
  size: SizeResult;
  /** That process with the hub started, before its warm-up (after a full GC). */
  idleProcess: IdleProcess;
  /** The process's whole time: setup, warm-up, fill, every run. */
  processSeconds: number;
}

type IdleProcess = { rssMb: number; heapUsedMb: number; heapTotalMb: number; externalMb: number; arrayBuffersMb: number };

/**
 * Runs one size (every round, hub and ceiling, each destination) in this process, after its own
 * setup (embedded PostgreSQL, hub, sshd, the S3 stand-in's and the ceilings' processes) and the
 * warm-up, and writes what it measured to `partFile` for the parent (`runSizes`).
 */
async function measureSize(measured: number, partFile: string): Promise<void> {
  const processStart = performance.now();
  setLogger(createLogger({ level: 'warn', json: true }));
  log(`${n(measured)} rows in a process of its own (pid ${process.pid}, ${process.execArgv.filter((a) => a.startsWith('--max-semi-space-size') || a === '--no-allocation-site-pretenuring').join(' ') || 'no hub V8 flags'}, MALLOC_MMAP_THRESHOLD_=${process.env.MALLOC_MMAP_THRESHOLD_ ?? 'unset'})`);

  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-export-'));
  chmodSync(dir, 0o755);
  let database: Awaited<ReturnType<typeof startEmbedded>> | undefined;
  let hub: Hub | undefined;
  let owner: pg.Client | undefined;
  let ceilings: CeilingProcess | undefined;
  const d: Destinations = {};
  try {
    database = await startEmbedded({ dataDir: join(dir, 'pg-data'), database: 'svc' });
    const config = benchConfig(database.url, dir);
    hub = await startHub(config, { api: true, background: false });
    // The ceilings' process connects as the hub's application role, as the hub's export does.
    const appUrl = roleUrl(database.url, config.string('svc.datasource.app-role'));
    ceilings = await startCeilingProcess();
    owner = new pg.Client({ connectionString: database.url });
    await owner.connect();
    if (DESTINATIONS.includes('sftp')) d.sshd = await startSshd({ user: SFTP_USER });
    if (DESTINATIONS.includes('s3')) d.s3 = await startS3Process();
    const sshdPid = d.sshd ? await pidFile(join(dirname(d.sshd.root), 'sshd.pid')) : undefined;
    const postmaster = postmasterPid(database.clusterDir);
    const meters: Record<Destination, CpuMeter> = {
      sftp: new CpuMeter({ postmaster, server: sshdPid }),
      s3: new CpuMeter({ postmaster, server: d.s3?.pid }),
    };
    if (d.sshd) await mustApply(hub, '/api/platform/secrets', { name: 'BENCH_SFTP_PASSWORD', value: d.sshd.password });
    if (d.s3) {
      await mustApply(hub, '/api/platform/secrets', { name: 'BENCH_S3_ACCESS_KEY', value: d.s3.accessKeyId });
      await mustApply(hub, '/api/platform/secrets', { name: 'BENCH_S3_SECRET_KEY', value: d.s3.secretAccessKey });
    }
    // What the hub's process holds before any export, after a full GC: the floor of every peak below.
    collectGarbage();
    const memory = process.memoryUsage();
    const idle = { rssMb: mib(memory.rss), heapUsedMb: mib(memory.heapUsed), heapTotalMb: mib(memory.heapTotal), externalMb: mib(memory.external), arrayBuffersMb: mib(memory.arrayBuffers) };
    log(`set up in ${seconds(performance.now() - processStart)} s (embedded PostgreSQL, hub at ${hub.url}${d.sshd ? `, sshd on port ${d.sshd.port}` : ''}${d.s3 ? `, S3 stand-in pid ${d.s3.pid} at ${d.s3.endpoint}` : ''})`);
    const headerBytes = Buffer.byteLength(encodeRecord(EXPORT_COLUMNS, ','));

    const results: SizeResult[] = [];
    // A warm-up of WARMUP_ROWS through every path first (verified, not reported): module loading,
    // JIT and first connections would otherwise fall on the first measured run.
    for (const [sizeIndex, rows] of [WARMUP_ROWS, measured].entries()) {
      const warmup = sizeIndex === 0;
      const rounds = warmup ? 1 : ROUNDS;
      log(`\n${n(rows)} rows${warmup ? ' (warm-up, not reported)' : ''}: filling ext.${tableName(rows)} …`);
      const filled = await fill(hub, owner, rows);
      log(`  filled in ${filled.seconds} s (table and indexes ${filled.tableMb} MB)`);
      await mustApply(hub, '/api/entities/apply', entityManifest(rows));
      const size: SizeResult = { rows, fill: filled, fileBytes: 0, bytesPerRow: 0, destinations: {} };
      for (let r = 1; r <= rounds; r++) {
        for (const dest of DESTINATIONS) {
          const exportName = `bench-${rows}-${dest}-r${r}`;
          const where: { dir?: string; bucket?: string; prefix?: string } = {};
          if (dest === 'sftp') {
            where.dir = sftpDir(d.sshd!, String(rows), `hub-r${r}`);
            await mustApply(
              hub,
              '/api/exports/apply',
              exportManifest(exportName, rows, {
                kind: 'sftp',
                host: d.sshd!.host,
                port: d.sshd!.port,
                user: d.sshd!.user,
                path: `${where.dir}/partners-\${timestamp}.csv`,
                password_env: 'BENCH_SFTP_PASSWORD',
                host_key_fingerprint: d.sshd!.fingerprint,
              }),
            );
          } else {
            where.bucket = d.s3!.bucket;
            where.prefix = `${rows}/hub-r${r}/`;
            await mustApply(
              hub,
              '/api/exports/apply',
              exportManifest(exportName, rows, {
                kind: 's3',
                bucket: d.s3!.bucket,
                prefix: where.prefix,
                filename: `partners-\${timestamp}.csv`,
                region: d.s3!.region,
                endpoint: d.s3!.endpoint,
                access_key_env: 'BENCH_S3_ACCESS_KEY',
                secret_key_env: 'BENCH_S3_SECRET_KEY',
              }),
            );
          }
          const profile = (side: string) => (CPU_PROFILE && sizeIndex === 1 && r === 1 ? `${CPU_PROFILE.replace(/\.cpuprofile$/, '')}-${dest}-${side}.cpuprofile` : undefined);

          const runHub = async () => {
            log(`  round ${r}/${rounds}, ${dest}: hub …`);
            const m = await measuredHub(r, meters[dest], profile('hub'), async () => {
              const run = await hubRun(hub!, exportName);
              const ms = run.endedAt ? Date.parse(run.endedAt) - Date.parse(run.startedAt) : undefined;
              return { result: run, rows: run.rowCount ?? 0, bytes: run.byteCount ?? 0, ms };
            });
            const verified = await verifyHubRun(dest, d, m.result, rows, where);
            log(`    ${n(m.figures.rowsPerSec)} rows/s, ${m.figures.mbPerSec} MB/s, ${m.figures.seconds} s; peak RSS ${m.figures.peakRssMb} MB (VmHWM ${m.figures.vmHwmMb ?? '-'}), from ${m.figures.baselineRssMb} MB (${signed(m.figures.rssGrowthMb)}; V8's young generation ${m.figures.youngGenMb?.before ?? '-'} → ${m.figures.youngGenMb?.after ?? '-'} MB, external ${m.figures.memoryMb?.before.external ?? '-'} → ${m.figures.memoryMb?.after.external ?? '-'} MB, heap ${m.figures.memoryMb?.before.heapTotal ?? '-'} → ${m.figures.memoryMb?.after.heapTotal ?? '-'} MB); verified ${n(verified.storedBytes)} bytes`);
            return { figures: m.figures, verified };
          };
          const runCeiling = async () => {
            log(`  round ${r}/${rounds}, ${dest}: ceiling …`);
            let target: string;
            if (dest === 'sftp') target = join(sftpDir(d.sshd!, String(rows), `ceiling-r${r}`), 'partners.csv');
            else target = `${rows}/ceiling-r${r}/partners.csv`;
            const destination: CeilingDestination =
              dest === 'sftp'
                ? { kind: 'sftp', host: d.sshd!.host, port: d.sshd!.port, user: d.sshd!.user, password: d.sshd!.password, fingerprint: d.sshd!.fingerprint, file: target, highWaterMark: SFTP_HIGH_WATER_MARK }
                : { kind: 's3', endpoint: d.s3!.endpoint, region: d.s3!.region, accessKeyId: d.s3!.accessKeyId, secretAccessKey: d.s3!.secretAccessKey, bucket: d.s3!.bucket, key: target, partSize: PART_SIZE };
            const m = await measuredCeiling(r, meters[dest], ceilings!, { appUrl, tenant: TENANT, sql: await ceilingSql(hub!, rows), destination, profileFile: profile('ceiling') });
            // What the ceiling stored: every byte its COPY produced, every row.
            if (m.result.copiedRows !== rows) throw new Error(`the ${dest} ceiling's COPY produced ${m.result.copiedRows} rows, the table holds ${rows}`);
            let stored: number | null;
            if (dest === 'sftp') {
              stored = statSync(target).size;
              rmSync(target);
            } else {
              const s = (await d.s3!.ask({ op: 'verify', bucket: d.s3!.bucket, prefix: `${rows}/ceiling-r${r}/`, key: target }))!;
              stored = s.bytes;
              await d.s3!.ask({ op: 'delete', bucket: d.s3!.bucket, key: target });
            }
            if (stored !== m.result.bytes) throw new Error(`the ${dest} ceiling stored ${stored} bytes of the ${m.result.bytes} its COPY produced`);
            log(`    ${n(m.figures.rowsPerSec)} rows/s, ${m.figures.mbPerSec} MB/s, ${m.figures.seconds} s; peak RSS ${m.figures.peakRssMb} MB (VmHWM ${m.figures.vmHwmMb ?? '-'}), from ${m.figures.baselineRssMb} MB (${signed(m.figures.rssGrowthMb)})`);
            return { figures: m.figures, bytes: m.result.bytes };
          };

          // Alternating order (hub first in odd rounds, the ceiling first in even ones), so that
          // neither side always meets warm caches.
          let ours: Awaited<ReturnType<typeof runHub>>;
          let ceiling: Awaited<ReturnType<typeof runCeiling>>;
          if (r % 2 === 1) {
            ours = await runHub();
            ceiling = await runCeiling();
          } else {
            ceiling = await runCeiling();
            ours = await runHub();
          }
          // The hub's file is the ceiling's bytes with CRLF record ends and a header line.
          if (ours.verified.bytes !== ceiling.bytes + rows + headerBytes) {
            throw new Error(`the hub's ${dest} file has ${ours.verified.bytes} bytes; the COPY gave ${ceiling.bytes}, plus ${rows} CRs and a ${headerBytes}-byte header makes ${ceiling.bytes + rows + headerBytes}`);
          }
          size.fileBytes = ours.verified.bytes;
          size.bytesPerRow = round(ours.verified.bytes / rows, 1);
          size.destinations[dest] ??= { rounds: [] };
          size.destinations[dest].rounds.push({
            hub: ours.figures,
            ceiling: ceiling.figures,
            ratio: round(ours.figures.rowsPerSec / ceiling.figures.rowsPerSec, 3),
            verified: { ...ours.verified, ceilingBytes: ceiling.bytes, ceilingRows: rows, headerBytes },
          });
        }
      }
      if (!warmup) results.push(size);
      // The next size has its own table: drop this one (and its entity's exports stay as history).
      await owner.query(`drop table ${pg.escapeIdentifier(`ext_t${TENANT}`)}.${pg.escapeIdentifier(tableName(rows))}`);
    }

    const part: SizePart = { size: results[0]!, idleProcess: idle, processSeconds: seconds(performance.now() - processStart) };
    writeFileSync(partFile, `${JSON.stringify(part)}\n`);
  } finally {
    await owner?.end().catch(() => undefined);
    await hub?.stop().catch(() => undefined);
    await ceilings?.close().catch(() => undefined);
    await d.s3?.close().catch(() => undefined);
    await d.sshd?.stop().catch(() => undefined);
    await database?.stop().catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Runs each size in a fresh process of its own, one after the other (`measureSize`, told the size and
 * where to write by EXPORT_ONE_SIZE and EXPORT_ONE_SIZE_RESULTS), started with the hub's node flag
 * and allocator setting as bench/run.ts starts every bench; then merges what they measured into
 * bench/results/export.json. The peaks of every size thus start from a fresh hub, its warm-up done,
 * not from what the runs of the sizes before left in the process (V8's heap may still differ).
 */
async function runSizes(): Promise<void> {
  const benchStart = performance.now();
  log(`export benchmark: ${SIZES.map(n).join(' and ')} rows to ${DESTINATIONS.join(' and ')}, ${ROUNDS} rounds, ${process.version}, ${cpus().length} CPUs; each size in a process of its own`);
  const loadAtStart = loadavg().map((l) => round(l, 2));
  if (loadAtStart[0]! > 1) log(`note: load average ${loadAtStart.join(' ')} before the start: something else is busy here, absolute figures will be low (ratios suffer less)`);
  await probeMachine(log);

  const partsDir = mkdtempSync(join(tmpdir(), 'svc-bench-export-sizes-'));
  try {
    const parts: SizePart[] = [];
    for (const [index, rows] of SIZES.entries()) {
      const partFile = join(partsDir, `${rows}.json`);
      log(`\n=== ${n(rows)} rows ===`);
      const env: NodeJS.ProcessEnv = { ...process.env, ...HUB_MALLOC_ENV, EXPORT_ONE_SIZE: String(rows), EXPORT_ONE_SIZE_RESULTS: partFile };
      // The CPU profiles are of the first size's runs only.
      if (index > 0) delete env.BENCH_CPU_PROFILE;
      const code = await new Promise<number>((resolve, reject) => {
        const child = spawn(process.execPath, [...HUB_NODE_FLAGS, '--import', 'tsx', fileURLToPath(import.meta.url)], { stdio: 'inherit', env });
        child.once('error', reject);
        child.once('exit', (status, signal) => resolve(status ?? (signal ? 1 : 0)));
      });
      if (code !== 0) throw new Error(`the process of ${n(rows)} rows exited with ${code}`);
      const part = JSON.parse(readFileSync(partFile, 'utf8')) as SizePart;
      log(`  (its process took ${part.processSeconds} s)`);
      parts.push(part);
    }

    const result = summarise(parts, loadAtStart, benchStart);
    log('');
    log(
      table(
        ['rows', 'destination', 'hub rows/s', 'hub MB/s', 'ceiling rows/s', 'ceiling MB/s', 'hub/ceiling (median)', 'per round', 'hub s', 'peak RSS MB', 'VmHWM MB (rounds)', 'RSS before MB', 'growth MB', 'ceiling VmHWM MB'],
        result.sizes.flatMap((s) =>
          DESTINATIONS.map((dest) => {
            const x = s.destinations[dest]!;
            return [
              n(s.rows),
              dest,
              x.hub.rowsPerSec,
              x.hub.mbPerSec,
              x.ceiling.rowsPerSec,
              x.ceiling.mbPerSec,
              x.ratio.toFixed(3),
              x.ratioPerRound.map((v) => v.toFixed(3)).join(' '),
              x.hub.seconds,
              x.hub.peakRssMb,
              `${x.hub.vmHwmMb ?? '-'}–${x.hub.vmHwmMbMax ?? '-'}`,
              `${x.hub.baselineRssMb}–${x.hub.baselineRssMbMax}`,
              `${x.hub.rssGrowthMb}–${x.hub.rssGrowthMbMax}`,
              x.ceiling.vmHwmMb ?? x.ceiling.peakRssMb,
            ];
          }),
        ),
      ),
    );
    log('');
    for (const [dest, t] of Object.entries(result.targets.byDestination)) {
      log(
        `${dest}: hub ≥ ${TARGETS.ratio} × ceiling: ${t.ratioMet ? 'met' : 'NOT met'} (worst size ${t.worstRatio}, median of the rounds' ratios); peak RSS < ${TARGETS.peakRssMb} MB at ${n(t.largestRows)} rows: ${t.peakRssMet ? 'met' : 'NOT met'} (${t.largestPeakRssMb} MB); flat (largest/smallest ≤ ${TARGETS.flatRatio}): ${t.flat === null ? 'one size only' : t.flat ? 'met' : 'NOT met'} (ratio ${t.rssRatio ?? '-'}); growth of the run over its RSS before: ${t.rssGrowth.smallestMb} MB at ${n(t.rssGrowth.smallestRows)} rows, ${t.rssGrowth.largestMb} MB at ${n(t.rssGrowth.largestRows)}`,
      );
    }
    log(`each size's process, hub started, before its warm-up: ${result.sizes.map((s) => `${n(s.rows)} rows ${s.idleProcess.rssMb} MB RSS`).join(', ')}`);
    mkdirSync(RESULTS, { recursive: true });
    writeFileSync(join(RESULTS, 'export.json'), `${JSON.stringify(result, null, 2)}\n`);
    log(`wrote bench/results/export.json (${result.benchSeconds} s in all)`);
  } finally {
    rmSync(partsDir, { recursive: true, force: true });
  }
}

/**
 * The better figure of the rounds: the fastest run, and separately the lowest peaks and growths;
 * the highest too (`…Max`), which the memory targets are judged on.
 */
function best(runs: RunFigures[]) {
  const fastest = runs.reduce((a, b) => (b.rowsPerSec > a.rowsPerSec ? b : a));
  const values = (pick: (f: RunFigures) => number | null) => runs.map(pick).filter((v): v is number => v !== null);
  const lowest = (pick: (f: RunFigures) => number | null) => (values(pick).length ? Math.min(...values(pick)) : null);
  const highest = (pick: (f: RunFigures) => number | null) => (values(pick).length ? Math.max(...values(pick)) : null);
  return {
    ...fastest,
    peakRssMb: lowest((f) => f.peakRssMb)!,
    vmHwmMb: lowest((f) => f.vmHwmMb),
    baselineRssMb: lowest((f) => f.baselineRssMb)!,
    rssGrowthMb: lowest((f) => f.rssGrowthMb)!,
    peakRssMbMax: highest((f) => f.peakRssMb)!,
    vmHwmMbMax: highest((f) => f.vmHwmMb),
    baselineRssMbMax: highest((f) => f.baselineRssMb)!,
    rssGrowthMbMax: highest((f) => f.rssGrowthMb)!,
    roundsRowsPerSec: runs.map((f) => f.rowsPerSec),
  };
}

/** The median; with an even count, the mean of the middle two (as bench/ingest.ts takes it). */
function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

function summarise(parts: SizePart[], loadAtStart: number[], benchStart: number) {
  const sizesOut = parts.map(({ size: s, idleProcess, processSeconds }) => ({
    rows: s.rows,
    /** This size's process with the hub started, before its warm-up and runs (after a full GC). */
    idleProcess,
    /** The whole time of this size's process: setup, warm-up, fill, every run. */
    processSeconds,
    fill: s.fill,
    fileBytes: s.fileBytes,
    fileMb: mib(s.fileBytes),
    bytesPerRow: s.bytesPerRow,
    destinations: Object.fromEntries(
      Object.entries(s.destinations).map(([dest, x]) => {
        const hub = best(x.rounds.map((p) => p.hub));
        const ceiling = best(x.rounds.map((p) => p.ceiling));
        return [
          dest,
          {
            hub,
            ceiling,
            /** The median of ratioPerRound (with two rounds, their mean): the figure the target is judged on. */
            ratio: round(median(x.rounds.map((p) => p.ratio)), 3),
            /** Each round's hub ÷ the same round's ceiling. */
            ratioPerRound: x.rounds.map((p) => p.ratio),
            /** The faster hub run ÷ the faster ceiling run, perhaps of different rounds (for comparison only). */
            ratioOfFastest: round(hub.rowsPerSec / ceiling.rowsPerSec, 3),
            /** Every run as measured, round by round: rows/s, RSS before it, peaks, growth (peak − before), CPU. */
            runs: x.rounds.map((p) => ({ round: p.hub.round, ratio: p.ratio, hub: p.hub, ceiling: p.ceiling })),
            verified: x.rounds.map((p) => p.verified),
          },
        ];
      }),
    ) as Record<
      Destination,
      {
        hub: ReturnType<typeof best>;
        ceiling: ReturnType<typeof best>;
        ratio: number;
        ratioPerRound: number[];
        ratioOfFastest: number;
        runs: Array<{ round: number; ratio: number; hub: RunFigures; ceiling: RunFigures }>;
        verified: Pair['verified'][];
      }
    >,
  }));
  const byDestination = Object.fromEntries(
    DESTINATIONS.map((dest) => {
      const per = sizesOut.map((s) => s.destinations[dest]!);
      // Judged on the highest peak of the rounds, the kernel's when it could be reset.
      const peak = (x: (typeof per)[number]) => x.hub.vmHwmMbMax ?? x.hub.peakRssMbMax;
      const largest = per[per.length - 1]!;
      const smallest = per[0]!;
      const worstRatio = Math.min(...per.map((x) => x.ratio));
      const rssRatio = per.length > 1 ? round(peak(largest) / peak(smallest), 3) : null;
      // What the export itself added to the hub's process (the higher round's peak − its RSS before),
      // at the largest size against the smallest: shown beside the flatness verdict, not judged.
      const growth = (x: (typeof per)[number]) => x.hub.rssGrowthMbMax;
      return [
        dest,
        {
          worstRatio,
          ratioMet: worstRatio >= TARGETS.ratio,
          largestRows: sizesOut[sizesOut.length - 1]!.rows,
          largestPeakRssMb: peak(largest),
          peakRssMet: peak(largest) < TARGETS.peakRssMb,
          rssRatio,
          flat: rssRatio === null ? null : rssRatio <= TARGETS.flatRatio,
          rssGrowth: {
            smallestRows: sizesOut[0]!.rows,
            smallestMb: growth(smallest),
            largestRows: sizesOut[sizesOut.length - 1]!.rows,
            largestMb: growth(largest),
            /** largestMb − smallestMb; null with one size. */
            differenceMb: per.length > 1 ? round(growth(largest) - growth(smallest), 1) : null,
          },
        },
      ];
    }),
  );
  return {
    rows: SIZES,
    rounds: ROUNDS,
    destinations: DESTINATIONS,
    columns: EXPORT_COLUMNS,
    note:
      'hub: the export path of an in-process hub (apply over HTTP, POST /api/exports/{name}/runs, polled), rows/s from the run record; ceiling: COPY (the same snapshot query) TO STDOUT piped to the same destination, in a process of its own with the same node flags (S3: the requests, part size and upload concurrency, on clients configured as those of the S3 destination). Each figure is the better of the rounds (fastest run; lowest peaks and growths, the highest in …Max, which the memory targets are judged on); ratio is the median of ratioPerRound (the hub rows/s of each round ÷ the ceiling rows/s of the same round; with two rounds their mean), which the ratio target is judged on; runs holds every run, with its RSS before (baselineRssMb), its growth (rssGrowthMb = VmHWM, else the sampled peak, − baselineRssMb) and the physical size of V8\'s young generation (new space) before and at the end of the run (youngGenMb: V8 grows it while the process allocates fast for long, up to --max-semi-space-size, and shrinks it again later), and process.memoryUsage() before and at the end of the run (memoryMb: rss, heapTotal, heapUsed, external, arrayBuffers; RSS beyond heapTotal + external is code, stacks and allocator pages not given back); targets.byDestination.*.rssGrowth compares the growth of the hub runs at the largest size with the smallest; MB are MiB. RSS and CPU of the exporting process: the hub\'s (the process of the size, which runs the hub) for the hub, the ceiling\'s own for the ceiling (sshd, the S3 stand-in and PostgreSQL run in processes of their own); RSS sampled every 50 ms and the kernel\'s VmHWM reset before each run. Each size ran in a process of its own, one after the other (its own embedded PostgreSQL, hub, sshd, S3 stand-in and ceilings\' process, then the 10,000-row warm-up, then every round of that size), started with the same node flags and allocator setting (--max-semi-space-size=64 --no-allocation-site-pretenuring, MALLOC_MMAP_THRESHOLD_=131072), so no size\'s peaks start from what earlier sizes left in the process (V8\'s heap may still differ between the processes: see each run\'s baselineRssMb and youngGenMb); sizes[].idleProcess is each size\'s process with the hub started, before its warm-up (idleProcess: the smallest size\'s).',
    /** The smallest size's process with the hub started, before any export (after a full GC); each size's in sizes[].idleProcess. */
    idleProcess: parts[0]!.idleProcess,
    sizes: sizesOut,
    targets: { ...TARGETS, byDestination },
    ...machineFacts(benchStart, loadAtStart),
  };
}

const ONE_SIZE = process.env.EXPORT_ONE_SIZE;
if (ONE_SIZE === undefined) await runSizes();
else {
  const partFile = process.env.EXPORT_ONE_SIZE_RESULTS;
  if (!/^\d+$/.test(ONE_SIZE) || Number(ONE_SIZE) < 1 || !partFile) throw new Error(`EXPORT_ONE_SIZE must be a positive integer and EXPORT_ONE_SIZE_RESULTS a file, got '${ONE_SIZE}' and '${partFile ?? ''}'`);
  await measureSize(Number(ONE_SIZE), partFile);
}
