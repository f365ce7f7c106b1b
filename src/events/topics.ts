/**
 * Matching event types. Subscriptions use exact types or `prefix.*` (every type starting with
 * `prefix.`); the live stream takes `*` globs matched against the full type.
 */

export function matchesSubscription(pattern: string, type: string): boolean {
  if (pattern.endsWith('.*')) return type.startsWith(pattern.slice(0, -1));
  return pattern === type;
}

const globCache = new Map<string, RegExp>();

export function matchesGlob(glob: string, type: string): boolean {
  let re = globCache.get(glob);
  if (!re) {
    re = new RegExp(`^${glob.split('*').map(escapeRegExp).join('.*')}$`);
    globCache.set(glob, re);
  }
  return re.test(type);
}

function escapeRegExp(text: string): string {
  return text.replace(/[.+?^${}()|[\]\\]/g, '\\$&');
}
