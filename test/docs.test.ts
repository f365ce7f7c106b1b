import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { describe, expect, it } from '@jest/globals';
import { packageRoot } from '../src/package-root.js';

/**
 * The product's documentation stands alone: it states each decision itself and never points at
 * design notes or specification sections that live outside the repository, and every relative
 * link in it leads to a file that exists.
 */

const ROOT = packageRoot();

function markdownFiles(): string[] {
  const files = ['README.md'];
  const walk = (dir: string) => {
    for (const name of readdirSync(join(ROOT, dir))) {
      const path = join(dir, name);
      if (name === 'node_modules' || name.startsWith('.')) continue;
      if (statSync(join(ROOT, path)).isDirectory()) walk(path);
      else if (name.endsWith('.md')) files.push(path);
    }
  };
  for (const dir of ['docs', 'bench', 'e2e', 'operator', 'charts']) if (existsSync(join(ROOT, dir))) walk(dir);
  return files;
}

/** What points outside the repository: the design folder, its files, numbered spec sections. */
const OUTSIDE = [/\.\.\/shared\b/, /\bshared\/(spec|design)\b/, /\bCONTRACTS(\.md)?\b/, /\bARCHITECTURE\.md\b/, /\bspec [0-9]\b/i, /\bSTYLE\.md\b/, /\bTOOLCHAIN\.md\b/];

describe('documentation', () => {
  const files = markdownFiles();

  it('finds the documents', () => {
    expect(files).toEqual(expect.arrayContaining(['README.md', join('docs', 'architecture.md')]));
  });

  it.each(files)('%s refers to nothing outside the repository', (file) => {
    const lines = readFileSync(join(ROOT, file), 'utf8').split('\n');
    const hits = lines.flatMap((line, i) => (OUTSIDE.some((re) => re.test(line)) ? [`${file}:${i + 1}: ${line.trim()}`] : []));
    expect(hits).toEqual([]);
  });

  it.each(files)('%s links only to files that exist', (file) => {
    // Code (fenced blocks and inline spans) holds patterns such as `[a-z](…)`, not links.
    const text = readFileSync(join(ROOT, file), 'utf8').replace(/```[\s\S]*?```/g, '').replace(/`[^`\n]*`/g, '');
    const broken: string[] = [];
    for (const match of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      const target = match[1] ?? '';
      if (/^[a-z]+:/i.test(target) || target.startsWith('#')) continue;
      const path = join(dirname(join(ROOT, file)), target.split('#')[0] ?? '');
      if (!existsSync(path)) broken.push(`${file} -> ${relative(ROOT, path)}`);
    }
    expect(broken).toEqual([]);
  });
});
