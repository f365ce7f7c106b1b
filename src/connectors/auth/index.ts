import type { Auth } from '../types.js';
import { apiKeyAuth } from './api-key.js';
import { basicAuth } from './basic.js';
import { bearerAuth } from './bearer.js';
import { noneAuth } from './none.js';
import type { AuthParts, CredentialResolver } from './types.js';

export { composeHeaders, DEFAULT_HEADERS } from './headers.js';
export { type EnvLookup, resolveTemplate, resolveTemplates } from './template.js';
export type { AuthParts, CredentialResolver } from './types.js';

/**
 * Resolves a connector's auth once per read, before its first request (the "auth probe"): every
 * `*_env` credential resolves a stored secret, then an environment variable, then a configuration
 * property (the resolver implements the order). An unresolved one throws CredentialError naming it.
 */
export function resolveAuth(auth: Auth | undefined, resolve: CredentialResolver): Promise<AuthParts> {
  switch (auth?.kind) {
    case 'bearer':
      return bearerAuth(auth, resolve);
    case 'basic':
      return basicAuth(auth, resolve);
    case 'api-key':
      return apiKeyAuth(auth, resolve);
    default:
      return Promise.resolve(noneAuth());
  }
}
