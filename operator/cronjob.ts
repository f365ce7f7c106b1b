import { createHash } from 'node:crypto';
import type { BatchV1Api, V1CronJob, V1PodTemplateSpec } from '@kubernetes/client-node';
import { apiStatus } from '../kube/kube-config.js';
import { canonical } from '../src/manifests/canonical.js';
import { apiVersionOf, type ManifestKind } from '../src/manifests/kinds.js';
import { logger } from '../src/observability/logger.js';
import type { Condition, Resource } from './resource.js';
import { condition, MANAGED_BY } from './status.js';
import { TENANT_LABEL } from './tenant.js';

/** A resource's schedule as a CronJob that runs `svc-hub run … --scheduled`, and its Scheduled condition. */

/** The annotation on a CronJob holding the hash of the spec the operator last wrote. */
export const SPEC_HASH = 'svc.io/spec-hash';
/** CronJob names are at most 52 characters (the Job controller appends an 11-character suffix). */
const CRONJOB_NAME_MAX = 52;

/** The pod template of scheduled runs (the chart's run-job ConfigMap), and where it was looked for. */
export interface RunTemplate {
  template?: V1PodTemplateSpec;
  path?: string;
}

/** `<kind>-<name>` in lower case; a name too long for a CronJob is cut and suffixed with a hash. */
export function cronJobName(kind: ManifestKind, name: string): string {
  const full = `${kind.kind.toLowerCase()}-${name}`;
  if (full.length <= CRONJOB_NAME_MAX) return full;
  const hash = createHash('sha256').update(full).digest('hex').slice(0, 8);
  return `${full.slice(0, CRONJOB_NAME_MAX - 9).replace(/-+$/, '')}-${hash}`;
}

/** The Scheduled condition after making the CronJob match `schedule` (undefined: no schedule, no condition). */
export async function syncCronJob(batch: BatchV1Api, now: Date, target: RunTemplate, kind: ManifestKind, resource: Resource, tenantCode: string, schedule: string | null): Promise<Condition | undefined> {
  const name = cronJobName(kind, resource.metadata.name);
  const namespace = resource.metadata.namespace;
  const existing = await batch.readNamespacedCronJob({ name, namespace }).catch((err: unknown) => {
    if (apiStatus(err) === 404) return undefined;
    throw err;
  });
  const owned = existing?.metadata?.ownerReferences?.some((r) => r.uid === resource.metadata.uid) ?? false;
  if (!schedule) {
    if (existing && owned) {
      await batch.deleteNamespacedCronJob({ name, namespace, propagationPolicy: 'Background' }).catch((err: unknown) => {
        if (apiStatus(err) !== 404) throw err;
      });
      logger().info(`CronJob ${namespace}/${name} deleted: ${kind.kind} ${resource.metadata.name} has no schedule`);
    }
    return undefined;
  }
  if (existing && !owned) {
    return condition(now, 'Scheduled', 'False', 'CronJobConflict', `CronJob ${name} exists and is not owned by this ${kind.kind}; delete or rename it`);
  }
  const template = target.template;
  if (!template) {
    return condition(now, 'Scheduled', 'False', 'NoRunTemplate', `no pod template for scheduled runs${target.path ? ` at ${target.path}` : ''} (the Helm chart mounts one): no CronJob`);
  }
  const desired = cronJobFor(kind, resource, tenantCode, schedule, name, template);
  const hash = desired.metadata!.annotations![SPEC_HASH]!;
  if (!existing) {
    await batch.createNamespacedCronJob({ namespace, body: desired });
    logger().info(`CronJob ${namespace}/${name} created: "${schedule}" (Etc/UTC)`);
  } else if (existing.metadata?.annotations?.[SPEC_HASH] !== hash) {
    desired.metadata!.resourceVersion = existing.metadata?.resourceVersion;
    await batch.replaceNamespacedCronJob({ name, namespace, body: desired });
    logger().info(`CronJob ${namespace}/${name} updated: "${schedule}" (Etc/UTC)`);
  }
  return condition(now, 'Scheduled', 'True', 'CronJobReady', `CronJob ${name} runs "${schedule}" (Etc/UTC)`);
}

/** The CronJob of a resource's schedule: `svc-hub run … --scheduled` in the run pod template, owned by the resource. */
export function cronJobFor(kind: ManifestKind, resource: Resource, tenantCode: string, schedule: string, name: string, template: V1PodTemplateSpec): V1CronJob {
  const labels = {
    'app.kubernetes.io/managed-by': MANAGED_BY,
    'app.kubernetes.io/component': 'scheduled-run',
    'svc.io/kind': kind.kind.toLowerCase(),
    'svc.io/name': resource.metadata.name,
    [TENANT_LABEL]: tenantCode,
  };
  const pod = structuredClone(template);
  const containers = pod.spec?.containers ?? [];
  if (!containers[0]) throw new Error('the run pod template has no container');
  containers[0].args = ['run', ...kind.handler.runArgs!(resource.metadata.name), '--tenant', tenantCode, '--scheduled'];
  pod.metadata = { ...pod.metadata, labels: { ...pod.metadata?.labels, ...labels } };
  const spec = {
    schedule,
    timeZone: 'Etc/UTC',
    concurrencyPolicy: 'Forbid',
    successfulJobsHistoryLimit: 3,
    failedJobsHistoryLimit: 3,
    // A slot missed by more than this is left to the next one (the run's slot logic catches up).
    startingDeadlineSeconds: 300,
    jobTemplate: {
      metadata: { labels },
      // A failed run is not retried by the Job: the next slot reads from the same watermark.
      spec: { backoffLimit: 0, template: pod },
    },
  };
  const hash = createHash('sha256').update(canonical(spec)).digest('hex').slice(0, 16);
  return {
    apiVersion: 'batch/v1',
    kind: 'CronJob',
    metadata: {
      name,
      namespace: resource.metadata.namespace,
      labels,
      annotations: { [SPEC_HASH]: hash },
      ownerReferences: [{ apiVersion: resource.apiVersion ?? apiVersionOf(kind), kind: kind.kind, name: resource.metadata.name, uid: resource.metadata.uid!, controller: true, blockOwnerDeletion: true }],
    },
    spec,
  } as V1CronJob;
}
