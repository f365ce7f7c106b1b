import { Agent, buildConnector } from 'undici';
import type { EgressPolicy } from './policy.js';

export type Connector = buildConnector.connector;

/**
 * Wraps an undici connector so that every connection passes the policy first: the host (name or
 * IP literal) is admitted (resolved and checked) before the connector is called, and the connector
 * is given the checked address, so a refused destination never sees a packet and a name is never
 * resolved twice. TLS keeps the original name for SNI and certificate checks (`host` is unchanged).
 */
export function guardConnector(policy: EgressPolicy, connector: Connector): Connector {
  if (!policy.denyPrivate) return connector;
  return (options, callback) => {
    policy.admit(options.hostname).then(
      (address) => connector({ ...options, hostname: address }, callback),
      (err: Error) => callback(err, null),
    );
  };
}

export interface EgressAgentOptions extends Omit<Agent.Options, 'connect'> {
  /** Connect timeout in milliseconds (default 10 s). */
  connectTimeoutMs?: number;
  /** The connector to guard (default: undici's own); tests pass one that counts calls. */
  connector?: Connector;
}

/**
 * The dispatcher every request made on a tenant's behalf goes through: an undici Agent whose
 * connections pass the outbound address policy. Pass it as `dispatcher` to undici's `request` or
 * `fetch`.
 */
export function egressAgent(policy: EgressPolicy, options: EgressAgentOptions = {}): Agent {
  const { connectTimeoutMs, connector, ...agent } = options;
  const base = connector ?? buildConnector({ timeout: connectTimeoutMs ?? 10_000 });
  return new Agent({ ...agent, connect: guardConnector(policy, base) });
}
