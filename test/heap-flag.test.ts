import { spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from '@jest/globals';
import { packageRoot } from '../src/package-root.js';

/**
 * The hub's process runs with V8 semi-spaces of up to 64 MB, without V8's allocation-site
 * pretenuring, and glibc's mmap threshold held at 128 KiB (docs/operations.md "The hub's process"):
 * every way of starting it gives node the same flags and the same environment variable, and the executable run by its own first line gets both.
 */

const ROOT = packageRoot();
const FLAGS = '--max-semi-space-size=64 --no-allocation-site-pretenuring';
const MALLOC = 'MALLOC_MMAP_THRESHOLD_=131072';
const dirs: string[] = [];

afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

describe('the hub process\'s young generation and allocator', () => {
  it('every way of starting the hub names the same flag and allocator setting: the executable\'s first line, npm start, the image, the benches', () => {
    const firstLine = readFileSync(join(ROOT, 'bin', 'svc-hub.js'), 'utf8').split('\n')[0];
    expect(firstLine).toBe(`#!/usr/bin/env -S ${MALLOC} node ${FLAGS}`);
    const scripts = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
    // `exec`: node takes the shell's place, so the signals npm passes on reach it (cmd/npm-start.test.ts).
    expect(scripts.start).toBe(`${MALLOC} exec node ${FLAGS} bin/svc-hub.js all`);
    // Each bench runs a hub in its own process.
    const benches = Object.entries(scripts).filter(([name]) => name.startsWith('bench:') && name !== 'bench:report');
    expect(benches.length).toBeGreaterThanOrEqual(6);
    for (const [, command] of benches) expect(command).toMatch(new RegExp(`^${MALLOC} tsx ${FLAGS} bench/\\w+\\.ts$`));
    // `npm run bench` starts every bench, and the export bench each size's process, with the flags of bench/support/hub-flags.ts.
    const flags = readFileSync(join(ROOT, 'bench', 'support', 'hub-flags.ts'), 'utf8');
    expect(flags).toContain(`export const HUB_NODE_FLAGS = [${FLAGS.split(' ').map((flag) => `'${flag}'`).join(', ')}];`);
    const [name, value] = MALLOC.split('=');
    expect(flags).toContain(`export const HUB_MALLOC_ENV = { ${name}: '${value}' };`);
    for (const bench of ['run.ts', 'export.ts']) {
      expect(readFileSync(join(ROOT, 'bench', bench), 'utf8')).toContain(`import { HUB_MALLOC_ENV, HUB_NODE_FLAGS } from './support/hub-flags.js';`);
    }
    const dockerfile = readFileSync(join(ROOT, 'Dockerfile'), 'utf8');
    expect(dockerfile.match(/^ENTRYPOINT (.*)$/m)?.[1]).toBe(`["node", ${FLAGS.split(' ').map((flag) => `"${flag}"`).join(', ')}, "bin/svc-hub.js"]`);
    // In the runtime stage (after its FROM), where the ENTRYPOINT is.
    const runtime = dockerfile.slice(dockerfile.lastIndexOf('\nFROM '));
    expect(runtime).toMatch(new RegExp(`^ENV ${MALLOC}$`, 'm'));
  });

  it('the executable started by its own first line (as the installed svc-hub command is) runs node with the flag and the setting', () => {
    const image = mkdtempSync(join(tmpdir(), 'svc-heap-'));
    dirs.push(image);
    mkdirSync(join(image, 'dist', 'cmd'), { recursive: true });
    cpSync(join(ROOT, 'bin'), join(image, 'bin'), { recursive: true });
    writeFileSync(join(image, 'package.json'), '{"type":"module"}');
    // A stand-in for the compiled hub that reports the flags node was started with.
    writeFileSync(join(image, 'dist', 'cmd', 'svc-hub.js'), 'export async function main() { process.stdout.write(JSON.stringify([process.execArgv, process.env.MALLOC_MMAP_THRESHOLD_])); return 0; }\n');
    const result = spawnSync(join(image, 'bin', 'svc-hub.js'), ['serve'], {
      encoding: 'utf8',
      env: { PATH: `${dirname(process.execPath)}:${process.env.PATH ?? ''}` },
    });
    expect(result.stderr).toBe('');
    expect(JSON.parse(result.stdout)).toEqual([FLAGS.split(' '), MALLOC.split('=')[1]]);
    expect(result.status).toBe(0);
  });
});
