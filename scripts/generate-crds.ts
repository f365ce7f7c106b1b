import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { renderCrds } from '../src/manifests/crd.js';

/**
 * Writes crds/<plural>.<group>.yaml for every manifest kind registered in src/manifests/kinds.ts
 * (src/manifests/crd.ts does the translation) and removes crds/*.yaml no kind produces any more.
 * test/crds.test.ts fails while crds/ is stale. Then `npm run chart:crds` copies them into the chart.
 *
 *   npm run crds
 */

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
export const CRDS_DIR = join(root, 'crds');

export function generateCrds(dir = CRDS_DIR): string[] {
  const files = renderCrds();
  const changes: string[] = [];
  mkdirSync(dir, { recursive: true });
  for (const file of existsSync(dir) ? readdirSync(dir) : []) {
    if (file.endsWith('.yaml') && !files.has(file)) {
      rmSync(join(dir, file));
      changes.push(`removed crds/${file}`);
    }
  }
  for (const [file, text] of files) {
    const path = join(dir, file);
    if (existsSync(path) && readFileSync(path, 'utf8') === text) continue;
    writeFileSync(path, text);
    changes.push(`wrote crds/${file}`);
  }
  return changes;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const changes = generateCrds();
  process.stdout.write(changes.length ? `${changes.join('\n')}\nnow run npm run chart:crds\n` : 'crds/ is up to date\n');
}
