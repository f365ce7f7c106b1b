/**
 * How a stored connector's inline credentials are shown: one place for the store's answers and for
 * `svc diff`, which compares a file with the stored manifest as shown.
 */
import { redactQueryCredentials } from '../auth/stated-credentials.js';
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

/** Endpoints with each credential their path's query states (dev profile only) written `[REDACTED]`. */
export function redactPaths<E extends { path?: unknown }>(endpoints: E[]): E[] {
  return endpoints.map((e) => (e && typeof e === 'object' && typeof e.path === 'string' ? { ...e, path: redactQueryCredentials(e.path) } : e));
}

/**
 * A connector manifest as the hub shows it (`GET /api/connectors/{name}`): inline credential values
 * (a dev-profile `token_value`, a literal credential header, a credential in an endpoint's query)
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
  if (Array.isArray(spec.endpoints)) spec.endpoints = redactPaths(spec.endpoints as Array<{ path?: unknown }>);
  return { ...m, spec };
}
