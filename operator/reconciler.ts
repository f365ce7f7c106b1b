import {
  BatchV1Api,
  CoreV1Api,
  CustomObjectsApi,
  type KubeConfig,
  makeInformer,
  type V1PodTemplateSpec,
} from '@kubernetes/client-node';
import { apiStatus } from '../kube/kube-config.js';
import { ValidationError } from '../src/errors.js';
import { canonical } from '../src/manifests/canonical.js';
import type { ManifestKind } from '../src/manifests/kinds.js';
import type { ManifestServices } from '../src/manifests/services.js';
import { logger } from '../src/observability/logger.js';
import { syncCronJob } from './cronjob.js';
import { hasFinalizer, withFinalizer, withoutFinalizer } from './finalizer.js';
import { ReconcileQueue } from './queue.js';
import { type Condition, Conflict, manifestOf, readResource, replaceResource, type Resource, type ResourceStatus, writeStatus } from './resource.js';
import { announce, condition, keepTransitions } from './status.js';
import { resolveTenant } from './tenant.js';

/**
 * The operator's reconciler: custom resources of every registered manifest
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
    const resource = await readResource(this.custom, kind, namespace, name);
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
    if (!hasFinalizer(current)) {
      current = await replaceResource(this.custom, kind, withFinalizer(current));
    }

    const previous = current.status ?? {};
    const generation = current.metadata.generation;
    const conditions: Condition[] = [];
    let tenantCode = previous.tenant;
    let lastRun = previous.lastRun;
    let retry: Error | undefined;

    const tenant = await resolveTenant(this.core, this.options.manifests, current);
    if ('problem' in tenant) {
      conditions.push(condition(this.now(), 'Ready', 'False', 'TenantUnresolved', tenant.problem, generation));
      const scheduled = previous.conditions?.find((c) => c.type === 'Scheduled');
      if (scheduled) conditions.push(scheduled);
    } else {
      if (previous.tenant && previous.tenant !== tenant.code) await this.removeFromHub(kind, previous.tenant, name);
      const applied = await this.apply(kind, current, tenant);
      if (!applied.ok) {
        conditions.push(condition(this.now(), 'Ready', 'False', 'Invalid', applied.message, generation));
        const scheduled = previous.conditions?.find((c) => c.type === 'Scheduled');
        if (scheduled) conditions.push(scheduled);
        if (previous.tenant !== tenant.code) tenantCode = undefined;
      } else {
        tenantCode = tenant.code;
        conditions.push(condition(this.now(), 'Ready', 'True', 'Applied', `applied to tenant ${tenant.code}${applied.warnings.length ? `; warnings: ${applied.warnings.join('; ')}` : ''}`, generation));
        if (kind.handler.runArgs) {
          try {
            const scheduled = await syncCronJob(this.batch, this.now(), { template: this.options.runJobTemplate, path: this.options.runJobTemplatePath }, kind, current, tenant.code, applied.schedule);
            if (scheduled) conditions.push({ ...scheduled, observedGeneration: generation });
          } catch (err) {
            retry = err as Error;
            conditions.push(condition(this.now(), 'Scheduled', 'Unknown', 'CronJobFailed', `cannot write the CronJob: ${(err as Error).message.split('\n')[0]}`, generation));
          }
        }
        if (kind.lastRun) lastRun = await this.options.manifests.lastRun(kind, tenant.id, current.metadata.name);
      }
    }

    const status: ResourceStatus = { observedGeneration: generation };
    if (tenantCode) status.tenant = tenantCode;
    status.conditions = keepTransitions(previous, conditions);
    if (lastRun) status.lastRun = lastRun;
    if (canonical(status) !== canonical(previous)) {
      await writeStatus(this.custom, kind, current, status);
      announce(this.core, this.now(), kind, current, previous, status);
    }
    if (tenantCode) this.tenants.set(key, tenantCode);
    if (retry) throw retry;
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

  private async finalize(kind: ManifestKind, key: string, resource: Resource): Promise<void> {
    if (!hasFinalizer(resource)) return;
    const tenant = resource.status?.tenant ?? this.tenants.get(key);
    if (tenant) await this.removeFromHub(kind, tenant, resource.metadata.name);
    await replaceResource(this.custom, kind, withoutFinalizer(resource));
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
}
