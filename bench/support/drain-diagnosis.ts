import { readFileSync } from 'node:fs';
import pg from 'pg';
import type { Hub } from '../../cmd/compose.js';
import { childPids, procStat, TICKS_PER_SECOND } from './measure.js';

/**
 * Diagnoses of the deliver bench's drain, each off unless asked for (bench/README.md): none is part
 * of the bench's figures, and each is a load of its own.
 *
 * - `BENCH_PG_SPLIT=1`: PostgreSQL's CPU over the drain by process type (`PgSplit`).
 * - `BENCH_PG_STATEMENTS=1`: the drain's statements from pg_stat_statements (`StatementStats`; the
 *   server started with the module loaded, `PG_STATEMENTS_SETTINGS`).
 * - `BENCH_IDLE_STATES=1`: the hub's event loop's idle time by the state of its webhook pipeline
 *   (`idleStates`).
 */

/** A PostgreSQL process's type from its title (`postgres: …`): an auxiliary process's name, or `backend <user>`. */
export function processType(title: string): string {
  const m = /^postgres: (.*)$/.exec(title);
  if (!m) return 'postmaster';
  const rest = m[1]!;
  for (const aux of ['autovacuum worker', 'autovacuum launcher', 'walwriter', 'checkpointer', 'background writer', 'logical replication launcher', 'io worker', 'walsender', 'startup']) {
    if (rest.startsWith(aux)) return aux;
  }
  return `backend ${rest.split(' ')[0]}`;
}

/**
 * PostgreSQL's CPU between start() and stop() by process type: each child of the postmaster's
 * utime + stime (/proc/<pid>/stat) and title (/proc/<pid>/cmdline), sampled every `everyMs`, so that
 * an autovacuum worker that starts and ends inside the window is counted up to its last sample.
 */
export class PgSplit {
  private readonly seen = new Map<string, { type: string; first: number; last: number }>();
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly postmaster: number) {}

  start(everyMs = 50): void {
    this.seen.clear();
    this.sample(true);
    this.timer = setInterval(() => this.sample(false), everyMs);
  }

  /** CPU seconds and processes seen, per process type. */
  stop(): Record<string, { seconds: number; processes: number }> {
    clearInterval(this.timer);
    this.sample(false);
    const out: Record<string, { seconds: number; processes: number }> = {};
    for (const p of this.seen.values()) {
      out[p.type] ??= { seconds: 0, processes: 0 };
      const o = out[p.type]!;
      o.seconds += (p.last - p.first) / TICKS_PER_SECOND;
      o.processes++;
    }
    for (const o of Object.values(out)) o.seconds = Math.round(o.seconds * 100) / 100;
    return out;
  }

  private sample(initial: boolean): void {
    const root = procStat(this.postmaster);
    if (root) this.note(`${this.postmaster}`, 'postmaster', root.self, initial);
    for (const pid of childPids(this.postmaster)) {
      const t = procStat(pid);
      if (!t) continue;
      let title = '';
      try {
        title = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0+$/, '').replace(/\0/g, ' ');
      } catch {
        continue;
      }
      this.note(`${pid}:${t.start}`, processType(title), t.self, initial);
    }
  }

  private note(key: string, type: string, ticks: number, initial: boolean): void {
    const known = this.seen.get(key);
    if (known) known.last = ticks;
    // A process first seen after the start began within the window: all its CPU counts.
    else this.seen.set(key, { type, first: initial ? ticks : 0, last: ticks });
  }
}

/** The server settings that load pg_stat_statements (src/db/embedded.ts `settings`). */
export const PG_STATEMENTS_SETTINGS = { shared_preload_libraries: 'pg_stat_statements', 'pg_stat_statements.track_planning': 'on' };

/** pg_stat_statements over a window: reset at start(), the top statements by execution and planning time at stop(). */
export class StatementStats {
  private readonly client: pg.Client;

  constructor(url: string) {
    this.client = new pg.Client({ connectionString: url });
  }

  async start(): Promise<void> {
    await this.client.connect();
    await this.client.query('create extension if not exists pg_stat_statements');
    await this.client.query('select pg_stat_statements_reset()');
  }

  async stop(top = 8): Promise<Array<Record<string, unknown>>> {
    try {
      const { rows } = await this.client.query(
        `select calls, rows, round(total_exec_time::numeric, 1) as exec_ms, round(total_plan_time::numeric, 1) as plan_ms, wal_records, wal_bytes::bigint as wal_bytes,
                shared_blks_hit, shared_blks_dirtied, left(regexp_replace(query, '\\s+', ' ', 'g'), 120) as query
           from pg_stat_statements order by total_exec_time + total_plan_time desc limit $1`,
        [top],
      );
      return rows;
    } finally {
      await this.client.end();
    }
  }
}

/** Idle and busy time of the event loop in one pipeline state (`idleStates`). */
export type StateTime = { idleMs: number; busyMs: number; samples: number };

/**
 * The hub's event loop's idle and busy time over a window, by the state of its webhook pipeline
 * seen at the end of each millisecond's interval (what the loop waited in, when it waited): the
 * outcome writer holding attempts back (`outcomes-full`: its pending outcomes at `outcomesMax`), no
 * attempt running or queued (`pool-empty`: the consumer has not handed over the next batch), every
 * per-integration slot taken with attempts queued (`slots-full`: waiting for answers), or neither
 * (`other`); and the spells of an empty pool (`emptySpells`: when, how long). Reads the worker's
 * private state (a diagnosis, not an interface).
 */
export function idleStates(hub: Hub, perIntegration: number, outcomesMax = 2_000): () => Record<string, StateTime | Array<[number, number]>> {
  // biome-ignore lint/suspicious/noExplicitAny: a diagnosis reads the worker's private state
  const worker = (hub.services.integrations as any).o.worker;
  const pool = worker.o.pool as { running: number; queued: number };
  const outcomes = worker.outcomes as { size(): number };
  const byState: Record<string, StateTime> = {};
  // Spells of an empty pool of 5 ms or more: [ms from the start, length ms] (the start of a drain, its end, or between batches).
  const emptySpells: Array<[number, number]> = [];
  let emptySince: number | undefined;
  const began = performance.now();
  let previous = performance.eventLoopUtilization();
  const timer = setInterval(() => {
    const now = performance.eventLoopUtilization();
    const d = performance.eventLoopUtilization(now, previous);
    previous = now;
    const state =
      outcomes.size() >= outcomesMax ? 'outcomes-full' : pool.running === 0 && pool.queued === 0 ? 'pool-empty' : pool.running >= perIntegration && pool.queued > 0 ? 'slots-full' : 'other';
    const at = performance.now();
    if (state === 'pool-empty') emptySince ??= at;
    else if (emptySince !== undefined) {
      if (at - emptySince >= 5) emptySpells.push([Math.round(emptySince - began), Math.round(at - emptySince)]);
      emptySince = undefined;
    }
    byState[state] ??= { idleMs: 0, busyMs: 0, samples: 0 };
    const o = byState[state]!;
    o.idleMs += d.idle;
    o.busyMs += d.active;
    o.samples++;
  }, 1);
  return () => {
    clearInterval(timer);
    if (emptySince !== undefined) emptySpells.push([Math.round(emptySince - began), Math.round(performance.now() - emptySince)]);
    for (const o of Object.values(byState)) {
      o.idleMs = Math.round(o.idleMs);
      o.busyMs = Math.round(o.busyMs);
    }
    return { ...byState, emptySpells };
  };
}
