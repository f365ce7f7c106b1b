import { chmodSync, closeSync, existsSync, fchmodSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { CliError } from './errors.js';
import { isLoopback } from '../loopback.js';

/**
 * Where `svc` finds the hub and how it authenticates: the config file written by `svc login`,
 * overridden by the environment (SVC_URL, SVC_TOKEN, SVC_DEV_TENANT) for scripts.
 *
 * The file is `$SVC_CLI_CONFIG`, else `$XDG_CONFIG_HOME/svc/config.json`, else
 * `~/.config/svc/config.json`. Not `$SVC_CONFIG`: that names the hub's own application.yaml.
 */

export type Env = Record<string, string | undefined>;

/**
 * Every environment variable `svc` reads (docs/cli.md, "Environment"). They share the hub's `SVC_`
 * prefix, so the hub's configuration knows them as the client's and does not warn that they name no
 * property when both run from one shell.
 */
export const CLI_ENVIRONMENT: readonly string[] = ['SVC_URL', 'SVC_TOKEN', 'SVC_DEV_TENANT', 'SVC_ALLOW_HTTP', 'SVC_CLI_CONFIG', 'SVC_CLI_POLL_MS'];

/** A bearer token, or the dev bypass's tenant id (sent as X-Tenant-ID), or neither. */
interface Credentials {
  token?: string;
  devTenant?: string;
}

export interface Target extends Credentials {
  /** Base URL without a trailing slash. */
  url: string;
  /**
   * Where the credential (`token`, or `devTenant`) comes from, for what a 401 says: `svc login`'s
   * own argument (nothing stored yet), SVC_TOKEN, or (absent) the config file or the environment's
   * SVC_DEV_TENANT. Never written to the file.
   */
  tokenFrom?: 'login' | 'environment';
  /** The stored login's URL when SVC_URL names another one (its credential is withheld). Never written. */
  storedFor?: string;
  /** `svc login --allow-http` consented to its token travelling in clear to this plain-http URL; written with it. */
  allowHttp?: boolean;
}

/** Whether the config file's folder is svc's own (`…/svc`), not one `$SVC_CLI_CONFIG` chose. */
export function ownsConfigFolder(env: Env): boolean {
  return !env.SVC_CLI_CONFIG;
}

export function configPath(env: Env): string {
  if (!ownsConfigFolder(env)) return env.SVC_CLI_CONFIG!;
  const base = env.XDG_CONFIG_HOME || join(env.HOME || homedir(), '.config');
  return join(base, 'svc', 'config.json');
}

/**
 * Why the config file is not JSON, without quoting it: V8's message quotes the text around an
 * unexpected token (`Unexpected token 'e', ..."","token":eyJhbGciOi"... is not valid JSON`), which
 * in this file is the token. Only a message that names a position and quotes nothing is kept.
 */
function parseProblem(err: unknown): string {
  const message = (err as Error).message ?? '';
  return /^[^'"]*( at position \d+| end of JSON input)$/.test(message) ? message : 'not valid JSON';
}

/**
 * The config path must be a regular file or nothing yet: a FIFO would hold every read for ever, and a
 * rename over a device or a removal of it (as root, SVC_CLI_CONFIG=/dev/null) would replace or delete
 * it; a directory would leave the temporary file, token and all, beside it.
 */
function refuseOtherThanFile(path: string): void {
  const found = statSync(path, { throwIfNoEntry: false });
  if (!found || found.isFile()) return;
  const what = found.isDirectory() ? 'a directory' : found.isFIFO() ? 'a FIFO' : found.isSocket() ? 'a socket' : 'a device';
  throw new CliError(`${path} is not a regular file (${what}): SVC_CLI_CONFIG names the file svc reads, writes and replaces`);
}

function readConfig(path: string, warn: (text: string) => void): Target | undefined {
  refuseOtherThanFile(path);
  if (!existsSync(path)) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new CliError(`${path} is not a svc config file: ${parseProblem(err)}; run svc login again`);
  }
  const config = parsed as Partial<Target> | null;
  if (!config || typeof config.url !== 'string') throw new CliError(`${path} is not a svc config file: no "url"; run svc login again`);
  const token = str(config.token);
  // svc writes it 0600; one copied in, restored from a backup or loosened since leaves the token to every user of the machine.
  const mode = token ? statSync(path).mode & 0o777 : 0;
  if (mode & 0o077) warn(`${path} holds a token and can be read by others (mode 0${mode.toString(8)}): chmod 600 ${path}`);
  return { url: config.url, token, devTenant: str(config.devTenant), allowHttp: config.allowHttp === true };
}

/**
 * Written to a temporary file created afresh with mode 0600 (never one left behind, whose mode would
 * stay as it was while the token went into it) and renamed over the old one, so no reader sees half.
 * The folder is made 0700, an existing one tightened to it: the token must not sit in a folder
 * others may list or write to. Not when `ownFolder` is false (`$SVC_CLI_CONFIG` names the file
 * itself, in a folder of the user's choosing, /tmp say, which is left as it is).
 */
export function writeConfig(path: string, target: Target, ownFolder: boolean): void {
  refuseOtherThanFile(path);
  const folder = dirname(path);
  mkdirSync(folder, { recursive: true, mode: 0o700 });
  if (ownFolder) chmodSync(folder, 0o700);
  const temporary = `${path}.${process.pid}.tmp`;
  const stored: Target = { url: target.url };
  if (target.token) stored.token = target.token;
  if (target.devTenant) stored.devTenant = target.devTenant;
  if (target.token && target.allowHttp) stored.allowHttp = true;
  rmSync(temporary, { force: true });
  // 'wx': created here or not at all (no file or link of that name followed); the mode is set at creation.
  const fd = openSync(temporary, 'wx', 0o600);
  try {
    try {
      fchmodSync(fd, 0o600); // whatever the umask
      writeFileSync(fd, `${JSON.stringify(stored, null, 2)}\n`);
    } finally {
      closeSync(fd);
    }
    renameSync(temporary, path);
  } catch (err) {
    // A write that failed (a full disk) leaves nothing beside the file.
    rmSync(temporary, { force: true });
    throw err;
  }
}

/** False when there was nothing to remove. */
export function removeConfig(path: string): boolean {
  refuseOtherThanFile(path);
  if (!existsSync(path)) return false;
  rmSync(path);
  return true;
}

/**
 * The hub to call. The stored credential is only sent to the stored URL: a SVC_URL naming another
 * hub gets the environment's credential or none.
 */
export function resolveTarget(env: Env, path: string, warn: (text: string) => void = () => undefined): Target {
  const stored = readConfig(path, warn);
  const url = normaliseUrl(env.SVC_URL || stored?.url || '');
  // --token-stdin, as every other hint says: a token on the command line stays in the shell's history and shows in the process list
  if (!url) throw new CliError('not logged in: run `svc login --url URL --token-stdin` (or `--dev-tenant ID` at a hub running the dev bypass), or set SVC_URL');
  const where = env.SVC_URL ? 'SVC_URL' : `the URL in ${path}`;
  if (!isHttpUrl(url)) throw new CliError(`${where} must be an http or https URL (the hub's base, http://127.0.0.1:8080), not '${url}'`);
  if (holdsUserInfo(url)) throw new CliError(`${where} ${USER_INFO_REFUSED}`);
  const consented = stored?.allowHttp === true && normaliseUrl(stored.url) === url;
  if (env.SVC_TOKEN) return inClearChecked(env, { url, token: env.SVC_TOKEN, tokenFrom: 'environment' }, consented);
  if (env.SVC_DEV_TENANT) return { url, devTenant: env.SVC_DEV_TENANT };
  if (stored && normaliseUrl(stored.url) === url) return inClearChecked(env, { url, token: stored.token, devTenant: stored.devTenant }, consented);
  return stored?.url ? { url, storedFor: normaliseUrl(stored.url) } : { url };
}

/**
 * The host a token sent to `url` reaches in clear: plain http to a host other than loopback (as
 * written, no name resolved); undefined for https or loopback. Anyone on the way can read the token
 * and replay it.
 */
export function inClearTo(url: string): string | undefined {
  const parsed = new URL(url);
  return parsed.protocol === 'http:' && !isLoopback(parsed.hostname) ? parsed.host : undefined;
}

/**
 * A token goes over plain http to another machine only with consent, the rule `svc login` applies:
 * its `--allow-http`, recorded in the config file for that URL, or SVC_ALLOW_HTTP=1 in the environment.
 */
function inClearChecked(env: Env, target: Target, consented: boolean): Target {
  const host = target.token ? inClearTo(target.url) : undefined;
  if (!host || consented || env.SVC_ALLOW_HTTP === '1') return target;
  const whose = target.tokenFrom === 'environment' ? 'the token in SVC_TOKEN' : 'the stored token';
  throw new CliError(
    `${target.url} is plain http to another machine: ${whose} would travel in clear to ${host}; use https, or, if the network to the hub is trusted, svc login --allow-http or set SVC_ALLOW_HTTP=1`,
  );
}

/** An absolute http or https URL: what login takes, and what SVC_URL and the config file must hold (else every call failed as 'cannot reach URL: Invalid URL'). */
export function isHttpUrl(url: string): boolean {
  try {
    return ['http:', 'https:'].includes(new URL(url).protocol);
  } catch {
    return false;
  }
}

/**
 * A user name or password in the URL (`http://alice:pw@hub`): never sent (the HTTP client drops it;
 * the hub takes a bearer token), and every message naming the URL would print it. Refused.
 */
export function holdsUserInfo(url: string): boolean {
  try {
    const parsed = new URL(url);
    return parsed.username !== '' || parsed.password !== '';
  } catch {
    return false;
  }
}

export const USER_INFO_REFUSED = 'must not hold a user name or password (svc would send neither, and would print them with the URL): give the URL without them, and the credential with svc login --token-stdin or SVC_TOKEN';

export function normaliseUrl(url: string): string {
  return url.trim().replace(/\/+$/, '');
}

function str(value: unknown): string | undefined {
  return typeof value === 'string' && value !== '' ? value : undefined;
}
