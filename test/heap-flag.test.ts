import { spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from '@jest/globals';
import { packageRoot } from '../src/package-root.js';

/**
 * The hub's process runs with V8 semi-spaces of up to 64 MB (docs/operations.md "The hub's
 * process"): every way of starting it gives node the same flag, and the executable run by its own
 * first line gets it.
 */

const ROOT = packageRoot();
const FLAG = '--max-semi-space-size=64';
const dirs: string[] = [];

afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

describe('the hub process\'s young generation', () => {
  it('every way of starting the hub names the same flag: the executable\'s first line, npm start, the image, the benches', () => {
    const firstLine = readFileSync(join(ROOT, 'bin', 'svc-hub.js'), 'utf8').split('\n')[0];
    expect(firstLine).toBe(`#!/usr/bin/env -S node ${FLAG}`);
    const scripts = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
    expect(scripts.start).toBe(`node ${FLAG} bin/svc-hub.js all`);
    // Each bench runs a hub in its own process.
    const benches = Object.entries(scripts).filter(([name]) => name.startsWith('bench:') && name !== 'bench:report');
    expect(benches.length).toBeGreaterThanOrEqual(6);
    for (const [, command] of benches) expect(command).toMatch(new RegExp(`^tsx ${FLAG} bench/\\w+\\.ts$`));
    expect(readFileSync(join(ROOT, 'bench', 'run.ts'), 'utf8')).toContain(`const HUB_HEAP_FLAG = '${FLAG}';`);
    const dockerfile = readFileSync(join(ROOT, 'Dockerfile'), 'utf8');
    expect(dockerfile.match(/^ENTRYPOINT (.*)$/m)?.[1]).toBe(`["node", "${FLAG}", "bin/svc-hub.js"]`);
  });

  it('the executable started by its own first line (as the installed svc-hub command is) runs node with the flag', () => {
    const image = mkdtempSync(join(tmpdir(), 'svc-heap-'));
    dirs.push(image);
    mkdirSync(join(image, 'dist', 'cmd'), { recursive: true });
    cpSync(join(ROOT, 'bin'), join(image, 'bin'), { recursive: true });
    writeFileSync(join(image, 'package.json'), '{"type":"module"}');
    // A stand-in for the compiled hub that reports the flags node was started with.
    writeFileSync(join(image, 'dist', 'cmd', 'svc-hub.js'), 'export async function main() { process.stdout.write(JSON.stringify(process.execArgv)); return 0; }\n');
    const result = spawnSync(join(image, 'bin', 'svc-hub.js'), ['serve'], {
      encoding: 'utf8',
      env: { PATH: `${dirname(process.execPath)}:${process.env.PATH ?? ''}` },
    });
    expect(result.stderr).toBe('');
    expect(JSON.parse(result.stdout)).toEqual([FLAG]);
    expect(result.status).toBe(0);
  });
});
