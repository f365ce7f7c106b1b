import { type AddressInfo, connect, createServer, type Socket } from 'node:net';
import { networkInterfaces } from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Config } from '../config/config.js';
import { captureLogs } from '../../test/harness/log-capture.js';
import { describeRequiring } from '../../test/harness/requires.js';
import { opensslProblem, type SelfSigned, selfSignedCertificate, startSmtpServer, type TestSmtpServer, toAddresses } from '../../test/harness/smtp.js';
import { startStallRelay } from '../../test/harness/stall-relay.js';
import { createMailer, isLoopback, type Mailer, MockedMailer, sendFailure, serverUnavailable, SmtpMailer } from './mailer.js';

/** The mailer port against a real SMTP server on loopback (smtp-server), read back with mailparser. */

const PASSWORD = 'smtp-pa55word-xyz';
let plain: TestSmtpServer;

beforeAll(async () => {
  plain = await startSmtpServer({ username: 'hub', password: PASSWORD });
});

afterAll(async () => {
  await plain.close();
});

const config = (overrides: Record<string, string | number | boolean>) => Config.load({ env: {}, overrides });

/** A server that greets, then answers EHLO with continuation lines, one every 100 ms, for ever: the socket is never idle. */
/**
 * A server that keeps its reply to EHLO going a line every 100 ms. Its lines are the tests' clock: a
 * loaded machine slows them as it slows the hub's timers, so bounds counted in lines need no room for
 * its pauses (an interval never catches up: n lines take at least n × 100 ms).
 */
async function drippingServer(): Promise<{ port: number; lines(): number; linesReached(n: number): Promise<string>; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  let lines = 0;
  const waiting: { n: number; resolve: (said: string) => void }[] = [];
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => undefined);
    socket.write('220 drip ESMTP\r\n');
    socket.once('data', () => {
      socket.write('250-drip\r\n');
      const timer = setInterval(() => {
        socket.write('250-still here\r\n');
        lines++;
        for (const w of waiting) if (lines >= w.n) w.resolve(`still going after ${w.n} lines`);
      }, 100);
      socket.on('close', () => {
        clearInterval(timer);
        sockets.delete(socket);
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    lines: () => lines,
    linesReached: (n) => new Promise((resolve) => waiting.push({ n, resolve })),
    close() {
      for (const socket of sockets) socket.destroy();
      for (const w of waiting) w.resolve('closed');
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** An IPv4 address of this machine that is not loopback (the test server is reached through it as a remote one is). */
function nonLoopbackAddress(): string | undefined {
  return Object.values(networkInterfaces())
    .flat()
    .find((a) => a && a.family === 'IPv4' && !a.internal)?.address;
}

const mail = { to: ['ops@example.com', 'dev@example.org'], subject: 'Org 7 created', text: 'Hello\nline two', headers: { 'X-Svc-Event': 'org.created', 'X-Svc-Event-Id': '42' } };

describe('the SMTP mailer', () => {
  it('sends through SMTP with AUTH: recipients, subject, body and headers arrive', async () => {
    const mailer = createMailer(config({ 'svc.mail.host': '127.0.0.1', 'svc.mail.port': plain.port, 'svc.mail.username': 'hub', 'svc.mail.password': PASSWORD, 'svc.mail.from': 'Hub <hub@example.net>' }));
    expect(mailer.mode).toBe('smtp');
    const before = plain.messages.length;
    const result = await mailer.send(mail);
    expect(result.outcome).toBe('sent');
    const [got] = (await plain.waitFor(before + 1)).slice(before);
    expect(got!.user).toBe('hub');
    expect(got!.rcptTo).toEqual(['ops@example.com', 'dev@example.org']);
    expect(toAddresses(got!.parsed)).toEqual(['ops@example.com', 'dev@example.org']);
    expect(got!.parsed.from?.value[0]?.address).toBe('hub@example.net');
    expect(got!.parsed.subject).toBe('Org 7 created');
    expect(got!.parsed.text?.trim()).toBe('Hello\nline two');
    expect(got!.parsed.headers.get('x-svc-event')).toBe('org.created');
    expect(got!.parsed.headers.get('x-svc-event-id')).toBe('42');
    mailer.close();
  });

  it('a recipient the server refuses: sent to the others, and the refused one named in the result', async () => {
    const refusing = await startSmtpServer({ refuse: ['dev@example.org'] });
    try {
      const mailer = createMailer(config({ 'svc.mail.host': '127.0.0.1', 'svc.mail.port': refusing.port, 'svc.mail.from': 'hub@example.net' }));
      const result = await mailer.send(mail);
      expect(result).toMatchObject({ outcome: 'sent', accepted: ['ops@example.com'], refused: ['dev@example.org'] });
      const [got] = await refusing.waitFor(1);
      expect(got!.rcptTo).toEqual(['ops@example.com']);
      mailer.close();
      // A check whose RCPT TO (the sender's own address) is refused: the server answers all the same.
      const refusedSender = createMailer(config({ 'svc.mail.host': '127.0.0.1', 'svc.mail.port': refusing.port, 'svc.mail.from': 'dev@example.org' }));
      await expect(refusedSender.check()).resolves.toBeUndefined();
      refusedSender.close();
    } finally {
      await refusing.close();
    }
  });

  it('a server that keeps a reply going a line at a time, never idle: the send fails once three times svc.mail.timeout have run out', async () => {
    const dripping = await drippingServer();
    try {
      const mailer = createMailer(config({ 'svc.mail.host': '127.0.0.1', 'svc.mail.port': dripping.port, 'svc.mail.from': 'hub@example.net', 'svc.mail.timeout': '300ms' }));
      const outcome = await Promise.race([
        mailer.send(mail).then(
          () => 'sent',
          (err: unknown) => sendFailure(err),
        ),
        dripping.linesReached(50),
      ]);
      expect(outcome).toMatchObject({ message: expect.stringMatching(/900 ms/) });
      // Cut at 900 ms: at most 9 lines by then (15: room for the close to reach the server).
      expect(dripping.lines()).toBeLessThan(15);
      mailer.close();
    } finally {
      await dripping.close();
    }
  });

  it('a wrong password fails with EAUTH 535, and what may be logged of it carries no password', async () => {
    const mailer = new SmtpMailer({ host: '127.0.0.1', port: plain.port, secure: false, requireStartTls: false, username: 'hub', password: 'wrong-password-123', from: 'hub@example.net', timeoutMs: 5000 });
    const failures = plain.authFailures;
    const err = await mailer.send(mail).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeDefined();
    const logged = sendFailure(err);
    expect(logged).toMatchObject({ code: 'EAUTH', responseCode: 535 });
    expect(JSON.stringify(logged)).not.toContain('wrong-password-123');
    expect(JSON.stringify(logged)).not.toContain(Buffer.from('\0hub\0wrong-password-123').toString('base64'));
    expect(plain.authFailures).toBe(failures + 1);
    mailer.close();
  });

  it('what may be logged of a failure keeps the start of a huge server reply only (a relay may answer in a megabyte of lines)', () => {
    const reply = Array.from({ length: 12_000 }, () => `550-${'q'.repeat(70)}`).join('\n');
    const logged = sendFailure(Object.assign(new Error(`Can't send mail - all recipients were rejected: ${reply}`), { code: 'EENVELOPE', responseCode: 550, command: 'RCPT TO' }));
    expect(logged.message.startsWith("Can't send mail - all recipients were rejected: 550-qqq")).toBe(true);
    expect(logged.message.length).toBeLessThanOrEqual(2_100);
    expect(logged.message).toMatch(/… \(\d+ more characters\)$/);
    expect(logged).toMatchObject({ code: 'EENVELOPE', responseCode: 550, command: 'RCPT TO' });
    expect(sendFailure(new Error('short')).message).toBe('short');
  });

  it('requiring STARTTLS refuses a server that does not offer it', async () => {
    const mailer = createMailer(config({ 'svc.mail.host': '127.0.0.1', 'svc.mail.port': plain.port, 'svc.mail.starttls': true, 'svc.mail.username': 'hub', 'svc.mail.password': PASSWORD }));
    const before = plain.messages.length;
    await expect(mailer.send(mail)).rejects.toThrow(/STARTTLS/i);
    expect(plain.messages.length).toBe(before);
    mailer.close();
  });

  it('credentials go to a server off this machine only over TLS: a server (or a network) that does not offer STARTTLS gets no AUTH, though svc.mail.starttls is off', async () => {
    const address = nonLoopbackAddress();
    if (!address) throw new Error('this machine has no IPv4 address besides loopback to reach the test server through');
    // The plain server (no STARTTLS) through a relay on a non-loopback address, recording what the hub sends.
    const sent: Buffer[] = [];
    const relay = createServer((client) => {
      const upstream = connect(plain.port, '127.0.0.1');
      client.on('data', (chunk: Buffer) => sent.push(chunk));
      client.pipe(upstream).pipe(client);
      for (const socket of [client, upstream]) socket.on('error', () => undefined);
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
    });
    await new Promise<void>((resolve) => relay.listen(0, address, resolve));
    try {
      const port = (relay.address() as AddressInfo).port;
      const before = plain.messages.length;
      const mailer = createMailer(config({ 'svc.mail.host': address, 'svc.mail.port': port, 'svc.mail.username': 'hub', 'svc.mail.password': PASSWORD }));
      await expect(mailer.send(mail)).rejects.toThrow(/STARTTLS/i);
      expect(plain.messages.length).toBe(before);
      const conversation = Buffer.concat(sent).toString('latin1');
      expect(conversation).toMatch(/^EHLO /m);
      expect(conversation).not.toMatch(/^AUTH/im);
      expect(conversation).not.toContain(Buffer.from(`\0hub\0${PASSWORD}`).toString('base64'));
      mailer.close();
      // What counts as this machine (a relay there may take credentials plain: the first test above).
      expect(isLoopback(address)).toBe(false);
      expect(['127.0.0.1', '127.8.0.1', 'localhost', 'LOCALHOST', '::1', '[::1]'].every(isLoopback)).toBe(true);
      expect(['10.0.0.1', 'mail.example.com', 'localhost.example.com', '::2'].some(isLoopback)).toBe(false);
    } finally {
      await new Promise<void>((resolve) => relay.close(() => resolve()));
    }
  });

  it('check: a server that answers passes without being sent anything; one that is stalled, closed or keeps a reply going fails as not answering', async () => {
    const at = (port: number, extra: Record<string, string> = {}) => createMailer(config({ 'svc.mail.host': '127.0.0.1', 'svc.mail.port': port, 'svc.mail.from': 'hub@example.net', 'svc.mail.timeout': '300ms', ...extra }));
    const failure = (mailer: Mailer) => mailer.check().then(() => 'answered', (err: unknown) => ({ unavailable: serverUnavailable(err), ...sendFailure(err) }));
    const before = plain.messages.length;
    const { mail, rcpt } = plain.commands;
    // As far as MAIL FROM and RCPT TO the sender's own address (after AUTH, as a send logs in), then RSET: no message.
    const credentials = { 'svc.mail.username': 'hub', 'svc.mail.password': PASSWORD };
    expect(await failure(at(plain.port, credentials))).toBe('answered');
    expect(plain.messages.length).toBe(before);
    expect(plain.commands).toEqual({ mail: mail + 1, rcpt: rcpt + 1 });
    // A server that refuses MAIL FROM (here: AUTH required and none configured) answers all the same.
    expect(await failure(at(plain.port))).toMatchObject({ unavailable: false, responseCode: 530, command: 'MAIL FROM' });
    // One that greets and answers EHLO but not MAIL FROM, or answers it 451, is not taking mail.
    plain.stallAt('MAIL');
    try {
      expect(await failure(at(plain.port, credentials))).toMatchObject({ unavailable: true, code: 'ETIMEDOUT' });
      plain.stallAt(undefined);
      plain.deferMail(true);
      expect(await failure(at(plain.port, credentials))).toMatchObject({ unavailable: true, code: 'ENOTREADY', responseCode: 451, command: 'MAIL FROM' });
      plain.deferMail(false);
      // One that takes MAIL FROM but says nothing at RCPT TO (was: passed, the check not going that far).
      plain.stallAt('RCPT');
      expect(await failure(at(plain.port, credentials))).toMatchObject({ unavailable: true, code: 'ETIMEDOUT' });
      // Stalled for another address only: the check's is answered.
      plain.stallAt('RCPT', 'ops@example.com');
      expect(await failure(at(plain.port, credentials))).toBe('answered');
    } finally {
      plain.stallAt(undefined);
      plain.deferMail(false);
    }
    // STARTTLS required and not offered: the server answers (a send would fail, and say why).
    expect(await failure(at(plain.port, { 'svc.mail.starttls': 'true' }))).toMatchObject({ unavailable: false });

    const relay = await startStallRelay(plain.port);
    relay.stall();
    expect(await failure(at(relay.port))).toMatchObject({ unavailable: true, code: 'ETIMEDOUT' });
    await relay.close();
    expect(await failure(at(relay.port))).toMatchObject({ unavailable: true });

    // A reply kept going: cut off after three times the timeout.
    const dripping = await drippingServer();
    try {
      expect(await Promise.race([failure(at(dripping.port)), dripping.linesReached(50)])).toMatchObject({ unavailable: true, message: expect.stringMatching(/check did not complete within 900 ms/) });
      expect(dripping.lines()).toBeLessThan(15);
    } finally {
      await dripping.close();
    }
  });

  it('refuses an unusable svc.mail.from or svc.mail.tls-ca at start, naming the property', () => {
    expect(() => createMailer(config({ 'svc.mail.host': '127.0.0.1', 'svc.mail.from': 'not an address' }))).toThrow(/svc\.mail\.from/);
    expect(() => createMailer(config({ 'svc.mail.host': '127.0.0.1', 'svc.mail.tls-ca': '/nonexistent/ca.pem' }))).toThrow(/svc\.mail\.tls-ca/);
  });

  it('defaults the port to 587, or 465 with svc.mail.secure', () => {
    expect(config({}).int('svc.mail.port')).toBe(587);
    expect(config({ 'svc.mail.secure': true }).int('svc.mail.port')).toBe(465);
  });
});

// Needs the openssl command to make the certificate: without it skipped with a warning on a
// workstation, and a failure in CI (it used to return early there, counted as passed).
describeRequiring(opensslProblem(), 'openssl', 'STARTTLS with a self-signed certificate', () => {
  let cert: SelfSigned;
  let tls: TestSmtpServer | undefined;

  beforeAll(async () => {
    const made = selfSignedCertificate();
    if (!made) throw new Error('openssl made no certificate');
    cert = made;
    tls = await startSmtpServer({ username: 'hub', password: PASSWORD, tls: { key: cert.key, cert: cert.cert } });
  });

  afterAll(async () => {
    await tls?.close();
    cert?.remove();
  });

  it('upgrades the session when svc.mail.tls-ca trusts the certificate, and refuses to send when nothing does', async () => {
    if (!tls) throw new Error('no STARTTLS server');
    const base = { 'svc.mail.host': '127.0.0.1', 'svc.mail.port': tls.port, 'svc.mail.starttls': true, 'svc.mail.username': 'hub', 'svc.mail.password': PASSWORD };
    const trusted = createMailer(config({ ...base, 'svc.mail.tls-ca': cert.certFile }));
    await trusted.send(mail);
    const [got] = await tls.waitFor(1);
    expect(got!.secure).toBe(true);
    expect(got!.user).toBe('hub');
    expect(got!.parsed.subject).toBe('Org 7 created');
    trusted.close();

    const untrusted = createMailer(config(base));
    await expect(untrusted.send(mail)).rejects.toThrow(/certificate/i);
    expect(tls.messages.length).toBe(1);
    untrusted.close();
  });
});

describe('the mocked mailer', () => {
  it('is what an unset svc.mail.host gives; it logs the message as mocked and sends nothing', async () => {
    const mailer = createMailer(config({}));
    expect(mailer).toBeInstanceOf(MockedMailer);
    const logs = captureLogs('info');
    try {
      const before = plain.messages.length;
      expect(await mailer.send(mail)).toEqual({ outcome: 'mocked' });
      const line = logs.lines().find((l) => l.mail === 'mocked');
      expect(line).toMatchObject({ level: 'info', to: mail.to, subject: 'Org 7 created' });
      expect(plain.messages.length).toBe(before);
    } finally {
      logs.restore();
    }
  });
});
