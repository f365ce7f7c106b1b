import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { describe, expect, it } from '@jest/globals';
import { routeTable } from '../apiserver/app.js';
import { COMMANDS } from '../src/cli/commands.js';
import { packageRoot } from '../src/package-root.js';

/**
 * The product's documentation stands alone: it states each decision itself and never points at
 * design notes or specification sections that live outside the repository, and every relative
 * link in it leads to a file (and heading) that exists. What it names exists too: the HTTP
 * operations are routes of the hub, the `svc` commands and flags those of the CLI, and the versions
 * README asks for are those CI checks.
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
  for (const dir of ['docs', 'bench', 'e2e', 'operator', 'charts', 'examples', 'crds']) if (existsSync(join(ROOT, dir))) walk(dir);
  return files;
}

/** The text without code: fenced blocks and inline spans hold patterns such as `[a-z](…)`, not links. */
const prose = (text: string) => text.replace(/```[\s\S]*?```/g, '').replace(/`[^`\n]*`/g, '');

/** The anchors of a file's headings as GitHub makes them: lower case, punctuation dropped, spaces as `-`, a repeat numbered. */
function anchors(file: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  const text = readFileSync(join(ROOT, file), 'utf8').replace(/```[\s\S]*?```/g, '');
  for (const [, heading = ''] of text.matchAll(/^#{1,6}[ \t]+(.*?)[ \t#]*$/gm)) {
    const slug = heading.toLowerCase().replace(/[^\p{L}\p{N}\p{M} _-]/gu, '').replace(/ /g, '-');
    const n = seen.get(slug) ?? 0;
    seen.set(slug, n + 1);
    out.add(n ? `${slug}-${n}` : slug);
  }
  return out;
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

  it.each(files)('%s links only to files and headings that exist', (file) => {
    const text = prose(readFileSync(join(ROOT, file), 'utf8'));
    const broken: string[] = [];
    for (const match of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      const target = match[1] ?? '';
      if (/^[a-z]+:/i.test(target)) continue;
      const [path = '', anchor] = target.split('#');
      const linked = path ? relative(ROOT, join(dirname(join(ROOT, file)), path)) : file;
      if (!existsSync(join(ROOT, linked))) broken.push(`${file} -> ${linked}`);
      else if (anchor !== undefined && linked.endsWith('.md') && !anchors(linked).has(anchor)) broken.push(`${file} -> ${linked}#${anchor} (no such heading)`);
    }
    expect(broken).toEqual([]);
  });

  it('README asks for the Node.js and npm versions .ci/run checks and package.json declares', () => {
    const ci = readFileSync(join(ROOT, '.ci', 'run'), 'utf8');
    const least = (what: string) => ci.match(new RegExp(`version_at_least "\\$${what}_version" (\\d+\\.\\d+)\\.0`))?.[1];
    const node = least('node');
    const npm = least('npm');
    expect([node, npm]).toEqual([expect.stringMatching(/^\d+\.\d+$/), expect.stringMatching(/^\d+\.\d+$/)]);
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { engines: Record<string, string> };
    expect(pkg.engines.node).toBe(`>=${node}`);
    const runIt = readFileSync(join(ROOT, 'README.md'), 'utf8').split('## Run it')[1]?.split('\n## ')[0] ?? '';
    expect(runIt).toContain(`Node.js ${node} or later`);
    expect(runIt).toContain(`npm ${npm} or later`);
  });

  it.each(files)('%s names only repository files that exist (src/…/x.ts, docs/x.md, …)', (file) => {
    const text = readFileSync(join(ROOT, file), 'utf8');
    // A path from the repository's root, not one inside another (dist/src/…, ../src/…).
    const named = /(?<![\w./-])((?:apiserver|bench|bin|charts|cmd|crds|docs|e2e|examples|kube|operator|scripts|src|test|types)\/[\w./-]*[\w-]\.(?:js|json|md|mjs|sh|sql|tpl|ts|yaml|yml))\b/g;
    expect([...text.matchAll(named)].map((m) => m[1] ?? '').filter((path) => !existsSync(join(ROOT, path)))).toEqual([]);
  });

  it("README's test section names each Debian package .ci/run installs, as `apt-get install <package>`", () => {
    const ci = readFileSync(join(ROOT, '.ci', 'run'), 'utf8');
    const packages = ci.match(/apt-get install [^\n]*?-o Dpkg::Use-Pty=0 ([a-z0-9 .+-]+?) <\/dev\/null/)?.[1]?.split(' ') ?? [];
    expect(packages.length).toBeGreaterThan(0);
    const testIt = readFileSync(join(ROOT, 'README.md'), 'utf8').split('## Test it')[1]?.split('\n## ')[0] ?? '';
    expect(packages.filter((name) => !testIt.includes(`\`apt-get install ${name}\``))).toEqual([]);
  });

  /** Named in the docs, but not served by this version (docs/rate-limits.md says so). */
  const NOT_SERVED = new Set(['POST /api/views/generate']);

  it('every HTTP operation the documents name (`GET /api/…`) is a route of the hub', () => {
    const routes = routeTable({}, () => ({})).map((d) => ({ method: d.method, pattern: new RegExp(`^${d.path.replace(/\{[^}]+\}/g, '[^/]+')}/?$`), template: d.path.replace(/\{[^}]+\}/g, '{}') }));
    const serves = (method: string, path: string) =>
      routes.some((r) => r.method === method && (r.pattern.test(path) || r.template === path.replace(/\{[^}]+\}/g, '{}')));
    const unknown: string[] = [];
    for (const file of files) {
      for (const [, method = '', path = ''] of readFileSync(join(ROOT, file), 'utf8').matchAll(/\b(GET|POST|PUT|PATCH|DELETE) `?(\/(?:api|q)\/[\w{}/.~<>…*-]*)/g)) {
        if (/[<…*]/.test(path)) continue; // `/api/<kind>/apply`, `/q/swagger-ui/…`: a pattern, not a path
        const name = `${method} ${path.replace(/[.]+$/, '')}`;
        if (!serves(method, name.slice(method.length + 1)) && !NOT_SERVED.has(name)) unknown.push(`${file}: ${name}`);
      }
    }
    expect(unknown).toEqual([]);
    // An operation once served no longer needs its exception (and its docs their "not yet").
    expect([...NOT_SERVED].filter((name) => serves(name.split(' ')[0] ?? '', name.split(' ')[1] ?? ''))).toEqual([]);
  });

  it('docs/cli.md documents every svc command with each of its flags, and no command or flag the CLI lacks', () => {
    const doc = readFileSync(join(ROOT, 'docs', 'cli.md'), 'utf8');
    const rows = doc.split('\n').flatMap((line) => (line.startsWith('| `svc ') ? [line.slice(3, line.indexOf('`', 3))] : []));
    const tui = doc.slice(doc.indexOf('### Terminal UI'), doc.indexOf('\n### ', doc.indexOf('### Terminal UI') + 1));
    const drift: string[] = [];
    for (const command of COMMANDS) {
      const documented = command.name === 'tui' ? [tui] : rows.filter((row) => row === `svc ${command.name}` || row.startsWith(`svc ${command.name} `));
      if (documented.join('').length === 0 || (command.name === 'tui' && !tui.includes('`svc tui'))) drift.push(`svc ${command.name}: not in docs/cli.md`);
      for (const [flag, def] of Object.entries(command.flags ?? {})) {
        const named = [`--${flag}`, ...(def.short ? [`-${def.short} `] : [])];
        if (!documented.some((text) => named.some((n) => text.includes(n)))) drift.push(`svc ${command.name} --${flag}: not in docs/cli.md`);
      }
    }
    for (const row of rows) {
      const words = row.split(' ').slice(1);
      const command = COMMANDS.find((c) => c.name === words.slice(0, 2).join(' ')) ?? COMMANDS.find((c) => c.name === words[0]);
      if (!command) {
        drift.push(`${row}: no such command`);
        continue;
      }
      for (const [, flag = ''] of row.matchAll(/--([a-z][a-z-]*)/g)) if (!(flag in (command.flags ?? {}))) drift.push(`${row}: svc ${command.name} has no --${flag}`);
    }
    expect(drift).toEqual([]);
  });
});
