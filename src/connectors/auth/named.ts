import { registerOperationSecret } from '../../observability/logger.js';
import type { ConnectorSpec, EndpointSpec } from '../types.js';
import { type EnvLookup, templateNames } from './template.js';
import type { CredentialResolver } from './types.js';

/**
 * Resolves, once per read and before any request, every name the connector's headers and the
 * endpoint's body or variables refer to (`value_env`, `{{env:NAME}}`, a SOAP session's `token_env`) through the same resolver as
 * the auth `*_env` credentials, and answers a lookup of the results. Each value is registered with
 * the log scrubber for the current run, as a credential is.
 */
export async function resolveNamedValues(connector: ConnectorSpec, endpoint: EndpointSpec, resolve: CredentialResolver): Promise<EnvLookup> {
  const names = new Set<string>();
  for (const header of connector.headers ?? []) {
    if (header.value_env !== undefined) names.add(header.value_env);
    else if (header.value !== undefined) templateNames(header.value, names);
  }
  if (endpoint.soap?.session) names.add(endpoint.soap.session.token_env);
  if (endpoint.graphql) templateNames(endpoint.variables ?? {}, names);
  else if (endpoint.body !== undefined && ['POST', 'PUT', 'PATCH'].includes(endpoint.method)) templateNames(endpoint.body, names);
  const values = new Map<string, string>();
  for (const name of names) {
    const value = await resolve(name);
    if (value === undefined) continue;
    values.set(name, value);
    // As for the auth credentials: no line this run writes can carry the value.
    registerOperationSecret(value);
  }
  return (name) => values.get(name);
}
