import { createHash } from 'node:crypto';
import type { BatchV1Api, V1CronJob, V1PodTemplateSpec } from '@kubernetes/client-node';
import { apiStatus } from '../kube/kube-config.js';
import { canonical } from '../src/manifests/canonical.js';
import type { ManifestKind } from '../src/manifests/kinds.js';
import { logger, storableUpstreamMessage } from '../src/observability/logger.js';
import type { Condition, Resource } from './resource.js';
import { listAll } from './paging.js';
import { condition, MANAGED_BY } from './status.js';
import { TENANT_LABEL } from './tenant.js';
import { sameQuantity } from './quantity.js';

/**
 * A resource's schedule as a CronJob in the release's namespace (the operator's own, where the
 * database URL and master key Secrets are) that runs `svc-hub run … --scheduled`, and its Scheduled
 * condition. An ownerReference cannot point across namespaces, so the CronJob names its resource in
 * labels and annotations instead: the finalizer deletes it (found by the uid label), the resync
 * deletes those whose resource is gone. Its owner is the run pod template's ConfigMap in the
 * release's namespace (when the operator is told its name), so that uninstalling the release, which
 * deletes the ConfigMap, has the garbage collector delete every CronJob: no run starts afterwards.
 */

/** The annotation on a CronJob holding the hash of the spec the operator last wrote. */
export const SPEC_HASH = 'svc.io/spec-hash';
export const MANAGED_BY_LABEL = 'app.kubernetes.io/managed-by';
export const KIND_LABEL = 'svc.io/kind';
export const RESOURCE_NAMESPACE = 'svc.io/resource-namespace';
/** A label when the name fits one (63 characters); always an annotation. */
export const RESOURCE_NAME = 'svc.io/resource-name';
export const RESOURCE_UID = 'svc.io/resource-uid';
/** On a resource: the operator instance that reconciles it; on a CronJob: the instance that wrote it. */
export const INSTANCE_LABEL = 'svc.io/operator-instance';
/** CronJob names are at most 52 characters (the Job controller appends an 11-character suffix). */
const CRONJOB_NAME_MAX = 52;
const LABEL_VALUE_MAX = 63;

/** `svc.operator.run-deadline`'s default: 6 hours. */
export const RUN_DEADLINE_DEFAULT_MS = 6 * 3600 * 1000;

/** A run deadline (ms) as the Job's `activeDeadlineSeconds`: whole seconds, rounded up, at least 1. */
export function activeDeadlineSeconds(ms: number | undefined): number {
  return Math.max(1, Math.ceil((ms ?? RUN_DEADLINE_DEFAULT_MS) / 1000));
}

/** The pod template of scheduled runs (the chart's run-job ConfigMap), where it was looked for, and where CronJobs go. */
export interface RunTemplate {
  template?: V1PodTemplateSpec;
  path?: string;
  /** The release's namespace: every CronJob goes there. */
  namespace: string;
  /** The operator instance (labelled on the CronJob when set). */
  instance?: string;
  /**
   * How long a run's Job may be active before Kubernetes stops it (`activeDeadlineSeconds`, in
   * milliseconds here; `svc.operator.run-deadline`); undefined: RUN_DEADLINE_DEFAULT_MS.
   */
  runDeadline?: number;
  /** Resources (uids) whose CronJob of the old layout was already looked for in this term. */
  legacyChecked?: Set<string>;
  /** Whether a CronJob of ours names a resource that no longer exists (it may then be replaced). */
  orphaned?: (job: V1CronJob) => boolean;
  /**
   * The ConfigMap of the run pod template (in `namespace`), which every CronJob names as its owner
   * so that deleting it (`helm uninstall`) deletes them: its name, and how to read its uid now
   * (throws when it does not exist or cannot be read: no CronJob is written without its owner, as
   * it would outlive the release).
   */
  ownerConfigMap?: { name: string; uid: () => Promise<string> };
}

/** Whether a CronJob names the run template's ConfigMap as an owner (any uid: a stale one is the garbage collector's to act on). */
function ownedByConfigMap(job: V1CronJob, name: string): boolean {
  return (job.metadata?.ownerReferences ?? []).some((r) => r.apiVersion === 'v1' && r.kind === 'ConfigMap' && r.name === name);
}

/** The label selector of an operator instance's resources: `svc.io/operator-instance=<instance>`, or `!svc.io/operator-instance` without one. */
export function instanceSelector(instance: string | undefined): string {
  return instance ? `${INSTANCE_LABEL}=${instance}` : `!${INSTANCE_LABEL}`;
}

/** Whether labels match an equality-based selector (`a=b`, `a==b`, `a!=b`, `a`, `!a`, comma-joined). */
export function matchesSelector(labels: Record<string, string> | undefined, selector: string): boolean {
  const l = labels ?? {};
  return selector
    .split(',')
    .map((t) => t.trim())
    .filter(Boolean)
    .every((term) => {
      if (term.startsWith('!')) return !(term.slice(1) in l);
      const ne = term.indexOf('!=');
      if (ne > 0) return l[term.slice(0, ne)] !== term.slice(ne + 2);
      const eq = term.indexOf('=');
      if (eq < 0) return term in l;
      const value = term.slice(term[eq + 1] === '=' ? eq + 2 : eq + 1);
      return l[term.slice(0, eq)] === value;
    });
}

/** `full` cut to leave room within `max` characters for a dash and 8 hex digits of a hash of `hashed`, and those appended. */
function suffixedWithHash(full: string, max: number, hashed: string): string {
  const hash = createHash('sha256').update(hashed).digest('hex').slice(0, 8);
  return `${full.slice(0, max - 9).replace(/[-.]+$/, '')}-${hash}`;
}

/** `name` cut to `max` characters with a hash of the whole when it is longer. */
function cutWithHash(full: string, max: number): string {
  return full.length <= max ? full : suffixedWithHash(full, max, full);
}

/** `<kind>-<namespace>-<name>` in lower case; a name too long for a CronJob is cut and suffixed with a hash. */
export function cronJobName(kind: ManifestKind, namespace: string, name: string): string {
  return cutWithHash(`${kind.kind}-${namespace}-${name}`.toLowerCase(), CRONJOB_NAME_MAX);
}

/**
 * The name a resource's CronJob takes when `cronJobName`'s is another resource's: that name is
 * ambiguous where the namespace holds a dash (`team-a`/`x-y` and `team-a-x`/`y` both make
 * `connector-team-a-x-y`). Always suffixed with a hash of kind, namespace and name, which tells them apart.
 */
export function cronJobAlternateName(kind: ManifestKind, namespace: string, name: string): string {
  return suffixedWithHash(`${kind.kind}-${namespace}-${name}`.toLowerCase(), CRONJOB_NAME_MAX, `${kind.kind}/${namespace}/${name}`);
}

/**
 * The name a resource's CronJob takes when both `cronJobName`'s and `cronJobAlternateName`'s are
 * other resources': both are computed from the namespace and name alone, so whoever may create
 * resources in a namespace whose name, with a dash, begins another's (`team` and `team-a`) could
 * take both before that namespace's resource is created, and keep it from being scheduled. This one
 * is suffixed with a hash that takes in the resource's uid too, which no other namespace can know.
 */
export function cronJobUidName(kind: ManifestKind, namespace: string, name: string, uid: string): string {
  return suffixedWithHash(`${kind.kind}-${namespace}-${name}`.toLowerCase(), CRONJOB_NAME_MAX, `${kind.kind}/${namespace}/${name}/${uid}`);
}

/** The CronJob name of the old layout (`<kind>-<name>` in the resource's own namespace, owned by the resource). */
export function legacyCronJobName(kind: ManifestKind, name: string): string {
  return cutWithHash(`${kind.kind.toLowerCase()}-${name}`, CRONJOB_NAME_MAX);
}

/** The resource a CronJob of the operator's belongs to, from its labels and annotations. */
export function cronJobOwner(job: V1CronJob, kinds: readonly ManifestKind[]): { kind: ManifestKind; namespace: string; name: string; uid: string } | undefined {
  const labels = job.metadata?.labels ?? {};
  const annotations = job.metadata?.annotations ?? {};
  const kind = kinds.find((k) => k.kind.toLowerCase() === labels[KIND_LABEL]);
  const namespace = labels[RESOURCE_NAMESPACE];
  const name = annotations[RESOURCE_NAME] ?? labels[RESOURCE_NAME];
  const uid = labels[RESOURCE_UID];
  return kind && namespace && name && uid ? { kind, namespace, name, uid } : undefined;
}

const ignoreNotFound = (err: unknown) => {
  if (apiStatus(err) !== 404) throw err;
};

/**
 * Deletes a CronJob (that very one: its uid is a precondition); one already gone is fine. `asRead`:
 * only as it was read (its resourceVersion a precondition too): false, and nothing deleted, when it
 * changed since (a decision taken from a cache behind the server).
 */
export async function deleteCronJob(batch: BatchV1Api, job: V1CronJob, asRead = false): Promise<boolean> {
  const preconditions = { uid: job.metadata?.uid, ...(asRead ? { resourceVersion: job.metadata?.resourceVersion } : {}) };
  try {
    await batch.deleteNamespacedCronJob({ name: job.metadata!.name!, namespace: job.metadata!.namespace!, propagationPolicy: 'Background', body: { preconditions } });
  } catch (err) {
    if (asRead && apiStatus(err) === 409) return false;
    ignoreNotFound(err);
  }
  return true;
}

/** Deletes the CronJobs in `namespace` labelled with the resource's uid (the finalizer), listed `pageSize` at a time; returns how many. */
export async function deleteCronJobsOf(batch: BatchV1Api, namespace: string, uid: string, pageSize?: number): Promise<number> {
  const selector = `${MANAGED_BY_LABEL}=${MANAGED_BY},${RESOURCE_UID}=${uid}`;
  const list = await listAll(`cronjobs.batch in namespace ${namespace} of uid ${uid}`, (page) => batch.listNamespacedCronJob({ namespace, labelSelector: selector, ...page }), pageSize);
  let n = 0;
  for (const job of list.items) {
    if (!matchesSelector(job.metadata?.labels, selector)) continue;
    await deleteCronJob(batch, job);
    logger().info(`CronJob ${namespace}/${job.metadata?.name} deleted with its resource (uid ${uid})`);
    n++;
  }
  return n;
}

/** Maps whose values are resource quantities (a container's `resources`, a pod's `overhead`). */
const QUANTITY_MAPS = new Set(['requests', 'limits', 'overhead']);
/** Fields that are one quantity: an emptyDir's `sizeLimit`, a resourceFieldRef's `divisor` (env and downwardAPI volumes). */
const QUANTITY_VALUES = new Set(['sizeLimit', 'divisor']);

/**
 * The fields of a CronJob, its job and pod templates that are pointers in the Kubernetes types
 * (k8s.io/api): the API server keeps a `false`, 0 or `""` written to them, and it means something
 * (`automountServiceAccountToken: false`, `backoffLimit: 0`, `suspend: false`, `runAsUser: 0`).
 * Every other scalar of those types is a plain field whose empty value means unset: the server drops
 * it (`omitempty`) or puts its default in its place (`imagePullPolicy`, `restartPolicy`).
 */
const KEPT_WHEN_EMPTY = new Set([
  // CronJobSpec, JobSpec
  'startingDeadlineSeconds', 'suspend', 'successfulJobsHistoryLimit', 'failedJobsHistoryLimit', 'timeZone',
  'parallelism', 'completions', 'activeDeadlineSeconds', 'backoffLimit', 'backoffLimitPerIndex', 'maxFailedIndexes', 'manualSelector', 'ttlSecondsAfterFinished', 'managedBy',
  // PodSpec
  'terminationGracePeriodSeconds', 'automountServiceAccountToken', 'shareProcessNamespace', 'priority', 'runtimeClassName', 'enableServiceLinks', 'setHostnameAsFQDN', 'hostUsers',
  // SecurityContext, PodSecurityContext
  'privileged', 'runAsUser', 'runAsGroup', 'runAsNonRoot', 'readOnlyRootFilesystem', 'allowPrivilegeEscalation', 'fsGroup', 'localhostProfile',
  // key selectors and volume sources
  'optional', 'defaultMode', 'mode', 'tolerationSeconds',
]);

/**
 * The plain fields of those types that the API server defaults when they are empty (CronJob, pod
 * template, container, port, fieldRef and probe defaults): written empty, they are read back with
 * the default. The other plain fields written empty are read back without them.
 */
const DEFAULTED = new Set([
  'concurrencyPolicy', 'restartPolicy', 'dnsPolicy', 'schedulerName', 'imagePullPolicy', 'terminationMessagePath', 'terminationMessagePolicy',
  'protocol', 'apiVersion', 'timeoutSeconds', 'periodSeconds', 'successThreshold', 'failureThreshold', 'path', 'scheme',
]);

/** An empty value: what the API server drops or defaults in a plain field (see KEPT_WHEN_EMPTY). */
const isEmpty = (v: unknown): boolean =>
  v === null || v === '' || v === 0 || v === false || (Array.isArray(v) && v.length === 0) || (typeof v === 'object' && v !== null && Object.keys(v).length === 0);

/**
 * Whether `actual` holds everything `desired` says, as the API server answers what it was sent:
 * the defaults it adds do not count, nor does an empty value (`value: ""`, `readOnly: false`, `[]`,
 * `{}`, null) of a plain field, which it drops or defaults, so that a CronJob read back is not seen
 * to differ on every reconcile; the empty values of pointer fields (KEPT_WHEN_EMPTY) it keeps, and
 * they are compared. Resource quantities (`requests`, `limits`, `overhead`, `sizeLimit`, `divisor`)
 * are compared by value: the server answers them in canonical form (`1024Mi` as `1Gi`, 1 as `"1"`).
 */
export function covers(actual: unknown, desired: unknown, quantities: 'map' | 'value' | undefined = undefined): boolean {
  if (quantities === 'value') return sameQuantity(actual, desired);
  if (Array.isArray(desired)) return Array.isArray(actual) && actual.length === desired.length && desired.every((d, i) => covers(actual[i], d));
  if (desired && typeof desired === 'object') {
    if (!actual || typeof actual !== 'object' || Array.isArray(actual)) return false;
    return Object.entries(desired).every(([k, v]) => {
      if (v === undefined) return true;
      const a = (actual as Record<string, unknown>)[k];
      // A quantity map's entries are values, not fields: an empty one is compared.
      if (quantities !== 'map' && !KEPT_WHEN_EMPTY.has(k) && isEmpty(v) && (a === undefined || isEmpty(a) || DEFAULTED.has(k))) return true;
      return covers(a, v, quantities === 'map' || QUANTITY_VALUES.has(k) ? 'value' : QUANTITY_MAPS.has(k) ? 'map' : undefined);
    });
  }
  return actual === desired;
}

/** Deletes the resource's CronJob of the old layout when there is one (it would run every slot a second time). */
async function removeLegacy(batch: BatchV1Api, kind: ManifestKind, resource: Resource, target: RunTemplate): Promise<void> {
  const uid = resource.metadata.uid;
  if (!uid || target.legacyChecked?.has(uid)) return;
  const name = legacyCronJobName(kind, resource.metadata.name);
  const namespace = resource.metadata.namespace;
  if (namespace === target.namespace && name === cronJobName(kind, namespace, resource.metadata.name)) return;
  try {
    const old = await batch.readNamespacedCronJob({ name, namespace });
    if (old.metadata?.ownerReferences?.some((r) => r.uid === uid)) {
      await deleteCronJob(batch, old);
      logger().info(`CronJob ${namespace}/${name} of the old layout deleted: ${kind.kind} ${resource.metadata.name} is scheduled from ${target.namespace} now`);
    }
  } catch (err) {
    // None, or no right to read CronJobs in the resource's namespace (a release installed with this layout): nothing to clean up.
    const status = apiStatus(err);
    if (status !== 404 && status !== 403) throw err;
  }
  target.legacyChecked?.add(uid);
}

/** The Scheduled condition after making the CronJob match `schedule` (undefined: no schedule, no condition). */
export async function syncCronJob(batch: BatchV1Api, now: Date, target: RunTemplate, kind: ManifestKind, resource: Resource, tenantCode: string, schedule: string | null): Promise<Condition | undefined> {
  await removeLegacy(batch, kind, resource, target);
  const namespace = target.namespace;
  const read = (name: string) =>
    batch.readNamespacedCronJob({ name, namespace }).catch((err: unknown) => {
      if (apiStatus(err) === 404) return undefined;
      throw err;
    });
  const ours = (job: V1CronJob | undefined) => job?.metadata?.labels?.[MANAGED_BY_LABEL] === MANAGED_BY;
  const isOwned = (job: V1CronJob | undefined) => ours(job) && job?.metadata?.labels?.[RESOURCE_UID] === resource.metadata.uid;
  // Ours, but for a resource of another namespace or name that happens to make the same name. One
  // labelled with this resource's uid is this resource's, whatever its other labels say (edited by
  // hand to name another resource): it is put back, not left for the sweep beside an alternate.
  const anotherResources = (job: V1CronJob | undefined) => {
    const owner = job && ours(job) && !isOwned(job) ? cronJobOwner(job, [kind]) : undefined;
    return owner !== undefined && (owner.namespace !== resource.metadata.namespace || owner.name !== resource.metadata.name);
  };
  let name = cronJobName(kind, resource.metadata.namespace, resource.metadata.name);
  let existing = await read(name);
  if (!existing || anotherResources(existing)) {
    // The name is another resource's: this one's CronJob takes the alternate name, or the one of
    // its uid when that is another resource's too (and keeps it, so it is looked for there too,
    // whether or not the other resource still exists): the first of them that is this resource's,
    // else the first that is not another resource's.
    const alternates = [
      cronJobAlternateName(kind, resource.metadata.namespace, resource.metadata.name),
      cronJobUidName(kind, resource.metadata.namespace, resource.metadata.name, resource.metadata.uid!),
    ];
    let chosen: { name: string; job: V1CronJob | undefined } | undefined = existing ? undefined : { name, job: undefined };
    let last: { name: string; job: V1CronJob | undefined } | undefined;
    for (const alternate of alternates) {
      last = { name: alternate, job: await read(alternate) };
      if (isOwned(last.job)) {
        chosen = last;
        break;
      }
      if (!chosen && !anotherResources(last.job)) chosen = last;
    }
    // Every name another resource's: the last one, a CronJobConflict below.
    ({ name, job: existing } = chosen ?? last!);
  }
  const owned = isOwned(existing);
  if (!schedule) {
    if (existing && owned) {
      await deleteCronJob(batch, existing);
      logger().info(`CronJob ${namespace}/${name} deleted: ${kind.kind} ${resource.metadata.namespace}/${resource.metadata.name} has no schedule`);
    }
    return undefined;
  }
  if (existing && !owned && ours(existing) && target.orphaned?.(existing)) {
    // Left by a resource of the same name deleted without its finalizer: this one takes its place.
    await deleteCronJob(batch, existing);
    logger().info(`CronJob ${namespace}/${name} of a deleted ${kind.kind} (uid ${existing.metadata?.labels?.[RESOURCE_UID]}) deleted`);
    existing = undefined;
  }
  if (existing && !owned) {
    const other = existing.metadata?.labels?.[RESOURCE_UID];
    return condition(
      now,
      'Scheduled',
      'False',
      'CronJobConflict',
      `CronJob ${namespace}/${name} exists and ${ours(existing) && other ? `belongs to another resource (uid ${other})` : 'is not managed by the operator'}; delete or rename it`,
    );
  }
  const template = target.template;
  if (!template) {
    return condition(now, 'Scheduled', 'False', 'NoRunTemplate', `no pod template for scheduled runs${target.path ? ` at ${target.path}` : ''} (the Helm chart mounts one): no CronJob`);
  }
  const desired = cronJobFor(kind, resource, tenantCode, schedule, name, template, target);
  const hash = desired.metadata!.annotations![SPEC_HASH]!;
  const differs =
    existing &&
    (existing.metadata?.annotations?.[SPEC_HASH] !== hash ||
      !covers(existing.spec, desired.spec) ||
      !covers(existing.metadata?.labels, desired.metadata?.labels) ||
      !covers(existing.metadata?.annotations, desired.metadata?.annotations));
  const owner = target.ownerConfigMap;
  const unowned = existing && owner !== undefined && !ownedByConfigMap(existing, owner.name);
  // The owner's uid read as the CronJob is written, never remembered: a CronJob naming a ConfigMap
  // that was deleted and created again (another uid) would be deleted by the garbage collector.
  const ownerUid = owner && (!existing || differs || unowned) ? await owner.uid() : undefined;
  if (owner && ownerUid) desired.metadata!.ownerReferences = [{ apiVersion: 'v1', kind: 'ConfigMap', name: owner.name, uid: ownerUid }];
  else if (existing?.metadata?.ownerReferences) desired.metadata!.ownerReferences = existing.metadata.ownerReferences;
  try {
    if (!existing) {
      await batch.createNamespacedCronJob({ namespace, body: desired });
      logger().info(`CronJob ${namespace}/${name} created: "${schedule}" (Etc/UTC)`);
    } else if (differs || unowned) {
      desired.metadata!.resourceVersion = existing.metadata?.resourceVersion;
      await batch.replaceNamespacedCronJob({ name, namespace, body: desired });
      logger().info(`CronJob ${namespace}/${name} updated: "${schedule}" (Etc/UTC)`);
    }
  } catch (err) {
    // 422: the API server refuses this CronJob as written (a schedule the hub took and Kubernetes
    // does not): writing it again cannot help until the resource changes.
    if (apiStatus(err) !== 422) throw err;
    const why = refusalOf(err);
    logger().warn(`CronJob ${namespace}/${name} refused by the API server: ${why}`);
    return condition(now, 'Scheduled', 'False', 'CronJobInvalid', `the API server refused CronJob ${name} ("${schedule}"): ${why}`);
  }
  return condition(now, 'Scheduled', 'True', 'CronJobReady', `CronJob ${name} runs "${schedule}" (Etc/UTC)`);
}

/**
 * What the API server said of a refused object: its Status message, else the error's first line;
 * masked as a Kubernetes API answer is (reconciler.ts, `firstLine`).
 */
function refusalOf(err: unknown): string {
  return storableUpstreamMessage(apiAnswer(err) ?? String((err as Error)?.message ?? err).split('\n')[0]!);
}

/**
 * The message of the Status the API server answered a failed call with (its first line), or
 * undefined when it sent none (or the error is not an API server's answer): the client's own error reads `HTTP-Code: 403` on its first line,
 * and the Status message says what failed (`cronjobs.batch "…" is forbidden: …`).
 */
export function apiAnswer(err: unknown): string | undefined {
  if (apiStatus(err) === undefined) return undefined;
  const body = (err as { body?: unknown } | undefined)?.body;
  let message: unknown;
  if (typeof body === 'string') {
    try {
      message = (JSON.parse(body) as { message?: unknown }).message;
    } catch {
      message = undefined;
    }
  } else if (body && typeof body === 'object') message = (body as { message?: unknown }).message;
  return typeof message === 'string' && message ? message.split('\n')[0]! : undefined;
}

/** The CronJob of a resource's schedule: `svc-hub run … --scheduled` in the run pod template, in the release's namespace, labelled with its resource. */
export function cronJobFor(kind: ManifestKind, resource: Resource, tenantCode: string, schedule: string, name: string, template: V1PodTemplateSpec, target: Pick<RunTemplate, 'namespace' | 'instance' | 'runDeadline'>): V1CronJob {
  const labels: Record<string, string> = {
    [MANAGED_BY_LABEL]: MANAGED_BY,
    'app.kubernetes.io/component': 'scheduled-run',
    [KIND_LABEL]: kind.kind.toLowerCase(),
    [RESOURCE_NAMESPACE]: resource.metadata.namespace,
    ...(resource.metadata.name.length <= LABEL_VALUE_MAX ? { [RESOURCE_NAME]: resource.metadata.name } : {}),
    [RESOURCE_UID]: resource.metadata.uid!,
    [TENANT_LABEL]: tenantCode,
    ...(target.instance ? { [INSTANCE_LABEL]: target.instance } : {}),
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
    suspend: false,
    successfulJobsHistoryLimit: 3,
    failedJobsHistoryLimit: 3,
    // A slot missed by more than this is left to the next one (the run's slot logic catches up).
    startingDeadlineSeconds: 300,
    jobTemplate: {
      metadata: { labels },
      // A failed run is not retried by the Job: the next slot reads from the same watermark.
      // A run still active after the deadline is stopped (its Job fails, DeadlineExceeded): with
      // concurrencyPolicy Forbid, one hung run would otherwise keep every later slot from starting.
      spec: { backoffLimit: 0, activeDeadlineSeconds: activeDeadlineSeconds(target.runDeadline), template: pod },
    },
  };
  const hash = createHash('sha256').update(canonical(spec)).digest('hex').slice(0, 16);
  return {
    apiVersion: 'batch/v1',
    kind: 'CronJob',
    metadata: {
      name,
      namespace: target.namespace,
      labels,
      annotations: { [SPEC_HASH]: hash, [RESOURCE_NAME]: resource.metadata.name, 'svc.io/resource': `${kind.kind} ${resource.metadata.namespace}/${resource.metadata.name}` },
    },
    spec,
  } as V1CronJob;
}
