import { readFileSync } from 'node:fs';
import { isIPv4, isIPv6 } from 'node:net';
import { rootCertificates } from 'node:tls';
import nodemailer, { type Transporter } from 'nodemailer';
import SMTPConnection from 'nodemailer/lib/smtp-connection/index.js';
import type SMTPTransport from 'nodemailer/lib/smtp-transport/index.js';
import { type Config, ConfigError } from '../config/config.js';
import { logger, registerSecret } from '../observability/logger.js';
import { isAddress } from './rules.js';

/** One message of an e-mail rule: plain text, one or more recipients. */
export interface OutgoingMail {
  to: string[];
  subject: string;
  text: string;
  /** Extra headers (`X-Svc-Event`, …). */
  headers?: Record<string, string>;
  /**
   * The same for every send of one message (`e42.t<event time>.r3.<deployment>`): the Message-ID is
   * `<svc-hub.KEY@the domain of svc.mail.from>`, so a service that de-duplicates by Message-ID drops
   * a copy sent again (a restart, a second leader). Without it the Message-ID is random.
   */
  key?: string;
}

interface SendResult {
  /** `sent`: the server accepted it; `mocked`: no mail host is configured, it was only logged. */
  outcome: 'sent' | 'mocked';
  messageId?: string;
  /** The server's reply to the message. */
  response?: string;
  /** Recipients the server took (all of them when it does not say). */
  accepted?: string[];
  /** Recipients the server refused at RCPT TO while it took the others: they get nothing. */
  refused?: string[];
}

/** The port e-mail rules send through. A failure is thrown; the caller decides what it means. */
export interface Mailer {
  readonly mode: 'smtp' | 'mocked';
  send(mail: OutgoingMail): Promise<SendResult>;
  /**
   * Whether the server answers and takes mail, without sending anything: connect, greeting, EHLO
   * (and STARTTLS and AUTH as a send would), `MAIL FROM:<svc.mail.from>`, `RCPT TO:<svc.mail.from>`,
   * `RSET`, then QUIT. Throws as a send would when it does not (see `serverUnavailable`; a `4xx` to
   * MAIL FROM counts too; any answer to RCPT TO but `421` is one).
   */
  check(): Promise<void>;
  /** Where messages go, for log lines (`host:port`). */
  readonly server: string;
  /** The longest one send may take, in ms (a claim on a message holds past it); none given: 0. */
  readonly sendLimitMs?: number;
  close(): void;
}

/**
 * Whether a failure says the server could not be reached or stopped answering (connection refused
 * or lost, a timeout, DNS, `421 service not available`; in a check, a `4xx` to MAIL FROM:
 * `ENOTREADY`), rather than refusing what was sent: the next
 * send would most likely meet the same, paying its timeout again.
 */
export function serverUnavailable(err: unknown): boolean {
  const e = err as { code?: unknown; responseCode?: unknown };
  return e?.responseCode === 421 || ['ECONNECTION', 'ETIMEDOUT', 'ESOCKET', 'EDNS', 'ENOTREADY'].includes(String(e?.code));
}

/** Without `svc.mail.host`: nothing leaves the process, each message is logged as mocked. */
export class MockedMailer implements Mailer {
  readonly mode = 'mocked' as const;
  readonly server = 'mocked';
  readonly sendLimitMs = 0;

  async send(mail: OutgoingMail): Promise<SendResult> {
    logger().info(
      { mail: 'mocked', to: mail.to, subject: mail.subject, headers: mail.headers, bodyLength: mail.text.length },
      `e-mail mocked (svc.mail.host is not set): to ${mail.to.join(', ')}: ${mail.subject}`,
    );
    logger().debug({ mail: 'mocked', body: mail.text }, 'mocked e-mail body');
    return { outcome: 'mocked' };
  }

  async check(): Promise<void> {}

  close(): void {}
}

interface SmtpSettings {
  host: string;
  port: number;
  /** TLS from the first byte (SMTPS). */
  secure: boolean;
  /** Refuse to send unless the connection is upgraded with STARTTLS. */
  requireStartTls: boolean;
  username?: string;
  password?: string;
  from: string;
  /** PEM certificate authorities trusted beside the system ones. */
  ca?: string;
  timeoutMs: number;
}

/** Whether `host` names this machine: `localhost` or a loopback address (127.0.0.0/8, ::1). */
export function isLoopback(host: string): boolean {
  const h = host.trim().toLowerCase().replace(/^\[(.*)\]$/, '$1');
  if (h === 'localhost' || h.endsWith('.localhost')) return true;
  if (isIPv4(h)) return h.startsWith('127.');
  if (isIPv6(h)) return h === '::1' || h === '0:0:0:0:0:0:0:1' || h.startsWith('::ffff:127.');
  return false;
}

/** A whole send may take this many times `svc.mail.timeout`. */
const SEND_LIMIT_FACTOR = 3;

/** Sends over SMTP with nodemailer: one connection per message (rule mail is low volume). */
export class SmtpMailer implements Mailer {
  readonly mode = 'smtp' as const;
  readonly server: string;
  private readonly transport: Transporter<SMTPTransport.SentMessageInfo>;
  /** How a connection is made (a send's and a check's alike). */
  private readonly connection: SMTPConnection.Options;

  /** The domain of svc.mail.from: the right-hand side of the Message-IDs. */
  private readonly domain: string;

  /** The address of svc.mail.from (the envelope's sender, `MAIL FROM`). */
  private readonly envelopeFrom: string;

  /** SMTP AUTH's credentials, when a username is set. */
  private readonly auth: { user: string; pass: string } | undefined;

  constructor(private readonly settings: SmtpSettings) {
    registerSecret(settings.password);
    this.server = `${settings.host}:${settings.port}`;
    const address = /<([^<>]*)>\s*$/.exec(settings.from)?.[1] ?? settings.from;
    this.envelopeFrom = address.trim();
    this.domain = this.envelopeFrom.split('@').at(-1)!.toLowerCase();
    this.auth = settings.username ? { user: settings.username, pass: settings.password ?? '' } : undefined;
    this.connection = {
      host: settings.host,
      port: settings.port,
      secure: settings.secure,
      // Credentials never cross a network in clear: with a username, a server off this machine
      // must upgrade with STARTTLS (one that does not offer it, or a network that strips the offer,
      // gets nothing), whatever svc.mail.starttls says. A relay on loopback may take them plain.
      requireTLS: settings.requireStartTls || (Boolean(settings.username) && !isLoopback(settings.host)),
      // Node's `ca` replaces the built-in authorities: keep them, and add the configured ones.
      tls: settings.ca ? { ca: [...rootCertificates, settings.ca] } : undefined,
      connectionTimeout: settings.timeoutMs,
      greetingTimeout: settings.timeoutMs,
      socketTimeout: settings.timeoutMs,
    };
    this.transport = nodemailer.createTransport({
      ...this.connection,
      auth: this.auth,
      disableFileAccess: true,
      disableUrlAccess: true,
    });
  }

  get sendLimitMs(): number {
    return this.limitMs;
  }

  /** The whole of a send or a check may take this long, then the connection goes. */
  private get limitMs(): number {
    return this.settings.timeoutMs * SEND_LIMIT_FACTOR;
  }

  private overLimit(what: string): Error {
    return Object.assign(new Error(`timeout: the ${what} did not complete within ${this.limitMs} ms (three times svc.mail.timeout)`), { code: 'ETIMEDOUT' });
  }

  async check(): Promise<void> {
    const connection = new SMTPConnection(this.connection);
    await new Promise<void>((resolve, reject) => {
      // A server that keeps its greeting going a line at a time is cut off as a send is.
      const timer = setTimeout(() => done(this.overLimit('check')), this.limitMs);
      let settled = false;
      const done = (err?: Error | null) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        if (err) {
          connection.close();
          reject(err);
        } else {
          connection.quit();
          resolve();
        }
      };
      connection.on('error', done);
      connection.on('end', () => done(Object.assign(new Error('the server closed the connection during the check'), { code: 'ECONNECTION' })));
      connection.connect((err) => {
        if (err) return done(err);
        // As far as a send goes before its message: AUTH as a send logs in, then MAIL FROM (a server
        // that greets and answers EHLO but hangs when asked to take mail fails here), RCPT TO the
        // sender's own address (one that hangs at a recipient fails here), then RSET: no message.
        const takesMail = () =>
          this.envelope(connection, 'MAIL FROM', (mailErr) =>
            mailErr ? done(mailErr) : this.envelope(connection, 'RCPT TO', (rcptErr) => (rcptErr ? done(rcptErr) : connection.reset((resetErr) => done(resetErr)))),
          );
        if (this.auth && connection.allowsAuth) connection.login(this.auth, (authErr) => (authErr ? done(authErr) : takesMail()));
        else takesMail();
      });
    });
  }

  /**
   * `MAIL FROM:<svc.mail.from>` or `RCPT TO:<svc.mail.from>` on an open session, nothing following
   * but RSET: what a send starts a message with. nodemailer has no public call for one command alone
   * (its `send` goes on to DATA), so its command queue is used as its own envelope code uses it. To
   * MAIL FROM, a `4xx` answer is a server not taking mail for now (`ENOTREADY`, counted as not
   * answering: `serverUnavailable`) and any other failure an answer. To RCPT TO, every answer but
   * `421` is one (the address refused or deferred says nothing of the server: no message is sent
   * to it either way); only silence (the timeout) or a `421` is not answering.
   */
  private envelope(connection: SMTPConnection, command: 'MAIL FROM' | 'RCPT TO', callback: (err?: Error) => void): void {
    const queue = connection as unknown as { _responseActions: Array<(reply: string) => void>; _sendCommand(command: string): void };
    queue._responseActions.push((reply: string) => {
      const responseCode = Number(reply.slice(0, 3));
      if (reply.startsWith('2') || (command === 'RCPT TO' && responseCode !== 421)) return callback();
      const code = responseCode === 421 ? 'ECONNECTION' : reply.startsWith('4') ? 'ENOTREADY' : 'EENVELOPE';
      callback(Object.assign(new Error(`the server answered ${command} with ${reply}`), { code, responseCode, command }));
    });
    queue._sendCommand(`${command}:<${this.envelopeFrom}>`);
  }

  async send(mail: OutgoingMail): Promise<SendResult> {
    // nodemailer's timeouts are per phase and for an idle socket: a server that keeps a reply going
    // a line at a time would hold the send (and the consumer's later events) for ever. The whole
    // send gets three times the timeout (connect, greeting, the conversation), then the connection goes.
    const deadline = AbortSignal.timeout(this.limitMs);
    let info: SMTPTransport.SentMessageInfo;
    try {
      info = await this.transport.sendMail({
        from: this.settings.from,
        to: mail.to,
        subject: mail.subject,
        text: mail.text,
        headers: mail.headers,
        messageId: mail.key ? `<svc-hub.${mail.key}@${this.domain}>` : undefined,
        signal: deadline,
      });
    } catch (err) {
      if (!deadline.aborted) throw err;
      throw this.overLimit('send');
    }
    const address = (a: string | { address: string }) => (typeof a === 'string' ? a : a.address);
    return { outcome: 'sent', messageId: info.messageId, response: info.response, accepted: (info.accepted ?? []).map(address), refused: (info.rejected ?? []).map(address) };
  }

  close(): void {
    this.transport.close();
  }
}

/** Characters of a failure's message logged at most. */
const MESSAGE_MAX = 2_000;

/**
 * What a failed send may log: never the error object itself (nodemailer errors can carry the
 * command that was sent), only its message and codes. The password is also registered with the
 * logger's scrubber.
 */
export function sendFailure(err: unknown): { message: string; code?: string; responseCode?: number; command?: string } {
  const e = err as { message?: string; code?: string; responseCode?: number; command?: string };
  const message = String(e?.message ?? err);
  // A relay's reply is quoted in the message, and may run to a megabyte of lines: the start of it says what went wrong.
  const out: { message: string; code?: string; responseCode?: number; command?: string } = {
    message: message.length > MESSAGE_MAX ? `${message.slice(0, MESSAGE_MAX)}… (${message.length - MESSAGE_MAX} more characters)` : message,
  };
  if (typeof e?.code === 'string') out.code = e.code;
  if (typeof e?.responseCode === 'number') out.responseCode = e.responseCode;
  // `AUTH PLAIN`, `RCPT TO`…: the verb only, never an argument.
  if (typeof e?.command === 'string') out.command = e.command.split(' ').slice(0, 2).filter((w) => /^[A-Z-]+$/.test(w)).join(' ');
  return out;
}

/** The mailer the configuration asks for: SMTP when `svc.mail.host` is set, else mocked. */
export function createMailer(config: Config): Mailer {
  const host = config.optional('svc.mail.host')?.trim();
  if (!host) return new MockedMailer();
  const from = config.string('svc.mail.from');
  const address = /<([^<>]*)>\s*$/.exec(from)?.[1] ?? from;
  if (!isAddress(address.trim())) throw ConfigError.of('svc.mail.from', `'${from}' is not an e-mail address`);
  const caPath = config.optional('svc.mail.tls-ca');
  let ca: string | undefined;
  if (caPath) {
    try {
      ca = readFileSync(caPath, 'utf8');
    } catch (err) {
      throw ConfigError.of('svc.mail.tls-ca', `cannot read ${caPath}: ${(err as Error).message}`);
    }
    if (!ca.includes('-----BEGIN CERTIFICATE-----')) throw ConfigError.of('svc.mail.tls-ca', `${caPath} holds no PEM certificate`);
  }
  return new SmtpMailer({
    host,
    port: config.int('svc.mail.port'),
    secure: config.bool('svc.mail.secure'),
    requireStartTls: config.bool('svc.mail.starttls'),
    username: config.optional('svc.mail.username'),
    password: config.optional('svc.mail.password'),
    from,
    ca,
    timeoutMs: config.duration('svc.mail.timeout'),
  });
}
