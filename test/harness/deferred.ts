/** A promise and the function that resolves it, for a test that lets one step go on from another (Promise.withResolvers, Node 22). */
export function deferred<T = void>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}
