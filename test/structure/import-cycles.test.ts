import { describe, expect, it } from '@jest/globals';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * No import cycles between the hub's modules (type-only imports included: a cycle of types still
 * ties two areas together). A cycle is reported as the files around it.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));
const FOLDERS = ['src', 'apiserver', 'operator', 'kube', 'cmd'];

function sources(dir: string): string[] {
  return readdirSync(join(root, dir), { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith('.ts') && !e.name.endsWith('.test.ts') && !e.name.endsWith('.d.ts'))
    .map((e) => relative(root, join(e.parentPath, e.name)));
}

function importsOf(file: string, known: Set<string>): string[] {
  const text = readFileSync(join(root, file), 'utf8');
  const out: string[] = [];
  for (const match of text.matchAll(/(?:^|\n)\s*(?:import|export)\b[^'"]*?from\s+['"](\.{1,2}\/[^'"]+)['"]/g)) {
    const target = relative(root, resolve(dirname(join(root, file)), match[1]!.replace(/\.js$/, '.ts')));
    if (known.has(target)) out.push(target);
  }
  return out;
}

function findCycles(graph: Map<string, string[]>): string[][] {
  const cycles: string[][] = [];
  const state = new Map<string, 'visiting' | 'done'>();
  const stack: string[] = [];
  const visit = (node: string) => {
    state.set(node, 'visiting');
    stack.push(node);
    for (const next of graph.get(node) ?? []) {
      if (state.get(next) === 'visiting') cycles.push([...stack.slice(stack.indexOf(next)), next]);
      else if (!state.has(next)) visit(next);
    }
    stack.pop();
    state.set(node, 'done');
  };
  for (const node of graph.keys()) if (!state.has(node)) visit(node);
  return cycles;
}

describe('imports', () => {
  const files = FOLDERS.flatMap(sources);
  const known = new Set(files);
  const graph = new Map(files.map((f) => [f, importsOf(f, known)]));

  it('reads the module graph', () => {
    expect(files.length).toBeGreaterThan(100);
    expect(graph.get('src/manifests/kinds.ts')).toContain('src/connectors/manifest-handler.ts');
  });

  it('has no cycles', () => {
    expect(findCycles(graph).map((c) => c.join(' -> '))).toEqual([]);
  });

  it('finds a cycle when there is one', () => {
    expect(findCycles(new Map([['a', ['b']], ['b', ['c']], ['c', ['a']]]))).toEqual([['a', 'b', 'c', 'a']]);
  });
});
