import { registerOperationSecret } from '../../observability/logger.js';
import { CredentialError } from '../engine/errors.js';
import type { Auth } from '../types.js';
import { requireCredential } from './credential.js';
import type { AuthParts, CredentialResolver } from './types.js';

/**
 * `auth.kind: bearer`: `Authorization: Bearer <token>`. token_env (resolved as a credential) is
 * preferred; token_value (development only) is ignored whenever token_env is set, even when
 * token_env resolves to nothing: then the read fails naming token_env.
 */
export async function bearerAuth(auth: Extract<Auth, { kind: 'bearer' }>, resolve: CredentialResolver): Promise<AuthParts> {
  let token: string;
  if (auth.token_env) {
    token = await requireCredential(resolve, auth.token_env, 'auth.token_env');
  } else if (auth.token_value) {
    token = auth.token_value;
    registerOperationSecret(token);
  } else {
    throw new CredentialError('(none)', 'auth.token_env: bearer auth declares neither token_env nor token_value');
  }
  return { headers: [['Authorization', `Bearer ${token}`]], query: [], secrets: [token] };
}
