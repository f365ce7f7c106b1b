/**
 * The ingest benchmark's COPY ceiling, run in a process of its own (bench/support/copy-process.ts)
 * so the rows it holds never count in the RSS of the process that hosts the hub.
 *
 * A plain `COPY … FROM STDIN` (text format) of the demo source's rows into a table shaped like the
 * hub's ext.* tables (src/connectors/target/ddl.ts: same columns, same indexes, the three promoted
 * columns of the benchmark's manifests), in one stream (one connection, one statement) or in two or
 * three concurrent streams (as many connections, each one statement over its share of the rows, into
 * the same table: the hub writes up to three chunks at once, each in its own transaction). The timed part includes
 * formatting the lines (JSON text, a sha256 row_hash, escaping) as any client would. The table is
 * created before the clock starts; after the COPY its rows are checked: count(*), distinct keys and
 * every key one of the source's ids.
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
  /** 1: one COPY on one connection; 2 or 3: as many concurrent COPYs on as many connections, an equal share of the rows each. */
  streams: CopyStreams;
}

/** The forms of the COPY ceiling: concurrent streams, each on its own connection. */
export type CopyStreams = 1 | 2 | 3;

export interface CopyFigures {
  streams: CopyStreams;
  seconds: number;
  rowsPerSec: number;
  /** CPU seconds of the COPY client process during the COPY. */
  clientCpuSeconds: number;
  /** What the table held after the COPY (checked: every row once, every key one of the source's). */
  stored: { rows: number; distinctKeys: number; foreignKeys: number };
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
  if (options.gin) await client.query(dataIndexSql(`bench.${name}`));
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

/**
 * Creates the table, then COPYs every row, in one statement or in two or three concurrent statements
 * on as many connections (consecutive shares of the rows); checks what the table holds. The caller
 * drops the table.
 */
export async function copyCeiling(ownerUrl: string, rows: readonly Partner[], name: string, options: { gin: boolean; streams: CopyStreams }): Promise<CopyFigures> {
  const clients = Array.from({ length: options.streams }, () => new pg.Client({ connectionString: ownerUrl }));
  try {
    for (const client of clients) await client.connect();
    const first = clients[0]!;
    await createSameShape(first, name, options);
    await first.query('checkpoint');
    // One connector and endpoint for every row, as in a hub run; the same bytes in either form.
    const ids = { connectorId: randomUUID(), endpointId: randomUUID() };
    const size = Math.ceil(rows.length / options.streams);
    const parts = clients.map((_, i) => rows.slice(i * size, (i + 1) * size));
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    await Promise.all(
      clients.map((client, i) => {
        const sink = client.query(
          copyFrom(`copy bench.${name} (tenant_id, connector_id, endpoint_id, external_id, row_hash, data, name, credit_limit, updated_at) from stdin`),
        );
        return pipeline(Readable.from(copyLines(parts[i]!, ids)), sink);
      }),
    );
    const ms = performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    const stored = await storedRows(first, name, rows.length);
    return {
      streams: options.streams,
      seconds: round(ms / 1000, 2),
      rowsPerSec: perSecond(rows.length, ms),
      clientCpuSeconds: round((cpu.user + cpu.system) / 1e6, 2),
      stored,
    };
  } finally {
    for (const client of clients) await client.end().catch(() => undefined);
  }
}

/**
 * What the COPY left in the table: `count(*)` and the distinct keys must both equal the rows sent
 * (the source's ids 1 … rows), and every key must be one of them; otherwise it throws.
 */
async function storedRows(client: pg.Client, name: string, expected: number): Promise<CopyFigures['stored']> {
  const { rows } = await client.query<{ n: number; k: number; foreign: number }>(
    `select count(*)::int as n, count(distinct external_id)::int as k,
            count(*) filter (where external_id !~ '^[1-9][0-9]*$' or external_id::numeric > $1)::int as foreign
       from bench.${name}`,
    [expected],
  );
  const stored = { rows: rows[0]!.n, distinctKeys: rows[0]!.k, foreignKeys: rows[0]!.foreign };
  if (stored.rows !== expected || stored.distinctKeys !== expected || stored.foreignKeys !== 0) {
    throw new Error(`COPY stored ${stored.rows} rows with ${stored.distinctKeys} distinct keys (${stored.foreignKeys} not the source's) of ${expected}`);
  }
  return stored;
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
