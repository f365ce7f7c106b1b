/**
 * How a stored connector's inline credentials are shown: one place for the store's answers and for
 * `svc diff`, which compares a file with the stored manifest as shown.
 */
import { KNOWN_TOKEN, redactQueryCredentials } from '../auth/stated-credentials.js';
import { withoutTemplates } from '../auth/template.js';
import { maskUserinfo } from '../../observability/url-redaction.js';
import { statesCredential } from './validate.js';

/** What an inline credential reads as in a returned manifest. */
export const REDACTED = '[REDACTED]';

export type Headers = Array<{ name?: unknown; value?: unknown }> | undefined;

export function redactHeaders(headers: Headers): Headers {
  return headers?.map((h) => (typeof h?.name === 'string' && typeof h.value === 'string' && statesCredential(h.name, h.value) ? { ...h, value: REDACTED } : h));
}

/** A stored base_url as shown: one stored before apply refused credentials and a query in it, with those masked. */
export const shownBaseUrl = (url: string) => redactQueryCredentials(maskUserinfo(url));

/** A well-known key or a JWT (KNOWN_TOKEN) and the token characters that follow its prefix, everywhere in a text. */
const KNOWN_TOKEN_RUN = new RegExp(`${KNOWN_TOKEN.source}[\\w.-]*`, 'g');

/**
 * A text with each well-known key or JWT it states (dev profile only: apply refuses one elsewhere)
 * written `[REDACTED]`, judged as apply judges it (its `{{env:NAME}}` templates taken out); the whole
 * text when a template splits the key (`sk_live_{{env:T}}abc…`).
 */
function redactTokensIn(text: string): string {
  if (!KNOWN_TOKEN.test(withoutTemplates(text))) return text;
  const redacted = text.replace(KNOWN_TOKEN_RUN, REDACTED);
  return KNOWN_TOKEN.test(withoutTemplates(redacted)) ? REDACTED : redacted;
}

/** A body template or GraphQL variables with every key and value redactTokensIn'd, at any depth. */
function redactTokens(value: unknown): unknown {
  if (typeof value === 'string') return redactTokensIn(value);
  if (Array.isArray(value)) return value.map(redactTokens);
  if (value && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [redactTokensIn(k), redactTokens(v)]));
  return value;
}

type ShownEndpoint = { path?: unknown; body?: unknown; variables?: unknown; soap?: unknown };

/**
 * Endpoints as shown: each credential their path's query states, and each well-known key or JWT
 * their body, GraphQL variables, SOAP body or SOAP session header states (dev profile only), written
 * `[REDACTED]`. The manifest's endpoints and the normalised spec's name these fields alike.
 */
export function redactEndpoints<E extends ShownEndpoint>(endpoints: E[]): E[] {
  return endpoints.map((e) => {
    if (!e || typeof e !== 'object') return e;
    const shown: ShownEndpoint = { ...e };
    if (typeof e.path === 'string') shown.path = redactQueryCredentials(e.path);
    if (e.body !== undefined) shown.body = redactTokens(e.body);
    if (e.variables !== undefined) shown.variables = redactTokens(e.variables);
    const soap = e.soap as { body?: unknown; session?: { header?: unknown } } | undefined;
    if (soap && typeof soap === 'object') {
      shown.soap = {
        ...soap,
        ...(typeof soap.body === 'string' && { body: redactTokensIn(soap.body) }),
        ...(soap.session && typeof soap.session === 'object' && typeof soap.session.header === 'string' && { session: { ...soap.session, header: redactTokensIn(soap.session.header) } }),
      };
    }
    return shown as E;
  });
}

/**
 * A connector manifest as the hub shows it (`GET /api/connectors/{name}`): inline credential values
 * (a dev-profile `token_value`, a literal credential header, a credential in an endpoint's query,
 * a well-known key or JWT in a body, GraphQL variables or a SOAP body or session header)
 * written `[REDACTED]`, credentials in base_url masked. Also what `svc diff` makes of a file's
 * manifest before comparing it with the stored one.
 */
export function redactManifest(manifest: unknown): unknown {
  const m = manifest as { spec?: { base_url?: unknown; auth?: Record<string, unknown>; headers?: Headers; endpoints?: unknown } } | null;
  if (!m || typeof m !== 'object' || !m.spec || typeof m.spec !== 'object') return manifest;
  const spec = { ...m.spec };
  if (typeof spec.base_url === 'string') spec.base_url = shownBaseUrl(spec.base_url);
  if (spec.auth && typeof spec.auth === 'object' && spec.auth.token_value !== undefined) spec.auth = { ...spec.auth, token_value: REDACTED };
  if (Array.isArray(spec.headers)) spec.headers = redactHeaders(spec.headers);
  if (Array.isArray(spec.endpoints)) spec.endpoints = redactEndpoints(spec.endpoints as ShownEndpoint[]);
  return { ...m, spec };
}
