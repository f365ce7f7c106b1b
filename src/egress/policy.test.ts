import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { buildConnector, fetch, request } from 'undici';
import { describeNetworkError } from './network-error.js';
import { type Connector, egressAgent } from './dispatcher.js';
import { EgressDeniedError, EgressPolicy, isEgressDenied, parseAddress } from './policy.js';

/**
 * No test here sends a packet off loopback: refusals are asserted to happen before the connector is
 * called (a counting connector stands in for undici's and refuses to connect anything that is not
 * on 127/8), names resolve through a fixed table, and the allowed paths talk to loopback receivers.
 */

const table: Record<string, string[]> = {
  'public.test': ['93.184.216.34'],
  'rebind.test': ['127.0.0.1'],
  'private.test': ['10.0.0.7'],
  'mixed.test': ['93.184.216.34', '192.168.1.1'],
  'mapped.test': ['::ffff:7f00:1'],
  'receiver.test': ['127.0.0.1'],
};
const resolve = async (hostname: string) => {
  const addresses = table[hostname];
  if (!addresses) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' });
  return addresses.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
};
const strict = (allow: string[] = []) => new EgressPolicy({ denyPrivate: true, allow, resolve });

async function refusal(policy: EgressPolicy, host: string): Promise<EgressDeniedError | undefined> {
  try {
    await policy.admit(host);
    return undefined;
  } catch (err) {
    if (err instanceof EgressDeniedError) return err;
    throw err;
  }
}

describe('the address policy, one regression test per bypass form', () => {
  const policy = strict();
  it.each([
    ['loopback', '127.0.0.1'],
    ['loopback, elsewhere in 127/8', '127.1.2.3'],
    ['IPv6 loopback', '::1'],
    ['IPv6 loopback in brackets', '[::1]'],
    ['private 10/8', '10.1.2.3'],
    ['private 172.16/12', '172.20.0.1'],
    ['private 192.168/16', '192.168.0.5'],
    ['CGNAT 100.64/10', '100.64.0.1'],
    ['link-local', '169.254.1.1'],
    ['metadata address', '169.254.169.254'],
    ['IPv6 link-local', 'fe80::1'],
    ['IPv6 link-local with a zone', 'fe80::1%eth0'],
    ['unique-local', 'fd12:3456::1'],
    ['AWS IPv6 metadata', 'fd00:ec2::254'],
    ['unspecified v4', '0.0.0.0'],
    ['unspecified v6', '::'],
    ['IPv4-mapped, hex', '::ffff:7f00:1'],
    ['IPv4-mapped, dotted', '::ffff:127.0.0.1'],
    ['IPv4-mapped private', '::ffff:10.0.0.1'],
    ['IPv4-compatible', '::127.0.0.1'],
    ['NAT64 64:ff9b::/96', '64:ff9b::7f00:1'],
    ['NAT64 local-use 64:ff9b:1::/48', '64:ff9b:1::a00:1'],
    ['6to4 embedding loopback', '2002:7f00:1::'],
    ['6to4 embedding a private address', '2002:c0a8:101::1'],
    ['Teredo', '2001:0:4136:e378:8000:63bf:3fff:fdd2'],
    ['IPv4-translated (SIIT) loopback', '::ffff:0:7f00:1'],
    ['IPv4-translated (SIIT) metadata address', '::ffff:0:a9fe:a9fe'],
    ['IPv4-translated (SIIT) private', '::ffff:0:a00:1'],
    ['IPv4 documentation TEST-NET-1', '192.0.2.10'],
    ['IPv4 documentation TEST-NET-2', '198.51.100.10'],
    ['IPv4 documentation TEST-NET-3', '203.0.113.10'],
    ['IPv4 benchmarking', '198.18.0.1'],
    ['retired 6to4 relay anycast', '192.88.99.1'],
    ['IPv6 documentation 2001:db8::/32', '2001:db8::1'],
    ['IPv6 documentation 3fff::/20', '3fff::1'],
    ['IPv6 benchmarking', '2001:2::1'],
    ['ORCHID', '2001:10::1'],
    ['SRv6 SIDs', '5f00::1'],
    ['IPv6 dummy prefix', '100:0:0:1::1'],
    ['multicast', '224.0.0.1'],
    ['broadcast', '255.255.255.255'],
    ['decimal IPv4', '2130706433'],
    ['hex IPv4', '0x7f.1'],
    ['hex IPv4, whole', '0x7f000001'],
    ['octal IPv4', '0177.0.0.1'],
    ['trailing-dot IPv4', '127.0.0.1.'],
    ['localhost', 'localhost'],
    ['localhost, trailing dot', 'localhost.'],
    ['localhost, upper case', 'LOCALHOST'],
    ['a .localhost name', 'app.localhost'],
    ['a .localhost name, trailing dot', 'app.localhost.'],
    ['GCP metadata name', 'metadata.google.internal'],
    ['GCP metadata name, trailing dot', 'metadata.google.internal.'],
    ['a name resolving to loopback (DNS rebinding)', 'rebind.test'],
    ['a name resolving to a private address', 'private.test'],
    ['a name with one private address among public ones', 'mixed.test'],
    ['a name resolving to an IPv4-mapped loopback', 'mapped.test'],
  ])('refuses %s (%s)', async (_form, host) => {
    const err = await refusal(policy, host);
    expect(err).toBeInstanceOf(EgressDeniedError);
    expect(err?.message).toMatch(/refused by the outbound address policy \(svc\.egress\.deny-private\)$/);
    expect(isEgressDenied(err)).toBe(true);
  });

  it('reads every numeric IPv4 spelling as the address it spells, as WHATWG URLs do', () => {
    for (const [url, host] of [
      ['http://2130706433/', '127.0.0.1'],
      ['http://0x7f.1/', '127.0.0.1'],
      ['http://0177.0.0.1/', '127.0.0.1'],
      ['http://127.0.0.1./', '127.0.0.1'],
    ] as const) {
      expect(new URL(url).hostname).toBe(host);
    }
    expect(parseAddress('2130706433')).toBe('127.0.0.1');
    expect(parseAddress('0x7f.1')).toBe('127.0.0.1');
    expect(parseAddress('0177.0.0.1')).toBe('127.0.0.1');
    expect(parseAddress('10.1')).toBe('10.0.0.1');
    expect(parseAddress('hooks.example.com')).toBeUndefined();
    expect(parseAddress('256.1.1.1')).toBeUndefined();
  });

  it('admits public addresses and names resolving only to them, answering the checked address', async () => {
    expect(await policy.admit('93.184.216.34')).toBe('93.184.216.34');
    expect(await policy.admit('2606:2800:220:1:248:1893:25c8:1946')).toBe('2606:2800:220:1:248:1893:25c8:1946');
    expect(await policy.admit('2002:5db8:d822::1')).toBe('2002:5db8:d822::1');
    // IPv4-mapped: judged as the IPv4 address it maps (connected to over IPv4 there), public here.
    expect(await policy.admit('::ffff:5db8:d822')).toBe('::ffff:5db8:d822');
    expect(await policy.admit('[::ffff:93.184.216.34]')).toBe('::ffff:93.184.216.34');
    expect(await policy.admit('public.test')).toBe('93.184.216.34');
    expect(await policy.admit('PUBLIC.TEST.')).toBe('93.184.216.34');
  });

  it('refuses at storage time what needs no resolution, and leaves names to connect time', () => {
    expect(policy.refusal('[::ffff:7f00:1]')).toBeInstanceOf(EgressDeniedError);
    expect(policy.refusal('localhost.')).toBeInstanceOf(EgressDeniedError);
    expect(policy.refusal('rebind.test')).toBeUndefined();
    expect(policy.refusal('93.184.216.34')).toBeUndefined();
  });

  it('the allow-list lets CIDRs, addresses and names through', async () => {
    const allowing = strict(['127.0.0.1', '10.20.0.0/16', 'fd12::/16', 'hooks.internal', '*.corp.example']);
    expect(await allowing.admit('127.0.0.1')).toBe('127.0.0.1');
    expect(await allowing.admit('::ffff:127.0.0.1')).toBe('::ffff:127.0.0.1');
    expect(await allowing.admit('10.20.3.4')).toBe('10.20.3.4');
    expect(await allowing.admit('fd12::9')).toBe('fd12::9');
    expect(await allowing.admit('hooks.internal')).toBe('hooks.internal');
    expect(await allowing.admit('api.corp.example')).toBe('api.corp.example');
    expect(await allowing.admit('rebind.test')).toBe('127.0.0.1');
    expect(await refusal(allowing, '127.0.0.2')).toBeInstanceOf(EgressDeniedError);
    expect(await refusal(allowing, '10.21.0.1')).toBeInstanceOf(EgressDeniedError);
    await expect(allowing.admit('corp.example.evil')).rejects.toMatchObject({ code: 'ENOTFOUND' }); // resolved, not admitted by name
  });

  it('an allow-list name never admits an IP literal: a wildcard whose last label is a number (*.0.1, *.1) lets no address through', async () => {
    const allowing = strict(['*.0.1', '*.1', '*.254']);
    for (const host of ['127.0.0.1', '10.0.0.1', '169.254.169.254', '0x7f.1', '2130706433', '127.0.0.1.']) {
      expect(await refusal(allowing, host)).toBeInstanceOf(EgressDeniedError);
      expect(allowing.refusal(host)).toBeInstanceOf(EgressDeniedError);
    }
  });

  it('an allow entry written as an address with a trailing dot, or in brackets, is that address', async () => {
    const allowing = strict(['127.0.0.1.', '[::1]']);
    expect(await allowing.admit('127.0.0.1')).toBe('127.0.0.1');
    expect(await allowing.admit('[::1]')).toBe('::1');
    expect(allowing.refusal('127.0.0.1')).toBeUndefined();
    expect(await refusal(allowing, '127.0.0.2')).toBeInstanceOf(EgressDeniedError);
  });

  // The entry alone: egressPolicy (egress/config.ts) says it as a configuration error of svc.egress.allow, naming SVC_EGRESS_ALLOW.
  it('refuses an allow entry that is not a CIDR', () => {
    expect(() => strict(['10.0.0.0/33'])).toThrow(/^10\.0\.0\.0\/33 is not a CIDR$/);
    expect(() => strict(['hooks/8'])).toThrow(/is not a CIDR/);
  });

  it('refuses an allow entry that is no host name either (a bare *, empty labels, other characters)', () => {
    for (const entry of ['*', 'foo..bar', '*.', '*.*.corp', 'http:x', 'hooks internal', '.corp', `${'a'.repeat(64)}.example`]) {
      expect(() => strict([entry])).toThrow(`${entry} is neither a CIDR, an address nor a host name`);
    }
    // Names as resolvers know them pass, a trailing dot and underscores included; blank entries are skipped.
    expect(() => strict(['hooks.internal', '*.corp.example', 'svc_a.local.', 'x', '', ' '])).not.toThrow();
  });

  it('with the policy off, every host passes unresolved', async () => {
    const open = new EgressPolicy({ denyPrivate: false, resolve });
    expect(await open.admit('localhost')).toBe('localhost');
    expect(await open.admit('[::1]')).toBe('::1');
    expect(open.refusal('127.0.0.1')).toBeUndefined();
  });
});

describe('the egress agent refuses before any connection', () => {
  let server: Server;
  let port: number;
  let connections = 0;
  beforeAll(async () => {
    server = createServer((_req, res) => res.end('ok'));
    server.on('connection', () => {
      connections++;
    });
    await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(() => new Promise<void>((done) => server.close(() => done())));

  /** undici's connector, restricted to loopback, counting the hosts it was asked to connect to. */
  function counting(): { connector: Connector; hosts: string[] } {
    const real = buildConnector({ timeout: 2_000 });
    const hosts: string[] = [];
    const connector: Connector = (options, callback) => {
      hosts.push(options.hostname);
      if (!options.hostname.startsWith('127.')) return callback(new Error(`test guard: would have connected to ${options.hostname}`), null);
      return real(options, callback);
    };
    return { connector, hosts };
  }

  it.each([
    ['http://10.1.2.3/'],
    ['http://169.254.169.254/latest/meta-data/'],
    ['http://[::ffff:7f00:1]/'],
    ['http://[64:ff9b::a9fe:a9fe]/'],
    ['http://[2002:a9fe:a9fe::]/'],
    ['http://2130706433/'],
    ['http://0x7f.1/'],
    ['http://0177.0.0.1/'],
    ['http://localhost./'],
    ['http://app.localhost/'],
    ['http://metadata.google.internal/computeMetadata/v1/'],
    ['http://rebind.test/'],
  ])('%s: the connector is never called', async (url) => {
    const { connector, hosts } = counting();
    const agent = egressAgent(strict(), { connector });
    const before = connections;
    try {
      const err = await request(url, { dispatcher: agent }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(isEgressDenied(err)).toBe(true);
      expect(describeNetworkError(err)).toMatch(/refused by the outbound address policy/);
      expect(hosts).toEqual([]);
      expect(connections).toBe(before);
    } finally {
      await agent.close();
    }
  });

  it('a name whose DNS server never answers fails within the connect timeout, as undici\'s own connect timeout, the connector never called', async () => {
    const { connector, hosts } = counting();
    const silent = new EgressPolicy({ denyPrivate: true, resolve: (hostname) => (hostname === 'silent.test' ? new Promise(() => undefined) : resolve(hostname)) });
    const agent = egressAgent(silent, { connector, connectTimeoutMs: 200 });
    try {
      // Without a bound the request waits for ever: 20 s (a hundred times the timeout) stands for that.
      const err = await Promise.race([
        request('http://silent.test/', { dispatcher: agent }).then(
          () => undefined,
          (e: unknown) => e,
        ),
        new Promise((resolve) => setTimeout(() => resolve('still connecting after 20 s'), 20_000).unref()),
      ]);
      // The 200 ms timer ended it (not undici's default of 10 s), whatever the machine's pauses made of the 200 ms.
      expect(err).toMatchObject({ code: 'UND_ERR_CONNECT_TIMEOUT', message: expect.stringContaining('timeout: 200ms') });
      expect(describeNetworkError(err, { connectTimeoutMs: 200 })).toBe('connect timeout: no connection within 200 ms');
      expect(hosts).toEqual([]);
    } finally {
      await agent.destroy();
    }
  });

  it('the resolution and the connection share the connect timeout: a connection made after it is dropped, not used', async () => {
    const real = buildConnector({ timeout: 2_000 });
    let opened: import('node:net').Socket | undefined;
    // Connects at once, but answers the socket only after the time is up.
    const late: Connector = (options, callback) =>
      real(options, (err, socket) => {
        opened = socket ?? undefined;
        setTimeout(() => (err ? callback(err, null) : callback(null, socket!)), 300);
      });
    const agent = egressAgent(strict(['127.0.0.1']), { connector: late, connectTimeoutMs: 100 });
    try {
      const err = await request(`http://127.0.0.1:${port}/`, { dispatcher: agent }).catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'UND_ERR_CONNECT_TIMEOUT' });
      await new Promise((done) => setTimeout(done, 400));
      expect(opened?.destroyed).toBe(true);
    } finally {
      await agent.destroy();
    }
  });

  it('a loopback receiver refused by default is reached once allow-listed, through the checked address', async () => {
    const denied = counting();
    const refusing = egressAgent(strict(), { connector: denied.connector });
    const before = connections;
    const err = await request(`http://127.0.0.1:${port}/`, { dispatcher: refusing }).catch((e: unknown) => e);
    await refusing.close();
    expect(isEgressDenied(err)).toBe(true);
    expect(connections).toBe(before);

    const allowed = counting();
    const agent = egressAgent(strict(['127.0.0.1']), { connector: allowed.connector });
    try {
      const res = await request(`http://receiver.test:${port}/`, { dispatcher: agent });
      expect(await res.body.text()).toBe('ok');
      expect(allowed.hosts).toEqual(['127.0.0.1']);
      expect(connections).toBe(before + 1);
    } finally {
      await agent.close();
    }
  });

  it('proxy variables in the environment are not followed: a refused address stays refused, an admitted one is reached directly', async () => {
    // A proxy on loopback recording what reaches it (a request for an absolute URL, or a CONNECT).
    const proxied: string[] = [];
    const proxy = createServer((req, res) => {
      proxied.push(`${req.method} ${req.url}`);
      res.end('from the proxy');
    });
    proxy.on('connect', (req, socket) => {
      proxied.push(`CONNECT ${req.url}`);
      socket.end();
    });
    await new Promise<void>((done) => proxy.listen(0, '127.0.0.1', done));
    const proxyUrl = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
    const names = ['HTTP_PROXY', 'HTTPS_PROXY', 'ALL_PROXY', 'http_proxy', 'https_proxy', 'all_proxy', 'NO_PROXY', 'no_proxy', 'NODE_USE_ENV_PROXY'];
    const saved = Object.fromEntries(names.map((name) => [name, process.env[name]]));
    Object.assign(process.env, { HTTP_PROXY: proxyUrl, HTTPS_PROXY: proxyUrl, ALL_PROXY: proxyUrl, http_proxy: proxyUrl, https_proxy: proxyUrl, all_proxy: proxyUrl, NO_PROXY: '', no_proxy: '', NODE_USE_ENV_PROXY: '1' });
    const refusing = egressAgent(strict());
    const admitting = egressAgent(strict(['127.0.0.1']));
    try {
      const before = connections;
      for (const url of [`http://127.0.0.1:${port}/`, 'http://10.1.2.3/', 'http://rebind.test/']) {
        expect(isEgressDenied(await request(url, { dispatcher: refusing }).catch((e: unknown) => e))).toBe(true);
        expect(isEgressDenied(await fetch(url, { dispatcher: refusing }).catch((e: unknown) => e))).toBe(true);
      }
      expect(connections).toBe(before);
      const res = await request(`http://receiver.test:${port}/`, { dispatcher: admitting });
      expect(await res.body.text()).toBe('ok');
      expect(await (await fetch(`http://127.0.0.1:${port}/`, { dispatcher: admitting })).text()).toBe('ok');
      expect(proxied).toEqual([]);
    } finally {
      for (const name of names) {
        if (saved[name] === undefined) delete process.env[name];
        else process.env[name] = saved[name];
      }
      await refusing.close();
      await admitting.close();
      await new Promise<void>((done) => proxy.close(() => done()));
    }
  });

  it('with the policy off the agent connects as undici does', async () => {
    const agent = egressAgent(new EgressPolicy({ denyPrivate: false }));
    try {
      const res = await request(`http://127.0.0.1:${port}/`, { dispatcher: agent });
      expect(res.statusCode).toBe(200);
      await res.body.dump();
    } finally {
      await agent.close();
    }
  });
});

describe('describeNetworkError', () => {
  it('names timeouts with the configured bounds and keeps codes', () => {
    expect(describeNetworkError({ code: 'UND_ERR_CONNECT_TIMEOUT', message: 'x' }, { connectTimeoutMs: 50 })).toBe('connect timeout: no connection within 50 ms');
    expect(describeNetworkError({ code: 'UND_ERR_HEADERS_TIMEOUT', message: 'x' }, { timeoutMs: 70 })).toBe('timeout: no response within 70 ms');
    expect(describeNetworkError(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' }))).toBe('connect ECONNREFUSED 127.0.0.1:1');
    expect(describeNetworkError(Object.assign(new Error('boom'), { code: 'EPIPE' }))).toBe('EPIPE: boom');
    const aggregate = Object.assign(new AggregateError([Object.assign(new Error('connect ECONNREFUSED ::1:1'), { code: 'ECONNREFUSED' })], ''), { code: 'ECONNREFUSED' });
    expect(describeNetworkError(aggregate)).toBe('connect ECONNREFUSED ::1:1');
  });
});
