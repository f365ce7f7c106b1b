import type { Auth } from '../types.js';
import { requireCredential } from './credential.js';
import type { AuthParts, CredentialResolver } from './types.js';

/** `auth.kind: api-key`: the value of value_env in header `name`, or in query parameter `name` of every request. */
export async function apiKeyAuth(auth: Extract<Auth, { kind: 'api-key' }>, resolve: CredentialResolver): Promise<AuthParts> {
  const value = await requireCredential(resolve, auth.value_env, 'auth.value_env');
  return auth.in === 'query'
    ? { headers: [], query: [[auth.name, value]], secrets: [value] }
    : { headers: [[auth.name, value]], query: [], secrets: [value] };
}
