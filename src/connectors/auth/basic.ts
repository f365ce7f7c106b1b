import type { Auth } from '../types.js';
import { requireCredential } from './credential.js';
import type { AuthParts, CredentialResolver } from './types.js';

/** `auth.kind: basic`: `Authorization: Basic base64(username:password)`, the password from password_env. */
export async function basicAuth(auth: Extract<Auth, { kind: 'basic' }>, resolve: CredentialResolver): Promise<AuthParts> {
  const password = await requireCredential(resolve, auth.password_env, 'auth.password_env');
  const encoded = Buffer.from(`${auth.username}:${password}`, 'utf8').toString('base64');
  return { headers: [['Authorization', `Basic ${encoded}`]], query: [], secrets: [password, encoded] };
}
