import { BlockList, isIP } from 'node:net';
import { NameResolver, type NameResolverOptions } from './resolver.js';

/**
 * The outbound address policy: which destinations a request the hub makes on a tenant's behalf
 * (webhook deliveries and tests, connector runs, pre-flight, draft, scaffold, export publications
 * to S3 and SFTP) and the model endpoints (embeddings, language model) may connect to.
 *
 * With `denyPrivate` on, every connection is checked when it is opened, after the name is resolved,
 * against the address that is actually connected to (so a name that resolves to a public address
 * at validation time and to 127.0.0.1 at delivery time, DNS rebinding, is refused too). Refused:
 * loopback, private (RFC 1918), shared (CGNAT 100.64/10), link-local (metadata 169.254.169.254
 * included), unique-local (fd00:ec2::254 included), unspecified, multicast, reserved, documentation
 * and benchmarking ranges, IPv4-compatible and IPv4-translated IPv6 (::ffff:0:0:0/96), IPv4-mapped
 * IPv6 mapping a refused IPv4 address (BlockList judges ::ffff:a.b.c.d as a.b.c.d, which is where the
 * system connects it to), NAT64 (64:ff9b::/96, 64:ff9b:1::/48), Teredo, 6to4 embedding a
 * refused IPv4, and the names `localhost`, `*.localhost`, metadata.google.internal and metadata.goog (trailing dot
 * or not). Numeric IPv4 spellings (`2130706433`, `0x7f.1`, `0177.0.0.1`) are read as the address
 * they spell. `allow` (CIDRs, addresses and host names, `*.suffix` for a domain) lets chosen
 * destinations through.
 */

export interface EgressOptions {
  denyPrivate: boolean;
  /** CIDRs (`10.20.0.0/16`, `fd12::/16`), single addresses and host names (`hooks.internal`, `*.corp.example`). */
  allow?: readonly string[];
  /**
   * Name resolution (default: a NameResolver, the DNS servers asked directly, never the thread pool's
   * system resolver); tests pass a fixed table. `absolute`: the name was written with a trailing dot.
   */
  resolve?: (hostname: string, absolute: boolean) => Promise<Array<{ address: string; family: number }>>;
  /** The default resolver's settings (tests point it at DNS servers of their own). */
  resolver?: NameResolverOptions;
}

export const EGRESS_DENIED = 'EGRESS_DENIED';

/** A destination the policy refuses; carries no request data, only the host and the address. */
export class EgressDeniedError extends Error {
  readonly code = EGRESS_DENIED;
  constructor(
    readonly host: string,
    readonly address: string | undefined,
    readonly reason: string,
  ) {
    super(
      address && address !== host
        ? `${host} resolves to ${address}, ${reason}: refused by the outbound address policy (svc.egress.deny-private)`
        : `${host} is ${reason}: refused by the outbound address policy (svc.egress.deny-private)`,
    );
    this.name = 'EgressDeniedError';
  }
}

/** The policy's refusal behind a failed request: `err` itself or one of its causes (fetch and the clients above it wrap it), else undefined. */
export function egressDenial(err: unknown): EgressDeniedError | undefined {
  let current: unknown = err;
  for (let depth = 0; depth < 4 && current && typeof current === 'object'; depth++) {
    if ((current as { code?: unknown }).code === EGRESS_DENIED) return current as EgressDeniedError;
    current = (current as { cause?: unknown }).cause;
  }
  return undefined;
}

/** Whether a failed request was refused by the policy (egressDenial finds its refusal). */
export function isEgressDenied(err: unknown): boolean {
  return egressDenial(err) !== undefined;
}

/** What each refused range is called in messages. */
const DENIED: ReadonlyArray<readonly [label: string, ranges: ReadonlyArray<readonly [string, number]>]> = [
  ['a loopback address', [['127.0.0.0', 8], ['::1', 128]]],
  ['an unspecified address', [['0.0.0.0', 8], ['::', 128]]],
  ['a private address', [['10.0.0.0', 8], ['172.16.0.0', 12], ['192.168.0.0', 16], ['100.64.0.0', 10], ['192.0.0.0', 24], ['198.18.0.0', 15]]],
  ['a link-local address', [['169.254.0.0', 16], ['fe80::', 10], ['fec0::', 10]]],
  ['a unique-local address', [['fc00::', 7]]],
  ['a multicast or reserved address', [['224.0.0.0', 4], ['240.0.0.0', 4], ['ff00::', 8], ['100::', 64], ['100:0:0:1::', 64], ['5f00::', 16]]],
  // IANA's special-purpose registries: never a destination on the internet, so a host that answers
  // there is on some network of the hub's own (192.88.99.0/24 is the retired 6to4 relay anycast).
  [
    'a documentation, benchmarking or reserved address',
    [['192.0.2.0', 24], ['198.51.100.0', 24], ['203.0.113.0', 24], ['192.88.99.0', 24], ['2001:db8::', 32], ['3fff::', 20], ['2001:2::', 48], ['2001:10::', 28]],
  ],
  [
    'a translated IPv6 address (NAT64, IPv4-compatible, IPv4-translated or Teredo)',
    [['64:ff9b::', 96], ['64:ff9b:1::', 48], ['::', 96], ['::ffff:0:0:0', 96], ['2001::', 32]],
  ],
];

const DENIED_NAMES = new Set(['localhost', 'metadata.google.internal', 'metadata.goog']);

function family(address: string): 'ipv4' | 'ipv6' {
  return isIP(address) === 6 ? 'ipv6' : 'ipv4';
}

/** A host name of the allow-list: dot-separated labels of letters, digits, '-' and '_' (1 to 63 each, at most 253 in all). */
const HOST_NAME = /^(?=.{1,253}$)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*$/;

/** How every `applyWarning` ends (the operator tells the policy's warnings from an apply's others by it). */
export const APPLY_WARNING_TAIL = '; runs will fail until svc.egress.allow admits it';

export class EgressPolicy {
  readonly denyPrivate: boolean;
  private readonly denied: Array<{ label: string; list: BlockList }>;
  private readonly allowedAddresses = new BlockList();
  private readonly allowedNames: string[] = [];
  private readonly allowedSuffixes: string[] = [];
  private readonly resolveName: NonNullable<EgressOptions['resolve']>;

  constructor(options: EgressOptions) {
    this.denyPrivate = options.denyPrivate;
    // The DNS client is made at the first name to resolve: a policy that is off (or only sees IP
    // literals) never needs one.
    let resolver: NameResolver | undefined;
    this.resolveName =
      options.resolve ??
      ((hostname, absolute) => {
        resolver ??= new NameResolver(options.resolver);
        return resolver.resolve(hostname, absolute);
      });
    this.denied = DENIED.map(([label, ranges]) => {
      const list = new BlockList();
      for (const [net, prefix] of ranges) list.addSubnet(net, prefix, family(net));
      return { label, list };
    });
    for (const raw of options.allow ?? []) {
      const entry = raw.trim().toLowerCase();
      if (!entry) continue;
      const slash = entry.indexOf('/');
      const address = slash < 0 ? entry : entry.slice(0, slash);
      const literal = parseAddress(normaliseHost(address));
      if (literal) {
        const prefix = slash < 0 ? (isIP(literal) === 6 ? 128 : 32) : Number(entry.slice(slash + 1));
        const max = isIP(literal) === 6 ? 128 : 32;
        if (!Number.isInteger(prefix) || prefix < 0 || prefix > max) throw new Error(`${raw} is not a CIDR`);
        this.allowedAddresses.addSubnet(literal, prefix, family(literal));
      } else if (slash >= 0) {
        throw new Error(`${raw} is not a CIDR`);
      } else {
        // A host name (`hooks.internal`), or `*.` and a domain: labels of letters, digits, '-' and
        // '_', none empty; a bare `*` or `foo..bar` allows nothing a resolver could answer for.
        const name = entry.startsWith('*.') ? entry.slice(2) : entry;
        if (!HOST_NAME.test(name.replace(/\.$/, ''))) throw new Error(`${raw} is neither a CIDR, an address nor a host name (hooks.internal, *.corp.example)`);
        if (entry.startsWith('*.')) this.allowedSuffixes.push(normaliseHost(entry.slice(1)));
        else this.allowedNames.push(normaliseHost(entry));
      }
    }
  }

  /** No checks at all (development, tests of other areas). */
  static open(): EgressPolicy {
    return new EgressPolicy({ denyPrivate: false });
  }

  /**
   * The address to connect to for `hostname` (a name or an IP literal, brackets allowed), or an
   * EgressDeniedError. A name is resolved here, every address it resolves to is checked, and the
   * first one is what the connection uses, so nothing resolves it a second time. Allow-listed names
   * are connected to as they are. With the policy off the host is answered unchanged.
   */
  async admit(hostname: string): Promise<string> {
    if (!this.denyPrivate) return stripBrackets(hostname);
    const host = normaliseHost(hostname);
    // An IP literal is judged as an address (the allow-list's CIDRs and addresses), never by the
    // allow-list's names: `*.0.1` names no host, and must not let 127.0.0.1 through.
    const literal = parseAddress(host);
    if (literal) {
      this.checkAddress(hostname, literal);
      return literal;
    }
    if (this.nameAllowed(host)) return host;
    this.checkName(hostname, host);
    const addresses = await this.resolveName(host, hostname.trim().endsWith('.'));
    if (addresses.length === 0) throw Object.assign(new Error(`${host} resolves to no address`), { code: 'ENOTFOUND' });
    for (const { address } of addresses) this.checkAddress(hostname, address);
    return addresses[0]!.address;
  }

  /**
   * The checks that need no name resolution, for refusing a URL when it is stored (an integration's
   * target): IP literals in every spelling and the refused names. Names are checked again when
   * connecting. Answers the refusal, or undefined.
   */
  refusal(hostname: string): EgressDeniedError | undefined {
    if (!this.denyPrivate) return undefined;
    const host = normaliseHost(hostname);
    try {
      const literal = parseAddress(host);
      if (literal) this.checkAddress(hostname, literal);
      else if (!this.nameAllowed(host)) this.checkName(hostname, host);
    } catch (err) {
      if (err instanceof EgressDeniedError) return err;
      throw err;
    }
    return undefined;
  }

  /**
   * The warning an apply answers for an address a manifest stores and the hub will connect to (a
   * connector's base_url, an export's S3 endpoint or SFTP host): `refusal`'s reason, said, not
   * refused, so that a manifest kept in Git does not turn invalid when `svc.egress.allow` changes.
   * Undefined when the policy admits it (or is off); a name is resolved only when connecting.
   */
  applyWarning(hostname: string): string | undefined {
    const refused = this.refusal(hostname);
    return refused && `${refused.message}${APPLY_WARNING_TAIL}`;
  }

  /** Why an address is refused, or undefined when it may be connected to (allow-list applied). */
  reasonFor(address: string): string | undefined {
    const plain = address.replace(/%.*$/, '');
    if (isIP(plain) === 0) return undefined;
    if (this.allowedAddresses.check(plain, family(plain))) return undefined;
    for (const { label, list } of this.denied) if (list.check(plain, family(plain))) return label;
    const sixToFour = embeddedSixToFour(plain);
    if (sixToFour) {
      const inner = this.reasonFor(sixToFour);
      if (inner) return `a 6to4 address embedding ${sixToFour}, ${inner}`;
    }
    return undefined;
  }

  private checkAddress(host: string, address: string): void {
    const reason = this.reasonFor(address);
    if (reason) throw new EgressDeniedError(stripBrackets(host), address, reason);
  }

  private checkName(original: string, host: string): void {
    if (DENIED_NAMES.has(host) || host.endsWith('.localhost')) {
      throw new EgressDeniedError(original, undefined, host.includes('metadata') ? 'a cloud metadata service' : 'a loopback name');
    }
  }

  private nameAllowed(host: string): boolean {
    return this.allowedNames.includes(host) || this.allowedSuffixes.some((suffix) => host.endsWith(suffix));
  }
}

/**
 * Why a URL a tenant gives the hub to connect to (a connector's base_url, a webhook's targetUrl, an
 * export's S3 endpoint, scaffold's openapiUrl) names a port no connection can be opened to, or
 * undefined. Port 0 (`https://example.com:0`, `:00`) is a valid URL but a connection to it fails, so
 * every run or delivery would. Each check that stores or fetches such a URL refuses it, naming its
 * own field; the text is the same everywhere.
 */
export function unconnectablePort(url: URL): string | undefined {
  return url.port === '0' ? 'port 0 cannot be connected to: give the port the service listens on, or none for the scheme\'s default' : undefined;
}

function stripBrackets(host: string): string {
  return host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
}

/** Lower case, no brackets, no trailing dots (`LOCALHOST.` is `localhost`). */
export function normaliseHost(hostname: string): string {
  return stripBrackets(hostname.trim()).toLowerCase().replace(/\.+$/, '');
}

/**
 * An IP literal in any spelling the system resolver would accept, as a plain address: IPv6,
 * dotted IPv4, and the legacy IPv4 forms (one to four parts, each decimal, `0x` hex or `0` octal,
 * the last part filling the remaining bytes: `2130706433`, `0x7f.1`, `0177.0.0.1`).
 */
export function parseAddress(host: string): string | undefined {
  const plain = host.replace(/%.*$/, '');
  if (isIP(plain) !== 0) return plain;
  return legacyIPv4(plain);
}

function legacyIPv4(host: string): string | undefined {
  const parts = host.split('.');
  if (parts.length < 1 || parts.length > 4) return undefined;
  const numbers: number[] = [];
  for (const part of parts) {
    let value: number;
    if (/^0x[0-9a-f]*$/i.test(part)) value = part.length === 2 ? 0 : Number.parseInt(part.slice(2), 16);
    else if (/^0[0-7]+$/.test(part)) value = Number.parseInt(part.slice(1), 8);
    else if (/^(0|[1-9][0-9]*)$/.test(part)) value = Number(part);
    else return undefined;
    numbers.push(value);
  }
  const last = numbers.pop()!;
  if (numbers.some((n) => n > 255) || last >= 256 ** (4 - numbers.length)) return undefined;
  let value = last;
  numbers.forEach((n, i) => {
    value += n * 256 ** (3 - i);
  });
  return [value >>> 24, (value >>> 16) & 255, (value >>> 8) & 255, value & 255].join('.');
}

/** The IPv4 address a 6to4 address (2002:AABB:CCDD::/48) embeds. */
function embeddedSixToFour(address: string): string | undefined {
  if (isIP(address) !== 6) return undefined;
  const groups = expandV6(address);
  if (!groups) return undefined;
  if (groups[0] !== 0x2002) return undefined;
  const [hi, lo] = [groups[1]!, groups[2]!];
  return [hi >> 8, hi & 255, lo >> 8, lo & 255].join('.');
}

function expandV6(address: string): number[] | undefined {
  let text = address.toLowerCase();
  const v4 = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (v4) {
    const [a, b, c, d] = v4[1]!.split('.').map(Number) as [number, number, number, number];
    text = `${text.slice(0, -v4[1]!.length)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = text.split('::') as [string, string | undefined];
  const h = head ? head.split(':') : [];
  const t = tail ? tail.split(':') : [];
  const fill = tail === undefined ? 0 : 8 - h.length - t.length;
  const groups = [...h, ...Array<string>(fill).fill('0'), ...t].map((g) => Number.parseInt(g, 16));
  return groups.length === 8 ? groups : undefined;
}
