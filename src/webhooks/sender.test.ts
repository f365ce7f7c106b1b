import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { until } from '../../test/harness/until.js';
import { EgressPolicy } from '../egress/policy.js';
import { RESPONSE_BODY_MAX } from './model.js';
import { WebhookSender } from './sender.js';

/**
 * The sender against a real HTTP server on loopback: what it records for each kind of answer, and
 * that it never throws. Timeouts are shortened through the sender's options.
 */

type Handler = (req: IncomingMessage, res: ServerResponse, body: string) => void;

const routes = new Map<string, Handler>();
let server: Server;
let base: string;
const sockets = new Set<Socket>();
/** Requests the server got, by path. */
const seen: Array<{ path: string; headers: IncomingMessage['headers']; body: string }> = [];

beforeAll(async () => {
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      seen.push({ path: req.url!, headers: req.headers, body });
      const handler = routes.get(req.url!.split('?')[0]!);
      if (handler) handler(req, res, body);
      else res.writeHead(404).end('no route');
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  routes.set('/ok', (_req, res) => res.writeHead(200, { 'Content-Type': 'text/plain' }).end('thanks'));
  routes.set('/echo', (req, res, body) => res.writeHead(201).end(JSON.stringify({ query: req.url, body, signature: req.headers['x-svc-signature'], agent: req.headers['user-agent'] })));
  routes.set('/redirect', (_req, res) => res.writeHead(302, { Location: `${base}/ok` }).end());
  routes.set('/fail', (_req, res) => res.writeHead(503).end('try later'));
  routes.set('/hang', () => undefined);
  // A body that never ends: the sender must stop reading after what it keeps.
  routes.set('/endless', (_req, res) => {
    res.writeHead(200, { 'Content-Type': 'text/plain' });
    const chunk = 'x'.repeat(16 * 1024);
    const timer = setInterval(() => res.write(chunk), 5);
    res.on('close', () => clearInterval(timer));
  });
  // A body that trickles: each chunk inside the exchange timeout, the whole longer than connect + exchange.
  routes.set('/drip', (_req, res) => {
    res.writeHead(200, { 'Content-Type': 'text/plain' });
    const timer = setInterval(() => res.write('.'), 100);
    res.on('close', () => clearInterval(timer));
  });
  // Multi-byte characters across the cut: 2,001 characters of which each is 4 bytes in UTF-8.
  routes.set('/emoji', (_req, res) => res.writeHead(200).end('😀'.repeat(RESPONSE_BODY_MAX + 1)));
  routes.set('/reset', (_req, res) => {
    res.writeHead(500, { 'Content-Type': 'text/plain', 'Content-Length': '100' });
    res.write('partial');
    setTimeout(() => res.socket?.destroy(), 20);
  });
  // Part of the head, then nothing: undici's head timeout or the whole-exchange limit ends it.
  routes.set('/slow-head', (_req, res) => {
    res.socket?.write('HTTP/1.1 200 OK\r\n');
    const timer = setInterval(() => res.socket?.write('X-Wait: 1\r\n'), 100);
    res.socket?.on('close', () => clearInterval(timer));
  });
  routes.set('/empty', (_req, res) => res.writeHead(204).end());
  // Interim or upgrade answers the request never asked for; the connection stays open on this side.
  routes.set('/continue', (_req, res) => res.socket?.write('HTTP/1.1 100 Continue\r\n\r\n'));
  routes.set('/upgrade', (_req, res) => res.socket?.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n'));
  // A status line of three digits below 100: llhttp reads it, undici's own assertion refuses it.
  routes.set('/status-099', (_req, res) => res.socket?.end('HTTP/1.1 099 Early\r\nContent-Length: 2\r\n\r\nok'));
});

afterAll(async () => {
  for (const s of sockets) s.destroy();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

function sender(options: Partial<ConstructorParameters<typeof WebhookSender>[0]> = {}): WebhookSender {
  return new WebhookSender({ connectTimeoutMs: 1_000, timeoutMs: 400, userAgent: 'svc-hub-test/1', ...options });
}

async function withSender<T>(fn: (s: WebhookSender) => Promise<T>, options?: Partial<ConstructorParameters<typeof WebhookSender>[0]>): Promise<T> {
  const s = sender(options);
  try {
    return await fn(s);
  } finally {
    await s.close();
  }
}

describe('WebhookSender', () => {
  it('a 2xx: ok, the status, the answer, the duration; the request carries the headers, the body, the query and the user agent', async () => {
    const outcome = await withSender((s) => s.send(`${base}/echo?a=1&b=two`, { 'Content-Type': 'application/json', 'X-Svc-Signature': 'sha256=abc' }, '{"n":1}'));
    expect(outcome).toMatchObject({ ok: true, httpStatus: 201, error: null });
    expect(JSON.parse(outcome.responseBody!)).toEqual({ query: '/echo?a=1&b=two', body: '{"n":1}', signature: 'sha256=abc', agent: 'svc-hub-test/1' });
    expect(outcome.durationMs).toBeGreaterThanOrEqual(0);
    expect(outcome.attemptedAt).toBeInstanceOf(Date);
    const request = seen.find((r) => r.path === '/echo?a=1&b=two')!;
    expect(request.headers['content-type']).toBe('application/json');
  });

  it('a redirect is not followed: an unsuccessful answer with its status', async () => {
    const before = seen.filter((r) => r.path === '/ok').length;
    const outcome = await withSender((s) => s.send(`${base}/redirect`, {}, '{}'));
    expect(outcome).toMatchObject({
      ok: false,
      httpStatus: 302,
      error: `answered HTTP 302, a redirect to ${base}/ok; redirects are not followed (point the integration's targetUrl at the address it names)`,
    });
    expect(seen.filter((r) => r.path === '/ok').length).toBe(before);
  });

  it('a redirect\'s error names where it pointed without its credentials, query or fragment, the integration\'s secrets masked; one without Location says a redirect', async () => {
    const secret = 'whsec-s3cr3t-value';
    routes.set('/redirect-secret', (_req, res) => res.writeHead(307, { Location: `https://alice:pw@other.example/${secret}/hook?sig=abc#frag` }).end());
    routes.set('/redirect-bare', (_req, res) => res.writeHead(301).end('moved'));
    try {
      const masked = await withSender((s) => s.send(`${base}/redirect-secret`, {}, '{}', undefined, [secret]));
      expect(masked).toMatchObject({ ok: false, httpStatus: 307, error: expect.stringMatching(/^answered HTTP 307, a redirect to https:\/\/\S*other\.example\/\[REDACTED\]\/hook…; redirects are not followed/) });
      expect(masked.error).not.toMatch(/s3cr3t|alice|pw@|sig=|frag/);
      const bare = await withSender((s) => s.send(`${base}/redirect-bare`, {}, '{}'));
      expect(bare).toMatchObject({ ok: false, httpStatus: 301, responseBody: 'moved', error: "answered HTTP 301, a redirect; redirects are not followed (point the integration's targetUrl at the address it names)" });
      // Another unsuccessful status keeps no error: its status and body say it.
      routes.set('/redirect-bare', (_req, res) => res.writeHead(304).end());
      expect(await withSender((s) => s.send(`${base}/redirect-bare`, {}, '{}'))).toMatchObject({ ok: false, httpStatus: 304, error: null });
    } finally {
      routes.delete('/redirect-secret');
      routes.delete('/redirect-bare');
    }
  });

  it('a redirect to another address, of any kind (301, 302, 303, 307, 308: those keeping the POST too), is not followed: that address gets nothing', async () => {
    let elsewhere = 0;
    const other = createServer((_req, res) => {
      elsewhere++;
      res.writeHead(200).end('followed');
    });
    await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve));
    const target = `http://127.0.0.1:${(other.address() as AddressInfo).port}/hook`;
    try {
      for (const status of [301, 302, 303, 307, 308]) {
        routes.set('/redirect-away', (_req, res) => res.writeHead(status, { Location: target }).end(`moved to ${target}`));
        const outcome = await withSender((s) => s.send(`${base}/redirect-away`, { 'Content-Type': 'application/json' }, '{"n":1}'));
        expect(outcome).toMatchObject({ ok: false, httpStatus: status, responseBody: `moved to ${target}`, error: expect.stringContaining(`a redirect to ${target};`) });
      }
      expect(elsewhere).toBe(0);
    } finally {
      routes.delete('/redirect-away');
      await new Promise<void>((resolve) => other.close(() => resolve()));
    }
  });

  it('an idle connection is closed after idleTimeoutMs, however long the receiver\'s Keep-Alive header asks it to be kept', async () => {
    const open = new Set<Socket>();
    const receiver = createServer((_req, res) => res.writeHead(200).end('ok'));
    // Node's server answers `Keep-Alive: timeout=600` and keeps an idle connection that long itself.
    receiver.keepAliveTimeout = 600_000;
    receiver.on('connection', (socket: Socket) => {
      open.add(socket);
      socket.on('close', () => open.delete(socket));
    });
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    const s = sender({ idleTimeoutMs: 300 });
    try {
      const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
      const outcomes = await Promise.all(Array.from({ length: 3 }, () => s.send(url, {}, '{}')));
      expect(outcomes.map((o) => o.httpStatus)).toEqual([200, 200, 200]);
      expect(open.size).toBe(3);
      // The receiver would keep them ten minutes: the sender closes them after its own limit.
      await until('the idle connections closed', () => open.size === 0, { timeoutMs: 10_000, detail: () => `${open.size} still open` });
      await expect(s.send(url, {}, '{}')).resolves.toMatchObject({ ok: true, httpStatus: 200 });
    } finally {
      await s.close();
      receiver.closeAllConnections();
      await new Promise<void>((resolve) => receiver.close(() => resolve()));
    }
  });

  it('a 5xx: not ok, the status and the answer kept', async () => {
    expect(await withSender((s) => s.send(`${base}/fail`, {}, '{}'))).toMatchObject({ ok: false, httpStatus: 503, responseBody: 'try later', error: null });
  });

  it('an empty answer: an empty body, not null', async () => {
    expect(await withSender((s) => s.send(`${base}/empty`, {}, '{}'))).toMatchObject({ ok: true, httpStatus: 204, responseBody: '', error: null });
  });

  it('an endless body: the first characters kept, and the attempt ends without waiting for the rest', async () => {
    const outcome = await withSender((s) => s.send(`${base}/endless`, {}, '{}'), { timeoutMs: 20_000 });
    expect(outcome).toMatchObject({ ok: true, httpStatus: 200, error: null });
    expect(outcome.responseBody).toBe('x'.repeat(RESPONSE_BODY_MAX));
    // Ended by what it read, not by the attempt's time (20 s), which ends it with the same answer: half
    // of it is a bound no loaded machine reaches for the first chunk of a local answer (2.5 s of 5 s did
    // not hold under load for the abort below).
    expect(outcome.durationMs).toBeLessThan(10_000);
  }, 60_000); // room for the attempt's time, should it wait for it

  it('characters, not bytes, are kept, and none is cut in two', async () => {
    const outcome = await withSender((s) => s.send(`${base}/emoji`, {}, '{}'));
    expect(Array.from(outcome.responseBody!)).toHaveLength(RESPONSE_BODY_MAX);
    expect(outcome.responseBody).toBe('😀'.repeat(RESPONSE_BODY_MAX));
  });

  it('no answer within the exchange timeout: a timeout naming it', async () => {
    const outcome = await withSender((s) => s.send(`${base}/hang`, {}, '{}'), { timeoutMs: 300 });
    expect(outcome).toMatchObject({ ok: false, httpStatus: null, responseBody: null });
    expect(outcome.error).toBe('timeout: no response within 300 ms');
  });

  it('a body trickling for longer than connect + exchange: cut at that sum, the answer kept with what was read', async () => {
    const started = performance.now();
    const outcome = await withSender((s) => s.send(`${base}/drip`, {}, '{}'), { connectTimeoutMs: 200, timeoutMs: 400 });
    const took = performance.now() - started;
    expect(outcome).toMatchObject({ ok: true, httpStatus: 200, error: null });
    expect(outcome.responseBody).toMatch(/^\.+$/);
    expect(took).toBeGreaterThanOrEqual(550);
    // Cut at that sum, not later, counted on the answer's own clock: its server writes a dot every
    // 100 ms from the request's arrival, on this process's event loop as the sender's timer is, so
    // at most 6 (600 ms) come before the cut however late a loaded machine runs them both (an
    // interval that ran late does not catch up); a cut later would keep more.
    expect(outcome.responseBody!.length).toBeLessThanOrEqual(6);
  });

  it('a connection reset mid-body: the answer kept with what was read', async () => {
    const outcome = await withSender((s) => s.send(`${base}/reset`, {}, '{}'));
    expect(outcome).toMatchObject({ ok: false, httpStatus: 500, responseBody: 'partial', error: null });
  });

  it('no status within connect + exchange (a head that trickles): a timeout naming the sum', async () => {
    const outcome = await withSender((s) => s.send(`${base}/slow-head`, {}, '{}'), { connectTimeoutMs: 200, timeoutMs: 400 });
    expect(outcome).toMatchObject({ ok: false, httpStatus: null, responseBody: null });
    expect(outcome.error).toMatch(/^timeout: /);
  });

  it('an answer the request did not ask for (100 Continue, 101 Switching Protocols) is named as such, not as a connection the receiver closed', async () => {
    await withSender(async (s) => {
      const continued = await s.send(`${base}/continue`, {}, '{}');
      expect(continued).toMatchObject({ ok: false, httpStatus: null, responseBody: null, error: expect.stringMatching(/^bad response: .*100 Continue/) });
      const upgraded = await s.send(`${base}/upgrade`, {}, '{}');
      expect(upgraded).toMatchObject({ ok: false, httpStatus: null, responseBody: null, error: expect.stringMatching(/^bad response: .*101 Switching Protocols/) });
      for (const outcome of [continued, upgraded]) expect(outcome.error).not.toMatch(/closed by the other side/);
    });
  });

  it('a status below 100 (099): a bad response saying so, not the HTTP client\'s failed assertion', async () => {
    const outcome = await withSender((s) => s.send(`${base}/status-099`, {}, '{}'));
    expect(outcome).toMatchObject({ ok: false, httpStatus: null, responseBody: null, error: 'bad response: not HTTP (a status below 100); the connection was dropped' });
  });

  it('a refused connection: an error naming it, never a throw', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    const outcome = await withSender((s) => s.send(`http://127.0.0.1:${port}/x`, {}, '{}'));
    expect(outcome).toMatchObject({ ok: false, httpStatus: null, responseBody: null });
    expect(outcome.error).toMatch(/ECONNREFUSED/);
  });

  it('an https target whose server does not speak TLS (a plain HTTP port): the TLS failure in words, the same text at every attempt, none of OpenSSL\'s internals', async () => {
    const plain = base.replace('http:', 'https:');
    const first = await withSender((s) => s.send(`${plain}/ok`, {}, '{}'));
    const second = await withSender((s) => s.send(`${plain}/ok`, {}, '{}'));
    expect(first).toMatchObject({ ok: false, httpStatus: null, responseBody: null, error: 'ERR_SSL_WRONG_VERSION_NUMBER: TLS failed: wrong version number' });
    expect(second.error).toBe(first.error);
  });

  it('a destination the outbound address policy refuses: its message, nothing sent', async () => {
    const before = seen.length;
    const outcome = await withSender((s) => s.send(`${base}/ok`, {}, '{}'), { egress: new EgressPolicy({ denyPrivate: true }) });
    expect(outcome).toMatchObject({ ok: false, httpStatus: null, responseBody: null });
    expect(outcome.error).toMatch(/refused by the outbound address policy/);
    expect(seen.length).toBe(before);
  });

  it('a URL that is not http(s): an error, never a throw', async () => {
    const outcome = await withSender((s) => s.send('ftp://127.0.0.1/x', {}, '{}'));
    expect(outcome).toMatchObject({ ok: false, httpStatus: null, responseBody: null });
    expect(outcome.error).toEqual(expect.any(String));
  });

  it('the signal aborts an attempt under way: "aborted: the process is stopping"', async () => {
    const controller = new AbortController();
    await withSender(async (s) => {
      const pending = s.send(`${base}/hang`, {}, '{}', controller.signal);
      setTimeout(() => controller.abort(new Error('stopping')), 50);
      const outcome = await pending;
      expect(outcome).toMatchObject({ ok: false, httpStatus: null, responseBody: null, error: 'aborted: the process is stopping' });
      // Ended by the abort, not by the attempt's time (20 s): half of it is a bound no loaded machine reaches
      // for an abort 50 ms in (a fixed 300 ms, then 2.5 s, did not hold whatever delayed the abort's timer).
      expect(outcome.durationMs).toBeLessThan(10_000);
    }, { timeoutMs: 20_000 });
  }, 30_000);

  it('the signal ends every attempt under way on it, not those answered before nor those of another signal', async () => {
    const controller = new AbortController();
    const other = new AbortController();
    await withSender(async (s) => {
      const answered = await s.send(`${base}/ok`, {}, '{}', controller.signal);
      const hangsBefore = seen.filter((r) => r.path === '/hang').length;
      const hanging = [1, 2, 3].map(() => s.send(`${base}/hang`, {}, '{}', controller.signal));
      const elsewhere = s.send(`${base}/hang`, {}, '{}', other.signal);
      let elsewhereEnded = false;
      void elsewhere.then(() => {
        elsewhereEnded = true;
      });
      await until('the four hanging requests at the server', () => seen.filter((r) => r.path === '/hang').length >= hangsBefore + 4);
      controller.abort(new Error('stopping'));
      for (const outcome of await Promise.all(hanging)) expect(outcome).toMatchObject({ ok: false, httpStatus: null, error: 'aborted: the process is stopping' });
      expect(answered).toMatchObject({ ok: true, httpStatus: 200 });
      // The other signal's attempt is still under way (an abort ends its attempts at once, in the same turn): ended by its own signal only.
      expect(elsewhereEnded).toBe(false);
      other.abort(new Error('stopping'));
      expect(await elsewhere).toMatchObject({ error: 'aborted: the process is stopping' });
      // After the abort, an attempt on the signal is not sent.
      expect(await s.send(`${base}/ok`, {}, '{}', controller.signal)).toMatchObject({ error: 'aborted: the process is stopping' });
    }, { timeoutMs: 20_000 });
  }, 30_000);

  it('a signal aborted before the attempt: nothing sent', async () => {
    const controller = new AbortController();
    controller.abort(new Error('stopping'));
    const before = seen.length;
    const outcome = await withSender((s) => s.send(`${base}/ok`, {}, '{}', controller.signal));
    expect(outcome).toMatchObject({ ok: false, httpStatus: null, error: 'aborted: the process is stopping' });
    expect(seen.length).toBe(before);
  });

  it('many attempts at once on kept-alive connections: each gets its own answer', async () => {
    await withSender(async (s) => {
      const outcomes = await Promise.all(Array.from({ length: 50 }, (_, i) => s.send(`${base}/echo?i=${i}`, {}, `{"i":${i}}`)));
      outcomes.forEach((o, i) => {
        expect(o.ok).toBe(true);
        expect(JSON.parse(o.responseBody!)).toMatchObject({ query: `/echo?i=${i}`, body: `{"i":${i}}` });
      });
      // Fifty answers at once on a loaded machine (CI) may take longer than the 400 ms the timeout tests use.
    }, { timeoutMs: 10_000 });
  });
});
