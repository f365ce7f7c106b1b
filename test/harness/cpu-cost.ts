import { cpuMs } from './loop-held.js';

/**
 * The least processor time, in milliseconds, that `work` took over `samples` runs of it (each run
 * `repeat` calls, for work too short to time once). Processor time leaves out the machine's other
 * work, and the least of a few runs leaves out a collection of the heap or a burst of the process's
 * own threads in one of them: what is left is the work's cost, to compare with a baseline measured
 * the same way in the same test (the same work done the cheap way, or on a smaller input).
 */
export async function leastCpuMs(work: () => unknown, options: { samples?: number; repeat?: number } = {}): Promise<number> {
  const { samples = 5, repeat = 1 } = options;
  let least = Number.POSITIVE_INFINITY;
  for (let s = 0; s < samples; s++) {
    const started = cpuMs();
    for (let r = 0; r < repeat; r++) await work();
    least = Math.min(least, cpuMs() - started);
  }
  return least;
}
