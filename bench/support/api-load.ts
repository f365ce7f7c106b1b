/**
 * The load generators of bench/api, in a process of their own, so their CPU never runs on the event
 * loop of the server they measure. Two ways to send the same rate:
 *
 * - `even`: open loop. Request k (over all routes, round robin) is due at start + k / rate and sent
 *   then, whatever is still in flight (on an undici Pool of `connections` per route; a request
 *   waits in the pool when all are busy). Its time runs from when it was due, not from when it left,
 *   so a late generator or a full pool counts against the server (no coordinated omission).
 * - `autocannon`: one autocannon instance per route at its share of the rate. autocannon paces a
 *   connection by a quota per second: it sends back to back until the quota is spent, then waits
 *   for the next second (lib/httpClient.js, `reqsMadeThisSecond`). So every second opens with all
 *   connections busy at once: a burst of up to `connections` × routes concurrent requests.
 *
 * In both, every response time is recorded (2xx or not) for exact percentiles, and the load is
 * timed as it ran, from its first request sent to its last answer received: requests per second
 * are the answers over that time, below the rate when the load fell behind. With `warmupSeconds`,
 * the same process first sends the same load for that long, unrecorded, on the same connections
 * (even pacing) or through the same warmed-up autocannon code: the measured part holds neither the
 * generator's own start (a fresh process compiling its code on a shared 2-core machine sends late,
 * which even pacing rightly charges to the server) nor the connections' set-up.
 *
 * Started with `fork()`; one request, one answer (IPC):
 *   parent → LoadRequest      child → {measuring: true} (warm-up over, nothing in flight)
 *   parent → {go: true}               (its meters started)
 *                             child → {ok: true, figures: LoadFigures} | {ok: false, error}
 * The measured load waits for `go`, so whatever the parent does to start its meters (reading /proc,
 * enabling histograms) happens while nothing is in flight rather than inside the measured part.
 */
import autocannon from 'autocannon';
import { Pool } from 'undici';
import { percentile } from './measure.js';

export interface LoadTarget {
  /** A short label: the route's path template. */
  name: string;
  url: string;
  /**
   * The request headers, one set per connection (at least one; each set its own caller's
   * `Authorization`, say). autocannon: connection i sends set i (modulo their number). Even pacing:
   * the route's requests take the sets in turn (its pool picks the connection).
   */
  headers: Array<Record<string, string>>;
}

export interface LoadRequest {
  targets: LoadTarget[];
  /** Requests per second over all targets. */
  rate: number;
  seconds: number;
  /** Seconds of the same load sent first and not recorded (0: none). */
  warmupSeconds: number;
  /** Connections per target (the most requests in flight per target). */
  connections: number;
  /** How requests are spread over each second (see the top of this file). */
  pacing: 'even' | 'autocannon';
}

export interface LatencyFigures {
  requests: number;
  /** Requests answered per second of `elapsedSeconds`: below the rate when the load fell behind. */
  perSec: number;
  /** Measured seconds from the first request sent to the last answer received (of the route, or over all). */
  elapsedSeconds: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  /** Connection errors and timeouts. */
  errors: number;
  non2xx: number;
}

export interface LoadFigures {
  overall: LatencyFigures;
  routes: Record<string, LatencyFigures>;
  clientCpuSeconds: number;
}

export type LoadAnswer = { ok: true; figures: LoadFigures } | { ok: false; error: string };
/** Sent by the child when its warm-up is over; the measured part starts at the parent's `LoadGo`. */
export type LoadProgress = { measuring: true };
export type LoadGo = { go: true };

const round2 = (n: number) => Math.round(n * 100) / 100;

/** When a load's first request left and its last answer arrived (performance.now() ms), to time the load as it ran. */
class Span {
  first = Number.POSITIVE_INFINITY;
  last = Number.NEGATIVE_INFINITY;

  sent(at: number): void {
    if (at < this.first) this.first = at;
  }

  answered(at: number): void {
    if (at > this.last) this.last = at;
  }

  /** Seconds from the first request sent to the last answer (NaN when nothing was answered). */
  seconds(): number {
    return this.last > this.first ? (this.last - this.first) / 1000 : Number.NaN;
  }
}

function figures(times: number[], errors: number, non2xx: number, span: Span): LatencyFigures {
  const sorted = [...times].sort((a, b) => a - b);
  const elapsed = span.seconds();
  return {
    requests: sorted.length,
    perSec: Math.round((sorted.length / elapsed) * 10) / 10,
    elapsedSeconds: Math.round(elapsed * 1000) / 1000,
    p50: round2(percentile(sorted, 50)),
    p90: round2(percentile(sorted, 90)),
    p99: round2(percentile(sorted, 99)),
    max: round2(sorted[sorted.length - 1] ?? Number.NaN),
    errors,
    non2xx,
  };
}

/** The warm-up (unrecorded), `measuring()` (the measured load starts when it resolves), then the measured load. */
export async function load(request: LoadRequest, measuring: () => void | Promise<void> = () => undefined): Promise<LoadFigures> {
  if (request.pacing === 'autocannon') {
    if (request.warmupSeconds > 0) await autocannonLoad({ ...request, seconds: request.warmupSeconds });
    await measuring();
    return autocannonLoad(request);
  }
  const pools = request.targets.map((target) => new Pool(new URL(target.url).origin, { connections: request.connections, pipelining: 1, headersTimeout: 10_000, bodyTimeout: 10_000 }));
  try {
    if (request.warmupSeconds > 0) await evenLoad({ ...request, seconds: request.warmupSeconds }, pools);
    await measuring();
    return await evenLoad(request, pools);
  } finally {
    await Promise.all(pools.map((pool) => pool.close()));
  }
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** The even load on `pools` (one per target, in the targets' order; the caller closes them). */
async function evenLoad(request: LoadRequest, pools: Pool[]): Promise<LoadFigures> {
  const cpu0 = process.cpuUsage();
  const n = request.targets.length;
  const perTarget = request.targets.map((target, i) => {
    const url = new URL(target.url);
    return {
      target,
      path: `${url.pathname}${url.search}`,
      pool: pools[i]!,
      sent: 0,
      times: [] as number[],
      errors: 0,
      non2xx: 0,
      span: new Span(),
    };
  });
  const all: number[] = [];
  const allSpan = new Span();
  const total = Math.round(request.rate * request.seconds);
  const interval = 1000 / request.rate;
  const inFlight = new Set<Promise<void>>();
  const fire = (k: number, due: number) => {
    const t = perTarget[k % n]!;
    const sentAt = performance.now();
    t.span.sent(sentAt);
    allSpan.sent(sentAt);
    const headers = t.target.headers[t.sent++ % t.target.headers.length]!;
    const done = t.pool
      .request({ method: 'GET', path: t.path, headers })
      .then(async (res) => {
        await res.body.dump({ limit: Number.MAX_SAFE_INTEGER });
        const answeredAt = performance.now();
        t.span.answered(answeredAt);
        allSpan.answered(answeredAt);
        const time = answeredAt - due;
        t.times.push(time);
        all.push(time);
        if (res.statusCode < 200 || res.statusCode > 299) t.non2xx += 1;
      })
      .catch(() => {
        t.errors += 1;
      })
      .finally(() => inFlight.delete(done));
    inFlight.add(done);
  };
  const start = performance.now() + 20;
  let k = 0;
  while (k < total) {
    const now = performance.now();
    for (; k < total && start + k * interval <= now; k++) fire(k, start + k * interval);
    if (k < total) await sleep(Math.max(0, start + k * interval - performance.now()));
  }
  while (inFlight.size > 0) await Promise.all([...inFlight]);
  const routes: Record<string, LatencyFigures> = {};
  for (const t of perTarget) routes[t.target.name] = figures(t.times, t.errors, t.non2xx, t.span);
  const errors = perTarget.reduce((s, t) => s + t.errors, 0);
  const non2xx = perTarget.reduce((s, t) => s + t.non2xx, 0);
  const cpu = process.cpuUsage(cpu0);
  return { overall: figures(all, errors, non2xx, allSpan), routes, clientCpuSeconds: round2((cpu.user + cpu.system) / 1e6) };
}

async function autocannonLoad(request: LoadRequest): Promise<LoadFigures> {
  const share = (i: number) => Math.floor(request.rate / request.targets.length) + (i < request.rate % request.targets.length ? 1 : 0);
  const cpu0 = process.cpuUsage();
  const all: number[] = [];
  const allSpan = new Span();
  let allErrors = 0;
  let allNon2xx = 0;
  const routes: Record<string, LatencyFigures> = {};
  await Promise.all(
    request.targets.map(
      (target, i) =>
        new Promise<void>((resolve, reject) => {
          const times: number[] = [];
          const span = new Span();
          let non2xx = 0;
          let clients = 0;
          const instance = autocannon(
            {
              url: target.url,
              connections: request.connections,
              overallRate: share(i),
              duration: request.seconds,
              timeout: 10,
              // Called once per connection as autocannon opens them: each sends its own headers.
              setupClient: (client) => client.setHeaders(target.headers[clients++ % target.headers.length]!),
            },
            (err, result) => {
              if (err) return reject(err);
              const errors = result.errors + result.timeouts;
              routes[target.name] = figures(times, errors, non2xx, span);
              allErrors += errors;
              allNon2xx += non2xx;
              resolve();
            },
          );
          instance.on('response', (_client, statusCode, _bytes, responseTime) => {
            // autocannon tells no send time: the answer's arrival less its response time is when it left.
            const answeredAt = performance.now();
            span.sent(answeredAt - responseTime);
            span.answered(answeredAt);
            allSpan.sent(answeredAt - responseTime);
            allSpan.answered(answeredAt);
            times.push(responseTime);
            all.push(responseTime);
            if (statusCode < 200 || statusCode > 299) non2xx += 1;
          });
        }),
    ),
  );
  const cpu = process.cpuUsage(cpu0);
  return { overall: figures(all, allErrors, allNon2xx, allSpan), routes, clientCpuSeconds: round2((cpu.user + cpu.system) / 1e6) };
}

if (process.send) {
  process.once('message', (message: LoadRequest) => {
    const measuring = () =>
      new Promise<void>((resolve) => {
        process.once('message', (go: LoadGo) => {
          if (go.go) resolve();
        });
        process.send!({ measuring: true } satisfies LoadProgress);
      });
    load(message, measuring).then(
      (figures) => process.send!({ ok: true, figures } satisfies LoadAnswer, () => process.exit(0)),
      (err: unknown) => process.send!({ ok: false, error: err instanceof Error ? err.message : String(err) } satisfies LoadAnswer, () => process.exit(1)),
    );
  });
}
