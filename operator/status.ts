import type { CoreV1Api } from '@kubernetes/client-node';
import { APPLY_WARNING_TAIL } from '../src/egress/policy.js';
import type { ManifestKind } from '../src/manifests/kinds.js';
import { loggableMessage } from '../src/observability/database-errors.js';
import { logger } from '../src/observability/logger.js';
import type { Condition, Resource, ResourceStatus } from './resource.js';

/** Conditions on a resource's status, and the Kubernetes Event recorded when Ready changes. */

export const MANAGED_BY = 'svc-hub-operator';

/** A condition stamped `now` (seconds, as Kubernetes writes them). */
export function condition(now: Date, type: string, status: Condition['status'], reason: string, message: string, observedGeneration?: number): Condition {
  return { type, status, reason, message, lastTransitionTime: now.toISOString().replace(/\.\d+Z$/, 'Z'), ...(observedGeneration !== undefined ? { observedGeneration } : {}) };
}

/** Why a resource cannot progress until it changes (or its Namespace, or the hub, does). */
export type StallReason = 'Invalid' | 'TenantUnresolved' | 'Conflict' | 'CronJobConflict' | 'NoRunTemplate' | 'CronJobInvalid';

/**
 * Where a reconcile left a resource, as the three conditions GitOps tools read (kstatus):
 * - `done`: Ready=True, Reconciling=False, Stalled=False;
 * - `stalled`: Ready=False and Stalled=True with the reason, Reconciling=False (not retried);
 * - `retrying`: a temporary failure, retried with backoff: Ready=Unknown and Reconciling=True with
 *   the reason naming the cause, Stalled=False;
 * - `progressing`: written as a reconcile of a new generation starts: Reconciling=True, Ready as
 *   it was (Unknown when there was none), Stalled=False.
 */
export type Health =
  | { state: 'done'; message: string }
  | { state: 'stalled'; reason: StallReason; message: string }
  | { state: 'retrying'; reason: string; message: string }
  | { state: 'progressing'; ready?: Condition };

/** Ready, Reconciling and Stalled for `health` (transition times are the caller's: keepTransitions). */
export function healthConditions(now: Date, generation: number | undefined, health: Health): Condition[] {
  const gen = `generation ${generation ?? '?'}`;
  switch (health.state) {
    case 'done':
      return [
        condition(now, 'Ready', 'True', 'Applied', health.message, generation),
        condition(now, 'Reconciling', 'False', 'Reconciled', `${gen} reconciled`, generation),
        condition(now, 'Stalled', 'False', 'Reconciled', `${gen} reconciled`, generation),
      ];
    case 'stalled':
      return [
        condition(now, 'Ready', 'False', health.reason, health.message, generation),
        condition(now, 'Reconciling', 'False', 'Stalled', `stalled (${health.reason}): not retried until the resource changes`, generation),
        condition(now, 'Stalled', 'True', health.reason, health.message, generation),
      ];
    case 'retrying':
      return [
        condition(now, 'Ready', 'Unknown', health.reason, health.message, generation),
        condition(now, 'Reconciling', 'True', health.reason, `retrying ${gen}: ${health.message}`, generation),
        condition(now, 'Stalled', 'False', 'Retrying', 'a temporary failure: retried with backoff', generation),
      ];
    case 'progressing':
      return [
        health.ready ?? condition(now, 'Ready', 'Unknown', 'Progressing', `reconciling ${gen}`, generation),
        condition(now, 'Reconciling', 'True', 'Progressing', `reconciling ${gen}`, generation),
        condition(now, 'Stalled', 'False', 'Progressing', `reconciling ${gen}`, generation),
      ];
  }
}

const WARNINGS = '; warnings: ';
/** One warning of the outbound address policy in a message: `<field>: <reason>; runs will fail until svc.egress.allow admits it`, with the separator before it. */
const POLICY_WARNING = new RegExp(`(?:^|; )spec\\.[^:;]*: [^;]*${APPLY_WARNING_TAIL.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}(?=; |$)`, 'g');

/**
 * The Ready message of an applied resource: `applied to tenant <code>`, then its warnings, the apply's
 * others (`others`, as written) first and the outbound address policy's last.
 */
export function appliedMessage(tenant: string, others: string, policy: readonly string[]): string {
  const warnings = [...(others ? [others] : []), ...policy].join('; ');
  return `applied to tenant ${tenant}${warnings ? `${WARNINGS}${warnings}` : ''}`;
}

/** What a Ready message adds to the applied message when the schedule cannot run (a CronJob stall reason) or its CronJob write failed (CronJobFailed). */
export const NOT_SCHEDULED = '; not scheduled: ';
export const CRONJOB_NOT_WRITTEN = '; cannot write the CronJob: ';
const SUFFIX_OF: Record<string, string> = { CronJobConflict: NOT_SCHEDULED, NoRunTemplate: NOT_SCHEDULED, CronJobInvalid: NOT_SCHEDULED, CronJobFailed: CRONJOB_NOT_WRITTEN };

/**
 * The `appliedMessage` a Ready condition holds of a resource applied to `tenant`: the message of
 * `Applied`; of a Ready the CronJob left False or Unknown (its reason in SUFFIX_OF), the message
 * before what it says of the CronJob. Undefined for any other Ready (Invalid, Conflict, a failure
 * before the apply …), which holds none.
 */
export function appliedPartOf(ready: Condition | undefined, tenant: string): string | undefined {
  if (!ready) return undefined;
  const suffix = SUFFIX_OF[ready.reason];
  const at = suffix ? ready.message.indexOf(suffix) : -1;
  const message = at >= 0 ? ready.message.slice(0, at) : ready.reason === 'Applied' ? ready.message : undefined;
  const prefix = `applied to tenant ${tenant}`;
  return message !== undefined && (message === prefix || message.startsWith(`${prefix}${WARNINGS}`)) ? message : undefined;
}

/**
 * The warnings of an `appliedMessage` other than the outbound address policy's (which end in
 * APPLY_WARNING_TAIL, wherever they stand): '' when there are none.
 */
export function otherWarnings(message: string): string {
  const at = message.indexOf(WARNINGS);
  return at < 0 ? '' : message.slice(at + WARNINGS.length).replace(POLICY_WARNING, '').replace(/^; /, '');
}

/** `conditions` keeping the previous `lastTransitionTime` of each condition whose status did not change. */
export function keepTransitions(previous: ResourceStatus, conditions: Condition[]): Condition[] {
  return conditions.map((c) => {
    const before = previous.conditions?.find((p) => p.type === c.type);
    return before && before.status === c.status ? { ...c, lastTransitionTime: before.lastTransitionTime } : c;
  });
}

/**
 * A Kubernetes Event when the Ready condition changes (best effort: `kubectl describe` shows it).
 * Not waited for; the promise (never rejected) settles once the API server answered.
 */
export function announce(core: CoreV1Api, now: Date, kind: ManifestKind, resource: Resource, previous: ResourceStatus, next: ResourceStatus): Promise<void> | undefined {
  const before = previous.conditions?.find((c) => c.type === 'Ready');
  const after = next.conditions?.find((c) => c.type === 'Ready');
  if (!after || (before && before.status === after.status && before.reason === after.reason && before.message === after.message)) return undefined;
  return recordEvent(core, now, kind, resource, after.status === 'True' ? 'Normal' : 'Warning', after.reason, after.message);
}

/** A Kubernetes Event on a resource (best effort: a failure to record it is logged at debug; the promise never rejects). */
export function recordEvent(core: CoreV1Api, now: Date, kind: ManifestKind, resource: Resource, type: 'Normal' | 'Warning', reason: string, message: string): Promise<void> {
  const body = {
    metadata: { generateName: `${resource.metadata.name}.`, namespace: resource.metadata.namespace },
    involvedObject: { apiVersion: resource.apiVersion, kind: kind.kind, name: resource.metadata.name, namespace: resource.metadata.namespace, uid: resource.metadata.uid, resourceVersion: resource.metadata.resourceVersion },
    reason,
    message,
    type,
    source: { component: MANAGED_BY },
    firstTimestamp: now,
    lastTimestamp: now,
    count: 1,
  };
  return core.createNamespacedEvent({ namespace: resource.metadata.namespace, body }).then(
    () => undefined,
    (err: unknown) => logger().debug({ err: loggableMessage(err) }, 'cannot record a Kubernetes Event'),
  );
}
