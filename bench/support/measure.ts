import { type ChildProcess, execFileSync, fork } from 'node:child_process';
import { createHash } from 'node:crypto';
import { connect } from 'node:net';
import { cpus, loadavg, totalmem } from 'node:os';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { constants as perfConstants, type IntervalHistogram, type PerformanceEntry, PerformanceObserver } from 'node:perf_hooks';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { getHeapSpaceStatistics, setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import pg from 'pg';

/**
 * Peak resident set size of this process, sampled every `everyMs` while started
 * (`process.memoryUsage.rss()`, which, unlike `memoryUsage()`, does not walk the V8 heap).
 */
export class RssSampler {
  private timer: NodeJS.Timeout | undefined;
  private peak = 0;

  start(everyMs = 50): void {
    this.peak = process.memoryUsage.rss();
    this.timer = setInterval(() => {
      const rss = process.memoryUsage.rss();
      if (rss > this.peak) this.peak = rss;
    }, everyMs);
  }

  /** Stops sampling; answers the peak in MiB. */
  stop(): number {
    clearInterval(this.timer);
    this.timer = undefined;
    const rss = process.memoryUsage.rss();
    if (rss > this.peak) this.peak = rss;
    return mib(this.peak);
  }
}

/**
 * Runs `work` under the V8 CPU profiler of this process and writes the profile to `file` (and a
 * line naming `what` to stdout); without a file, just runs `work`.
 */
export async function profiled<T>(file: string | undefined, what: string, work: () => Promise<T>): Promise<T> {
  if (!file) return work();
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.start');
  try {
    return await work();
  } finally {
    const { profile } = await session.post('Profiler.stop');
    writeFileSync(file, JSON.stringify(profile));
    session.disconnect();
    process.stdout.write(`wrote the CPU profile of ${what} to ${file}\n`);
  }
}

/** What `inThisProcess` measured of one piece of work. */
export interface ProcessRun<T> {
  value: T;
  /** Wall time of the work. */
  ms: number;
  /** CPU seconds (user + system) of this process over the work. */
  cpuSeconds: number;
  /** RSS before the work, after a full garbage collection. */
  baselineRssMb: number;
  /** RSS sampled every 50 ms during the work. */
  peakRssMb: number;
  /** The kernel's peak RSS (VmHWM) over the work, reset before it; null where it cannot be reset. */
  vmHwmMb: number | null;
  /**
   * The physical size of V8's young generation (new space), MiB: after the garbage collection
   * before the work, and at its end. V8 grows it while a process allocates fast for long (up to
   * --max-semi-space-size) and shrinks it again later (not at once by a full collection right after
   * the work), so part of a long run's peak is that generation's growth.
   */
  youngGenMb: { before: number; after: number };
  /**
   * `process.memoryUsage()` in MiB after the collection before the work and at its end: what of
   * the RSS V8's heap and the memory it accounts outside it (`external`, of which `arrayBuffers`:
   * Buffers) hold; RSS beyond their sum is code, stacks and the allocator's free pages (glibc's
   * arenas) that were not given back.
   */
  memoryMb: { before: MemoryFigures; after: MemoryFigures };
}

export interface MemoryFigures {
  rss: number;
  heapTotal: number;
  heapUsed: number;
  external: number;
  arrayBuffers: number;
}

function memoryFigures(): MemoryFigures {
  const m = process.memoryUsage();
  return { rss: mib(m.rss), heapTotal: mib(m.heapTotal), heapUsed: mib(m.heapUsed), external: mib(m.external), arrayBuffers: mib(m.arrayBuffers) };
}

let collect: (() => void) | undefined;

/** A full garbage collection of this process (the flag set at run time makes `gc` reachable in a new context, not as a global). */
export function collectGarbage(): void {
  if (!collect) {
    setFlagsFromString('--expose-gc');
    collect = runInNewContext('gc') as () => void;
  }
  collect();
}

/**
 * Runs `work` in this process (under the CPU profiler when `profileFile` is set) after a full
 * garbage collection, and measures its wall time, this process's CPU time, its RSS sampled every
 * 50 ms and the kernel's VmHWM (reset before the work through `/proc/self/clear_refs`).
 */
export async function inThisProcess<T>(profileFile: string | undefined, what: string, work: () => Promise<T>): Promise<ProcessRun<T>> {
  collectGarbage();
  const youngBefore = youngGenerationMb();
  const memoryBefore = memoryFigures();
  const baselineRssMb = memoryBefore.rss;
  const hwm = resetPeakRss();
  const sampler = new RssSampler();
  sampler.start(50);
  const cpu = process.cpuUsage();
  const t0 = performance.now();
  const value = await profiled(profileFile, what, work);
  const ms = performance.now() - t0;
  const used = process.cpuUsage(cpu);
  const peakRssMb = sampler.stop();
  const youngGenMb = { before: youngBefore, after: youngGenerationMb() };
  const memoryMb = { before: memoryBefore, after: memoryFigures() };
  return { value, ms, cpuSeconds: round((used.user + used.system) / 1e6, 2), baselineRssMb, peakRssMb, vmHwmMb: hwm ? vmHwmMb() : null, youngGenMb, memoryMb };
}

/** The physical size of V8's new space (the young generation) of this process, MiB. */
function youngGenerationMb(): number {
  const space = getHeapSpaceStatistics().find((s) => s.space_name === 'new_space');
  return space ? mib(space.physical_space_size) : 0;
}

/** Resets the kernel's peak RSS of this process (VmHWM) to its current RSS; false where that is refused. */
function resetPeakRss(): boolean {
  try {
    writeFileSync('/proc/self/clear_refs', '5');
    return true;
  } catch {
    return false;
  }
}

/** VmHWM of this process in MiB, or null without /proc. */
function vmHwmMb(): number | null {
  try {
    const kb = /^VmHWM:\s+(\d+) kB/m.exec(readFileSync('/proc/self/status', 'utf8'))?.[1];
    return kb ? round(Number(kb) / 1024, 1) : null;
  } catch {
    return null;
  }
}

/** The nearest-rank `p`th percentile of ascending `sorted` (NaN when empty). */
export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

export const mib = (bytes: number) => round(bytes / 1024 / 1024, 1);

/** CPU seconds spread over `units` (deliveries, requests), in whole µs each; null stays null, no units gives 0. */
export function usPer(seconds: number, units: number): number;
export function usPer(seconds: number | null, units: number): number | null;
export function usPer(seconds: number | null, units: number): number | null {
  if (seconds === null) return null;
  return units > 0 ? round((seconds * 1e6) / units) : 0;
}

export function round(value: number, digits = 0): number {
  const f = 10 ** digits;
  return Math.round(value * f) / f;
}

/**
 * What every bench result records of its run: the machine, the date, the 1/5/15-minute load
 * averages at the start and at the end (a busy machine explains low figures), and how long the
 * bench took. `benchStart` is `performance.now()` at the start, `loadAtStart` `loadavg()` then.
 */
export function machineFacts(benchStart: number, loadAtStart: number[], probe: MachineProbe | undefined = lastProbe) {
  return {
    node: process.version,
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model ?? 'unknown',
    memoryGb: round(totalmem() / 1024 ** 3, 1),
    date: new Date().toISOString(),
    loadAverage: { atStart: loadAtStart.map((l) => round(l, 2)), atEnd: loadavg().map((l) => round(l, 2)) },
    ...(probe ? { probe } : {}),
    code: codeVersion(),
    benchSeconds: round((performance.now() - benchStart) / 1000, 1),
  };
}

/**
 * The commit the bench ran from, and whether the working tree differed from it outside what a bench
 * run writes (bench/results, docs): figures of a dirty tree are not of that commit's code.
 */
export function codeVersion(): { commit: string; dirty: boolean | null } {
  const git = (...args: string[]) => execFileSync('git', args, { cwd: fileURLToPath(new URL('../..', import.meta.url)), encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  try {
    const commit = git('rev-parse', 'HEAD').trim();
    const changed = git('status', '--porcelain', '--untracked-files=no', '--', '.', ':!bench/results', ':!docs');
    return { commit, dirty: changed.trim() !== '' };
  } catch {
    return { commit: 'unknown', dirty: null };
  }
}

/**
 * What the machine itself did at the start of a bench, so that runs of different days can be read
 * side by side: the round trip of one byte between this process and another over TCP loopback
 * (median and p90 of `trips`, µs), which is what every statement to PostgreSQL and every request
 * between processes pays on top of its work; and one core's SHA-256 speed (MB/s), which is not
 * (on a virtual machine the first moves with how busy the host is while the second barely does).
 */
export interface MachineProbe {
  loopbackRoundTripUs: { p50: number; p90: number };
  sha256MBps: number;
}

/** The latest `probeMachine` answer: what `machineFacts` reports unless told otherwise. */
let lastProbe: MachineProbe | undefined;

/** Probes the machine (see MachineProbe), logs what it found through `log`, and keeps it for `machineFacts`. */
export async function probeMachine(log: (line: string) => void, trips = 2000): Promise<MachineProbe> {
  lastProbe = await probe(trips);
  log(
    `machine: a loopback round trip between two processes takes ${lastProbe.loopbackRoundTripUs.p50} µs (p50; p90 ${lastProbe.loopbackRoundTripUs.p90} µs), one core hashes ${lastProbe.sha256MBps} MB/s (SHA-256)`,
  );
  return lastProbe;
}

async function probe(trips: number): Promise<MachineProbe> {
  const { child, ready } = await forkReady<{ port: number }>('./echo-process.ts', 'the echo process');
  try {
    const port = ready.port;
    const socket = connect(port, '127.0.0.1');
    socket.setNoDelay(true);
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', resolve);
      socket.once('error', reject);
    });
    const times: number[] = [];
    await new Promise<void>((resolve) => {
      let sent = performance.now();
      socket.on('data', () => {
        const now = performance.now();
        times.push((now - sent) * 1000);
        if (times.length === trips + 100) return resolve();
        sent = performance.now();
        socket.write('x');
      });
      socket.write('x');
    });
    socket.destroy();
    // The first 100 warm the path up.
    const sorted = times.slice(100).sort((a, b) => a - b);
    const at = (q: number) => round(sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!, 0);
    const block = Buffer.alloc(1 << 20, 7);
    const started = performance.now();
    for (let i = 0; i < 200; i++) createHash('sha256').update(block).digest();
    return { loopbackRoundTripUs: { p50: at(0.5), p90: at(0.9) }, sha256MBps: Math.round(200 / ((performance.now() - started) / 1000)) };
  } finally {
    child.kill();
  }
}

/** Rows per second over a duration in milliseconds. */
export const perSecond = (rows: number, ms: number) => (ms > 0 ? Math.round((rows * 1000) / ms) : 0);

/** A fixed-width text table (first column left-aligned, the rest right-aligned). */
export function table(header: string[], rows: Array<Array<string | number>>): string {
  const cells = [header, ...rows.map((r) => r.map((c) => (typeof c === 'number' ? c.toLocaleString('en-US') : c)))];
  const widths = header.map((_h, i) => Math.max(...cells.map((r) => String(r[i] ?? '').length)));
  const line = (r: Array<string | number>) => r.map((c, i) => (i === 0 ? String(c).padEnd(widths[i]!) : String(c).padStart(widths[i]!))).join('  ');
  return [line(cells[0]!), widths.map((w) => '-'.repeat(w)).join('  '), ...cells.slice(1).map(line)].join('\n');
}

export interface DemoSourceProcess {
  url: string;
  pid: number;
  close(): Promise<void>;
}

/** Starts the demo source in a child process (bench/support/demo-source-process.ts) with `rows` records. */
export function startDemoSourceProcess(rows: number): Promise<DemoSourceProcess> {
  return forkReady<{ url: string }>('./demo-source-process.ts', 'the demo source process', { DEMO_ROWS: String(rows) }).then(({ child, ready }) => ({
    url: ready.url,
    pid: child.pid!,
    close: () =>
      new Promise<void>((done) => {
        if (child.exitCode !== null) return done();
        child.once('exit', () => done());
        child.kill('SIGTERM');
      }),
  }));
}

/**
 * Forks a TypeScript file of this folder (through tsx) and waits for its first IPC message, which
 * says it is ready (its address); fails when it exits or cannot start before that.
 */
function forkReady<T>(file: string, what: string, env: Record<string, string> = {}): Promise<{ child: ChildProcess; ready: T }> {
  const child = fork(fileURLToPath(new URL(file, import.meta.url)), [], { execArgv: ['--import', 'tsx'], env: { ...process.env, ...env }, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code) => reject(new Error(`${what} exited (code ${code}) before listening`)));
    child.once('message', (message) => {
      child.removeAllListeners('exit');
      resolve({ child, ready: message as T });
    });
  });
}

// ---------------------------------------------------------------------------------------------
// CPU time per process (Linux /proc), to tell which process a stage spent its time in.

export const TICKS_PER_SECOND = 100; // USER_HZ on Linux (getconf CLK_TCK)

/** utime + stime, cutime + cstime, the parent pid and the start time of a process, or undefined when it is gone or /proc is absent. */
export function procStat(pid: number): { ppid: number; self: number; children: number; start: number } | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  const f = text.slice(text.lastIndexOf(')') + 2).split(' ');
  return { ppid: Number(f[1]), self: Number(f[11]) + Number(f[12]), children: Number(f[13]) + Number(f[14]), start: Number(f[19]) };
}

/** The pids of a process's live children (every thread's `children` file), none when it is gone. */
export function childPids(pid: number): number[] {
  let tasks: string[];
  try {
    tasks = readdirSync(`/proc/${pid}/task`);
  } catch {
    return [];
  }
  const out: number[] = [];
  for (const tid of tasks) {
    try {
      for (const child of readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').split(' ')) if (child.trim()) out.push(Number(child));
    } catch {
      // The thread or the process ended meanwhile.
    }
  }
  return out;
}

/** CPU seconds of a process and everything it started (live children, and reaped ones through cutime). */
export function treeCpuSeconds(root: number): number | undefined {
  const top = procStat(root);
  if (!top) return undefined;
  let ticks = top.self + top.children;
  // The root's `children` files, not a scan of every process in /proc: the scan took ≈ 10 ms on a
  // busy machine, a stall of the bench process (the served hub, in bench/api) at each reading.
  for (const pid of childPids(root)) {
    const stat = procStat(pid);
    if (stat && stat.ppid === root) ticks += stat.self;
  }
  return ticks / TICKS_PER_SECOND;
}

/**
 * CPU seconds of a process and all its descendants, however deep, sampled every `everyMs` while
 * started: for servers whose per-connection processes are not reaped into the root's cutime (sshd's
 * session processes). Each process's utime + stime is read at every sample; a process that ends
 * between two samples loses at most one interval.
 */
export class TreeCpuSampler {
  private readonly ticks = new Map<string, { first: number; last: number }>();
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly root: number) {}

  start(everyMs = 100): void {
    this.ticks.clear();
    this.sample(true);
    this.timer = setInterval(() => this.sample(false), everyMs);
  }

  /** Stops sampling; answers the CPU seconds spent since start, or null when the root is gone. */
  stop(): number | null {
    clearInterval(this.timer);
    this.timer = undefined;
    this.sample(false);
    if (this.ticks.size === 0) return null;
    let ticks = 0;
    for (const t of this.ticks.values()) ticks += t.last - t.first;
    return ticks / TICKS_PER_SECOND;
  }

  private sample(initial: boolean): void {
    // The tree is walked through /proc/<pid>/task/<tid>/children: a few reads per sample, not one per process of the machine.
    const queue = [this.root];
    for (let visited = 0; queue.length > 0 && visited < 1000; visited++) {
      const pid = queue.shift()!;
      const stat = procStat(pid);
      if (!stat) continue;
      // Keyed by pid and start time, so that a reused pid is another process.
      const key = `${pid}:${stat.start}`;
      const known = this.ticks.get(key);
      if (known) known.last = stat.self;
      else this.ticks.set(key, { first: initial ? stat.self : 0, last: stat.self });
      queue.push(...childPids(pid));
    }
  }
}

/** CPU seconds of this process (`benchProcess`: the hub and the harness) and of each named process tree. */
export type CpuSplitOf<K extends string> = { benchProcess: number } & Record<K, number | null>;

/** The split the ingest bench reports: this process, the demo source and PostgreSQL (the postmaster and its backends). */
export type CpuSplit = CpuSplitOf<'demoSource' | 'postgres'>;

/**
 * Measures CPU seconds spent between start() and stop() by this process and by each named process
 * with everything it started (`treeCpuSeconds`); a name whose pid is unknown or gone gets null.
 */
export class CpuMeter<K extends string = 'demoSource' | 'postgres'> {
  private start0: { self: NodeJS.CpuUsage; trees: Map<K, number | undefined> } | undefined;

  constructor(private readonly pids: Record<K, number | undefined>) {}

  start(): void {
    this.start0 = { self: process.cpuUsage(), trees: new Map(this.names().map((k) => [k, this.tree(k)])) };
  }

  stop(): CpuSplitOf<K> {
    const s = this.start0!;
    const self = process.cpuUsage(s.self);
    const split = { benchProcess: round((self.user + self.system) / 1e6, 2) } as CpuSplitOf<K>;
    for (const k of this.names()) {
      const before = s.trees.get(k);
      const now = this.tree(k);
      (split as Record<K, number | null>)[k] = before !== undefined && now !== undefined ? round(now - before, 2) : null;
    }
    return split;
  }

  private names(): K[] {
    return Object.keys(this.pids) as K[];
  }

  private tree(k: K): number | undefined {
    const pid = this.pids[k];
    return pid ? treeCpuSeconds(pid) : undefined;
  }
}

/**
 * Waits until nothing is left for the hub's retrieval indexer (no pending ingestion hand-off, no
 * chunk without its vector): a hub with its background roles embeds the platform corpus after it
 * starts, and a core busy with the embedding model is not the cost of what a bench measures.
 * Answers how long that took (seconds).
 */
export function retrievalSettled(databaseUrl: string, timeoutMs = 600_000): Promise<number> {
  return waitInDatabase(databaseUrl, 500, timeoutMs, async (client) => {
    const { rows } = await client.query<{ left: number }>(
      `select (select count(*) from retrieval.pending)::int + (select count(*) from retrieval.chunks where embedding is null)::int as left`,
    );
    return rows[0]!.left === 0 ? undefined : `the retrieval backlog still holds ${rows[0]!.left} entries`;
  });
}

/**
 * Waits until autovacuum has analyzed each of `tables` whose changes since its last analysis pass
 * autovacuum's threshold (`autovacuum_analyze_threshold` + `autovacuum_analyze_scale_factor` × its
 * row estimate), as it has on a hub that has run for a minute or two: the planner's choice for a
 * listing depends on it (a table never analyzed is estimated at a few rows, so sorting all of a
 * tenant's rows looks as cheap as reading an index in order). Tables below the threshold are not
 * waited for (autovacuum leaves them too). Returns the seconds waited.
 */
export function analyzedByAutovacuum(databaseUrl: string, tables: string[], timeoutMs = 300_000): Promise<number> {
  return waitInDatabase(databaseUrl, 1_000, timeoutMs, async (client) => {
    const { rows } = await client.query<{ table: string }>(
      `select s.schemaname || '.' || s.relname as table
         from pg_stat_user_tables s join pg_class c on c.oid = s.relid
        where s.schemaname || '.' || s.relname = any($1::text[])
          and s.n_mod_since_analyze > current_setting('autovacuum_analyze_threshold')::int
              + current_setting('autovacuum_analyze_scale_factor')::float8 * greatest(c.reltuples, 0)`,
      [tables],
    );
    return rows.length === 0 ? undefined : `autovacuum has not analyzed ${rows.map((r) => r.table).join(', ')}`;
  });
}

/**
 * Asks `pending` every `everyMs` until it answers undefined (done); what it answers otherwise says
 * what is left, for the error after `timeoutMs`. Returns the seconds waited.
 */
async function waitInDatabase(databaseUrl: string, everyMs: number, timeoutMs: number, pending: (client: pg.Client) => Promise<string | undefined>): Promise<number> {
  const started = performance.now();
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    for (;;) {
      const left = await pending(client);
      if (left === undefined) return round((performance.now() - started) / 1000, 1);
      if (performance.now() - started > timeoutMs) throw new Error(`${left} after ${timeoutMs / 1000} s`);
      await new Promise((r) => setTimeout(r, everyMs));
    }
  } finally {
    await client.end();
  }
}

/** The postmaster's pid from `<cluster>/postmaster.pid`, or undefined. */
export function postmasterPid(clusterDir: string): number | undefined {
  try {
    const pid = Number(readFileSync(join(clusterDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
    return pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

export interface PauseFigures {
  count: number;
  totalMs: number;
  maxMs: number;
}

export interface GcFigures {
  minor: PauseFigures;
  major: PauseFigures;
  other: PauseFigures;
}

/**
 * Garbage-collection pauses of this process from now until `stop()` (PerformanceObserver `gc`
 * entries): scavenges, mark-compacts, and the rest (incremental steps, weak callbacks).
 */
export function gcPauses(): { stop(): GcFigures } {
  const pauses = { minor: [] as number[], major: [] as number[], other: [] as number[] };
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      const kind = (entry as PerformanceEntry & { detail?: { kind?: number } }).detail?.kind;
      (kind === perfConstants.NODE_PERFORMANCE_GC_MINOR ? pauses.minor : kind === perfConstants.NODE_PERFORMANCE_GC_MAJOR ? pauses.major : pauses.other).push(entry.duration);
    }
  });
  observer.observe({ entryTypes: ['gc'] });
  const summary = (ms: number[]): PauseFigures => ({ count: ms.length, totalMs: round(ms.reduce((sum, m) => sum + m, 0), 1), maxMs: round(Math.max(0, ...ms), 1) });
  return {
    stop() {
      observer.disconnect();
      return { minor: summary(pauses.minor), major: summary(pauses.major), other: summary(pauses.other) };
    },
  };
}

/** A perf_hooks.monitorEventLoopDelay histogram in milliseconds. */
export function loopDelay(h: IntervalHistogram): { p50Ms: number; p99Ms: number; maxMs: number } {
  return { p50Ms: round(h.percentile(50) / 1e6, 2), p99Ms: round(h.percentile(99) / 1e6, 2), maxMs: round(h.max / 1e6, 2) };
}
