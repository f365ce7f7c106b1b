import { defaultIdentity, LeaseElector } from '../kube/lease.js';
import type { KubeTarget } from '../kube/kube-config.js';
import { type Config, ConfigError } from '../src/config/config.js';
import { AdvisoryLockElector, ELECTOR_TIMEOUT_MS, type LeaderElector } from '../src/dispatch/leader.js';

/**
 * The leader elector a role runs on (`svc.leader.backend`): a `coordination.k8s.io/v1` Lease in
 * Kubernetes, a PostgreSQL advisory lock elsewhere. Both implement the port of src/dispatch/leader.ts
 * and are driven by `Leadership` every `svc.leader.check-every`.
 */

export interface LeaderElectorOptions {
  /**
   * The Lease name, instead of `svc.leader.lease-name` (the operator passes its own). With the
   * PostgreSQL backend the advisory lock key becomes `svc-hub:<leaseName>`; without it the key stays
   * `svc-hub:dispatch`, the one every dispatcher has always used.
   */
  leaseName?: string;
  /** The environment (tests): KUBERNETES_SERVICE_HOST, POD_NAMESPACE, POD_NAME. Default process.env. */
  env?: NodeJS.ProcessEnv;
  /** The Kubernetes API to use (tests: the stand-in). Default in-cluster, else KUBECONFIG. */
  kube?: KubeTarget;
  /** A Lease's monotonic clock (lease duration, renew deadline: kube/lease.ts). Default performance.now; tests move it by hand. */
  monotonic?: () => number;
}

export type LeaderBackend = 'postgres' | 'kubernetes';

/** `auto` resolved: Kubernetes when the process runs in a pod that knows its namespace. */
export function leaderBackend(config: Config, env: NodeJS.ProcessEnv = process.env): LeaderBackend {
  const chosen = config.string('svc.leader.backend');
  if (chosen === 'postgres' || chosen === 'kubernetes') return chosen;
  return env.KUBERNETES_SERVICE_HOST && env.POD_NAMESPACE ? 'kubernetes' : 'postgres';
}

/**
 * The timing of the election, checked: the renew period must be under the lease duration, and with
 * a Lease (`lease`) well under it: within the renew deadline, with room to spare.
 */
export function leaderTiming(config: Config, lease = true): { checkEvery: number; leaseDurationSeconds: number; renewDeadlineMs: number } {
  const checkEvery = config.duration('svc.leader.check-every');
  const leaseDuration = config.duration('svc.leader.lease-duration');
  if (checkEvery >= leaseDuration) {
    throw new ConfigError(
      'svc.leader.check-every',
      `svc.leader.check-every (SVC_LEADER_CHECK_EVERY, ${checkEvery} ms) must be well under svc.leader.lease-duration (SVC_LEADER_LEASE_DURATION, ${leaseDuration} ms): the leader renews its lease every check, so a period not below the duration lets the lease expire between two renewals`,
    );
  }
  const leaseDurationSeconds = Math.ceil(leaseDuration / 1000);
  // The leader steps down once a whole renew period could pass before a follower sees the Lease expire.
  const renewDeadlineMs = leaseDurationSeconds * 1000 - checkEvery;
  // A renewal past the renew deadline is given up (kube/lease.ts), so renewals a period apart must
  // start well within it: client-go's rule, renew deadline > 1.2 × retry period.
  if (lease && renewDeadlineMs <= 1.2 * checkEvery) {
    throw new ConfigError(
      'svc.leader.check-every',
      `svc.leader.check-every (SVC_LEADER_CHECK_EVERY, ${checkEvery} ms) must be well under svc.leader.lease-duration (SVC_LEADER_LEASE_DURATION, ${leaseDuration} ms): the renew deadline (the duration less one period, ${renewDeadlineMs} ms) must exceed 1.2 periods, or every renewal would come after it and the leadership be given up at every check; take a period below ${Math.floor((leaseDurationSeconds * 1000) / 2.2)} ms`,
    );
  }
  return { checkEvery, leaseDurationSeconds, renewDeadlineMs };
}

const LEASE_NAME = /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/;

export function leaderElector(config: Config, workerUrl: string, opts: LeaderElectorOptions = {}): LeaderElector {
  const env = opts.env ?? process.env;
  const postgres = leaderBackend(config, env) === 'postgres';
  const timing = leaderTiming(config, !postgres);
  const name = opts.leaseName ?? config.string('svc.leader.lease-name');
  if (postgres) {
    return new AdvisoryLockElector(workerUrl, opts.leaseName ? `svc-hub:${opts.leaseName}` : 'svc-hub:dispatch', ELECTOR_TIMEOUT_MS, config.duration('svc.datasource.close-timeout'));
  }
  if (name.length > 253 || !LEASE_NAME.test(name)) {
    throw ConfigError.of('svc.leader.lease-name', `'${name}' is not a valid Lease name (lower-case letters, digits, '-' and '.', at most 253 characters)`);
  }
  const namespace = env.POD_NAMESPACE;
  if (!namespace) {
    throw ConfigError.of('svc.leader.backend', 'leader election through a Kubernetes Lease needs POD_NAMESPACE (the downward API `metadata.namespace`, as the Helm chart sets it)');
  }
  return new LeaseElector({
    name,
    namespace,
    identity: defaultIdentity(env),
    leaseDurationSeconds: timing.leaseDurationSeconds,
    renewDeadlineMs: timing.renewDeadlineMs,
    kube: opts.kube,
    monotonic: opts.monotonic,
  });
}
