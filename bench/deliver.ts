/**
 * The delivery benchmark (issue 11 item 8, CONTRACTS.md section 8): an in-process hub (`api` and
 * `background`, as `svc-hub all`) delivering `org.updated` events to one HMAC-signed integration whose
 * receiver, a node:http server on 127.0.0.1 in a child process (bench/support/deliver-receiver.ts),
 * answers 200 and records every X-Svc-Event-Id it gets. Three figures, each checked against what the
 * receiver got (every event once, no duplicates, every signature right):
 *
 * - drain capacity: BENCH_DRAIN_EVENTS (default 100000) events pre-filled into the outbox in one
 *   transaction; deliveries/s and CPU (the fill left out) from its commit to the last arrival, beside the ceiling: the same
 *   number of plain undici POSTs of the same body and headers (the hub's set, signed once: the
 *   receiver checks every signature, the ceiling's too) to the same receiver with the same concurrency
 *   (`svc.webhook.concurrency-per-integration`, the hub's bound towards one endpoint), through an
 *   Agent of the undici the hub sends with and the same interface (dispatch), run just before and
 *   just after the drain (the ratio is against their mean); for both, the CPU per delivery of this
 *   process (the hub), PostgreSQL and the receiver;
 * - latency at a fixed rate: a child process (bench/support/deliver-emitter.ts) writes BENCH_RATE
 *   events/s (default 2000, an open loop, transactions of BENCH_RATE_BATCH, default 50, up to
 *   BENCH_RATE_WRITERS at once, default 4; each transaction's events in one statement as a connector
 *   run writes a chunk's, or one statement each with BENCH_RATE_STATEMENTS=event) for
 *   BENCH_RATE_SECONDS (default 15); commit → receiver
 *   p50/p99 from the writer's acknowledgement of COMMIT (the target's figure) and from just before
 *   it sent COMMIT (the two bracket the commit), the slow deliveries by second and the hub's
 *   event-loop delay and GC pauses meanwhile, the CPU per delivery (PostgreSQL's without the writer's own backends, which the
 *   emitter names) and PostgreSQL's transactions per delivery (pg_stat_database, the writer's left out);
 * - one event at a time: 100 events, each committed alone and waited for (the wake-up path).
 *
 * At the end, before anything is written, a final check: once the hub's delivery journal has no
 * delivery open (every one succeeded, on its first attempt, none leased), every id of every phase
 * (and of the ceilings) must have reached the receiver exactly once, and nothing else must have.
 *
 * The hub's background roles embed the platform corpus after start; the bench waits until that is
 * done (a core busy with the embedding model is not the delivery path's cost). Then BENCH_WARMUP
 * events (default 2000) go through the whole path unmeasured (JIT, pools). Other knobs: BENCH_PER_INTEGRATION (`svc.webhook.concurrency-per-integration`),
 * BENCH_CPU_PROFILE=<file> (a V8 .cpuprofile of this process, hub included, during the drain). Prints a
 * table and writes bench/results/deliver.json. docs/performance.md explains the figures.
 *
 *   npm run bench:deliver                                              # the defaults
 *   BENCH_DRAIN_EVENTS=10000 BENCH_RATE_SECONDS=5 npm run bench:deliver  # a quick look
 */
import { type ChildProcess, fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { Agent, request } from 'undici';
import { type Hub, startHub } from '../cmd/compose.js';
import { startEmbedded } from '../src/db/embedded.js';
import { svcSignature } from '../src/webhooks/signing.js';
import { createLogger, setLogger } from '../src/observability/logger.js';
import type { EmitterMessage, EmitterRequest, WriteStatements } from './support/deliver-emitter.js';
import type { ReceiverMessage, ReceiverRequest } from './support/deliver-receiver.js';
import {
  CpuMeter,
  type CpuSplitOf,
  gcPauses,
  loopDelay,
  machineFacts,
  percentile,
  perSecond,
  postmasterPid,
  probeMachine,
  profiled,
  retrievalSettled,
  round,
  table,
  treeCpuSeconds,
  usPer,
} from './support/measure.js';
import { benchConfig } from './support/hub-config.js';
import { idleStates, PG_STATEMENTS_SETTINGS, PgSplit, StatementStats } from './support/drain-diagnosis.js';

const DRAIN_EVENTS = positiveInt('BENCH_DRAIN_EVENTS', 100_000);
/** Events per second the separate writer aims at (an open loop), and for how long. */
const RATE = positiveInt('BENCH_RATE', 2_000);
const RATE_SECONDS = positiveInt('BENCH_RATE_SECONDS', 15);
const RATE_BATCH = positiveInt('BENCH_RATE_BATCH', 50);
/** How the writer writes a transaction's events: one statement for them all (`chunk`, as a connector run) or one each (`event`). */
const RATE_STATEMENTS = writeStatements('BENCH_RATE_STATEMENTS', 'chunk');
const TENANT = 1;
/** Events sent one at a time (each waits for its delivery) for the idle latency. */
const IDLE_EVENTS = 100;
/** Events written and delivered before the figures, not measured (JIT, connection pools, caches). */
const WARMUP = nonNegativeInt('BENCH_WARMUP', 2_000);
/** Give up when no delivery arrives for this long. */
const STALL_MS = 60_000;
/** The figures the hub is held to. */
const TARGETS = { drainRatio: 0.5, fixedRateP50Ms: 10 };
const CPU_PROFILE = process.env.BENCH_CPU_PROFILE || undefined;
/** Diagnoses of the drain (bench/support/drain-diagnosis.ts), each a load of its own: never with the figures of a table. */
const DIAGNOSE_PG_SPLIT = process.env.BENCH_PG_SPLIT === '1';
const DIAGNOSE_STATEMENTS = process.env.BENCH_PG_STATEMENTS === '1';
const DIAGNOSE_IDLE_STATES = process.env.BENCH_IDLE_STATES === '1';
const RESULTS = fileURLToPath(new URL('./results/', import.meta.url));

function positiveInt(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  if (!/^\d+$/.test(raw.trim()) || Number(raw) < 1) throw new Error(`${name} must be a positive integer, got '${raw}'`);
  return Number(raw);
}

function writeStatements(name: string, fallback: WriteStatements): WriteStatements {
  const raw = process.env[name]?.trim();
  if (!raw) return fallback;
  if (raw !== 'chunk' && raw !== 'event') throw new Error(`${name} must be 'chunk' or 'event', got '${raw}'`);
  return raw;
}

function nonNegativeInt(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  if (!/^\d+$/.test(raw.trim())) throw new Error(`${name} must be a non-negative integer, got '${raw}'`);
  return Number(raw);
}

const log = (line: string) => process.stdout.write(`${line}\n`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function latency(values: number[]) {
  const sorted = [...values].sort((a, b) => a - b);
  return { p50: round(percentile(sorted, 50), 1), p99: round(percentile(sorted, 99), 1), max: round(sorted[sorted.length - 1] ?? Number.NaN, 1) };
}

// ---------------------------------------------------------------------------------------------
// The receiver, in a child process (bench/support/deliver-receiver.ts): answers 200 and reports the
// arrival of every request (its clock, turned into this process's performance.now() with the offset
// measured over IPC) per X-Svc-Event-Id, or per X-Bench-Id for the ceiling, and whether the
// request's signature was right.

interface Receiver {
  url: string;
  /** First arrival per event id (this process's performance.now() scale). */
  arrivals: Map<string, number>;
  /** Event ids in the order of their first arrival (what `allArrived` counts from, a tick at a time). */
  order: string[];
  /** Requests per event id (more than one: a duplicate delivery). */
  counts: Map<string, number>;
  ceiling: Map<string, number>;
  /** Requests per ceiling id. */
  ceilingCounts: Map<string, number>;
  /** Requests with neither X-Svc-Event-Id nor X-Bench-Id (must stay 0). */
  unidentified: number;
  /** Resolves once every arrival the receiver recorded so far has been reported here. */
  flush(): Promise<void>;
  /** Ceiling requests whose signature the receiver did not find right (must stay 0: it checks them as the hub's). */
  ceilingUnverified: number;
  unsigned: number;
  badSignatures: number;
  verified: number;
  clock: { offsetMs: number; roundTripMs: number };
  pid: number;
  close(): void;
}

async function startReceiver(secret: string): Promise<Receiver> {
  const file = fileURLToPath(new URL('./support/deliver-receiver.ts', import.meta.url));
  const child = fork(file, [], { execArgv: ['--import', 'tsx'], env: { ...process.env, BENCH_RECEIVER_SECRET: secret }, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const state = {
    arrivals: new Map<string, number>(),
    order: [] as string[],
    counts: new Map<string, number>(),
    ceiling: new Map<string, number>(),
    ceilingCounts: new Map<string, number>(),
    unidentified: 0,
    ceilingUnverified: 0,
    unsigned: 0,
    badSignatures: 0,
    verified: 0,
  };
  let offsetMs = 0;
  let clockAnswer: ((now: number) => void) | undefined;
  let flushed: (() => void) | undefined;
  let ready: (url: string) => void = () => undefined;
  const url = new Promise<string>((resolve, reject) => {
    ready = resolve;
    child.once('exit', (code) => reject(new Error(`the receiver process exited (${code})`)));
  });
  child.on('message', (m: ReceiverMessage) => {
    if (m.kind === 'ready') ready(m.url);
    else if (m.kind === 'clock') clockAnswer?.(m.now);
    else if (m.kind === 'flushed') flushed?.();
    else {
      for (const [kind, id, epoch, signature] of m.items) {
        const at = epoch - offsetMs - performance.timeOrigin;
        if (kind === 'u') {
          state.unidentified += 1;
          continue;
        }
        if (kind === 'c') {
          state.ceiling.set(id, at);
          state.ceilingCounts.set(id, (state.ceilingCounts.get(id) ?? 0) + 1);
          if (signature !== 1) state.ceilingUnverified += 1;
          continue;
        }
        if (!state.arrivals.has(id)) {
          state.arrivals.set(id, at);
          state.order.push(id);
        }
        state.counts.set(id, (state.counts.get(id) ?? 0) + 1);
        if (signature === 1) state.verified += 1;
        else if (signature === 0) state.unsigned += 1;
        else state.badSignatures += 1;
      }
    }
  });
  const base = await url;
  // The child's clock against this one, from the exchange with the shortest round trip of a few.
  let best = { offsetMs: 0, roundTripMs: Number.POSITIVE_INFINITY };
  for (let i = 0; i < 20; i++) {
    const sent = performance.timeOrigin + performance.now();
    const now = await new Promise<number>((resolve) => {
      clockAnswer = resolve;
      child.send({ kind: 'clock' } satisfies ReceiverRequest);
    });
    const back = performance.timeOrigin + performance.now();
    if (back - sent < best.roundTripMs) best = { offsetMs: now - (sent + back) / 2, roundTripMs: back - sent };
  }
  offsetMs = best.offsetMs;
  return Object.assign(state, {
    url: base,
    pid: child.pid!,
    clock: { offsetMs: round(best.offsetMs, 3), roundTripMs: round(best.roundTripMs, 3) },
    flush: () =>
      new Promise<void>((resolve) => {
        flushed = resolve;
        child.send({ kind: 'flush' } satisfies ReceiverRequest);
      }),
    close: () => {
      if (child.connected) child.disconnect();
    },
  });
}

async function api<T>(hub: Hub, method: 'GET' | 'POST', path: string, body?: unknown): Promise<{ status: number; json: T }> {
  const res = await request(`${hub.url}${path}`, {
    method,
    headers: { 'X-Tenant-ID': String(TENANT), 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.body.text();
  return { status: res.statusCode, json: (text ? JSON.parse(text) : undefined) as T };
}

/**
 * Waits until every id has reached the receiver (failing when nothing new arrives for STALL_MS),
 * then checks that each arrived exactly once. Answers the last arrival time.
 */
async function allArrived(receiver: Receiver, ids: readonly string[], what: string): Promise<number> {
  let lastProgress = performance.now();
  let lastCount = -1;
  // Counted from the arrivals as they come, each looked at once: this loop runs in the process the
  // hub runs in, and re-scanning the ids still missing every tick (out-of-order arrivals keep many
  // "missing") once cost that process a fifth of its CPU during a drain of 100,000 events.
  const wanted = new Set(ids);
  let arrived = 0;
  let read = 0;
  for (;;) {
    for (; read < receiver.order.length; read++) if (wanted.has(receiver.order[read]!)) arrived += 1;
    if (arrived === wanted.size) break;
    if (arrived !== lastCount) {
      lastCount = arrived;
      lastProgress = performance.now();
    } else if (performance.now() - lastProgress > STALL_MS) {
      throw new Error(`${what}: only ${arrived} of ${ids.length} events reached the receiver (no progress for ${STALL_MS / 1000} s)`);
    }
    await sleep(20);
  }
  let last = 0;
  for (const id of ids) last = Math.max(last, receiver.arrivals.get(id)!);
  return last;
}

/** Every id once and only once, every request signed, every checked signature right: or a loud failure. */
function verify(receiver: Receiver, ids: readonly string[], what: string, signaturesBefore = 0) {
  let duplicates = 0;
  for (const id of ids) {
    const n = receiver.counts.get(id) ?? 0;
    if (n === 0) throw new Error(`${what}: event ${id} never reached the receiver`);
    duplicates += n - 1;
  }
  const figures = { events: ids.length, received: ids.length, duplicates, unsigned: receiver.unsigned, badSignatures: receiver.badSignatures, signaturesVerified: receiver.verified - signaturesBefore };
  if (duplicates > 0 || receiver.unsigned > 0 || receiver.badSignatures > 0) {
    throw new Error(`${what}: the receiver got ${duplicates} duplicate deliveries, ${receiver.unsigned} unsigned requests, ${receiver.badSignatures} bad signatures`);
  }
  return figures;
}

// ---------------------------------------------------------------------------------------------
// Warm-up and one event at a time, written in this process.

async function emitInline(hub: Hub, events: number, batch: number): Promise<string[]> {
  const all: string[] = [];
  for (let start = 0; start < events; start += batch) {
    const count = Math.min(batch, events - start);
    const ids = await hub.services.db.withTenant(TENANT, async (tx) => {
      const out: string[] = [];
      for (let i = start; i < start + count; i++) out.push(String(await hub.services.events.emit(tx, 'org.updated', { orgId: i + 1, tenantId: TENANT })));
      return out;
    });
    all.push(...ids);
  }
  return all;
}

async function idle(hub: Hub, receiver: Receiver, count: number) {
  const latencies: number[] = [];
  const ids: string[] = [];
  for (let i = 0; i < count; i++) {
    const id = String(await hub.services.db.withTenant(TENANT, (tx) => hub.services.events.emit(tx, 'org.updated', { orgId: 1_000_000 + i, tenantId: TENANT })));
    const committed = performance.now();
    ids.push(id);
    const deadline = committed + 30_000;
    while (!receiver.arrivals.has(id)) {
      if (performance.now() > deadline) throw new Error(`idle event ${id} not delivered in 30 s`);
      await sleep(1);
    }
    latencies.push(receiver.arrivals.get(id)! - committed);
  }
  return {
    events: count,
    latencyMs: latency(latencies),
    /** Events that took over 100 ms: a wake-up missed, the sweep (svc.webhook.sweep-every) delivered them. */
    over100ms: latencies.filter((l) => l > 100).length,
    ids,
  };
}

// ---------------------------------------------------------------------------------------------
// Drain capacity: the outbox pre-filled in one transaction, delivered from its commit on.

type Fill = { ids: string[]; fillSeconds: number; committed: number };

/**
 * Pre-fills the outbox with `events` events in one transaction: the same rows events.emit writes
 * (src/events/outbox.ts), as the application role under the tenant, in one statement. The fill is
 * not what is measured (nor must it take minutes): the caller starts its clock and its CPU meter at
 * `committed`, when the COMMIT came back.
 */
async function fillOutbox(hub: Hub, events: number): Promise<Fill> {
  const t0 = performance.now();
  const ids = await hub.services.db.withTenant(TENANT, async (tx) => {
    const { rows } = await tx.query<{ id: number }>(
      `insert into events.outbox (tenant_id, type, payload)
       select $1, 'org.updated', jsonb_build_object('orgId', g, 'tenantId', $1::bigint) from generate_series(1, $2::int) g
       returning id`,
      [TENANT, events],
    );
    return rows.map((r) => String(r.id));
  });
  const committed = performance.now();
  return { ids, fillSeconds: round((committed - t0) / 1000, 2), committed };
}

/** Waits for the filled events to reach the receiver: deliveries/s from the fill's commit to the last arrival. */
async function drain(receiver: Receiver, fill: Fill, signaturesBefore: number) {
  const { ids, committed } = fill;
  const events = ids.length;
  log(`  ${events.toLocaleString('en-US')} events written in one transaction in ${fill.fillSeconds} s; draining …`);
  // How busy this process's event loop (the hub's, the bench's bookkeeping of arrivals included) was
  // meanwhile: near 1, the loop bounds the drain; well under, the hub waited (answers, statements).
  const loopBefore = performance.eventLoopUtilization();
  const last = await allArrived(receiver, ids, 'drain');
  const loop = performance.eventLoopUtilization(loopBefore);
  const times = ids.map((id) => receiver.arrivals.get(id)!).sort((a, b) => a - b);
  const first = times[0]!;
  const ms = last - committed;
  // Deliveries/s over each tenth of the drain (by arrival order): a rate that falls as the backlog
  // is worked off, or as the tables grow, shows here.
  const tenths: number[] = [];
  for (let k = 0; k < 10; k++) {
    const from = Math.floor((k * times.length) / 10);
    const to = Math.floor(((k + 1) * times.length) / 10) - 1;
    tenths.push(perSecond(to - from, times[to]! - times[from]!));
  }
  return {
    events,
    /** The fill's own time (not in the figures below, nor in the CPU). */
    fillSeconds: fill.fillSeconds,
    /** Commit of the fill to the last arrival. */
    seconds: round(ms / 1000, 2),
    deliveriesPerSec: perSecond(events, ms),
    firstArrivalMs: round(first - committed, 1),
    perSecByTenth: tenths,
    /** performance.eventLoopUtilization() of this process (the hub's) over the drain: the share of the time its event loop was running something. */
    eventLoopUtilization: round(loop.utilization, 3),
    verified: verify(receiver, ids, 'drain', signaturesBefore),
  };
}

// ---------------------------------------------------------------------------------------------
// CPU: where a stage's time went, per delivery (the hub has a core only if the rest leaves it one).

type CpuFigures = { cpu: CpuSplitOf<'postgres' | 'receiver'>; cpuUsPerDelivery: { hubProcess: number; postgres: number | null; receiver: number | null; all: number } };

/**
 * Runs `work` and adds the CPU seconds this process (the hub), PostgreSQL and the receiver spent on
 * it, and those per delivery in µs. `notTheHubs` names PostgreSQL CPU seconds spent for others (the
 * writer's backends): left out of the per-delivery figure, kept in `cpu`.
 */
async function cpuOf<T extends object>(meter: CpuMeter<'postgres' | 'receiver'>, deliveries: number, work: () => Promise<T>, notTheHubs?: (figures: T) => number): Promise<T & CpuFigures> {
  meter.start();
  const figures = await work();
  const cpu = meter.stop();
  const postgres = cpu.postgres === null ? null : cpu.postgres - (notTheHubs?.(figures) ?? 0);
  const all = cpu.benchProcess + (postgres ?? 0) + (cpu.receiver ?? 0);
  return { ...figures, cpu, cpuUsPerDelivery: { hubProcess: usPer(cpu.benchProcess, deliveries), postgres: usPer(postgres, deliveries), receiver: usPer(cpu.receiver, deliveries), all: usPer(all, deliveries) } };
}

/** CPU seconds of these processes (PostgreSQL backends: no children) now; a process gone counts nothing. */
function processesCpuSeconds(pids: number[]): number {
  return pids.reduce((sum, pid) => sum + (treeCpuSeconds(pid) ?? 0), 0);
}

/**
 * Transactions committed in the hub's database (pg_stat_database; every autocommit statement is
 * one), less `since`. A backend reports its counts when it goes idle, at most once a second, and
 * one that stays idle after that within 10 s: the count waits that long first.
 */
async function committedTransactions(databaseUrl: string, since = 0): Promise<number> {
  await new Promise((r) => setTimeout(r, 11_000));
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const { rows } = await client.query<{ n: string }>('select xact_commit::text as n from pg_stat_database where datname = current_database()');
    return Number(rows[0]!.n) - since;
  } finally {
    await client.end();
  }
}

// ---------------------------------------------------------------------------------------------
// Ceiling: the same number of plain POSTs of the same body to the same receiver, `concurrency` in flight.

/**
 * The headers of a ceiling request: the hub's set for the same event (src/webhooks/signing.ts and
 * the sender's User-Agent), its X-Svc-Event-Id replaced by X-Bench-Id, the signature of the body made
 * once (the hub signs each delivery: its own work). The receiver parses and checks the same headers
 * for both, so what differs between the two runs is the hub.
 */
function ceilingHeaders(secret: string, body: string): (id: string) => Record<string, string> {
  const signature = svcSignature(secret, body);
  return (id) => ({ 'User-Agent': 'svc-hub-webhooks/bench', 'Content-Type': 'application/json', 'X-Svc-Event': 'org.updated', 'X-Bench-Id': id, 'X-Svc-Signature': signature });
}

/** `sentIds` gets every id sent, the warm-up's too (for the final check). */
async function ceiling(receiver: Receiver, requests: number, concurrency: number, headers: (id: string) => Record<string, string>, sampleBody: string, prefix: string, sentIds: string[]) {
  let next = 0;
  const sent = new Map<string, number>();
  // The undici the hub sends with, through the same interface (dispatch with one handler object per
  // request, src/webhooks/sender.ts) and its own Agent (never the process's global dispatcher, which
  // may be the older undici bundled with Node once anything in the process called fetch), with the
  // keep-alive the hub's sender uses; no outbound address policy (the receiver is on loopback).
  const agent = new Agent({ keepAliveTimeout: 4_000 });
  const { origin } = new URL(receiver.url);
  const post = (id: string) => {
    sentIds.push(id);
    return plainPost(agent, origin, '/ceiling', headers(id), sampleBody);
  };
  // Before the clock starts, as the hub had its warm-up: BENCH_WARMUP requests (at least one per
  // worker, so each has its connection), unmeasured.
  let warm = 0;
  const warmUp = async () => {
    while (warm < Math.max(WARMUP, concurrency)) await post(`${prefix}warm${warm++}`);
  };
  await Promise.all(Array.from({ length: concurrency }, warmUp));
  const t0 = performance.now();
  const worker = async () => {
    for (;;) {
      const i = next++;
      if (i >= requests) return;
      const id = `${prefix}${i}`;
      sent.set(id, performance.now());
      const status = await post(id);
      if (status !== 200) throw new Error(`the receiver answered ${status}`);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  const ms = performance.now() - t0;
  await agent.close();
  // Every request was answered; the receiver's reports of the last ones may still be on their way.
  const countReceived = () => [...sent.keys()].filter((id) => receiver.ceiling.has(id)).length;
  let received = countReceived();
  for (const deadline = performance.now() + 10_000; received !== requests && performance.now() < deadline; received = countReceived()) await sleep(20);
  if (received !== requests) throw new Error(`ceiling: the receiver got ${received} of ${requests} requests`);
  if (receiver.ceilingUnverified > 0) throw new Error(`ceiling: the receiver found ${receiver.ceilingUnverified} signatures wrong or missing`);
  return {
    requests,
    concurrency,
    seconds: round(ms / 1000, 2),
    requestsPerSec: perSecond(requests, ms),
    latencyMs: latency([...sent].map(([id, at]) => receiver.ceiling.get(id)! - at)),
  };
}

type CeilingFigures = Awaited<ReturnType<typeof ceiling>> & CpuFigures;

/**
 * The ceiling the drain is compared with: the mean rate and CPU of the runs before and after it
 * (each kept as `before` and `after`), and the higher of their latency percentiles.
 */
function meanCeiling(before: CeilingFigures, after: CeilingFigures) {
  const mean = (a: number, b: number) => Math.round((a + b) / 2);
  const meanOrNull = (a: number | null, b: number | null) => (a === null || b === null ? null : mean(a, b));
  const brief = (c: CeilingFigures) => ({ requestsPerSec: c.requestsPerSec, seconds: c.seconds, latencyMs: c.latencyMs, cpuUsPerDelivery: c.cpuUsPerDelivery });
  return {
    requests: after.requests,
    concurrency: after.concurrency,
    requestsPerSec: mean(before.requestsPerSec, after.requestsPerSec),
    seconds: round((before.seconds + after.seconds) / 2, 2),
    latencyMs: { p50: Math.max(before.latencyMs.p50, after.latencyMs.p50), p99: Math.max(before.latencyMs.p99, after.latencyMs.p99), max: Math.max(before.latencyMs.max, after.latencyMs.max) },
    cpuUsPerDelivery: {
      hubProcess: mean(before.cpuUsPerDelivery.hubProcess, after.cpuUsPerDelivery.hubProcess),
      postgres: meanOrNull(before.cpuUsPerDelivery.postgres, after.cpuUsPerDelivery.postgres),
      receiver: meanOrNull(before.cpuUsPerDelivery.receiver, after.cpuUsPerDelivery.receiver),
      all: mean(before.cpuUsPerDelivery.all, after.cpuUsPerDelivery.all),
    },
    before: brief(before),
    after: brief(after),
  };
}

/** One POST through `agent.dispatch`, its answer read to the end; resolves with the status. */
function plainPost(agent: Agent, origin: string, path: string, headers: Record<string, string>, body: string): Promise<number> {
  return new Promise((resolve, reject) => {
    let status = 0;
    agent.dispatch(
      { origin, path, method: 'POST', headers, body },
      {
        // undici's own callbacks, as the hub's sender (src/webhooks/sender.ts): no adapter per
        // request, no object made of the answer's headers.
        onConnect: () => undefined,
        onHeaders: (statusCode) => {
          status = statusCode;
          return true;
        },
        onData: () => true,
        onComplete: () => resolve(status),
        onError: (err) => reject(err),
      },
    );
  });
}

// ---------------------------------------------------------------------------------------------
// Latency at a fixed rate: a child process writes on a schedule (bench/support/deliver-emitter.ts).

/** A child process running bench/support/deliver-emitter.ts, ready to write. */
interface Emitter {
  pid: number;
  request(message: EmitterRequest): void;
  next(): Promise<EmitterMessage>;
  close(): void;
}

async function startEmitter(databaseUrl: string): Promise<Emitter> {
  const file = fileURLToPath(new URL('./support/deliver-emitter.ts', import.meta.url));
  const child: ChildProcess = fork(file, [], { execArgv: ['--import', 'tsx'], env: { ...process.env, BENCH_DATABASE_URL: databaseUrl }, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const inbox: EmitterMessage[] = [];
  const waiting: Array<(m: EmitterMessage) => void> = [];
  let exited: Error | undefined;
  const deliver = (m: EmitterMessage) => {
    const w = waiting.shift();
    if (w) w(m);
    else inbox.push(m);
  };
  child.on('message', (m) => deliver(m as EmitterMessage));
  child.once('exit', (code) => {
    exited = new Error(`the emitter process exited (${code})`);
    for (const w of waiting.splice(0)) w({ kind: 'failed', error: exited.message });
  });
  const emitter: Emitter = {
    pid: child.pid!,
    request: (message) => child.send(message),
    next: () => {
      const m = inbox.shift();
      if (m) return Promise.resolve(m);
      if (exited) return Promise.resolve({ kind: 'failed', error: exited.message });
      return new Promise((resolve) => waiting.push(resolve));
    },
    close: () => {
      if (child.connected) child.disconnect();
    },
  };
  const ready = await emitter.next();
  if (ready.kind !== 'ready') throw new Error(`the emitter process did not start: ${JSON.stringify(ready)}`);
  return emitter;
}

/**
 * The child's clock (epoch milliseconds, sub-millisecond) against this process's, from the
 * exchange with the shortest round trip of a few: child time − this process's time.
 */
async function clockOffset(emitter: Emitter): Promise<{ offsetMs: number; roundTripMs: number }> {
  let best = { offsetMs: 0, roundTripMs: Number.POSITIVE_INFINITY };
  for (let i = 0; i < 20; i++) {
    const sent = performance.timeOrigin + performance.now();
    emitter.request({ kind: 'clock' });
    const answer = await emitter.next();
    const back = performance.timeOrigin + performance.now();
    if (answer.kind !== 'clock') throw new Error(`the emitter answered ${JSON.stringify(answer)}`);
    if (back - sent < best.roundTripMs) best = { offsetMs: answer.now - (sent + back) / 2, roundTripMs: back - sent };
  }
  return { offsetMs: round(best.offsetMs, 3), roundTripMs: round(best.roundTripMs, 3) };
}

async function fixedRate(receiver: Receiver, emitter: Emitter, offsetMs: number) {
  const signaturesBefore = receiver.verified;
  const events = RATE * RATE_SECONDS;
  const commits = new Map<string, number>();
  /** Per id: just before its transaction's COMMIT was sent (the commit took effect between this and `commits`). */
  const commitsSent = new Map<string, number>();
  emitter.request({ kind: 'emit', events, batch: RATE_BATCH, tenant: TENANT, rate: RATE, statements: RATE_STATEMENTS });
  let emitMs: number;
  let writerBackends: number[] = [];
  let writerCpu0 = 0;
  const emitterCpu0 = treeCpuSeconds(emitter.pid) ?? 0;
  // What this process (the hub's) went through meanwhile: where a tail may come from.
  const pauses = { gc: gcPauses(), loop: monitorEventLoopDelay({ resolution: 10 }) };
  pauses.loop.enable();
  for (;;) {
    const m = await emitter.next();
    if (m.kind === 'backends') {
      writerBackends = m.pids;
      writerCpu0 = processesCpuSeconds(writerBackends);
    } else if (m.kind === 'committed') {
      const committed = m.at - offsetMs - performance.timeOrigin;
      const commitSent = m.commitSentAt - offsetMs - performance.timeOrigin;
      for (const id of m.ids) {
        commits.set(id, committed);
        commitsSent.set(id, commitSent);
      }
    } else if (m.kind === 'done') {
      emitMs = m.ms;
      break;
    } else throw new Error(`the emitter failed: ${JSON.stringify(m)}`);
  }
  const ids = [...commits.keys()];
  if (ids.length !== events) throw new Error(`fixed rate: the writer committed ${ids.length} events, not ${events}`);
  await allArrived(receiver, ids, 'fixed rate');
  const gc = pauses.gc.stop();
  pauses.loop.disable();
  const writersCpuSeconds = round(processesCpuSeconds(writerBackends) - writerCpu0, 2);
  const emitterCpuSeconds = round((treeCpuSeconds(emitter.pid) ?? 0) - emitterCpu0, 2);
  const latencies = ids.map((id) => receiver.arrivals.get(id)! - commits.get(id)!);
  return {
    events,
    rate: RATE,
    batch: RATE_BATCH,
    /** `chunk`: each transaction's events written in one statement; `event`: one statement each. */
    statements: RATE_STATEMENTS,
    /** What the writer achieved: below RATE when it could not keep up (then the figures are for a lower rate). */
    emitEventsPerSec: perSecond(events, emitMs),
    /** CPU seconds of the writer's PostgreSQL backends (part of the PostgreSQL figure, not the hub's work). */
    writersCpuSeconds,
    /** CPU seconds of the writer's own process (the load generator: not the hub's work either). */
    emitterCpuSeconds,
    /** From the writer's acknowledgement of COMMIT (withTenant resolved) to the arrival: the target's figure. */
    latencyMs: latency(latencies),
    /** From just before the writer sent COMMIT to the arrival: with `latencyMs`, brackets the latency from the commit itself. */
    latencyFromCommitSentMs: latency(ids.map((id) => receiver.arrivals.get(id)! - commitsSent.get(id)!)),
    /** When the slow deliveries came, and what paused the hub's process meanwhile. */
    tail: tailFigures(ids.map((id) => ({ committed: commits.get(id)!, ms: receiver.arrivals.get(id)! - commits.get(id)! }))),
    /** perf_hooks.monitorEventLoopDelay of this process (the hub's; resolution 10 ms) from the first write to the last arrival. */
    eventLoopDelay: loopDelay(pauses.loop),
    /** Garbage-collection pauses of this process over the same time. */
    gc,
    verified: verify(receiver, ids, 'fixed rate', signaturesBefore),
    /** The ids committed (for the final check; not in the results). */
    ids,
  };
}

/** Deliveries slower than this count in the tail figures. */
const SLOW_MS = 50;

/**
 * The fixed rate's deliveries by the second of the phase their event was committed in: how many
 * were slower than SLOW_MS in each second, and the second with the highest p99.
 */
function tailFigures(deliveries: Array<{ committed: number; ms: number }>) {
  const first = deliveries.reduce((min, d) => Math.min(min, d.committed), Number.POSITIVE_INFINITY);
  const secondOf = (d: { committed: number }) => Math.floor((d.committed - first) / 1000);
  const seconds: number[][] = Array.from({ length: deliveries.reduce((n, d) => Math.max(n, secondOf(d) + 1), 0) }, () => []);
  for (const d of deliveries) seconds[secondOf(d)]!.push(d.ms);
  const p99s = seconds.map((ms) => (ms.length ? percentile([...ms].sort((a, b) => a - b), 99) : 0));
  const worst = p99s.indexOf(Math.max(...p99s));
  return {
    slowMs: SLOW_MS,
    slowBySecond: seconds.map((ms) => ms.filter((m) => m > SLOW_MS).length),
    worstSecond: { second: worst, p99Ms: round(p99s[worst] ?? 0, 1), events: seconds[worst]?.length ?? 0 },
  };
}

// ---------------------------------------------------------------------------------------------
// The final check: once the hub's journal has nothing open, every id of the run arrived once.

/** What the run wrote (events, per phase) and sent (the ceilings' plain POSTs, warm-ups included). */
interface RunIds {
  events: Array<{ what: string; ids: readonly string[] }>;
  ceiling: readonly string[];
}

/**
 * Waits (up to STALL_MS) until no delivery of the integration is open in the hub's journal
 * (hub.deliveries: none pending or waiting for a retry, none leased), then checks that every
 * delivery succeeded on its first attempt, one per event written, and that the receiver got every
 * event id and every ceiling id exactly once and nothing else: a redelivery that came after a
 * phase's own check (a retry, the sweep), an event that never arrived, a request nobody sent.
 * Throws on any mismatch; answers what it saw.
 */
async function finalCheck(databaseUrl: string, integrationId: number, receiver: Receiver, run: RunIds) {
  const t0 = performance.now();
  const written = new Set<string>();
  let writtenCount = 0;
  for (const phase of run.events) {
    writtenCount += phase.ids.length;
    for (const id of phase.ids) written.add(id);
  }
  const problems: string[] = [];
  if (written.size !== writtenCount) problems.push(`${writtenCount - written.size} event ids written twice`);
  // The database owner (not subject to row-level security): the journal of every tenant.
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  type Journal = { deliveries: number; open: number; failed: number; retried: number; other_kinds: number };
  let journal: Journal;
  let journalIds: string[];
  try {
    for (;;) {
      const { rows } = await client.query<Journal>(
        `select count(*)::int as deliveries,
                count(*) filter (where (not succeeded and closed_reason is null) or lease_token is not null)::int as open,
                count(*) filter (where not succeeded)::int as failed,
                count(*) filter (where attempts <> 1)::int as retried,
                count(*) filter (where kind <> 'event')::int as other_kinds
           from hub.deliveries where integration_id = $1`,
        [integrationId],
      );
      journal = rows[0]!;
      if (journal.open === 0) break;
      if (performance.now() - t0 > STALL_MS) throw new Error(`final check: ${journal.open} deliveries still open in the hub's journal after ${STALL_MS / 1000} s`);
      await sleep(100);
    }
    journalIds = (await client.query<{ id: string }>(`select event_id::text as id from hub.deliveries where integration_id = $1 and kind = 'event'`, [integrationId])).rows.map((r) => r.id);
  } finally {
    await client.end();
  }
  // Every request the journal shows answered was received before its answer: once the receiver's
  // reports so far are in, the counts are complete.
  await receiver.flush();
  const journalNotWritten = journalIds.filter((id) => !written.has(id)).length;
  let duplicates = 0;
  let unexpectedIds = 0;
  for (const [id, n] of receiver.counts) {
    duplicates += n - 1;
    if (!written.has(id)) unexpectedIds += 1;
  }
  const sent = new Set(run.ceiling);
  let ceilingDuplicates = 0;
  let ceilingUnexpectedIds = 0;
  for (const [id, n] of receiver.ceilingCounts) {
    ceilingDuplicates += n - 1;
    if (!sent.has(id)) ceilingUnexpectedIds += 1;
  }
  const figures = {
    waitedSeconds: round((performance.now() - t0) / 1000, 2),
    /** The integration's rows in hub.deliveries: one per event written, each succeeded on its first attempt. */
    deliveries: journal.deliveries,
    deliveriesOpen: journal.open,
    failed: journal.failed,
    /** Deliveries with other than one attempt. */
    retried: journal.retried,
    eventsWritten: written.size,
    /** Distinct event ids the receiver got over the whole run. */
    receivedIds: receiver.counts.size,
    missing: [...written].filter((id) => !receiver.counts.has(id)).length,
    duplicates,
    /** Event ids the receiver got that the bench never wrote. */
    unexpectedIds,
    ceilingIds: sent.size,
    ceilingReceivedIds: receiver.ceilingCounts.size,
    ceilingMissing: run.ceiling.filter((id) => !receiver.ceilingCounts.has(id)).length,
    ceilingDuplicates,
    ceilingUnexpectedIds,
    /** Requests with neither an event id nor a ceiling id. */
    unidentifiedRequests: receiver.unidentified,
    signaturesWrongOrMissing: receiver.unsigned + receiver.badSignatures + receiver.ceilingUnverified,
  };
  if (journal.deliveries !== written.size) problems.push(`the journal holds ${journal.deliveries} deliveries for ${written.size} events written`);
  if (journal.failed > 0) problems.push(`${journal.failed} deliveries failed`);
  if (journal.retried > 0) problems.push(`${journal.retried} deliveries took other than one attempt`);
  if (journal.other_kinds > 0) problems.push(`${journal.other_kinds} deliveries not of kind 'event'`);
  if (journalNotWritten > 0) problems.push(`${journalNotWritten} deliveries of events the bench did not write`);
  if (run.ceiling.length !== sent.size) problems.push(`${run.ceiling.length - sent.size} ceiling ids sent twice`);
  for (const [key, value] of Object.entries(figures)) {
    if (['missing', 'duplicates', 'unexpectedIds', 'ceilingMissing', 'ceilingDuplicates', 'ceilingUnexpectedIds', 'unidentifiedRequests', 'signaturesWrongOrMissing'].includes(key) && value !== 0) problems.push(`${key} ${value}`);
  }
  if (problems.length > 0) throw new Error(`final check: ${problems.join('; ')} (${JSON.stringify(figures)})`);
  return figures;
}

async function main(): Promise<void> {
  const benchStart = performance.now();
  setLogger(createLogger({ level: 'warn', json: true }));
  log(
    `deliver benchmark: drain of ${DRAIN_EVENTS.toLocaleString('en-US')} pre-filled events, then ${RATE.toLocaleString('en-US')} events/s for ${RATE_SECONDS} s; HMAC signing; ${process.version}, ${cpus().length} CPUs`,
  );
  const loadAtStart = loadavg().map((l) => round(l, 2));
  await probeMachine(log);

  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-deliver-'));
  chmodSync(dir, 0o755);
  const secret = randomBytes(32).toString('hex');
  let database: Awaited<ReturnType<typeof startEmbedded>> | undefined;
  let hub: Hub | undefined;
  let receiver: Receiver | undefined;
  let emitter: Emitter | undefined;
  try {
    database = await startEmbedded({ dataDir: join(dir, 'pg-data'), database: 'svc', settings: DIAGNOSE_STATEMENTS ? PG_STATEMENTS_SETTINGS : undefined });
    const config = benchConfig(database.url, dir, process.env.BENCH_PER_INTEGRATION ? { 'svc.webhook.concurrency-per-integration': positiveInt('BENCH_PER_INTEGRATION', 8) } : {});
    const perIntegration = config.int('svc.webhook.concurrency-per-integration');
    hub = await startHub(config, { api: true, background: true });
    receiver = await startReceiver(secret);
    emitter = await startEmitter(database.url);
    const clock = await clockOffset(emitter);
    log(`set up in ${round((performance.now() - benchStart) / 1000, 2)} s (hub at ${hub.url}, receiver at ${receiver.url})`);

    const created = await api<{ id: number }>(hub, 'POST', `/api/tenants/${TENANT}/integrations`, {
      name: 'bench-deliver',
      targetUrl: `${receiver.url}/hook`,
      eventTypes: ['org.*'],
      authMode: 'HMAC',
      secret,
    });
    if (created.status !== 201) throw new Error(`creating the integration answered ${created.status}: ${JSON.stringify(created.json)}`);

    // The background roles embed the platform corpus after start (a core busy with the embedding
    // model for seconds to a minute): not the delivery path's cost, so measure once it is done.
    log('waiting for the retrieval backlog (the platform corpus) to be embedded …');
    const retrievalSettledSeconds = await retrievalSettled(database.url);
    log(`retrieval backlog drained after ${retrievalSettledSeconds} s`);

    // Warm-up: events through the whole path, then the numbers start clean.
    let warm: string[] = [];
    if (WARMUP > 0) {
      log(`warm-up (${WARMUP.toLocaleString('en-US')} events, not measured) …`);
      warm = await emitInline(hub, WARMUP, 100);
      await allArrived(receiver, warm, 'warm-up');
      verify(receiver, warm, 'warm-up');
    }

    log('one event at a time …');
    const idleFigures = await idle(hub, receiver, IDLE_EVENTS);
    verify(receiver, idleFigures.ids, 'one event at a time');

    const meter = new CpuMeter({ postgres: postmasterPid(join(dir, 'pg-data', 'pg')), receiver: receiver.pid });
    // The body the hub sends is the event payload (src/webhooks/consumer.ts): the ceiling moves as many bytes.
    const sampleBody = JSON.stringify({ orgId: 12345, tenantId: TENANT });
    // The ceiling is measured just before and just after the drain, and the drain compared with the
    // mean of the two: the machine's speed drifts within minutes on a virtual machine.
    const ceilingIds: string[] = [];
    const ceilingRun = async (when: 'before' | 'after') => {
      log(`ceiling ${when} the drain (${DRAIN_EVENTS.toLocaleString('en-US')} plain POSTs, ${perIntegration} in flight) …`);
      return cpuOf(meter, DRAIN_EVENTS, () => ceiling(receiver!, DRAIN_EVENTS, perIntegration, ceilingHeaders(secret, sampleBody), sampleBody, when === 'before' ? 'b' : 'a', ceilingIds));
    };
    const ceilBefore = await ceilingRun('before');
    log(`drain (${DRAIN_EVENTS.toLocaleString('en-US')} events pre-filled) …`);
    const drainSignaturesBefore = receiver.verified;
    const fill = await fillOutbox(hub, DRAIN_EVENTS);
    // The CPU meter (and the profile) start once the fill has committed: the drain's own window.
    // Diagnoses (off unless asked for, bench/support/drain-diagnosis.ts): logged, not results.
    const statements = DIAGNOSE_STATEMENTS ? new StatementStats(database.url) : undefined;
    await statements?.start();
    const split = DIAGNOSE_PG_SPLIT ? new PgSplit(postmasterPid(join(dir, 'pg-data', 'pg'))!) : undefined;
    split?.start();
    const states = DIAGNOSE_IDLE_STATES ? idleStates(hub, perIntegration) : undefined;
    const drainFigures = await cpuOf(meter, DRAIN_EVENTS, () => profiled(CPU_PROFILE, 'this process during the drain', () => drain(receiver!, fill, drainSignaturesBefore)));
    if (states) log(`  diagnosis: the event loop's idle and busy ms by pipeline state ${JSON.stringify(states())}`);
    if (split) log(`  diagnosis: PostgreSQL's CPU seconds by process type ${JSON.stringify(split.stop())}`);
    if (statements) for (const row of await statements.stop()) log(`  diagnosis: statement ${JSON.stringify(row)}`);
    const ceilAfter = await ceilingRun('after');
    const ceil = meanCeiling(ceilBefore, ceilAfter);
    const drainRatio = round(drainFigures.deliveriesPerSec / ceil.requestsPerSec, 3);

    log(`fixed rate (${RATE.toLocaleString('en-US')} events/s for ${RATE_SECONDS} s, written by a child process) …`);
    const transactionsBefore = await committedTransactions(database.url);
    const { ids: rateIds, ...rateFigures } = await cpuOf(meter, RATE * RATE_SECONDS, () => fixedRate(receiver!, emitter!, clock.offsetMs), (f) => f.writersCpuSeconds);
    const rateTransactions = await committedTransactions(database.url, transactionsBefore);

    log('final check (the hub\'s journal settled, every id of the run once) …');
    const final = await finalCheck(database.url, created.json.id, receiver, {
      events: [
        { what: 'warm-up', ids: warm },
        { what: 'one event at a time', ids: idleFigures.ids },
        { what: 'drain', ids: fill.ids },
        { what: 'fixed rate', ids: rateIds },
      ],
      ceiling: ceilingIds,
    });

    const result = {
      concurrencyPerIntegration: perIntegration,
      authMode: 'HMAC',
      warmup: WARMUP,
      retrievalSettledSeconds,
      drain: { ...drainFigures, ceiling: ceil, ratio: drainRatio },
      fixedRate: {
        ...rateFigures,
        /** PostgreSQL's transactions (every autocommit statement is one) per delivery, the writer's included (pg_stat_database). */
        transactionsPerDelivery: round((rateTransactions - (RATE * RATE_SECONDS) / RATE_BATCH) / (RATE * RATE_SECONDS), 3),
        writerTransactionsPerDelivery: round(1 / RATE_BATCH, 3),
        emitterClock: clock,
        receiverClock: receiver.clock,
      },
      idle: { events: idleFigures.events, latencyMs: idleFigures.latencyMs, over100ms: idleFigures.over100ms },
      /** Once the hub's journal had nothing open: every id of the run at the receiver once, nothing else. */
      finalCheck: { ...final, fixedRateCommitted: rateIds.length },
      targets: {
        drainRatio: TARGETS.drainRatio,
        fixedRateP50Ms: TARGETS.fixedRateP50Ms,
        drainRatioMet: drainRatio >= TARGETS.drainRatio,
        fixedRateP50Met: rateFigures.latencyMs.p50 < TARGETS.fixedRateP50Ms,
      },
      ...machineFacts(benchStart, loadAtStart),
    };

    log('');
    log(
      table(
        ['deliver (HMAC signing on)', 'per s', 'ceiling per s', 'ratio', 'p50 ms', 'p99 ms', 's'],
        [
          [`hub: drain of ${DRAIN_EVENTS.toLocaleString('en-US')} pre-filled events`, drainFigures.deliveriesPerSec, ceil.requestsPerSec, drainRatio.toFixed(3), '-', '-', drainFigures.seconds],
          [`ceiling: plain POSTs, ${perIntegration} in flight (mean of before and after)`, ceil.requestsPerSec, ceil.requestsPerSec, '1.000', ceil.latencyMs.p50, ceil.latencyMs.p99, ceil.seconds],
          ['  before the drain', ceilBefore.requestsPerSec, '-', '-', ceilBefore.latencyMs.p50, ceilBefore.latencyMs.p99, ceilBefore.seconds],
          ['  after the drain', ceilAfter.requestsPerSec, '-', '-', ceilAfter.latencyMs.p50, ceilAfter.latencyMs.p99, ceilAfter.seconds],
          [`hub: ${RATE.toLocaleString('en-US')} events/s written by a child (commit → receiver)`, rateFigures.emitEventsPerSec, '-', '-', rateFigures.latencyMs.p50, rateFigures.latencyMs.p99, RATE_SECONDS],
          ['  from just before COMMIT was sent', '-', '-', '-', rateFigures.latencyFromCommitSentMs.p50, rateFigures.latencyFromCommitSentMs.p99, '-'],
          [`hub: one event at a time (${IDLE_EVENTS} events)`, '-', '-', '-', idleFigures.latencyMs.p50, idleFigures.latencyMs.p99, '-'],
        ],
      ),
    );
    log('');
    const cpuRow = (what: string, f: Pick<CpuFigures, 'cpuUsPerDelivery'>) => [what, f.cpuUsPerDelivery.hubProcess, f.cpuUsPerDelivery.postgres ?? '-', f.cpuUsPerDelivery.receiver ?? '-', f.cpuUsPerDelivery.all];
    log(
      table(
        ['CPU per delivery (µs)', 'hub process', 'PostgreSQL', 'receiver', 'all'],
        [cpuRow('hub: drain', drainFigures), cpuRow(`hub: ${RATE.toLocaleString('en-US')} events/s`, rateFigures), cpuRow('ceiling: plain POSTs', ceil)],
      ),
    );
    log(
      `at ${RATE.toLocaleString('en-US')} events/s: PostgreSQL transactions per delivery ${result.fixedRate.transactionsPerDelivery} (the writer's ${result.fixedRate.writerTransactionsPerDelivery} left out); the writer's backends ${Math.round((rateFigures.writersCpuSeconds * 1e6) / (RATE * RATE_SECONDS))} µs and its process ${Math.round((rateFigures.emitterCpuSeconds * 1e6) / (RATE * RATE_SECONDS))} µs of CPU per event (left out above)`,
    );
    const tail = rateFigures.tail;
    const gcLine = (g: typeof rateFigures.gc) => `${g.minor.count} scavenges (${g.minor.totalMs} ms, longest ${g.minor.maxMs}), ${g.major.count} mark-compacts (${g.major.totalMs} ms, longest ${g.major.maxMs})`;
    log(
      `at ${RATE.toLocaleString('en-US')} events/s: deliveries over ${tail.slowMs} ms by second [${tail.slowBySecond.join(' ')}], the worst second ${tail.worstSecond.second} (p99 ${tail.worstSecond.p99Ms} ms over ${tail.worstSecond.events} events); the hub's event loop delayed p99 ${rateFigures.eventLoopDelay.p99Ms} / max ${rateFigures.eventLoopDelay.maxMs} ms; GC ${gcLine(rateFigures.gc)}`,
    );
    log(`drain: the hub's event loop was busy ${Math.round(drainFigures.eventLoopUtilization * 100)} % of the time (performance.eventLoopUtilization)`);
    log('');
    log(`received: every event once (drain ${drainFigures.verified.received.toLocaleString('en-US')}, fixed rate ${rateFigures.verified.received.toLocaleString('en-US')}), no duplicates, every request signed`);
    log(
      `final check (after ${final.waitedSeconds} s): the journal ${final.deliveries.toLocaleString('en-US')} deliveries, ${final.deliveriesOpen} open, ${final.failed} failed, ${final.retried} retried; the receiver ${final.receivedIds.toLocaleString('en-US')} event ids of ${final.eventsWritten.toLocaleString('en-US')} written (${final.missing} missing, ${final.duplicates} duplicates, ${final.unexpectedIds} unexpected) and ${final.ceilingReceivedIds.toLocaleString('en-US')} ceiling ids of ${final.ceilingIds.toLocaleString('en-US')} sent; fixed rate ${rateIds.length.toLocaleString('en-US')} committed of ${(RATE * RATE_SECONDS).toLocaleString('en-US')}`,
    );
    log(`targets: drain ≥ ${TARGETS.drainRatio} × ceiling ${result.targets.drainRatioMet ? 'met' : 'NOT met'}; p50 < ${TARGETS.fixedRateP50Ms} ms at ${RATE}/s ${result.targets.fixedRateP50Met ? 'met' : 'NOT met'}`);
    if (rateFigures.emitEventsPerSec < RATE * 0.95) log(`note: the writer reached ${rateFigures.emitEventsPerSec}/s of ${RATE}/s asked (a busy machine)`);

    mkdirSync(RESULTS, { recursive: true });
    writeFileSync(join(RESULTS, 'deliver.json'), `${JSON.stringify(result, null, 2)}\n`);
    log(`wrote bench/results/deliver.json (${result.benchSeconds} s in all)`);
  } finally {
    emitter?.close();
    await hub?.stop().catch(() => undefined);
    receiver?.close();
    await database?.stop().catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
