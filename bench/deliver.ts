/**
 * The delivery benchmark (issue 5 item 7, CONTRACTS.md section 8): BENCH_EVENTS events (default
 * 20000) written to the outbox of an in-process hub (`api` and `background`, as `svc-hub all`) in
 * transactions of BENCH_BATCH (default 100), delivered by the webhook consumer to one integration
 * (authMode NONE) whose receiver on 127.0.0.1 answers 200 and records when each X-Svc-Event-Id
 * arrives. Reports deliveries/s and the event-commit-to-receiver latency p50/p99 beside ceilings
 * measured in the same run: the same number of plain undici POSTs of a same-sized body to the same
 * receiver, `svc.webhook.concurrency` (64) in flight, and `svc.webhook.concurrency-per-integration`
 * (the hub's own bound towards one endpoint) in flight. Prints a table and writes
 * bench/results/deliver.json. docs/performance.md explains the figures.
 *
 * The events are written in this process, through the hub's `events.emit`, one transaction after the
 * other (BENCH_EMITTER=inline, the default), or by a child process (BENCH_EMITTER=child,
 * bench/support/deliver-emitter.ts) as fast as it can or at BENCH_RATE events/s. Other knobs:
 * BENCH_PER_INTEGRATION (`svc.webhook.concurrency-per-integration`), BENCH_WARMUP (events written and
 * delivered the same way before the measured run, default 2000; 0 for none).
 *
 *   npm run bench:deliver                                        # 20000 events
 *   BENCH_EVENTS=2000 npm run bench:deliver                      # a quick look
 *   BENCH_EMITTER=child BENCH_RATE=1000 npm run bench:deliver    # a separate writer, 1000 events/s
 */
import { type ChildProcess, fork } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { type Hub, startHub } from '../cmd/compose.js';
import { startEmbedded } from '../src/db/embedded.js';
import { createLogger, setLogger } from '../src/observability/logger.js';
import type { EmitterMessage, EmitterRequest } from './support/deliver-emitter.js';
import { perSecond, round, table } from './support/measure.js';
import { benchConfig } from './support/hub-config.js';

const EVENTS = positiveInt('BENCH_EVENTS', 20_000);
const BATCH = positiveInt('BENCH_BATCH', 100);
/** Where the events are written from: this process, on the hub's event loop (default), or a child process. */
const EMITTER = emitterMode();
/** With the child writer: events per second at most (an open loop: transactions start on a schedule); unset for as fast as it goes. */
const RATE = process.env.BENCH_RATE ? positiveInt('BENCH_RATE', 1) : 0;
if (RATE > 0 && EMITTER !== 'child') throw new Error('BENCH_RATE needs BENCH_EMITTER=child');
const TENANT = 1;
/** Events sent one at a time (each waits for its delivery) for the idle latency. */
const IDLE_EVENTS = 100;
/** Events written and delivered the same way before the measured run, not measured (JIT, connection pools, caches). */
const WARMUP = nonNegativeInt('BENCH_WARMUP', 2_000);
/** Give up when no delivery arrives for this long. */
const STALL_MS = 60_000;
const RESULTS = fileURLToPath(new URL('./results/', import.meta.url));

function positiveInt(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  if (!/^\d+$/.test(raw.trim()) || Number(raw) < 1) throw new Error(`${name} must be a positive integer, got '${raw}'`);
  return Number(raw);
}

function nonNegativeInt(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  if (!/^\d+$/.test(raw.trim())) throw new Error(`${name} must be a non-negative integer, got '${raw}'`);
  return Number(raw);
}

function emitterMode(): 'child' | 'inline' {
  const raw = (process.env.BENCH_EMITTER ?? 'inline').trim();
  if (raw !== 'child' && raw !== 'inline') throw new Error(`BENCH_EMITTER must be child or inline, got '${raw}'`);
  return raw;
}

const log = (line: string) => process.stdout.write(`${line}\n`);

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const index = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[index]!;
}

// ---------------------------------------------------------------------------------------------
// The receiver: answers 200 and records the arrival time (performance.now(), same clock as the
// commit times: the hub runs in this process) per X-Svc-Event-Id, or per X-Bench-Id for the ceiling.

interface Receiver {
  url: string;
  arrivals: Map<string, number>;
  ceiling: Map<string, number>;
  requests: number;
  lastArrival: number;
  close(): Promise<void>;
}

async function startReceiver(): Promise<Receiver> {
  const state = { arrivals: new Map<string, number>(), ceiling: new Map<string, number>(), requests: 0, lastArrival: 0 };
  const server: Server = createServer((req, res) => {
    req.on('data', () => undefined);
    req.on('end', () => {
      const at = performance.now();
      state.requests += 1;
      state.lastArrival = at;
      const eventId = req.headers['x-svc-event-id'];
      const benchId = req.headers['x-bench-id'];
      if (typeof eventId === 'string' && !state.arrivals.has(eventId)) state.arrivals.set(eventId, at);
      if (typeof benchId === 'string') state.ceiling.set(benchId, at);
      res.writeHead(200, { 'Content-Type': 'text/plain' });
      res.end('ok');
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return Object.assign(state, {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  }) as Receiver;
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

// ---------------------------------------------------------------------------------------------
// Ours: emit in batches, wait for every event id to arrive.

/** Writes the events in this process (on the hub's event loop); the commit time of each event is taken when its transaction returns. */
async function emitInline(hub: Hub, commits: Map<string, number>, events: number): Promise<number> {
  const t0 = performance.now();
  for (let start = 0; start < events; start += BATCH) {
    const count = Math.min(BATCH, events - start);
    const ids = await hub.services.db.withTenant(TENANT, async (tx) => {
      const out: string[] = [];
      for (let i = start; i < start + count; i++) out.push(String(await hub.services.events.emit(tx, 'org.updated', { orgId: i + 1, tenantId: TENANT })));
      return out;
    });
    const committed = performance.now();
    for (const id of ids) commits.set(id, committed);
  }
  return performance.now() - t0;
}

/** A child process running bench/support/deliver-emitter.ts, ready to write. */
interface Emitter {
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

/** Writes the events from the child; the commit time of each event is taken there when its transaction returns, on this process's clock. */
async function emitFromChild(emitter: Emitter, commits: Map<string, number>, offsetMs: number, events: number): Promise<number> {
  emitter.request({ kind: 'emit', events, batch: BATCH, tenant: TENANT, rate: RATE });
  for (;;) {
    const m = await emitter.next();
    if (m.kind === 'committed') {
      const committed = m.at - offsetMs - performance.timeOrigin;
      for (const id of m.ids) commits.set(id, committed);
    } else if (m.kind === 'done') return m.ms;
    else throw new Error(`the emitter failed: ${JSON.stringify(m)}`);
  }
}

async function ours(hub: Hub, receiver: Receiver, emitter: Emitter | undefined, offsetMs: number, events = EVENTS) {
  const commits = new Map<string, number>();
  const t0 = performance.now();
  const emitMs = emitter ? await emitFromChild(emitter, commits, offsetMs, events) : await emitInline(hub, commits, events);
  log(`  ${events.toLocaleString('en-US')} events committed in ${round(emitMs / 1000, 2)} s; waiting for the deliveries …`);

  const delivered = () => {
    let n = 0;
    for (const id of commits.keys()) if (receiver.arrivals.has(id)) n += 1;
    return n;
  };
  let lastProgress = performance.now();
  let lastCount = -1;
  for (;;) {
    const n = delivered();
    if (n === events) break;
    if (n !== lastCount) {
      lastCount = n;
      lastProgress = performance.now();
    } else if (performance.now() - lastProgress > STALL_MS) {
      throw new Error(`only ${n} of ${events} events reached the receiver (no progress for ${STALL_MS / 1000} s)`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  let last = 0;
  const latencies: number[] = [];
  for (const [id, committed] of commits) {
    const arrived = receiver.arrivals.get(id)!;
    last = Math.max(last, arrived);
    latencies.push(arrived - committed);
  }
  latencies.sort((a, b) => a - b);
  const totalMs = last - t0;
  return {
    events,
    emitSeconds: round(emitMs / 1000, 2),
    emitEventsPerSec: perSecond(events, emitMs),
    /** First emit to the last arrival. */
    seconds: round(totalMs / 1000, 2),
    deliveriesPerSec: perSecond(events, totalMs),
    latencyMs: { p50: round(percentile(latencies, 50), 1), p99: round(percentile(latencies, 99), 1), max: round(latencies[latencies.length - 1]!, 1) },
  };
}

// ---------------------------------------------------------------------------------------------
// Idle latency: one event at a time on a quiet hub (the NOTIFY wake-up path without a queue).

async function idle(hub: Hub, receiver: Receiver, count: number) {
  const latencies: number[] = [];
  for (let i = 0; i < count; i++) {
    const id = String(await hub.services.db.withTenant(TENANT, (tx) => hub.services.events.emit(tx, 'org.updated', { orgId: 1_000_000 + i, tenantId: TENANT })));
    const committed = performance.now();
    const deadline = committed + 30_000;
    while (!receiver.arrivals.has(id)) {
      if (performance.now() > deadline) throw new Error(`idle event ${id} not delivered in 30 s`);
      await new Promise((r) => setTimeout(r, 1));
    }
    latencies.push(receiver.arrivals.get(id)! - committed);
  }
  latencies.sort((a, b) => a - b);
  return {
    events: count,
    latencyMs: { p50: round(percentile(latencies, 50), 1), p99: round(percentile(latencies, 99), 1), max: round(latencies[latencies.length - 1]!, 1) },
    /** Events that took over 100 ms: a wake-up missed, the sweep (svc.webhook.sweep-every) delivered them. */
    over100ms: latencies.filter((l) => l > 100).length,
  };
}

// ---------------------------------------------------------------------------------------------
// Ceiling: the same number of plain POSTs to the same receiver, `concurrency` in flight.

async function ceiling(receiver: Receiver, concurrency: number, sampleBody: string, prefix: string) {
  let next = 0;
  const sent = new Map<string, number>();
  const t0 = performance.now();
  const worker = async () => {
    for (;;) {
      const i = next++;
      if (i >= EVENTS) return;
      const id = `${prefix}${i}`;
      sent.set(id, performance.now());
      const res = await request(`${receiver.url}/ceiling`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', 'X-Bench-Id': id },
        body: sampleBody,
      });
      await res.body.text();
      if (res.statusCode !== 200) throw new Error(`the receiver answered ${res.statusCode}`);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  const ms = performance.now() - t0;
  const latencies = [...sent].map(([id, at]) => receiver.ceiling.get(id)! - at).sort((a, b) => a - b);
  return {
    requests: EVENTS,
    concurrency,
    seconds: round(ms / 1000, 2),
    requestsPerSec: perSecond(EVENTS, ms),
    latencyMs: { p50: round(percentile(latencies, 50), 1), p99: round(percentile(latencies, 99), 1) },
  };
}

async function main(): Promise<void> {
  const benchStart = performance.now();
  setLogger(createLogger({ level: 'warn', json: true }));
  log(
    `deliver benchmark: ${EVENTS.toLocaleString('en-US')} events in transactions of ${BATCH} written ${EMITTER === 'child' ? `by a child process${RATE ? ` at ${RATE}/s` : ''}` : 'in-process'}, ${process.version}, ${cpus().length} CPUs`,
  );
  const loadAtStart = loadavg().map((l) => round(l, 2));

  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-deliver-'));
  chmodSync(dir, 0o755);
  let database: Awaited<ReturnType<typeof startEmbedded>> | undefined;
  let hub: Hub | undefined;
  let receiver: Receiver | undefined;
  let emitter: Emitter | undefined;
  try {
    database = await startEmbedded({ dataDir: join(dir, 'pg-data'), database: 'svc' });
    const config = benchConfig(database.url, dir, process.env.BENCH_PER_INTEGRATION ? { 'svc.webhook.concurrency-per-integration': positiveInt('BENCH_PER_INTEGRATION', 8) } : {});
    const concurrency = config.int('svc.webhook.concurrency');
    const perIntegration = config.int('svc.webhook.concurrency-per-integration');
    hub = await startHub(config, { api: true, background: true });
    receiver = await startReceiver();
    emitter = EMITTER === 'child' ? await startEmitter(database.url) : undefined;
    const clock = emitter ? await clockOffset(emitter) : undefined;
    log(`set up in ${round((performance.now() - benchStart) / 1000, 2)} s (hub at ${hub.url}, receiver at ${receiver.url})`);

    const created = await api<{ id: number }>(hub, 'POST', `/api/tenants/${TENANT}/integrations`, {
      name: 'bench-deliver',
      targetUrl: `${receiver.url}/hook`,
      eventTypes: ['org.*'],
      authMode: 'NONE',
    });
    if (created.status !== 201) throw new Error(`creating the integration answered ${created.status}: ${JSON.stringify(created.json)}`);

    // Warm-up: a few events through the whole path, then the numbers start clean.
    await hub.services.db.withTenant(TENANT, async (tx) => {
      for (let i = 0; i < 10; i++) await hub!.services.events.emit(tx, 'org.updated', { orgId: -1 - i, tenantId: TENANT });
    });
    const warmDeadline = performance.now() + 30_000;
    while (receiver.arrivals.size < 10) {
      if (performance.now() > warmDeadline) throw new Error(`warm-up: ${receiver.arrivals.size} of 10 events delivered in 30 s`);
      await new Promise((r) => setTimeout(r, 20));
    }

    log('idle latency (one event at a time) …');
    const idleFigures = await idle(hub, receiver, IDLE_EVENTS);
    let warmupFigures: Awaited<ReturnType<typeof ours>> | undefined;
    if (WARMUP > 0) {
      log(`warm-up (${WARMUP.toLocaleString('en-US')} events, not measured) …`);
      warmupFigures = await ours(hub, receiver, emitter, clock?.offsetMs ?? 0, WARMUP);
    }
    log('hub delivery …');
    const hubFigures = await ours(hub, receiver, emitter, clock?.offsetMs ?? 0);
    // The body the hub sends is the event payload (src/webhooks/consumer.ts): the ceiling moves as many bytes.
    const sampleBody = JSON.stringify({ orgId: 12345, tenantId: TENANT });
    log(`ceiling (${EVENTS.toLocaleString('en-US')} plain POSTs, ${concurrency} in flight) …`);
    const ceil = await ceiling(receiver, concurrency, sampleBody, 'c');
    const ratio = round(hubFigures.deliveriesPerSec / ceil.requestsPerSec, 3);
    // The hub sends to one integration with at most `concurrency-per-integration` attempts in flight: the same bound for plain POSTs.
    log(`ceiling (${EVENTS.toLocaleString('en-US')} plain POSTs, ${perIntegration} in flight) …`);
    const ceilSame = await ceiling(receiver, perIntegration, sampleBody, 'p');
    const ratioSame = round(hubFigures.deliveriesPerSec / ceilSame.requestsPerSec, 3);

    const result = {
      events: EVENTS,
      batch: BATCH,
      concurrency,
      concurrencyPerIntegration: perIntegration,
      warmup: WARMUP,
      // The cold start, for the record (not the figures).
      ...(warmupFigures ? { warmupRun: { deliveriesPerSec: warmupFigures.deliveriesPerSec, latencyMs: warmupFigures.latencyMs } } : {}),
      emitter: EMITTER,
      ...(RATE > 0 && EMITTER === 'child' ? { rate: RATE } : {}),
      ...(clock ? { emitterClock: clock } : {}),
      hub: hubFigures,
      idle: idleFigures,
      ceiling: ceil,
      ratio,
      ceilingPerIntegration: ceilSame,
      ratioPerIntegration: ratioSame,
      duplicates: receiver.requests - receiver.ceiling.size - receiver.arrivals.size,
      node: process.version,
      cpus: cpus().length,
      cpuModel: cpus()[0]?.model ?? 'unknown',
      date: new Date().toISOString(),
      loadAverage: { atStart: loadAtStart, atEnd: loadavg().map((l) => round(l, 2)) },
      benchSeconds: round((performance.now() - benchStart) / 1000, 2),
    };

    log('');
    log(
      table(
        ['deliver', 'per s', 'ceiling per s', 'ratio', 'p50 ms', 'p99 ms', 's'],
        [
          ['hub: outbox → webhook (commit → receiver)', hubFigures.deliveriesPerSec, ceil.requestsPerSec, ratio.toFixed(3), hubFigures.latencyMs.p50, hubFigures.latencyMs.p99, hubFigures.seconds],
          [`hub, one event at a time (${IDLE_EVENTS} events)`, '-', '-', '-', idleFigures.latencyMs.p50, idleFigures.latencyMs.p99, '-'],
          [`ceiling: plain POSTs, ${concurrency} in flight (send → receiver)`, ceil.requestsPerSec, ceil.requestsPerSec, '1.000', ceil.latencyMs.p50, ceil.latencyMs.p99, ceil.seconds],
          [`plain POSTs, ${perIntegration} in flight (the hub's bound per integration)`, ceilSame.requestsPerSec, ceil.requestsPerSec, round(ceilSame.requestsPerSec / ceil.requestsPerSec, 3).toFixed(3), ceilSame.latencyMs.p50, ceilSame.latencyMs.p99, ceilSame.seconds],
        ],
      ),
    );
    log('');
    log(`one event at a time: ${idleFigures.over100ms} of ${IDLE_EVENTS} took over 100 ms (max ${idleFigures.latencyMs.max} ms)`);
    log(`events committed at ${hubFigures.emitEventsPerSec.toLocaleString('en-US')}/s (${hubFigures.emitSeconds} s); duplicate deliveries: ${result.duplicates}`);

    mkdirSync(RESULTS, { recursive: true });
    writeFileSync(join(RESULTS, 'deliver.json'), `${JSON.stringify(result, null, 2)}\n`);
    log(`wrote bench/results/deliver.json (${result.benchSeconds} s in all)`);
  } finally {
    emitter?.close();
    await hub?.stop().catch(() => undefined);
    await receiver?.close().catch(() => undefined);
    await database?.stop().catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
