import dns from 'node:dns';
import net from 'node:net';
import { afterEach, beforeEach, describe, expect, it } from '@jest/globals';
import { loopbackOnly } from './loopback-only.js';

/**
 * The fuzzer's guard refuses connections and lookups off loopback before they happen. The real
 * connect and lookup are replaced by spies first, so even a broken guard sends nothing anywhere.
 */

const realConnect = net.Socket.prototype.connect;
const realLookup = dns.lookup;
let connected: unknown[];
let looked: string[];

beforeEach(() => {
  connected = [];
  looked = [];
  net.Socket.prototype.connect = function spy(this: net.Socket, ...args: unknown[]) {
    connected.push(args[0]);
    process.nextTick(() => this.destroy(new Error('spy: no connection made')));
    return this;
  } as typeof realConnect;
  dns.lookup = ((hostname: string, ...rest: unknown[]) => {
    looked.push(hostname);
    (rest[rest.length - 1] as (err: Error) => void)(Object.assign(new Error('spy: no lookup made'), { code: 'ENOTFOUND' }));
  }) as typeof realLookup;
});

afterEach(() => {
  net.Socket.prototype.connect = realConnect;
  dns.lookup = realLookup;
});

const attempt = (host: string) =>
  new Promise<string>((resolve) => {
    const socket = net.connect({ host, port: 9 });
    socket.on('error', (err) => resolve(err.message));
    socket.on('connect', () => resolve('connected'));
  });

describe('loopbackOnly', () => {
  it('refuses names and addresses off loopback without connecting or looking them up', async () => {
    const guard = loopbackOnly();
    try {
      for (const host of ['10.1.2.3', 'example.invalid', '::ffff:10.0.0.1', '169.254.169.254']) {
        expect(await attempt(host)).toBe(`fuzz harness: ${host} is not loopback`);
      }
      await expect(dns.promises.lookup('example.invalid')).rejects.toThrow('not loopback');
      // The DNS client's queries (the outbound address policy's resolver) too; its server is a
      // black hole, so a query let through would time out instead of being refused.
      const client = new dns.promises.Resolver({ timeout: 5_000, tries: 1 });
      client.setServers(['192.0.2.1']);
      await expect(client.resolve4('hooks.example.invalid')).rejects.toThrow('not loopback');
      await expect(client.resolve6('hooks.example.invalid')).rejects.toThrow('not loopback');
      expect(connected).toEqual([]);
      expect(looked).toEqual([]);
      expect(guard.refused).toEqual(['10.1.2.3', 'example.invalid', '::ffff:10.0.0.1', '169.254.169.254', 'example.invalid', 'hooks.example.invalid', 'hooks.example.invalid']);
    } finally {
      guard.restore();
    }
  });

  it('lets loopback through, and restore() puts the originals back', async () => {
    const guard = loopbackOnly();
    try {
      for (const host of ['127.0.0.1', '127.0.0.2', 'localhost', '::1']) expect(await attempt(host)).toBe('spy: no connection made');
      expect(connected).toHaveLength(4);
    } finally {
      guard.restore();
    }
    expect(net.Socket.prototype.connect).not.toBe(realConnect); // the spy, as before the guard
    expect(dns.lookup).not.toBe(realLookup);
  });
});
