import { type Sealed, seal, unseal } from '../platform/secrets/crypto.js';

/**
 * Integration secrets are sealed like the secret store's values (AES-256-GCM under
 * svc.secret.master-key, src/platform/secrets/crypto.ts) with the name `integration:<id>` bound as
 * additional authenticated data. Secret store names cannot contain `:`, so no stored secret and no
 * other integration shares that AAD: a ciphertext copied elsewhere does not open.
 */

interface SealedColumns {
  secret_iv: Buffer | null;
  secret_tag: Buffer | null;
  secret_ciphertext: Buffer | null;
}

function aadName(integrationId: number): string {
  return `integration:${integrationId}`;
}

export function sealIntegrationSecret(key: Buffer, tenantId: number, integrationId: number, secret: string): Sealed {
  return seal(key, tenantId, aadName(integrationId), secret);
}

/** The plain secret, or undefined when none is stored. Throws UnsealError when it does not open. */
export function openIntegrationSecret(key: Buffer, tenantId: number, integrationId: number, row: SealedColumns): string | undefined {
  if (!row.secret_ciphertext || !row.secret_iv || !row.secret_tag) return undefined;
  return unseal(key, tenantId, aadName(integrationId), { iv: row.secret_iv, tag: row.secret_tag, ciphertext: row.secret_ciphertext });
}
