import { randomBytes } from 'node:crypto';
import { describe, expect, it } from '@jest/globals';
import { aad, IV_BYTES, parseMasterKey, seal, UnsealError, unseal, unsealWith } from './crypto.js';

const key = randomBytes(32);
const VALUE = 'sk_live_correct-horse-battery-staple';

describe('seal / unseal (AES-256-GCM)', () => {
  it('round-trips a value, unicode included', () => {
    for (const value of [VALUE, 'x', 'påsswörd 🔑 with spaces', 'a'.repeat(65_536)]) {
      expect(unseal(key, 1, 'api-token', seal(key, 1, 'api-token', value))).toBe(value);
    }
  });

  it('stores a 12-byte IV, a 16-byte tag and ciphertext that does not contain the value', () => {
    const sealed = seal(key, 1, 'api-token', VALUE);
    expect(sealed.iv).toHaveLength(IV_BYTES);
    expect(sealed.tag).toHaveLength(16);
    expect(sealed.ciphertext).toHaveLength(Buffer.byteLength(VALUE));
    expect(sealed.ciphertext.includes(Buffer.from(VALUE))).toBe(false);
  });

  it('two encryptions of one value differ (random IV each time)', () => {
    const a = seal(key, 1, 'api-token', VALUE);
    const b = seal(key, 1, 'api-token', VALUE);
    expect(a.iv.equals(b.iv)).toBe(false);
    expect(a.ciphertext.equals(b.ciphertext)).toBe(false);
    expect(a.tag.equals(b.tag)).toBe(false);
  });

  it('a tampered ciphertext, tag or IV does not open', () => {
    const sealed = seal(key, 1, 'api-token', VALUE);
    const flip = (buf: Buffer, at = 0) => {
      const copy = Buffer.from(buf);
      copy[at] = copy[at]! ^ 0x01;
      return copy;
    };
    expect(() => unseal(key, 1, 'api-token', { ...sealed, ciphertext: flip(sealed.ciphertext, 5) })).toThrow(UnsealError);
    expect(() => unseal(key, 1, 'api-token', { ...sealed, tag: flip(sealed.tag) })).toThrow(UnsealError);
    expect(() => unseal(key, 1, 'api-token', { ...sealed, iv: flip(sealed.iv) })).toThrow(UnsealError);
    expect(() => unseal(key, 1, 'api-token', { ...sealed, ciphertext: sealed.ciphertext.subarray(1) })).toThrow(UnsealError);
    expect(() => unseal(key, 1, 'api-token', { ...sealed, tag: sealed.tag.subarray(0, 12) })).toThrow(UnsealError);
  });

  it('the tenant and the name are authenticated: another tenant or name does not open it', () => {
    const sealed = seal(key, 1, 'api-token', VALUE);
    expect(() => unseal(key, 2, 'api-token', sealed)).toThrow(UnsealError);
    expect(() => unseal(key, 11, 'api-token', sealed)).toThrow(UnsealError);
    expect(() => unseal(key, 1, 'api-token2', sealed)).toThrow(UnsealError);
    expect(() => unseal(key, 1, 'API-TOKEN', sealed)).toThrow(UnsealError);
    // The separator keeps (1, "1x") and (11, "x") apart.
    expect(aad(1, '1x').equals(aad(11, 'x'))).toBe(false);
  });

  it('another master key does not open it, and the error never carries the value', () => {
    const sealed = seal(key, 1, 'api-token', VALUE);
    let error: unknown;
    try {
      unseal(randomBytes(32), 1, 'api-token', sealed);
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(UnsealError);
    expect(String((error as Error).message)).not.toContain(VALUE);
  });

  it('refuses a key that is not 32 bytes', () => {
    expect(() => seal(randomBytes(16), 1, 'n', 'v')).toThrow('32 bytes');
  });
});

describe('a hub\'s keys: the current one seals, it and the previous ones open', () => {
  const previous = randomBytes(32);
  const older = randomBytes(32);
  const keys = { current: key, previous: [previous, older] };

  it('opens a value sealed under any of them, saying whether it was the current key', () => {
    for (const sealer of [key, previous, older]) {
      const opened = unsealWith(keys, 1, 'api-token', seal(sealer, 1, 'api-token', VALUE));
      expect(opened).toEqual({ value: VALUE, key: sealer, current: sealer === key });
      expect(unseal(keys, 1, 'api-token', seal(sealer, 1, 'api-token', VALUE))).toBe(VALUE);
    }
  });

  it('seals under the current key only', () => {
    const sealed = seal(keys, 1, 'api-token', VALUE);
    expect(unseal(key, 1, 'api-token', sealed)).toBe(VALUE);
    expect(() => unseal(previous, 1, 'api-token', sealed)).toThrow(UnsealError);
  });

  it('a value none of them opens (another key, another tenant or name, altered bytes) throws UnsealError', () => {
    expect(() => unseal(keys, 1, 'api-token', seal(randomBytes(32), 1, 'api-token', VALUE))).toThrow(UnsealError);
    expect(() => unseal(keys, 2, 'api-token', seal(previous, 1, 'api-token', VALUE))).toThrow(UnsealError);
    const sealed = seal(older, 1, 'api-token', VALUE);
    expect(() => unseal(keys, 1, 'api-token', { ...sealed, tag: Buffer.alloc(16) })).toThrow(UnsealError);
  });
});

describe('parseMasterKey', () => {
  const raw = Buffer.from('000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f', 'hex');

  it('accepts 64 hex characters (either case) and base64 of 32 bytes, standard or URL-safe, padded or not', () => {
    expect(parseMasterKey(raw.toString('hex'))).toEqual(raw);
    expect(parseMasterKey(raw.toString('hex').toUpperCase())).toEqual(raw);
    expect(parseMasterKey(raw.toString('base64'))).toEqual(raw);
    expect(parseMasterKey(raw.toString('base64').replace(/=$/, ''))).toEqual(raw);
    const odd = Buffer.alloc(32, 0xfb); // base64 with + and /
    expect(parseMasterKey(odd.toString('base64'))).toEqual(odd);
    expect(parseMasterKey(odd.toString('base64url'))).toEqual(odd);
    expect(parseMasterKey(`  ${raw.toString('base64')}\n`)).toEqual(raw);
  });

  it('refuses anything else', () => {
    for (const text of [
      '',
      'short',
      'a'.repeat(63),
      'a'.repeat(65),
      'g'.repeat(64),
      Buffer.alloc(31).toString('base64'),
      Buffer.alloc(33).toString('base64'),
      Buffer.from('master-key-that-must-never-be-logged').toString('base64'), // 36 bytes
      `${Buffer.alloc(32, 0xfb).toString('base64').slice(0, 20)}_${Buffer.alloc(32, 0xfb).toString('base64').slice(21)}`, // mixed alphabets
      'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAB=', // non-canonical trailing bits
    ]) {
      expect(parseMasterKey(text)).toBeUndefined();
    }
  });
});
