import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { Worker, type ResourceLimits } from 'node:worker_threads';

/**
 * Starts a worker thread on a module of the hub given relative to the caller's own module (`import.meta.url`), by its
 * name without extension: `startWorker(import.meta.url, './local-worker')` runs local-worker.ts in a source checkout
 * (tests, `tsx`) and local-worker.js in the build. A TypeScript entry needs tsx's loader, which the main thread may
 * have registered through its API (bin/launch.js) rather than through a flag a worker would inherit, so a tiny
 * bootstrap registers it in the worker before importing the entry.
 */
export function startWorker(from: string, entry: string, resourceLimits?: ResourceLimits): Worker {
  const typescript = from.endsWith('.ts');
  const href = new URL(`${entry}${typescript ? '.ts' : '.js'}`, from).href;
  const tsx = typescript ? tsxEsmApi(from) : undefined;
  return new Worker(BOOTSTRAP, { eval: true, workerData: { entry: href, tsx }, ...(resourceLimits ? { resourceLimits } : {}) });
}

/**
 * The file of tsx's ESM API (`tsx/esm/api` under the import condition): its CommonJS twin, what
 * `require.resolve` would find, cannot register the loader from a worker.
 */
function tsxEsmApi(from: string): string {
  const require = createRequire(from);
  const manifest = require.resolve('tsx/package.json');
  const { exports } = JSON.parse(readFileSync(manifest, 'utf8')) as { exports: Record<string, { import?: { default?: string } }> };
  const file = exports['./esm/api']?.import?.default;
  if (!file) throw new Error('tsx does not export ./esm/api for import');
  return join(dirname(manifest), file);
}

/** Runs in the worker (CommonJS script): registers tsx when the entry is TypeScript, then imports it. */
const BOOTSTRAP = `
const { workerData } = require('node:worker_threads');
const { pathToFileURL } = require('node:url');
(async () => {
  if (workerData.tsx) (await import(pathToFileURL(workerData.tsx).href)).register();
  await import(workerData.entry);
})().catch((err) => { setImmediate(() => { throw err; }); });
`;
