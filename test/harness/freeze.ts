import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * Freezes every process of the PostgreSQL server of `clusterDir` (SIGSTOP: the postmaster and its
 * children, the backends), as the fault suite does (e2e/faults/database-restart.test.ts): a database
 * that no longer answers while its host's kernel still keeps its connections. Returns their pids,
 * for `thaw`.
 */
export function freeze(clusterDir: string): number[] {
  const postmaster = Number(readFileSync(join(clusterDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
  const pids = [postmaster, ...execFileSync('pgrep', ['-P', String(postmaster)], { encoding: 'utf8' }).split('\n').filter(Boolean).map(Number)];
  for (const pid of pids) process.kill(pid, 'SIGSTOP');
  return pids;
}

/** Lets the processes `freeze` stopped run again (SIGCONT). */
export function thaw(pids: number[]): void {
  for (const pid of pids) process.kill(pid, 'SIGCONT');
}
