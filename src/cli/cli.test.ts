import { execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, closeSync, constants, existsSync, lstatSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { parse, stringify } from 'yaml';
import { startDemoSource } from '../demo-source/server.js';
import { cancelled, exportCancelled } from './commands.js';
import { packageRoot } from '../package-root.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { startIssuer, type TestIssuer } from '../../test/harness/tokens.js';
import { until } from '../../test/harness/until.js';
import { runSvc, svcRunner, type Terminal } from '../../test/harness/svc-cli.js';
import { printable } from './output.js';

/**
 * The `svc` client against a real hub on loopback (dev bypass) and the real demo source: main()
 * in-process with captured output (test/harness/svc-cli.ts), a temporary config file, and once the executable itself.
 */

let hub: TestHub;
let demo: Awaited<ReturnType<typeof startDemoSource>>;
let dir: string;
let config: string;

const svc = svcRunner(() => ({ env: { SVC_CLI_CONFIG: config } }));

const EXAMPLE = join(packageRoot(), 'examples', 'open.yaml');

beforeAll(async () => {
  demo = await startDemoSource({ port: 0, host: '127.0.0.1', rows: 120, log: () => undefined });
  hub = await startTestHub({ 'svc.secret.master-key': Buffer.alloc(32, 7).toString('base64'), 'svc.events.stream.poll-every': '100ms' });
  dir = mkdtempSync(join(tmpdir(), 'svc-cli-'));
  config = join(dir, 'config.json');
  const login = await svc(['login', '--url', hub.url, '--dev-tenant', '1']);
  expect(login).toMatchObject({ code: 0, err: '' });
});

afterAll(async () => {
  await hub?.stop();
  await demo?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('login, whoami, logout', () => {
  it('stores the URL and the dev tenant in a 0600 file and names the tenant', async () => {
    const file = join(dir, 'nested', 'dev.json');
    const result = await svc(['login', '--url', `${hub.url}/`, '--dev-tenant', '1'], { env: { SVC_CLI_CONFIG: file } });
    expect(result.code).toBe(0);
    expect(result.out).toContain(`Logged in to ${hub.url} as dev, tenant default (1)`);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual({ url: hub.url, devTenant: '1' });

    const who = await svc(['whoami'], { env: { SVC_CLI_CONFIG: file } });
    expect(who.code).toBe(0);
    expect(parse(who.out)).toMatchObject({ url: hub.url, tenant: 'default (1)', via: 'dev-bypass' });
    expect(parse(who.out).roles).toContain('svc_integrator');
  });

  it('refuses to send SVC_TOKEN or a stored token over plain http to a host other than loopback, unless login --allow-http or SVC_ALLOW_HTTP=1 consented', async () => {
    const token = 'tok-0b93c4-every-call';
    const file = join(dir, 'in-clear.json');
    // A server that records the Authorization header of every request, reached as 0.0.0.0 (not a loopback name) and as 127.0.0.1.
    const seen: Array<string | undefined> = [];
    const spy = createServer((req, res) => {
      seen.push(req.headers.authorization);
      res.setHeader('content-type', 'application/json');
      res.end('[]');
    });
    await new Promise<void>((resolve) => spy.listen(0, '0.0.0.0', resolve));
    const port = (spy.address() as AddressInfo).port;
    const remote = `http://0.0.0.0:${port}`;
    const refusal = (url: string, whose: string) => `error: ${url} is plain http to another machine: ${whose} would travel in clear to ${new URL(url).host}; use https, or, if the network to the hub is trusted, svc login --allow-http or set SVC_ALLOW_HTTP=1\n`;
    const ls = (env: Record<string, string>) => svc(['secrets', 'ls'], { env: { SVC_CLI_CONFIG: file, ...env } });
    try {
      // SVC_TOKEN with SVC_URL: refused before anything is sent
      expect(await ls({ SVC_URL: remote, SVC_TOKEN: token })).toEqual({ code: 1, out: '', err: refusal(remote, 'the token in SVC_TOKEN') });
      expect(seen).toEqual([]);
      expect(await ls({ SVC_URL: remote, SVC_TOKEN: token, SVC_ALLOW_HTTP: '1' })).toMatchObject({ code: 0, err: '' });
      expect(seen.splice(0)).toEqual([`Bearer ${token}`]);
      // to loopback, or without a token (a dev tenant): nothing is refused
      expect(await ls({ SVC_URL: `http://127.0.0.1:${port}`, SVC_TOKEN: token })).toMatchObject({ code: 0, err: '' });
      expect(await ls({ SVC_URL: remote, SVC_DEV_TENANT: '1' })).toMatchObject({ code: 0, err: '' });
      expect(seen.splice(0)).toEqual([`Bearer ${token}`, undefined]);
      // A stored token without the recorded consent (a config written by hand, or by an older svc)
      writeFileSync(file, JSON.stringify({ url: remote, token }), { mode: 0o600 });
      expect(await ls({})).toEqual({ code: 1, out: '', err: refusal(remote, 'the stored token') });
      expect(seen).toEqual([]);
      expect(await ls({ SVC_ALLOW_HTTP: '1' })).toMatchObject({ code: 0, err: '' });
      // with it (svc login --allow-http writes it), for that URL: the stored token, and SVC_TOKEN to it
      writeFileSync(file, JSON.stringify({ url: remote, token, allowHttp: true }), { mode: 0o600 });
      expect(await ls({})).toMatchObject({ code: 0, err: '' });
      expect(await ls({ SVC_TOKEN: 'tok-other' })).toMatchObject({ code: 0, err: '' });
      expect(seen.splice(0)).toEqual([`Bearer ${token}`, `Bearer ${token}`, 'Bearer tok-other']);
      // the overview says how to consent
      expect((await svc(['--help'])).out.replace(/\s+/g, ' ')).toContain('a token goes over plain http to another machine only after svc login --allow-http, or with SVC_ALLOW_HTTP=1.');
      // not for another URL
      const elsewhere = `http://0.0.0.0:${port}/elsewhere`;
      expect(await ls({ SVC_URL: elsewhere, SVC_TOKEN: token })).toEqual({ code: 1, out: '', err: refusal(elsewhere, 'the token in SVC_TOKEN') });
      expect(seen).toEqual([]);
    } finally {
      await new Promise((resolve) => spy.close(resolve));
    }
  });

  it('a credential holding a character no HTTP header can carry (the CR of a token file saved with CRLF) is said as such, not as a hub that cannot be reached; nothing is sent, the token never printed', async () => {
    const env = { SVC_CLI_CONFIG: join(dir, 'never-written.json'), SVC_URL: hub.url };
    const cr = 'holds U+000D (a carriage return: the line end of a file saved with CRLF line ends?), which no HTTP header can carry; nothing was sent';
    // SVC_TOKEN=$(cat token.txt) keeps the \r of a CRLF file: the hub is up all the same
    expect(await svc(['connectors', 'ls'], { env: { ...env, SVC_TOKEN: 'tok-crlf-5e1d\r' } })).toEqual({ code: 1, out: '', err: `error: the token in SVC_TOKEN ${cr}\n` });
    expect(await svc(['connectors', 'ls'], { env: { ...env, SVC_DEV_TENANT: '1\r' } })).toEqual({ code: 1, out: '', err: `error: the dev tenant (SVC_DEV_TENANT, or the stored login's) ${cr}\n` });
    const login = await svc(['login', '--url', hub.url, '--token', 'tok-esc-77\x1b[2J'], { env: { SVC_CLI_CONFIG: join(dir, 'never-written.json') } });
    expect(login).toEqual({ code: 1, out: '', err: 'error: the given token holds U+001B, which no HTTP header can carry; nothing was sent; nothing was stored\n' });
    expect(existsSync(join(dir, 'never-written.json'))).toBe(false);
    // a character past U+00FF (a header is bytes)
    expect((await svc(['connectors', 'ls'], { env: { ...env, SVC_TOKEN: 'tok-€' } })).err).toBe('error: the token in SVC_TOKEN holds U+20AC, which no HTTP header can carry; nothing was sent\n');
  });

  it('keeps nothing when the hub cannot be reached, and refuses a bad command line with 2', async () => {
    const file = join(dir, 'unreachable.json');
    const down = await svc(['login', '--url', 'http://127.0.0.1:1', '--dev-tenant', '1'], { env: { SVC_CLI_CONFIG: file } });
    expect(down.code).toBe(1);
    expect(down.err).toContain('cannot reach http://127.0.0.1:1');
    expect(down.err).toContain('ECONNREFUSED 127.0.0.1:1; is the hub running there? (npm start serves http://127.0.0.1:8080; svc login --url <base URL> names another)');
    expect(existsSync(file)).toBe(false);

    // A tenant the hub does not have, and a server that is not a hub: refused, nothing stored.
    const unknown = await svc(['login', '--url', hub.url, '--dev-tenant', '99'], { env: { SVC_CLI_CONFIG: file } });
    expect(unknown).toMatchObject({ code: 1, err: 'error: unknown tenant 99; nothing was stored (HTTP 403)\n' });
    // The system tenant and a deactivated tenant (deactivation is final) could never work either.
    const system = await svc(['login', '--url', hub.url, '--dev-tenant', '0'], { env: { SVC_CLI_CONFIG: file } });
    expect(system).toMatchObject({ code: 1, err: 'error: X-Tenant-ID names the system tenant; nothing was stored (HTTP 403)\n' });
    const admin = { 'X-Tenant-ID': '1', 'content-type': 'application/json' };
    const gone = (await (await fetch(`${hub.url}/api/tenants`, { method: 'POST', headers: admin, body: JSON.stringify({ code: 'cli-gone', name: 'Gone' }) })).json()) as { id: number };
    expect((await fetch(`${hub.url}/api/tenants/${gone.id}`, { method: 'DELETE', headers: admin })).status).toBe(204);
    const inactive = await svc(['login', '--url', hub.url, '--dev-tenant', String(gone.id)], { env: { SVC_CLI_CONFIG: file } });
    expect(inactive).toMatchObject({ code: 1, err: 'error: tenant inactive; nothing was stored (HTTP 403)\n' });
    expect(existsSync(file)).toBe(false);
    const notHub = createServer((_req, res) => res.writeHead(404, { 'Content-Type': 'application/json' }).end('{"error":"not_found"}'));
    await new Promise<void>((resolve) => notHub.listen(0, '127.0.0.1', resolve));
    const other = `http://127.0.0.1:${(notHub.address() as AddressInfo).port}`;
    const elsewhere = await svc(['login', '--url', other, '--dev-tenant', '1'], { env: { SVC_CLI_CONFIG: file } });
    notHub.close();
    expect(elsewhere).toMatchObject({ code: 1, err: `error: not_found; ${other} does not serve GET /api/bff/v1/me: not a svc-hub, or not its base URL; nothing was stored (HTTP 404)\n` });
    expect(existsSync(file)).toBe(false);

    for (const args of [['--url', 'ftp://x', '--dev-tenant', '1'], ['--url', hub.url], ['--url', hub.url, '--dev-tenant', 'one'], ['--dev-tenant', '1']]) {
      const bad = await svc(['login', ...args], { env: { SVC_CLI_CONFIG: file } });
      expect(bad.code).toBe(2);
      expect(bad.err).toContain('Usage: svc login --url URL');
    }
    expect(existsSync(file)).toBe(false);
  });

  it("an error answer's Retry-After is part of the error line (the hub's 429 of a rate limit: how long it asks to wait), as events tail says it", async () => {
    let retryAfter: string | undefined = '42';
    const limited = createServer((_req, res) => {
      res.writeHead(429, { 'Content-Type': 'application/json', ...(retryAfter ? { 'Retry-After': retryAfter } : {}) });
      res.end('{"error":"rate limit exceeded"}');
    });
    await new Promise<void>((resolve) => limited.listen(0, '127.0.0.1', () => resolve()));
    try {
      const env = { SVC_URL: `http://127.0.0.1:${(limited.address() as AddressInfo).port}`, SVC_DEV_TENANT: '1', SVC_CLI_CONFIG: join(dir, 'limited.json') };
      expect(await svc(['search', 'partner'], { env })).toEqual({ code: 1, out: '', err: 'error: rate limit exceeded (HTTP 429, Retry-After: 42)\n' });
      expect(await svc(['chat', 'how many partners?', '--json'], { env })).toEqual({ code: 1, out: '', err: 'error: rate limit exceeded (HTTP 429, Retry-After: 42)\n' });
      // Without the header (or with a date, which is not read) the line is as before.
      retryAfter = undefined;
      expect(await svc(['search', 'partner'], { env })).toEqual({ code: 1, out: '', err: 'error: rate limit exceeded (HTTP 429)\n' });
    } finally {
      limited.closeAllConnections();
      await new Promise((resolve) => limited.close(resolve));
    }
  });

  it('a refused token (401) says which token: the stored one (log in again), the one given to login (nothing stored), SVC_TOKEN; never printing it', async () => {
    const refusing = createServer((_req, res) => {
      res.writeHead(401, { 'Content-Type': 'text/plain', 'WWW-Authenticate': 'Bearer' });
      res.end('authentication required');
    });
    await new Promise<void>((resolve) => refusing.listen(0, '127.0.0.1', () => resolve()));
    try {
      const file = join(dir, 'expired.json');
      const url = `http://127.0.0.1:${(refusing.address() as AddressInfo).port}`;
      writeFileSync(file, JSON.stringify({ url, token: 'an-expired-token' }), { mode: 0o600 });
      const who = await svc(['whoami'], { env: { SVC_CLI_CONFIG: file } });
      expect(who.code).toBe(1);
      expect(who.err).toBe('error: authentication required; the stored token was refused (expired?): svc login again (HTTP 401)\n');
      expect(who.err).not.toContain('an-expired-token');

      // At login nothing is stored yet: the given token was refused, and the file stays absent.
      const fresh = join(dir, 'refused-at-login.json');
      for (const [args, stdin] of [[['--token', 'a-bad-token']], [['--token-stdin'], 'a-bad-token\n']] as Array<[string[], string?]>) {
        const login = await svc(['login', '--url', url, ...args], { env: { SVC_CLI_CONFIG: fresh }, stdin });
        expect(login.code).toBe(1);
        expect(login.err).toBe('error: authentication required; the given token was refused; nothing was stored (HTTP 401)\n');
        expect(login.err).not.toContain('a-bad-token');
        expect(existsSync(fresh)).toBe(false);
      }

      // A dev-bypass tenant at a hub that checks tokens: say so, and how to log in instead.
      const dev = await svc(['login', '--url', url, '--dev-tenant', '1'], { env: { SVC_CLI_CONFIG: fresh } });
      expect(dev.code).toBe(1);
      expect(dev.err).toBe(`error: authentication required; this hub checks tokens (it has no dev bypass): svc login --url ${url} --token-stdin; nothing was stored (HTTP 401)\n`);
      expect(existsSync(fresh)).toBe(false);
      const devEnv = await svc(['connectors', 'ls'], { env: { SVC_CLI_CONFIG: fresh, SVC_URL: url, SVC_DEV_TENANT: '1' } });
      expect(devEnv.err).toBe(`error: authentication required; this hub checks tokens (it has no dev bypass): svc login --url ${url} --token-stdin (HTTP 401)\n`);

      // A token from the environment was not stored either.
      const fromEnv = await svc(['whoami'], { env: { SVC_CLI_CONFIG: fresh, SVC_URL: url, SVC_TOKEN: 'an-env-token' } });
      expect(fromEnv.code).toBe(1);
      expect(fromEnv.err).toBe('error: authentication required; the token in SVC_TOKEN was refused (expired?) (HTTP 401)\n');
    } finally {
      await new Promise((resolve) => refusing.close(resolve));
    }
  });

  it('a token given to a hub that runs the dev bypass is refused at login (the hub checks no token and would act as no tenant), nothing stored', async () => {
    const file = join(dir, 'token-at-dev-hub.json');
    for (const [args, stdin] of [[['--token', 'a-token-of-some-issuer']], [['--token-stdin'], 'a-token-of-some-issuer\n']] as Array<[string[], string?]>) {
      const login = await svc(['login', '--url', hub.url, ...args], { env: { SVC_CLI_CONFIG: file }, stdin });
      expect(login).toMatchObject({
        code: 1,
        out: '',
        err: `error: ${hub.url} runs the dev bypass and checks no token (a token would act as no tenant): svc login --url ${hub.url} --dev-tenant ID; nothing was stored\n`,
      });
      expect(existsSync(file)).toBe(false);
    }
  });

  it('a token at a hub that runs the dev bypass (SVC_TOKEN, or one stored before): a 401 says the hub reads no token and to name a dev tenant, not that the token was refused', async () => {
    const token = 'a-token-of-some-issuer';
    const fresh = join(dir, 'token-env-at-dev-hub.json');
    const env = { SVC_CLI_CONFIG: fresh, SVC_URL: hub.url, SVC_TOKEN: token };
    const fix = `${hub.url} runs the dev bypass and reads no token, so the call named no tenant: unset SVC_TOKEN and set SVC_DEV_TENANT=ID`;
    // The same with SVC_DEV_TENANT set too: SVC_TOKEN wins, so it must go.
    for (const withDev of [env, { ...env, SVC_DEV_TENANT: '1' }]) {
      expect(await svc(['connectors', 'ls'], { env: withDev })).toEqual({ code: 1, out: '', err: `error: no tenant in security context; ${fix} (HTTP 401)\n` });
    }
    // The event stream (a platform route) too: its first 401 ends it with the same hint.
    expect(await svc(['events', 'tail'], { env, signal: AbortSignal.timeout(8_000) })).toEqual({ code: 1, out: '', err: `error: no tenant in security context; ${fix} (HTTP 401)\n` });
    // whoami: the token stands for no one there (login refuses to store it), so it is no success, --json or not.
    for (const json of [[], ['--json']]) expect(await svc(['whoami', ...json], { env })).toEqual({ code: 1, out: '', err: `error: ${fix}\n` });
    // A token stored before login refused one here (or by an older svc): log in with a dev tenant instead.
    const file = join(dir, 'token-stored-at-dev-hub.json');
    writeFileSync(file, JSON.stringify({ url: hub.url, token }), { mode: 0o600 });
    const stored = await svc(['runs', 'ls'], { env: { SVC_CLI_CONFIG: file } });
    expect(stored).toEqual({
      code: 1,
      out: '',
      err: `error: no tenant in security context; ${hub.url} runs the dev bypass and reads no token, so the call named no tenant: svc login --url ${hub.url} --dev-tenant ID (HTTP 401)\n`,
    });
    expect(stored.err).not.toContain(token);
    expect(await svc(['whoami'], { env: { SVC_CLI_CONFIG: file } })).toEqual({
      code: 1,
      out: '',
      err: `error: ${hub.url} runs the dev bypass and reads no token, so the call named no tenant: svc login --url ${hub.url} --dev-tenant ID\n`,
    });
  });

  it('the /api/bff/v1/me asked to explain a 401 naming no tenant is waited for 5 s at most: then both causes are named', async () => {
    // Answers as the hub's 401 for want of a tenant; /me is held unanswered (a hub that stopped answering).
    const held: Array<() => void> = [];
    const probeMs = 5_000;
    let heldSince = Number.NaN;
    const stalling = createServer((req, res) => {
      if (req.url?.startsWith('/api/bff/v1/me')) {
        heldSince = performance.now();
        return void held.push(() => res.destroy());
      }
      res.writeHead(401, { 'Content-Type': 'application/json', 'WWW-Authenticate': 'Bearer' }).end('{"error":"no tenant in security context"}');
    });
    await new Promise<void>((resolve) => stalling.listen(0, '127.0.0.1', () => resolve()));
    try {
      const url = `http://127.0.0.1:${(stalling.address() as AddressInfo).port}`;
      const result = await svc(['connectors', 'ls'], { env: { SVC_CLI_CONFIG: join(dir, 'stalling.json'), SVC_URL: url, SVC_TOKEN: 'a-token' } });
      const answeredAt = performance.now();
      expect(result).toEqual({
        code: 1,
        out: '',
        err: `error: no tenant in security context; the token in SVC_TOKEN named no tenant: either ${url} runs the dev bypass and reads no token (unset SVC_TOKEN and set SVC_DEV_TENANT=ID), or it names none (use a token of a tenant's user) (HTTP 401)\n`,
      });
      expect(held).toHaveLength(1);
      // Its 5 s, not the two minutes of a call: timed from /me's coming (not the command's start), a hang guard of three times it.
      expect(answeredAt - heldSince).toBeLessThan(3 * probeMs);
    } finally {
      for (const end of held) end();
      stalling.closeAllConnections();
      await new Promise((resolve) => stalling.close(resolve));
    }
  });

  it('a config path that is not a regular file (a FIFO, a directory) is refused by login, logout and every command, never replaced, removed or read', async () => {
    // As root, SVC_CLI_CONFIG=/dev/null made login replace the device with a file and logout delete it; a FIFO shows it safely.
    const fifo = join(dir, 'config-fifo.json');
    execFileSync('mkfifo', [fifo]);
    const folder = join(dir, 'config-folder');
    mkdirSync(folder);
    for (const [path, what] of [[fifo, 'a FIFO'], [folder, 'a directory']] as const) {
      const refusal = `error: ${path} is not a regular file (${what}): SVC_CLI_CONFIG names the file svc reads, writes and replaces\n`;
      expect(await svc(['login', '--url', hub.url, '--dev-tenant', '1'], { env: { SVC_CLI_CONFIG: path } })).toEqual({ code: 1, out: '', err: refusal });
      expect(await svc(['logout'], { env: { SVC_CLI_CONFIG: path } })).toEqual({ code: 1, out: '', err: refusal });
      expect(lstatSync(path).isFIFO() || lstatSync(path).isDirectory()).toBe(true);
      expect(await svc(['whoami'], { env: { SVC_CLI_CONFIG: path } })).toEqual({ code: 1, out: '', err: refusal });
    }
    expect(readdirSync(dir).filter((name) => name.endsWith('.tmp'))).toEqual([]);
  });

  it('a URL ending in /api is refused at login with the base URL to give instead', async () => {
    const file = join(dir, 'api-suffix.json');
    const bad = await svc(['login', '--url', `${hub.url}/api/`, '--dev-tenant', '1'], { env: { SVC_CLI_CONFIG: file } });
    expect(bad.code).toBe(1);
    // Like every refusal at login, it says that nothing was stored.
    expect(bad.err).toBe(`error: not found; the hub's URL is its base, without /api (${hub.url}); nothing was stored (HTTP 404)\n`);
    expect(existsSync(file)).toBe(false);
    // The same hint for a URL from the environment (nothing is stored there, so it does not say so).
    const env = await svc(['connectors', 'ls'], { env: { SVC_CLI_CONFIG: file, SVC_URL: `${hub.url}/api`, SVC_DEV_TENANT: '1' } });
    expect(env.code).toBe(1);
    expect(env.err).toBe(`error: not found; the hub's URL is its base, without /api (${hub.url}) (HTTP 404)\n`);
  });

  it('--all lists a record once when it moved to a later page between two pages (deliveries, failures first)', async () => {
    // The hub's pages as they come when delivery 7 succeeded between the two reads: on page 1 as failed, then again on page 2.
    const paging = createServer((req, res) => {
      const second = (req.url ?? '').includes('before=');
      const rows = second ? [{ id: 7, succeeded: true }, { id: 3, succeeded: true }] : [{ id: 9, succeeded: false }, { id: 7, succeeded: false }];
      res.writeHead(200, { 'Content-Type': 'application/json', ...(second ? {} : { Link: '</api/platform/deliveries?limit=2&before=7>; rel="next"' }) });
      res.end(JSON.stringify(rows));
    });
    await new Promise<void>((resolve) => paging.listen(0, '127.0.0.1', () => resolve()));
    try {
      const url = `http://127.0.0.1:${(paging.address() as AddressInfo).port}`;
      const listed = await svc(['deliveries', 'ls', '--limit', '2', '--all', '--json'], { env: { SVC_CLI_CONFIG: join(dir, 'paging.json'), SVC_URL: url, SVC_DEV_TENANT: '1' } });
      expect(listed.code).toBe(0);
      expect((JSON.parse(listed.out) as Array<{ id: number }>).map((row) => row.id)).toEqual([9, 7, 3]);
    } finally {
      await new Promise((resolve) => paging.close(resolve));
    }
  });

  it('a redirect (an ingress sending http to https) is an error naming where it points, at login and in every command, never a success', async () => {
    // As ingress-nginx answers plain http once the host has TLS (ssl-redirect): 308 to https, for every method, with an HTML page.
    const ingress = createServer((req, res) => {
      res.writeHead(308, { 'Content-Type': 'text/html', Location: `https://hub.example.test${req.url}` });
      res.end('<html>\r\n<head><title>308 Permanent Redirect</title></head>\r\n<body>\r\n<center><h1>308 Permanent Redirect</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n');
    });
    await new Promise<void>((resolve) => ingress.listen(0, '127.0.0.1', () => resolve()));
    try {
      const url = `http://127.0.0.1:${(ingress.address() as AddressInfo).port}`;
      const file = join(dir, 'redirected.json');
      const login = await svc(['login', '--url', url, '--dev-tenant', '1'], { env: { SVC_CLI_CONFIG: file } });
      expect(login).toEqual({
        code: 1,
        out: '',
        err: `error: ${url} answered 308 Permanent Redirect to https://hub.example.test/api/bff/v1/me; svc follows no redirect (the credential would go along): give the hub's URL as it serves it, svc login --url https://hub.example.test; nothing was stored (HTTP 308)\n`,
      });
      expect(existsSync(file)).toBe(false);
      const env = { SVC_CLI_CONFIG: file, SVC_URL: url, SVC_DEV_TENANT: '1' };
      const apply = await svc(['apply', '-f', EXAMPLE], { env });
      expect(apply).toMatchObject({ code: 1, out: '' });
      expect(apply.err).toBe(`error: ${EXAMPLE}: ${url} answered 308 Permanent Redirect to https://hub.example.test/api/connectors/apply; svc follows no redirect (the credential would go along): give the hub's URL as it serves it, svc login --url https://hub.example.test (HTTP 308)\n`);
      for (const args of [['connectors', 'rm', 'demo-open'], ['connectors', 'ls'], ['exports', 'download', 'partner'], ['events', 'tail']]) {
        const result = await svc(args, { env });
        expect(result).toMatchObject({ code: 1, out: '' });
        expect(result.err).toMatch(/^error: .* answered 308 Permanent Redirect to https:\/\/hub\.example\.test\/api\/.*svc follows no redirect .*\(HTTP 308\)\n$/);
      }
    } finally {
      await new Promise((resolve) => ingress.close(resolve));
    }
  });

  it('a 200 that is not the hub\'s JSON (a web console answering its page for every path) is an error, at login and in every command, never a success', async () => {
    // As a single-page app's server answers (nginx try_files … /index.html): its page, 200, for any GET; 405 for a POST.
    const spa = createServer((req, res) => {
      if (req.method !== 'GET') return void res.writeHead(405, { 'Content-Type': 'text/html' }).end('<html><head><title>405 Not Allowed</title></head></html>\n');
      res.writeHead(200, { 'Content-Type': 'text/html' }).end('<!doctype html><html><head><title>Console</title></head><body><div id="root"></div></body></html>\n');
    });
    await new Promise<void>((resolve) => spa.listen(0, '127.0.0.1', () => resolve()));
    try {
      const url = `http://127.0.0.1:${(spa.address() as AddressInfo).port}`;
      const file = join(dir, 'console.json');
      const login = await svc(['login', '--url', url, '--dev-tenant', '1'], { env: { SVC_CLI_CONFIG: file } });
      expect(login).toEqual({ code: 1, out: '', err: `error: ${url} answered GET /api/bff/v1/me with 200 text/html, not the hub's JSON: not a svc-hub, or not its base URL; nothing was stored\n` });
      expect(existsSync(file)).toBe(false);
      const env = { SVC_CLI_CONFIG: file, SVC_URL: url, SVC_DEV_TENANT: '1' };
      expect(await svc(['whoami'], { env })).toEqual({ code: 1, out: '', err: `error: ${url} answered GET /api/bff/v1/me with 200 text/html, not the hub's JSON: not a svc-hub, or not its base URL\n` });
      expect(await svc(['runs', 'ls', '--json'], { env })).toEqual({ code: 1, out: '', err: `error: ${url} answered GET /api/platform/runs with 200 text/html, not the hub's JSON: not a svc-hub, or not its base URL\n` });
      // The event stream too (it read the page as an empty stream, then reconnected every 3 s for ever, saying 'reconnected').
      const tail = await svc(['events', 'tail'], { env, signal: AbortSignal.timeout(8_000) });
      expect(tail).toEqual({ code: 1, out: '', err: `error: ${url} answered GET /api/platform/events/stream with 200 text/html, not an event stream: not a svc-hub, or not its base URL\n` });
    } finally {
      await new Promise((resolve) => spa.close(resolve));
    }
  });

  it('an error answered as an HTML page (a proxy\'s 502 in front of the hub) is said by its title, never its markup line after line', async () => {
    // As nginx answers when the hub behind it is down: its page, CRLF line ends; a bare one without a title.
    const nginx = '<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n';
    const proxy = createServer((req, res) => {
      if (req.url?.startsWith('/api/platform/dlq')) return void res.writeHead(503, { 'Content-Type': 'text/html; charset=utf-8' }).end('<html><body>Service Unavailable</body></html>');
      res.writeHead(502, { 'Content-Type': 'text/html' }).end(nginx);
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', () => resolve()));
    try {
      const url = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
      const page = (what: string, status: number) => `error: ${what}: an HTML page, not the hub's answer (a proxy or a load balancer in front of it, or not a svc-hub) (HTTP ${status})\n`;
      const env = { SVC_CLI_CONFIG: join(dir, 'proxied.json'), SVC_URL: url, SVC_DEV_TENANT: '1' };
      expect(await svc(['login', '--url', url, '--dev-tenant', '1'], { env: { SVC_CLI_CONFIG: env.SVC_CLI_CONFIG } })).toEqual({ code: 1, out: '', err: page('502 Bad Gateway', 502) });
      expect(await svc(['runs', 'ls'], { env })).toEqual({ code: 1, out: '', err: page('502 Bad Gateway', 502) });
      expect(await svc(['dlq', 'ls'], { env })).toEqual({ code: 1, out: '', err: page('service unavailable', 503) });
      expect(await svc(['events', 'tail'], { env, signal: AbortSignal.timeout(8_000) })).toEqual({ code: 1, out: '', err: page('502 Bad Gateway', 502) });
    } finally {
      await new Promise((resolve) => proxy.close(resolve));
    }
  });

  it('refuses a URL holding a user name or password, at login and in SVC_URL, without printing the password', async () => {
    // No credential of a URL is ever sent (the HTTP client drops it), and errors print the URL.
    const file = join(dir, 'userinfo.json');
    const withPassword = hub.url.replace('http://', 'http://alice:s3cret-pw@');
    const login = await svc(['login', '--url', withPassword, '--dev-tenant', '1'], { env: { SVC_CLI_CONFIG: file } });
    expect(login.code).toBe(2);
    expect(login.err).toContain('--url must not hold a user name or password');
    expect(existsSync(file)).toBe(false);
    const down = await svc(['connectors', 'ls'], { env: { SVC_CLI_CONFIG: file, SVC_URL: 'http://alice:s3cret-pw@127.0.0.1:1', SVC_DEV_TENANT: '1' } });
    expect(down).toMatchObject({ code: 1, out: '' });
    expect(down.err).toContain('SVC_URL must not hold a user name or password');
    for (const result of [login, down]) expect(result.out + result.err).not.toContain('s3cret-pw');
  });

  it('logout removes the file; commands then say how to log in', async () => {
    const file = join(dir, 'gone.json');
    await svc(['login', '--url', hub.url, '--dev-tenant', '1'], { env: { SVC_CLI_CONFIG: file } });
    expect((await svc(['logout'], { env: { SVC_CLI_CONFIG: file } })).out).toContain('Logged out');
    expect(existsSync(file)).toBe(false);
    // --json says the same for scripts: which file, and whether there was one to remove.
    expect(JSON.parse((await svc(['logout', '--json'], { env: { SVC_CLI_CONFIG: file } })).out)).toEqual({ configFile: file, removed: false });
    await svc(['login', '--url', hub.url, '--dev-tenant', '1'], { env: { SVC_CLI_CONFIG: file } });
    expect(JSON.parse((await svc(['logout', '--json'], { env: { SVC_CLI_CONFIG: file } })).out)).toEqual({ configFile: file, removed: true });
    expect(existsSync(file)).toBe(false);
    const after = await svc(['connectors', 'ls'], { env: { SVC_CLI_CONFIG: file } });
    expect(after.code).toBe(1);
    expect(after).toEqual({ code: 1, out: '', err: 'error: not logged in: run `svc login --url URL --token-stdin` (or `--dev-tenant ID` at a hub running the dev bypass), or set SVC_URL\n' });
    // a credential in the environment stays: logout says so (never its value), as every later command still sends it
    const token = 'tok-9c1e-never-shown';
    const withEnv = await svc(['logout'], { env: { SVC_CLI_CONFIG: file, SVC_TOKEN: token } });
    expect(withEnv).toEqual({ code: 0, out: `Not logged in: no ${file}.\n`, err: 'warning: SVC_TOKEN is still set in the environment: commands go on sending it; unset it to log out there too\n' });
  });

  it('login while the environment overrides what it stores (SVC_TOKEN or SVC_DEV_TENANT set, SVC_URL naming another URL) stores it and says so, never a value', async () => {
    const file = join(dir, 'overridden.json');
    const token = 'tok-5e1a-env-never-shown';
    const other = hub.url.replace('127.0.0.1', 'localhost');
    const login = (env: Record<string, string>) => svc(['login', '--url', hub.url, '--dev-tenant', '1'], { env: { SVC_CLI_CONFIG: file, ...env } });
    const credential = (name: string) => `warning: ${name} is set in the environment and wins over the stored login: commands send it, not the credential just stored; unset it to use this login\n`;
    const url = `warning: SVC_URL is set in the environment and names another URL: commands call it, and send the stored credential only to ${hub.url}; unset SVC_URL to use this login\n`;
    expect(await login({ SVC_TOKEN: token, SVC_URL: other })).toMatchObject({ code: 0, err: credential('SVC_TOKEN') + url });
    expect(await login({ SVC_DEV_TENANT: '2' })).toMatchObject({ code: 0, err: credential('SVC_DEV_TENANT') });
    expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual({ url: hub.url, devTenant: '1' });
    // the same URL (as the login normalises it), nothing set: no warning
    expect(await login({ SVC_URL: `${hub.url}/` })).toMatchObject({ code: 0, err: '' });
  });

  it('takes SVC_URL and SVC_DEV_TENANT from the environment, and sends the stored credential only to its own URL', async () => {
    const viaEnv = await svc(['whoami', '--json'], { env: { SVC_CLI_CONFIG: join(dir, 'none.json'), SVC_URL: hub.url, SVC_DEV_TENANT: '1' } });
    expect(JSON.parse(viaEnv.out).tenant).toMatchObject({ id: 1, code: 'default' });
    const other = hub.url.replace('127.0.0.1', 'localhost');
    const elsewhere = await svc(['whoami', '--json'], { env: { SVC_CLI_CONFIG: config, SVC_URL: other } });
    expect(JSON.parse(elsewhere.out).tenant).toBeNull(); // no X-Tenant-ID went to the other URL
    // whoami answers (for no credential) and says why none went, as a 401 says it; no devBypass hint (there is a login, for another URL)
    const why = `the stored login is for ${hub.url}, and SVC_URL names ${other}: a credential is sent only to the URL it was stored for (svc login --url ${other}, or the same spelling of the URL)`;
    expect(elsewhere).toMatchObject({ code: 0, err: `warning: ${why}; no credential was sent\n` });
    expect((await svc(['whoami'], { env: { SVC_CLI_CONFIG: config, SVC_URL: other } })).err).toBe(`warning: ${why}; no credential was sent\n`);
    // A route that needs the tenant says why none went: the stored login is another URL's.
    const refused = await svc(['connectors', 'ls'], { env: { SVC_CLI_CONFIG: config, SVC_URL: other } });
    expect(refused.code).toBe(1);
    expect(refused.err).toBe(
      `error: no tenant in security context; the stored login is for ${hub.url}, and SVC_URL names ${other}: a credential is sent only to the URL it was stored for (svc login --url ${other}, or the same spelling of the URL) (HTTP 401)\n`,
    );
    // No login at all, at a hub running the dev bypass (a newcomer's first command): it names a dev tenant, not a token.
    // A SVC_URL that is no URL is named as such, not as a hub that cannot be reached.
    const noLogin = { SVC_CLI_CONFIG: join(dir, 'none.json'), SVC_URL: hub.url };
    const devHint = `${hub.url} runs the dev bypass, and no tenant was named (no credential was sent): svc login --url ${hub.url} --dev-tenant ID, or set SVC_DEV_TENANT=ID`;
    expect(await svc(['connectors', 'ls'], { env: noLogin })).toEqual({ code: 1, out: '', err: `error: no tenant in security context; ${devHint} (HTTP 401)\n` });
    expect(await svc(['runs', 'ls'], { env: noLogin })).toEqual({ code: 1, out: '', err: `error: no tenant in security context; ${devHint} (HTTP 401)\n` });
    expect(await svc(['events', 'tail'], { env: noLogin, signal: AbortSignal.timeout(8_000) })).toEqual({ code: 1, out: '', err: `error: no tenant in security context; ${devHint} (HTTP 401)\n` });
    // whoami answers (no tenant is the truth there) and says the same on stderr
    const who = await svc(['whoami', '--json'], { env: noLogin });
    expect(who).toMatchObject({ code: 0, err: `warning: ${devHint}\n` });
    expect(JSON.parse(who.out)).toMatchObject({ tenant: null, via: 'dev-bypass' });
    for (const url of ['127.0.0.1:8080', 'ftp://hub']) {
      const notUrl = await svc(['connectors', 'ls'], { env: { SVC_CLI_CONFIG: join(dir, 'none.json'), SVC_URL: url, SVC_DEV_TENANT: '1' } });
      expect(notUrl).toEqual({ code: 1, out: '', err: `error: SVC_URL must be an http or https URL (the hub's base, http://127.0.0.1:8080), not '${url}'\n` });
    }
  });
});

describe('login at a hub that checks tokens', () => {
  let issuer: TestIssuer;
  let checking: TestHub;
  beforeAll(async () => {
    issuer = await startIssuer();
    checking = await startTestHub({ 'svc.oidc.issuer': issuer.issuer, 'svc.datasource.url': hub.ownerUrl });
  });
  afterAll(async () => {
    await checking?.stop();
    await issuer?.close();
  });

  /** A token the checking hub takes: tenant 1, svc_user (GET /api/bff/v1/me). */
  const userToken = (subject: string) => issuer.mint({ realm_access: { roles: ['svc_user'] }, tenant_id: 1 }, { subject });

  it('stores a token with mode 0600 and never prints it, from --token or stdin', async () => {
    const token = await userToken('cli-stores');
    const file = join(dir, 'token.json');
    writeFileSync(file, '{"url":"http://old"}', { mode: 0o644 }); // a looser file left behind is tightened
    for (const args of [['--token', token], ['--token-stdin']]) {
      const result = await svc(['login', '--url', checking.url, ...args], { env: { SVC_CLI_CONFIG: file }, stdin: `${token}\n` });
      expect(result.code).toBe(0);
      expect(result.out + result.err).not.toContain(token);
      expect(statSync(file).mode & 0o777).toBe(0o600);
      expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual({ url: checking.url, token });
    }
    const json = await svc(['login', '--url', checking.url, '--token', token, '--json'], { env: { SVC_CLI_CONFIG: file } });
    expect(json.out).not.toContain(token);
    expect(JSON.parse(json.out)).toMatchObject({ via: 'token' });
    // a file loosened since (copied in, restored from a backup): every command says so, never the token
    chmodSync(file, 0o644);
    const loose = await svc(['whoami'], { env: { SVC_CLI_CONFIG: file } });
    expect(loose.code).toBe(0);
    expect(loose.err).toBe(`warning: ${file} holds a token and can be read by others (mode 0644): chmod 600 ${file}\n`);
    chmodSync(file, 0o600);
    expect((await svc(['whoami'], { env: { SVC_CLI_CONFIG: file } })).err).toBe('');
    // a file edited by hand that is no longer JSON: said so, never quoting it (JSON.parse's message quotes the text around the fault)
    for (const broken of [`{"url":"${checking.url}","token":${token}}`, `{"url":"${checking.url}","token":"${token}"`, `{"url":"${checking.url}","token":"${token}",}`]) {
      writeFileSync(file, broken, { mode: 0o600 });
      const refused = await svc(['whoami'], { env: { SVC_CLI_CONFIG: file } });
      expect(refused).toMatchObject({ code: 1, out: '', err: expect.stringMatching(new RegExp(`^error: ${file} is not a svc config file: .*; run svc login again\\n$`)) });
      for (const part of token.match(/.{1,4}/g)!.filter((p) => p.length === 4)) expect(refused.err).not.toContain(part);
    }
  });

  it('tightens its own config folder to 0700 and writes the token into a temporary file it created itself', async () => {
    const token = await userToken('cli-folder');
    const xdg = join(dir, 'xdg');
    const folder = join(xdg, 'svc');
    mkdirSync(folder, { recursive: true });
    chmodSync(folder, 0o755); // an existing, looser folder
    // A link where the temporary file goes (main runs in this process: same pid), to a file others may read.
    const leak = join(dir, 'leak.txt');
    writeFileSync(leak, 'nothing\n', { mode: 0o644 });
    symlinkSync(leak, join(folder, `config.json.${process.pid}.tmp`));
    const result = await svc(['login', '--url', checking.url, '--token-stdin'], { env: { XDG_CONFIG_HOME: xdg }, stdin: `${token}\n` });
    expect(result).toMatchObject({ code: 0, err: '' });
    expect(statSync(folder).mode & 0o777).toBe(0o700);
    expect(readFileSync(leak, 'utf8')).toBe('nothing\n');
    const file = join(folder, 'config.json');
    expect(lstatSync(file).isSymbolicLink()).toBe(false);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual({ url: checking.url, token });
    // A folder SVC_CLI_CONFIG chose is the user's: left as it is.
    const chosen = join(dir, 'chosen');
    mkdirSync(chosen, { mode: 0o755 });
    chmodSync(chosen, 0o755);
    expect((await svc(['login', '--url', checking.url, '--token', token], { env: { SVC_CLI_CONFIG: join(chosen, 'c.json') } })).code).toBe(0);
    expect(statSync(chosen).mode & 0o777).toBe(0o755);
  });

  it('refuses to send a token over plain http to a host other than loopback without --allow-http, and warns with it', async () => {
    const token = await userToken('cli-in-clear');
    // 0.0.0.0 is not a loopback name, yet Linux connects it to this machine, where the hub listens.
    const remote = checking.url.replace('127.0.0.1', '0.0.0.0');
    const file = join(dir, 'plain-http.json');
    for (const args of [['--token', token], ['--token-stdin']]) {
      const refused = await svc(['login', '--url', remote, ...args], { env: { SVC_CLI_CONFIG: file }, stdin: `${token}\n` });
      expect(refused.code).toBe(2);
      expect(refused.err).toContain(`--url ${remote} is plain http to another machine: the token would travel in clear`);
      expect(refused.out + refused.err).not.toContain(token);
      expect(existsSync(file)).toBe(false);
    }
    const allowed = await svc(['login', '--url', remote, '--token', token, '--allow-http'], { env: { SVC_CLI_CONFIG: file } });
    expect(allowed.code).toBe(0);
    expect(allowed.err).toBe(`warning: the token travels in clear to ${new URL(remote).host} (plain http, --allow-http)\n`);
    expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual({ url: remote, token, allowHttp: true });
    // The consent is recorded with the token: later calls to that URL send it without asking again.
    expect(await svc(['whoami'], { env: { SVC_CLI_CONFIG: file } })).toMatchObject({ code: 0, err: '' });
    // No token, nothing in clear: a dev tenant is not refused (at the dev-bypass hub); nor is a token to loopback by name.
    expect(await svc(['login', '--url', hub.url.replace('127.0.0.1', '0.0.0.0'), '--dev-tenant', '1'], { env: { SVC_CLI_CONFIG: file } })).toMatchObject({ code: 0, err: '' });
    expect(await svc(['login', '--url', checking.url.replace('127.0.0.1', 'localhost'), '--token', token], { env: { SVC_CLI_CONFIG: file } })).toMatchObject({ code: 0, err: '' });
  });

  it('a 401 to a token says which of two it is: refused (expired?), or taken but naming no tenant; for every command, the event stream too', async () => {
    const file = join(dir, 'checked-401.json');
    const run = (token: string, args: string[]) => svc(args, { env: { SVC_CLI_CONFIG: file, SVC_URL: checking.url, SVC_TOKEN: token }, signal: AbortSignal.timeout(8_000) });
    // An expired token: the hub refuses it (JSON `authentication required`; plain text on the platform's stream).
    const expired = await issuer.mint({ realm_access: { roles: ['svc_user'] }, tenant_id: 1 }, { subject: 'cli-expired', expiresIn: -3_600 });
    for (const args of [['connectors', 'ls'], ['events', 'tail']]) {
      expect(await run(expired, args)).toEqual({ code: 1, out: '', err: 'error: authentication required; the token in SVC_TOKEN was refused (expired?) (HTTP 401)\n' });
    }
    // A valid token without a tenant claim: taken, acting as no tenant; /api/bff/v1/me (svc_user) says the hub checked it.
    const noTenant = await issuer.mint({ realm_access: { roles: ['svc_user', 'svc_integrator'] } }, { subject: 'cli-no-tenant' });
    for (const args of [['connectors', 'ls'], ['events', 'tail']]) {
      expect(await run(noTenant, args)).toEqual({
        code: 1,
        out: '',
        err: "error: no tenant in security context; the token in SVC_TOKEN was taken but names no tenant (no tenant claim, no acting_as_tenant), and this call needs one: use a token of a tenant's user (HTTP 401)\n",
      });
    }
    // Without svc_user /me does not say how the hub took it: both causes are named.
    const integrator = await issuer.mint({ realm_access: { roles: ['svc_integrator'] } }, { subject: 'cli-no-tenant-integrator' });
    expect(await run(integrator, ['connectors', 'ls'])).toEqual({
      code: 1,
      out: '',
      err: `error: no tenant in security context; the token in SVC_TOKEN named no tenant: either ${checking.url} runs the dev bypass and reads no token (unset SVC_TOKEN and set SVC_DEV_TENANT=ID), or it names none (use a token of a tenant's user) (HTTP 401)\n`,
    });
    // No credential at all: what to give, a token first (this hub has no dev bypass).
    const none = await svc(['connectors', 'ls'], { env: { SVC_CLI_CONFIG: file, SVC_URL: checking.url } });
    expect(none).toEqual({
      code: 1,
      out: '',
      err: `error: authentication required; no credential was sent: svc login --url ${checking.url} --token-stdin (or --dev-tenant ID), or set SVC_TOKEN (or SVC_DEV_TENANT) (HTTP 401)\n`,
    });
  });

  it('keeps nothing for a token the hub refuses on every call (impersonation without svc_superadmin, a user it does not have or has deactivated); stores one a role is missing for', async () => {
    const admin = { 'X-Tenant-ID': '1', 'content-type': 'application/json' };
    const user = (await (await fetch(`${hub.url}/api/tenants/1/users`, { method: 'POST', headers: admin, body: JSON.stringify({ login: 'cli-left', name: 'Left' }) })).json()) as { id: number };
    expect((await fetch(`${hub.url}/api/tenants/1/users/${user.id}`, { method: 'DELETE', headers: admin })).status).toBe(204);
    const file = join(dir, 'checked.json');
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ realm_access: { roles: ['svc_user'] }, tenant_id: 1, acting_as_tenant: 2 }, 'svc_superadmin required to impersonate a tenant'],
      [{ realm_access: { roles: ['svc_user'] }, tenant_id: 1, user_id: 987_654 }, 'unknown user'],
      [{ realm_access: { roles: ['svc_user'] }, tenant_id: 1, user_id: user.id }, 'account inactive'],
    ];
    for (const [claims, refusal] of cases) {
      const token = await issuer.mint(claims, { subject: `cli-${refusal.length}` });
      const login = await svc(['login', '--url', checking.url, '--token-stdin'], { env: { SVC_CLI_CONFIG: file }, stdin: token });
      expect({ refusal, login }).toEqual({ refusal, login: { code: 1, out: '', err: `error: ${refusal}; nothing was stored (HTTP 403)\n` } });
      expect(existsSync(file)).toBe(false);
      // As every later command would be refused.
      expect(await svc(['runs', 'ls'], { env: { SVC_CLI_CONFIG: file, SVC_URL: checking.url, SVC_TOKEN: token } })).toMatchObject({ code: 1, err: `error: ${refusal} (HTTP 403)\n` });
    }
    // Without svc_user, /api/bff/v1/me is refused, but other routes may serve the token: stored, with a warning.
    const integrator = await issuer.mint({ realm_access: { roles: ['svc_integrator'] }, tenant_id: 1 }, { subject: 'cli-integrator' });
    const stored = await svc(['login', '--url', checking.url, '--token-stdin'], { env: { SVC_CLI_CONFIG: file }, stdin: integrator });
    expect(stored).toMatchObject({ code: 0, err: 'warning: the hub refused /api/bff/v1/me (forbidden, HTTP 403); storing the credential anyway\n' });
    expect(existsSync(file)).toBe(true);
  });
});

describe('apply and connectors', () => {
  it('applies examples/open.yaml, then lists it as a table and as the hub\'s JSON', async () => {
    expect(await svc(['apply', '-f', EXAMPLE])).toEqual({ code: 0, out: 'connector/demo-open created\n', err: '' });
    expect((await svc(['apply', '-f', EXAMPLE])).out).toBe('connector/demo-open unchanged\n');

    const ls = await svc(['connectors', 'ls']);
    expect(ls.code).toBe(0);
    const [header, ...rows] = ls.out.trimEnd().split('\n');
    expect(header).toMatch(/^NAME\s+TYPE\s+SCOPES\s+SCHEDULE\s+ENDPOINTS\s+UPDATED$/);
    const row = rows.find((r) => r.startsWith('demo-open '))!;
    expect(row.split(/\s{2,}/).slice(0, 5)).toEqual(['demo-open', 'rest-generic', 'partners', '-', '1']);
    expect(row.indexOf('rest-generic')).toBe(header!.indexOf('TYPE')); // aligned

    const json = await svc(['connectors', 'ls', '--json']);
    const list = JSON.parse(json.out) as Array<{ name: string; endpoints: Array<{ id: string }> }>;
    expect(list.find((c) => c.name === 'demo-open')?.endpoints.map((e) => e.id)).toEqual(['open-partners']);

    const get = await svc(['connectors', 'get', 'demo-open']);
    expect(get.out).toContain('name: demo-open');
    expect(get.out).toMatch(/open-partners\s+true\s+GET\s+\/open\/partners\s+offset\s+ext\.open_partners/);
    expect(get.out).toMatch(/ENDPOINT\s+.*WATERMARK\s+RESUME FROM\n/);

    // An endpoint whose last run stopped at the page budget shows where the next one reads on.
    const owner = new pg.Client({ connectionString: hub.ownerUrl });
    await owner.connect();
    try {
      await owner.query(`update connectors.endpoints w set resume_shown = 'offset 1500' from connectors.connectors c where c.id = w.connector_id and c.name = 'demo-open'`);
      expect((await svc(['connectors', 'get', 'demo-open'])).out).toMatch(/open-partners\s+true\s+GET\s+\/open\/partners\s+offset\s+ext\.open_partners\s+\S+\s+-\s+offset 1500\n/);
    } finally {
      await owner.query(`update connectors.endpoints w set resume_shown = null from connectors.connectors c where c.id = w.connector_id and c.name = 'demo-open'`);
      await owner.end();
    }
  });

  it('takes the global options before the command and between a group and its verb too', async () => {
    const after = await svc(['connectors', 'ls', '--json']);
    expect(after.code).toBe(0);
    expect(await svc(['--json', 'connectors', 'ls'])).toEqual(after);
    expect(await svc(['connectors', '--json', 'ls'])).toEqual(after);
    expect(await svc(['--json', 'connectors', 'get', 'demo-open'])).toEqual(await svc(['connectors', 'get', 'demo-open', '--json']));
    expect(await svc(['-h', 'connectors', 'ls'])).toEqual(await svc(['connectors', 'ls', '-h']));
    expect(await svc(['--help', 'connectors'])).toEqual(await svc(['connectors', '--help']));
    const alone = await svc(['--json']);
    expect(alone.code).toBe(2);
    expect(alone.err).toMatch(/^no command given\n/);
  });

  it('get of a missing connector exits 1 with the hub\'s message and status', async () => {
    expect(await svc(['connectors', 'get', 'nope'])).toEqual({ code: 1, out: '', err: 'error: connector nope not found (HTTP 404)\n' });
    expect((await svc(['connectors', 'rm', 'nope'])).err).toBe('error: connector nope not found (HTTP 404)\n');
  });

  it('reports a manifest error with its field; an unknown kind is refused before anything is sent', async () => {
    const broken = stringify({ apiVersion: 'connectors.svc.io/v1', kind: 'Connector', metadata: { name: 'broken' }, connector_type: 'rest-generic', scopes: ['x'], spec: { endpoints: [] } });
    const bad = await svc(['apply', '-f', '-'], { stdin: broken });
    expect(bad.code).toBe(1);
    expect(bad.err).toMatch(/^error: stdin: .*spec\..*\(HTTP 400\)\n$/);

    const mixed = `${readFileSync(EXAMPLE, 'utf8').replace('demo-open', 'never-applied')}\n---\nkind: Widget\nmetadata: {name: w}\n`;
    const refused = await svc(['apply', '-f', '-'], { stdin: mixed });
    expect(refused).toEqual({ code: 1, out: '', err: 'error: stdin#2: unknown kind Widget (this hub applies Connector, Entity, Export, Workflow, Process)\n' });
    expect((await svc(['connectors', 'get', 'never-applied'])).code).toBe(1);
  });

  it('a file that takes long to read says so first; a document the hub finds too large is named with its size and the hub\'s limit', async () => {
    const small = await startTestHub({ 'svc.http.body-limit': '512kb', 'svc.datasource.url': hub.ownerUrl });
    try {
      const note = 'x'.repeat(1024 * 1024 + 100);
      const text = stringify({ apiVersion: 'connectors.svc.io/v1', kind: 'Connector', metadata: { name: 'large', annotations: { note } }, connector_type: 'rest-generic', scopes: ['x'], spec: {} });
      const sent = Buffer.byteLength(JSON.stringify(parse(text))).toLocaleString('en-US');
      const refused = await svc(['apply', '-f', '-'], { stdin: text, env: { SVC_URL: small.url, SVC_DEV_TENANT: '1', SVC_CLI_CONFIG: config } });
      expect(refused).toEqual({
        code: 1,
        out: '',
        err: `reading stdin (1.0 MiB)…\nerror: stdin: body too large: more than the 524,288 bytes a body may hold (svc.http.body-limit); stdin is ${sent} bytes as JSON (HTTP 413)\n`,
      });
      // the same as JSON is read at once (JSON.parse): nothing to say while it is read
      const asJson = await svc(['apply', '-f', '-'], { stdin: JSON.stringify(parse(text), null, 2), env: { SVC_URL: small.url, SVC_DEV_TENANT: '1', SVC_CLI_CONFIG: config } });
      expect(asJson).toEqual({ code: 1, out: '', err: `error: stdin: body too large: more than the 524,288 bytes a body may hold (svc.http.body-limit); stdin is ${sent} bytes as JSON (HTTP 413)\n` });
    } finally {
      await small.stop();
    }
    // On a terminal the line is cleared once the file is read, also when it could not be (before the error).
    const { code, err } = await svc(['apply', '-f', '-'], { stderr: { isTTY: true }, stdin: `${'x'.repeat(1024 * 1024 + 100)}: [\n` });
    expect(code).toBe(1);
    expect(err.startsWith('reading stdin (1.0 MiB)…\r\u001b[Kerror: stdin document 1: ')).toBe(true);
    // TERM=dumb: a terminal that cannot erase a line gets the line ended instead
    const { err: dumb } = await svc(['apply', '-f', '-'], { stderr: { isTTY: true }, stdin: `${'x'.repeat(1024 * 1024 + 100)}: [\n`, env: { SVC_CLI_CONFIG: config, TERM: 'dumb' } });
    expect(dumb.startsWith('reading stdin (1.0 MiB)…\nerror: stdin document 1: ')).toBe(true);
    // A file of -f DIR is named as listed (a repository cloned from someone else): its control and format characters are shown, never obeyed
    const dir = mkdtempSync(join(tmpdir(), 'svc-slow-name-'));
    try {
      writeFileSync(join(dir, 'x\u001b]0;pwned\u0007\u001b[2J\u202eevil.yaml'), `${'x'.repeat(1024 * 1024 + 100)}: [\n`);
      const named = await svc(['apply', '-f', dir]);
      expect(named.code).toBe(1);
      expect(named.err.startsWith(`reading ${dir}/x\\x1b]0;pwned\\x07\\x1b[2J\\u202eevil.yaml (1.0 MiB)…\nerror: `)).toBe(true);
      expect(named.err).toBe(printable(named.err));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('applies a directory\'s .json, .yaml and .yml files in the order of their names, every kind checked before anything is sent', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-apply-dir-'));
    try {
      const named = (name: string) => readFileSync(EXAMPLE, 'utf8').replace('demo-open', name);
      writeFileSync(join(dir, 'b.yml'), named('dir-b'));
      writeFileSync(join(dir, 'a.yaml'), `${named('dir-a1')}\n---\n${named('dir-a2')}`);
      writeFileSync(join(dir, 'c.json'), JSON.stringify(parse(named('dir-c'))));
      writeFileSync(join(dir, 'notes.txt'), 'not a manifest');
      // a file with no manifest in it (every line commented out) is skipped, as kubectl skips it
      writeFileSync(join(dir, 'a-disabled.yaml'), '# kind: Connector (disabled for now)\n');
      mkdirSync(join(dir, 'sub'));
      writeFileSync(join(dir, 'sub', 'd.yaml'), named('dir-d'));
      expect(await svc(['apply', '-f', dir])).toEqual({ code: 0, out: 'connector/dir-a1 created\nconnector/dir-a2 created\nconnector/dir-b created\nconnector/dir-c created\n', err: '' });
      expect((await svc(['connectors', 'get', 'dir-d'])).code).toBe(1);
      // A file of an unknown kind stops the whole directory before anything is sent.
      writeFileSync(join(dir, 'z.yaml'), 'kind: Widget\nmetadata: {name: w}\n');
      writeFileSync(join(dir, 'b.yml'), named('dir-b-never'));
      expect(await svc(['apply', '-f', dir])).toEqual({ code: 1, out: '', err: `error: ${join(dir, 'z.yaml')}: unknown kind Widget (this hub applies Connector, Entity, Export, Workflow, Process)\n` });
      expect((await svc(['connectors', 'get', 'dir-b-never'])).code).toBe(1);
      const empty = join(dir, 'sub', 'empty');
      mkdirSync(empty);
      expect(await svc(['apply', '-f', empty])).toEqual({ code: 1, out: '', err: `error: ${empty}: no .json, .yaml, .yml file in it\n` });
      writeFileSync(join(empty, 'x.yaml'), '---\n# nothing\n');
      expect(await svc(['apply', '-f', empty])).toEqual({ code: 1, out: '', err: `error: ${empty}: no manifest in its file\n` });
      expect(await svc(['apply', '-f', join(empty, 'x.yaml')])).toEqual({ code: 1, out: '', err: `error: ${join(empty, 'x.yaml')}: no manifest in it\n` });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('run (--wait or not) of a connector whose endpoints are all disabled exits 1 with the hub\'s 409: no run started, nothing waited for', async () => {
    const manifest = readFileSync(EXAMPLE, 'utf8').replace('demo-open', 'all-disabled').replace('http://demo-source:8099', demo.url).replace('    - id: open-partners\n', '    - id: open-partners\n      enabled: false\n');
    expect(await svc(['apply', '-f', '-'], { stdin: manifest })).toMatchObject({ code: 0, out: 'connector/all-disabled created\n' });
    const refused = {
      code: 1,
      out: '',
      err: 'error: connector all-disabled has no enabled endpoint: every endpoint of it is disabled (enabled: false in its manifest); no run was started; hint: enable an endpoint (enabled: true) and apply the manifest again (HTTP 409)\n',
    };
    expect(await svc(['connectors', 'run', 'all-disabled', '--wait'])).toEqual(refused);
    expect(await svc(['connectors', 'run', 'all-disabled'])).toEqual(refused);
  });

  it('runs a connector against the demo source and waits for the run; runs ls filters by connector', async () => {
    const manifest = readFileSync(EXAMPLE, 'utf8').replace('demo-open', 'local-open').replace('http://demo-source:8099', demo.url);
    expect((await svc(['apply', '-f', '-'], { stdin: manifest })).out).toBe('connector/local-open created\n');

    const pre = await svc(['connectors', 'preflight', 'local-open']);
    expect(pre.code).toBe(0);
    expect(pre.out).toMatch(/^connector\/local-open: ok\n/);
    expect(pre.out).toMatch(/open-partners\s+GET\s+200\s+100\s/);
    expect(pre.err).toBe('');

    // A declared header whose value_env resolves to nothing: still ok, and a warning line says so.
    const withHeader = parse(manifest) as { metadata: { name: string }; spec: Record<string, unknown> };
    withHeader.metadata.name = 'local-header';
    withHeader.spec.headers = [{ name: 'X-Partner-Key', value_env: 'NOT_STORED_ANYWHERE' }];
    expect((await svc(['apply', '-f', '-'], { stdin: stringify(withHeader) })).code).toBe(0);
    const warned = await svc(['connectors', 'preflight', 'local-header']);
    expect(warned.code).toBe(0);
    expect(warned.err).toBe(
      'warning: connector/local-header endpoint open-partners: header X-Partner-Key is not sent: its value_env NOT_STORED_ANYWHERE resolves to nothing (no stored secret of that name)\n',
    );

    const file = join(dir, 'local-open.yaml');
    writeFileSync(file, manifest);
    expect(await svc(['connectors', 'validate', '-f', file])).toEqual({ code: 0, out: `${file}: connector/local-open is valid\n`, err: '' });
    // a warning quoting the manifest (an unknown spec key) is shown on stderr, never obeyed
    writeFileSync(file, manifest.replace('spec:\n', 'spec:\n  "ext\\u202Era\\e[2J": 1\n'));
    const warned2 = await svc(['connectors', 'validate', '-f', file]);
    expect(warned2).toMatchObject({ code: 0, out: `${file}: connector/local-open is valid\n` });
    expect(warned2.err).toMatch(/^warning: .*: spec\.ext\\u202era\\x1b\[2J: /);
    expect(warned2.err).toBe(printable(warned2.err));
    writeFileSync(file, manifest);
    const fromFile = await svc(['connectors', 'preflight', '-f', file]);
    expect(fromFile).toMatchObject({ code: 0, err: '' });
    expect(fromFile.out).toMatch(/^connector\/local-open: ok\n/);
    writeFileSync(file, manifest.replace('limit: 100', 'limit: 50'));
    expect((await svc(['connectors', 'preflight', '-f', file])).err).toContain('the applied connector local-open differs from this file');
    writeFileSync(file, manifest.replace('unique_key: $.id', 'unique_key: 7'));
    const invalid = await svc(['connectors', 'validate', '-f', file]);
    expect(invalid.code).toBe(1);
    expect(invalid.out).toMatch(/is not valid\nFIELD\s+MESSAGE\nspec\.endpoints\[0\]\.target\.unique_key\s/);
    expect((await svc(['connectors', 'preflight', 'local-open', '-f', file])).code).toBe(2);

    const run = await svc(['connectors', 'run', 'local-open', '--wait']);
    expect(run.err).toBe('waiting for 1 run of local-open…\n');
    expect(run.code).toBe(0);
    expect(run.out).toMatch(/local-open\s+open-partners\s+Completed\s+120\s+120\s+0\s+0\s/);

    const runs = JSON.parse((await svc(['runs', 'ls', '--connector', 'local-open', '--json'])).out) as Array<{ id: string; connector: string }>;
    expect(runs.map((r) => r.connector)).toEqual(['local-open']);
    // The hub filters: a newer run of another connector does not hide it from the newest --limit
    // (filtered on the client, `--limit 1` read that newer run alone and listed nothing).
    const owner = new pg.Client({ connectionString: hub.ownerUrl });
    await owner.connect();
    try {
      await owner.query(`insert into connectors.runs (tenant_id, connector_id, connector_name, status, triggered_by, started_at) values (1, gen_random_uuid(), 'newer', 'Completed', 'manual', now() + interval '1 day')`);
    } finally {
      await owner.end();
    }
    const filtered = JSON.parse((await svc(['runs', 'ls', '--connector', 'local-open', '--limit', '1', '--json'])).out) as Array<{ id: string }>;
    expect(filtered.map((r) => r.id)).toEqual([runs[0]!.id]);
    // --all: page after page of --limit, by the hub's Link headers: the whole list.
    const whole = JSON.parse((await svc(['runs', 'ls', '--json'])).out) as Array<{ id: string }>;
    expect(whole.length).toBeGreaterThan(1);
    expect(JSON.parse((await svc(['runs', 'ls', '--limit', '1', '--all', '--json'])).out)).toEqual(whole);
    expect(JSON.parse((await svc(['runs', 'get', runs[0]!.id, '--json'])).out)).toMatchObject({ status: 'Completed', recordsOut: 120 });
    const cancel = await svc(['runs', 'cancel', runs[0]!.id]);
    expect(cancel.code).toBe(1);
    expect(cancel.err).toMatch(/\(HTTP 409\)\n$/);
  });
});

describe('svc runs cancel', () => {
  it('says whether the run ended at once (a run whose process died) or was asked to stop', () => {
    const ended = { id: 'r1', status: 'Failed', endedAt: '2026-12-04T19:00:00.000Z', errorMessage: 'interrupted: the hub stopped during the run' };
    expect(cancelled('r1')(ended)).toBe('run r1: ended Failed (interrupted: the hub stopped during the run)');
    expect(cancelled('r1')({ id: 'r1', status: 'Running', endedAt: null, errorMessage: null })).toMatch(/^run r1: cancellation requested \(.*svc\.connectors\.run-stale-after.*\)$/);
  });
});

describe('svc exports cancel', () => {
  it('says whether the run ended at once (no live process held it) or was asked to stop', () => {
    const ended = { id: 'r2', status: 'Failed', endedAt: '2026-12-04T19:00:00.000Z', failureReason: "cancelled by dev after the run's process had stopped" };
    expect(exportCancelled('Nightly', 'r2')(ended)).toBe("export/nightly: run r2: ended Failed (cancelled by dev after the run's process had stopped)");
    expect(exportCancelled('Nightly', 'r2')({ id: 'r2', status: 'Running', endedAt: null, failureReason: null })).toBe('export/nightly: run r2 cancellation requested');
  });
});

describe('usage errors', () => {
  it.each([
    [['connectors', 'get'], 'svc connectors get: missing NAME', 'Usage: svc connectors get NAME'],
    [['connectors', 'ls', '--bogus'], "svc connectors ls: unknown option '--bogus'\n", 'Usage: svc connectors ls'],
    [['runs', 'ls', '--limt', '5'], "svc runs ls: unknown option '--limt'; did you mean '--limit'?", 'Usage: svc runs ls'],
    [['runs', 'ls', '--jsn'], "svc runs ls: unknown option '--jsn'; did you mean '--json'?", 'Usage: svc runs ls'],
    [['runs', 'ls', '--limit'], 'svc runs ls: --limit needs a value\n', 'Usage: svc runs ls'],
    [['runs', 'ls', '--json=yes'], 'svc runs ls: --json takes no value\n', 'Usage: svc runs ls'],
    [['apply', '-f'], 'svc apply: -f, --file needs a value\n', 'Usage: svc apply'],
    [['processes', 'rm', 'x'], "svc processes: unknown command 'rm'\n", 'svc processes ls'],
    [['dlq', 'replayed', '7', '--new-run', 'bogus'], "svc dlq replayed: --new-run must be a run id (a UUID, as svc runs ls --json shows), not 'bogus'", 'Usage: svc dlq replayed'],
    [['conectors', 'ls'], "unknown command 'conectors'; did you mean 'connectors'?", 'Commands:'],
    [['help', 'conectors'], "unknown command 'conectors'; did you mean 'connectors'?", 'Commands:'],
    [['help', 'runs lss'], "unknown command 'runs lss'; did you mean 'runs ls'?", 'Commands:'],
    [['--verison'], "unknown option '--verison'; did you mean '--version'?", 'Commands:'],
    [['connectors', 'gte', 'x'], "svc connectors: unknown command 'gte'; did you mean 'get'?", 'svc connectors preflight'],
    [['connectors', 'ls', 'extra'], "svc connectors ls: unexpected argument 'extra'", 'Usage: svc connectors ls'],
    [['connectors', 'fly'], "svc connectors: unknown command 'fly'", 'svc connectors preflight'],
    [['apply'], 'svc apply: -f is required', 'Usage: svc apply -f FILE'],
    // a flag of one value given twice: the first was dropped without a word (apply -f a -f b applied b alone)
    [['apply', '-f', 'a.yaml', '-f', 'b.yaml'], "svc apply: -f is given twice ('a.yaml', 'b.yaml') and takes one FILE: name a directory holding the files, or join them with --- in one file\n", 'Usage: svc apply -f FILE'],
    [['delete', '--file=a.yaml', '-f', 'b.yaml'], "svc delete: -f is given twice ('a.yaml', 'b.yaml') and takes one FILE: name a directory", 'Usage: svc delete -f FILE'],
    [['runs', 'ls', '--connector', 'a', '--limit', '5', '--connector', 'b'], "svc runs ls: --connector is given twice ('a', 'b') and takes one NAME\n", 'Usage: svc runs ls'],
    [['runs', 'ls', '--limit', '0'], 'svc runs ls: --limit must be a positive integer', 'Usage: svc runs ls'],
    [['runs', 'ls', '--limit', '500'], 'svc runs ls: --limit must be at most 200, not 500', 'Usage: svc runs ls'],
    [['inbox', 'ls', '--limit', '201'], 'svc inbox ls: --limit must be at most 200, not 201', 'Usage: svc inbox ls'],
    [[], 'no command given', 'Commands:'],
    // a blank argument is refused before anything is sent (an empty NAME would name the collection: secrets get '' listed them)
    [['search', ''], 'svc search: QUERY must not be empty\n', 'Usage: svc search QUERY'],
    [['search', '  '], 'svc search: QUERY must not be empty\n', 'Usage: svc search QUERY'],
    [['chat', '\t'], 'svc chat: QUESTION must not be empty\n', 'Usage: svc chat QUESTION'],
    [['secrets', 'get', ''], 'svc secrets get: NAME must not be empty\n', 'Usage: svc secrets get NAME'],
    [['secrets', 'rm', ' '], 'svc secrets rm: NAME must not be empty\n', 'Usage: svc secrets rm NAME'],
    [['connectors', 'get', ''], 'svc connectors get: NAME must not be empty\n', 'Usage: svc connectors get NAME'],
    [['connectors', 'preflight', ''], 'svc connectors preflight: NAME must not be empty\n', 'Usage: svc connectors preflight'],
    [['runs', 'get', ''], 'svc runs get: ID must not be empty\n', 'Usage: svc runs get ID'],
    [['exports', 'runs', 'x', '--limit', '5', ''], "svc exports runs: unexpected argument ''\n", 'Usage: svc exports runs'],
    [['exports', 'download', ''], 'svc exports download: ENTITY must not be empty\n', 'Usage: svc exports download ENTITY'],
    // so is a blank flag value (rediscover --scope ' ' was the hub's 400, search --scope ' ' found nothing), but free text's
    [['rediscover', '--scope', ' '], 'svc rediscover: --scope needs a value\n', 'Usage: svc rediscover'],
    [['search', 'x', '--scope', '\t'], 'svc search: --scope needs a value\n', 'Usage: svc search'],
    [['runs', 'ls', '--connector', ' '], 'svc runs ls: --connector needs a value\n', 'Usage: svc runs ls'],
    [['connectors', 'run', 'x', '--endpoint', '  '], 'svc connectors run: --endpoint needs a value\n', 'Usage: svc connectors run'],
    // what was typed is quoted as shown, never obeyed
    [['connectors', 'ls', 'a\u202Eb\x1b[2J'], "svc connectors ls: unexpected argument 'a\\u202eb\\x1b[2J'\n", 'Usage: svc connectors ls'],
    [['events', 'tail', '--since', '\u200B1'], "svc events tail: --since must be an event id, not '\\u200b1'\n", 'Usage: svc events tail'],
    // node's three sentences on a value that begins with a dash, as one
    [['runs', 'ls', '--connector', '-x'], 'svc runs ls: --connector needs a value; one that begins with a dash is written --connector=-VALUE\n\nUsage', 'Usage: svc runs ls'],
    [['apply', '-f', '-x'], 'svc apply: -f needs a value; one that begins with a dash is written --file=-VALUE\n\nUsage', 'Usage: svc apply'],
  ])('svc %j exits 2 with the usage', async (args, message, usage) => {
    const result = await svc(args);
    expect(result.code).toBe(2);
    expect(result.out).toBe('');
    expect(result.err).toContain(message);
    expect(result.err).toContain(usage);
  });

  it('search prints the nearest rows (none in an empty tenant); chat without a model prints the hub\'s 503', async () => {
    const found = await svc(['search', 'anything at all', '--top', '3']);
    expect(found).toMatchObject({ code: 0, out: 'Nothing found.\n' });
    expect((await svc(['search', 'x', '--top', 'many'])).err).toContain('--top must be a positive integer');
    const chat = await svc(['chat', 'why?']);
    expect(chat.code).not.toBe(0);
    expect(chat.err).toContain('no chat model is configured');
  });

  it('rediscover reads a scope\'s tables into its schema card and says what it found; --scope is required', async () => {
    // A connector of this case's own scope, and a table of it written by a CSV ingest under its name.
    const connector = 'apiVersion: connectors.svc.io/v1\nkind: Connector\nmetadata: {name: rediscover-csv}\nconnector_type: rest-generic\nscopes: [rediscovered]\n' +
      'spec: {base_url: "http://127.0.0.1:9", endpoints: [{id: rows, path: /rows, target: {table: ext.rediscover_rows, unique_key: $.code}}]}\n';
    expect(await svc(['apply', '-f', '-'], { stdin: connector })).toMatchObject({ code: 0, out: 'connector/rediscover-csv created\n' });
    const ingested = await fetch(`${hub.url}/api/platform/sources/csv/ingest?connector=rediscover-csv&table=rediscover_rows&key=code`, {
      method: 'POST',
      headers: { 'X-Tenant-ID': '1', 'Content-Type': 'text/csv' },
      body: 'code,city\nA1,Lyon\nA2,Lyon\nA3,Nantes\n',
    });
    expect(ingested.status).toBe(200);
    const found = await svc(['rediscover', '--scope', 'rediscovered']);
    expect(found).toMatchObject({ code: 0, out: expect.stringMatching(/^scope rediscovered: 1 table\(s\), [1-9]\d* column\(s\) discovered \(source [\w-]+(, enriched)?\)\n$/), err: '' });
    expect(JSON.parse((await svc(['rediscover', '--scope', 'rediscovered', '--json'])).out)).toMatchObject({ scope: 'rediscovered', tableCount: 1 });
    const missing = await svc(['rediscover']);
    expect(missing.code).toBe(2);
    expect(missing.err).toContain('svc rediscover: --scope is required');
  });

  it('a group without its command lists its commands and exits 2', async () => {
    const result = await svc(['exports']);
    expect(result).toMatchObject({ code: 2, out: '' });
    expect(result.err).toMatch(/^svc exports: which one\?\n\nUsage: svc exports COMMAND\n/);
    for (const verb of ['ls', 'get', 'rm', 'run', 'runs', 'retry', 'download']) expect(result.err).toContain(`svc exports ${verb} `);
  });

  it('svc tui refuses to start without a terminal, with exit 2', async () => {
    const result = await svc(['tui']);
    expect(result).toMatchObject({ code: 2, out: '' });
    expect(result.err).toMatch(/^svc tui: needs an interactive terminal/);
  });
});

describe('secrets', () => {
  const VALUE = 'sk_test_8c1d2e3f-cli-value';

  it('text from the hub reaches the terminal with its control characters shown (\\x1b, …), never obeyed; --json is the hub\'s JSON', async () => {
    const description = 'note \x1b[2J\x1b]0;title\x07 end';
    expect((await svc(['secrets', 'create', 'escaped', '--value-stdin', '--description', description], { stdin: 'v' })).code).toBe(0);
    const ls = await svc(['secrets', 'ls']);
    expect(ls.out).toContain('note \\x1b[2J\\x1b]0;title\\x07 end');
    expect(ls.out).toBe(printable(ls.out)); // nothing left to show otherwise
    expect(JSON.parse((await svc(['secrets', 'get', 'escaped', '--json'])).out).description).toBe(description);
    // the hub's error message names what was asked for, as typed
    const missing = await svc(['secrets', 'get', 'a\x1b[31mx']);
    expect(missing).toMatchObject({ code: 1, err: 'error: secret a\\x1b[31mx not found (HTTP 404)\n' });
    expect((await svc(['secrets', 'rm', 'escaped'])).code).toBe(0);
  });

  it('text from the hub shows its invisible format characters as \\u202e, \\u200b, … (a bidi override makes one name read as another); --json is the hub\'s JSON', async () => {
    // "pay \u202Eexe.fdp" reads as "pay pdf.exe"; a zero-width space and an isolate would hide too
    const description = 'pay \u202Eexe.fdp\u202C ad\u200Bmin \u2067x\u2069';
    expect((await svc(['secrets', 'create', 'bidi', '--value-stdin', '--description', description], { stdin: 'v' })).code).toBe(0);
    const ls = await svc(['secrets', 'ls']);
    expect(ls.out).toMatch(/\nbidi +pay \\u202eexe\.fdp\\u202c ad\\u200bmin \\u2067x\\u2069 +\d{4}-/);
    expect(ls.out).toBe(printable(ls.out));
    const get = await svc(['secrets', 'get', 'bidi']);
    expect(get.out).toContain('description: pay \\u202eexe.fdp\\u202c ad\\u200bmin \\u2067x\\u2069\n');
    expect(JSON.parse((await svc(['secrets', 'get', 'bidi', '--json'])).out).description).toBe(description);
    // stderr too: the hub's error quotes the name as typed
    expect(await svc(['secrets', 'get', 'a\u202Eb'])).toMatchObject({ code: 1, err: 'error: secret a\\u202eb not found (HTTP 404)\n' });
    expect((await svc(['secrets', 'rm', 'bidi'])).code).toBe(0);
    // a blank description is free text, taken as given
    expect(await svc(['secrets', 'create', 'blank-note', '--value-stdin', '--description', ' '], { stdin: 'v' })).toMatchObject({ code: 0, err: '' });
    expect((await svc(['secrets', 'rm', 'blank-note'])).code).toBe(0);
  });

  it('creates from stdin; ls shows the name, never the value; rotate and rm', async () => {
    const created = await svc(['secrets', 'create', 'crm-key', '--value-stdin', '--description', 'CRM API key'], { stdin: `${VALUE}\n` });
    expect(created).toEqual({ code: 0, out: 'secret/crm-key created\n', err: '' });

    const ls = await svc(['secrets', 'ls']);
    expect(ls.out).toMatch(/^NAME\s+DESCRIPTION\s+CREATED\s+ROTATED\ncrm-key\s+CRM API key\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ\s+-\n$/);
    const json = await svc(['secrets', 'ls', '--json']);
    expect(JSON.parse(json.out)).toEqual([expect.objectContaining({ name: 'crm-key', rotatedAt: null })]);
    expect(ls.out + json.out + created.out).not.toContain(VALUE);

    expect((await svc(['secrets', 'rotate', 'crm-key', '--value-stdin'], { stdin: 'second-value' })).out).toBe('secret/crm-key rotated\n');
    expect(JSON.parse((await svc(['secrets', 'get', 'crm-key', '--json'])).out).rotatedAt).not.toBeNull();
    expect((await svc(['secrets', 'create', 'crm-key', '--value-stdin'], { stdin: 'x' })).err).toMatch(/; to give it a new value: svc secrets rotate crm-key \(HTTP 409\)\n$/);
    expect((await svc(['secrets', 'rm', 'crm-key'])).out).toBe('secret/crm-key deleted\n');
    expect((await svc(['secrets', 'ls'])).out).toBe('No secrets.\n');
  });

  it('Ctrl-C at the hidden prompt (a character in raw mode, not a signal) exits 130 and stores nothing', async () => {
    // A terminal's stdin as the prompt uses it: raw mode on and off, Ctrl-C arriving as \u0003.
    const stdin = Object.assign(new PassThrough(), { isTTY: true, modes: [] as boolean[], setRawMode(on: boolean) { this.modes.push(on); return this; } });
    const { code, err } = await svc(['secrets', 'create', 'typed'], {
      stdin,
      onErr: (_err, text) => {
        if (String(text).startsWith('Value of typed')) stdin.write('abc\u0003');
      },
    });
    expect(code).toBe(130);
    expect(err).toBe('Value of typed: \n');
    expect(stdin.modes).toEqual([true, false]);
    expect((await svc(['secrets', 'ls'])).out).not.toContain('typed');
  });

  it('a signal (SIGTERM, or SIGINT sent by kill) at the hidden prompt ends it as its Ctrl-C key does: exit 130 at once, raw mode off, nothing stored', async () => {
    const stdin = Object.assign(new PassThrough(), { isTTY: true, modes: [] as boolean[], setRawMode(on: boolean) { this.modes.push(on); return this; } });
    const stop = new AbortController();
    const { code, err } = await svc(['secrets', 'create', 'signalled'], {
      stdin,
      signal: stop.signal,
      onErr: (_err, text) => {
        if (String(text).startsWith('Value of signalled')) {
          stdin.write('abc');
          setTimeout(() => stop.abort(), 100);
        }
      },
    });
    expect(code).toBe(130);
    expect(err).toBe('Value of signalled: \n');
    // Ended by the signal itself, not by main's grace of 2 s for a command that does not stop (also
    // 130): a prompt left to the grace would still be in raw mode when main returns.
    expect(stdin.modes).toEqual([true, false]);
    expect((await svc(['secrets', 'ls'])).out).not.toContain('signalled');
  });

  it('Ctrl-C while svc waits for the end of stdin (a pipe whose writer never closes it) exits 130 at once, nothing sent or stored', async () => {
    const file = join(dir, 'stdin-held.json');
    for (const args of [['apply', '-f', '-'], ['secrets', 'create', 'held', '--value-stdin'], ['login', '--url', hub.url, '--token-stdin']]) {
      const stdin = new PassThrough();
      stdin.write('partial'); // and never ended
      // Measured from the signal, as main's grace is: from the start, the command's own start on a loaded machine counted too.
      const stop = new AbortController();
      let signalled = 0;
      setTimeout(() => {
        signalled = Date.now();
        stop.abort();
      }, 300);
      const { code } = await svc(args, { stdin, env: { SVC_CLI_CONFIG: args[0] === 'login' ? file : config }, signal: stop.signal });
      expect({ args, code }).toEqual({ args, code: 130 });
      expect(signalled).toBeGreaterThan(0);
      expect(Date.now() - signalled).toBeLessThan(2_000); // at once, not after main's grace for a command held by a wait it cannot cut (2 s from the signal)
    }
    expect(existsSync(file)).toBe(false);
    expect((await svc(['secrets', 'ls'])).out).not.toContain('held');
  });

  it('Ctrl-C while a command is held by a wait nothing can cut (-f a FIFO no one writes to) exits 130 within its grace of 2 s', async () => {
    const fifo = join(dir, 'manifest-fifo.yaml');
    execFileSync('mkfifo', [fifo]);
    const started = Date.now();
    const { code } = await svc(['apply', '-f', fifo], { stdin: new PassThrough(), signal: AbortSignal.timeout(300) });
    expect(code).toBe(130);
    expect(Date.now() - started).toBeLessThan(6_000);
    // the read left behind (open of the FIFO, in libuv's thread pool) is let go: a writer that closes at once
    closeSync(openSync(fifo, 'w'));
    rmSync(fifo);
  });

  it('the process held by a read nothing can cut (-f a FIFO whose writer sends nothing) ends on SIGINT and SIGTERM after its grace, not never', async () => {
    // Its read sits in libuv's thread pool, which process.exit joins: svc exited 130 in name only and hung for ever.
    const fifo = join(dir, 'held-fifo.yaml');
    execFileSync('mkfifo', [fifo]);
    const env = { PATH: process.env.PATH ?? '', SVC_CLI_CONFIG: join(dir, 'absent.json'), SVC_URL: 'http://127.0.0.1:9', SVC_DEV_TENANT: '1' };
    try {
      for (const signal of ['SIGINT', 'SIGTERM'] as const) {
        const child = spawn(process.execPath, [join(packageRoot(), 'bin', 'svc.js'), 'apply', '-f', fifo], { env, stdio: ['ignore', 'pipe', 'pipe'] });
        let writer: number | undefined;
        try {
          const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.on('exit', (code, sig) => resolve({ code, signal: sig })));
          // the marker: a writer's non-blocking open succeeds once the reader has the FIFO open (ENXIO before); it then sends nothing
          await until('svc to open the FIFO', () => {
            try {
              writer = openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK);
              return true;
            } catch {
              return false;
            }
          }, { timeoutMs: 15_000, everyMs: 50 });
          const started = Date.now();
          child.kill(signal);
          let timer: NodeJS.Timeout | undefined;
          const ended = await Promise.race([exited, new Promise((r) => (timer = setTimeout(() => r('still running'), 10_000)))]);
          clearTimeout(timer);
          // ended by the signal itself, as the shell counts it (130, 143): an exit would wait for the read
          expect(ended).toEqual({ code: null, signal });
          expect(Date.now() - started).toBeLessThan(6_000);
        } finally {
          if (writer !== undefined) closeSync(writer);
          if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
        }
      }
    } finally {
      rmSync(fifo);
    }
  }, 60_000);

  it('--token-stdin and --value-stdin at a terminal prompt without echo (read as piped, the credential was shown as typed)', async () => {
    const typed = async (args: string[], question: string, value: string, env: Record<string, string>) => {
      const stdin = Object.assign(new PassThrough(), { isTTY: true, modes: [] as boolean[], setRawMode(on: boolean) { this.modes.push(on); return this; } });
      const result = await runSvc(args, {
        stdin,
        env,
        onErr: (_err, text) => {
          if (text === question) stdin.write(`${value}\r`);
        },
      });
      return { ...result, modes: stdin.modes };
    };
    const file = join(dir, 'typed-token.json');
    const token = 'tok-typed-at-a-terminal';
    // The hub of this file runs the dev bypass, where login refuses a token: a server answering
    // GET /api/bff/v1/me as a hub that checks tokens does, for any token (the prompt is under test, not the token).
    const checking = createServer((_req, res) =>
      res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify({ tenant: { id: 1, code: 'default', homeId: 1, impersonating: false }, roles: ['svc_user'], user: { id: '1', login: 'typist', subject: 'typist' }, via: 'token' })),
    );
    await new Promise<void>((resolve) => checking.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(checking.address() as AddressInfo).port}`;
    try {
      const login = await typed(['login', '--url', url, '--token-stdin'], 'Token: ', token, { SVC_CLI_CONFIG: file });
      expect(login).toMatchObject({ code: 0, err: 'Token: \n', modes: [true, false] });
      expect(login.out).not.toContain(token);
      expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual({ url, token });
      // an arrow, Home, Esc or Alt and a key pressed at the prompt (unseen: it does not echo) is no part of the value; Backspace is
      const keyed = await typed(['login', '--url', url, '--token-stdin'], 'Token: ', 'tok-\x1b[Aarrows\x1b[D\x1bOH\x1b\x1bx\x7fS', { SVC_CLI_CONFIG: file });
      expect(keyed).toMatchObject({ code: 0, modes: [true, false] });
      expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual({ url, token: 'tok-arrowS' });
    } finally {
      await new Promise((resolve) => checking.close(resolve));
    }
    const secret = await typed(['secrets', 'create', 'typed-value', '--value-stdin'], 'Value of typed-value: ', 'v1', { SVC_CLI_CONFIG: config });
    expect(secret).toMatchObject({ code: 0, out: 'secret/typed-value created\n', err: 'Value of typed-value: \n', modes: [true, false] });
    expect((await svc(['secrets', 'rm', 'typed-value'])).code).toBe(0);
  });

  it('refuses a value it cannot read without echo: no terminal and no --value-stdin, or an empty value', async () => {
    const noTty = await svc(['secrets', 'create', 'other'], { stdin: VALUE });
    expect(noTty.code).toBe(2);
    expect(noTty.err).toContain('no terminal to prompt on: pipe the value in with --value-stdin');
    expect((await svc(['secrets', 'create', 'other', '--value-stdin'], { stdin: '\n' })).err).toContain('the value is empty');
  });
});

describe('deliveries, dead letters and events', () => {
  it('deliveries ls on an empty journal', async () => {
    expect(await svc(['deliveries', 'ls'])).toEqual({ code: 0, out: 'No deliveries.\n', err: '' });
    expect(await svc(['deliveries', 'ls', '--failed', '--json'])).toEqual({ code: 0, out: '[]\n', err: '' });
    expect((await svc(['deliveries', 'replay', '999'])).err).toMatch(/^error: .* \(HTTP 404\)\n$/);
    // An integration id the tenant does not have is an error, not an empty list.
    expect(await svc(['deliveries', 'ls', '--integration', '424242'])).toEqual({ code: 1, out: '', err: 'error: integration 424242 not found (HTTP 404)\n' });
  });

  it('dlq ls and get', async () => {
    // A connector of this case's own, never run: no dead letters, and no warning.
    const connector = 'apiVersion: connectors.svc.io/v1\nkind: Connector\nmetadata: {name: dlq-quiet}\nconnector_type: rest-generic\n' +
      'spec: {base_url: "http://127.0.0.1:9", endpoints: [{id: rows, path: /rows, target: {table: ext.dlq_quiet, unique_key: $.id}}]}\n';
    expect(await svc(['apply', '-f', '-'], { stdin: connector })).toMatchObject({ code: 0, out: 'connector/dlq-quiet created\n' });
    expect(await svc(['dlq', 'ls', '--connector', 'dlq-quiet'])).toEqual({ code: 0, out: 'No dead letters.\n', err: '' });
    // A name no connector has: the same empty list, and a warning that the name is unknown.
    expect(await svc(['dlq', 'ls', '--connector', 'local-opn'])).toEqual({ code: 0, out: 'No dead letters.\n', err: "warning: the tenant has no connector named 'local-opn'\n" });
    expect(await svc(['runs', 'ls', '--connector', 'local-opn'])).toEqual({ code: 0, out: 'No runs.\n', err: "warning: the tenant has no connector named 'local-opn'\n" });
    expect((await svc(['dlq', 'get', '424242'])).code).toBe(1);
  });

  it('dlq replayed and discard: the other resolution of a resolved entry is an error naming it, the same one again is not', async () => {
    const csv = 'id,name\r\n,Nobody';
    const ingest = await fetch(`${hub.url}/api/platform/sources/csv/ingest?connector=cli-dlq&table=cli_dlq&key=id`, { method: 'POST', headers: { 'X-Tenant-ID': '1', 'Content-Type': 'text/csv' }, body: csv });
    const run = (await ingest.json()) as { id: string };
    const [entry] = JSON.parse((await svc(['dlq', 'ls', '--run', run.id, '--json'])).out) as Array<{ id: number }>;
    const id = String(entry!.id);
    expect(await svc(['dlq', 'replayed', id])).toEqual({ code: 0, out: `dead letter ${id} marked replayed\n`, err: '' });
    expect(await svc(['dlq', 'replayed', id])).toEqual({ code: 0, out: `dead letter ${id} marked replayed\n`, err: '' });
    expect(await svc(['dlq', 'discard', id])).toEqual({ code: 1, out: '', err: `error: dead-letter entry ${id} is already replayed (HTTP 409)\n` });
  });

  it('events ls prints the catalog', async () => {
    const table = await svc(['events', 'ls']);
    expect(table.code).toBe(0);
    const catalog = JSON.parse((await svc(['events', 'ls', '--json'])).out) as Array<{ type: string }>;
    expect(catalog.map((e) => e.type)).toContain('connector.run.completed');
    const lines = table.out.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^TYPE\s+MODULE\s+PAYLOAD\s+DESCRIPTION$/);
    expect(lines).toHaveLength(catalog.length + 1);
    expect(lines.some((l) => l.startsWith('connector.run.completed '))).toBe(true);
  });

  it('events tail prints matching live events and stops cleanly when interrupted', async () => {
    const stop = new AbortController();
    let seen: () => void = () => undefined;
    const arrived = new Promise<void>((resolve) => (seen = resolve));
    const tailing = svc(['events', 'tail', '--topic', '*.created', '--json'], {
      signal: stop.signal,
      onOut: (out) => {
        if (out.includes('"org.created"')) seen();
      },
    });
    // The stream starts at the newest event when the client connects: emit until one arrives.
    let waiting = true;
    void arrived.then(() => (waiting = false));
    while (waiting) {
      await hub.services.db.withTenant(1, async (tx) => {
        await hub.services.events.emit(tx, 'org.updated', { orgId: 5, tenantId: 1 });
        await hub.services.events.emit(tx, 'org.created', { orgId: 5, tenantId: 1, name: 'Ops' });
      });
      await Promise.race([arrived, new Promise((resolve) => setTimeout(resolve, 200))]); // until the marker arrives; then again
    }
    stop.abort();
    const result = await tailing;
    expect(result.code).toBe(0);
    const events = result.out.trimEnd().split('\n').map((l) => JSON.parse(l) as { id: string; topic: string; payload: string });
    // Every printed event matches the filter (none of the org.updated emitted beside them); an
    // event of the tenant's other work that also matches `*.created` (platform.secret.created of an
    // earlier test, committed late) may be printed too.
    const ours = events.filter((e) => e.topic === 'org.created');
    expect(ours.length).toBeGreaterThan(0);
    for (const event of events) {
      expect(event.topic).toMatch(/^[a-z.]+\.created$/);
      expect(event.id).toMatch(/^\d+$/);
    }
    for (const event of ours) expect(JSON.parse(event.payload)).toEqual({ orgId: 5, tenantId: 1, name: 'Ops' });
  });
});

describe('help wrapped to the terminal', () => {
  const help = (args: string[], terminal: Terminal) => runSvc(args, { stdout: terminal, stderr: terminal, env: { SVC_CLI_CONFIG: '/nonexistent/svc-help.json' } });
  const widest = (text: string) => Math.max(...text.split('\n').map((l) => l.length));

  it('wraps svc --help, a group\'s and a command\'s help to the terminal\'s columns (at least 40; 80 when not a terminal), the help column aligned', async () => {
    for (const [stdout, width] of [[{ isTTY: true, columns: 60 }, 60], [{ isTTY: true, columns: 120 }, 120], [{ isTTY: true, columns: 20 }, 40], [{}, 80], [{ columns: 200 }, 80]] as const) {
      for (const args of [['--help'], ['exports', '--help'], ['runs', 'ls', '--help'], ['help', 'login']]) {
        const { code, out } = await help(args, stdout);
        expect(code).toBe(0);
        expect({ args, width, widest: widest(out) <= width }).toEqual({ args, width, widest: true });
      }
    }
    // runs ls at 60 columns: a flag's help goes on under itself, not under the flags
    const { out } = await help(['runs', 'ls', '--help'], { isTTY: true, columns: 60 });
    const lines = out.split('\n');
    const all = lines.findIndex((l) => l.startsWith('  --all '));
    const at = lines[all]!.indexOf('every entry');
    expect(at).toBeGreaterThan(8);
    expect(lines[all + 1]!.slice(0, at).trim()).toBe('');
    expect(lines[all + 1]![at]).not.toBe(' ');
    expect(out.replace(/\s+/g, ' ')).toContain("--all every entry, page after page (of --limit entries each, default the hub's), not the first page alone");
    // the usage after a usage error is wrapped to stderr's width
    const bad = await help(['runs', 'ls', '--bogus'], { isTTY: true, columns: 50 });
    expect(bad.code).toBe(2);
    expect(widest(bad.err.split('\n\n').slice(1).join('\n\n'))).toBeLessThanOrEqual(50);
    // on a wide terminal nothing is cut that fits: the whole summary of a command on its line
    expect((await help(['--help'], { isTTY: true, columns: 200 })).out).toMatch(/^ {2}svc exports runs NAME \[--limit N\] \[--all\] +Runs of an export, newest first$/m);
  });
});

describe('the executable', () => {
  it('node bin/svc.js --help prints the commands and exits 0', async () => {
    const child = spawn(process.execPath, [join(packageRoot(), 'bin', 'svc.js'), '--help'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    expect(code).toBe(0);
    expect(out).toContain('Usage: svc COMMAND');
    expect(out).toContain('svc connectors run NAME [--endpoint ID] [--wait]');
    // the one option that is not a command's is listed too
    expect(out).toMatch(/^ {2}--version +the version of svc \(alone: svc --version\)$/m);
    expect(await svc(['--version'])).toEqual({ code: 0, out: `${JSON.parse(readFileSync(join(packageRoot(), 'package.json'), 'utf8')).version}\n`, err: '' });
  });

  it('output it cannot write (a full disk: stdout on /dev/full) exits 1 (svc diff: 2) saying so, never 0 with the output lost; a usage error stays 2', async () => {
    const env = { PATH: process.env.PATH ?? '', SVC_CLI_CONFIG: join(dir, 'absent.json'), SVC_URL: hub.url, SVC_DEV_TENANT: '1' };
    const run = async (args: string[]) => {
      const full = openSync('/dev/full', 'w');
      try {
        const child = spawn(process.execPath, [join(packageRoot(), 'bin', 'svc.js'), ...args], { env, stdio: ['ignore', full, 'pipe'] });
        let err = '';
        child.stderr!.on('data', (d) => (err += d));
        const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
        return { code, err };
      } finally {
        closeSync(full);
      }
    };
    const lost = { code: 1, err: 'error: cannot write to standard output: ENOSPC; what was printed is incomplete\n' };
    expect(await run(['events', 'ls', '--json'])).toEqual(lost);
    expect(await run(['runs', 'ls'])).toEqual(lost);
    expect(await run(['--help'])).toEqual(lost);
    // svc diff's 1 says "differences found" (kubectl diff's convention): output it could not write is its error, 2
    const file = join(dir, 'full-diff.yaml');
    writeFileSync(file, 'kind: Process\nmetadata: {name: not-on-the-hub}\nspec: {}\n');
    expect(await run(['diff', '-f', file])).toEqual({ ...lost, code: 2 });
    // Nothing written to stdout, nothing lost: the command's own exit.
    expect(await run(['nonsense'])).toMatchObject({ code: 2, err: expect.stringContaining("unknown command 'nonsense'") });
  });

  it('a config file svc cannot write (a full disk: a file size limit of 0) fails the login saying so, and leaves no temporary file beside it', async () => {
    const folder = mkdtempSync(join(dir, 'config-full-'));
    // SIGXFSZ ignored: a write past the limit fails with EFBIG, as one on a full disk fails with ENOSPC.
    const child = spawn('sh', ['-c', `trap '' XFSZ; ulimit -f 0; exec "$0" "$@"`, process.execPath, join(packageRoot(), 'bin', 'svc.js'), 'login', '--url', hub.url, '--dev-tenant', '1'], {
      env: { PATH: process.env.PATH ?? '', HOME: folder, SVC_CLI_CONFIG: join(folder, 'config.json') },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let err = '';
    child.stderr.on('data', (d) => (err += d));
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    expect(code).not.toBe(0);
    expect(err).toMatch(/EFBIG|file too large/i);
    // Was: config.json.<pid>.tmp, left for good.
    expect(readdirSync(folder)).toEqual([]);
  });

  it('output whose reader closed the pipe (`svc runs ls | head`) ends the command with 0, but svc diff with 1 once it printed a difference: never "same"', async () => {
    const env = { PATH: process.env.PATH ?? '', SVC_CLI_CONFIG: join(dir, 'absent.json'), SVC_URL: hub.url, SVC_DEV_TENANT: '1' };
    const run = async (args: string[]) => {
      const child = spawn(process.execPath, [join(packageRoot(), 'bin', 'svc.js'), ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
      child.stdout!.destroy(); // the reader is gone before the command writes anything
      let err = '';
      child.stderr!.on('data', (d) => (err += d));
      const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
      return { code, err };
    };
    expect(await run(['runs', 'ls'])).toEqual({ code: 0, err: '' });
    const file = join(dir, 'cut-diff.yaml');
    writeFileSync(file, 'kind: Process\nmetadata: {name: not-on-the-hub}\nspec: {}\n');
    expect(await run(['diff', '-f', file])).toEqual({ code: 1, err: '' });
    expect(await run(['diff', '-f', file, '--json'])).toEqual({ code: 1, err: '' });
  });

  it('exports download -o stopped midway by SIGINT (130) or SIGTERM (143, as `timeout` sends) exits at once and leaves no file: neither FILE nor its temporary .part', async () => {
    // The hub's download as it answers (text/csv, X-Row-Count, X-Content-SHA256, Content-Length), its body held after the first rows.
    const csv = `partner_id,name\n${Array.from({ length: 1000 }, (_, i) => `p${i},Partner ${i}\n`).join('')}`;
    const sha256 = createHash('sha256').update(csv).digest('hex');
    const open = new Set<ServerResponse>();
    const slow = createServer((req, res) => {
      if (!req.url?.startsWith('/api/exports/entities/partner/download')) return void res.writeHead(404, { 'Content-Type': 'application/json' }).end('{"error":"not found"}');
      res.writeHead(200, { 'Content-Type': 'text/csv; charset=utf-8', 'X-Row-Count': '1000', 'X-Content-SHA256': sha256, 'Content-Length': String(Buffer.byteLength(csv)) });
      res.write(csv.slice(0, 4096));
      open.add(res);
    });
    await new Promise<void>((resolve) => slow.listen(0, '127.0.0.1', () => resolve()));
    const folder = mkdtempSync(join(dir, 'download-stopped-'));
    try {
      const env = { PATH: process.env.PATH ?? '', SVC_CLI_CONFIG: join(dir, 'absent.json'), SVC_URL: `http://127.0.0.1:${(slow.address() as AddressInfo).port}`, SVC_DEV_TENANT: '1' };
      for (const [signal, expected] of [['SIGINT', 130], ['SIGTERM', 143]] as const) {
        const file = join(folder, `partner-${signal}.csv`);
        const child = spawn(process.execPath, [join(packageRoot(), 'bin', 'svc.js'), 'exports', 'download', 'partner', '-o', file], { env, stdio: ['ignore', 'pipe', 'pipe'] });
        try {
          const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
          // the first rows reached the temporary file beside FILE
          await until('rows in the .part file', () => readdirSync(folder).some((name) => name.endsWith('.part') && statSync(join(folder, name)).size > 0), { timeoutMs: 15_000, everyMs: 50 });
          expect(readdirSync(folder).filter((name) => name.endsWith('.part'))).toHaveLength(1);
          child.kill(signal);
          let timer: NodeJS.Timeout | undefined;
          const code = await Promise.race([exited, new Promise((r) => (timer = setTimeout(() => r('still running'), 5_000)))]);
          clearTimeout(timer);
          expect({ signal, code }).toEqual({ signal, code: expected });
          expect(readdirSync(folder)).toEqual([]);
        } finally {
          if (child.exitCode === null) child.kill('SIGKILL');
        }
      }
    } finally {
      for (const res of open) res.destroy();
      await new Promise((resolve) => slow.close(resolve));
    }
  });

  it('events tail prints live events and stops on SIGINT with exit 0', async () => {
    const env = { PATH: process.env.PATH ?? '', SVC_CLI_CONFIG: join(dir, 'absent.json'), SVC_URL: hub.url, SVC_DEV_TENANT: '1' };
    const child = spawn(process.execPath, [join(packageRoot(), 'bin', 'svc.js'), 'events', 'tail'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    try {
      let out = '';
      let err = '';
      child.stdout.on('data', (d) => (out += d));
      child.stderr.on('data', (d) => (err += d));
      const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
      // The stream starts at the newest event once connected: emit until the child prints one.
      await until(
        'the child to print an event',
        async () => {
          if (out.includes('org.created')) return true;
          await hub.services.db.withTenant(1, (tx) => hub.services.events.emit(tx, 'org.created', { orgId: 9, tenantId: 1, name: 'Tail' }));
          return false;
        },
        { timeoutMs: 15_000, everyMs: 200, detail: () => err },
      );
      const [first] = out.split('\n');
      expect(first).toMatch(/^\S+Z {2}\d+ {2}org\.created {2}\{.*\}$/);
      expect(JSON.parse(first!.split('  ')[3]!)).toEqual({ orgId: 9, tenantId: 1, name: 'Tail' });
      child.kill('SIGINT');
      let timer: NodeJS.Timeout | undefined;
      const code = await Promise.race([exited, new Promise((r) => (timer = setTimeout(() => r('still running'), 5_000)))]);
      clearTimeout(timer);
      expect({ code, err }).toEqual({ code: 0, err: '' });
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  });
});

describe('what svc says on stderr of what was typed and of what the hub answered', () => {
  it('is shown (\\x1b, \\u202e), never obeyed: the runs waited for, an export run followed or left, a secret\'s prompt', async () => {
    // A server answering as a hub would (a real hub refuses such a name before anything is echoed; a
    // proxy or another server at SVC_URL does not): the name typed and the run ids it answers, shown.
    const HOSTILE = '\x1b]0;pwned\x07\x1b[2J\u202e';
    const SHOWN = '\\x1b]0;pwned\\x07\\x1b[2J\\u202e';
    let exportPolls = 0;
    const server = createServer((req, res) => {
      const url = decodeURIComponent(req.url ?? '');
      const send = (status: number, body: unknown) => void res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
      if (req.method === 'POST' && url.startsWith('/api/connectors/')) return send(202, { runs: [{ id: `r1${HOSTILE}`, endpointId: 'e1', endpoint: 'e1' }] });
      if (url.startsWith('/api/platform/runs/')) return send(200, { id: `r1${HOSTILE}`, connector: 'c', endpoint: 'e1', status: 'Completed', itemsFetched: 1, itemsWritten: 1 });
      if (req.method === 'POST' && url.startsWith('/api/exports/')) return send(202, { runId: `x1${HOSTILE}` });
      if (url.startsWith('/api/exports/')) {
        const running = url.includes('/left') || exportPolls++ === 0;
        return send(200, { id: `x1${HOSTILE}`, exportName: 'e', status: running ? 'Running' : 'Completed', trigger: 'manual', attempt: 1, retryOf: null, rowCount: `7${HOSTILE}`, byteCount: 0 });
      }
      send(404, { error: 'not found' });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const env = { SVC_CLI_CONFIG: join(dir, 'none.json'), SVC_URL: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, SVC_DEV_TENANT: '1', SVC_CLI_POLL_MS: '20' };
    try {
      // Was: 'waiting for 1 run of a\x1b]0;pwned…' as typed.
      const waited = await svc(['connectors', 'run', `a${HOSTILE}b`, '--wait'], { env });
      expect(waited).toMatchObject({ code: 0, err: `waiting for 1 run of a${SHOWN}b…\n` });

      // The export's name as the hub stores it, lower-case.
      const followed = await svc(['exports', 'retry', `E${HOSTILE}`, `x0${HOSTILE}`], { env });
      expect(followed.code).toBe(0);
      expect(followed.err).toBe(`export/e${SHOWN.replace('2J', '2j')}: run x1${SHOWN} started (retry of x0${SHOWN})\nRunning: 7${SHOWN} rows, 0 bytes (0 B) so far, 0s\n`);

      const stop = new AbortController();
      const left = await svc(['exports', 'run', `left${HOSTILE}`], { env, signal: stop.signal, onErr: (err) => void (err.includes('so far') && stop.abort()) });
      expect(left.code).toBe(130);
      expect(left.err.split('\n').slice(-2)).toEqual([`stopped following run x1${SHOWN}; it goes on in the hub: svc exports runs left${SHOWN.replace('2J', '2j')}`, '']);

      // The prompt for a secret's value names the secret as typed, before the hub is asked.
      const stdin = Object.assign(new PassThrough(), { isTTY: true, setRawMode() { return this; } });
      const prompted = await svc(['secrets', 'create', `s${HOSTILE}`], { env, stdin, onErr: (_err, text) => void (String(text).startsWith('Value of') && stdin.write('\u0003')) });
      expect(prompted).toMatchObject({ code: 130, err: `Value of s${SHOWN}: \n` });

      for (const { err } of [waited, followed, left, prompted]) expect(err).toBe(printable(err));
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});
