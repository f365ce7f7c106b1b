import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * Copies the repository's crds/*.yaml into charts/svc-hub/files/crds/, which the chart renders
 * (templates/crds.yaml). Helm reads only files inside the chart, hence the copy; run it after the CRDs
 * are regenerated and before `helm package`. test/chart.test.ts fails while the copy is stale.
 *
 *   npm run chart:crds             update the copy
 *   npm run chart:crds -- --check  exit 1 and name the differences instead
 */

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
export const SOURCE_DIR = join(root, 'crds');
export const CHART_CRDS_DIR = join(root, 'charts', 'svc-hub', 'files', 'crds');

const manifests = (dir: string): string[] =>
  existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith('.yaml')).sort() : [];

/** Differences between crds/ and the chart's copy, one line each; empty when in sync. */
export function chartCrdsDrift(source = SOURCE_DIR, copy = CHART_CRDS_DIR): string[] {
  const wanted = manifests(source);
  const present = new Set(manifests(copy));
  const drift: string[] = [];
  for (const file of wanted) {
    if (!present.has(file)) drift.push(`missing in the chart: ${file}`);
    else if (!readFileSync(join(source, file)).equals(readFileSync(join(copy, file)))) drift.push(`stale in the chart: ${file}`);
    present.delete(file);
  }
  for (const file of present) drift.push(`no longer in crds/: ${file}`);
  return drift;
}

/** Makes the chart's copy equal to crds/*.yaml; returns what changed. */
export function syncChartCrds(source = SOURCE_DIR, copy = CHART_CRDS_DIR): string[] {
  const drift = chartCrdsDrift(source, copy);
  mkdirSync(copy, { recursive: true });
  const wanted = new Set(manifests(source));
  for (const file of manifests(copy)) if (!wanted.has(file)) rmSync(join(copy, file));
  for (const file of wanted) copyFileSync(join(source, file), join(copy, file));
  return drift;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  if (process.argv.includes('--check')) {
    const drift = chartCrdsDrift();
    for (const line of drift) process.stderr.write(`${line}\n`);
    if (drift.length) process.stderr.write('charts/svc-hub/files/crds is stale: run npm run chart:crds\n');
    process.exit(drift.length ? 1 : 0);
  }
  const changes = syncChartCrds();
  process.stdout.write(changes.length ? `${changes.join('\n')}\n` : 'charts/svc-hub/files/crds is up to date\n');
}
