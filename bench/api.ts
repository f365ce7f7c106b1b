/**
 * The API benchmark (issue 11 item 8, CONTRACTS.md section 8): the hub's read paths under a fixed
 * request rate, beside a bare node:http handler driven the same way in the same run.
 *
 * An in-process hub (`api` and `background`, as `svc-hub all`) on an embedded PostgreSQL, seeded with
 * realistic data through its own API and paths: API_CONNECTORS connectors (default 20) each run once
 * against the demo source (so the runs list has rows), one HMAC-signed integration that received
 * API_EVENTS events (default 2000, so the deliveries lists have rows). Then autocannon, in a child
 * process (bench/support/api-load.ts), drives six read routes at API_RATE requests/s in all (default
 * 500, split evenly) for API_SECONDS (default 60) after API_WARMUP_SECONDS (default 5) of the same
 * load not measured; p50/p90/p99 per route and over all, errors, non-2xx, and the RSS of the process
 * hosting the hub. The ceiling: the same load generator, same routes, rate, connections and duration,
 * against a node:http handler answering a small JSON object. Writes bench/results/api.json.
 *
 *   npm run bench:api                        # 60 s at 500 requests/s (and 60 s for the ceiling)
 *   API_SECONDS=5 npm run bench:api          # a quick look
 *
 * Other knobs: API_CONNECTORS, API_EVENTS, API_CONNECTIONS (per route, default 4), BENCH_CPU_PROFILE=<file>
 * (a V8 .cpuprofile of the hub's process during the measured load).
 */
import { fork } from 'node:child_process';
import { Session } from 'node:inspector/promises';
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { type IntervalHistogram, monitorEventLoopDelay } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { type Hub, startHub } from '../cmd/compose.js';
import { startEmbedded } from '../src/db/embedded.js';
import { createLogger, setLogger } from '../src/observability/logger.js';
import type { LoadAnswer, LoadFigures, LoadRequest, LoadTarget } from './support/api-load.js';
import { benchConfig } from './support/hub-config.js';
import { type DemoSourceProcess, machineFacts, mib, RssSampler, round, startDemoSourceProcess, table } from './support/measure.js';

const RATE = positiveInt('API_RATE', 500);
const SECONDS = positiveInt('API_SECONDS', 60);
const WARMUP_SECONDS = nonNegativeInt('API_WARMUP_SECONDS', 5);
const CONNECTORS = positiveInt('API_CONNECTORS', 20);
const EVENTS = positiveInt('API_EVENTS', 2000);
/** Connections per route (six routes). */
const CONNECTIONS = positiveInt('API_CONNECTIONS', 4);
const SOURCE_ROWS = 1000;
const TENANT = 1;
/** The figure the hub is held to: p99 over all routes at API_RATE. */
const TARGET_P99_MS = 20;
const CPU_PROFILE = process.env.BENCH_CPU_PROFILE || undefined;
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

const log = (line: string) => process.stdout.write(`${line}\n`);
const headers = { 'X-Tenant-ID': String(TENANT) };

async function api<T>(base: string, method: 'GET' | 'POST', path: string, body?: unknown): Promise<{ status: number; json: T }> {
  const res = await request(`${base}${path}`, {
    method,
    headers: { ...headers, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.body.text();
  return { status: res.statusCode, json: (text ? JSON.parse(text) : undefined) as T };
}

async function until(what: string, check: () => Promise<boolean> | boolean, timeoutMs = 120_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await check())) {
    if (performance.now() > deadline) throw new Error(`gave up waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A receiver for the integration's deliveries: answers 200, counts distinct event ids. */
async function startReceiver(): Promise<{ url: string; events: Set<string>; close(): Promise<void> }> {
  const events = new Set<string>();
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const id = req.headers['x-svc-event-id'];
      if (typeof id === 'string') events.add(id);
      res.writeHead(200).end('ok');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, events, close: () => closeServer(server) };
}

function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => {
    server.closeAllConnections();
    server.close(() => resolve());
  });
}

/** The ceiling: a bare node:http handler answering every path with a small JSON object. */
async function startBare(): Promise<{ url: string; close(): Promise<void> }> {
  const body = JSON.stringify({ ok: true });
  const server = createServer((req, res) => {
    req.resume();
    res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) }).end(body);
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => closeServer(server) };
}

/** Seeds the hub with connectors and their runs, and an integration with deliveries. Answers the integration id. */
async function seed(hub: Hub, source: DemoSourceProcess, receiver: Awaited<ReturnType<typeof startReceiver>>): Promise<number> {
  const base = hub.url!;
  process.env.BENCH_DEMO_TOKEN = 'demo-bearer-token';
  for (let i = 1; i <= CONNECTORS; i++) {
    const manifest = {
      apiVersion: 'connectors.svc.io/v1',
      kind: 'Connector',
      metadata: { name: `api-bench-${i}` },
      connector_type: 'rest-generic',
      scopes: ['partners'],
      spec: {
        base_url: source.url,
        auth: { kind: 'bearer', token_env: 'BENCH_DEMO_TOKEN' },
        endpoints: [
          {
            id: 'partners',
            path: '/v1/partners?limit=500',
            pagination: { kind: 'stripe' },
            target: { kind: 'hybrid', table: `ext.api_bench_${i}`, unique_key: '$.id', promote: [{ name: 'name', path: '$.name', type: 'text' }] },
          },
        ],
      },
    };
    const applied = await api(base, 'POST', '/api/connectors/apply', manifest);
    if (applied.status !== 200 && applied.status !== 201) throw new Error(`apply answered ${applied.status}: ${JSON.stringify(applied.json)}`);
  }
  // One run after the other: the first runs of connectors with different new tables, started at
  // once, can fail with 'tuple concurrently updated' (the schema grant of the table creation).
  for (let i = 1; i <= CONNECTORS; i++) {
    const started = await api<{ runs: Array<{ id: string }> }>(base, 'POST', `/api/connectors/api-bench-${i}/runs`, {});
    if (started.status !== 202) throw new Error(`starting a run answered ${started.status}: ${JSON.stringify(started.json)}`);
    const id = started.json.runs[0]!.id;
    await until(`run ${id}`, async () => {
      const run = (await api<{ status: string; errorMessage: string | null }>(base, 'GET', `/api/platform/runs/${id}`)).json;
      if (run.status === 'Running') return false;
      if (run.status !== 'Completed') throw new Error(`seed run ${id} ended ${run.status}: ${run.errorMessage}`);
      return true;
    });
  }

  const created = await api<{ id: number }>(base, 'POST', `/api/tenants/${TENANT}/integrations`, {
    name: 'api-bench',
    targetUrl: `${receiver.url}/hook`,
    eventTypes: ['org.*'],
    authMode: 'HMAC',
    secret: randomBytes(24).toString('hex'),
  });
  if (created.status !== 201) throw new Error(`creating the integration answered ${created.status}: ${JSON.stringify(created.json)}`);
  for (let start = 0; start < EVENTS; start += 100) {
    await hub.services.db.withTenant(TENANT, async (tx) => {
      for (let i = start; i < Math.min(EVENTS, start + 100); i++) await hub.services.events.emit(tx, 'org.updated', { orgId: i + 1, tenantId: TENANT });
    });
  }
  await until(`${EVENTS} deliveries`, () => receiver.events.size >= EVENTS);
  return created.json.id;
}

function loadInChild(message: LoadRequest): Promise<LoadFigures> {
  const file = fileURLToPath(new URL('./support/api-load.ts', import.meta.url));
  const child = fork(file, [], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  return new Promise((resolve, reject) => {
    let answer: LoadAnswer | undefined;
    child.on('message', (m) => {
      answer = m as LoadAnswer;
    });
    child.once('error', reject);
    child.once('exit', (code) => {
      if (answer?.ok) resolve(answer.figures);
      else reject(new Error(`the load process failed (exit ${code}): ${answer && !answer.ok ? answer.error : 'no answer'}`));
    });
    child.send(message);
  });
}

async function main(): Promise<void> {
  const benchStart = performance.now();
  setLogger(createLogger({ level: 'warn', json: true }));
  log(`api benchmark: ${RATE} requests/s for ${SECONDS} s (warm-up ${WARMUP_SECONDS} s), ${CONNECTIONS} connections per route, ${process.version}, ${cpus().length} CPUs`);
  const loadAtStart = loadavg().map((l) => round(l, 2));

  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-api-'));
  chmodSync(dir, 0o755);
  let database: Awaited<ReturnType<typeof startEmbedded>> | undefined;
  let source: DemoSourceProcess | undefined;
  let hub: Hub | undefined;
  let receiver: Awaited<ReturnType<typeof startReceiver>> | undefined;
  let bare: Awaited<ReturnType<typeof startBare>> | undefined;
  try {
    database = await startEmbedded({ dataDir: join(dir, 'pg-data'), database: 'svc' });
    source = await startDemoSourceProcess(SOURCE_ROWS);
    hub = await startHub(benchConfig(database.url, dir, { 'svc.credentials.env-allow': 'BENCH_DEMO_*' }), { api: true, background: true });
    receiver = await startReceiver();
    log(`seeding: ${CONNECTORS} connectors with one run each (${SOURCE_ROWS} rows), one HMAC integration with ${EVENTS} deliveries …`);
    const integrationId = await seed(hub, source, receiver);
    await source.close();
    source = undefined;

    const paths: Array<{ name: string; path: string; expect: (json: unknown) => number }> = [
      { name: 'GET /api/connectors', path: '/api/connectors', expect: (j) => (j as { items?: unknown[] }).items?.length ?? (j as unknown[]).length },
      { name: 'GET /api/platform/runs', path: '/api/platform/runs', expect: (j) => (j as { items?: unknown[] }).items?.length ?? (j as unknown[]).length },
      { name: 'GET /api/platform/deliveries', path: '/api/platform/deliveries', expect: (j) => (j as { items?: unknown[] }).items?.length ?? (j as unknown[]).length },
      {
        name: 'GET /api/tenants/{tid}/integrations/{id}/deliveries',
        path: `/api/tenants/${TENANT}/integrations/${integrationId}/deliveries`,
        expect: (j) => (j as { items?: unknown[] }).items?.length ?? (j as unknown[]).length,
      },
      { name: 'GET /api/bff/v1/me', path: '/api/bff/v1/me', expect: () => 1 },
      { name: 'GET /api/platform/health', path: '/api/platform/health', expect: () => 1 },
    ];
    // Every route answers 200 with the seeded rows before any load: a benchmark of 404s measures nothing.
    const listed: Record<string, number> = {};
    for (const p of paths) {
      const res = await api<unknown>(hub.url!, 'GET', p.path);
      if (res.status !== 200) throw new Error(`${p.path} answered ${res.status}: ${JSON.stringify(res.json)}`);
      listed[p.name] = p.expect(res.json);
      if (!(listed[p.name]! > 0)) throw new Error(`${p.path} listed nothing: ${JSON.stringify(res.json).slice(0, 200)}`);
    }
    log(`seeded; items per list: ${JSON.stringify(listed)}`);

    const targets = (base: string): LoadTarget[] => paths.map((p) => ({ name: p.name, url: `${base}${p.path}`, headers }));
    const run = (base: string, seconds: number) => loadInChild({ targets: targets(base), rate: RATE, seconds, connections: CONNECTIONS });

    if (WARMUP_SECONDS > 0) {
      log(`hub: warm-up ${WARMUP_SECONDS} s …`);
      await run(hub.url!, WARMUP_SECONDS);
    }
    log(`hub: ${SECONDS} s at ${RATE} requests/s …`);
    const rssBeforeMb = mib(process.memoryUsage().rss);
    const sampler = new RssSampler();
    sampler.start(250);
    const profiler = CPU_PROFILE ? new Session() : undefined;
    if (profiler) {
      profiler.connect();
      await profiler.post('Profiler.enable');
      await profiler.post('Profiler.start');
    }
    // The hub's event-loop delay during the measured load (and the bare handler's below): when the
    // loop itself stalls as long as the p99, the process (or the machine under it) is the cause.
    const hubLoop = monitorEventLoopDelay({ resolution: 10 });
    hubLoop.enable();
    const hubFigures = await run(hub.url!, SECONDS);
    hubLoop.disable();
    if (profiler) {
      const { profile } = await profiler.post('Profiler.stop');
      writeFileSync(CPU_PROFILE!, JSON.stringify(profile));
      profiler.disconnect();
      log(`wrote the CPU profile of the hub's process during the measured load to ${CPU_PROFILE}`);
    }
    const rssPeakMb = sampler.stop();
    const rssAfterMb = mib(process.memoryUsage().rss);

    bare = await startBare();
    if (WARMUP_SECONDS > 0) {
      log(`ceiling (bare node:http handler): warm-up ${WARMUP_SECONDS} s …`);
      await run(bare.url, WARMUP_SECONDS);
    }
    log(`ceiling (bare node:http handler): ${SECONDS} s at ${RATE} requests/s …`);
    const bareLoop = monitorEventLoopDelay({ resolution: 10 });
    bareLoop.enable();
    const ceilingFigures = await run(bare.url, SECONDS);
    bareLoop.disable();
    const loopDelay = (h: IntervalHistogram) => ({ p50Ms: round(h.percentile(50) / 1e6, 2), p99Ms: round(h.percentile(99) / 1e6, 2), maxMs: round(h.max / 1e6, 2) });

    const result = {
      rate: RATE,
      seconds: SECONDS,
      warmupSeconds: WARMUP_SECONDS,
      connectionsPerRoute: CONNECTIONS,
      seed: { connectors: CONNECTORS, runs: CONNECTORS, rowsPerRun: SOURCE_ROWS, deliveries: EVENTS, itemsPerList: listed },
      hub: hubFigures,
      ceiling: ceilingFigures,
      /** The hub's p99 over all routes against the target. */
      target: { p99Ms: TARGET_P99_MS, met: hubFigures.overall.p99 < TARGET_P99_MS && hubFigures.overall.errors === 0 && hubFigures.overall.non2xx === 0 },
      /** perf_hooks.monitorEventLoopDelay of this process (resolution 10 ms) during each measured load. */
      eventLoopDelay: { hub: loopDelay(hubLoop), ceiling: loopDelay(bareLoop) },
      rss: {
        note: 'the hub runs in-process (API and background roles, as svc-hub all): RSS is that process; the load generator runs in a child process',
        beforeMb: rssBeforeMb,
        peakMb: rssPeakMb,
        afterMb: rssAfterMb,
      },
      ...machineFacts(benchStart, loadAtStart),
    };

    log('');
    const row = (name: string, f: LoadFigures['overall'], c?: LoadFigures['overall']) => [
      name,
      f.perSec,
      f.p50.toFixed(2),
      f.p99.toFixed(2),
      f.max.toFixed(1),
      f.errors,
      f.non2xx,
      c ? c.p50.toFixed(2) : '-',
      c ? c.p99.toFixed(2) : '-',
    ];
    log(
      table(
        ['route', 'per s', 'p50 ms', 'p99 ms', 'max ms', 'errors', 'non-2xx', 'ceiling p50', 'ceiling p99'],
        [
          row('all routes', hubFigures.overall, ceilingFigures.overall),
          ...paths.map((p) => row(p.name, hubFigures.routes[p.name]!, ceilingFigures.routes[p.name])),
        ],
      ),
    );
    log('');
    log(`event-loop delay of this process: hub load p50/p99/max ${Object.values(result.eventLoopDelay.hub).join(' / ')} ms, ceiling load ${Object.values(result.eventLoopDelay.ceiling).join(' / ')} ms`);
    log(`RSS of the hub's process: ${rssBeforeMb} MB before, ${rssPeakMb} MB peak, ${rssAfterMb} MB after the measured load`);
    log(`target p99 < ${TARGET_P99_MS} ms at ${RATE}/s with no errors: ${result.target.met ? 'met' : 'NOT met'}`);

    mkdirSync(RESULTS, { recursive: true });
    writeFileSync(join(RESULTS, 'api.json'), `${JSON.stringify(result, null, 2)}\n`);
    log(`wrote bench/results/api.json (${result.benchSeconds} s in all)`);
  } finally {
    await bare?.close().catch(() => undefined);
    await hub?.stop().catch(() => undefined);
    await receiver?.close().catch(() => undefined);
    await source?.close().catch(() => undefined);
    await database?.stop().catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
