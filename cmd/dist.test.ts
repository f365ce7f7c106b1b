import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from '@jest/globals';
import { freePort } from '../src/db/embedded.js';
import { packageRoot } from '../src/package-root.js';
import { createTestDatabase } from '../test/harness/database.js';
import { until } from '../test/harness/until.js';

/**
 * The compiled executable, laid out as the container image lays it out (Dockerfile, runtime stage):
 * package.json, bin/, dist/ and only the SQL migrations and module declarations of src/, no
 * TypeScript sources, so bin/launch.js must take dist/. The build is `npm run build`'s own
 * configuration (tsconfig.build.json), compiled afresh into the layout so a stale dist/ cannot pass.
 */

const ROOT = packageRoot();
let child: ChildProcess | undefined;
let dir: string | undefined;

afterAll(() => {
  if (child && child.exitCode === null) child.kill('SIGKILL');
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** Copies src/**\/migrations/*.sql and src/events/modules/*.yaml, as the image's build stage does. */
function copyAssets(from: string, to: string): number {
  let copied = 0;
  const walk = (path: string) => {
    for (const name of readdirSync(path)) {
      const full = join(path, name);
      if (name === '__fixtures__') continue;
      if (statSync(full).isDirectory()) walk(full);
      else if ((full.includes('/migrations/') && name.endsWith('.sql')) || (full.includes('/events/modules/') && name.endsWith('.yaml'))) {
        const target = join(to, relative(from, full));
        mkdirSync(dirname(target), { recursive: true });
        cpSync(full, target);
        copied++;
      }
    }
  };
  walk(join(from, 'src'));
  return copied;
}

describe('the built executable (dist/)', () => {
  it('compiles, starts from dist/ without any TypeScript source, migrates and serves health', async () => {
    dir = mkdtempSync(join(tmpdir(), 'svc-hub-dist-'));
    execFileSync(process.execPath, [join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(ROOT, 'tsconfig.build.json'), '--outDir', join(dir, 'dist')], { cwd: ROOT, stdio: 'pipe' });
    expect(existsSync(join(dir, 'dist', 'cmd', 'svc-hub.js'))).toBe(true);
    cpSync(join(ROOT, 'package.json'), join(dir, 'package.json'));
    cpSync(join(ROOT, 'bin'), join(dir, 'bin'), { recursive: true });
    expect(copyAssets(ROOT, dir)).toBeGreaterThan(0);
    symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'));
    expect(existsSync(join(dir, 'cmd'))).toBe(false);

    const port = await freePort();
    const databaseUrl = await createTestDatabase('dist');
    let output = '';
    child = spawn(process.execPath, [join(dir, 'bin', 'svc-hub.js'), 'serve'], {
      cwd: dir,
      env: { PATH: process.env.PATH, HOME: process.env.HOME, SVC_CONFIG: '/dev/null', SVC_DATA_DIR: join(dir, 'data'), PORT: String(port), DATABASE_URL: databaseUrl, SVC_LOG_LEVEL: 'info' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout!.on('data', (d) => (output += d));
    child.stderr!.on('data', (d) => (output += d));
    const exited = new Promise<number | null>((resolve) => child!.on('exit', (code) => resolve(code)));

    const base = `http://127.0.0.1:${port}`;
    const answered = await Promise.race([
      until('the compiled hub to be ready', async () => (await fetch(`${base}/q/health/ready`).catch(() => undefined))?.status === 200, { timeoutMs: 60_000, everyMs: 200 }).then(() => 'ready'),
      exited.then((code) => `exited ${code}`),
    ]);
    expect({ answered, output: answered === 'ready' ? '' : output }).toEqual({ answered: 'ready', output: '' });
    const live = await fetch(`${base}/q/health/live`);
    expect(live.status).toBe(200);
    // It ran the compiled code: no tsx loader, the entry under dist/.
    expect(output).not.toMatch(/tsx/);

    child.kill('SIGTERM');
    expect(await exited).toBe(0);

    // The YAML reading thread starts from the compiled entry (yaml-worker.js), without the tsx loader.
    const reader = pathToFileURL(join(dir, 'dist', 'src', 'manifests', 'yaml-reader.js')).href;
    const script = `import(${JSON.stringify(reader)}).then(async ({ YamlReader }) => { const reader = new YamlReader(); console.log(JSON.stringify(await reader.manifest('kind: Connector\\nenabled: yes\\n', 'body', { limitMs: 30000, owner: 'dist', maxJsonBytes: 1048576 }))); await reader.close(); })`;
    const read = execFileSync(process.execPath, ['-e', script], { cwd: dir, encoding: 'utf8', env: { PATH: process.env.PATH, HOME: process.env.HOME } });
    expect(JSON.parse(read)).toEqual({ json: '{"kind":"Connector","enabled":true}' });
  }, 120_000);
});
