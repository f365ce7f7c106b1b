import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import type { AddressInfo, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import mailparser, { type ParsedMail } from 'mailparser';
import { SMTPServer } from 'smtp-server';

/**
 * A real SMTP server on 127.0.0.1 for tests (the `smtp-server` package): it keeps every message it
 * accepts, parsed with mailparser. With `username`, AUTH is required and the password may be changed
 * while it runs (a wrong password is answered 535). With `tls`, STARTTLS is offered with that
 * certificate; without it STARTTLS is not offered at all (the built-in certificate would fail
 * verification), so the session stays plain and AUTH is allowed over it.
 */

export interface ReceivedMail {
  /** SMTP envelope recipients (RCPT TO). */
  rcptTo: string[];
  mailFrom: string | undefined;
  /** The authenticated user, if any. */
  user: string | undefined;
  /** Whether the session had been upgraded with STARTTLS when the message arrived. */
  secure: boolean;
  /** The message as it arrived (after DATA), headers and body. */
  raw: string;
  parsed: ParsedMail;
}

export interface TestSmtpServer {
  port: number;
  readonly messages: ReceivedMail[];
  /** Refused AUTH attempts so far. */
  readonly authFailures: number;
  /** The password AUTH accepts from now on. */
  setPassword(password: string): void;
  /**
   * From now on the server says nothing more to a session once it reaches `stage` (`MAIL`: the
   * `MAIL FROM` command; `RCPT`: a `RCPT TO` command; `DATA`: the end of a message's data, which is
   * not kept), as a server whose queue or disk hangs does; undefined: it answers again (sessions
   * stalled before stay so). With `onlyFor`, at `RCPT` and `DATA` only for that recipient (a
   * message to it): the others are answered.
   */
  stallAt(stage: 'MAIL' | 'RCPT' | 'DATA' | undefined, onlyFor?: string): void;
  /** From now on `MAIL FROM` is answered `451 4.3.0 try again later` (true) or taken again (false). */
  deferMail(on: boolean): void;
  /**
   * From now on a message to `recipient` (any message: `'*'`) makes the server crash at the end of
   * its data, before it is kept or answered: every connection is dropped and the port refuses
   * connections until `restart()` (a supervisor starting it again); undefined: no more crashes.
   */
  crashOn(recipient: string | undefined): void;
  /** Crashes so far. */
  readonly crashes: number;
  /** Whether the server is down after a crash (the port refusing connections). */
  readonly down: boolean;
  /** Listens again on the same port after a crash (nothing when it is not down). */
  restart(): Promise<void>;
  /** `MAIL FROM` commands and `RCPT TO` commands received so far (answered or not). */
  readonly commands: { mail: number; rcpt: number };
  /** Resolves once `count` messages in all have arrived. */
  waitFor(count: number, ms?: number): Promise<ReceivedMail[]>;
  close(): Promise<void>;
}

export interface SmtpServerOptions {
  username?: string;
  password?: string;
  tls?: { key: string; cert: string };
  /** Recipients refused at RCPT TO (550 5.1.1), as a server without such a mailbox does. */
  refuse?: string[];
  /**
   * Called with each message once it is kept (counted in `messages`), before the server answers
   * 250: what it returns is awaited first, so a test can hold the answer (a client killed then has
   * sent the message without knowing it was taken).
   */
  beforeAnswer?: (message: ReceivedMail) => Promise<void> | undefined;
}

export async function startSmtpServer(options: SmtpServerOptions = {}): Promise<TestSmtpServer> {
  const messages: ReceivedMail[] = [];
  let password = options.password ?? '';
  let authFailures = 0;
  let stalled: 'MAIL' | 'RCPT' | 'DATA' | undefined;
  let stalledFor: string | undefined;
  let deferred = false;
  let crashFor: string | undefined;
  let crashes = 0;
  let down = false;
  const commands = { mail: 0, rcpt: 0 };
  const waiters: Array<() => void> = [];
  const server = new SMTPServer({
    logger: false,
    secure: false,
    authOptional: !options.username,
    allowInsecureAuth: true,
    disabledCommands: options.tls ? [] : ['STARTTLS'],
    ...(options.tls ? { key: options.tls.key, cert: options.tls.cert } : {}),
    onMailFrom(_address, _session, callback) {
      commands.mail++;
      if (stalled === 'MAIL') return;
      if (deferred) return callback(Object.assign(new Error('4.3.0 try again later'), { responseCode: 451 }));
      return callback();
    },
    onRcptTo(address, _session, callback) {
      commands.rcpt++;
      if (stalled === 'RCPT' && (stalledFor === undefined || address.address === stalledFor)) return;
      if (options.refuse?.includes(address.address)) return callback(Object.assign(new Error('5.1.1 no such mailbox'), { responseCode: 550 }));
      return callback();
    },
    onAuth(auth, _session, callback) {
      if (auth.username === options.username && auth.password === password) return callback(null, { user: auth.username });
      authFailures++;
      return callback(new Error('Invalid username or password'));
    },
    onData(stream, session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (chunk: Buffer) => chunks.push(chunk));
      stream.on('error', callback);
      stream.on('end', () => {
        if (crashFor !== undefined && session.envelope.rcptTo.some((r) => crashFor === '*' || r.address === crashFor)) {
          crashes++;
          down = true;
          server.server.close();
          for (const connection of server.connections) (connection as unknown as { _socket: Socket })._socket.destroy();
          return;
        }
        if (stalled === 'DATA' && (stalledFor === undefined || session.envelope.rcptTo.some((r) => r.address === stalledFor))) return;
        const raw = Buffer.concat(chunks);
        mailparser
          .simpleParser(raw)
          .then((parsed) => {
            messages.push({
              raw: raw.toString('utf8'),
              rcptTo: session.envelope.rcptTo.map((r) => r.address),
              mailFrom: session.envelope.mailFrom ? session.envelope.mailFrom.address : undefined,
              user: typeof session.user === 'string' ? session.user : undefined,
              secure: Boolean(session.secure),
              parsed,
            });
            for (const wake of waiters.splice(0)) wake();
            return options.beforeAnswer?.(messages[messages.length - 1]!);
          })
          .then(() => callback())
          .catch(callback);
      });
    },
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const port = (server.server.address() as AddressInfo).port;
  return {
    port,
    messages,
    get authFailures() {
      return authFailures;
    },
    setPassword(next) {
      password = next;
    },
    stallAt(stage, onlyFor) {
      stalled = stage;
      stalledFor = onlyFor;
    },
    deferMail(on) {
      deferred = on;
    },
    crashOn(recipient) {
      crashFor = recipient;
    },
    get crashes() {
      return crashes;
    },
    get down() {
      return down;
    },
    async restart() {
      if (!down) return;
      await new Promise<void>((resolve, reject) => {
        server.server.once('error', reject);
        server.server.listen(port, '127.0.0.1', () => {
          server.server.off('error', reject);
          resolve();
        });
      });
      down = false;
    },
    commands,
    async waitFor(count, ms = 5000) {
      const deadline = Date.now() + ms;
      while (messages.length < count) {
        const left = deadline - Date.now();
        if (left <= 0) throw new Error(`expected ${count} messages, ${messages.length} arrived: ${JSON.stringify(messages.map((m) => m.parsed.subject))}`);
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, left);
          waiters.push(() => {
            clearTimeout(timer);
            resolve();
          });
        });
      }
      return messages.slice(0, count);
    },
    close: () => (down ? Promise.resolve() : new Promise<void>((resolve) => server.close(() => resolve()))),
  };
}

export interface SelfSigned {
  key: string;
  cert: string;
  /** The certificate as a PEM file (what `svc.mail.tls-ca` names). */
  certFile: string;
  remove(): void;
}

const opensslBinary = () => ['/usr/bin/openssl', '/usr/local/bin/openssl', '/bin/openssl'].find((p) => existsSync(p));

/** Why a self-signed certificate cannot be made here (no openssl command), or undefined when it can. */
export function opensslProblem(): string | undefined {
  if (!opensslBinary()) return 'openssl not found: install it with `apt-get install openssl` (Debian) to run the STARTTLS test';
  return undefined;
}

/**
 * A self-signed certificate for 127.0.0.1 and localhost, made with the `openssl` command (Node
 * cannot make X.509 certificates by itself). Undefined when openssl is not installed.
 */
export function selfSignedCertificate(): SelfSigned | undefined {
  const openssl = opensslBinary();
  if (!openssl) return undefined;
  const dir = mkdtempSync(join(tmpdir(), 'svc-smtp-'));
  const keyFile = join(dir, 'key.pem');
  const certFile = join(dir, 'cert.pem');
  const remove = () => rmSync(dir, { recursive: true, force: true });
  try {
    execFileSync(
      openssl,
      [
        'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1',
        '-subj', '/CN=localhost', '-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost',
        '-keyout', keyFile, '-out', certFile,
      ],
      { stdio: 'pipe' },
    );
    return { key: readFileSync(keyFile, 'utf8'), cert: readFileSync(certFile, 'utf8'), certFile, remove };
  } catch (err) {
    remove();
    throw err;
  }
}

/** The addresses of a parsed message's To header. */
export function toAddresses(mail: ParsedMail): string[] {
  const to = mail.to === undefined ? [] : Array.isArray(mail.to) ? mail.to : [mail.to];
  return to.flatMap((t) => t.value.map((v) => v.address ?? ''));
}
