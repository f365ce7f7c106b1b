/**
 * The ingest benchmark's COPY ceiling, run in a process of its own (bench/support/copy-process.ts)
 * so the rows it holds never count in the RSS of the process that hosts the hub.
 *
 * A plain `COPY … FROM STDIN` (text format, one statement) of the demo source's rows into a table
 * shaped like the hub's ext.* tables (src/connectors/target/ddl.ts: same columns, same indexes,
 * the three promoted columns of the benchmark's manifests). The timed part includes formatting the
 * lines (JSON text, a sha256 row_hash, escaping) as any client would.
 */
import { createHash, randomUUID } from 'node:crypto';
import { fork } from 'node:child_process';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import { dataIndexSql } from '../../src/connectors/target/ddl.js';
import type { Partner } from '../../src/demo-source/data.js';
import { perSecond, round } from './measure.js';

export interface CopyRequest {
  ownerUrl: string;
  rows: number;
  table: string;
  /** With the GIN index on `data` the hub's tables have (false: measure without it). */
  gin: boolean;
}

export interface CopyFigures {
  seconds: number;
  rowsPerSec: number;
  /** CPU seconds of the COPY client process during the COPY. */
  clientCpuSeconds: number;
}

const TENANT = 1;

async function createSameShape(client: pg.Client, name: string, options: { gin: boolean }): Promise<void> {
  await client.query('create schema if not exists bench');
  await client.query(`drop table if exists bench.${name}`);
  await client.query(`
    create table bench.${name} (
      id           bigint generated always as identity primary key,
      tenant_id    bigint not null,
      external_id  text not null,
      row_hash     text not null,
      data         jsonb not null,
      indexed_at   timestamptz not null default now(),
      connector_id uuid not null,
      endpoint_id  uuid not null,
      name         text,
      credit_limit bigint,
      updated_at   timestamptz,
      unique (tenant_id, external_id)
    )`);
  if (options.gin) await client.query(dataIndexSql(name, `bench.${name}`));
  await client.query(`create index ${name}_row_hash on bench.${name} (tenant_id, row_hash)`);
  await client.query(`create index ${name}_endpoint on bench.${name} (endpoint_id)`);
}

/** COPY text format: backslash, tab, newline and carriage return escaped. */
const copyEscape = (text: string) => text.replace(/[\\\t\n\r]/g, (c) => (c === '\\' ? '\\\\' : c === '\t' ? '\\t' : c === '\n' ? '\\n' : '\\r'));

function* copyLines(rows: readonly Partner[], ids: { connectorId: string; endpointId: string }): Generator<string> {
  let batch = '';
  for (let i = 0; i < rows.length; i++) {
    const row = rows[i]!;
    const data = JSON.stringify(row);
    const hash = createHash('sha256').update(data).digest('hex');
    batch += `${TENANT}\t${ids.connectorId}\t${ids.endpointId}\t${row.id}\t${hash}\t${copyEscape(data)}\t${copyEscape(row.name)}\t${row.credit_limit}\t${row.updated_at}\n`;
    if ((i + 1) % 1000 === 0) {
      yield batch;
      batch = '';
    }
  }
  if (batch) yield batch;
}

/** Creates the table, then COPYs every row in one statement; checks the count. The caller drops the table. */
export async function copyCeiling(ownerUrl: string, rows: readonly Partner[], name: string, options: { gin: boolean }): Promise<CopyFigures> {
  const client = new pg.Client({ connectionString: ownerUrl });
  await client.connect();
  try {
    await createSameShape(client, name, options);
    await client.query('checkpoint');
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    const sink = client.query(
      copyFrom(`copy bench.${name} (tenant_id, connector_id, endpoint_id, external_id, row_hash, data, name, credit_limit, updated_at) from stdin`),
    );
    await pipeline(Readable.from(copyLines(rows, { connectorId: randomUUID(), endpointId: randomUUID() })), sink);
    const ms = performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    const { rows: count } = await client.query<{ n: number }>(`select count(*)::int as n from bench.${name}`);
    if (count[0]!.n !== rows.length) throw new Error(`COPY stored ${count[0]!.n} rows of ${rows.length}`);
    return { seconds: round(ms / 1000, 2), rowsPerSec: perSecond(rows.length, ms), clientCpuSeconds: round((cpu.user + cpu.system) / 1e6, 2) };
  } finally {
    await client.end();
  }
}

/** Runs copyCeiling in a child process over the demo source's first `rows` rows. */
export function copyCeilingInProcess(request: CopyRequest): Promise<CopyFigures> {
  const file = fileURLToPath(new URL('./copy-process.ts', import.meta.url));
  const child = fork(file, [], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  return new Promise((resolve, reject) => {
    let answer: { ok: true; figures: CopyFigures } | { ok: false; error: string } | undefined;
    child.on('message', (message) => {
      answer = message as typeof answer;
    });
    child.once('error', reject);
    child.once('exit', (code) => {
      if (answer?.ok) resolve(answer.figures);
      else reject(new Error(`the COPY ceiling process failed (exit ${code}): ${answer?.error ?? 'no answer'}`));
    });
    child.send(request);
  });
}
