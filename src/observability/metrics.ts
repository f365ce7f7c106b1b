import { collectDefaultMetrics, Counter, type CounterConfiguration, Gauge, type GaugeConfiguration, Registry } from 'prom-client';

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
  return lazyMetric(config.name, () => new Counter<L>({ ...config, registers: [registry] }));
}

/** A gauge registered on first use, as counters are (lazyCounter). */
export function lazyGauge<L extends string>(config: Omit<GaugeConfiguration<L>, 'registers'>): () => Gauge<L> {
  return lazyMetric(config.name, () => new Gauge<L>({ ...config, registers: [registry] }));
}

function lazyMetric<M>(name: string, make: () => M): () => M {
  let metric: M | undefined;
  return () => {
    metric ??= (registry.getSingleMetric(name) as M | undefined) ?? make();
    return metric;
  };
}
