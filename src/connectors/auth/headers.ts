import type { HeaderSpec } from '../types.js';
import { type EnvLookup, resolveTemplate } from './template.js';
import type { AuthParts } from './types.js';
import { RequestInvalidError } from '../engine/errors.js';

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
    // A connector stored before apply refused these names: its requests are refused the same way, not sent.
    const refused = clientHeaderRefusal(header.name, header.value);
    if (refused) throw new RequestInvalidError(refused);
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

/**
 * Header names the HTTP client writes itself: how the request is framed (Content-Length,
 * Transfer-Encoding, Expect, TE, Trailer), which connection carries it (Connection, Keep-Alive,
 * Upgrade, Proxy-Connection) and which site it is for (Host). Declared by a connector they would
 * fail every request (the client refuses most of them), make the server read the request wrongly,
 * or ask a server behind an allowed address for another site than the URL names.
 */
const CLIENT_HEADERS = new Set(['host', 'content-length', 'transfer-encoding', 'expect', 'te', 'trailer', 'connection', 'keep-alive', 'upgrade', 'proxy-connection']);

/**
 * Why `spec.headers` may not declare `name` (with `value`, when it states one), or undefined when it
 * may. `Connection: close` is the one such header a connector may declare (a server that mishandles
 * kept-alive connections): the client honours it.
 */
export function clientHeaderRefusal(name: string, value?: string): string | undefined {
  const lower = name.toLowerCase();
  if (!CLIENT_HEADERS.has(lower)) return undefined;
  if (lower === 'connection' && value !== undefined && value.trim().toLowerCase() === 'close') return undefined;
  return `header ${name} is written by the hub's HTTP client (${lower === 'host' ? 'the URL names the site' : lower === 'connection' ? 'only Connection: close may be declared' : 'it frames the request or manages its connection'}): remove it from spec.headers`;
}
