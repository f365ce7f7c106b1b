import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * A real OpenSSH server on 127.0.0.1 for SFTP tests: Debian's `/usr/sbin/sshd` (package
 * openssh-server, which .ci/run installs), started by the test itself without systemd, and
 * stopped by its pid.
 *
 * Everything lives in a temporary directory: a fresh ed25519 host key (its fingerprint as
 * `ssh-keygen -lf` prints it; with `extraHostKeys`, RSA or ECDSA ones beside it), a client key pair whose public half is the test user's only
 * authorized key, the config, the pid file and `root/`, a directory the test user owns and can
 * write. The user is a dedicated system account (`svc-sftp-test` unless told otherwise), created
 * with useradd when missing (it stays on the machine between runs) and given a new random password
 * with chpasswd at every start; so only one harness per user runs at a time. The config allows
 * only that user, by password or key, with `UsePAM no` (no PAM stack needed in a container),
 * `StrictModes no` (the temporary files belong to root) and `Subsystem sftp internal-sftp` (no
 * sftp-server binary, no login shell). sshd runs in the foreground (`-D -e`), logging to stderr,
 * which the harness keeps (`log`) to count connections. Starting sshd and creating the user need
 * root, as in CI; without it the harness throws, it never skips.
 */

export interface TestSshd {
  host: '127.0.0.1';
  port: number;
  user: string;
  password: string;
  /** The client's private key (OpenSSH format), authorized for `user`. */
  privateKey: string;
  /** The same key as a file (mode 0600), for the `sftp` and `ssh` command-line clients. */
  privateKeyFile: string;
  /** The host key's fingerprint, `SHA256:…` as `ssh-keygen -lf` prints it. */
  fingerprint: string;
  /** The fingerprint of each host key by its type (`ed25519`, and those of `extraHostKeys`). */
  fingerprints: Partial<Record<HostKeyType, string>>;
  /** A directory `user` owns and may write (an absolute path on this machine and on the server). */
  root: string;
  /** What sshd logged so far (stderr). Never holds the password or a key. */
  log(): string;
  /** How many TCP connections sshd has logged so far. */
  connections(): number;
  stop(): Promise<void>;
}

export type HostKeyType = 'ed25519' | 'ecdsa' | 'rsa';

export interface SshdOptions {
  user?: string;
  /** Host keys of these types beside the ed25519 one (a client asking for ed25519 first is still shown that). */
  extraHostKeys?: Array<Exclude<HostKeyType, 'ed25519'>>;
}

const SSHD = '/usr/sbin/sshd';

export async function startSshd(options: SshdOptions = {}): Promise<TestSshd> {
  const user = options.user ?? 'svc-sftp-test';
  if (!existsSync(SSHD)) throw new Error(`${SSHD} is missing: install the Debian package openssh-server (.ci/run does)`);
  if (process.getuid?.() !== 0) throw new Error('the sshd test harness must run as root (it starts sshd and creates a system user)');
  const ids = ensureUser(user);
  const password = randomBytes(18).toString('base64url');
  execFileSync('chpasswd', [], { input: `${user}:${password}\n`, stdio: ['pipe', 'pipe', 'pipe'] });

  mkdirSync('/run/sshd', { recursive: true, mode: 0o755 }); // sshd's privilege-separation directory
  const dir = mkdtempSync(join(tmpdir(), 'svc-sshd-'));
  // Removed on every way out but a running server's (its stop() removes it).
  try {
    chmodSync(dir, 0o755); // the user reads its authorized keys and reaches root/ through it
    const hostKeys = (['ed25519', ...(options.extraHostKeys ?? [])] as HostKeyType[]).map((type) => ({ type, file: join(dir, `host_key_${type}`) }));
    const clientKey = join(dir, 'client_key');
    const fingerprints: Partial<Record<HostKeyType, string>> = {};
    for (const { type, file } of hostKeys) {
      keygen(file, type);
      const printed = /\b(SHA256:[A-Za-z0-9+/]+)/.exec(execFileSync('ssh-keygen', ['-lf', `${file}.pub`], { encoding: 'utf8' }))?.[1];
      if (!printed) throw new Error('ssh-keygen -lf printed no SHA256 fingerprint');
      fingerprints[type] = printed;
    }
    const fingerprint = fingerprints.ed25519!;
    keygen(clientKey);
    const authorized = join(dir, 'authorized_keys');
    mkdirSync(authorized, { mode: 0o755 });
    writeFileSync(join(authorized, user), readFileSync(`${clientKey}.pub`), { mode: 0o644 });
    const root = join(dir, 'root');
    mkdirSync(root, { mode: 0o755 });
    chownSync(root, ids.uid, ids.gid);

    let lastError: unknown;
    for (let attempt = 0; attempt < 3; attempt++) {
      const port = await freePort();
      const config = join(dir, 'sshd_config');
      writeFileSync(config, sshdConfig({ port, dir, hostKeys: hostKeys.map((k) => k.file), user }));
      try {
        const { child, log } = await launch(config, port);
        return {
          host: '127.0.0.1',
          port,
          user,
          password,
          privateKey: readFileSync(clientKey, 'utf8'),
          privateKeyFile: clientKey,
          fingerprint,
          fingerprints,
          root,
          log,
          connections: () => (log().match(/^Connection from /gm) ?? []).length,
          async stop() {
            try {
              await stopChild(child);
            } finally {
              rmSync(dir, { recursive: true, force: true });
            }
          },
        };
      } catch (err) {
        lastError = err;
        if (!/Bind to port|Address already in use/.test(String(err))) break;
      }
    }
    throw lastError;
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
}

function ensureUser(user: string): { uid: number; gid: number } {
  const lookup = () => {
    try {
      const uid = Number(execFileSync('id', ['-u', user], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim());
      const gid = Number(execFileSync('id', ['-g', user], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim());
      return { uid, gid };
    } catch {
      return undefined;
    }
  };
  const found = lookup();
  if (found) return found;
  // No home directory (internal-sftp starts in / then) and no login shell: the account only does SFTP.
  execFileSync('useradd', ['--system', '--user-group', '--no-create-home', '--home-dir', '/nonexistent', '--shell', '/usr/sbin/nologin', user], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const created = lookup();
  if (!created) throw new Error(`useradd did not create ${user}`);
  return created;
}

function keygen(file: string, type: HostKeyType = 'ed25519'): void {
  execFileSync('ssh-keygen', ['-q', '-t', type, ...(type === 'rsa' ? ['-b', '2048'] : []), '-N', '', '-C', 'svc-test', '-f', file], { stdio: ['ignore', 'pipe', 'pipe'] });
}

/** OpenSSH's version (`ssh -V`, which prints on stderr), to leave out options older releases refuse. */
function opensshVersion(): [number, number] {
  const result = spawnSync('ssh', ['-V'], { encoding: 'utf8' });
  const match = /OpenSSH_(\d+)\.(\d+)/.exec(`${result.stderr ?? ''}${result.stdout ?? ''}`);
  return match ? [Number(match[1]), Number(match[2])] : [0, 0];
}

function sshdConfig(o: { port: number; dir: string; hostKeys: string[]; user: string }): string {
  const [major, minor] = opensshVersion();
  const lines = [
    `Port ${o.port}`,
    'ListenAddress 127.0.0.1',
    ...o.hostKeys.map((key) => `HostKey ${key}`),
    `PidFile ${join(o.dir, 'sshd.pid')}`,
    `AuthorizedKeysFile ${join(o.dir, 'authorized_keys')}/%u`,
    `AllowUsers ${o.user}`,
    'UsePAM no',
    'StrictModes no',
    'PasswordAuthentication yes',
    'PubkeyAuthentication yes',
    'KbdInteractiveAuthentication no',
    'PermitRootLogin no',
    'PermitEmptyPasswords no',
    'MaxStartups 100',
    'MaxAuthTries 6',
    'Subsystem sftp internal-sftp',
    'LogLevel VERBOSE',
  ];
  // OpenSSH 9.8 penalises a source that failed to log in by refusing its connections for a while;
  // the tests log in wrongly on purpose, from 127.0.0.1, so turn that off where it exists.
  if (major > 9 || (major === 9 && minor >= 8)) lines.push('PerSourcePenalties no');
  return `${lines.join('\n')}\n`;
}

async function launch(config: string, port: number): Promise<{ child: ChildProcess; log: () => string }> {
  const child = spawn(SSHD, ['-D', '-e', '-f', config], { stdio: ['ignore', 'ignore', 'pipe'] });
  let text = '';
  child.stderr!.setEncoding('utf8');
  child.stderr!.on('data', (chunk: string) => {
    text += chunk;
  });
  await new Promise<void>((resolve, reject) => {
    const onData = () => {
      if (text.includes(`Server listening on 127.0.0.1 port ${port}`)) done();
    };
    const onExit = (code: number | null, signal: string | null) => {
      done(new Error(`sshd exited (${code ?? signal}) before listening: ${text.trim()}`));
    };
    const onError = (err: Error) => done(err);
    const timer = setTimeout(() => done(new Error(`sshd did not listen on port ${port} within 10 s: ${text.trim()}`)), 10_000);
    function done(err?: Error) {
      clearTimeout(timer);
      child.stderr!.off('data', onData);
      child.off('exit', onExit);
      child.off('error', onError);
      if (err) {
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
        reject(err);
      } else resolve();
    }
    child.stderr!.on('data', onData);
    child.once('exit', onExit);
    child.once('error', onError);
    onData();
  });
  return { child, log: () => text };
}

function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise<void>((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    child.kill('SIGTERM');
  });
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** Why the sshd harness cannot run here, or undefined when it can. */
export function sshdProblem(): string | undefined {
  if (!existsSync(SSHD)) return `${SSHD} not found: install it with \`apt-get install openssh-server\` (Debian) to run the SFTP tests`;
  if (process.getuid?.() !== 0) return 'the SFTP tests start sshd and create a system user: run them as root (CI does)';
  return undefined;
}
