import { createHash } from 'node:crypto';
import {
  BatchV1Api,
  CoreV1Api,
  CustomObjectsApi,
  type KubeConfig,
  type KubernetesObject,
  makeInformer,
  type V1CronJob,
  type V1PodTemplateSpec,
} from '@kubernetes/client-node';
import { canonical } from '../src/manifests/canonical.js';
import type { ManifestServices } from '../src/manifests/services.js';
import { ValidationError } from '../src/errors.js';
import { apiVersionOf, type ManifestKind } from '../src/manifests/kinds.js';
import { logger } from '../src/observability/logger.js';
import { apiStatus } from '../kube/kube-config.js';
import { ReconcileQueue } from './queue.js';

/**
 * The operator's reconciler (CONTRACTS.md section 6): custom resources of every registered manifest
 * kind (src/manifests/kinds.ts) become hub state through the kind's own apply service, the same one
 * its HTTP path calls; their `spec.schedule` becomes a CronJob; what happened is written back on the
 * resource's status. Nothing here is kind-specific: a kind joins by registering its schema and its
 * ManifestHandler.
 *
 * One reconcile reads the resource fresh, then: finalizer first (so a delete can always clean up),
 * tenant (label on the resource, else on its Namespace), apply when the hub's copy differs, the
 * CronJob, `lastRun`, and the status, written only when it changed (so a status write, which the
 * watch reports back, ends in a no-op reconcile instead of a loop). A permanent problem (invalid
 * manifest, no tenant) is reported on the Ready condition and not retried until the resource, its
 * Namespace or the periodic resync says otherwise; anything else (API or database unavailable,
 * resourceVersion conflict) is retried with exponential backoff.
 */

export const FINALIZER = 'svc.io/cleanup';
export const TENANT_LABEL = 'svc.io/tenant';
/** The annotation on a CronJob holding the hash of the spec the operator last wrote. */
export const SPEC_HASH = 'svc.io/spec-hash';
const MANAGED_BY = 'svc-hub-operator';
/** CronJob names are at most 52 characters (the Job controller appends an 11-character suffix). */
const CRONJOB_NAME_MAX = 52;

export interface Condition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason: string;
  message: string;
  lastTransitionTime: string;
  observedGeneration?: number;
}

export interface ResourceStatus {
  observedGeneration?: number;
  /** The tenant code the hub holds the resource in (where a delete cleans up). */
  tenant?: string;
  conditions?: Condition[];
  lastRun?: { id: string; status: string; endedAt: string | null };
}

export interface Resource extends KubernetesObject {
  metadata: NonNullable<KubernetesObject['metadata']> & { name: string; namespace: string };
  spec?: Record<string, unknown>;
  status?: ResourceStatus;
  [key: string]: unknown;
}

export interface OperatorOptions {
  kinds: readonly ManifestKind[];
  /** What the operator does in the hub: the manifest area's services (no database handle here). */
  manifests: ManifestServices;
  kc: KubeConfig;
  /** Watch one namespace only; undefined watches all. */
  namespace?: string;
  /** Every resource is reconciled again this often (refreshes `lastRun`, repairs drift). */
  resyncEvery: number;
  /** How often runs that started or ended are looked for, to refresh their resources' `lastRun` at once; 0: only on resync. */
  runPollEvery?: number;
  backoffBase: number;
  backoffMax: number;
  /** The pod template of scheduled runs (the chart's run-job ConfigMap); undefined: no CronJobs. */
  runJobTemplate?: V1PodTemplateSpec;
  /** Where that template was looked for (for the condition message when it is missing). */
  runJobTemplatePath?: string;
  workers?: number;
  /** Recorded as the applying actor in the hub. */
  actor?: string;
  now?: () => Date;
}

type Outcome = { ok: true } | { ok: false; permanent: boolean; message: string };

class Conflict extends Error {}


/** The manifest the HTTP path would have received: the resource without status and server-set metadata. */
export function manifestOf(resource: Resource): Record<string, unknown> {
  const { status: _status, metadata, ...rest } = resource;
  const meta: Record<string, unknown> = { name: metadata.name };
  if (metadata.labels && Object.keys(metadata.labels).length) meta.labels = metadata.labels;
  const annotations = Object.fromEntries(Object.entries(metadata.annotations ?? {}).filter(([k]) => k !== 'kubectl.kubernetes.io/last-applied-configuration'));
  if (Object.keys(annotations).length) meta.annotations = annotations;
  return { ...rest, metadata: meta };
}

/** `<kind>-<name>` in lower case; a name too long for a CronJob is cut and suffixed with a hash. */
export function cronJobName(kind: ManifestKind, name: string): string {
  const full = `${kind.kind.toLowerCase()}-${name}`;
  if (full.length <= CRONJOB_NAME_MAX) return full;
  const hash = createHash('sha256').update(full).digest('hex').slice(0, 8);
  return `${full.slice(0, CRONJOB_NAME_MAX - 9).replace(/-+$/, '')}-${hash}`;
}

export class Operator {
  private readonly queue: ReconcileQueue;
  private readonly custom: CustomObjectsApi;
  private readonly core: CoreV1Api;
  private readonly batch: BatchV1Api;
  private readonly informers: Array<{ kind: ManifestKind; informer: ReturnType<typeof makeInformer<Resource>> }> = [];
  /** The last known tenant of resources, for cleaning up after one deleted without its finalizer. */
  private readonly tenants = new Map<string, string>();
  private readonly restarts = new Map<ManifestKind, NodeJS.Timeout>();
  private resync: NodeJS.Timeout | undefined;
  private runPoll: NodeJS.Timeout | undefined;
  /** Database time of the last look for runs. */
  private runsSeenAt: Date | undefined;
  private workers: Promise<void>[] = [];
  private running = false;
  private readonly now: () => Date;

  constructor(private readonly options: OperatorOptions) {
    this.queue = new ReconcileQueue({ backoffBase: options.backoffBase, backoffMax: options.backoffMax });
    this.custom = options.kc.makeApiClient(CustomObjectsApi);
    this.core = options.kc.makeApiClient(CoreV1Api);
    this.batch = options.kc.makeApiClient(BatchV1Api);
    this.now = options.now ?? (() => new Date());
  }

  /** Starts the informers and the workers (call it once this process leads). */
  async start(): Promise<void> {
    if (this.running) return;
    this.running = true;
    for (const kind of this.options.kinds) {
      const informer = makeInformer<Resource>(this.options.kc, this.watchPath(kind), () => this.list(kind));
      const enqueue = (o: Resource) => this.queue.add(this.keyOf(kind, o.metadata.namespace, o.metadata.name));
      informer.on('add', enqueue);
      informer.on('update', enqueue);
      informer.on('delete', enqueue);
      informer.on('error', (err: unknown) => {
        if (!this.running) return;
        const delay = Math.min(this.options.backoffMax, Math.max(this.options.backoffBase, 1_000));
        logger().warn({ err: (err as Error)?.message, kind: kind.kind }, `watch of ${kind.plural}.${kind.group} failed; restarting in ${delay} ms`);
        this.restarts.set(kind, setTimeout(() => void informer.start().catch(() => undefined), delay));
      });
      this.informers.push({ kind, informer });
      await informer.start().catch((err: unknown) => logger().warn({ err: (err as Error).message }, `cannot list ${kind.plural}.${kind.group}; retrying`));
    }
    this.resync = setInterval(() => this.resyncAll(), this.options.resyncEvery);
    this.resync.unref();
    if (this.options.runPollEvery) {
      let polling = false;
      this.runPoll = setInterval(() => {
        if (polling) return;
        polling = true;
        void this.pollRuns().finally(() => {
          polling = false;
        });
      }, this.options.runPollEvery);
      this.runPoll.unref();
    }
    for (let i = 0; i < (this.options.workers ?? 2); i++) this.workers.push(this.work());
    logger().info(`operator reconciling ${this.options.kinds.map((k) => `${k.plural}.${k.group}`).join(', ')} in ${this.options.namespace ? `namespace ${this.options.namespace}` : 'all namespaces'}`);
  }

  /** Stops watching and working; a reconcile under way finishes first. */
  async stop(): Promise<void> {
    if (!this.running) return;
    this.running = false;
    if (this.resync) clearInterval(this.resync);
    if (this.runPoll) clearInterval(this.runPoll);
    for (const timer of this.restarts.values()) clearTimeout(timer);
    for (const { informer } of this.informers.splice(0)) await informer.stop();
    this.queue.close();
    await Promise.all(this.workers.splice(0));
  }

  /** Enqueues every resource the informers hold. */
  resyncAll(): void {
    for (const { kind, informer } of this.informers) {
      for (const o of informer.list()) this.queue.add(this.keyOf(kind, o.metadata.namespace, o.metadata.name));
    }
  }

  /** Enqueues the resources whose runs started or ended since the last look. */
  async pollRuns(): Promise<void> {
    try {
      // The first look goes back one resync period; later ones overlap the previous by a second.
      const seenAt = this.runsSeenAt;
      const seen = await this.options.manifests.runsChanged(this.options.kinds, (now) =>
        seenAt ? new Date(seenAt.getTime() - 1_000) : new Date(now.getTime() - this.options.resyncEvery),
      );
      this.runsSeenAt = seen.now;
      for (const { kind, informer } of this.informers) {
        const wanted = seen.changed.filter((c) => c.kind === kind);
        if (!wanted.length) continue;
        for (const o of informer.list()) {
          if (wanted.some((c) => c.name === o.metadata.name && c.tenant === o.status?.tenant)) this.queue.add(this.keyOf(kind, o.metadata.namespace, o.metadata.name));
        }
      }
    } catch (err) {
      logger().warn({ err: (err as Error).message }, 'cannot look for new runs; trying again');
    }
  }

  private keyOf(kind: ManifestKind, namespace: string, name: string): string {
    return `${kind.plural}.${kind.group}/${namespace}/${name}`;
  }

  private watchPath(kind: ManifestKind): string {
    const ns = this.options.namespace;
    return `/apis/${kind.group}/${kind.version}/${ns ? `namespaces/${ns}/` : ''}${kind.plural}`;
  }

  private list(kind: ManifestKind) {
    const { group, version, plural } = kind;
    const ns = this.options.namespace;
    return ns ? this.custom.listNamespacedCustomObject({ group, version, plural, namespace: ns }) : this.custom.listClusterCustomObject({ group, version, plural });
  }

  private async work(): Promise<void> {
    for (;;) {
      const key = await this.queue.get();
      if (key === undefined) return;
      try {
        await this.reconcileKey(key);
        this.queue.forget(key);
      } catch (err) {
        const delay = this.queue.addRateLimited(key);
        const conflict = err instanceof Conflict || apiStatus(err) === 409;
        logger()[conflict ? 'debug' : 'warn']({ err: (err as Error).message, key }, `reconcile of ${key} ${conflict ? 'met a newer version' : 'failed'}; again in ${delay} ms`);
      } finally {
        this.queue.done(key);
      }
    }
  }

  /** One reconcile of `<plural>.<group>/<namespace>/<name>`; throws what should be retried. */
  async reconcileKey(key: string): Promise<void> {
    const [kindId, namespace, name] = key.split('/') as [string, string, string];
    const kind = this.options.kinds.find((k) => `${k.plural}.${k.group}` === kindId);
    if (!kind) return;
    const resource = await this.read(kind, namespace, name);
    if (!resource) {
      await this.gone(kind, key, name);
      return;
    }
    if (resource.status?.tenant) this.tenants.set(key, resource.status.tenant);
    if (resource.metadata.deletionTimestamp) {
      await this.finalize(kind, key, resource);
      return;
    }
    let current = resource;
    if (!(current.metadata.finalizers ?? []).includes(FINALIZER)) {
      current = await this.replace(kind, { ...current, metadata: { ...current.metadata, finalizers: [...(current.metadata.finalizers ?? []), FINALIZER] } });
    }

    const previous = current.status ?? {};
    const generation = current.metadata.generation;
    const conditions: Condition[] = [];
    let tenantCode = previous.tenant;
    let lastRun = previous.lastRun;
    let retry: Error | undefined;

    const tenant = await this.resolveTenant(current);
    if ('problem' in tenant) {
      conditions.push(this.condition('Ready', 'False', 'TenantUnresolved', tenant.problem, generation));
      const scheduled = previous.conditions?.find((c) => c.type === 'Scheduled');
      if (scheduled) conditions.push(scheduled);
    } else {
      if (previous.tenant && previous.tenant !== tenant.code) await this.removeFromHub(kind, previous.tenant, name);
      const applied = await this.apply(kind, current, tenant);
      if (!applied.ok) {
        conditions.push(this.condition('Ready', 'False', 'Invalid', applied.message, generation));
        const scheduled = previous.conditions?.find((c) => c.type === 'Scheduled');
        if (scheduled) conditions.push(scheduled);
        if (previous.tenant !== tenant.code) tenantCode = undefined;
      } else {
        tenantCode = tenant.code;
        conditions.push(this.condition('Ready', 'True', 'Applied', `applied to tenant ${tenant.code}${applied.warnings.length ? `; warnings: ${applied.warnings.join('; ')}` : ''}`, generation));
        if (kind.handler.runArgs) {
          try {
            const scheduled = await this.schedule(kind, current, tenant.code, applied.schedule);
            if (scheduled) conditions.push({ ...scheduled, observedGeneration: generation });
          } catch (err) {
            retry = err as Error;
            conditions.push(this.condition('Scheduled', 'Unknown', 'CronJobFailed', `cannot write the CronJob: ${(err as Error).message.split('\n')[0]}`, generation));
          }
        }
        if (kind.lastRun) lastRun = await this.options.manifests.lastRun(kind, tenant.id, current.metadata.name);
      }
    }

    const status: ResourceStatus = { observedGeneration: generation };
    if (tenantCode) status.tenant = tenantCode;
    status.conditions = conditions.map((c) => {
      const before = previous.conditions?.find((p) => p.type === c.type);
      return before && before.status === c.status ? { ...c, lastTransitionTime: before.lastTransitionTime } : c;
    });
    if (lastRun) status.lastRun = lastRun;
    if (canonical(status) !== canonical(previous)) {
      await this.writeStatus(kind, current, status);
      this.announce(kind, current, previous, status);
    }
    if (tenantCode) this.tenants.set(key, tenantCode);
    if (retry) throw retry;
  }

  private condition(type: string, status: Condition['status'], reason: string, message: string, observedGeneration?: number): Condition {
    return { type, status, reason, message, lastTransitionTime: this.now().toISOString().replace(/\.\d+Z$/, 'Z'), ...(observedGeneration !== undefined ? { observedGeneration } : {}) };
  }

  private async resolveTenant(resource: Resource): Promise<{ code: string; id: number } | { problem: string }> {
    let code = resource.metadata.labels?.[TENANT_LABEL];
    let where = 'the resource';
    if (!code) {
      try {
        const ns = await this.core.readNamespace({ name: resource.metadata.namespace });
        code = ns.metadata?.labels?.[TENANT_LABEL];
        where = `namespace ${resource.metadata.namespace}`;
      } catch (err) {
        if (apiStatus(err) !== 404) throw err;
      }
    }
    if (!code) return { problem: `no tenant: label ${TENANT_LABEL} is set neither on the resource nor on its namespace ${resource.metadata.namespace}` };
    const row = await this.tenant(code);
    if (!row) return { problem: `no tenant: tenant ${code} (label ${TENANT_LABEL} on ${where}) does not exist` };
    if (!row.active) return { problem: `no tenant: tenant ${code} (label ${TENANT_LABEL} on ${where}) is inactive` };
    return { code, id: row.id };
  }

  /** The tenant of that code, active or not. */
  private async tenant(code: string): Promise<{ id: number; active: boolean } | undefined> {
    return this.options.manifests.tenantByCode(code);
  }

  private async apply(kind: ManifestKind, resource: Resource, tenant: { code: string; id: number }): Promise<({ ok: true; schedule: string | null; warnings: string[] }) | (Outcome & { ok: false })> {
    const manifest = manifestOf(resource);
    try {
      const result = await this.options.manifests.applyIfChanged(kind, tenant.id, resource.metadata.name, manifest, this.options.actor ?? 'operator');
      if (result.changed) {
        logger().info({ kind: kind.kind, name: resource.metadata.name, namespace: resource.metadata.namespace, tenant: tenant.code }, `${kind.kind} ${resource.metadata.namespace}/${resource.metadata.name} ${result.created ? 'created' : 'updated'} in tenant ${tenant.code}`);
      }
      return { ok: true as const, schedule: result.schedule, warnings: result.warnings };
    } catch (err) {
      if (err instanceof ValidationError) {
        const field = err.field && !err.message.includes(err.field) ? `${err.field}: ` : '';
        return { ok: false, permanent: true, message: `${field}${err.message}` };
      }
      throw err;
    }
  }

  /** The Scheduled condition after making the CronJob match `schedule` (undefined: no schedule, no condition). */
  private async schedule(kind: ManifestKind, resource: Resource, tenantCode: string, schedule: string | null): Promise<Condition | undefined> {
    const name = cronJobName(kind, resource.metadata.name);
    const namespace = resource.metadata.namespace;
    const existing = await this.batch.readNamespacedCronJob({ name, namespace }).catch((err: unknown) => {
      if (apiStatus(err) === 404) return undefined;
      throw err;
    });
    const owned = existing?.metadata?.ownerReferences?.some((r) => r.uid === resource.metadata.uid) ?? false;
    if (!schedule) {
      if (existing && owned) {
        await this.batch.deleteNamespacedCronJob({ name, namespace, propagationPolicy: 'Background' }).catch((err: unknown) => {
          if (apiStatus(err) !== 404) throw err;
        });
        logger().info(`CronJob ${namespace}/${name} deleted: ${kind.kind} ${resource.metadata.name} has no schedule`);
      }
      return undefined;
    }
    if (existing && !owned) {
      return this.condition('Scheduled', 'False', 'CronJobConflict', `CronJob ${name} exists and is not owned by this ${kind.kind}; delete or rename it`);
    }
    const template = this.options.runJobTemplate;
    if (!template) {
      return this.condition('Scheduled', 'False', 'NoRunTemplate', `no pod template for scheduled runs${this.options.runJobTemplatePath ? ` at ${this.options.runJobTemplatePath}` : ''} (the Helm chart mounts one): no CronJob`);
    }
    const desired = this.cronJob(kind, resource, tenantCode, schedule, name, template);
    const hash = desired.metadata!.annotations![SPEC_HASH]!;
    if (!existing) {
      await this.batch.createNamespacedCronJob({ namespace, body: desired });
      logger().info(`CronJob ${namespace}/${name} created: "${schedule}" (Etc/UTC)`);
    } else if (existing.metadata?.annotations?.[SPEC_HASH] !== hash) {
      desired.metadata!.resourceVersion = existing.metadata?.resourceVersion;
      await this.batch.replaceNamespacedCronJob({ name, namespace, body: desired });
      logger().info(`CronJob ${namespace}/${name} updated: "${schedule}" (Etc/UTC)`);
    }
    return this.condition('Scheduled', 'True', 'CronJobReady', `CronJob ${name} runs "${schedule}" (Etc/UTC)`);
  }

  private cronJob(kind: ManifestKind, resource: Resource, tenantCode: string, schedule: string, name: string, template: V1PodTemplateSpec): V1CronJob {
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

  private async finalize(kind: ManifestKind, key: string, resource: Resource): Promise<void> {
    const finalizers = resource.metadata.finalizers ?? [];
    if (!finalizers.includes(FINALIZER)) return;
    const tenant = resource.status?.tenant ?? this.tenants.get(key);
    if (tenant) await this.removeFromHub(kind, tenant, resource.metadata.name);
    await this.replace(kind, { ...resource, metadata: { ...resource.metadata, finalizers: finalizers.filter((f) => f !== FINALIZER) } });
    this.tenants.delete(key);
  }

  /** A resource that is gone without our finalizer having run (removed by hand): clean up what we know of. */
  private async gone(kind: ManifestKind, key: string, name: string): Promise<void> {
    const tenant = this.tenants.get(key);
    if (!tenant) return;
    await this.removeFromHub(kind, tenant, name);
    this.tenants.delete(key);
  }

  private async removeFromHub(kind: ManifestKind, tenantCode: string, name: string): Promise<void> {
    const tenant = await this.tenant(tenantCode);
    if (!tenant) return;
    const removed = await this.options.manifests.remove(kind, tenant.id, name);
    if (removed) logger().info({ kind: kind.kind, name, tenant: tenantCode }, `${kind.kind} ${name} deleted from tenant ${tenantCode}`);
  }

  private async read(kind: ManifestKind, namespace: string, name: string): Promise<Resource | undefined> {
    try {
      return (await this.custom.getNamespacedCustomObject({ group: kind.group, version: kind.version, plural: kind.plural, namespace, name })) as Resource;
    } catch (err) {
      if (apiStatus(err) === 404) return undefined;
      throw err;
    }
  }

  private async replace(kind: ManifestKind, resource: Resource): Promise<Resource> {
    try {
      return (await this.custom.replaceNamespacedCustomObject({ group: kind.group, version: kind.version, plural: kind.plural, namespace: resource.metadata.namespace, name: resource.metadata.name, body: resource })) as Resource;
    } catch (err) {
      if (apiStatus(err) === 409) throw new Conflict(`${kind.kind} ${resource.metadata.name} changed meanwhile`);
      throw err;
    }
  }

  private async writeStatus(kind: ManifestKind, resource: Resource, status: ResourceStatus): Promise<void> {
    const body = { apiVersion: resource.apiVersion, kind: resource.kind, metadata: { name: resource.metadata.name, namespace: resource.metadata.namespace, resourceVersion: resource.metadata.resourceVersion }, status };
    try {
      await this.custom.replaceNamespacedCustomObjectStatus({ group: kind.group, version: kind.version, plural: kind.plural, namespace: resource.metadata.namespace, name: resource.metadata.name, body });
    } catch (err) {
      if (apiStatus(err) === 409) throw new Conflict(`${kind.kind} ${resource.metadata.name} changed meanwhile`);
      throw err;
    }
  }

  /** A Kubernetes Event when the Ready condition changes (best effort: `kubectl describe` shows it). */
  private announce(kind: ManifestKind, resource: Resource, previous: ResourceStatus, next: ResourceStatus): void {
    const before = previous.conditions?.find((c) => c.type === 'Ready');
    const after = next.conditions?.find((c) => c.type === 'Ready');
    if (!after || (before && before.status === after.status && before.reason === after.reason && before.message === after.message)) return;
    const at = this.now();
    const body = {
      metadata: { generateName: `${resource.metadata.name}.`, namespace: resource.metadata.namespace },
      involvedObject: { apiVersion: resource.apiVersion, kind: kind.kind, name: resource.metadata.name, namespace: resource.metadata.namespace, uid: resource.metadata.uid, resourceVersion: resource.metadata.resourceVersion },
      reason: after.reason,
      message: after.message,
      type: after.status === 'True' ? 'Normal' : 'Warning',
      source: { component: MANAGED_BY },
      firstTimestamp: at,
      lastTimestamp: at,
      count: 1,
    };
    void this.core.createNamespacedEvent({ namespace: resource.metadata.namespace, body }).catch((err: unknown) => logger().debug({ err: (err as Error).message }, 'cannot record a Kubernetes Event'));
  }
}
