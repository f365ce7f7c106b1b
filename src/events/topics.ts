import { matchesWildcard } from '../validation/wildcard.js';

/**
 * Matching event types. Subscriptions use exact types or `prefix.*` (every type starting with
 * `prefix.`); the live stream takes `*` globs matched against the full type.
 */

export function matchesSubscription(pattern: string, type: string): boolean {
  if (pattern.endsWith('.*')) return type.startsWith(pattern.slice(0, -1));
  return pattern === type;
}

/** A `*` glob against the full type (src/validation/wildcard.ts: no backtracking, whatever the glob). */
export function matchesGlob(glob: string, type: string): boolean {
  return matchesWildcard(glob, type);
}
