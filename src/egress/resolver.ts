import { Resolver } from 'node:dns/promises';
import { readFileSync, statSync } from 'node:fs';
import { isIP } from 'node:net';

/**
 * How the outbound address policy resolves a tenant's host names: by asking the DNS servers of
 * /etc/resolv.conf directly (node's asynchronous DNS client, c-ares), after /etc/hosts, with the
 * search list and `ndots` of /etc/resolv.conf applied as the system resolver applies them.
 *
 * Not the system resolver (`dns.lookup`, getaddrinfo): that one runs on libuv's thread pool, four
 * threads this whole process shares with file access and new database connections, and holds a
 * thread for as long as a DNS server keeps it waiting (5 s × 2 tries by default, more with a search
 * list). A tenant whose names a DNS server of its own never answers could then hold every thread,
 * and every other tenant's next connection (and the hub's own file reads) would wait behind it. Here
 * a query that gets no answer holds a socket's timer, nothing shared, and gives up after `timeoutMs`
 * per try.
 *
 * Other name services of the system's configuration (nsswitch: LDAP, mDNS) are not asked; a host
 * known only there can be reached through `svc.egress.allow` by name (an allow-listed name is
 * connected to as it is, through the system resolver).
 */

export interface ResolvedAddress {
  address: string;
  family: number;
}

export interface NameResolverOptions {
  /** The hosts file (default /etc/hosts). */
  hostsFile?: string;
  /** The resolver configuration whose `search`, `domain` and `options ndots:` apply (default /etc/resolv.conf). */
  resolvConf?: string;
  /** DNS servers to ask (`127.0.0.1:5353`); default: the ones of /etc/resolv.conf. */
  servers?: string[];
  /** How long one try of one query waits for an answer (default 2,000 ms). */
  timeoutMs?: number;
  /** Tries per query (default 2). */
  tries?: number;
  /** How long a read of the two files is trusted before their modification times are compared again (default 1,000 ms). */
  recheckMs?: number;
}

/** Codes of a DNS answer that says the name (or this record type of it) does not exist: the next candidate name is tried. */
const ABSENT = new Set(['ENOTFOUND', 'ENODATA', 'ENONAME', 'EBADNAME', 'EBADQUERY']);

interface FileCache<T> {
  checkedAt: number;
  mtimeMs: number;
  value: T;
}

interface SearchConfig {
  search: string[];
  ndots: number;
}

export class NameResolver {
  private readonly resolver: Resolver;
  private readonly hostsFile: string;
  private readonly resolvConf: string;
  private readonly recheckMs: number;
  private hosts: FileCache<Map<string, ResolvedAddress[]>> | undefined;
  private searchConfig: FileCache<SearchConfig> | undefined;

  constructor(options: NameResolverOptions = {}) {
    this.resolver = new Resolver({ timeout: options.timeoutMs ?? 2_000, tries: options.tries ?? 2 });
    if (options.servers) this.resolver.setServers(options.servers);
    this.hostsFile = options.hostsFile ?? '/etc/hosts';
    this.resolvConf = options.resolvConf ?? '/etc/resolv.conf';
    this.recheckMs = options.recheckMs ?? 1_000;
  }

  /**
   * The addresses of `name` (lower case, no trailing dot; `absolute` when it was written with one,
   * so that no search domain is appended), IPv4 ones first. Rejects with ENOTFOUND when no
   * candidate name has an address, or with the DNS client's error (ETIMEOUT, ESERVFAIL,
   * ECONNREFUSED) when a candidate could not be answered and none was found.
   */
  async resolve(name: string, absolute = false): Promise<ResolvedAddress[]> {
    const known = this.hostsTable().get(name);
    if (known) return known;
    let failure: NodeJS.ErrnoException | undefined;
    for (const candidate of this.candidates(name, absolute)) {
      const [v4, v6] = await Promise.allSettled([this.resolver.resolve4(candidate), this.resolver.resolve6(candidate)]);
      const found: ResolvedAddress[] = [];
      for (const [answer, family] of [[v4, 4], [v6, 6]] as const) {
        if (answer.status === 'fulfilled') for (const address of answer.value) found.push({ address, family });
        else if (!ABSENT.has((answer.reason as NodeJS.ErrnoException).code ?? '')) failure ??= answer.reason as NodeJS.ErrnoException;
      }
      if (found.length > 0) return found;
    }
    if (failure) throw Object.assign(new Error(`${name} could not be resolved: ${failure.code ?? failure.message}`), { code: failure.code ?? 'EAI_AGAIN' });
    throw Object.assign(new Error(`${name} is not a known host name`), { code: 'ENOTFOUND' });
  }

  /** The names to ask for, in order, as the system resolver tries them (resolv(5): `ndots`, `search`). */
  candidates(name: string, absolute: boolean): string[] {
    if (absolute) return [name];
    const { search, ndots } = this.searchTable();
    const searched = search.map((domain) => `${name}.${domain}`);
    const dots = name.split('.').length - 1;
    return dots >= ndots ? [name, ...searched] : [...searched, name];
  }

  private hostsTable(): Map<string, ResolvedAddress[]> {
    this.hosts = fresh(this.hostsFile, this.hosts, parseHosts, this.recheckMs);
    return this.hosts.value;
  }

  private searchTable(): SearchConfig {
    this.searchConfig = fresh(this.resolvConf, this.searchConfig, parseResolvConf, this.recheckMs);
    return this.searchConfig.value;
  }
}

/** The cached contents of `file`, read again when it changed (checked at most every `recheckMs`); an unreadable file reads as empty text. */
function fresh<T>(file: string, cached: FileCache<T> | undefined, parse: (text: string) => T, recheckMs: number): FileCache<T> {
  const now = Date.now();
  if (cached && now - cached.checkedAt < recheckMs) return cached;
  let mtimeMs = -1;
  try {
    mtimeMs = statSync(file).mtimeMs;
  } catch {
    // no such file: nothing is known from it
  }
  if (cached && cached.mtimeMs === mtimeMs) {
    cached.checkedAt = now;
    return cached;
  }
  let text = '';
  try {
    if (mtimeMs >= 0) text = readFileSync(file, 'utf8');
  } catch {
    // unreadable: as if empty
  }
  return { checkedAt: now, mtimeMs, value: parse(text) };
}

/** hosts(5): an address, then its names; `#` starts a comment. Names are matched in lower case without a trailing dot. */
export function parseHosts(text: string): Map<string, ResolvedAddress[]> {
  const table = new Map<string, ResolvedAddress[]>();
  for (const line of text.split('\n')) {
    const [address, ...names] = line.replace(/#.*/, '').trim().split(/\s+/);
    const plain = address?.replace(/%.*$/, '') ?? '';
    const family = isIP(plain);
    if (family === 0) continue;
    for (const raw of names) {
      const name = raw.toLowerCase().replace(/\.+$/, '');
      if (!name) continue;
      const list = table.get(name) ?? [];
      if (!list.some((known) => known.address === plain)) list.push({ address: plain, family });
      table.set(name, list);
    }
  }
  for (const list of table.values()) list.sort((a, b) => a.family - b.family);
  return table;
}

/** resolv.conf(5): the last `search` or `domain` line gives the search list; `options ndots:N` (default 1, at most 15). */
export function parseResolvConf(text: string): SearchConfig {
  let search: string[] = [];
  let ndots = 1;
  for (const line of text.split('\n')) {
    const [keyword, ...values] = line.replace(/[#;].*/, '').trim().split(/\s+/);
    if (keyword === 'search' || keyword === 'domain') {
      search = values.map((domain) => domain.toLowerCase().replace(/\.+$/, '')).filter((domain) => domain !== '');
      if (keyword === 'domain') search = search.slice(0, 1);
    } else if (keyword === 'options') {
      for (const option of values) {
        const match = /^ndots:(\d+)$/.exec(option);
        if (match) ndots = Math.min(15, Number(match[1]));
      }
    }
  }
  return { search, ndots };
}
