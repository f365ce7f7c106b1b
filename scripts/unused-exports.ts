import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * Lists exports no other file names: `unused` (nothing uses them: delete them) and `inside` (only
 * their own file does: drop the `export`). A word search over every tracked .ts/.js file, so it errs
 * on the side of keeping (a name that also appears in an unrelated file counts as used).
 *
 *   npx tsx scripts/unused-exports.ts
 */

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const DECLARATION = /^export\s+(?:declare\s+)?(?:default\s+)?(?:async\s+)?(?:abstract\s+)?(?:function\*?|class|const|let|var|interface|type|enum)\s+([A-Za-z_$][\w$]*)/gm;

export function unusedExports(): Array<{ file: string; name: string; kind: 'unused' | 'inside' }> {
  const files = execFileSync('git', ['ls-files', '*.ts', '*.js'], { cwd: root }).toString().trim().split('\n');
  const text = new Map(files.map((f) => [f, readFileSync(join(root, f), 'utf8')]));
  const found: Array<{ file: string; name: string; kind: 'unused' | 'inside' }> = [];
  for (const [file, source] of text) {
    for (const [, name] of source.matchAll(DECLARATION)) {
      const word = new RegExp(`\\b${name!.replace(/\$/g, '\\$')}\\b`, 'g');
      if ([...text].some(([other, o]) => other !== file && o.search(word) >= 0)) continue;
      found.push({ file, name: name!, kind: (source.match(word) ?? []).length > 1 ? 'inside' : 'unused' });
    }
  }
  return found;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  for (const { file, name, kind } of unusedExports()) process.stdout.write(`${kind}\t${file}\t${name}\n`);
}
