/**
 * The longest the event loop was held at once while `work` ran (and `afterMs` after it: a hold right after an answer
 * counts), with the value `work` gave: the largest gap between two ticks of an `everyMs` timer, in time (`heldMs`) and
 * in the processor time the process used meanwhile (`heldCpuMs`: the machine's other work, which takes the core from
 * this process in the middle of a stretch, is not in it; a collection by the process's own heap is). The code measured
 * runs in this process (a test hub, a writer on a test database).
 */
export async function loopHeld<T>(work: () => Promise<T>, options: { everyMs?: number; afterMs?: number } = {}): Promise<{ value: T; heldMs: number; heldCpuMs: number }> {
  const { everyMs = 2, afterMs = 10 } = options;
  let last = performance.now();
  let lastCpu = cpuMs();
  let heldMs = 0;
  let heldCpuMs = 0;
  const ticks = setInterval(() => {
    const now = performance.now();
    const cpu = cpuMs();
    heldMs = Math.max(heldMs, now - last);
    heldCpuMs = Math.max(heldCpuMs, cpu - lastCpu);
    last = now;
    lastCpu = cpu;
  }, everyMs);
  try {
    const value = await work();
    await new Promise((resolve) => setTimeout(resolve, afterMs));
    return { value, heldMs, heldCpuMs };
  } finally {
    clearInterval(ticks);
  }
}

/** The processor time (user and system) this process has used, in milliseconds. */
export function cpuMs(): number {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1000;
}
