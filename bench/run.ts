/**
 * `npm run bench`: every benchmark of bench/, one after the other, each in a fresh process (so one
 * bench's memory and JIT state never colour the next). `npm run bench -- ingest` runs the named ones.
 * When every bench asked for succeeded, the tables of docs/performance.md are rendered again from
 * bench/results (bench/report.ts).
 * Benchmarks are never part of `npm test` (jest's roots leave bench/ out).
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { HUB_MALLOC_ENV, HUB_NODE_FLAGS } from './support/hub-flags.js';

const BENCHES = ['ingest', 'deliver', 'api', 'search', 'export', 'workflows'] as const;

const asked = process.argv.slice(2);
const unknown = asked.filter((name) => !(BENCHES as readonly string[]).includes(name));
if (unknown.length) {
  process.stderr.write(`unknown benchmark ${unknown.join(', ')}; known: ${BENCHES.join(', ')}\n`);
  process.exit(2);
}

let failed = 0;
for (const name of asked.length ? asked : BENCHES) {
  const file = fileURLToPath(new URL(`./${name}.ts`, import.meta.url));
  process.stdout.write(`\n=== bench ${name} ===\n`);
  const code = await new Promise<number>((resolve) => {
    const child = spawn(process.execPath, [...HUB_NODE_FLAGS, '--import', 'tsx', file], { stdio: 'inherit', env: { ...process.env, ...HUB_MALLOC_ENV } });
    child.on('exit', (status, signal) => resolve(status ?? (signal ? 1 : 0)));
  });
  if (code !== 0) {
    failed += 1;
    process.stderr.write(`bench ${name} failed (exit ${code})\n`);
  }
}
if (!failed) {
  // docs/performance.md's tables come from bench/results (bench/report.ts); each table names its run's date.
  const report = fileURLToPath(new URL('./report.ts', import.meta.url));
  await new Promise<void>((resolve) => spawn(process.execPath, ['--import', 'tsx', report], { stdio: 'inherit' }).on('exit', () => resolve()));
}
process.exit(failed ? 1 : 0);
