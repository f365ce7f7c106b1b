import dns from 'node:dns';
import { syncBuiltinESMExports } from 'node:module';
import net from 'node:net';

/**
 * Keeps every connection of this process on loopback while fuzzing: generated manifests, webhook
 * targets and e-mail settings name hosts the hub would otherwise call. A connection to anything but
 * 127.0.0.0/8, ::1 or `localhost` fails at once (before any name is looked up), as does a lookup of
 * any other name, by the system resolver or by the DNS client (the outbound address policy asks DNS
 * servers directly: no query leaves either). `restore()` puts the originals back.
 */
export interface LoopbackGuard {
  /** Hosts the hub tried to reach and was refused. */
  refused: string[];
  restore(): void;
}

const LOOPBACK = /^(127\.\d{1,3}\.\d{1,3}\.\d{1,3}|::1|::ffff:127\.\d{1,3}\.\d{1,3}\.\d{1,3}|localhost\.?)$/i;

export function loopbackOnly(): LoopbackGuard {
  const refused: string[] = [];
  const connect = net.Socket.prototype.connect;
  const lookup = dns.lookup;
  const promisesLookup = dns.promises.lookup;
  const queries = dns.promises.Resolver.prototype;
  const { resolve4, resolve6 } = queries;
  const refuse = (host: string) => {
    refused.push(host);
    return Object.assign(new Error(`fuzz harness: ${host} is not loopback`), { code: 'ECONNREFUSED' });
  };

  net.Socket.prototype.connect = function guarded(this: net.Socket, ...args: unknown[]) {
    // net.connect hands over [options, callback] as one normalised array; callers may also pass (port, host).
    const first = Array.isArray(args[0]) ? (args[0] as unknown[])[0] : args[0];
    let host: string | undefined;
    let ipcPath = false;
    if (typeof first === 'object' && first !== null) {
      const o = first as { host?: string; path?: string };
      ipcPath = typeof o.path === 'string' && o.path !== '';
      host = o.host ?? 'localhost';
    } else if (typeof first === 'string' && !/^\d+$/.test(first)) ipcPath = true;
    else host = typeof args[1] === 'string' ? args[1] : 'localhost';
    const bare = (host ?? '').replace(/^\[|\]$/g, '');
    if (!ipcPath && !LOOPBACK.test(bare)) {
      const error = refuse(bare);
      process.nextTick(() => this.destroy(error));
      return this;
    }
    return connect.apply(this, args as Parameters<typeof connect>);
  } as typeof connect;

  dns.lookup = function guardedLookup(hostname: string, ...rest: unknown[]) {
    const callback = rest[rest.length - 1] as (err: Error | null) => void;
    if (!LOOPBACK.test(hostname) && !net.isIP(hostname)) {
      const error = Object.assign(refuse(hostname), { code: 'ENOTFOUND' });
      process.nextTick(() => callback(error));
      return undefined as unknown as ReturnType<typeof lookup>;
    }
    return (lookup as (...a: unknown[]) => unknown)(hostname, ...rest);
  } as typeof lookup;
  dns.promises.lookup = (async (hostname: string, ...rest: unknown[]) => {
    if (!LOOPBACK.test(hostname) && !net.isIP(hostname)) throw Object.assign(refuse(hostname), { code: 'ENOTFOUND' });
    return (promisesLookup as (...a: unknown[]) => Promise<unknown>)(hostname, ...rest);
  }) as typeof promisesLookup;
  const guardedQuery = (query: typeof resolve4) =>
    async function guardedQuery(this: dns.promises.Resolver, hostname: string, ...rest: unknown[]) {
      if (!LOOPBACK.test(hostname)) throw Object.assign(refuse(hostname), { code: 'ENOTFOUND' });
      return (query as (...a: unknown[]) => Promise<unknown>).call(this, hostname, ...rest);
    } as typeof query;
  queries.resolve4 = guardedQuery(resolve4);
  queries.resolve6 = guardedQuery(resolve6);
  syncBuiltinESMExports();

  return {
    refused,
    restore() {
      net.Socket.prototype.connect = connect;
      dns.lookup = lookup;
      dns.promises.lookup = promisesLookup;
      queries.resolve4 = resolve4;
      queries.resolve6 = resolve6;
      syncBuiltinESMExports();
    },
  };
}
