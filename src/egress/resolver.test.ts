import dgram from 'node:dgram';
import { mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { EgressPolicy } from './policy.js';
import { NameResolver, parseHosts, parseResolvConf } from './resolver.js';

/**
 * The outbound address policy's resolver against real DNS servers on loopback (UDP, the wire
 * format by hand): one that answers from a table (NXDOMAIN for the rest) and one that never
 * answers (a DNS server of a hostile tenant's domain).
 */

interface DnsServer {
  address: string;
  asked: string[];
  close(): Promise<void>;
}

const A = 1;
const AAAA = 28;

async function dnsServer(table: Record<string, { a?: string[]; aaaa?: string[] }> | 'black hole'): Promise<DnsServer> {
  const socket = dgram.createSocket('udp4');
  const asked: string[] = [];
  socket.on('message', (query, peer) => {
    let offset = 12;
    const labels: string[] = [];
    while (query[offset]! > 0) {
      labels.push(query.subarray(offset + 1, offset + 1 + query[offset]!).toString('ascii'));
      offset += query[offset]! + 1;
    }
    const name = labels.join('.').toLowerCase();
    const type = query.readUInt16BE(offset + 1);
    const questionEnd = offset + 5;
    asked.push(`${name} ${type === A ? 'A' : type === AAAA ? 'AAAA' : type}`);
    if (table === 'black hole') return;
    const entry = table[name];
    const values = entry ? ((type === A ? entry.a : type === AAAA ? entry.aaaa : undefined) ?? []) : [];
    const header = Buffer.alloc(12);
    header.writeUInt16BE(query.readUInt16BE(0), 0);
    header.writeUInt16BE(0x8180 | (entry ? 0 : 3), 2); // a response, recursion desired and available; NXDOMAIN for an unknown name
    header.writeUInt16BE(1, 4);
    header.writeUInt16BE(values.length, 6);
    const answers = values.map((value) => {
      const data = type === A ? Buffer.from(value.split('.').map(Number)) : ipv6Bytes(value);
      const record = Buffer.alloc(12);
      record.writeUInt16BE(0xc00c, 0); // the question's name
      record.writeUInt16BE(type, 2);
      record.writeUInt16BE(1, 4);
      record.writeUInt32BE(60, 6);
      record.writeUInt16BE(data.length, 10);
      return Buffer.concat([record, data]);
    });
    socket.send(Buffer.concat([header, query.subarray(12, questionEnd), ...answers]), peer.port, peer.address);
  });
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
  return {
    address: `127.0.0.1:${socket.address().port}`,
    asked,
    close: () => new Promise<void>((resolve) => socket.close(() => resolve())),
  };
}

function ipv6Bytes(address: string): Buffer {
  const [head, tail] = address.split('::') as [string, string | undefined];
  const h = head ? head.split(':') : [];
  const t = tail ? tail.split(':') : [];
  const groups = [...h, ...Array<string>(8 - h.length - t.length).fill('0'), ...t];
  const bytes = Buffer.alloc(16);
  for (const [i, group] of groups.entries()) bytes.writeUInt16BE(Number.parseInt(group, 16), i * 2);
  return bytes;
}

let dir: string;
let answering: DnsServer;
let silent: DnsServer;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'svc-resolver-'));
  writeFileSync(join(dir, 'hosts'), '127.0.0.1 localhost\n203.0.113.9 files.example.test # listed here only\n');
  writeFileSync(join(dir, 'resolv.conf'), 'nameserver 127.0.0.1\nsearch team-a.svc.cluster.local svc.cluster.local\noptions ndots:5 timeout:1\n');
  writeFileSync(join(dir, 'plain.conf'), 'nameserver 127.0.0.1\n');
  answering = await dnsServer({
    'hooks.example.test': { a: ['93.184.216.34'], aaaa: ['2606:2800:220:1::1946'] },
    'v6only.example.test': { aaaa: ['2606:2800:220:1::7'] },
    'internal.example.test': { a: ['10.0.0.5'] },
    'receiver.svc.cluster.local': { a: ['198.51.100.20'] },
    'receiver.team-a': { a: ['192.0.2.99'] },
  });
  silent = await dnsServer('black hole');
});

afterAll(async () => {
  await answering.close();
  await silent.close();
  rmSync(dir, { recursive: true, force: true });
});

const resolver = (server: DnsServer, conf = 'plain.conf', timeoutMs = 2_000) =>
  new NameResolver({ servers: [server.address], hostsFile: join(dir, 'hosts'), resolvConf: join(dir, conf), timeoutMs, tries: 1 });

describe('NameResolver', () => {
  it('asks the DNS servers it is given, A and AAAA, IPv4 first', async () => {
    answering.asked.length = 0;
    await expect(resolver(answering).resolve('hooks.example.test')).resolves.toEqual([
      { address: '93.184.216.34', family: 4 },
      { address: '2606:2800:220:1::1946', family: 6 },
    ]);
    expect(answering.asked.sort()).toEqual(['hooks.example.test A', 'hooks.example.test AAAA']);
    await expect(resolver(answering).resolve('v6only.example.test')).resolves.toEqual([{ address: '2606:2800:220:1::7', family: 6 }]);
    await expect(resolver(answering).resolve('nowhere.example.test')).rejects.toMatchObject({ code: 'ENOTFOUND' });
  });

  it('answers a name of the hosts file from it, without a query', async () => {
    answering.asked.length = 0;
    await expect(resolver(answering).resolve('files.example.test')).resolves.toEqual([{ address: '203.0.113.9', family: 4 }]);
    expect(answering.asked).toEqual([]);
  });

  it('applies the search list and ndots as the system resolver does; a trailing dot asks for the name alone', async () => {
    answering.asked.length = 0;
    await expect(resolver(answering, 'resolv.conf').resolve('receiver')).resolves.toEqual([{ address: '198.51.100.20', family: 4 }]);
    // Fewer dots than ndots: the search domains first, in order, until one has an address.
    expect([...new Set(answering.asked.map((q) => q.split(' ')[0]))]).toEqual(['receiver.team-a.svc.cluster.local', 'receiver.svc.cluster.local']);

    answering.asked.length = 0;
    await expect(resolver(answering, 'resolv.conf').resolve('receiver', true)).rejects.toMatchObject({ code: 'ENOTFOUND' });
    expect([...new Set(answering.asked.map((q) => q.split(' ')[0]))]).toEqual(['receiver']);

    // As many dots as ndots or more: the name itself first.
    const r = resolver(answering, 'resolv.conf');
    expect(r.candidates('a.b.c.d.e.f', false)).toEqual(['a.b.c.d.e.f', 'a.b.c.d.e.f.team-a.svc.cluster.local', 'a.b.c.d.e.f.svc.cluster.local']);
    expect(r.candidates('receiver.team-a', false)).toEqual(['receiver.team-a.team-a.svc.cluster.local', 'receiver.team-a.svc.cluster.local', 'receiver.team-a']);
  });

  it('a DNS server that never answers holds no thread: many such names at once leave the thread pool free, and each fails after its timeout', async () => {
    const hostile = resolver(silent, 'plain.conf', 1_500);
    const started = Date.now();
    // More than libuv's four pool threads: through the system resolver, these would hold all of them.
    const pending = Array.from({ length: 12 }, (_, i) => hostile.resolve(`n${i}.slow.example.test`).then(
      () => 'resolved',
      (err: NodeJS.ErrnoException) => err.code,
    ));
    const file = join(dir, 'hosts');
    for (let i = 0; i < 8; i++) await readFile(file); // file reads run on the pool
    expect(Date.now() - started).toBeLessThan(1_000);
    const codes = await Promise.all(pending);
    expect(new Set(codes)).toEqual(new Set(['ETIMEOUT']));
    expect(silent.asked.length).toBeGreaterThanOrEqual(12);
  });

  it('reads the hosts file again when it changes', async () => {
    const file = join(dir, 'hosts-changing');
    writeFileSync(file, '192.0.2.1 moving.example.test\n');
    utimesSync(file, 1_000, 1_000);
    const r = new NameResolver({ servers: [answering.address], hostsFile: file, resolvConf: join(dir, 'plain.conf'), tries: 1, recheckMs: 0 });
    await expect(r.resolve('moving.example.test')).resolves.toEqual([{ address: '192.0.2.1', family: 4 }]);
    writeFileSync(file, `${readFileSync(file, 'utf8')}192.0.2.2 moving.example.test\n`);
    utimesSync(file, 2_000, 2_000);
    await expect(r.resolve('moving.example.test')).resolves.toEqual([{ address: '192.0.2.1', family: 4 }, { address: '192.0.2.2', family: 4 }]);
  });
});

describe('the policy resolves through it', () => {
  const policy = () => new EgressPolicy({ denyPrivate: true, resolver: { servers: [answering.address], hostsFile: join(dir, 'hosts'), resolvConf: join(dir, 'plain.conf'), tries: 1 } });

  it('admits a name by the address its DNS server gives, and checks every address given', async () => {
    await expect(policy().admit('hooks.example.test')).resolves.toBe('93.184.216.34');
    await expect(policy().admit('HOOKS.example.test.')).resolves.toBe('93.184.216.34');
    await expect(policy().admit('internal.example.test')).rejects.toMatchObject({ code: 'EGRESS_DENIED', address: '10.0.0.5' });
  });
});

describe('file formats', () => {
  it('hosts(5): comments, several names, scoped addresses, IPv4 first', () => {
    const table = parseHosts('# comment\n::1 ip6-localhost\n10.1.2.3  Box.Example.  box # trailing\n fe80::1%eth0 box\nnot-an-address name\n');
    expect(table.get('box.example')).toEqual([{ address: '10.1.2.3', family: 4 }]);
    expect(table.get('box')).toEqual([{ address: '10.1.2.3', family: 4 }, { address: 'fe80::1', family: 6 }]);
    expect(table.has('name')).toBe(false);
  });

  it('resolv.conf(5): the last search or domain line, ndots capped at 15', () => {
    expect(parseResolvConf('search a.example b.example.\noptions ndots:20 rotate\n')).toEqual({ search: ['a.example', 'b.example'], ndots: 15 });
    expect(parseResolvConf('search a.example\ndomain corp.example\n')).toEqual({ search: ['corp.example'], ndots: 1 });
    expect(parseResolvConf('')).toEqual({ search: [], ndots: 1 });
  });
});
