import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

// A full collection on demand: what is sampled is what the process keeps, not garbage the
// collector has not reached yet (which, left alone, can be tens of MB at any moment).
setFlagsFromString('--expose-gc');
const collectGarbage = runInNewContext('gc') as () => void;

/**
 * Live JavaScript objects and buffers after full collections, in bytes. The memory of a dead buffer
 * is released by a background sweep after the collection: a turn of the event loop and a second
 * collection let that finish, so that only what is still referenced is counted.
 */
export function retained(): Promise<number> {
  collectGarbage();
  return new Promise((resolve) =>
    setImmediate(() => {
      collectGarbage();
      const m = process.memoryUsage();
      resolve(m.heapUsed + m.arrayBuffers);
    }),
  );
}
