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

export function seal(key: Buffer, tenantId: number, name: string, value: string): Sealed {
  checkKey(key);
  const iv = randomBytes(IV_BYTES);
  const cipher = createCipheriv(ALGORITHM, key, iv, { authTagLength: TAG_BYTES });
  cipher.setAAD(aad(tenantId, name));
  const ciphertext = Buffer.concat([cipher.update(value, 'utf8'), cipher.final()]);
  return { iv, tag: cipher.getAuthTag(), ciphertext };
}

export function unseal(key: Buffer, tenantId: number, name: string, sealed: Sealed): string {
  checkKey(key);
  if (sealed.iv.length !== IV_BYTES || sealed.tag.length !== TAG_BYTES) throw new UnsealError('secret value cannot be decrypted (malformed IV or tag)');
  try {
    const decipher = createDecipheriv(ALGORITHM, key, sealed.iv, { authTagLength: TAG_BYTES });
    decipher.setAAD(aad(tenantId, name));
    decipher.setAuthTag(sealed.tag);
    return Buffer.concat([decipher.update(sealed.ciphertext), decipher.final()]).toString('utf8');
  } catch {
    throw new UnsealError();
  }
}

function checkKey(key: Buffer): void {
  if (key.length !== KEY_BYTES) throw new Error(`the master key must be ${KEY_BYTES} bytes`);
}
