/**
 * The demo source in a process of its own, for benchmarks: the source is another system, so its
 * records, its JSON serialisation and its CPU stay out of the measured process. Started with
 * `fork()` by a benchmark; answers `{url}` on the IPC channel once listening, closes on SIGTERM or
 * when the parent goes away.
 */
import { startDemoSource } from '../../src/demo-source/server.js';

const rows = Number(process.env.DEMO_ROWS ?? '2400');
const source = await startDemoSource({ port: 0, host: '127.0.0.1', rows, log: () => undefined });
process.send?.({ url: source.url, rows });

let stopping = false;
const stop = () => {
  if (stopping) return;
  stopping = true;
  source.close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
};
process.on('SIGTERM', stop);
process.on('disconnect', stop);
