/**
 * The load generator of bench/api in a process of its own, so its CPU never runs on the event loop
 * of the server it measures. One autocannon instance per route, all at once, each at its share of
 * the total rate (an even split), every response time recorded (2xx or not) for exact percentiles.
 *
 * Started with `fork()`; one request, one answer (IPC):
 *   parent → LoadRequest      child → {ok: true, figures: LoadFigures} | {ok: false, error}
 */
import autocannon from 'autocannon';

export interface LoadTarget {
  /** A short label: the route's path template. */
  name: string;
  url: string;
  headers: Record<string, string>;
}

export interface LoadRequest {
  targets: LoadTarget[];
  /** Requests per second over all targets. */
  rate: number;
  seconds: number;
  /** Connections per target (each paced at its share of the target's rate). */
  connections: number;
}

export interface LatencyFigures {
  requests: number;
  /** Requests per second actually completed. */
  perSec: number;
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

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

const round2 = (n: number) => Math.round(n * 100) / 100;

function figures(times: number[], errors: number, non2xx: number, seconds: number): LatencyFigures {
  const sorted = [...times].sort((a, b) => a - b);
  return {
    requests: sorted.length,
    perSec: Math.round(sorted.length / seconds),
    p50: round2(percentile(sorted, 50)),
    p90: round2(percentile(sorted, 90)),
    p99: round2(percentile(sorted, 99)),
    max: round2(sorted[sorted.length - 1] ?? Number.NaN),
    errors,
    non2xx,
  };
}

export async function load(request: LoadRequest): Promise<LoadFigures> {
  const share = (i: number) => Math.floor(request.rate / request.targets.length) + (i < request.rate % request.targets.length ? 1 : 0);
  const cpu0 = process.cpuUsage();
  const all: number[] = [];
  let allErrors = 0;
  let allNon2xx = 0;
  const routes: Record<string, LatencyFigures> = {};
  await Promise.all(
    request.targets.map(
      (target, i) =>
        new Promise<void>((resolve, reject) => {
          const times: number[] = [];
          let non2xx = 0;
          const instance = autocannon(
            { url: target.url, headers: target.headers, connections: request.connections, overallRate: share(i), duration: request.seconds, timeout: 10 },
            (err, result) => {
              if (err) return reject(err);
              const errors = result.errors + result.timeouts;
              routes[target.name] = figures(times, errors, non2xx, request.seconds);
              allErrors += errors;
              allNon2xx += non2xx;
              resolve();
            },
          );
          instance.on('response', (_client, statusCode, _bytes, responseTime) => {
            times.push(responseTime);
            all.push(responseTime);
            if (statusCode < 200 || statusCode > 299) non2xx += 1;
          });
        }),
    ),
  );
  const cpu = process.cpuUsage(cpu0);
  return { overall: figures(all, allErrors, allNon2xx, request.seconds), routes, clientCpuSeconds: round2((cpu.user + cpu.system) / 1e6) };
}

if (process.send) {
  process.once('message', (message: LoadRequest) => {
    load(message).then(
      (figures) => process.send!({ ok: true, figures } satisfies LoadAnswer, () => process.exit(0)),
      (err: unknown) => process.send!({ ok: false, error: err instanceof Error ? err.message : String(err) } satisfies LoadAnswer, () => process.exit(1)),
    );
  });
}
