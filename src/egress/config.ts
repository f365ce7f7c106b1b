import type { Config } from '../config/config.js';
import { ConfigError } from '../config/config.js';
import { EgressPolicy } from './policy.js';

/** The outbound address policy of this process, from `svc.egress.deny-private` and `svc.egress.allow`. */
export function egressPolicy(config: Config): EgressPolicy {
  const allow = (config.optional('svc.egress.allow') ?? '').split(',').map((s) => s.trim()).filter(Boolean);
  try {
    return new EgressPolicy({ denyPrivate: config.bool('svc.egress.deny-private'), allow });
  } catch (err) {
    throw ConfigError.of('svc.egress.allow', (err as Error).message);
  }
}
