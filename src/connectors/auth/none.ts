import { type AuthParts, NO_AUTH } from './types.js';

/** `auth.kind: none`: no credentials (the default when auth is omitted). */
export function noneAuth(): AuthParts {
  return { headers: [...NO_AUTH.headers], query: [...NO_AUTH.query], secrets: [] };
}
