import { type Keys, masterKeys, type Sealed, seal, unsealWith } from '../platform/secrets/crypto.js';
import type { SealedValues } from '../platform/secrets/rekey.js';

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

/** Integration secrets for `svc-hub secrets rekey` (src/platform/secrets/rekey.ts). */
export const INTEGRATION_SECRETS: SealedValues = {
  kind: 'integration secret',
  table: 'hub.integrations',
  columns: { iv: 'secret_iv', tag: 'secret_tag', ciphertext: 'secret_ciphertext' },
  aadName: (row) => aadName(row.id),
};

export function sealIntegrationSecret(key: Keys, tenantId: number, integrationId: number, secret: string): Sealed {
  return seal(key, tenantId, aadName(integrationId), secret);
}

/**
 * Secrets opened lately, per tenant and integration, with the exact sealed bytes and key they were
 * opened from: every delivery attempt needs its integration's secret, and AES-GCM per attempt was a
 * twentieth of the dispatcher's CPU. A hit needs that key among the caller's keys and
 * byte-identical IV, tag and ciphertext (so a rotated, re-sealed or altered secret is opened, and
 * checked, afresh); bounded.
 */
const opened = new Map<string, { key: Buffer; iv: Buffer; tag: Buffer; ciphertext: Buffer; secret: string }>();
const OPENED_MAX = 1000;

/** The plain secret, or undefined when none is stored. Throws UnsealError when it does not open. */
export function openIntegrationSecret(keys: Keys, tenantId: number, integrationId: number, row: SealedColumns): string | undefined {
  if (!row.secret_ciphertext || !row.secret_iv || !row.secret_tag) return undefined;
  const id = `${tenantId}:${integrationId}`;
  const hit = opened.get(id);
  if (hit?.iv.equals(row.secret_iv) && hit.tag.equals(row.secret_tag) && hit.ciphertext.equals(row.secret_ciphertext) && holds(keys, hit.key)) return hit.secret;
  const { value: secret, key } = unsealWith(keys, tenantId, aadName(integrationId), { iv: row.secret_iv, tag: row.secret_tag, ciphertext: row.secret_ciphertext });
  if (opened.size >= OPENED_MAX) opened.clear();
  opened.set(id, { key: Buffer.from(key), iv: Buffer.from(row.secret_iv), tag: Buffer.from(row.secret_tag), ciphertext: Buffer.from(row.secret_ciphertext), secret });
  return secret;
}

function holds(keys: Keys, key: Buffer): boolean {
  const { current, previous } = masterKeys(keys);
  return current.equals(key) || previous.some((k) => k.equals(key));
}
