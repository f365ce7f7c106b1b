import { registerOperationSecret } from '../../observability/logger.js';
import { CredentialError } from '../engine/errors.js';
import type { CredentialResolver } from './types.js';

/**
 * Resolves one `*_env` credential or fails naming it (never its value). An empty string counts as
 * unresolved. The value is registered with the logger for the current run, so no line of it can carry the value.
 */
export async function requireCredential(resolve: CredentialResolver, name: string, field: string): Promise<string> {
  const value = await resolve(name);
  if (value === undefined || value === '') throw new CredentialError(name, field);
  registerOperationSecret(value);
  return value;
}
