import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chownSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { type AddressInfo, connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import ssh2 from 'ssh2';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { bodyOf, sha256 } from '../../../test/harness/bytes.js';
import { describeRequiring } from '../../../test/harness/requires.js';
import { sshdProblem, startSshd, type TestSshd } from '../../../test/harness/sshd.js';
import { until } from '../../../test/harness/until.js';
import { EgressPolicy } from '../../egress/policy.js';
import { LeftBehind, PublishError } from './destination.js';
import { startStallRelay } from '../../../test/harness/stall-relay.js';
import { hostKeyType, SftpDestination, type SftpDestinationOptions, sshFingerprint } from './sftp.js';

const run = promisify(execFile);

/** How long the destination's SSH keepalives (15 s, 4 unanswered) take to give up a silent connection. */
const KEEPALIVE_GIVE_UP_MS = 4 * 15_000;

/**
 * A key pair of ssh2's generateKeyPairSync, parsed. ssh2 writes about one Ed25519 pair in 170
 * malformed (a 31-byte key), which its own parseKey refuses: such a pair is made again.
 */
function keyPair(type: 'ed25519' | 'ecdsa' | 'rsa') {
  for (;;) {
    const pair = ssh2.utils.generateKeyPairSync(type, type === 'rsa' ? { bits: 2048 } : type === 'ecdsa' ? { bits: 256 } : {});
    const parsed = ssh2.utils.parseKey(pair.private);
    const pub = ssh2.utils.parseKey(pair.public);
    if (!(parsed instanceof Error) && !Array.isArray(parsed) && !(pub instanceof Error) && !Array.isArray(pub)) return { pair, parsed };
  }
}

let sshd: TestSshd;
let local: string;
let counter = 0;

describeRequiring(sshdProblem(), 'OpenSSH', 'SFTP publication against a real OpenSSH server', () => {
  beforeAll(async () => {
    // Its RSA and ECDSA host keys beside the Ed25519 one the hub is shown.
    sshd = await startSshd({ extraHostKeys: ['ecdsa', 'rsa'] });
    local = mkdtempSync(join(tmpdir(), 'svc-sftp-get-'));
  });

  afterAll(async () => {
    await sshd?.stop();
    if (local) rmSync(local, { recursive: true, force: true });
  });

  /** A fresh directory the SFTP user owns, under the server's root. */
  function freshDir(): string {
    const dir = join(sshd.root, `d${++counter}`);
    mkdirSync(dir);
    const { uid, gid } = statSync(sshd.root);
    chownSync(dir, uid, gid);
    return dir;
  }

  function destination(path: string, over: Partial<SftpDestinationOptions> = {}): SftpDestination {
    return new SftpDestination({
      host: '127.0.0.1',
      port: sshd.port,
      user: sshd.user,
      path,
      hostKeyFingerprint: sshd.fingerprint,
      password: sshd.password,
      egress: EgressPolicy.open(),
      connectTimeoutMs: 10_000,
      ...over,
    });
  }

  /** What the real `sftp` command-line client downloads from `remote`, logged in with the test key. */
  async function getWithSftpCli(remote: string): Promise<Buffer> {
    const target = join(local, `got-${++counter}`);
    const child = execFile(
      'sftp',
      ['-b', '-', '-P', String(sshd.port), '-o', 'StrictHostKeyChecking=no', '-o', 'UserKnownHostsFile=/dev/null', '-i', sshd.privateKeyFile, `${sshd.user}@127.0.0.1`],
      { encoding: 'utf8' },
    );
    const done = new Promise<void>((resolve, reject) => {
      let stderr = '';
      child.stderr?.on('data', (d: string) => {
        stderr += d;
      });
      child.once('error', reject);
      child.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`sftp exited ${code}: ${stderr}`))));
    });
    child.stdin!.end(`get "${remote}" "${target}"\n`);
    await done;
    return readFileSync(target);
  }

  /**
   * Shows that sshd saw no connection since `before`: a marker publication, which does connect, must
   * show in sshd's log as the one connection since then (sshd logs connections in order).
   */
  async function expectNoConnectionSince(before: number): Promise<void> {
    const dir = freshDir();
    await destination(join(dir, 'marker.csv')).publish(bodyOf(Buffer.from('m')), { digest: () => '' });
    await until('sshd to log the marker connection', () => sshd.connections() >= before + 1, { detail: () => sshd.log() });
    expect(sshd.connections()).toBe(before + 1);
  }

  function partFiles(dir: string): string[] {
    return readdirSync(dir).filter((name) => name.endsWith('.part'));
  }

  describe('SftpDestination against OpenSSH', () => {
    it('publishes the exact bytes with password login; the sftp client reads them back; no .part is left', async () => {
      const dir = freshDir();
      const path = join(dir, 'partners.csv');
      const bytes = Buffer.from('"id","name"\r\n"1","Zoë, \u201cquoted\u201d"\r\n', 'utf8');
      const dest = destination(path);
      const receipt = await dest.publish(bodyOf(bytes, 7), { digest: () => sha256(bytes) });
      expect(receipt).toEqual({ location: `sftp://${sshd.user}@127.0.0.1:${sshd.port}${path}` });
      expect(dest.location).toBe(receipt.location);
      expect(readFileSync(path)).toEqual(bytes);
      expect(await getWithSftpCli(path)).toEqual(bytes);
      expect(readdirSync(dir)).toEqual(['partners.csv']);
    });

    it('publishes a larger body with key login, byte for byte', async () => {
      const dir = freshDir();
      const path = join(dir, 'big.csv');
      const bytes = randomBytes(3 * 1024 * 1024 + 17);
      const receipt = await destination(path, { password: undefined, privateKey: sshd.privateKey }).publish(bodyOf(bytes), { digest: () => sha256(bytes) });
      expect(receipt.location).toBe(`sftp://${sshd.user}@127.0.0.1:${sshd.port}${path}`);
      const got = await getWithSftpCli(path);
      expect(got.length).toBe(bytes.length);
      expect(sha256(got)).toBe(sha256(bytes));
      expect(partFiles(dir)).toEqual([]);
    });

    it('publishes an empty body as an empty file', async () => {
      const dir = freshDir();
      const path = join(dir, 'empty.csv');
      await destination(path).publish(bodyOf(Buffer.alloc(0)), { digest: () => sha256(Buffer.alloc(0)) });
      expect(readFileSync(path).length).toBe(0);
      expect(readdirSync(dir)).toEqual(['empty.csv']);
    });

    it("refuses a fingerprint none of the server's host keys has, naming each key by type after one handshake per type, and writes nothing", async () => {
      const dir = freshDir();
      const wrong = sshFingerprint(randomBytes(51));
      const body = bodyOf(Buffer.from('"a"\r\n'));
      const before = sshd.connections();
      const logged = sshd.log().length;
      const err = (await destination(join(dir, 'x.csv'), { hostKeyFingerprint: wrong })
        .publish(body, { digest: () => '' })
        .catch((e: unknown) => e)) as PublishError;
      expect(err).toBeInstanceOf(PublishError);
      expect(err.code).toBe('publication');
      const { ed25519, ecdsa, rsa } = sshd.fingerprints;
      const scan = `ssh-keyscan -p ${sshd.port} 127.0.0.1 | ssh-keygen -lf -`;
      expect(err.reason).toBe(
        `the host key of 127.0.0.1:${sshd.port} does not match host_key_fingerprint: expected ${wrong}, the server presented its ED25519 key ${ed25519}, its ECDSA key ${ecdsa} and its RSA key ${rsa}. ` +
          `Set host_key_fingerprint to that of one of its keys, checked with the server's administrator (${scan})`,
      );
      expect(readdirSync(dir)).toEqual([]);
      expect(body.destroyed).toBe(true);
      // One handshake per type, then the marker's.
      await until('sshd to log the handshakes', () => sshd.connections() >= before + 3, { detail: () => sshd.log() });
      await expectNoConnectionSince(before + 3);
      // The password went to none of the three servers whose key was not the pinned one (sshd logs each
      // login tried, `Accepted password for … port N` or `Failed …`): only the marker's connection logged in.
      const since = sshd.log().slice(logged);
      const ports = [...since.matchAll(/Connection from \S+ port (\d+)/g)].map((m) => m[1]);
      expect(ports).toHaveLength(4);
      expect([...since.matchAll(/(?:Accepted|Failed) \w+ for \S+ from \S+ port (\d+)/g)].map((m) => m[1])).toEqual([ports[3]]);
      // The command it names prints each of those fingerprints with its type.
      const { stdout } = await run('sh', ['-c', scan]);
      for (const [fingerprint, type] of [[ed25519, 'ED25519'], [ecdsa, 'ECDSA'], [rsa, 'RSA']] as const) {
        expect(stdout).toMatch(new RegExp(`^\\d+ ${fingerprint!.replace(/[+/]/g, '\\$&')} .*\\(${type}\\)$`, 'm'));
      }
    });

    it.each([
      ['ECDSA', 'ecdsa', 2],
      ['RSA', 'rsa', 3],
    ] as const)("pinned to the server's %s key while it presents its Ed25519 one first: asks for that type alone, connects and publishes", async (_label, type, handshakes) => {
      const dir = freshDir();
      const path = join(dir, `${type}.csv`);
      const bytes = Buffer.from('"a"\r\n');
      const before = sshd.connections();
      // Was: refused as a mismatch naming the Ed25519 key presented.
      const receipt = await destination(path, { hostKeyFingerprint: sshd.fingerprints[type] }).publish(bodyOf(bytes), { digest: () => sha256(bytes) });
      expect(receipt.location).toBe(`sftp://${sshd.user}@127.0.0.1:${sshd.port}${path}`);
      expect(readFileSync(path)).toEqual(bytes);
      expect(partFiles(dir)).toEqual([]);
      // Ed25519 first, then each other type in turn (ECDSA before RSA) until the pinned one.
      await until('sshd to log the handshakes', () => sshd.connections() >= before + handshakes, { detail: () => sshd.log() });
      await expectNoConnectionSince(before + handshakes);
    });

    it("a server with a single host key, or one whose handshake for a type fails: the mismatch says which types it has no key of or could not be read", async () => {
      // ssh2's own server with an Ed25519 key alone, behind a relay that counts the connections and cuts the one numbered `cut`.
      const { pair: hostKey, parsed } = keyPair('ed25519');
      const ed25519 = sshFingerprint(parsed.getPublicSSH());
      const server = new ssh2.Server({ hostKeys: [hostKey.private] }, (conn) => {
        conn.on('error', () => undefined);
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
      let connections = 0;
      let cut = 0;
      let onConnection = (_n: number) => {};
      const relay = createServer((socket) => {
        socket.on('error', () => undefined);
        onConnection(++connections);
        if (connections === cut) return void socket.destroy();
        const upstream = connect((server.address() as AddressInfo).port, '127.0.0.1');
        upstream.on('error', () => socket.destroy());
        socket.pipe(upstream).pipe(socket);
        socket.on('close', () => upstream.destroy());
      });
      await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', () => resolve()));
      try {
        const port = (relay.address() as AddressInfo).port;
        const wrong = sshFingerprint(randomBytes(51));
        const mismatch = async () =>
          ((await destination('/x/a.csv', { port, hostKeyFingerprint: wrong })
            .publish(bodyOf(Buffer.from('x')), { digest: () => '' })
            .catch((e: unknown) => e)) as PublishError).reason;
        const head = `the host key of 127.0.0.1:${port} does not match host_key_fingerprint: expected ${wrong}, the server presented its ED25519 key ${ed25519}`;
        const tail = `. Set host_key_fingerprint to that of one of its keys, checked with the server's administrator (ssh-keyscan -t ed25519 -p ${port} 127.0.0.1 | ssh-keygen -lf -)`;
        expect(await mismatch()).toBe(`${head}; it has no ECDSA or RSA key${tail}`);
        expect(connections).toBe(3);
        // The third handshake (asking for RSA alone) cut before the server answered.
        connections = 0;
        cut = 3;
        expect(await mismatch()).toBe(`${head}; it has no ECDSA key; its RSA key could not be read (that handshake failed)${tail}`);
        expect(connections).toBe(3);

        // Stopped during its second handshake: it makes no more (none would be closed).
        connections = 0;
        cut = 0;
        const stop = new AbortController();
        onConnection = (n) => {
          if (n === 2) stop.abort(new Error('stopped'));
        };
        const stopped = await destination('/x/a.csv', { port, hostKeyFingerprint: wrong })
          .publish(bodyOf(Buffer.from('x')), { digest: () => '', signal: stop.signal })
          .catch((e: unknown) => e);
        expect(stopped).toBeInstanceOf(Error);
        onConnection = () => {};
        // A marker publication's three handshakes are the next connections.
        expect(await mismatch()).toBe(`${head}; it has no ECDSA or RSA key${tail}`);
        expect(connections).toBe(2 + 3);
      } finally {
        await new Promise((resolve) => relay.close(resolve));
        await new Promise((resolve) => server.close(resolve));
      }
    });

    it('names the host key types as ssh-keygen -l and ssh-keyscan -t do', () => {
      const blob = (type: 'ed25519' | 'ecdsa' | 'rsa') => keyPair(type).parsed.getPublicSSH();
      expect(hostKeyType(blob('ed25519'))).toEqual({ label: 'ED25519', scan: 'ed25519' });
      expect(hostKeyType(blob('ecdsa'))).toEqual({ label: 'ECDSA', scan: 'ecdsa' });
      expect(hostKeyType(blob('rsa'))).toEqual({ label: 'RSA', scan: 'rsa' });
      expect(hostKeyType(randomBytes(51))).toBeUndefined();
    });

    it('accepts the fingerprint with padding or a lower-case prefix', async () => {
      const dir = freshDir();
      const path = join(dir, 'fp.csv');
      const bytes = Buffer.from('"a"\r\n');
      const pasted = `sha256:${sshd.fingerprint.slice('SHA256:'.length)}=`;
      await destination(path, { hostKeyFingerprint: pasted }).publish(bodyOf(bytes), { digest: () => sha256(bytes) });
      expect(readFileSync(path)).toEqual(bytes);
    });

    it('reports a refused password as publication naming the user and the secret, never the password', async () => {
      const dir = freshDir();
      const wrongPassword = `not-${sshd.password}`;
      const err = (await destination(join(dir, 'x.csv'), { password: wrongPassword })
        .publish(bodyOf(Buffer.from('x')), { digest: () => '' })
        .catch((e: unknown) => e)) as PublishError;
      expect(err).toBeInstanceOf(PublishError);
      expect(err.code).toBe('publication');
      expect(err.reason).toContain(`user ${sshd.user}`);
      expect(err.reason).toContain('password_env');
      expect(err.reason).not.toContain(wrongPassword);
      expect(readdirSync(dir)).toEqual([]);
    });

    it('reports a refused key as publication naming key_env', async () => {
      const dir = freshDir();
      const other = mkdtempSync(join(tmpdir(), 'svc-sftp-key-'));
      try {
        await run('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', join(other, 'k')]);
        const err = (await destination(join(dir, 'x.csv'), { password: undefined, privateKey: readFileSync(join(other, 'k'), 'utf8') })
          .publish(bodyOf(Buffer.from('x')), { digest: () => '' })
          .catch((e: unknown) => e)) as PublishError;
        expect(err.code).toBe('publication');
        expect(err.reason).toContain('key_env');
        expect(err.reason).not.toContain('PRIVATE KEY');
      } finally {
        rmSync(other, { recursive: true, force: true });
      }
    });

    it('names a key_env secret that holds no private key (a password) as such, before connecting, never quoting it', async () => {
      const dir = freshDir();
      const err = (await destination(join(dir, 'x.csv'), { password: undefined, privateKey: 'hunter2-not-a-key' })
        .publish(bodyOf(Buffer.from('x')), { digest: () => '' })
        .catch((e: unknown) => e)) as PublishError;
      expect(err).toBeInstanceOf(PublishError);
      expect(err.code).toBe('publication');
      expect(err.reason).toBe('the secret named in key_env is not a private key SSH can use (Unsupported key format): store an unencrypted OpenSSH or PEM private key');
      expect(existsSync(join(dir, 'x.csv'))).toBe(false);
    });

    it('refuses a directory that does not exist', async () => {
      const dir = join(sshd.root, 'missing', 'deeper');
      const err = (await destination(join(dir, 'x.csv'))
        .publish(bodyOf(Buffer.from('x')), { digest: () => '' })
        .catch((e: unknown) => e)) as PublishError;
      expect(err.code).toBe('publication');
      expect(err.reason).toBe(`directory ${dir} does not exist on 127.0.0.1:${sshd.port}`);
      expect(existsSync(join(sshd.root, 'missing'))).toBe(false);
    });

    it('reports a write the server refuses (no permission) as publication with the SFTP status', async () => {
      const dir = join(sshd.root, `root-owned-${++counter}`);
      mkdirSync(dir, { mode: 0o755 }); // owned by root: the SFTP user may not create files in it
      const err = (await destination(join(dir, 'x.csv'))
        .publish(bodyOf(Buffer.from('x')), { digest: () => '' })
        .catch((e: unknown) => e)) as PublishError;
      expect(err.code).toBe('publication');
      expect(err.reason).toContain('SFTP status 3, permission denied');
      expect(readdirSync(dir)).toEqual([]);
    });

    it('reports a full disk as publication with the SFTP status of the refused write, and removes the .part', async () => {
      const dir = freshDir();
      // A 64 KiB file system where the file should go (mounting needs root, as the sshd harness does).
      await run('mount', ['-t', 'tmpfs', '-o', 'size=64k,mode=0755', 'tmpfs', dir]);
      try {
        const { uid, gid } = statSync(sshd.root);
        chownSync(dir, uid, gid);
        const err = (await destination(join(dir, 'full.csv'))
          .publish(bodyOf(Buffer.alloc(1024 * 1024, 'x')), { digest: () => '' })
          .catch((e: unknown) => e)) as PublishError;
        expect(err).toBeInstanceOf(PublishError);
        expect(err.code).toBe('publication');
        // As docs/exports-destinations.md says (was: 'the upload of … ended before every byte was written').
        expect(err.reason).toMatch(/^127\.0\.0\.1:\d+ refused writing \/.+\.part \(SFTP status 4, failure\)$/);
        expect(readdirSync(dir)).toEqual([]);
      } finally {
        await run('umount', [dir]);
      }
    });

    it('publishes a file whose name is near the 255-byte limit (its .part name is shortened to fit)', async () => {
      const dir = freshDir();
      const name = `${'é'.repeat(100)}${'n'.repeat(50)}.csv`; // 254 bytes
      const bytes = Buffer.from('"a"\r\n"1"\r\n');
      const receipt = await destination(join(dir, name)).publish(bodyOf(bytes), { digest: () => '' });
      expect(receipt.location).toBe(`sftp://${sshd.user}@127.0.0.1:${sshd.port}${join(dir, name)}`);
      expect(readFileSync(join(dir, name))).toEqual(bytes);
      expect(partFiles(dir)).toEqual([]);
    });

    it('a name longer than the server takes (256 bytes): publication naming the name and its length, nothing written', async () => {
      const dir = freshDir();
      const name = 'é'.repeat(128); // 128 characters, 256 bytes
      const err = (await destination(join(dir, name))
        .publish(bodyOf(Buffer.from('"a"\r\n')), { digest: () => '' })
        .catch((e: unknown) => e)) as PublishError;
      expect(err).toBeInstanceOf(PublishError);
      expect(err.code).toBe('publication');
      // OpenSSH answers ENAMETOOLONG as status 5, which alone says nothing of the name.
      expect(err.reason).toBe(`127.0.0.1:${sshd.port} refused checking ${join(dir, name)} (SFTP status 5, bad message): the file name is 256 bytes of UTF-8, more than the 255 most file systems take`);
      expect(readdirSync(dir)).toEqual([]);
      const deep = join(dir, 'd'.repeat(256), 'p.csv');
      const inDir = (await destination(deep)
        .publish(bodyOf(Buffer.from('"a"\r\n')), { digest: () => '' })
        .catch((e: unknown) => e)) as PublishError;
      expect(inDir.reason).toMatch(/ \(SFTP status 5, bad message\): a directory name in path is 256 bytes of UTF-8, more than the 255 most file systems take$/);
    });

    it('ends in collision when the final name exists, leaving it untouched and no .part behind', async () => {
      const dir = freshDir();
      const path = join(dir, 'taken.csv');
      writeFileSync(path, 'earlier delivery');
      const body = bodyOf(Buffer.from('"new"\r\n'));
      const err = (await destination(path)
        .publish(body, { digest: () => '' })
        .catch((e: unknown) => e)) as PublishError;
      expect(err).toBeInstanceOf(PublishError);
      expect(err.code).toBe('collision');
      expect(err.reason).toContain(path);
      expect(readFileSync(path, 'utf8')).toBe('earlier delivery');
      expect(readdirSync(dir)).toEqual(['taken.csv']);
      expect(body.destroyed).toBe(true);
    });

    it('ends in collision when the final name is a symbolic link, to a file or to nothing: the link and what it points at are left untouched', async () => {
      const dir = freshDir();
      const elsewhere = freshDir();
      writeFileSync(join(elsewhere, 'kept.csv'), 'kept');
      symlinkSync(join(elsewhere, 'kept.csv'), join(dir, 'to-file.csv'));
      // A dangling link: writing through it would create elsewhere/new.csv.
      symlinkSync(join(elsewhere, 'new.csv'), join(dir, 'dangling.csv'));
      for (const name of ['to-file.csv', 'dangling.csv']) {
        const err = (await destination(join(dir, name))
          .publish(bodyOf(Buffer.from('"new"\r\n')), { digest: () => '' })
          .catch((e: unknown) => e)) as PublishError;
        expect({ name, code: err.code }).toEqual({ name, code: 'collision' });
      }
      expect(readdirSync(dir).sort()).toEqual(['dangling.csv', 'to-file.csv']);
      expect(readdirSync(elsewhere)).toEqual(['kept.csv']);
      expect(readFileSync(join(elsewhere, 'kept.csv'), 'utf8')).toBe('kept');
    });

    it('ends in collision when the final name appears during the upload: the rename is refused, the .part removed', async () => {
      const dir = freshDir();
      const path = join(dir, 'raced.csv');
      const body = Readable.from(
        (async function* () {
          yield Buffer.alloc(256 * 1024, 'a');
          await until('the .part file on the server', () => partFiles(dir).length === 1);
          writeFileSync(path, 'the other writer');
          yield Buffer.alloc(1024, 'b');
        })(),
        { objectMode: false },
      );
      const err = (await destination(path)
        .publish(body, { digest: () => '' })
        .catch((e: unknown) => e)) as PublishError;
      expect(err).toBeInstanceOf(PublishError);
      expect(err.code).toBe('collision');
      expect(readFileSync(path, 'utf8')).toBe('the other writer');
      expect(readdirSync(dir)).toEqual(['raced.csv']);
    });

    it('rethrows the body’s own error object when generation fails mid-way, and removes the .part', async () => {
      const dir = freshDir();
      const failure = new Error('the snapshot query failed');
      let sawPart = false;
      const body = Readable.from(
        (async function* () {
          yield Buffer.alloc(128 * 1024, 'a');
          await until('the .part file on the server', () => partFiles(dir).length === 1);
          sawPart = true;
          throw failure;
        })(),
        { objectMode: false },
      );
      const err = await destination(join(dir, 'broken.csv'))
        .publish(body, { digest: () => '' })
        .catch((e: unknown) => e);
      expect(err).toBe(failure);
      expect(sawPart).toBe(true);
      expect(readdirSync(dir)).toEqual([]);
    });

    it('rethrows the error of a body that failed before publication began, without connecting', async () => {
      const failure = new Error('the entity was dropped');
      const body = new Readable({ read() {} });
      body.on('error', () => {});
      body.destroy(failure);
      await until('the body to report its error', () => body.errored);
      const before = sshd.connections();
      const err = await destination(join(sshd.root, 'never-started.csv'))
        .publish(body, { digest: () => '' })
        .catch((e: unknown) => e);
      expect(err).toBe(failure);
      await expectNoConnectionSince(before);
    });

    it('asks beforeCommit once every byte is on the server, before the rename; a refusal (an abort) leaves nothing', async () => {
      const dir = freshDir();
      const bytes = Buffer.from('"a","b"\r\n'.repeat(1000));
      let parts: string[] = [];
      await destination(join(dir, 'admitted.csv')).publish(bodyOf(bytes), {
        digest: () => sha256(bytes),
        beforeCommit: async () => {
          parts = readdirSync(dir);
        },
      });
      // When asked, the whole file was the .part; after, the final name only.
      expect(parts).toHaveLength(1);
      expect(parts[0]).toMatch(/^admitted\.csv\..*\.part$/);
      expect(readdirSync(dir)).toEqual(['admitted.csv']);
      const controller = new AbortController();
      const reason = new Error('the run has ended meanwhile');
      const err = await destination(join(dir, 'refused.csv'))
        .publish(bodyOf(bytes), { digest: () => sha256(bytes), signal: controller.signal, beforeCommit: async () => controller.abort(reason) })
        .catch((e: unknown) => e);
      expect(err).toBe(reason);
      expect(readdirSync(dir)).toEqual(['admitted.csv']);
    });

    it('stops on abort: throws the signal’s reason and removes the .part', async () => {
      const dir = freshDir();
      const controller = new AbortController();
      const reason = new Error('the hub is stopping');
      const body = Readable.from(
        (async function* () {
          yield Buffer.alloc(64 * 1024, 'a');
          await until('the .part file on the server', () => partFiles(dir).length === 1);
          controller.abort(reason);
          yield Buffer.alloc(64 * 1024, 'b');
          await new Promise(() => {}); // never ends by itself
        })(),
        { objectMode: false },
      );
      const err = await destination(join(dir, 'aborted.csv'))
        .publish(body, { digest: () => '', signal: controller.signal })
        .catch((e: unknown) => e);
      expect(err).toBe(reason);
      expect(readdirSync(dir)).toEqual([]);
      expect(body.destroyed).toBe(true);
    });

    it('a server that stops answering mid-upload: a stop ends the publication within the cleanup bound, naming the .part it could not remove', async () => {
      const relay = await startStallRelay(sshd.port);
      try {
        const dir = freshDir();
        const controller = new AbortController();
        const reason = new Error('the hub is stopping');
        const body = Readable.from(
          (async function* () {
            yield Buffer.alloc(64 * 1024, 'a');
            await until('the .part file on the server', () => partFiles(dir).length === 1);
            relay.stall();
            controller.abort(reason);
            yield Buffer.alloc(64 * 1024, 'b');
            await new Promise(() => {}); // never ends by itself
          })(),
          { objectMode: false },
        );
        const cleanupMs = 300;
        const started = performance.now();
        const err = await destination(join(dir, 'stalled.csv'), { port: relay.port, cleanupMs })
          .publish(body, { digest: () => '', signal: controller.signal })
          .catch((e: unknown) => e);
        const took = performance.now() - started;
        expect(err).toBeInstanceOf(LeftBehind);
        expect((err as LeftBehind).cause).toBe(reason);
        expect((err as LeftBehind).leftover).toMatch(/^the partial file \/.+\.part could not be removed \(no answer within 0\.3 s\)$/);
        // Left behind, as the reason says (the server never heard the removal).
        expect(partFiles(dir)).toHaveLength(1);
        // The removal and the close each waited one bound at most (ssh2's keepalive would take a minute).
        expect(took).toBeLessThan(10 * cleanupMs + 2_000);
        expect(body.destroyed).toBe(true);
      } finally {
        await relay.close();
      }
    });

    it('a connection cut mid-upload: publication at once, naming the connection and the .part it could not remove', async () => {
      const relay = await startStallRelay(sshd.port);
      let cutAt = Number.NaN;
      try {
        const dir = freshDir();
        const body = Readable.from(
          (async function* () {
            yield Buffer.alloc(64 * 1024, 'a');
            await until('the .part file on the server', () => partFiles(dir).length === 1);
            cutAt = performance.now();
            relay.cut();
            yield Buffer.alloc(64 * 1024, 'b');
          })(),
          { objectMode: false },
        );
        const err = (await destination(join(dir, 'cut.csv'), { port: relay.port })
          .publish(body, { digest: () => '' })
          .catch((e: unknown) => e)) as PublishError;
        expect(err).toBeInstanceOf(PublishError);
        expect(err.code).toBe('publication');
        expect(err.reason).toMatch(/^the connection to 127\.0\.0\.1:\d+ failed while writing \/.+\.part\b.*; the partial file \/.+\.part could not be removed/);
        // Not held until the run's time limit (ssh2's write stream waited for ever for its answer), nor for the
        // keepalives' minute: from the cut (the login before it is not what is measured), a hang guard of a sixth of that.
        expect(performance.now() - cutAt).toBeLessThan(KEEPALIVE_GIVE_UP_MS / 6);
        expect(existsSync(join(dir, 'cut.csv'))).toBe(false);
        expect(partFiles(dir)).toHaveLength(1);
      } finally {
        await relay.close();
      }
    });

    it('an SFTP server that stalls while SSH still answers: publication once a request waits requestTimeoutMs, the connection cut', async () => {
      const dir = freshDir();
      const sftpProcesses = async () => {
        const { stdout } = await run('pgrep', ['-f', `sshd: ${sshd.user}@internal-sftp`]).catch(() => ({ stdout: '' }));
        return stdout.split('\n').filter(Boolean);
      };
      const before = new Set(await sftpProcesses());
      let stopped: string[] = [];
      let stoppedAt = Number.NaN;
      const requestTimeoutMs = 1_000;
      const cleanupMs = 300;
      const body = Readable.from(
        (async function* () {
          yield Buffer.alloc(64 * 1024, 'a');
          await until('the .part file on the server', () => partFiles(dir).length === 1);
          // This connection's SFTP process stops; its SSH process goes on answering keepalives.
          stopped = (await sftpProcesses()).filter((pid) => !before.has(pid));
          expect(stopped).toHaveLength(1);
          await run('kill', ['-STOP', ...stopped]);
          stoppedAt = performance.now();
          yield Buffer.alloc(1024 * 1024, 'b');
        })(),
        { objectMode: false },
      );
      try {
        const err = (await destination(join(dir, 'stalled.csv'), { requestTimeoutMs, cleanupMs })
          .publish(body, { digest: () => '' })
          .catch((e: unknown) => e)) as PublishError;
        expect(err).toBeInstanceOf(PublishError);
        expect(err.code).toBe('publication');
        expect(err.reason).toMatch(/^127\.0\.0\.1:\d+ answered no SFTP request for 1 s \(its SFTP server stalled\), so the connection was cut: .*; the partial file \/.+\.part could not be removed/);
        // Not held until the run's time limit: from the stop (not the login before it), within a few times the
        // request's wait and the cleanup's together.
        expect(performance.now() - stoppedAt).toBeLessThan(5 * (requestTimeoutMs + cleanupMs));
        expect(existsSync(join(dir, 'stalled.csv'))).toBe(false);
      } finally {
        if (stopped.length) await run('kill', ['-CONT', ...stopped]);
      }
    });

    it('an SFTP server process killed mid-upload while SSH stays up: publication at once, saying the session ended, not after requestTimeoutMs', async () => {
      const dir = freshDir();
      const sftpProcesses = async () => {
        const { stdout } = await run('pgrep', ['-f', `sshd: ${sshd.user}@internal-sftp`]).catch(() => ({ stdout: '' }));
        return stdout.split('\n').filter(Boolean);
      };
      const before = new Set(await sftpProcesses());
      const requestTimeoutMs = 30_000;
      let killedAt = Number.NaN;
      const body = Readable.from(
        (async function* () {
          yield Buffer.alloc(64 * 1024, 'a');
          await until('the .part file on the server', () => partFiles(dir).length === 1);
          // This connection's SFTP process dies; its SSH process stays and closes the channel.
          const killed = (await sftpProcesses()).filter((pid) => !before.has(pid));
          expect(killed).toHaveLength(1);
          // Taken before the kill: the destination may have rejected the publication (and the test read
          // killedAt) before `kill` itself has exited and its promise settled.
          killedAt = performance.now();
          await run('kill', ['-KILL', ...killed]);
          // Kept: the next write is to come after the client has heard the channel close, which nothing outside the destination shows.
          await new Promise((r) => setTimeout(r, 200));
          yield Buffer.alloc(1024 * 1024, 'b');
        })(),
        { objectMode: false },
      );
      const err = (await destination(join(dir, 'killed.csv'), { requestTimeoutMs })
        .publish(body, { digest: () => '' })
        .catch((e: unknown) => e)) as PublishError;
      expect(err).toBeInstanceOf(PublishError);
      expect(err.code).toBe('publication');
      expect(err.reason).toMatch(
        /^the SFTP server of 127\.0\.0\.1:\d+ ended the session \(its process exited\), so the connection was cut: the connection to 127\.0\.0\.1:\d+ failed while writing \/.+\.part; the partial file \/.+\.part could not be removed$/,
      );
      // Not the 30 s an unanswered request is given (ssh2 keeps a write sent after the channel closed waiting):
      // from the kill (not the login before it), under a third of it.
      expect(performance.now() - killedAt).toBeLessThan(requestTimeoutMs / 3);
      expect(existsSync(join(dir, 'killed.csv'))).toBe(false);
    });

    it('an SSH server that logs the user in and never answers SFTP: publication within connectTimeoutMs', async () => {
      // ssh2's own server: login accepted, the sftp subsystem accepted as a bare channel that never speaks.
      const { pair: hostKey, parsed } = keyPair('ed25519');
      const server = new ssh2.Server({ hostKeys: [hostKey.private] }, (conn) => {
        conn.on('error', () => undefined);
        conn.on('authentication', (ctx) => ctx.accept());
        conn.on('session', (accept) => accept().on('subsystem', (acceptSubsystem) => void acceptSubsystem()));
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
      try {
        const port = (server.address() as AddressInfo).port;
        const connectTimeoutMs = 1_000;
        const started = performance.now();
        const err = (await destination('/x/silent.csv', { port, hostKeyFingerprint: sshFingerprint(parsed.getPublicSSH()), connectTimeoutMs })
          .publish(bodyOf(Buffer.from('x')), { digest: () => '' })
          .catch((e: unknown) => e)) as PublishError;
        expect(err).toBeInstanceOf(PublishError);
        expect(err.code).toBe('publication');
        expect(err.reason).toBe(`no SSH session with 127.0.0.1:${port} within 1000 ms (connect, handshake, login and opening SFTP)`);
        // Cut by that time (the default is 20 s): a hang guard of ten times it.
        expect(performance.now() - started).toBeLessThan(10 * connectTimeoutMs);
      } finally {
        await new Promise((resolve) => server.close(resolve));
      }
    });

    it('a connection lost after the rename was sent: publication, saying the file may have been published (it was)', async () => {
      const relay = await startStallRelay(sshd.port);
      try {
        const dir = freshDir();
        const path = join(dir, 'renamed.csv');
        const bytes = Buffer.from('"a","b"\r\n"1","2"\r\n');
        const err = (await destination(path, { port: relay.port })
          .publish(bodyOf(bytes), {
            digest: () => '',
            // The rename goes out and the server performs it; its answer never comes back, then the connection is cut.
            beforeCommit: async () => {
              relay.dropAnswers();
              setTimeout(() => relay.cut(), 500);
            },
          })
          .catch((e: unknown) => e)) as PublishError;
        expect(err).toBeInstanceOf(PublishError);
        expect(err.code).toBe('publication');
        expect(err.reason).toMatch(/^the connection to 127\.0\.0\.1:\d+ was lost while renaming \/.+\.part to renamed\.csv: the file may have been published\. Retry it: a collision on retry means it was/);
        // It was: the server renamed it before the connection was cut.
        expect(readFileSync(path)).toEqual(bytes);
        expect(partFiles(dir)).toEqual([]);
      } finally {
        await relay.close();
      }
    });

    it('refuses a loopback host under deny-private before connecting (sshd sees no connection)', async () => {
      const before = sshd.connections();
      const err = (await destination(join(sshd.root, 'never.csv'), { egress: new EgressPolicy({ denyPrivate: true }) })
        .publish(bodyOf(Buffer.from('x')), { digest: () => '' })
        .catch((e: unknown) => e)) as PublishError;
      expect(err).toBeInstanceOf(PublishError);
      expect(err.code).toBe('publication');
      expect(err.reason).toContain('127.0.0.1');
      expect(err.reason).toContain('a loopback address');
      expect(err.reason).toContain('outbound address policy');
      await expectNoConnectionSince(before);
      expect(existsSync(join(sshd.root, 'never.csv'))).toBe(false);
    });

    it('reports a port nobody listens on as publication naming host:port', async () => {
      const port = await new Promise<number>((resolve) => {
        const server = createServer().listen(0, '127.0.0.1', () => {
          const address = server.address();
          server.close(() => resolve(typeof address === 'object' && address ? address.port : 0));
        });
      });
      const err = (await destination('/tmp/x.csv', { port })
        .publish(bodyOf(Buffer.from('x')), { digest: () => '' })
        .catch((e: unknown) => e)) as PublishError;
      expect(err.code).toBe('publication');
      expect(err.reason).toContain(`127.0.0.1:${port}`);
      expect(err.reason).toContain('ECONNREFUSED');
    });

    it('names a relative path relative to the login directory in the location', () => {
      expect(destination('out/file.csv').location).toBe(`sftp://${sshd.user}@127.0.0.1:${sshd.port}/~/out/file.csv`);
    });
  });
});

describe('SFTP name resolution under the egress policy', () => {
  it('a name whose DNS server never answers fails within connectTimeoutMs (resolution and connection together)', async () => {
    const asked: string[] = [];
    const egress = new EgressPolicy({
      denyPrivate: true,
      resolve: (hostname) => {
        asked.push(hostname);
        return new Promise(() => undefined);
      },
    });
    const connectTimeoutMs = 300;
    const destination = new SftpDestination({ host: 'silent.test', port: 22, user: 'u', path: '/x/a.csv', hostKeyFingerprint: 'SHA256:x', password: 'p', egress, connectTimeoutMs });
    const started = performance.now();
    const err = (await destination.publish(Readable.from([Buffer.from('x')]), { digest: () => '' }).catch((e: unknown) => e)) as PublishError;
    expect(asked).toEqual(['silent.test']);
    expect(err).toBeInstanceOf(PublishError);
    expect(err.code).toBe('publication');
    expect(err.reason).toBe('could not connect to silent.test:22: connect timeout: the name silent.test was not resolved within 300 ms');
    // Cut by that time (the default is 20 s), nothing else to wait for: a hang guard of fifteen times it.
    expect(performance.now() - started).toBeLessThan(15 * connectTimeoutMs);
  });
});
