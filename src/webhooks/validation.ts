import { isIP } from 'node:net';
import { ValidationError } from '../errors.js';

/**
 * Checks of integration fields beyond their JSON Schema, each naming the field it refuses
 * (docs/integrations.md lists them).
 */

export const NAME_MAX = 200;
export const URL_MAX = 2048;
export const EVENT_TYPES_MAX = 100;
export const SECRET_MAX = 4096;

/** An exact event type (`org.created`, `decision.dormant.onboarding`) or a prefix pattern (`connector.run.*`). */
const PATTERN = /^[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*(?:\.\*)?$/;

/**
 * `eventTypes`: a non-empty list of exact types or `prefix.*` patterns. A bare `*` (or `.*`), any
 * other wildcard, whitespace or an empty entry is refused; duplicates collapse (first one kept).
 * Types are not checked against the catalog: matching is against the real type at fire time, and
 * `decision.*` types are never catalogued.
 */
export function normalizeEventTypes(value: readonly string[]): string[] {
  const hint = 'e.g. org.created or connector.run.*';
  if (value.length === 0) throw new ValidationError('eventTypes must list at least one event type or prefix.* pattern', 'eventTypes', hint);
  if (value.length > EVENT_TYPES_MAX) throw new ValidationError(`eventTypes: at most ${EVENT_TYPES_MAX} entries`, 'eventTypes');
  const out: string[] = [];
  value.forEach((entry, i) => {
    const field = `eventTypes[${i}]`;
    if (entry === '*' || entry === '.*' || entry === '**') {
      throw new ValidationError(`${field}: a bare * would match every event; name an event type or a prefix.* pattern`, field, hint);
    }
    if (!PATTERN.test(entry)) throw new ValidationError(`${field}: '${entry}' is neither an event type nor a prefix.* pattern`, field, hint);
    if (!out.includes(entry)) out.push(entry);
  });
  return out;
}

export function normalizeName(value: string): string {
  const name = value.trim();
  if (!name) throw new ValidationError('name must not be blank', 'name');
  if (name.length > NAME_MAX) throw new ValidationError(`name: at most ${NAME_MAX} characters`, 'name');
  return name;
}

/**
 * `targetUrl`: an absolute `http:` or `https:` URL with a host. Refused: other schemes (`ftp:`,
 * `file:`, `javascript:`, …), relative or unparsable text, credentials in the URL (`user:pass@`: use
 * the integration's secret), a `#fragment` (never sent), more than URL_MAX characters, and, when
 * `denyPrivate`, hosts that are loopback, private, link-local or otherwise not public addresses.
 */
export function normalizeTargetUrl(value: string, options: { denyPrivate: boolean }): string {
  const text = value.trim();
  const field = 'targetUrl';
  if (!text) throw new ValidationError('targetUrl must not be blank', field);
  if (text.length > URL_MAX) throw new ValidationError(`targetUrl: at most ${URL_MAX} characters`, field);
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new ValidationError('targetUrl must be an absolute http(s) URL', field, 'e.g. https://hooks.example.com/svc');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new ValidationError(`targetUrl must use http or https, not ${url.protocol.replace(/:$/, '')}`, field);
  }
  if (!url.hostname) throw new ValidationError('targetUrl must name a host', field);
  if (url.username || url.password) {
    throw new ValidationError('targetUrl must not carry credentials; set authMode and secret instead', field);
  }
  if (url.hash || text.includes('#')) throw new ValidationError('targetUrl must not carry a #fragment (it is never sent)', field);
  if (options.denyPrivate && isPrivateHost(url.hostname)) {
    throw new ValidationError(`targetUrl: ${url.hostname} is not a public address (svc.webhook.deny-private-targets is on)`, field);
  }
  return text;
}

/** A host name that is, or names, a non-public address (literal IPs and `localhost` only: names are checked again when resolved). */
export function isPrivateHost(hostname: string): boolean {
  const host = hostname.replace(/^\[|\]$/g, '').toLowerCase();
  if (host === 'localhost' || host.endsWith('.localhost')) return true;
  return isIP(host) !== 0 && isPrivateAddress(host);
}

/** Loopback, private, link-local, unique-local, CGNAT, unspecified, multicast and reserved addresses. */
export function isPrivateAddress(address: string): boolean {
  const kind = isIP(address);
  if (kind === 4) return privateV4(address);
  if (kind === 6) {
    const a = address.toLowerCase();
    const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(a);
    if (mapped) return privateV4(mapped[1]!);
    if (a === '::' || a === '::1') return true;
    const first = Number.parseInt(a.split(':')[0] || '0', 16);
    return (first & 0xfe00) === 0xfc00 || (first & 0xffc0) === 0xfe80 || (first & 0xff00) === 0xff00;
  }
  return false;
}

function privateV4(address: string): boolean {
  const [a, b] = address.split('.').map(Number) as [number, number];
  return (
    a === 0 ||
    a === 10 ||
    a === 127 ||
    (a === 100 && b >= 64 && b <= 127) ||
    (a === 169 && b === 254) ||
    (a === 172 && b >= 16 && b <= 31) ||
    (a === 192 && b === 168) ||
    (a === 198 && (b === 18 || b === 19)) ||
    a >= 224
  );
}
