/**
 * Where a V8 CPU profile's time went: the functions with the most self time and the most inclusive
 * time (the function and everything it called), as milliseconds and shares of the profile. For the
 * `.cpuprofile` files the benches write with BENCH_CPU_PROFILE=<file>.
 *
 *   npx tsx bench/support/profile-summary.ts <file.cpuprofile> [self rows, default 30] [inclusive rows, default 50]
 *
 * `(idle)` is time the thread waited with nothing to run. A native function's time (`writev`,
 * `writeBuffer`) is the time the thread was inside it, which includes any time it was descheduled
 * there (on a busy machine, the process it woke may run on its core first).
 */
import { readFileSync } from 'node:fs';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
}

export interface Line {
  name: string;
  ms: number;
  share: number;
}

function label(node: ProfileNode): string {
  const { functionName, url, lineNumber } = node.callFrame;
  const inModules = url.lastIndexOf('node_modules/');
  const where = inModules >= 0 ? url.slice(inModules + 'node_modules/'.length) : url.slice(url.lastIndexOf('/') + 1);
  return `${functionName || '(anonymous)'} ${where}:${lineNumber + 1}`;
}

/** Self and inclusive time per function (by name and place), most first. */
export function summarize(profile: CpuProfile): { totalMs: number; self: Line[]; inclusive: Line[] } {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const hits = new Map<number, number>();
  for (const id of profile.samples) hits.set(id, (hits.get(id) ?? 0) + 1);
  const totalMs = (profile.endTime - profile.startTime) / 1000;
  const perSample = profile.samples.length > 0 ? totalMs / profile.samples.length : 0;
  const self = new Map<string, number>();
  const inclusive = new Map<string, number>();
  for (const [id, count] of hits) {
    const leaf = byId.get(id)!;
    self.set(label(leaf), (self.get(label(leaf)) ?? 0) + count);
    // Each function once per sample, however often it recurs on the stack.
    const seen = new Set<string>();
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const name = label(byId.get(at)!);
      if (seen.has(name)) continue;
      seen.add(name);
      inclusive.set(name, (inclusive.get(name) ?? 0) + count);
    }
  }
  const lines = (m: Map<string, number>) =>
    [...m.entries()]
      .sort((a, b) => b[1] - a[1])
      .map(([name, count]) => ({ name, ms: count * perSample, share: profile.samples.length > 0 ? count / profile.samples.length : 0 }));
  return { totalMs, self: lines(self), inclusive: lines(inclusive) };
}

function main(): void {
  const [file, selfRows = '30', inclusiveRows = '50'] = process.argv.slice(2);
  if (!file) {
    process.stderr.write('usage: npx tsx bench/support/profile-summary.ts <file.cpuprofile> [self rows] [inclusive rows]\n');
    process.exit(2);
  }
  const summary = summarize(JSON.parse(readFileSync(file, 'utf8')) as CpuProfile);
  const print = (title: string, lines: Line[], rows: number) => {
    process.stdout.write(`${title}\n`);
    for (const l of lines.slice(0, rows)) process.stdout.write(`${l.ms.toFixed(0).padStart(9)} ms ${(100 * l.share).toFixed(1).padStart(5)} %  ${l.name}\n`);
  };
  process.stdout.write(`${file}: ${summary.totalMs.toFixed(0)} ms profiled\n`);
  print('self time', summary.self, Number(selfRows));
  print('inclusive time', summary.inclusive, Number(inclusiveRows));
}

if (process.argv[1] && import.meta.url === new URL(`file://${process.argv[1]}`).href) main();
