import { randomBytes } from 'node:crypto';
import { chmodSync, linkSync, readFileSync, rmSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { type Config, ConfigError } from '../../config/config.js';
import { envName } from '../../config/properties.js';
import { logger, registerSecret } from '../../observability/logger.js';
import { fileSystemRefusal, filledBeside, makeDirectory } from '../../runtime/file-system.js';
import { KEY_BYTES, type MasterKeys, parseMasterKey } from './crypto.js';

const PROPERTY = 'svc.secret.master-key';
const PREVIOUS = 'svc.secret.previous-master-keys';
export const DEV_KEY_FILE = 'master.key';

const FORMAT = `32 bytes written as base64 (44 characters, or 43 without padding) or as 64 hexadecimal characters`;

/**
 * The hub's keys: the current one (`loadMasterKey`) and those of `svc.secret.previous-master-keys`,
 * comma-separated, each in the master key's forms; a malformed entry stops the start with the
 * master key's message, naming the property and the entry's position, never its text. Every entry
 * is registered with the logger in every form. An entry equal to the current key or to an earlier
 * entry is dropped (it would only be tried twice).
 */
export function loadMasterKeys(config: Config): MasterKeys {
  const current = loadMasterKey(config);
  const previous: Buffer[] = [];
  const entries = registerKeyTexts(config);
  entries.forEach((entry, i) => {
    const key = parseMasterKey(entry);
    const which = entries.length > 1 ? `entry ${i + 1} of ${entries.length}: ` : '';
    if (!key) throw ConfigError.of(PREVIOUS, `${which}not a valid key; expected ${FORMAT}, comma-separated (got ${entry.length} characters)`);
    register(key);
    if (!key.equals(current) && !previous.some((k) => k.equals(key))) previous.push(key);
  });
  return { current, previous };
}

/**
 * The configured key texts (the master key; the previous keys, whole and each entry), registered
 * with the logger as soon as configuration is read, before anything could log them. Returns the
 * previous keys' entries.
 */
export function registerKeyTexts(config: Config): string[] {
  registerSecret(config.optional(PROPERTY));
  const configured = config.optional(PREVIOUS);
  if (configured === undefined) return [];
  registerSecret(configured);
  const entries = configured.split(',').map((entry) => entry.trim());
  for (const entry of entries) registerSecret(entry);
  return entries;
}

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
    if (!key) throw ConfigError.of(PROPERTY, `not a valid key; expected ${FORMAT} (got ${configured.trim().length} characters)`);
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
  const text = `${randomBytes(KEY_BYTES).toString('base64')}\n`;
  let tmp: string | undefined;
  try {
    makeDirectory(dataDir, 0o700);
    // A full disk makes the file and refuses its bytes: filledBeside removes it.
    tmp = filledBeside(path, text, 0o600);
    chmodSync(tmp, 0o600); // whatever the umask did
    linkSync(tmp, path); // fails when another process got there first: theirs wins
    logger().warn(
      { path },
      `${PROPERTY} is not set: generated a development master key into ${path} (mode 0600). Secrets stored now open only with this key; set ${envName(PROPERTY)} (required in the prod profile) to choose one.`,
    );
  } catch (err) {
    // A full disk, a read-only data directory: one line naming the file and what to do.
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw fileSystemRefusal(err, () => `point SVC_DATA_DIR at a directory elsewhere, or set ${envName(PROPERTY)}`) ?? err;
  } finally {
    if (tmp) rmSync(tmp, { force: true });
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
  if (!key) throw ConfigError.of(PROPERTY, `the development key file ${path} does not hold ${FORMAT}; remove it to generate a new one (secrets stored under it are then lost) or set ${envName(PROPERTY)}`);
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
