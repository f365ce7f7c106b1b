import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';

/**
 * Sealing of stored secret values: AES-256-GCM under the master key, a random 12-byte IV per
 * value, the 16-byte tag kept beside the ciphertext, and the (tenant, name) pair bound as
 * additional authenticated data, so a ciphertext copied to another tenant or another name does not
 * open there.
 */

export const KEY_BYTES = 32;
export const IV_BYTES = 12;
const TAG_BYTES = 16;
const ALGORITHM = 'aes-256-gcm';

export interface Sealed {
  iv: Buffer;
  tag: Buffer;
  ciphertext: Buffer;
}

/**
 * The keys of a hub: `current` (svc.secret.master-key) seals every new value; a value is opened with
 * it, else with each of `previous` (svc.secret.previous-master-keys) in order. The sealed format
 * carries no key id: AES-GCM's tag tells a wrong key (a chance of 2^-128 otherwise), so trying the
 * few configured keys costs one failed tag check each, and values sealed before rotation existed
 * need no other format. `svc-hub secrets rekey` re-seals what only a previous key opens.
 */
export interface MasterKeys {
  readonly current: Buffer;
  readonly previous: readonly Buffer[];
}

/** One key (no previous ones), or a hub's keys. */
export type Keys = Buffer | MasterKeys;

export function masterKeys(keys: Keys): MasterKeys {
  return Buffer.isBuffer(keys) ? { current: keys, previous: [] } : keys;
}

/** Thrown when a value does not open: wrong key, wrong tenant or name, or tampered bytes. */
export class UnsealError extends Error {
  constructor(message = 'secret value cannot be decrypted (wrong master key, or the stored bytes were altered)') {
    super(message);
    this.name = 'UnsealError';
  }
}

/**
 * The master key from its configured text: 64 hexadecimal characters, or base64 (standard or
 * URL-safe alphabet, padding optional) of exactly 32 bytes. Returns undefined when malformed; the
 * caller names the property (the text itself must never appear in a message).
 */
export function parseMasterKey(text: string): Buffer | undefined {
  const trimmed = text.trim();
  if (/^[0-9a-fA-F]{64}$/.test(trimmed)) return Buffer.from(trimmed, 'hex');
  if (/^[A-Za-z0-9+/]{43}=?$/.test(trimmed) || /^[A-Za-z0-9_-]{43}=?$/.test(trimmed)) {
    const normalized = trimmed.replace(/-/g, '+').replace(/_/g, '/').replace(/=$/, '');
    const key = Buffer.from(normalized, 'base64');
    // 43 characters carry 258 bits: the two spare bits must be zero (a canonical encoding).
    if (key.length === KEY_BYTES && key.toString('base64').replace(/=$/, '') === normalized) return key;
  }
  return undefined;
}

/** The additional authenticated data of one value: which tenant and which name it belongs to. */
export function aad(tenantId: number, name: string): Buffer {
  return Buffer.from(`svc-hub/secret/v1\u0000${tenantId}\u0000${name}`, 'utf8');
}

/** Sealed under the current key. */
export function seal(keys: Keys, tenantId: number, name: string, value: string): Sealed {
  const key = masterKeys(keys).current;
  checkKey(key);
  const iv = randomBytes(IV_BYTES);
  const cipher = createCipheriv(ALGORITHM, key, iv, { authTagLength: TAG_BYTES });
  cipher.setAAD(aad(tenantId, name));
  const ciphertext = Buffer.concat([cipher.update(value, 'utf8'), cipher.final()]);
  return { iv, tag: cipher.getAuthTag(), ciphertext };
}

/** The value, opened with the current key or else a previous one. Throws UnsealError when none opens it. */
export function unseal(keys: Keys, tenantId: number, name: string, sealed: Sealed): string {
  return unsealWith(keys, tenantId, name, sealed).value;
}

/**
 * The value and the key that opened it (`current`: whether that is the current key, under which
 * nothing needs re-sealing). Keys are tried current first, then the previous ones in their order.
 * Throws UnsealError when none opens it.
 */
export function unsealWith(keys: Keys, tenantId: number, name: string, sealed: Sealed): { value: string; key: Buffer; current: boolean } {
  const { current, previous } = masterKeys(keys);
  if (sealed.iv.length !== IV_BYTES || sealed.tag.length !== TAG_BYTES) throw new UnsealError('secret value cannot be decrypted (malformed IV or tag)');
  const data = aad(tenantId, name);
  for (const key of [current, ...previous]) {
    checkKey(key);
    try {
      const decipher = createDecipheriv(ALGORITHM, key, sealed.iv, { authTagLength: TAG_BYTES });
      decipher.setAAD(data);
      decipher.setAuthTag(sealed.tag);
      const value = Buffer.concat([decipher.update(sealed.ciphertext), decipher.final()]).toString('utf8');
      return { value, key, current: key === current };
    } catch {
      // Not this key (or altered bytes): the next one.
    }
  }
  throw new UnsealError();
}

function checkKey(key: Buffer): void {
  if (key.length !== KEY_BYTES) throw new Error(`the master key must be ${KEY_BYTES} bytes`);
}
