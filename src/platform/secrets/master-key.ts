import { randomBytes } from 'node:crypto';
import { chmodSync, linkSync, mkdirSync, readFileSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { type Config, ConfigError } from '../../config/config.js';
import { envName } from '../../config/properties.js';
import { logger, registerSecret } from '../../observability/logger.js';
import { KEY_BYTES, parseMasterKey } from './crypto.js';

const PROPERTY = 'svc.secret.master-key';
export const DEV_KEY_FILE = 'master.key';

const FORMAT = `32 bytes written as base64 (44 characters, or 43 without padding) or as 64 hexadecimal characters`;

/**
 * The key that seals stored secrets. `svc.secret.master-key` when set (a malformed value stops the
 * start with a message naming the property, never the value). Unset, which configuration allows
 * only outside the `prod` profile: a key generated once into `<svc.data-dir>/master.key` (mode
 * 0600) and reused on later starts, with a warning. The key (and its text) is registered with the
 * logger so no line can carry it.
 */
export function loadMasterKey(config: Config): Buffer {
  const configured = config.optional(PROPERTY);
  if (configured !== undefined) {
    registerSecret(configured);
    const key = parseMasterKey(configured);
    if (!key) throw new ConfigError(PROPERTY, `${PROPERTY} (${envName(PROPERTY)}): not a valid key; expected ${FORMAT} (got ${configured.trim().length} characters)`);
    register(key);
    return key;
  }
  if (config.string('svc.profile') === 'prod') {
    throw new ConfigError(PROPERTY, `${PROPERTY} (${envName(PROPERTY)}) is required in the prod profile`);
  }
  return devKey(config.string('svc.data-dir'));
}

/** The generated development key: created atomically (concurrent starts agree on one), then reused. */
export function devKey(dataDir: string): Buffer {
  const path = resolve(join(dataDir, DEV_KEY_FILE));
  const existing = readKeyFile(path);
  if (existing) {
    logger().info({ path }, `${PROPERTY} is not set: using the development master key in ${path}`);
    return existing;
  }
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const text = `${randomBytes(KEY_BYTES).toString('base64')}\n`;
  const tmp = `${path}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  writeFileSync(tmp, text, { mode: 0o600, flag: 'wx' });
  try {
    chmodSync(tmp, 0o600); // whatever the umask did
    linkSync(tmp, path); // fails when another process got there first: theirs wins
    logger().warn(
      { path },
      `${PROPERTY} is not set: generated a development master key into ${path} (mode 0600). Secrets stored now open only with this key; set ${envName(PROPERTY)} (required in the prod profile) to choose one.`,
    );
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  } finally {
    unlinkSync(tmp);
  }
  const key = readKeyFile(path);
  if (!key) throw new Error(`${path} vanished while it was being created`);
  return key;
}

function readKeyFile(path: string): Buffer | undefined {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  registerSecret(text.trim());
  const key = parseMasterKey(text);
  if (!key) throw new ConfigError(PROPERTY, `${PROPERTY}: the development key file ${path} does not hold ${FORMAT}; remove it to generate a new one (secrets stored under it are then lost) or set ${envName(PROPERTY)}`);
  if ((statSync(path).mode & 0o077) !== 0) logger().warn({ path }, `the development master key ${path} is readable by other users; chmod 600 it`);
  register(key);
  return key;
}

/** Every textual form of the key, so a careless log line cannot carry it in any of them. */
function register(key: Buffer): void {
  registerSecret(key.toString('hex'));
  registerSecret(key.toString('base64'));
  registerSecret(key.toString('base64').replace(/=+$/, ''));
  registerSecret(key.toString('base64url'));
}
