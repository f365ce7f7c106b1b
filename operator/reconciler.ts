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
import type { ManifestKind } from '../src/manifests/kinds.js';
import type { ManifestOwner, ManifestServices, OwnedObject, OwnershipConflict } from '../src/manifests/services.js';
import { logger } from '../src/observability/logger.js';
import { syncCronJob } from './cronjob.js';
import { hasFinalizer, withFinalizer, withoutFinalizer } from './finalizer.js';
import { ReconcileQueue } from './queue.js';
import { type Condition, Conflict, manifestOf, readResource, replaceResource, type Resource, type ResourceStatus, writeStatus } from './resource.js';
import { announce, condition, type Health, healthConditions, keepTransitions } from './status.js';
import { resolveTenant } from './tenant.js';

/**
 * The operator's reconciler: custom resources of every registered manifest
 * kind (src/manifests/kinds.ts) become hub state through the kind's own apply service, the same one
 * its HTTP path calls; their `spec.schedule` becomes a CronJob; what happened is written back on the
 * resource's status. Nothing here is kind-specific: a kind joins by registering its schema and its
 * ManifestHandler.
 *
 * One reconcile reads the resource fresh, then: finalizer first (so a delete can always clean up),
 * Reconciling=True on a generation not reconciled yet, tenant (label on the resource, else on its
 * Namespace), apply when the hub's copy differs and the object is the resource's (the hub records
 * the owner, namespace, name and uid, in the apply's transaction; another resource's object or one
 * created over HTTP is a Conflict), the CronJob, `lastRun`, and the status, written as a merge patch
 * only when it changed (so a status write, which the watch reports back, ends in a no-op reconcile
 * instead of a loop). A permanent problem (invalid manifest, no tenant, conflict) is reported as
 * Ready=False, Stalled=True and not retried until the resource, its Namespace or the periodic resync
 * says otherwise; anything else (API or database unavailable, resourceVersion conflict) is retried
 * with exponential backoff, and written on the status (Ready=Unknown, Reconciling=True, the reason
 * naming the cause). Cleanup (finalizer, relabel, a resource gone) goes by the owner record.
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

export class Operator {
  private readonly queue: ReconcileQueue;
  private readonly custom: CustomObjectsApi;
  private readonly core: CoreV1Api;
  private readonly batch: BatchV1Api;
  private readonly informers: Array<{ kind: ManifestKind; informer: ReturnType<typeof makeInformer<Resource>> }> = [];
  /** The manifest services, failures marked as the hub's (HubUnavailable on the status). */
  private readonly hub: ManifestServices;
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
    this.hub = hubCalls(options.manifests);
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
      await this.gone(kind, namespace, name);
      return;
    }
    if (resource.metadata.deletionTimestamp) {
      await this.finalize(kind, resource);
      return;
    }
    let current = resource;
    if (!hasFinalizer(current)) {
      current = await replaceResource(this.custom, kind, withFinalizer(current));
    }

    let previous: ResourceStatus = current.status ?? {};
    const generation = current.metadata.generation;
    // A generation not reconciled yet: Reconciling=True while the operator works on it.
    const reconciling = previous.conditions?.find((c) => c.type === 'Reconciling');
    if (previous.observedGeneration !== generation && !(reconciling?.status === 'True' && reconciling.observedGeneration === generation)) {
      const ready = previous.conditions?.find((c) => c.type === 'Ready');
      const started: ResourceStatus = { ...previous, conditions: keepTransitions(previous, [...healthConditions(this.now(), generation, { state: 'progressing', ready }), ...scheduledOf(previous)]) };
      await writeStatus(this.custom, kind, current, previous, started);
      previous = started;
    }

    let status: ResourceStatus;
    let retry: Error | undefined;
    try {
      ({ status, retry } = await this.converge(kind, current, previous));
    } catch (err) {
      if (err instanceof Conflict || apiStatus(err) === 409) throw err;
      // A temporary failure: on the status as well as retried, so the resource never looks healthy meanwhile.
      retry = err as Error;
      status = { ...previous, observedGeneration: generation, conditions: [...healthConditions(this.now(), generation, { state: 'retrying', ...failureOf(err) }), ...scheduledOf(previous)] };
    }
    status.conditions = keepTransitions(previous, status.conditions ?? []);
    let wrote: boolean;
    try {
      wrote = await writeStatus(this.custom, kind, current, previous, status);
    } catch (err) {
      if (!retry) throw err;
      logger().debug({ err: (err as Error).message, key }, 'cannot write the status of a failed reconcile');
      wrote = false;
    }
    if (wrote) announce(this.core, this.now(), kind, current, previous, status);
    if (retry) throw retry;
  }

  /**
   * Tenant, ownership, apply, CronJob and `lastRun`: the status they lead to, and the error to retry
   * with (a CronJob that could not be written). Throws a temporary failure (hub or API unavailable).
   */
  private async converge(kind: ManifestKind, resource: Resource, previous: ResourceStatus): Promise<{ status: ResourceStatus; retry?: Error }> {
    const generation = resource.metadata.generation;
    const name = resource.metadata.name;
    const status = (health: Health, extra: { tenant?: string; lastRun?: ResourceStatus['lastRun']; scheduled?: Condition[] }): ResourceStatus => ({
      observedGeneration: generation,
      ...(extra.tenant ? { tenant: extra.tenant } : {}),
      conditions: [...healthConditions(this.now(), generation, health), ...(extra.scheduled ?? [])],
      ...(extra.lastRun ? { lastRun: extra.lastRun } : {}),
    });

    const tenant = await resolveTenant(this.core, this.hub, resource);
    if ('problem' in tenant) {
      // The hub keeps what the resource manages: a label may be back at the next resync.
      return { status: status({ state: 'stalled', reason: 'TenantUnresolved', message: tenant.problem }, { tenant: previous.tenant, lastRun: previous.lastRun, scheduled: scheduledOf(previous) }) };
    }
    const uid = resource.metadata.uid;
    if (!uid) throw new Error(`${kind.kind} ${resource.metadata.namespace}/${name} has no metadata.uid`);
    const owner: ManifestOwner = { namespace: resource.metadata.namespace, name, uid };

    // Relabelled to another tenant: what the resource manages elsewhere goes first.
    for (const object of await this.hub.owned(kind, { uid })) {
      if (object.tenantId !== tenant.id) await this.removeManaged(kind, object);
    }

    let applied = await this.apply(kind, resource, tenant, owner);
    if ('conflict' in applied && applied.conflict.by === 'resource' && (await this.ownerGone(kind, applied.conflict.owner))) {
      // Its owner was deleted without its finalizer (or recreated): the object goes as the owner's finalizer would have taken it.
      await this.removeManaged(kind, { tenantId: tenant.id, tenant: tenant.code, name, owner: applied.conflict.owner });
      applied = await this.apply(kind, resource, tenant, owner);
    }
    if ('conflict' in applied) {
      return { status: status({ state: 'stalled', reason: 'Conflict', message: conflictMessage(kind, name, tenant.code, applied.conflict) }, { scheduled: scheduledOf(previous) }) };
    }
    if (!applied.ok) {
      // The hub keeps the last valid version (and its CronJob).
      return { status: status({ state: 'stalled', reason: 'Invalid', message: applied.message }, { tenant: previous.tenant === tenant.code ? tenant.code : undefined, lastRun: previous.lastRun, scheduled: scheduledOf(previous) }) };
    }

    const message = `applied to tenant ${tenant.code}${applied.warnings.length ? `; warnings: ${applied.warnings.join('; ')}` : ''}`;
    let health: Health = { state: 'done', message };
    let retry: Error | undefined;
    const scheduled: Condition[] = [];
    if (kind.handler.runArgs) {
      try {
        const cronJob = await syncCronJob(this.batch, this.now(), { template: this.options.runJobTemplate, path: this.options.runJobTemplatePath }, kind, resource, tenant.code, applied.schedule);
        if (cronJob) scheduled.push({ ...cronJob, observedGeneration: generation });
      } catch (err) {
        retry = err as Error;
        const cause = firstLine(err);
        scheduled.push(condition(this.now(), 'Scheduled', 'Unknown', 'CronJobFailed', `cannot write the CronJob: ${cause}`, generation));
        health = { state: 'retrying', reason: 'CronJobFailed', message: `${message}; cannot write the CronJob: ${cause}` };
      }
    }
    const run = kind.lastRun ? await this.hub.lastRun(kind, tenant.id, name) : undefined;
    const lastRun = run ? { id: run.id, status: run.status, ...(run.endedAt ? { endedAt: run.endedAt } : {}) } : undefined;
    return { status: status(health, { tenant: tenant.code, lastRun, scheduled }), retry };
  }

  private async apply(
    kind: ManifestKind,
    resource: Resource,
    tenant: { code: string; id: number },
    owner: ManifestOwner,
  ): Promise<{ ok: true; schedule: string | null; warnings: string[] } | { ok: false; message: string } | { conflict: OwnershipConflict }> {
    const manifest = manifestOf(resource);
    const where = `${kind.kind} ${resource.metadata.namespace}/${resource.metadata.name}`;
    try {
      const result = await this.hub.applyIfChanged(kind, tenant.id, resource.metadata.name, manifest, this.actor, owner);
      if (result.conflict) return { conflict: result.conflict };
      const log = { kind: kind.kind, name: resource.metadata.name, namespace: resource.metadata.namespace, tenant: tenant.code };
      if (result.adopted) logger().info(log, `${where} adopts ${kind.kind} ${resource.metadata.name} of tenant ${tenant.code} (applied by the operator before ownership was recorded)`);
      if (result.changed) logger().info(log, `${where} ${result.created ? 'created' : 'updated'} in tenant ${tenant.code}`);
      return { ok: true as const, schedule: result.schedule, warnings: result.warnings };
    } catch (err) {
      if (err instanceof ValidationError) {
        const field = err.field && !err.message.includes(err.field) ? `${err.field}: ` : '';
        return { ok: false, message: `${field}${err.message}` };
      }
      throw err;
    }
  }

  /** Whether the resource an owner record names is gone (deleted, or replaced by one of another uid). */
  private async ownerGone(kind: ManifestKind, owner: ManifestOwner): Promise<boolean> {
    try {
      const found = await readResource(this.custom, kind, owner.namespace, owner.name);
      return !found || found.metadata.uid !== owner.uid;
    } catch (err) {
      // A namespace the operator may not read: the owner counts as alive.
      if (apiStatus(err) === 403) return false;
      throw err;
    }
  }

  /** Deleting a resource: the hub objects it manages (found by its uid), then the finalizer. */
  private async finalize(kind: ManifestKind, resource: Resource): Promise<void> {
    if (!hasFinalizer(resource)) return;
    const uid = resource.metadata.uid;
    const managed = uid ? await this.hub.owned(kind, { uid }) : [];
    for (const object of managed) await this.removeManaged(kind, object);
    const tenantCode = resource.status?.tenant;
    if (!managed.length && tenantCode) {
      // Applied before ownership was recorded and never adopted since: deleted when the operator
      // applied it last and no resource has claimed it.
      const tenant = await this.hub.tenantByCode(tenantCode);
      if (tenant && (await this.hub.removeOwned(kind, tenant.id, resource.metadata.name, { unownedAppliedBy: this.actor }))) {
        logger().info({ kind: kind.kind, name: resource.metadata.name, tenant: tenantCode }, `${kind.kind} ${resource.metadata.name} deleted from tenant ${tenantCode}`);
      }
    }
    await replaceResource(this.custom, kind, withoutFinalizer(resource));
  }

  /** A resource that is gone without our finalizer having run (removed by hand, or while no operator ran): what it managed goes. */
  private async gone(kind: ManifestKind, namespace: string, name: string): Promise<void> {
    for (const object of await this.hub.owned(kind, { namespace, name })) await this.removeManaged(kind, object);
  }

  /**
   * Deletes the hub objects whose resource is gone without the operator having seen it go (deleted
   * without its finalizer while no operator ran): every owner record of the watched namespaces
   * whose uid no resource has. The records are read before the resources are listed, so an object
   * applied meanwhile is never taken for an orphan. Meant for the start and the resync.
   */
  async collectOrphans(): Promise<number> {
    let removed = 0;
    for (const kind of this.options.kinds) {
      const records = await this.hub.owned(kind, { all: true, ...(this.options.namespace ? { namespace: this.options.namespace } : {}) });
      if (!records.length) continue;
      const listed = (await this.list(kind)) as { items?: Resource[] };
      const alive = new Set((listed.items ?? []).map((o) => o.metadata.uid));
      for (const object of records) {
        if (alive.has(object.owner.uid)) continue;
        await this.removeManaged(kind, object);
        removed++;
      }
    }
    return removed;
  }

  /**
   * Deletes a hub object while its record still names the same resource; then the other resources
   * of that kind and name (in Conflict while it existed) are reconciled again at once.
   */
  private async removeManaged(kind: ManifestKind, object: OwnedObject): Promise<void> {
    const removed = await this.hub.removeOwned(kind, object.tenantId, object.name, { uid: object.owner.uid });
    if (!removed) return;
    logger().info({ kind: kind.kind, name: object.name, tenant: object.tenant }, `${kind.kind} ${object.name} deleted from tenant ${object.tenant} (managed by ${object.owner.namespace}/${object.owner.name})`);
    for (const { kind: watched, informer } of this.informers) {
      if (watched !== kind) continue;
      for (const o of informer.list()) {
        if (o.metadata.name === object.name && o.metadata.uid !== object.owner.uid) this.queue.add(this.keyOf(kind, o.metadata.namespace, o.metadata.name));
      }
    }
  }

  private get actor(): string {
    return this.options.actor ?? 'operator';
  }
}

/** The Scheduled condition of a status, kept when a reconcile does not get as far as the CronJob. */
const scheduledOf = (status: ResourceStatus): Condition[] => status.conditions?.filter((c) => c.type === 'Scheduled') ?? [];

const firstLine = (err: unknown): string => String((err as Error)?.message ?? err).split('\n')[0]!;

/** A hub call failed for another reason than a refused manifest (the database unreachable, say). */
class HubUnavailable extends Error {
  constructor(override readonly cause: unknown) {
    super(`the hub is unavailable: ${firstLine(cause)}`);
  }
}

/** The reason and message of a temporary failure. */
function failureOf(err: unknown): { reason: string; message: string } {
  if (err instanceof HubUnavailable) return { reason: 'HubUnavailable', message: err.message };
  const message = firstLine(err);
  if (apiStatus(err) !== undefined || /fetch failed|ECONNREFUSED|ECONNRESET|ETIMEDOUT|socket hang up/i.test(message)) return { reason: 'KubernetesApiError', message: `the Kubernetes API failed: ${message}` };
  return { reason: 'ReconcileFailed', message };
}

/** The manifest services, their failures (other than a refused manifest) marked as the hub's. */
function hubCalls(m: ManifestServices): ManifestServices {
  const guard = async <T>(call: () => Promise<T>): Promise<T> => {
    try {
      return await call();
    } catch (err) {
      throw err instanceof ValidationError || err instanceof HubUnavailable ? err : new HubUnavailable(err);
    }
  };
  return {
    tenantByCode: (code) => guard(() => m.tenantByCode(code)),
    applyIfChanged: (...args) => guard(() => m.applyIfChanged(...args)),
    owned: (kind, by) => guard(() => m.owned(kind, by)),
    removeOwned: (kind, tenantId, name, by) => guard(() => m.removeOwned(kind, tenantId, name, by)),
    lastRun: (kind, tenantId, name) => guard(() => m.lastRun(kind, tenantId, name)),
    runsChanged: (kinds, since) => guard(() => m.runsChanged(kinds, since)),
  };
}

function conflictMessage(kind: ManifestKind, name: string, tenant: string, conflict: OwnershipConflict): string {
  const owner =
    conflict.by === 'resource'
      ? `is managed by ${kind.kind} ${conflict.owner.namespace}/${conflict.owner.name} (uid ${conflict.owner.uid})`
      : `was created over HTTP (last applied by ${conflict.appliedBy ?? 'unknown'})`;
  return `${kind.kind} ${name} in tenant ${tenant} ${owner}: this resource is not applied, and deleting it deletes nothing in the hub`;
}
