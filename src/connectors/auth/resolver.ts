import { envName, PROPERTIES } from '../../config/properties.js';
import { UnsealError } from '../../platform/secrets/crypto.js';
import { CredentialUnreadableError } from '../engine/errors.js';
import type { CredentialResolver } from './types.js';
import { matchesWildcard } from '../../validation/wildcard.js';

/**
 * Where a connector's named values come from: `*_env` credentials, header `value_env` and
 * `{{env:NAME}}` templates all resolve through the one function made here.
 *
 * 1. The tenant's stored secret of that name (`secret:NAME` names the store explicitly and reads
 *    nothing else).
 * 2. Only for a name matched by `svc.credentials.env-allow`: the hub's environment, then a key of
 *    the configuration file that is not a hub property.
 *
 * Never read from the environment or the configuration, allow-listed or not: `SVC_*`,
 * `DATABASE_URL`, `PG*`, `OTEL_*`, `KUBERNETES_*`, `NODE_*` and every other name the hub itself
 * reads (every property's environment form and alias, `PORT`, `PATH`, `HOME`, `POD_NAME`,
 * `POD_NAMESPACE`), nor any property name. A tenant can never read the hub's own settings.
 */

export interface CredentialSources {
  /** The tenant's secret store. */
  secrets: { resolveSecret(tenantId: number, ref: string, by?: string): Promise<string | undefined> };
  /** Globs of names readable from the environment (`svc.credentials.env-allow`). */
  envAllow: readonly string[];
  /** The environment (default: process.env). */
  env?: NodeJS.ProcessEnv;
  /** Non-property keys of the configuration file. */
  extra?: (name: string) => string | undefined;
}

const SECRET_PREFIX = 'secret:';

const RESERVED_PREFIXES = ['SVC_', 'SVC.', 'PG', 'OTEL_', 'KUBERNETES_', 'NODE_', 'NPM_', 'npm_'];
const RESERVED_NAMES = new Set(['DATABASE_URL', 'PORT', 'PATH', 'HOME', 'POD_NAME', 'POD_NAMESPACE', 'HOSTNAME', 'CI']);

/** Whether the hub reads this name itself (so that no tenant may read it, whatever the allow-list says). */
export function isHubOwnName(name: string): boolean {
  const upper = name.toUpperCase();
  if (RESERVED_NAMES.has(upper)) return true;
  if (RESERVED_PREFIXES.some((prefix) => upper.startsWith(prefix.toUpperCase()))) return true;
  return PROPERTIES.some((def) => def.name === name.toLowerCase() || envName(def.name) === upper || (def.aliases ?? []).some((alias) => alias.toUpperCase() === upper));
}

/** `*` any run of characters, `?` one character; everything else literal; case-sensitive. */
export function globMatcher(globs: readonly string[]): (name: string) => boolean {
  const patterns = globs.map((g) => g.trim()).filter(Boolean);
  return (name) => patterns.some((p) => matchesWildcard(p, name, true));
}

/** The comma-separated globs of `svc.credentials.env-allow`. */
export function parseEnvAllow(text: string | undefined): string[] {
  return (text ?? '').split(',').map((s) => s.trim()).filter(Boolean);
}

/** The resolver of one tenant's connector: `by` names the reader in `platform.secret.read` events. */
export function createCredentialResolver(sources: CredentialSources, tenantId: number, by: string): CredentialResolver {
  const allowed = globMatcher(sources.envAllow);
  const env = sources.env ?? process.env;
  return async (name) => {
    const stored = await sources.secrets.resolveSecret(tenantId, name, by).catch((err: unknown) => {
      if (err instanceof UnsealError) throw new CredentialUnreadableError(name.startsWith(SECRET_PREFIX) ? name.slice(SECRET_PREFIX.length) : name);
      throw err;
    });
    if (stored !== undefined) return stored;
    if (name.startsWith(SECRET_PREFIX) || isHubOwnName(name) || !allowed(name)) return undefined;
    return env[name] ?? sources.extra?.(name);
  };
}

/** The sources of the hub's configuration: the secret store, `svc.credentials.env-allow`, the configuration file's extra keys. */
export function credentialSources(config: { optional(name: string): string | undefined; extra(name: string): string | undefined }, secrets: CredentialSources['secrets']): CredentialSources {
  return { secrets, envAllow: parseEnvAllow(config.optional('svc.credentials.env-allow')), extra: (name) => config.extra(name) };
}
