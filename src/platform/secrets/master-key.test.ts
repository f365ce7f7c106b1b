import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Config, ConfigError } from '../../config/config.js';
import { StartRefused } from '../../errors.js';
import { createLogger, logger, setLogger } from '../../observability/logger.js';
import { DEV_KEY_FILE, devKey, loadMasterKey, loadMasterKeys } from './master-key.js';

let raw = '';
const capture = new Writable({
  write(chunk, _encoding, done) {
    raw += chunk.toString();
    done();
  },
});
const dirs: string[] = [];

beforeAll(() => setLogger(createLogger({ level: 'debug', json: true, destination: capture })));
afterAll(() => {
  setLogger(createLogger({ level: 'silent', json: true }));
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'svc-master-key-'));
  dirs.push(dir);
  return dir;
}

const load = (overrides: Record<string, string>) => Config.load({ env: {}, overrides });

/** The message of the StartRefused `fn` throws (one line at start, cmd/svc-hub.ts). */
function refusal(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    if (err instanceof StartRefused) return err.message;
    throw err;
  }
  throw new Error('did not throw');
}

describe('loadMasterKey', () => {
  it('uses svc.secret.master-key, hex or base64, and registers it with the logger', () => {
    const hex = `${'c0ffee'.repeat(10)}c0ff`;
    expect(loadMasterKey(load({ 'svc.secret.master-key': hex }))).toEqual(Buffer.from(hex, 'hex'));
    const b64 = Buffer.alloc(32, 7).toString('base64');
    expect(loadMasterKey(load({ 'svc.secret.master-key': b64 }))).toEqual(Buffer.alloc(32, 7));
    logger().info(`careless: ${hex} ${b64} ${Buffer.alloc(32, 7).toString('hex')}`);
    expect(raw).not.toContain(hex);
    expect(raw).not.toContain(b64);
    expect(raw).not.toContain(Buffer.alloc(32, 7).toString('hex'));
  });

  it('refuses a malformed key with a message that names the property and not the value', () => {
    for (const bad of ['too-short-a-key', Buffer.from('master-key-that-must-never-be-logged').toString('base64'), 'z'.repeat(64)]) {
      let error: unknown;
      try {
        loadMasterKey(load({ 'svc.secret.master-key': bad }));
      } catch (err) {
        error = err;
      }
      expect(error).toBeInstanceOf(ConfigError);
      expect((error as ConfigError).property).toBe('svc.secret.master-key');
      expect((error as Error).message).toMatch(/^svc\.secret\.master-key \(SVC_SECRET_MASTER_KEY\): not a valid key; expected 32 bytes/);
      expect((error as Error).message).not.toContain(bad);
    }
  });

  it('in dev with no key: generates one into <data-dir>/master.key (0600) with a warning, then reuses it', () => {
    const dataDir = join(tempDir(), 'nested', 'data');
    const before = raw.length;
    const first = loadMasterKey(load({ 'svc.data-dir': dataDir }));
    const path = join(dataDir, DEV_KEY_FILE);
    expect(first).toHaveLength(32);
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(Buffer.from(readFileSync(path, 'utf8').trim(), 'base64')).toEqual(first);
    const lines = raw.slice(before).trim().split('\n').map((l) => JSON.parse(l) as { level: string; msg: string });
    expect(lines.find((l) => l.level === 'warn')?.msg).toContain(`svc.secret.master-key is not set: generated a development master key into ${path}`);
    expect(raw).not.toContain(first.toString('base64'));

    const second = loadMasterKey(load({ 'svc.data-dir': dataDir }));
    expect(second).toEqual(first);
    expect(raw.match(/generated a development master key/g)).toHaveLength(1);
  });

  it('every later start reads the same key', () => {
    const dataDir = tempDir();
    const keys = Array.from({ length: 5 }, () => devKey(dataDir));
    for (const key of keys) expect(key).toEqual(keys[0]);
  });

  it('refuses a damaged key file, naming the file and the property', () => {
    const dataDir = tempDir();
    writeFileSync(join(dataDir, DEV_KEY_FILE), 'not a key\n', { mode: 0o600 });
    expect(() => loadMasterKey(load({ 'svc.data-dir': dataDir }))).toThrow(`svc.secret.master-key (SVC_SECRET_MASTER_KEY): the development key file ${join(dataDir, DEV_KEY_FILE)} does not hold`);
  });

  it('warns when the key file is readable by others', () => {
    const dataDir = tempDir();
    devKey(dataDir);
    chmodSync(join(dataDir, DEV_KEY_FILE), 0o644);
    devKey(dataDir);
    expect(raw).toContain('is readable by other users; chmod 600 it');
  });

  // Mounting needs root (CI runs as root).
  (process.getuid?.() === 0 ? it : it.skip)('a first start on a full disk fails and leaves nothing beside the key file; with room, the next makes the key', () => {
    const dataDir = tempDir();
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64k,mode=0700', 'tmpfs', dataDir]);
    try {
      expect(() => writeFileSync(join(dataDir, 'filler'), Buffer.alloc(128 * 1024))).toThrow(/ENOSPC/);
      // Was: 'ENOSPC: no space left on device, write', naming no file (and logged with its stack).
      expect(refusal(() => devKey(dataDir))).toBe(
        `cannot write ${join(dataDir, DEV_KEY_FILE)}: no space left on the device (ENOSPC). Free space on its file system, or point SVC_DATA_DIR at a directory elsewhere, or set SVC_SECRET_MASTER_KEY`,
      );
      // Was: an empty master.key.<pid>.<random>.tmp left at each such start.
      expect(readdirSync(dataDir)).toEqual(['filler']);
      rmSync(join(dataDir, 'filler'));
      expect(devKey(dataDir)).toHaveLength(32);
      expect(readdirSync(dataDir)).toEqual([DEV_KEY_FILE]);
    } finally {
      execFileSync('umount', [dataDir]);
    }
  });

  (process.getuid?.() === 0 ? it : it.skip)('a first start whose data directory is to be made on a read-only file system fails naming the directory and what to do', () => {
    const parent = tempDir();
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'ro,size=64k', 'tmpfs', parent]);
    try {
      // Was: 'ENOENT: no such file or directory, mkdir …' (Node's recursive mkdir answers EROFS so).
      expect(refusal(() => devKey(join(parent, 'svc', 'data')))).toBe(
        `cannot create the directory ${join(parent, 'svc')}: the file system is read-only (EROFS). Make it writable (mount it read-write), or point SVC_DATA_DIR at a directory elsewhere, or set SVC_SECRET_MASTER_KEY`,
      );
    } finally {
      execFileSync('umount', [parent]);
    }
  });

  it('the prod profile never generates one (configuration already requires the key)', () => {
    expect(() => load({ 'svc.profile': 'prod', 'svc.oidc.issuer': 'https://idp.example.com' })).toThrow(ConfigError);
  });
});

describe('loadMasterKeys: svc.secret.previous-master-keys', () => {
  const current = Buffer.alloc(32, 0x11);
  const first = Buffer.alloc(32, 0x22);
  const second = Buffer.alloc(32, 0xfb); // base64 with + and /

  it('reads a comma-separated list in the master key\'s forms, in order, registered with the logger in every form', () => {
    const keys = loadMasterKeys(load({ 'svc.secret.master-key': current.toString('hex'), 'svc.secret.previous-master-keys': ` ${first.toString('hex')} ,${second.toString('base64url')}` }));
    expect(keys).toEqual({ current, previous: [first, second] });
    const forms = [first, second].flatMap((k) => [k.toString('hex'), k.toString('base64'), k.toString('base64').replace(/=+$/, ''), k.toString('base64url')]);
    logger().info(`careless: ${forms.join(' ')}`);
    for (const form of forms) expect(raw).not.toContain(form);
  });

  it('none configured: the current key alone; the current key or a repeated one among them is dropped', () => {
    expect(loadMasterKeys(load({ 'svc.secret.master-key': current.toString('hex') }))).toEqual({ current, previous: [] });
    const keys = loadMasterKeys(load({ 'svc.secret.master-key': current.toString('hex'), 'svc.secret.previous-master-keys': `${current.toString('base64')},${first.toString('hex')},${first.toString('base64')}` }));
    expect(keys).toEqual({ current, previous: [first] });
  });

  it('refuses a malformed entry in the master key\'s words, naming the property and the entry, never the text', () => {
    const bad = Buffer.from('previous-key-that-must-never-be-logged').toString('base64');
    for (const [text, which] of [
      [bad, ''],
      [`${first.toString('hex')},${bad}`, 'entry 2 of 2: '],
      [`${first.toString('hex')},`, 'entry 2 of 2: '],
    ] as const) {
      let error: unknown;
      try {
        loadMasterKeys(load({ 'svc.secret.master-key': current.toString('hex'), 'svc.secret.previous-master-keys': text }));
      } catch (err) {
        error = err;
      }
      expect(error).toBeInstanceOf(ConfigError);
      expect((error as ConfigError).property).toBe('svc.secret.previous-master-keys');
      expect((error as Error).message).toContain(`svc.secret.previous-master-keys (SVC_SECRET_PREVIOUS_MASTER_KEYS): ${which}not a valid key; expected 32 bytes`);
      expect((error as Error).message).not.toContain(bad);
    }
    logger().info(`careless: ${bad}`);
    expect(raw).not.toContain(bad);
  });
});
