/**
 * `work`, or a rejection with `signal.reason` as soon as `signal` aborts, whichever comes first
 * (already aborted: at once). The abort is listened for only while this wait lasts: a loop that
 * waits for one item after another (a run's pages, an upload's parts) leaves nothing behind per
 * item. A `Promise.race` of each item against one promise of the abort, made once for the loop,
 * left a reaction on that promise per item, each keeping its item: everything read stayed in
 * memory until the loop ended. `work` settling later is ignored (no unhandled rejection).
 */
export function unlessAborted<T>(work: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return work;
  work.catch(() => {});
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (err: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(err);
      },
    );
  });
}
