import { randomBytes } from 'node:crypto';
import { describe, expect, it } from '@jest/globals';
import { openIntegrationSecret, sealIntegrationSecret } from './secret.js';

const columns = (sealed: { iv: Buffer; tag: Buffer; ciphertext: Buffer }) => ({ secret_iv: sealed.iv, secret_tag: sealed.tag, secret_ciphertext: sealed.ciphertext });

describe('opening integration secrets', () => {
  it('opens a sealed secret, again and again from the same bytes', () => {
    const key = randomBytes(32);
    const row = columns(sealIntegrationSecret(key, 1, 7, 'first'));
    expect(openIntegrationSecret(key, 1, 7, row)).toBe('first');
    expect(openIntegrationSecret(key, 1, 7, row)).toBe('first');
    expect(openIntegrationSecret(key, 1, 7, { secret_iv: null, secret_tag: null, secret_ciphertext: null })).toBeUndefined();
  });

  it('a rotated secret is opened afresh, not answered from what was opened before', () => {
    const key = randomBytes(32);
    expect(openIntegrationSecret(key, 1, 8, columns(sealIntegrationSecret(key, 1, 8, 'old')))).toBe('old');
    expect(openIntegrationSecret(key, 1, 8, columns(sealIntegrationSecret(key, 1, 8, 'new')))).toBe('new');
  });

  it('altered bytes, another key, tenant or integration never open, even right after a good open', () => {
    const key = randomBytes(32);
    const row = columns(sealIntegrationSecret(key, 1, 9, 'secret'));
    expect(openIntegrationSecret(key, 1, 9, row)).toBe('secret');
    const tag = Buffer.from(row.secret_tag);
    tag[0] = tag[0]! ^ 1;
    expect(() => openIntegrationSecret(key, 1, 9, { ...row, secret_tag: tag })).toThrow(/cannot be decrypted/);
    expect(() => openIntegrationSecret(randomBytes(32), 1, 9, row)).toThrow(/cannot be decrypted/);
    expect(() => openIntegrationSecret(key, 2, 9, row)).toThrow(/cannot be decrypted/);
    expect(() => openIntegrationSecret(key, 1, 10, row)).toThrow(/cannot be decrypted/);
    expect(openIntegrationSecret(key, 1, 9, row)).toBe('secret');
  });

  it('opens a secret sealed under a previous key; answered from memory only for keys that include it', () => {
    const earlier = randomBytes(32);
    const current = randomBytes(32);
    const row = columns(sealIntegrationSecret(earlier, 1, 11, 'sealed-before-rotation'));
    expect(openIntegrationSecret({ current, previous: [earlier] }, 1, 11, row)).toBe('sealed-before-rotation');
    expect(() => openIntegrationSecret(current, 1, 11, row)).toThrow(/cannot be decrypted/);
    expect(() => openIntegrationSecret({ current, previous: [randomBytes(32)] }, 1, 11, row)).toThrow(/cannot be decrypted/);
    // A new secret seals under the current key.
    const fresh = columns(sealIntegrationSecret({ current, previous: [earlier] }, 1, 11, 'sealed-after'));
    expect(openIntegrationSecret(current, 1, 11, fresh)).toBe('sealed-after');
  });
});
