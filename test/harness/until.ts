/**
 * Polls `probe` until it gives something truthy and returns that, or throws `timed out waiting for
 * <what>` (plus `detail()`, when given, to show what the test saw) after `timeoutMs`. What tests use
 * instead of sleeping for a fixed time.
 */
export interface UntilOptions {
  timeoutMs?: number;
  everyMs?: number;
  detail?: () => string;
}

type Probe<T> = () => T | undefined | null | false | Promise<T | undefined | null | false>;

export async function until<T>(what: string, probe: Probe<T>, options: number | UntilOptions = {}): Promise<T> {
  const { timeoutMs = 10_000, everyMs = 25, detail } = typeof options === 'number' ? { timeoutMs: options } : options;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${detail ? `; ${detail()}` : ''}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
