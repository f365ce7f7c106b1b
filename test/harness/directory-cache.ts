import type { Directory } from '../../src/auth/directory.js';
import { until } from './until.js';

/**
 * Waits until every tenant and user the hub's Directory has cached is older than its time to live
 * (10 s, not configurable): from then on, authenticating anyone needs the database.
 */
export async function directoryCacheExpired(directory: Directory, timeoutMs = 20_000): Promise<void> {
  const caches = directory as unknown as { tenants: Map<unknown, { at: number }>; users: Map<unknown, { at: number }>; ttlMs: number };
  await until('every entry the directory cached to expire', () => [...caches.tenants.values(), ...caches.users.values()].every((e) => Date.now() - e.at >= caches.ttlMs), { timeoutMs, everyMs: 100 });
}
