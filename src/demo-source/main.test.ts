import { describe, expect, it } from '@jest/globals';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { packageRoot } from '../package-root.js';

/** `npm run demo-source` with a setting it cannot use: one line naming it, exit code 2, no stack. */
async function start(env: Record<string, string>): Promise<{ code: number | null; err: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', join(packageRoot(), 'src', 'demo-source', 'main.ts')], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  child.stderr.on('data', (d: Buffer) => {
    err += d.toString();
  });
  child.stdout.resume();
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  return { code, err };
}

describe('the demo source executable', () => {
  it.each([
    [{ DEMO_PORT: 'abc' }, "demo source: DEMO_PORT must be an integer from 0 to 65535, got 'abc'\n"],
    [{ DEMO_PORT: '0', DEMO_ROWS: 'many' }, 'demo source: DEMO_ROWS'],
  ])('refuses %j in one line with exit code 2', async (env, said) => {
    const { code, err } = await start(env);
    expect(code).toBe(2);
    expect(err.startsWith(said)).toBe(true);
    expect(err.trim().split('\n')).toHaveLength(1);
  }, 30_000);
});
