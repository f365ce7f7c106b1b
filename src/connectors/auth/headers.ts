import type { HeaderSpec } from '../types.js';
import { type EnvLookup, resolveTemplate } from './template.js';
import type { AuthParts } from './types.js';

/**
 * The headers of every request of a connector, in precedence order:
 * 1. the engine's defaults (`Accept: application/json`, a User-Agent), which anything declared replaces;
 * 2. `spec.headers`: `value` (its `{{env:NAME}}` templates resolved) or `value_env` (resolved
 *    beforehand like every named value: the tenant's stored secret, then an allowed environment
 *    variable; `env` answers them); a value_env that resolves to nothing silently drops the header;
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
      // Spec 3: a value_env that resolves to nothing silently drops the header.
      if (value !== undefined && value !== '') set(header.name, value);
    } else if (header.value !== undefined) {
      set(header.name, resolveTemplate(header.value, env, `header ${header.name}`));
    }
  }
  for (const [name, value] of auth.headers) set(name, value);
  const out: Record<string, string> = {};
  for (const [name, value] of byName.values()) out[name] = value;
  return out;
}

export const DEFAULT_HEADERS: Readonly<Record<string, string>> = Object.freeze({
  Accept: 'application/json',
  'User-Agent': 'svc-hub-connector/1',
});
