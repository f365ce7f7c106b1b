import { spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Whether `<dataDir>/hub.lock` is free: flock(1) takes it from an open file description of its own, and lets it go. */
export function lockFree(dataDir: string): boolean {
  return spawnSync('flock', ['-xn', join(dataDir, 'hub.lock'), 'true']).status === 0;
}

/** Runs `body` with a PATH on which flock is not found (the hub's fallback without the kernel lock). */
export async function withoutFlock<T>(body: () => Promise<T>): Promise<T> {
  const path = process.env.PATH;
  process.env.PATH = join(tmpdir(), 'svc-no-such-dir');
  try {
    return await body();
  } finally {
    process.env.PATH = path;
  }
}
