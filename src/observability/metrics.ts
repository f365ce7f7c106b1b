import { collectDefaultMetrics, Counter, Registry, type CounterConfiguration } from 'prom-client';

/** The one registry every module shares; /q/metrics serves it. */
export const registry = new Registry();

let defaultsCollected = false;

/** Process metrics (CPU, memory, event loop, handles), once per process. */
export function collectProcessMetrics(): void {
  if (defaultsCollected) return;
  defaultsCollected = true;
  collectDefaultMetrics({ register: registry });
}

/**
 * A counter registered on first use, as spec 1 says: a metric that has never moved is absent from
 * /q/metrics rather than shown at zero.
 */
export function lazyCounter<L extends string>(config: Omit<CounterConfiguration<L>, 'registers'>): () => Counter<L> {
  let metric: Counter<L> | undefined;
  return () => {
    if (!metric) {
      metric = (registry.getSingleMetric(config.name) as Counter<L> | undefined) ?? new Counter<L>({ ...config, registers: [registry] });
    }
    return metric;
  };
}
