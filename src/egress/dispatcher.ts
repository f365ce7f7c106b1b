import { Agent, buildConnector, errors } from 'undici';
import type { EgressPolicy } from './policy.js';

export type Connector = buildConnector.connector;

/**
 * Wraps an undici connector so that every connection passes the policy first: the host (name or
 * IP literal) is admitted (resolved and checked) before the connector is called, and the connector
 * is given the checked address, so a refused destination never sees a packet and a name is never
 * resolved twice. TLS keeps the original name for SNI and certificate checks (`host` is unchanged).
 *
 * The name is resolved here, before undici's connector and so outside its connect timeout: the
 * resolution and the connection together are held to `timeoutMs` (a name whose DNS server does not
 * answer fails as undici's own connect timeout does, UND_ERR_CONNECT_TIMEOUT, instead of holding the
 * request for as long as the system resolver keeps trying).
 */
export function guardConnector(policy: EgressPolicy, connector: Connector, timeoutMs = DEFAULT_CONNECT_TIMEOUT_MS): Connector {
  if (!policy.denyPrivate) return connector;
  return (options, callback) => {
    let settled = false;
    const finish: Parameters<Connector>[1] = (err, socket) => {
      if (settled) {
        socket?.destroy(); // connected after the time was up: nobody waits for it
        return;
      }
      settled = true;
      clearTimeout(timer);
      if (err) callback(err, null);
      else callback(null, socket!);
    };
    const timer = setTimeout(
      () => finish(new errors.ConnectTimeoutError(`Connect Timeout Error (attempted address: ${options.hostname}:${options.port}, timeout: ${timeoutMs}ms)`), null),
      timeoutMs,
    );
    policy.admit(options.hostname).then(
      (address) => {
        if (!settled) connector({ ...options, hostname: address }, finish);
      },
      (err: Error) => finish(err, null),
    );
  };
}

/** undici's own default connect timeout. */
const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;
/** How long undici keeps an idle connection whose answers named no Keep-Alive timeout (its own default). */
const IDLE_WITHOUT_HINT_MS = 4_000;

export interface EgressAgentOptions extends Omit<Agent.Options, 'connect' | 'keepAliveTimeout' | 'keepAliveMaxTimeout'> {
  /** Connect timeout in milliseconds (default 10 s). */
  connectTimeoutMs?: number;
  /**
   * The longest a connection stays open unused, whatever the other side's `Keep-Alive: timeout=`
   * asks (undici keeps it as long as that says, up to 10 minutes, unless bounded); one whose answers
   * name no timeout, 4 s (or this, when shorter). Default: undici's.
   */
  idleTimeoutMs?: number;
  /** The connector to guard (default: undici's own); tests pass one that counts calls. */
  connector?: Connector;
}

/**
 * The dispatcher every request made on a tenant's behalf goes through: an undici Agent whose
 * connections pass the outbound address policy. Pass it as `dispatcher` to undici's `request` or
 * `fetch`.
 */
export function egressAgent(policy: EgressPolicy, options: EgressAgentOptions = {}): Agent {
  const { connectTimeoutMs, connector, idleTimeoutMs, ...agent } = options;
  const timeout = connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
  const base = connector ?? buildConnector({ timeout });
  const idle = idleTimeoutMs === undefined ? {} : { keepAliveTimeout: Math.min(IDLE_WITHOUT_HINT_MS, idleTimeoutMs), keepAliveMaxTimeout: idleTimeoutMs };
  return new Agent({ ...agent, ...idle, connect: guardConnector(policy, base, timeout) });
}
