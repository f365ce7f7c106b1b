import { createHash, randomUUID } from 'node:crypto';
import { isIP, type Socket } from 'node:net';
import { posix } from 'node:path';
import type { Readable } from 'node:stream';
import ssh2 from 'ssh2';
import SftpClient from 'ssh2-sftp-client';
import { describeNetworkError } from '../../egress/network-error.js';
import { type EgressPolicy, isEgressDenied } from '../../egress/policy.js';
import { unlessAborted } from '../../abortable.js';
import { NAME_MAX } from '../types.js';
import { admitCommit, BodyWatch, CLEANUP_MS, type Destination, outcome, type PublishOptions, type PublishReceipt, PublishError, within } from './destination.js';

/**
 * Publication to SFTP (docs/exports-destinations.md): the host passes the outbound address policy,
 * its key is checked against the configured fingerprint before anything is authenticated, the
 * directory must exist, the final name must not; the body is streamed to `<name>.<uuid>.part` in
 * the same directory (created exclusively), then renamed with a plain SFTP `rename`, which the
 * server refuses when the final name exists (never `posix-rename@openssh.com`, which replaces it).
 */

export interface SftpDestinationOptions {
  host: string;
  port: number;
  user: string;
  /** The full remote file path, tokens already resolved; a relative path is relative to the login directory. */
  path: string;
  /** One of the server's host keys (Ed25519, ECDSA or RSA), `SHA256:<base64 without padding>` as `ssh-keygen -lf` prints it. */
  hostKeyFingerprint: string;
  password?: string;
  /** A private key (OpenSSH or PEM text). */
  privateKey?: string;
  egress: EgressPolicy;
  /** Name resolution (by the egress policy), connection, handshake, login and opening SFTP must be done within this (default 20 s). */
  connectTimeoutMs?: number;
  /** How long the cleanup after a failure or a stop may take (test hook; default CLEANUP_MS). */
  cleanupMs?: number;
  /** An SFTP request (a write, the rename) unanswered for this long cuts the connection and fails the publication (default 120 s). */
  requestTimeoutMs?: number;
}

/** SFTP status codes (draft-ietf-secsh-filexfer-02), named in reasons. */
const STATUS: Record<number, string> = {
  1: 'end of file',
  2: 'no such file',
  3: 'permission denied',
  4: 'failure',
  5: 'bad message',
  6: 'no connection',
  7: 'connection lost',
  8: 'operation unsupported',
};

const NETWORK_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'EPIPE', 'EADDRNOTAVAIL']);

/** The fingerprint `ssh-keygen -lf` prints for a host key blob: `SHA256:` and the unpadded base64 SHA-256. */
export function sshFingerprint(key: Buffer): string {
  return `SHA256:${createHash('sha256').update(key).digest('base64').replace(/=+$/, '')}`;
}

/**
 * A host key's type as `ssh-keygen -l` ends its line (`ED25519`, `ECDSA`, `RSA`) and as
 * `ssh-keyscan -t` takes it, from the type its blob names first (`ssh-ed25519`,
 * `ecdsa-sha2-nistp256`, `ssh-rsa`). undefined for a type these do not name (or a blob that names
 * none): the server's own text is not quoted.
 */
export function hostKeyType(key: Buffer): { label: string; scan: string } | undefined {
  const length = key.length >= 4 ? key.readUInt32BE(0) : 0;
  const name = length > 0 && length <= 64 && key.length >= 4 + length ? key.subarray(4, 4 + length).toString('latin1') : '';
  if (name === 'ssh-ed25519') return { label: 'ED25519', scan: 'ed25519' };
  if (name.startsWith('ecdsa-sha2-')) return { label: 'ECDSA', scan: 'ecdsa' };
  if (name === 'ssh-rsa') return { label: 'RSA', scan: 'rsa' };
  if (name === 'ssh-dss') return { label: 'DSA', scan: 'dsa' };
  return undefined;
}

/**
 * The host key types the hub asks a server for, as ssh2 orders them by default (DSA left out, as
 * OpenSSH leaves it out): the first handshake asks for all of them, and the server presents its key
 * of the first type it has. When that is not the pinned key, each other type is asked for alone.
 */
const HOST_KEY_TYPES: ReadonlyArray<{ label: string; algorithms: ssh2.ServerHostKeyAlgorithm[] }> = [
  { label: 'ED25519', algorithms: ['ssh-ed25519'] },
  { label: 'ECDSA', algorithms: ['ecdsa-sha2-nistp256', 'ecdsa-sha2-nistp384', 'ecdsa-sha2-nistp521'] },
  { label: 'RSA', algorithms: ['rsa-sha2-512', 'rsa-sha2-256', 'ssh-rsa'] },
];

/** A host key a server presented in a handshake. */
interface PresentedKey {
  fingerprint: string;
  type: ReturnType<typeof hostKeyType>;
}

/** The same fingerprint however it was pasted: `SHA256:` prefix in any case, padding or not. */
function normaliseFingerprint(value: string): string {
  const trimmed = value.trim();
  const body = trimmed.replace(/^sha256:/i, '').replace(/=+$/, '');
  return `SHA256:${body}`;
}

export class SftpDestination implements Destination {
  readonly location: string;
  private readonly dir: string;
  private readonly name: string;
  private readonly endpoint: string;
  private readonly cleanupMs: number;
  private readonly requestTimeoutMs: number;

  constructor(private readonly options: SftpDestinationOptions) {
    this.cleanupMs = options.cleanupMs ?? CLEANUP_MS;
    this.requestTimeoutMs = options.requestTimeoutMs ?? 120_000;
    const host = isIP(options.host) === 6 ? `[${options.host}]` : options.host;
    this.endpoint = `${host}:${options.port}`;
    const path = options.path.startsWith('/') ? options.path : `/~/${options.path}`;
    this.location = `sftp://${options.user}@${this.endpoint}${path}`;
    this.dir = posix.dirname(options.path);
    this.name = posix.basename(options.path);
  }

  async publish(body: Readable, opts: PublishOptions): Promise<PublishReceipt> {
    const watch = new BodyWatch(body);
    const client = new SftpClient('svc-export', { error: () => {}, end: () => {}, close: () => {} });
    let part: string | undefined;
    let stalled = false;
    let ended = false;
    let unwatch = () => {};
    let unwatchSession = () => {};
    try {
      if (watch.error) throw watch.error.error; // generation failed before publication began
      await unlessAborted(this.connect(client, opts.signal), opts.signal);
      unwatch = this.watchAnswers(client, () => {
        stalled = true;
        rawClient(client)?.destroy();
      });
      // The server's SFTP process gone (killed, crashed) while its SSH connection stays: the server
      // says so and closes the SFTP channel at once, but ssh2 keeps a request sent after that
      // waiting for ever (until the watch above, 120 s). Cut the connection: what waits fails now.
      unwatchSession = this.watchSession(client, () => {
        ended = true;
        rawClient(client)?.destroy();
      });
      await unlessAborted(this.checkTarget(client), opts.signal);
      part = posix.join(this.dir, partName(this.name));
      await this.upload(client, body, part, opts.signal);
      await admitCommit(opts);
      await unlessAborted(this.commit(client, part), opts.signal);
      part = undefined;
      return { location: this.location };
    } catch (err) {
      let failure = this.classify(err);
      if (stalled && failure.code === 'publication') {
        failure = new PublishError('publication', `${this.endpoint} answered no SFTP request for ${this.requestTimeoutMs / 1000} s (its SFTP server stalled), so the connection was cut: ${failure.reason}`);
      } else if (ended && failure.code === 'publication') {
        failure = new PublishError('publication', `the SFTP server of ${this.endpoint} ended the session (its process exited), so the connection was cut: ${failure.reason}`);
      }
      const leftover = part ? await this.removePart(client, part) : undefined;
      if (leftover) failure = new PublishError(failure.code, `${failure.reason}; ${leftover}`, leftover);
      throw outcome(watch, opts.signal, failure, leftover);
    } finally {
      unwatch();
      unwatchSession();
      watch.release();
      // A server that stopped answering never confirms the close: the connection is cut after a while.
      await within(client.end().catch(() => {}), this.cleanupMs);
      // A connection still being made (an abort during the handshake) is not known to client.end().
      rawClient(client)?.destroy();
    }
  }

  /** `signal`: the publication stopped, no further handshake is begun (the publication no longer closes the connection). */
  private async connect(client: SftpClient, signal?: AbortSignal): Promise<void> {
    const o = this.options;
    if (o.privateKey !== undefined) {
      // Read before connecting, so that a secret holding something else (a password) is named as
      // such rather than as a failed connection. The parser's message never quotes the key.
      const parsed = ssh2.utils.parseKey(o.privateKey);
      if (parsed instanceof Error) {
        throw new PublishError('publication', `the secret named in key_env is not a private key SSH can use (${parsed.message}): store an unencrypted OpenSSH or PEM private key`);
      }
    }
    const timeout = o.connectTimeoutMs ?? 20_000;
    // The time starts before the name is resolved (the egress policy resolves it here, before ssh2
    // connects): a DNS server that never answers is given up with the rest. readyTimeout ends with
    // the login: the SFTP session opened after it (the server's answer to SFTP's INIT) must come
    // within the same time, or a server whose SFTP process never answers would hold the run until
    // its time limit.
    let timer: NodeJS.Timeout | undefined;
    let late = false;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        late = true;
        rawClient(client)?.destroy();
        reject(new Error('no SFTP session in time'));
      }, timeout);
    });
    deadline.catch(() => {});
    let address: string;
    try {
      address = await Promise.race([o.egress.admit(o.host), deadline]);
    } catch (err) {
      clearTimeout(timer);
      if (late) throw new PublishError('publication', `could not connect to ${this.endpoint}: connect timeout: the name ${o.host} was not resolved within ${timeout} ms`);
      if (isEgressDenied(err)) throw new PublishError('publication', `SFTP host ${o.host} not contacted: ${(err as Error).message}`);
      throw new PublishError('publication', `could not connect to ${this.endpoint}: ${describeNetworkError(err)}`);
    }
    const expected = normaliseFingerprint(o.hostKeyFingerprint);
    /** The key of each handshake, in order; `matched`: the last one is the pinned key. */
    const presented: PresentedKey[] = [];
    let matched = false;
    let raw: (Error & { level?: string; code?: unknown }) | undefined;
    const onError = (err: Error) => {
      raw ??= err;
    };
    /** One handshake (and the login and SFTP after it when the key matches), asking for `serverHostKey` alone when given. */
    const handshake = async (serverHostKey?: ssh2.ServerHostKeyAlgorithm[]) => {
      raw = undefined;
      matched = false;
      const connected = client.connect({
        host: address,
        port: o.port,
        username: o.user,
        ...(o.password !== undefined ? { password: o.password } : {}),
        ...(o.privateKey !== undefined ? { privateKey: o.privateKey } : {}),
        ...(serverHostKey ? { algorithms: { serverHostKey } } : {}),
        readyTimeout: timeout,
        // A server that stops answering mid-transfer is given up after about a minute, so that no
        // operation (the upload, removing the .part) waits forever.
        keepaliveInterval: 15_000,
        keepaliveCountMax: 4,
        tryKeyboard: false,
        hostVerifier: (key: Buffer) => {
          const fingerprint = sshFingerprint(key);
          presented.push({ fingerprint, type: hostKeyType(key) });
          matched = fingerprint === expected;
          return matched;
        },
      });
      connected.catch(() => {});
      await Promise.race([connected, deadline]);
    };
    client.on('error', onError);
    try {
      try {
        await handshake();
      } catch (err) {
        if (matched || presented.length === 0 || late) throw err;
        // Another key than the pinned one. A SHA256 fingerprint does not say its key's type, and
        // the server presented its key of the first type asked for that it has: the pinned one may
        // be another of its keys. Each other type is asked for alone, once: a server presenting the
        // pinned key proves it holds it in that handshake, as in the first.
        const absent: string[] = [];
        const unread: string[] = [];
        let connected = false;
        for (const type of HOST_KEY_TYPES) {
          if (presented.some((key) => key.type?.label === type.label)) continue;
          await closed(client);
          signal?.throwIfAborted();
          const before = presented.length;
          try {
            await handshake(type.algorithms);
            connected = true;
            break;
          } catch (retried) {
            if (matched || late) throw retried;
            if (presented.length === before) (/no matching host key format/i.test(String((raw ?? (retried as Error)).message)) ? absent : unread).push(type.label);
          }
        }
        if (!connected) throw this.hostKeyMismatch(expected, presented, absent, unread);
      }
      // Each SFTP write waits for its acknowledgement: without TCP_NODELAY, Nagle's algorithm and
      // delayed ACKs hold every small packet back for tens of milliseconds.
      rawClient(client)?.setNoDelay(true);
    } catch (err) {
      if (err instanceof PublishError) throw err;
      const cause = raw ?? (err as Error & { level?: string; code?: unknown });
      if (cause.level === 'client-authentication' || /authentication methods failed/i.test(String(cause.message))) {
        const secret = o.privateKey !== undefined ? 'the key named in key_env' : 'the password named in password_env';
        throw new PublishError('publication', `${this.endpoint} refused the login of user ${o.user} with ${secret}`);
      }
      if (cause.level === 'client-timeout' || late) {
        throw new PublishError('publication', `no SSH session with ${this.endpoint} within ${timeout} ms (connect, handshake, login and opening SFTP)`);
      }
      if (typeof cause.code === 'string' && NETWORK_CODES.has(cause.code)) {
        throw new PublishError('publication', `could not connect to ${this.endpoint}: ${describeNetworkError(cause)}`);
      }
      const detail = typeof cause.code === 'string' ? cause.code : cause.level ? `${cause.level} error` : 'connection failed';
      throw new PublishError('publication', `the SSH connection to ${this.endpoint} failed (${detail})`);
    } finally {
      clearTimeout(timer);
      client.removeListener('error', onError);
    }
  }

  /**
   * None of the server's host keys is the pinned one: each it presented (one per type asked for),
   * the types it has no key of (`absent`) and those whose handshake failed before its key was seen
   * (`unread`), and how to get the fingerprints of its keys.
   */
  private hostKeyMismatch(expected: string, presented: readonly PresentedKey[], absent: readonly string[], unread: readonly string[]): PublishError {
    const keys = presented.map((key) => `${key.type ? `its ${key.type.label} key` : 'a key'} ${key.fingerprint}`);
    const listed = keys.length > 1 ? `${keys.slice(0, -1).join(', ')} and ${keys.at(-1)}` : keys[0];
    const only = presented.length === 1 ? presented[0]!.type : undefined;
    const scan = `ssh-keyscan${only ? ` -t ${only.scan}` : ''} -p ${this.options.port} ${this.options.host} | ssh-keygen -lf -`;
    const notes = [
      ...(absent.length ? [`it has no ${absent.join(' or ')} key`] : []),
      ...(unread.length ? [`its ${unread.join(' and ')} key could not be read (that handshake failed)`] : []),
    ];
    return new PublishError(
      'publication',
      `the host key of ${this.endpoint} does not match host_key_fingerprint: expected ${expected}, the server presented ${listed}${notes.map((n) => `; ${n}`).join('')}. ` +
        `Set host_key_fingerprint to that of one of its keys, checked with the server's administrator (${scan})`,
    );
  }

  private async checkTarget(client: SftpClient): Promise<void> {
    let dirStat: Awaited<ReturnType<SftpClient['stat']>>;
    try {
      dirStat = await client.stat(this.dir);
    } catch (err) {
      if (sftpCode(err) === 'ENOENT') throw new PublishError('publication', `directory ${this.dir} does not exist on ${this.endpoint}`);
      throw this.refusal(err, `reading directory ${this.dir}`);
    }
    if (!dirStat.isDirectory) throw new PublishError('publication', `${this.dir} on ${this.endpoint} is not a directory`);
    let existing: false | string;
    try {
      existing = await client.exists(this.options.path);
    } catch (err) {
      throw this.refusal(err, `checking ${this.options.path}`);
    }
    if (existing) throw new PublishError('collision', `${this.options.path} already exists on ${this.endpoint}; it was left untouched`);
  }

  /**
   * Calls `onStall` once the oldest SFTP request has waited `requestTimeoutMs` for its answer. SSH
   * keepalives only show that the SSH connection lives: a server whose SFTP process is stuck answers
   * them, and its SFTP requests would wait until the run's time limit.
   */
  private watchAnswers(client: SftpClient, onStall: () => void): () => void {
    let oldest: string | undefined;
    let since = Date.now();
    const timer = setInterval(
      () => {
        const first = pendingRequests(client)[0];
        if (first !== oldest) {
          oldest = first;
          since = Date.now();
        } else if (first !== undefined && Date.now() - since >= this.requestTimeoutMs) {
          clearInterval(timer);
          onStall();
        }
      },
      Math.max(10, Math.min(1_000, this.requestTimeoutMs / 10)),
    );
    timer.unref();
    return () => clearInterval(timer);
  }

  /**
   * Calls `onEnd` when the server says the SFTP channel's process exited (SSH's exit-status or
   * exit-signal, which OpenSSH sends as it closes the channel) before this publication is done with
   * it. Not on the channel's close alone: a lost connection closes it too, and is reported as such.
   */
  private watchSession(client: SftpClient, onEnd: () => void): () => void {
    const channel = sftpChannel(client);
    if (!channel) return () => {};
    channel.once('exit', onEnd);
    return () => channel.off('exit', onEnd);
  }

  /** Streams the body into the .part file (created exclusively) and waits until the server has closed it. */
  private upload(client: SftpClient, body: Readable, part: string, signal: AbortSignal | undefined): Promise<void> {
    let writer: ReturnType<SftpClient['createWriteStream']>;
    try {
      writer = client.createWriteStream(part, { flags: 'wx', mode: 0o640, highWaterMark: 1024 * 1024 });
    } catch (err) {
      return Promise.reject(this.refusal(err, `writing ${part}`));
    }
    // ssh2's write stream closes the remote handle once every write is acknowledged, then emits
    // 'close' (it emits no 'finish': it destroys itself in _final); a refused write or close emits 'error'.
    return new Promise<void>((resolve, reject) => {
      let received = 0;
      const stop = (err: unknown) => {
        cleanup();
        body.unpipe(writer);
        if (!writer.destroyed) writer.destroy();
        reject(err);
      };
      const onData = (chunk: Buffer | string) => {
        received += typeof chunk === 'string' ? Buffer.byteLength(chunk) : chunk.length;
      };
      const onBodyError = (err: unknown) => stop(err);
      const onWriterError = (err: unknown) => stop(this.refusal(err, `writing ${part}`));
      const onClose = () => {
        cleanup();
        // A write the server refused (a full disk) destroys the stream, closing its handle, before
        // its error is emitted: the close comes first, with the error already recorded.
        if (writer.errored) reject(this.refusal(writer.errored, `writing ${part}`));
        else if (body.readableEnded && writer.writableEnded && (writer as unknown as { bytesWritten: number }).bytesWritten === received) resolve();
        else reject(new PublishError('publication', `the upload of ${part} to ${this.endpoint} ended before every byte was written`));
      };
      const onAbort = () => stop(signal!.reason);
      // ssh2's write stream is not told when the connection goes: a write sent after the SFTP channel
      // closed waits for an answer for ever. The connection's own error or close ends the upload.
      const connection = rawClient(client);
      let lost: unknown;
      const onConnectionError = (err: unknown) => {
        lost ??= err;
      };
      const onConnectionClose = () => stop(this.refusal(lost ?? new Error('connection closed'), `writing ${part}`));
      const cleanup = () => {
        body.off('data', onData);
        body.off('error', onBodyError);
        writer.off('error', onWriterError);
        writer.off('close', onClose);
        signal?.removeEventListener('abort', onAbort);
        connection?.off('error', onConnectionError);
        connection?.off('close', onConnectionClose);
        writer.on('error', () => {});
      };
      body.once('error', onBodyError);
      writer.once('error', onWriterError);
      writer.once('close', onClose);
      connection?.on('error', onConnectionError);
      connection?.once('close', onConnectionClose);
      if (signal?.aborted) return onAbort();
      signal?.addEventListener('abort', onAbort, { once: true });
      if (body.errored) return onBodyError(body.errored);
      body.on('data', onData);
      body.pipe(writer);
    });
  }

  /** A plain SFTP rename: refused by the server when the final name exists (it is never replaced). */
  private async commit(client: SftpClient, part: string): Promise<void> {
    try {
      await client.rename(part, this.options.path);
    } catch (err) {
      let exists: false | string = false;
      try {
        exists = await client.exists(this.options.path);
      } catch {
        // Reported below as the rename's failure.
      }
      if (exists) throw new PublishError('collision', `${this.options.path} appeared on ${this.endpoint} while the file was uploaded; it was left untouched`);
      // No SFTP status: the server's answer was lost with the connection, after the rename was sent.
      // The server may have renamed the file, so "nothing was published" cannot be said.
      if (typeof sftpCode(err) !== 'number' && sftpCode(err) !== 'ERR_NOT_CONNECTED') {
        throw new PublishError(
          'publication',
          `the connection to ${this.endpoint} was lost while renaming ${part} to ${this.name}: the file may have been published. Retry it: a collision on retry means it was`,
        );
      }
      throw this.refusal(err, `renaming ${part} to ${this.name}`);
    }
  }

  /** Removes the .part file (within CLEANUP_MS); answers what to add to the reason when it could not. */
  private async removePart(client: SftpClient, part: string): Promise<string | undefined> {
    try {
      const removed = await within(client.delete(part, true).then(() => true), this.cleanupMs);
      return removed ? undefined : `the partial file ${part} could not be removed (no answer within ${this.cleanupMs / 1000} s)`;
    } catch {
      return `the partial file ${part} could not be removed`;
    }
  }

  /** A PublishError for a refused SFTP operation: the status code and its name, never the server's text. */
  private refusal(err: unknown, what: string): PublishError {
    if (err instanceof PublishError) return err;
    const code = (err as { code?: unknown })?.code;
    if (typeof code === 'number') {
      return new PublishError('publication', `${this.endpoint} refused ${what} (SFTP status ${code}${STATUS[code] ? `, ${STATUS[code]}` : ''})${code === 5 ? this.longNameHint() : ''}`);
    }
    if (code === 'EACCES') return new PublishError('publication', `${this.endpoint} refused ${what} (SFTP status 3, permission denied)`);
    if (code === 'ENOENT') return new PublishError('publication', `${this.endpoint} refused ${what} (SFTP status 2, no such file)`);
    if (typeof code === 'string' && NETWORK_CODES.has(code)) {
      return new PublishError('publication', `the connection to ${this.endpoint} failed while ${what}: ${describeNetworkError(err)}`);
    }
    return new PublishError('publication', `the connection to ${this.endpoint} failed while ${what}`);
  }

  /**
   * What a status 5 (bad message) means when a name of the path is longer than NAME_MAX: OpenSSH
   * answers ENAMETOOLONG so. The limit is the server's file system's (255 bytes on most, but not on
   * every server), so such a name is tried, not refused beforehand.
   */
  private longNameHint(): string {
    const names = this.options.path.split('/');
    const longest = names.reduce((a, b) => (Buffer.byteLength(b) > Buffer.byteLength(a) ? b : a), '');
    const bytes = Buffer.byteLength(longest);
    if (bytes <= NAME_MAX) return '';
    const which = longest === this.name ? 'the file name' : 'a directory name in path';
    return `: ${which} is ${bytes} bytes of UTF-8, more than the ${NAME_MAX} most file systems take`;
  }

  /** Any failure as a PublishError (what is thrown unless the body failed or the signal aborted). */
  private classify(err: unknown): PublishError {
    if (err instanceof PublishError) return err;
    if (isEgressDenied(err)) return new PublishError('publication', (err as Error).message);
    return this.refusal(err, `publishing ${this.options.path}`);
  }
}

/** The ssh2 connection under ssh2-sftp-client (not in its type declarations). */
type RawConnection = Pick<ssh2.Client, 'destroy' | 'setNoDelay' | 'on' | 'once' | 'off'>;
function rawClient(client: SftpClient): RawConnection | undefined {
  return (client as unknown as { client?: RawConnection }).client;
}

/**
 * Ends the connection of a failed handshake and waits until it has closed: its close, come after
 * the next connect began, would fail that connect (ssh2-sftp-client takes any close for its own).
 */
async function closed(client: SftpClient): Promise<void> {
  const socket = (rawClient(client) as { _sock?: Socket } | undefined)?._sock;
  if (!socket || socket.closed) return;
  await new Promise<void>((resolve) => {
    socket.once('close', () => resolve());
    socket.destroy();
  });
}

/**
 * `<name>.<uuid>.part`, the name shortened (by whole characters) so that it stays within 255 bytes,
 * the usual limit of a file name: a final name near that limit would otherwise never be published.
 */
function partName(name: string): string {
  const suffix = `.${randomUUID()}.part`;
  const kept = Array.from(name);
  while (kept.length > 0 && Buffer.byteLength(kept.join('')) + suffix.length > NAME_MAX) kept.pop();
  return kept.join('') + suffix;
}

/** The SFTP channel under ssh2-sftp-client, once connected (not in its type declarations). */
function sftpChannel(client: SftpClient): Pick<ssh2.SFTPWrapper, 'once' | 'off'> | undefined {
  return (client as unknown as { sftp?: Pick<ssh2.SFTPWrapper, 'once' | 'off'> }).sftp;
}

/** The ids of the SFTP requests waiting for their answer, oldest first (ssh2's SFTP channel; not in its type declarations). */
function pendingRequests(client: SftpClient): string[] {
  const requests = (client as unknown as { sftp?: { _requests?: Record<string, unknown> } }).sftp?._requests;
  return requests ? Object.keys(requests) : [];
}

/** ssh2-sftp-client's code for a failed stat: ENOENT (status 2 or 4), EACCES, or the numeric SFTP status. */
function sftpCode(err: unknown): unknown {
  return (err as { code?: unknown })?.code;
}
