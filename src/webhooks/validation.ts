import { type EgressPolicy, unconnectablePort } from '../egress/policy.js';
import { ValidationError } from '../errors.js';
import { LABEL_NAME_MAX } from '../validation/names.js';

/**
 * Checks of integration fields beyond their JSON Schema, each naming the field it refuses
 * (docs/integrations.md lists them).
 */

export const NAME_MAX = LABEL_NAME_MAX;
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

/**
 * `targetUrl`: an absolute `http:` or `https:` URL with a host. Refused: other schemes (`ftp:`,
 * `file:`, `javascript:`, …), relative or unparsable text, credentials in the URL (`user:pass@`: use
 * the integration's secret), a `#fragment` (never sent), port 0 (no connection reaches it), more
 * than URL_MAX characters, and hosts
 * the outbound address policy refuses without resolving a name (IP literals in any spelling,
 * `localhost`, metadata names); a name is checked again, resolved, at every delivery.
 */
export function normalizeTargetUrl(value: string, egress?: EgressPolicy): string {
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
  const port = unconnectablePort(url);
  if (port) throw new ValidationError(`targetUrl: ${port}`, field);
  const refused = egress?.refusal(url.hostname);
  if (refused) throw new ValidationError(`targetUrl: ${refused.message}`, field);
  return text;
}

/**
 * A `BEARER` secret travels as the `Authorization: Bearer <secret>` header, one byte per character:
 * it may hold printable ASCII and Latin-1 only (U+0020–U+007E, U+00A0–U+00FF). A line break, another
 * control character (tab included) or a character past U+00FF cannot be sent (the HTTP client refused
 * every delivery with `invalid Authorization header`). Returns which kind of character the secret
 * holds, never the secret itself; undefined for a sendable one.
 */
export function unsendableBearerSecret(secret: string): string | undefined {
  const bad = /[^\x20-\x7e\xa0-\xff]/.exec(secret);
  if (!bad) return undefined;
  const code = bad[0].codePointAt(0)!;
  return code === 0x0a || code === 0x0d ? 'a line break' : code > 0xff ? 'a character outside Latin-1' : 'a control character';
}

export const BEARER_SECRET_RULE =
  'a BEARER secret is sent as the HTTP header Authorization: Bearer <secret>, so it may hold only printable ASCII or Latin-1 characters (no line breaks or other control characters)';
