/**
 * The longest the event loop was held at once while `work` ran (and `afterMs` after it: a hold right after an answer
 * counts), with the value `work` gave: the largest gap between two ticks of an `everyMs` timer. The code measured
 * runs in this process (a test hub, a writer on a test database).
 */
export async function loopHeld<T>(work: () => Promise<T>, options: { everyMs?: number; afterMs?: number } = {}): Promise<{ value: T; heldMs: number }> {
  const { everyMs = 2, afterMs = 10 } = options;
  let last = performance.now();
  let heldMs = 0;
  const ticks = setInterval(() => {
    const now = performance.now();
    heldMs = Math.max(heldMs, now - last);
    last = now;
  }, everyMs);
  try {
    const value = await work();
    await new Promise((resolve) => setTimeout(resolve, afterMs));
    return { value, heldMs };
  } finally {
    clearInterval(ticks);
  }
}
