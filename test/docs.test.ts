import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { describe, expect, it } from '@jest/globals';
import { parse, parseAllDocuments } from 'yaml';
import { routeTable } from '../apiserver/app.js';
import { openApiDocument } from '../apiserver/openapi.js';
import type { RouteDecl } from '../apiserver/route.js';
import { OUTBOX_USAGE } from '../cmd/outbox.js';
import { SECRETS_USAGE } from '../cmd/secrets.js';
import { ROLES, RUN_USAGE, USAGE } from '../cmd/usage.js';
import { COMMANDS } from '../src/cli/commands.js';
import { CLI_ENVIRONMENT } from '../src/cli/config.js';
import { Config } from '../src/config/config.js';
import { envName, PROPERTIES } from '../src/config/properties.js';
import { checkManifest } from '../src/connectors/manifest/validate.js';
import { MAX_CONNECTORS_PER_TENANT } from '../src/connectors/store.js';
import { MAX_RULES } from '../src/email/rules.js';
import { MAX_ENTITIES_PER_TENANT } from '../src/entities/store.js';
import { MAX_EXPORTS_PER_TENANT } from '../src/exports/store.js';
import { MAX_SECRETS_PER_TENANT } from '../src/platform/secrets/store.js';
import { MAX_TABLES_PER_TENANT } from '../src/connectors/csv-ingest.js';
import { MAX_ORGS_PER_TENANT } from '../src/admin/orgs.js';
import { MAX_USER_SCOPE_GRANTS_PER_TENANT } from '../src/admin/scopes.js';
import { MAX_USERS_PER_TENANT } from '../src/admin/users.js';
import { MAX_ORG_GRANTS_PER_TENANT, MAX_ROLE_ASSIGNMENTS_PER_TENANT, MAX_ROLES_PER_TENANT } from '../src/admin/roles.js';
import { MAX_PROCESSES_PER_TENANT } from '../src/processes/store.js';
import { MAX_INTEGRATIONS_PER_TENANT } from '../src/webhooks/integrations.js';
import { MAX_WORKFLOWS_PER_TENANT } from '../src/workflows/store.js';
import { MAX_DELETED_KEPT_PER_TENANT } from '../src/manifests/tenant-cap.js';
import { checkEntityManifest } from '../src/entities/manifest/validate.js';
import { checkExportManifest } from '../src/exports/manifest/validate.js';
import { checkProcessManifest } from '../src/processes/manifest/validate.js';
import { checkWorkflowManifest } from '../src/workflows/manifest/validate.js';
import { packageRoot } from '../src/package-root.js';

/**
 * The product's documentation stands alone: it states each decision itself and never points at
 * design notes or specification sections that live outside the repository, and every relative
 * link in it leads to a file (and heading) that exists. What it names exists too: the HTTP
 * operations are routes of the hub, the `svc` commands and flags those of the CLI, and the versions
 * README asks for are those CI checks.
 */

const ROOT = packageRoot();

/** The files under folders of the repository whose names `keep` takes (paths from the root; node_modules, bench/results and hidden ones left out). */
function filesIn(dirs: readonly string[], keep: (name: string) => boolean): string[] {
  const files: string[] = [];
  const walk = (dir: string) => {
    for (const name of readdirSync(join(ROOT, dir))) {
      const path = join(dir, name);
      if (name === 'node_modules' || name === 'results' || name.startsWith('.')) continue;
      if (statSync(join(ROOT, path)).isDirectory()) walk(path);
      else if (keep(name)) files.push(path);
    }
  };
  for (const dir of dirs) if (existsSync(join(ROOT, dir))) walk(dir);
  return files;
}

function markdownFiles(): string[] {
  return ['README.md', ...filesIn(['docs', 'bench', 'e2e', 'operator', 'charts', 'examples', 'crds'], (name) => name.endsWith('.md'))];
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

/**
 * What points outside the repository: the design folder, its files, numbered spec sections, "the
 * specification" (a document the reader does not have), and how the work on the hub was organised
 * (design notes, numbered issues, sessions and waves of work).
 */
const OUTSIDE = [
  /\.\.\/shared\b/, /\bshared\/(spec|design)\b/, /\bCONTRACTS(\.md)?\b/, /\bARCHITECTURE\.md\b/, /\bspec [0-9]\b/i, /\bSTYLE\.md\b/, /\bTOOLCHAIN\.md\b/, /\bspecification\b/i, /\bbeyond the spec\b/i,
  /\bdesign notes?\b/i, /\bissue #?[0-9]/i, /\bsession [0-9]/i, /\bwaves? [0-9]/i, /\bin (a|this|the next|a later) wave\b/i,
];

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

  /** Served, and named by the console's own path (`/q/swagger-ui`) rather than one by one: the files of the console. */
  const CONSOLE_FILES = new Set(['GET /q/swagger-ui/', 'GET /q/swagger-ui/{file}']);

  /**
   * Whether a text names an operation: `GET /api/x` (or `GET/POST /api/x`), a table row
   * `| GET | /api/x |`, and a GET also by its path alone (`/q/metrics`, a row `| /q/metrics |`). A
   * path parameter may have another name (`{tid}` for `{id}`); a longer path does not name a shorter one.
   */
  function namesOperation(text: string, method: string, path: string): boolean {
    const p = path.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\\?\{[^}]+\\?\}/g, '\\{[^}/]+\\}');
    const end = '(?![\\w{}/-])';
    const methods = `(?:[A-Z]+/)*${method}(?:/[A-Z]+)*`;
    const forms = [`\\b${methods} \`?${p}${end}`, `^\\| \`?${methods}\`? \\| \`?${p}${end}`];
    if (method === 'GET') forms.push(`\`${p}\``, `^\\| ${p} \\|`);
    return forms.some((form) => new RegExp(form, 'm').test(text));
  }

  it('every operation of the hub is named in the documents, with its method', () => {
    const text = files.filter((file) => file !== join('docs', 'performance.md')).map((file) => readFileSync(join(ROOT, file), 'utf8')).join('\n');
    const operations = routeTable({}, () => ({})).map((d) => `${d.method} ${d.path}`);
    const missing = operations.filter((op) => !CONSOLE_FILES.has(op) && !namesOperation(text, op.split(' ')[0] ?? '', op.split(' ')[1] ?? ''));
    expect(missing).toEqual([]);
    expect([...CONSOLE_FILES].filter((op) => !operations.includes(op))).toEqual([]);
    // A planted omission is caught: another method, a longer path, a path without its method.
    expect(namesOperation('`PUT /api/tenants/{tid}/orgs/{id}`', 'PUT', '/api/tenants/{x}/orgs/{y}')).toBe(true);
    expect(namesOperation('| GET/POST | /api/tenants/{tid}/roles | svc_admin |', 'POST', '/api/tenants/{tid}/roles')).toBe(true);
    expect(namesOperation('`GET /api/tenants/{id}`, `PUT /api/tenants`', 'GET', '/api/tenants')).toBe(false);
    expect(namesOperation('`/api/tenants/{tid}/orgs` (POST to create)', 'POST', '/api/tenants/{tid}/orgs')).toBe(false);
    expect(namesOperation('| `/q/metrics` | Prometheus text |', 'GET', '/q/metrics')).toBe(true);
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

/** The documents a new user reads (not the generated measurement tables of docs/performance.md). */
const READ = (file: string) => file !== join('docs', 'performance.md');

/**
 * `svc.*` names in the documents that are no property of the hub, on purpose: a PostgreSQL setting
 * of the hub's transactions, the form of a name the configuration doc explains, and names
 * docs/kubernetes.md gives as examples of keys the chart refuses.
 */
const NOT_PROPERTIES = new Set(['svc.tenant_id', 'svc.a.b-c', 'svc.http-port', 'svc.webhook.max.attempts']);

/** Every `svc.a.b` a text names as a setting (not a domain such as `svc.io/tenant`, nor a file such as bin/svc.js). */
function settingsNamed(text: string): string[] {
  return [...text.matchAll(/(?<![\w./-])svc\.[a-z][\w-]*(?:\.[\w-]+)*(?![\w/])/g)].map((m) => m[0].replace(/[.-]+$/, ''));
}

/** The names of `settingsNamed` that are no property (`svc.oidc.*` names the properties under `svc.oidc`). */
function unknownSettings(text: string, properties: readonly string[]): string[] {
  return settingsNamed(text).filter(
    (name, i, all) => all.indexOf(name) === i && !properties.includes(name) && !NOT_PROPERTIES.has(name) && !(text.includes(`${name}.*`) && properties.some((p) => p.startsWith(`${name}.`))),
  );
}

describe('documentation: what it names exists', () => {
  const files = markdownFiles().filter(READ);
  const properties = PROPERTIES.map((p) => p.name);

  it('every svc.* setting the documents name is a property of the hub (src/config/properties.ts)', () => {
    expect(files.flatMap((file) => unknownSettings(readFileSync(join(ROOT, file), 'utf8'), properties).map((name) => `${file}: ${name}`))).toEqual([]);
    // A planted mismatch is caught, a domain, a file and a wildcard are not taken for settings.
    expect(unknownSettings('set `svc.webhook.max-attempt` (see bin/svc.js, label svc.io/tenant, apps.svc.io, `svc.oidc.*`)', properties)).toEqual(['svc.webhook.max-attempt']);
  });

  /** Variables of the test harness (test/, e2e/, bench/) that the development docs describe. */
  const harnessVariables = () =>
    new Set(filesIn(['test', 'e2e', 'bench'], (name) => /\.(ts|js|sh)$/.test(name)).flatMap((path) => [...readFileSync(join(ROOT, path), 'utf8').matchAll(/\benv\.(SVC_[A-Z0-9_]+)/g)].map((m) => m[1] ?? '')));

  it('every SVC_* variable the documents name is read: a property, an alias, the svc client\'s, or the test harness\'s', () => {
    const known = new Set([...PROPERTIES.flatMap((p) => [envName(p.name), ...(p.aliases ?? [])]), ...CLI_ENVIRONMENT, ...harnessVariables(), 'SVC_A_B_C']);
    const unknown = (text: string) => [...new Set([...text.matchAll(/\bSVC_[A-Z0-9_]*[A-Z0-9]\b/g)].map((m) => m[0]))].filter((name) => !known.has(name));
    expect(files.flatMap((file) => unknown(readFileSync(join(ROOT, file), 'utf8')).map((name) => `${file}: ${name}`))).toEqual([]);
    expect(unknown('SVC_WEBHOOK_MAX_ATTEMPT=5 SVC_URL=x SVC_FUZZ_RUNS=9')).toEqual(['SVC_WEBHOOK_MAX_ATTEMPT']);
  });

  /** The `npm run NAME` (and `npm start`, `npm test`) a text names whose script package.json lacks; `bench:<name>` is a pattern. */
  function unknownScripts(text: string, scripts: Record<string, string>): string[] {
    const named = [...text.matchAll(/\bnpm (?:run ([\w:.-]+)|(start|test)\b)/g)].map((m) => (m[1] ?? m[2] ?? '').replace(/[.:-]+$/, (end) => (end.endsWith(':') ? ':' : '')));
    return [...new Set(named)].filter((name) => !name.endsWith(':') && !(name in scripts));
  }

  it('every `npm run …` script the documents name is one of package.json', () => {
    const { scripts } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
    expect(markdownFiles().flatMap((file) => unknownScripts(readFileSync(join(ROOT, file), 'utf8'), scripts).map((name) => `${file}: npm run ${name}`))).toEqual([]);
    expect(unknownScripts('`npm run bench:<name>`, `npm run docs:config`, npm test, `npm run bench:views`, npm run crd.', scripts)).toEqual(['bench:views', 'crd']);
  });

  /** The usage of a role of `svc-hub` (the lines its `--help` prints). */
  const usageOf = (role: string) => (role === 'run' ? RUN_USAGE : role === 'secrets' ? SECRETS_USAGE : role === 'outbox' ? OUTBOX_USAGE : `svc-hub ${role}`);

  /**
   * What is wrong with a `svc-hub …` command a document names: an unknown role, a subcommand (the word
   * after `run`, `secrets`, `outbox`) or a flag its usage lacks. Other words are values.
   */
  function hubCommandProblem(span: string): string | undefined {
    const words = span.split(/\s+/).slice(1);
    const [role = '', sub = ''] = words;
    if (role === '--help' || role === '--version' || role === '<role>') return undefined;
    if (!(ROLES as readonly string[]).includes(role)) return `no role '${role}'`;
    const usage = usageOf(role);
    const named = [...(['run', 'secrets', 'outbox'].includes(role) && /^[a-z]/.test(sub) ? [sub] : []), ...words.flatMap((w) => w.match(/^\[?(--[a-z][a-z-]*)/)?.slice(1, 2) ?? [])];
    const missing = named.find((token) => token !== '--help' && !new RegExp(`(^|[\\s\\[|])${token}(?=[\\s\\]|=]|$)`, 'm').test(usage));
    return missing ? `svc-hub ${role} has no '${missing}'` : undefined;
  }

  it('every `svc-hub …` command the documents name is a role of the executable, with words and flags its usage has', () => {
    const problems: string[] = [];
    for (const file of files) {
      for (const [, span = ''] of readFileSync(join(ROOT, file), 'utf8').matchAll(/`(svc-hub [^`]*)`/g)) {
        // README's table lists the roles as alternatives, each `|` escaped for the table.
        const [first = '', ...others] = span.replace(/ failed:.*$/, '').split(' \\| ');
        for (const command of [first, ...others.map((alternative) => `svc-hub ${alternative}`)]) {
          const problem = hubCommandProblem(command);
          if (problem) problems.push(`${file}: \`${span}\`: ${problem}`);
        }
      }
    }
    expect(problems).toEqual([]);
    expect(['svc-hub serve', 'svc-hub run connector NAME --tenant CODE [--endpoint ID]', 'svc-hub secrets rekey [--batch N]'].map(hubCommandProblem)).toEqual([undefined, undefined, undefined]);
    expect(['svc-hub worker', 'svc-hub run connector NAME --tenant CODE --dry-run', 'svc-hub outbox drop NAME'].map(hubCommandProblem)).toEqual([
      "no role 'worker'",
      "svc-hub run has no '--dry-run'",
      "svc-hub outbox has no 'drop'",
    ]);
  });

  /** The `svc …` commands a text names: its inline spans, and the command lines of its code blocks (`svc …`, `… | svc …`). */
  function svcCommandsNamed(text: string): string[] {
    const spans = [...text.matchAll(/`(svc [^`]*)`/g)].map((m) => m[1] ?? '');
    for (const [, block = ''] of text.matchAll(/^```[a-z]*\n([\s\S]*?)^```/gm)) {
      for (const line of block.split('\n')) for (const [, command = ''] of line.matchAll(/(?:^\s*|\$ |[|&;] )(svc [^|&;#]*)/g)) spans.push(command.trim());
    }
    return spans;
  }

  /**
   * What is wrong with a `svc …` command a document names: an unknown command, a flag it lacks, or
   * a group's verbs given as alternatives (`svc exports ls|get|rm`) that leave one out or name one it
   * lacks. Upper-case words and `…` are placeholders (`svc GROUP --help`, `svc …`); a span going on after `:` quotes a
   * message (`svc search: QUERY must not be empty`), only its command is read.
   */
  function svcCommandProblem(span: string): string | undefined {
    const GLOBAL = ['json', 'help', 'version'];
    const words = span.replace(/:(\s.*)?$/, '').split(/\s+/).slice(1).filter((w) => !['--json', '--help', '-h', '--version'].includes(w));
    const [group = '', verb = ''] = words;
    if (group === 'help' || !/^[a-z]/.test(group)) return undefined;
    const verbs = COMMANDS.filter((c) => c.name.startsWith(`${group} `)).map((c) => c.name.slice(group.length + 1));
    if (verb.includes('|')) {
      const given = verb.split('|');
      const wrong = [...given.filter((v) => !verbs.includes(v)).map((v) => `no command 'svc ${group} ${v}'`), ...verbs.filter((v) => !given.includes(v)).map((v) => `leaves out 'svc ${group} ${v}'`)];
      return wrong.length ? wrong.join(', ') : undefined;
    }
    const command = COMMANDS.find((c) => c.name === `${group} ${verb}`) ?? COMMANDS.find((c) => c.name === group);
    if (!command) return verbs.length && (verb === '' || /^[A-Z]/.test(verb)) ? undefined : `no command 'svc ${words.slice(0, verbs.length ? 2 : 1).join(' ')}'`;
    const flag = [...span.matchAll(/(?:^|[\s[])--([a-z][a-z-]*)/g)].map((m) => m[1] ?? '').find((name) => !(name in (command.flags ?? {})) && !GLOBAL.includes(name));
    return flag ? `svc ${command.name} has no --${flag}` : undefined;
  }

  it('every `svc …` command the documents name is a command of the CLI, with flags it has', () => {
    const problems = markdownFiles().flatMap((file) =>
      svcCommandsNamed(readFileSync(join(ROOT, file), 'utf8')).flatMap((span) => {
        const problem = svcCommandProblem(span);
        return problem ? [`${file}: \`${span}\`: ${problem}`] : [];
      }),
    );
    expect(problems).toEqual([]);
    expect(['svc runs', 'svc GROUP --help', 'svc …', 'svc --json runs ls', 'svc search: QUERY must not be empty', 'svc runs ls --connector crm'].map(svcCommandProblem)).toEqual(Array(6).fill(undefined));
    expect(['svc run ls', 'svc runs ls --connectors x', 'svc secrets ls|get|create|rotate', 'svc dlq ls|get|replay|discard|erase|replayed'].map(svcCommandProblem)).toEqual([
      "no command 'svc run'",
      'svc runs ls has no --connectors',
      "leaves out 'svc secrets rm'",
      "no command 'svc dlq replay'",
    ]);
    expect(svcCommandsNamed('```sh\nsvc login --url U\necho x | svc secrets create A --value-stdin   # why\n```\n')).toEqual(['svc login --url U', 'svc secrets create A --value-stdin']);
  });

  it('docs/operations.md documents every role of svc-hub with each of its usage lines', () => {
    const rows = readFileSync(join(ROOT, 'docs', 'operations.md'), 'utf8').split('\n').flatMap((line) => (line.startsWith('| `svc-hub ') ? [line.slice(3, line.indexOf('`', 3))] : []));
    const lines = ROLES.flatMap((role) => usageOf(role).split('\n').flatMap((line) => (/^(usage: | {7})svc-hub /.test(line) || line === `svc-hub ${role}` ? [line.replace(/^usage: | {7}/, '').trim()] : [])));
    expect(lines.length).toBeGreaterThanOrEqual(ROLES.length);
    expect(lines.filter((line) => !rows.includes(line))).toEqual([]);
    expect(USAGE).toContain('svc-hub --help | --version');
  });
});

/** The apply-time check of each manifest kind, as the hub's apply paths and the operator run it. */
const CHECKS: Record<string, (manifest: unknown) => { errors: ReadonlyArray<{ field?: string; message: string }> }> = {
  Connector: checkManifest,
  Entity: checkEntityManifest,
  Export: checkExportManifest,
  Workflow: checkWorkflowManifest,
  Process: checkProcessManifest,
};

/**
 * The problems of the YAML examples of one document: a whole manifest (`kind: …`) is checked as
 * its kind's apply checks it; a part of one (a list of connector endpoints, an export's
 * `destination:`) in place of that part of the document's first manifest (a SOAP endpoint in a
 * soap-generic one); an `application.yaml`
 * (`svc:` at its top) names only properties.
 */
function yamlExampleProblems(text: string, properties: readonly string[]): string[] {
  const problems: string[] = [];
  let first: Record<string, unknown> | undefined;
  for (const match of text.matchAll(/^```ya?ml\n([\s\S]*?)^```/gm)) {
    const block = match[1] ?? '';
    const line = text.slice(0, match.index).split('\n').length + 1;
    const where = `line ${line}`;
    let documents: unknown[];
    try {
      documents = parseAllDocuments(block).map((d) => {
        if (d.errors.length) throw d.errors[0];
        return d.toJS();
      });
    } catch (err) {
      problems.push(`${where}: not YAML: ${(err as Error).message.split('\n')[0]}`);
      continue;
    }
    for (const value of documents) {
      const doc = value as Record<string, unknown>;
      let manifest: unknown;
      if (typeof doc?.kind === 'string' && typeof doc.apiVersion === 'string') {
        manifest = doc;
        first ??= structuredClone(doc);
      } else if (Array.isArray(doc) && first?.kind === 'Connector' && doc.every((e) => typeof (e as { id?: unknown })?.id === 'string')) {
        // A SOAP endpoint is one of a soap-generic connector.
        const type = doc.some((e) => 'soap' in (e as object)) ? 'soap-generic' : first.connector_type;
        manifest = { ...first, connector_type: type, spec: { ...(first.spec as object), endpoints: doc } };
      } else if (doc && typeof doc === 'object' && 'destination' in doc && first?.kind === 'Export') {
        manifest = { ...first, spec: { ...(first.spec as object), destination: doc.destination } };
      } else if (doc && typeof doc === 'object' && 'svc' in doc) {
        const flat = (prefix: string, v: unknown): string[] =>
          v && typeof v === 'object' && !Array.isArray(v) ? Object.entries(v).flatMap(([k, w]) => flat(`${prefix}.${k}`, w)) : [prefix];
        for (const name of flat('svc', doc.svc)) if (!properties.includes(name)) problems.push(`${where}: ${name} is no property`);
        continue;
      } else continue;
      const kind = (manifest as { kind: string }).kind;
      const check = CHECKS[kind];
      if (!check) problems.push(`${where}: no kind ${kind}`);
      else for (const e of check(manifest).errors) problems.push(`${where}: ${kind}: ${e.field ? `${e.field}: ` : ''}${e.message}`);
    }
  }
  return problems;
}

describe('documentation: its YAML examples', () => {
  const properties = PROPERTIES.map((p) => p.name);

  it.each(markdownFiles().filter(READ))('%s: every manifest (or part of one) and application.yaml it shows is valid', (file) => {
    expect(yamlExampleProblems(readFileSync(join(ROOT, file), 'utf8'), properties)).toEqual([]);
  });

  it('finds a planted mistake in a manifest, in a part of one and in an application.yaml', () => {
    const connectors = readFileSync(join(ROOT, 'docs', 'connectors.md'), 'utf8');
    expect(yamlExampleProblems(connectors, properties)).toEqual([]);
    // The manifest's own block (its first line is the document's 15th), and the endpoint list checked inside it.
    expect(yamlExampleProblems(connectors.replace('default_rate_limit: 100/s', 'default_rate_limit: fast'), properties)).toEqual([
      expect.stringMatching(/^line 15: Connector: spec\.default_rate_limit: /),
      expect.stringMatching(/^line \d+: Connector: spec\.default_rate_limit: /),
    ]);
    expect(yamlExampleProblems(connectors.replace('records: Partner', 'record: Partner'), properties)).toContainEqual(expect.stringMatching(/: Connector: spec\.endpoints\[0\]\.soap\.record: .*not a known field/));
    const exports = readFileSync(join(ROOT, 'docs', 'exports.md'), 'utf8');
    expect(yamlExampleProblems(exports.replace('bucket: partner-drops', 'bucket: Partner_Drops'), properties)).toEqual([expect.stringMatching(/: Export: spec\.destination\.bucket: /)]);
    expect(yamlExampleProblems('```yaml\nsvc:\n  webhook:\n    sweep-every: 2s\n    sweep-evry: 2s\n```\n', properties)).toEqual(['line 2: svc.webhook.sweep-evry is no property']);
  });
});

describe('documentation: its tables of HTTP operations', () => {
  const routes = routeTable({}, () => ({}));
  const document = openApiDocument(routes, { version: '0', devBypass: false }) as { paths: Record<string, Record<string, { responses: Record<string, unknown> }>> };
  const gateText = (gate: RouteDecl['auth']): string[] => (gate === 'public' ? [] : gate.flat());

  /**
   * What a table row naming an operation (`| GET | /api/x | roles | what it answers |`, or
   * `` | `GET /api/x` | roles | … | ``) says that the operation does not declare: a status it does
   * not answer (as /q/openapi lists them), a role its gate does not ask for, or, when the row names
   * roles, a role of the gate it leaves out.
   */
  function rowProblems(line: string): string[] {
    const m = line.match(/^\| `?(GET|POST|PUT|PATCH|DELETE)`? \| `?(\/[^\s`|]+)`? \|(.*)$/) ?? line.match(/^\| `(GET|POST|PUT|PATCH|DELETE) (\/[^\s`]+)` \|(.*)$/);
    if (!m) return [];
    const [, method = '', path = '', rest = ''] = m;
    const template = (p: string) => p.replace(/\?.*/, '').replace(/\{[^}]+\}/g, '{}');
    const decl = routes.find((r) => r.method === method && template(r.path) === template(path));
    if (!decl) return []; // 'every HTTP operation the documents name' reports it
    const answers = Object.keys(document.paths[decl.path]?.[method.toLowerCase()]?.responses ?? {}).map(Number);
    const statuses = [...new Set([...rest.matchAll(/(?<![\w.-])([2-5]\d\d)(?![\w.,-]?\d)/g)].map((s) => Number(s[1])))];
    const roles = [...new Set([...rest.matchAll(/\bsvc_[a-z]+/g)].map((r) => r[0]))];
    const gate = gateText(decl.auth);
    return [
      ...statuses.filter((s) => !answers.includes(s)).map((s) => `${method} ${path}: ${s} is no answer it declares (${answers.join(', ')})`),
      ...roles.filter((r) => !gate.includes(r)).map((r) => `${method} ${path}: ${r} is not in its gate (${gate.join(', ') || 'public'})`),
      ...(roles.length ? gate.filter((r) => !roles.includes(r)).map((r) => `${method} ${path}: its gate also asks for ${r}`) : []),
    ];
  }

  it('every status and role a table row gives an operation is one it declares (its gate, /q/openapi)', () => {
    const problems = markdownFiles()
      .filter(READ)
      .flatMap((file) => readFileSync(join(ROOT, file), 'utf8').split('\n').flatMap((line) => rowProblems(line).map((p) => `${file}: ${p}`)));
    expect(problems).toEqual([]);
  });

  it('finds a planted status or role', () => {
    expect(rowProblems('| DELETE | /api/platform/secrets/{name} | svc_integrator + svc_admin | 204; 404 when unknown |')).toEqual([]);
    expect(rowProblems('| DELETE | /api/platform/secrets/{name} | svc_integrator + svc_admin | 200; 404 when unknown |')).toEqual([
      'DELETE /api/platform/secrets/{name}: 200 is no answer it declares (204, 400, 401, 403, 404)',
    ]);
    expect(rowProblems('| POST | /api/platform/secrets | svc_integrator | 201 |')).toEqual(['POST /api/platform/secrets: its gate also asks for svc_admin']);
    expect(rowProblems('| `GET /api/platform/secrets` | svc_admin | the list |')).toEqual([
      'GET /api/platform/secrets: svc_admin is not in its gate (svc_integrator)',
      'GET /api/platform/secrets: its gate also asks for svc_integrator',
    ]);
  });
});

describe('documentation: the defaults it gives settings', () => {
  // The defaults alone: no environment, and an empty file in place of a ./application.yaml the checkout may hold.
  // Removed once read, not in an afterAll: a run filtered to other tests (`-t`) skips this block's hooks.
  const folder = mkdtempSync(join(tmpdir(), 'docs-defaults-'));
  const empty = join(folder, 'application.yaml');
  // A default that follows the profile (`60 (0 in dev)`) may be stated as either.
  let configs: Config[];
  try {
    writeFileSync(empty, '{}\n');
    configs = [
      Config.load({ env: { SVC_CONFIG: empty } }),
      Config.load({ env: { SVC_CONFIG: empty, SVC_PROFILE: 'prod', SVC_OIDC_ISSUER: 'https://issuer.example', SVC_SECRET_MASTER_KEY: 'a'.repeat(64) } }),
    ];
  } finally {
    rmSync(folder, { recursive: true, force: true });
  }
  const UNIT: Record<string, number> = { ms: 1, s: 1000, second: 1000, seconds: 1000, min: 60_000, minute: 60_000, minutes: 60_000, m: 60_000, h: 3_600_000, hour: 3_600_000, hours: 3_600_000, d: 86_400_000, day: 86_400_000, days: 86_400_000 };
  const SIZE: Record<string, number> = { b: 1, kb: 1024, kib: 1024, mb: 1024 ** 2, mib: 1024 ** 2, gb: 1024 ** 3, gib: 1024 ** 3 };
  const WORDS: Record<string, string> = { one: '1', two: '2', three: '3', five: '5', ten: '10' };

  /** The value a text states for a property of a kind (`10 s`, `one minute`, `4 MiB`, `3`), or undefined when it states none this reads. */
  function stated(kind: string, text: string): number | undefined {
    const m = /^(\d+(?:\.\d+)?)\s*([a-zA-Z]+)?$/.exec(text.trim().replace(/^(one|two|three|five|ten)\b/i, (w) => WORDS[w.toLowerCase()] ?? w));
    if (!m) return undefined;
    const [, n = '', unit] = m;
    const per = kind === 'duration' ? UNIT[unit?.toLowerCase() ?? ''] : kind === 'size' ? SIZE[unit?.toLowerCase() ?? ''] : kind === 'int' && unit === undefined ? 1 : undefined;
    return per === undefined ? undefined : Number(n) * per;
  }
  const actual = (name: string, kind: string) => configs.map((config) => (kind === 'duration' ? config.duration(name) : kind === 'size' ? config.bytes(name) : config.int(name)));

  /**
   * Defaults a text states that are not the property's: `` `svc.x` (10 s) ``, `` `svc.x`, 5 s by default ``,
   * `` `svc.x` (default 3) `` and a table row `` | `svc.x` | `30s` | ``. A value stated of a multiple
   * (`twice `svc.x` (16)`, `half of `svc.x` (15 s)`) is not the default and is left alone.
   */
  function wrongDefaults(text: string): string[] {
    const found = [
      ...[...text.matchAll(/(\S+ )?`(svc\.[\w.-]+)`(?: \(|, )(?:default |by default )?`?(\w+(?:\.\d+)?(?: [a-zA-Z]+)?)`?(?=[),;]| by default)/g)].map((m) => ({ before: m[1] ?? '', name: m[2] ?? '', value: m[3] ?? '' })),
      ...[...text.matchAll(/^\| `(svc\.[\w.-]+)` \| `?([^`|]+?)`? \|/gm)].map((m) => ({ before: '', name: m[1] ?? '', value: m[2] ?? '' })),
    ];
    return found.flatMap(({ before, name, value }) => {
      const def = PROPERTIES.find((p) => p.name === name);
      if (!def || /^(twice|half|of|times|than)\b/i.test(before.trim())) return [];
      const doc = stated(def.kind, value);
      return doc === undefined || actual(name, def.kind).includes(doc) ? [] : [`${name}: the text says ${value}, the default is ${def.defaultText ?? String(def.default)}`];
    });
  }

  it('every default the documents state with a setting is its default', () => {
    const files = markdownFiles().filter((file) => READ(file) && file !== join('docs', 'configuration.md'));
    expect(files.flatMap((file) => wrongDefaults(readFileSync(join(ROOT, file), 'utf8')).map((p) => `${file}: ${p}`))).toEqual([]);
  });

  it('finds a planted default, and leaves a multiple of one alone', () => {
    expect(wrongDefaults('every `svc.webhook.retry-every` (30 s); at most twice `svc.webhook.concurrency-per-tenant` (32); half of `svc.webhook.retry-every` (15 s)')).toEqual([]);
    expect(wrongDefaults('every `svc.webhook.retry-every` (20 s), `svc.export.heartbeat-every`, 6 s by default; `svc.scheduler.tick` (one hour)')).toEqual([
      'svc.webhook.retry-every: the text says 20 s, the default is 30s',
      'svc.export.heartbeat-every: the text says 6 s, the default is 5s',
      'svc.scheduler.tick: the text says one hour, the default is 1m',
    ]);
    expect(wrongDefaults('| `svc.webhook.max-attempts` | `5` | attempts |\n| `svc.http.body-limit` | `10mb` | |')).toEqual(['svc.webhook.max-attempts: the text says 5, the default is 3']);
    expect(wrongDefaults('`svc.ratelimit.default.rpm` (60), in dev `svc.ratelimit.default.rpm` (0), never `svc.ratelimit.default.rpm` (30)')).toEqual([
      'svc.ratelimit.default.rpm: the text says 30, the default is 60 (0 in `dev`)',
    ]);
  });
});

describe('documentation: the sections it refers to', () => {
  const norm = (text: string) => text.replace(/`/g, '').replace(/\s+/g, ' ').trim().toLowerCase();

  /** A file's section names: its headings and its paragraphs' bold labels (`**Interrupted runs.**`). */
  function sections(file: string): string[] {
    const text = readFileSync(join(ROOT, file), 'utf8').replace(/```[\s\S]*?```/g, '');
    return [...[...text.matchAll(/^#{1,6}[ \t]+(.*?)[ \t#]*$/gm)].map((m) => m[1] ?? ''), ...[...text.matchAll(/^\*\*([^*]+?)\.?\*\*/gm)].map((m) => m[1] ?? '')].map(norm);
  }

  /** `docs/x.md, "Section"` (or `x.md "Section"`, `(x.md), "Section"`) whose file has no such heading or label; a heading may go on after `:` or ` (`. */
  function unknownSections(file: string, text: string): string[] {
    return [...text.replace(/\n/g, ' ').matchAll(/(?:docs\/)?([\w-]+\.md)\)?,? (?:section )?"([^"]{3,120})"/g)].flatMap(([, doc = '', name = '']) => {
      const target = [join('docs', doc), join(dirname(file), doc), doc].find((path) => existsSync(join(ROOT, path)));
      if (!target) return [`${doc}: no such file`];
      const wanted = norm(name);
      return sections(target).some((s) => s === wanted || s.startsWith(`${wanted}:`) || s.startsWith(`${wanted} (`)) ? [] : [`${doc} "${name}": no such heading`];
    });
  }

  it.each(markdownFiles())('%s: every section it names in another document ("…") is there', (file) => {
    expect(unknownSections(file, readFileSync(join(ROOT, file), 'utf8'))).toEqual([]);
  });

  it('finds a planted section name', () => {
    expect(unknownSections('README.md', 'see docs/operations.md, "Starting and stopping", and operations.md "Health and metrics"')).toEqual([]);
    expect(unknownSections('README.md', 'see docs/operations.md, "Starting and stoping", docs/exports.md, "Interrupted runs"')).toEqual(['operations.md "Starting and stoping": no such heading']);
  });
});

describe('documentation: the HTTP calls of the svc commands', () => {
  /** The paths the CLI's sources call: its `/api/…` string and template literals, `${…}` as `{}`. */
  const dir = join(ROOT, 'src', 'cli');
  const source = readdirSync(dir)
    .filter((name) => name.endsWith('.ts') && !name.endsWith('.test.ts'))
    .map((name) => readFileSync(join(dir, name), 'utf8'))
    .join('\n');
  const literals = [...new Set([...source.matchAll(/['`](\/api\/[^'`?]*)/g)].map((m) => (m[1] ?? '').replace(/\$\{[^}]*\}/g, '{}')))];
  /** Whether the CLI calls a path: a literal of it, or a prefix literal (`'/api/connectors/'`) the name is appended to. */
  const calls = (path: string) => {
    const template = path.replace(/\{[^}]+\}/g, '{}');
    return literals.includes(template) || literals.some((l) => l.endsWith('/') && template.startsWith(l) && /^\{\}(\/[a-z-]+)?$/.test(template.slice(l.length)));
  };
  const uncalled = (doc: string) =>
    doc.split('\n').flatMap((line) => {
      if (!line.startsWith('| `svc ')) return [];
      const [command = '', http = ''] = line.split(' | ');
      return [...http.matchAll(/(GET|POST|PUT|DELETE|PATCH) (\/api\/[^\s`?,)]*)/g)].filter((m) => !calls(m[2] ?? '')).map((m) => `${command.slice(2)}: ${m[0]}`);
    });

  it('every HTTP path docs/cli.md gives a command is one the CLI calls', () => {
    expect(uncalled(readFileSync(join(ROOT, 'docs', 'cli.md'), 'utf8'))).toEqual([]);
  });

  it('finds a planted path', () => {
    expect(uncalled('| `svc workflows rm NAME` | `DELETE /api/workflows/{name}` | |\n| `svc secrets ls` | `GET /api/platform/secret` | |')).toEqual([
      '`svc secrets ls`: GET /api/platform/secret',
    ]);
  });
});

describe('documentation: the READMEs of e2e/, bench/, operator/ and crds/', () => {
  /** The files under a folder of the repository, as paths inside it (bench/results/ left out: measurements, not code). */
  const filesUnder = (dir: string): string[] => {
    const out: string[] = [];
    const walk = (sub: string) => {
      for (const name of readdirSync(join(ROOT, dir, sub))) {
        const path = sub ? join(sub, name) : name;
        if (name === 'results' || name.startsWith('.')) continue;
        if (statSync(join(ROOT, dir, path)).isDirectory()) walk(path);
        else out.push(path);
      }
    };
    walk('');
    return out;
  };

  /** The file names a text gives (`hub-crash.test.ts`, `support/measure.ts`, `run.sh`, `src/db/migrations.ts`). */
  const named = (text: string) => [...new Set([...text.matchAll(/(?<![\w./-])((?:[\w-]+\/)*[\w.-]+(?:\.test)?\.(?:ts|sh|mjs|yaml))\b/g)].map((m) => m[1] ?? ''))];

  /** The files of `wanted` under a folder that its README leaves out. */
  function unnamed(dir: string, text: string, wanted: (path: string) => boolean): string[] {
    const names = named(text);
    const mentions = (file: string) => names.some((name) => name === file || name === file.split('/').pop() || name === join(dir, file));
    return filesUnder(dir)
      .filter(wanted)
      .filter((file) => !mentions(file))
      .map((file) => `${dir}/${file}: not named`);
  }

  /** The files a folder's README names that are in neither the folder nor the repository. */
  function unknown(dir: string, text: string): string[] {
    const files = filesUnder(dir);
    const exists = (name: string) => existsSync(join(ROOT, name)) || existsSync(join(ROOT, dir, name)) || files.some((f) => f === name || f.endsWith(`/${name}`));
    return named(text)
      .filter((name) => !exists(name))
      .map((name) => `${name}: no such file`);
  }

  const readme = (dir: string) => readFileSync(join(ROOT, dir, 'README.md'), 'utf8');

  it('e2e/README.md names every suite and file of e2e/, and no file that is not there', () => {
    const text = readme('e2e');
    expect([...unknown('e2e', text), ...unnamed('e2e', text, (file) => file !== 'README.md')]).toEqual([]);
    expect(unknown('e2e', `${text}\n| gone-crash.test.ts | … |`)).toEqual(['gone-crash.test.ts: no such file']);
    expect(unnamed('e2e', text.replace(/hub-crash\.test\.ts/g, 'x'), (file) => file.endsWith('.test.ts'))).toEqual(['e2e/faults/hub-crash.test.ts: not named']);
  });

  it('bench/README.md names every bench (bench/*.ts), and no file that is not there', () => {
    const text = readme('bench');
    expect([...unknown('bench', text), ...unnamed('bench', text, (file) => !file.includes('/') && file.endsWith('.ts'))]).toEqual([]);
    expect(unknown('bench', `${text}\n- \`views.ts\`: …`)).toEqual(['views.ts: no such file']);
  });

  it('operator/README.md names every source file of operator/, crds/README.md every CustomResourceDefinition', () => {
    expect(unnamed('operator', readme('operator'), (file) => file.endsWith('.ts') && !file.endsWith('.test.ts'))).toEqual([]);
    expect(unnamed('crds', readme('crds'), (file) => file.endsWith('.yaml'))).toEqual([]);
    expect(unnamed('crds', readme('crds').replace(/\| processes\.apps\.svc\.io\.yaml \|/, '|'), (file) => file.endsWith('.yaml'))).toEqual(['crds/processes.apps.svc.io.yaml: not named']);
  });
});

describe('documentation: the metrics of /q/metrics', () => {
  /** The source files of the hub (not its tests). */
  const sources = (): string[] =>
    filesIn(['src', 'apiserver', 'cmd', 'operator', 'kube'], (name) => name.endsWith('.ts') && !name.endsWith('.test.ts')).map((path) => readFileSync(join(ROOT, path), 'utf8'));

  /** The metrics a text registers (`lazyCounter({ name: 'x', …, labelNames: ['a', 'b'] })`), as `x{a, b}` (`x` without labels). */
  const registered = (text: string): string[] =>
    [...text.matchAll(/\blazy(?:Counter|Gauge|Histogram)\(\{\s*name: '([a-z_]+)'((?:[^;]|;(?!\n))*?)\}\)/g)].map(([, name = '', rest = '']) => {
      const labels = [...(rest.match(/labelNames: \[([^\]]*)\]/)?.[1] ?? '').matchAll(/'([a-z_]+)'/g)].map((m) => m[1]);
      return labels.length ? `${name}{${labels.join(', ')}}` : name;
    });

  /** The metrics the `/q/metrics` row of a document's table names, as written (`x{a, b}`). */
  const documented = (text: string): string[] => {
    const row = text.split('\n').find((line) => line.startsWith('| `/q/metrics` |')) ?? '';
    return [...row.matchAll(/`([a-z]+_[a-z_]+(?:\{[a-z_, ]+\})?)`/g)].map((m) => m[1] ?? '');
  };

  /** The registered metrics the row leaves out (or gives other labels), and the ones it names that nothing registers. */
  function drift(registeredNames: string[], documentedNames: string[]): string[] {
    return [
      ...registeredNames.filter((m) => !documentedNames.includes(m)).map((m) => `${m}: registered, not in the /q/metrics row`),
      ...documentedNames.filter((m) => !registeredNames.includes(m)).map((m) => `${m}: in the /q/metrics row, registered by nothing`),
    ];
  }

  it("docs/operations.md's /q/metrics row names every metric the hub registers, with its labels, and no other", () => {
    const names = sources().flatMap(registered);
    expect(names).toEqual(expect.arrayContaining(['svc_runs_total{status}', 'svc_mail_server_waiting']));
    expect(drift(names, documented(readFileSync(join(ROOT, 'docs', 'operations.md'), 'utf8')))).toEqual([]);
    // A planted metric, label and name are caught.
    const row = '| `/q/metrics` | `svc_runs_total{status}`, `svc_rate_limited_total{bucket, tenant}`, `svc_gone_total` |';
    expect(drift([...registered("const a = lazyCounter({ name: 'svc_runs_total', help: 'x', labelNames: ['status'] });\nconst b = lazyGauge({\n  name: 'svc_rate_limited_total',\n  help: `y`,\n  labelNames: ['bucket'],\n});\nconst c = lazyCounter({ name: 'svc_new_total', help: 'z' });")], documented(row))).toEqual([
      'svc_rate_limited_total{bucket}: registered, not in the /q/metrics row',
      'svc_new_total: registered, not in the /q/metrics row',
      'svc_rate_limited_total{bucket, tenant}: in the /q/metrics row, registered by nothing',
      'svc_gone_total: in the /q/metrics row, registered by nothing',
    ]);
  });
});

describe("documentation: the Helm chart's values", () => {
  const chart = join(ROOT, 'charts', 'svc-hub');
  const values = parse(readFileSync(join(chart, 'values.yaml'), 'utf8')) as Record<string, unknown>;
  type Schema = { properties?: Record<string, Schema> };
  const schema = JSON.parse(readFileSync(join(chart, 'values.schema.json'), 'utf8')) as Schema;
  const ROLES = ['apiserver', 'dispatcher', 'operator'];

  /** The schema of a value path (`a.b.c`), undefined when the schema declares no such value. */
  const declared = (path: string[]): Schema | undefined => path.reduce<Schema | undefined>((at, key) => at?.properties?.[key], schema);
  const defaultOf = (path: string[]): unknown => path.reduce<unknown>((at, key) => (at as Record<string, unknown> | undefined)?.[key], values);

  /**
   * What the rows of a document's table of values (`| value | default | meaning |`) get wrong: a
   * value the schema does not declare, or a default (a value's own cell part in backticks) that is
   * not values.yaml's. A row may name several values (`image.tag`, `.digest`: `.digest` and a bare
   * `digest` after a path are its siblings; `<role>.x` is the value of each role, `x.*` any under x),
   * their defaults in the same order, separated by commas.
   */
  function valueProblems(text: string): string[] {
    const table = text.split('\n| value | default | meaning |\n')[1]?.split('\n\n')[0] ?? '';
    const problems: string[] = [];
    for (const row of table.split('\n').slice(1)) {
      const [, names = '', defaults = ''] = row.split(/(?<!\\)\|/).map((cell) => cell.trim());
      let previous: string[] = [];
      const paths = [...names.matchAll(/`([^`]+)`/g)].map(([, name = '']) => {
        const relative = name.startsWith('.') || (!name.includes('.') && !(name in values) && previous.length > 0);
        previous = relative ? [...previous.slice(0, -1), ...name.replace(/^\./, '').split('.')] : name.split('.');
        return previous;
      });
      const parts = defaults.split(/, (?![^(]*\))/);
      paths.forEach((path, i) => {
        const part = parts.length === paths.length ? parts[i]?.match(/^`([^`]*)`/)?.[1] : undefined;
        for (const each of path[0] === '<role>' ? ROLES.map((role) => [role, ...path.slice(1)]) : [path]) {
          const name = each.join('.');
          const wildcard = each.at(-1) === '*';
          if (!declared(wildcard ? each.slice(0, -1) : each)) problems.push(`${name}: no such value`);
          else if (part !== undefined && !wildcard && JSON.stringify(parse(part)) !== JSON.stringify(defaultOf(each))) problems.push(`${name}: the text says ${part}, values.yaml ${JSON.stringify(defaultOf(each))}`);
        }
      });
    }
    return problems;
  }

  it.each([join('docs', 'kubernetes.md'), join('charts', 'svc-hub', 'README.md')])('%s: its table of values names only values of the chart, with their defaults', (file) => {
    const text = readFileSync(join(ROOT, file), 'utf8');
    expect(text).toContain('\n| value | default | meaning |\n');
    expect(valueProblems(text)).toEqual([]);
  });

  it('docs/kubernetes.md names every value at the top of values.yaml in its table', () => {
    const table = readFileSync(join(ROOT, 'docs', 'kubernetes.md'), 'utf8').split('\n| value | default | meaning |\n')[1]?.split('\n\n')[0] ?? '';
    const named = new Set([...table.matchAll(/^\| ([^|]*)\|/gm)].flatMap(([, cell = '']) => [...cell.matchAll(/`([\w<>]+)[`.]/g)].map((m) => m[1] ?? '')));
    expect(Object.keys(values).filter((key) => !named.has(key))).toEqual([]);
  });

  it('finds a planted value and default', () => {
    const table = (rows: string) => `x\n| value | default | meaning |\n|---|---|---|\n${rows}\n\nafter`;
    expect(valueProblems(table('| `image.repository`, `.tag`, `image.digest`, `pullPolicy` | `svc-hub`, the appVersion, none, `IfNotPresent` | |\n| `<role>.podDisruptionBudget.enabled`, `.minAvailable` | `true`, `1` | |\n| `networkPolicy.*` | | |'))).toEqual([]);
    expect(valueProblems(table('| `probes.liveness`/`readiness` | | `periodSeconds`, `timeoutSeconds` |\n| `image.repo`, `.pullPolicy` | `svc-hub`, `Always` | |\n| `<role>.replicas` | `1` | |\n| `httpPort` | `8081` | |'))).toEqual([
      'image.repo: no such value',
      'image.pullPolicy: the text says Always, values.yaml "IfNotPresent"',
      'dispatcher.replicas: the text says 1, values.yaml 2',
      'httpPort: the text says 8081, values.yaml 8080',
    ]);
  });
});

describe('documentation: the payloads of the catalogued events', () => {
  /** Each catalogued type (src/events/modules/*.yaml) with its payload's field names. */
  const catalog = new Map(
    filesIn([join('src', 'events', 'modules')], (name) => name.endsWith('.yaml')).flatMap((path) =>
      (parse(readFileSync(join(ROOT, path), 'utf8')) as { events?: Array<{ type: string; payload?: Record<string, string> }> }).events?.map((e) => [e.type, Object.keys(e.payload ?? {})] as const) ?? [],
    ),
  );

  /** A table row naming a catalogued type in its first cell with a payload (`` `{a, b}` ``) whose fields are not the catalog's. */
  function payloadProblems(text: string): string[] {
    return text.split('\n').flatMap((line) => {
      const [, type = '', rest = ''] = line.match(/^\s*\| `?([a-z]+(?:\.[a-z_]+)+)`? \|(.*)$/) ?? [];
      const declared = catalog.get(type);
      const given = rest.match(/`\{([\w, ]*)\}`/)?.[1]?.split(',').map((f) => f.trim()).filter(Boolean);
      if (!declared || !given) return [];
      return [...given].sort().join() === [...declared].sort().join() ? [] : [`${type}: the text gives {${given.join(', ')}}, the catalog {${declared.join(', ')}}`];
    });
  }

  it('every catalogued event a table row gives a payload has the fields the catalog declares', () => {
    expect(catalog.get('org.moved')).toEqual(['orgId', 'tenantId', 'newParentId']);
    expect(markdownFiles().filter(READ).flatMap((file) => payloadProblems(readFileSync(join(ROOT, file), 'utf8')).map((p) => `${file}: ${p}`))).toEqual([]);
    expect(payloadProblems('  | org.moved | PUT | `{orgId, tenantId, newParentId}` |\n| `platform.secret.read` | `{name, by}`; … |\n| org.created | POST | `{orgId, tenantId, name}` |')).toEqual([
      'platform.secret.read: the text gives {name, by}, the catalog {name, by, at}',
    ]);
  });
});

describe('documentation: the folders docs/architecture.md lays out', () => {
  const tree = () => readFileSync(join(ROOT, 'docs', 'architecture.md'), 'utf8').split('## Folders')[1]?.split('```')[1] ?? '';
  const folders = (dir: string) => readdirSync(join(ROOT, dir)).filter((name) => statSync(join(ROOT, dir, name)).isDirectory());

  /** The folders of src/ the tree has no line for (`  name/  what it holds`), and the route areas its apiserver/ entry leaves out. */
  function missing(text: string): string[] {
    const areas = text.match(/apiserver\/routes\/<area>\/[^(]*\(([^)]*)\)/)?.[1]?.split(/,\s*/).map((a) => a.trim()) ?? [];
    return [
      ...folders('src').filter((name) => !new RegExp(`^ {2}${name}/ `, 'm').test(text)).map((name) => `src/${name}/`),
      ...folders(join('apiserver', 'routes')).filter((name) => !areas.includes(name)).map((name) => `apiserver/routes/${name}/`),
    ];
  }

  it('has a line for every folder of src/ and names every area of apiserver/routes/', () => {
    expect(tree()).toContain('src/');
    expect(missing(tree())).toEqual([]);
    expect(missing(tree().replace(/^ {2}egress\/ /m, '  egres/ ').replace('processes, retrieval', 'retrieval'))).toEqual(['src/egress/', 'apiserver/routes/processes/']);
  });
});

describe('documentation: the limits per tenant', () => {
  const doc = (name: string) => readFileSync(join(ROOT, 'docs', name), 'utf8').replace(/\s+/g, ' ');
  const n = (value: number) => value.toLocaleString('en-US');
  // [how docs/architecture.md lists the kind, its limit, the kind's document, how it states it]
  const limits: Array<[string, number, string, string]> = [
    ['connectors', MAX_CONNECTORS_PER_TENANT, 'connectors.md', `at most ${n(MAX_CONNECTORS_PER_TENANT)} connectors`],
    ['entities', MAX_ENTITIES_PER_TENANT, 'entities.md', `at most ${n(MAX_ENTITIES_PER_TENANT)} entities`],
    ['exports', MAX_EXPORTS_PER_TENANT, 'exports.md', `at most ${n(MAX_EXPORTS_PER_TENANT)} exports`],
    ['workflows', MAX_WORKFLOWS_PER_TENANT, 'workflows.md', `at most ${n(MAX_WORKFLOWS_PER_TENANT)} workflows`],
    ['processes', MAX_PROCESSES_PER_TENANT, 'processes.md', `at most ${n(MAX_PROCESSES_PER_TENANT)} processes`],
    ['integrations', MAX_INTEGRATIONS_PER_TENANT, 'integrations.md', `at most ${n(MAX_INTEGRATIONS_PER_TENANT)} integrations`],
    ['e-mail rules', MAX_RULES, 'email.md', `at most ${n(MAX_RULES)} rules`],
    ['stored secrets', MAX_SECRETS_PER_TENANT, 'secrets-and-hooks.md', `At most ${n(MAX_SECRETS_PER_TENANT)} per tenant`],
    ['tables', MAX_TABLES_PER_TENANT, 'connector-runs.md', `at most ${n(MAX_TABLES_PER_TENANT)} tables`],
    ['organisations', MAX_ORGS_PER_TENANT, 'admin.md', `at most ${n(MAX_ORGS_PER_TENANT)} organisations`],
    ['roles', MAX_ROLES_PER_TENANT, 'admin.md', `at most ${n(MAX_ROLES_PER_TENANT)} roles`],
    ['role assignments', MAX_ROLE_ASSIGNMENTS_PER_TENANT, 'admin.md', `at most ${n(MAX_ROLE_ASSIGNMENTS_PER_TENANT)} role assignments`],
    ['organisation grants', MAX_ORG_GRANTS_PER_TENANT, 'admin.md', `at most ${n(MAX_ORG_GRANTS_PER_TENANT)} organisation grants`],
    ['users', MAX_USERS_PER_TENANT, 'admin.md', `at most ${n(MAX_USERS_PER_TENANT)} users`],
    ['user scope grants', MAX_USER_SCOPE_GRANTS_PER_TENANT, 'admin.md', `at most ${n(MAX_USER_SCOPE_GRANTS_PER_TENANT)} user scope grants`],
    // Deleted ones kept as history, of each kind deleted softly.
    ['deleted most recently as history', MAX_DELETED_KEPT_PER_TENANT, 'integrations.md', `keeps the ${n(MAX_DELETED_KEPT_PER_TENANT)} deleted most recently`],
    ['deleted most recently as history', MAX_DELETED_KEPT_PER_TENANT, 'email.md', `keeps the ${n(MAX_DELETED_KEPT_PER_TENANT)} deleted most recently`],
    ['deleted most recently as history', MAX_DELETED_KEPT_PER_TENANT, 'secrets-and-hooks.md', `keeps the ${n(MAX_DELETED_KEPT_PER_TENANT)} deleted most recently`],
  ];

  it.each(limits)('states the limit of %s as the code has it, in docs/architecture.md and the kind\'s document', (listed, value, file, stated) => {
    expect(doc('architecture.md')).toContain(`${n(value)} ${listed}`);
    expect(doc(file)).toContain(stated);
  });
});
