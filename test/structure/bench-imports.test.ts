import { describe, expect, it } from '@jest/globals';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The benchmarks run outside jest (`npm run bench`): nothing they import, however indirectly, may
 * import `@jest/globals` (it only works inside jest; the export bench once failed at start because
 * the sshd harness it uses also held a jest helper).
 */

const root = fileURLToPath(new URL('../..', import.meta.url));

function relativeImports(file: string): string[] {
  const text = readFileSync(join(root, file), 'utf8');
  const out: string[] = [];
  for (const match of text.matchAll(/(?:^|\n)\s*(?:import|export)\b[^'"]*?from\s+['"](\.{1,2}\/[^'"]+)['"]/g)) {
    const target = relative(root, resolve(dirname(join(root, file)), match[1]!.replace(/\.js$/, '.ts')));
    if (existsSync(join(root, target))) out.push(target);
  }
  return out;
}

describe('the benchmarks', () => {
  const entries = readdirSync(join(root, 'bench'), { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith('.ts') && !e.name.endsWith('.d.ts'))
    .map((e) => relative(root, join(e.parentPath, e.name)));

  it('import nothing that imports @jest/globals', () => {
    expect(entries).toContain('bench/export.ts');
    const seen = new Set<string>();
    const offenders: string[] = [];
    const walk = (file: string, path: string[]) => {
      if (seen.has(file)) return;
      seen.add(file);
      if (/from\s+['"]@jest\/globals['"]/.test(readFileSync(join(root, file), 'utf8'))) offenders.push([...path, file].join(' -> '));
      for (const next of relativeImports(file)) walk(next, [...path, file]);
    };
    for (const entry of entries) walk(entry, []);
    // The walk reaches the harnesses the benchmarks share with the tests.
    expect(seen).toContain('test/harness/sshd.ts');
    expect(offenders).toEqual([]);
  });
});
