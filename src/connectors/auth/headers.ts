import type { HeaderSpec } from '../types.js';
import { type EnvLookup, resolveTemplate } from './template.js';
import type { AuthParts } from './types.js';

/**
 * The headers of every request of a connector, in precedence order:
 * 1. the engine's defaults (`Accept: application/json`, a User-Agent), which anything declared replaces;
 * 2. `spec.headers`: `value` (its `{{env:NAME}}` templates resolved) or `value_env` (resolved
 *    beforehand like every named value: the tenant's stored secret, then an allowed environment
 *    variable; `env` answers them); a value_env that resolves to nothing leaves the header out (the
 *    run goes on without it; the pre-flight names it, `unsentHeaders`);
 * 3. the auth kind's headers, which win a name clash.
 * Names compare case-insensitively; the last writer's spelling is kept.
 */
export function composeHeaders(declared: HeaderSpec[], env: EnvLookup, auth: AuthParts, defaults: Record<string, string> = DEFAULT_HEADERS): Record<string, string> {
  const byName = new Map<string, [string, string]>();
  const set = (name: string, value: string) => byName.set(name.toLowerCase(), [name, value]);
  for (const [name, value] of Object.entries(defaults)) set(name, value);
  for (const header of declared) {
    if (header.value_env !== undefined) {
      const value = env(header.value_env);
      // A value_env that resolves to nothing leaves the header out (unsentHeaders says which).
      if (resolved(value)) set(header.name, value);
    } else if (header.value !== undefined) {
      set(header.name, resolveTemplate(header.value, env, `header ${header.name}`));
    }
  }
  for (const [name, value] of auth.headers) set(name, value);
  const out: Record<string, string> = {};
  for (const [name, value] of byName.values()) out[name] = value;
  return out;
}

/** A value_env's value that is sent: anything but nothing or the empty string. */
const resolved = (value: string | undefined): value is string => value !== undefined && value !== '';

/** The declared headers a request leaves out because their value_env resolves to nothing, as the pre-flight says so. */
export function unsentHeaders(declared: HeaderSpec[], env: EnvLookup): string[] {
  return declared
    .filter((header) => header.value_env !== undefined && !resolved(env(header.value_env)))
    .map((header) => `header ${header.name} is not sent: its value_env ${header.value_env} resolves to nothing (no stored secret of that name)`);
}

export const DEFAULT_HEADERS: Readonly<Record<string, string>> = Object.freeze({
  Accept: 'application/json',
  'User-Agent': 'svc-hub-connector/1',
});
