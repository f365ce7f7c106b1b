import {
  BatchV1Api,
  CoreV1Api,
  CustomObjectsApi,
  type KubeConfig,
  makeInformer,
  type V1CronJob,
  type V1PodTemplateSpec,
} from '@kubernetes/client-node';
import { apiStatus } from '../kube/kube-config.js';
import { ValidationError } from '../src/errors.js';
import { canonical } from '../src/manifests/canonical.js';
import type { ManifestKind } from '../src/manifests/kinds.js';
import type { ManifestServices } from '../src/manifests/services.js';
import { logger } from '../src/observability/logger.js';
import { cronJobOwner, deleteCronJob, deleteCronJobsOf, instanceSelector, matchesSelector, type RunTemplate, syncCronJob } from './cronjob.js';
import { hasFinalizer, withFinalizer, withoutFinalizer } from './finalizer.js';
import { ReconcileQueue } from './queue.js';
import { type Condition, Conflict, manifestOf, replaceResource, type Resource, type ResourceStatus, writeStatus } from './resource.js';
import { announce, condition, keepTransitions, MANAGED_BY } from './status.js';
import { resolveTenant } from './tenant.js';

/**
 * The operator's reconciler: custom resources of every registered manifest
 * kind (src/manifests/kinds.ts) become hub state through the kind's own apply service, the same one
 * its HTTP path calls; their `spec.schedule` becomes a CronJob in the release's namespace; what
 * happened is written back on the resource's status. Nothing here is kind-specific: a kind joins by
 * registering its schema and its ManifestHandler.
 *
 * Work happens in leadership terms: `start` (this process now leads) builds a fresh term (a work
 * queue, one informer per kind and watched namespace, an informer on the operator's CronJobs, the
 * workers, the resync and run-poll timers, and the per-term memory); `stop` (leadership lost, or
 * shutdown) ends it for good. A later `start` builds everything again, so an operator that loses its
 * Lease and wins it back reconciles exactly as after a fresh start.
 *
 * One reconcile reads the resource from its informer's cache, then: finalizer first (so a delete can
 * always clean up), tenant (label on the resource, else on its Namespace), apply when the hub's copy
 * differs, the CronJob, `lastRun`, and the status, written only when it changed (so a status write,
 * which the watch reports back, ends in a no-op reconcile instead of a loop). Writes carry the
 * cached resourceVersion: a cache behind the server meets a 409 and the key is retried. A permanent
 * problem (invalid manifest, no tenant) is reported on the Ready condition and not retried until the
 * resource, its Namespace or the periodic resync says otherwise; anything else (API or database
 * unavailable, resourceVersion conflict) is retried with exponential backoff, all retries together
 * held to an overall rate (queue.ts).
 */

export interface OperatorOptions {
  kinds: readonly ManifestKind[];
  /** What the operator does in the hub: the manifest area's services (no database handle here). */
  manifests: ManifestServices;
  kc: KubeConfig;
  /** The namespaces watched (one informer per kind and namespace); empty or undefined: all namespaces. */
  namespaces?: readonly string[];
  /**
   * This operator's instance: only resources labelled `svc.io/operator-instance=<instance>` are
   * reconciled; undefined or empty: only resources without that label.
   */
  instance?: string;
  /** The release's namespace, where every CronJob goes (the operator's own, POD_NAMESPACE). */
  cronJobNamespace: string;
  /** Every resource is reconciled again this often (refreshes `lastRun`, repairs drift, removes orphaned CronJobs). */
  resyncEvery: number;
  /** How often runs that started or ended are looked for, to refresh their resources' `lastRun` at once; 0: only on resync. */
  runPollEvery?: number;
  backoffBase: number;
  backoffMax: number;
  /** Retries a second across all resources (default 10) and their burst (default 100): queue.ts. */
  qps?: number;
  burst?: number;
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

type Informer<T> = ReturnType<typeof makeInformer<T & { metadata: NonNullable<Resource['metadata']> }>>;

interface Watched<T> {
  /** What it watches, for logs. */
  what: string;
  informer: Informer<T>;
  /** A list succeeded in this term (client-go's HasSynced: it stays true across watch restarts). */
  synced: boolean;
  restart?: NodeJS.Timeout;
}

/** Everything one leadership term owns; nothing survives into the next. */
class Term {
  readonly resources: Array<Watched<Resource> & { kind: ManifestKind; namespace: string | undefined }> = [];
  cronJobs: Watched<V1CronJob> | undefined;
  readonly workers: Promise<void>[] = [];
  alive = 0;
  active = true;
  /** Set once start() has finished starting the informers and workers. */
  started = false;
  resync: NodeJS.Timeout | undefined;
  runPoll: NodeJS.Timeout | undefined;
  /** Database time of the last look for runs. */
  runsSeenAt: Date | undefined;
  /** Resources whose CronJob of the old layout (in their own namespace) was looked for. */
  readonly legacyChecked = new Set<string>();

  constructor(readonly queue: ReconcileQueue) {}
}

/** What the operator's readiness check reports (cmd/operator.ts). */
export interface OperatorHealth {
  reconciling: boolean;
  data: Record<string, unknown>;
}

export class Operator {
  private readonly custom: CustomObjectsApi;
  private readonly core: CoreV1Api;
  private readonly batch: BatchV1Api;
  private term: Term | undefined;
  /** The last known tenant of resources, for cleaning up after one deleted without its finalizer (per term). */
  private readonly tenants = new Map<string, string>();
  private readonly now: () => Date;
  private readonly namespaces: readonly string[];
  private readonly instance: string | undefined;
  private readonly selector: string;

  constructor(private readonly options: OperatorOptions) {
    this.custom = options.kc.makeApiClient(CustomObjectsApi);
    this.core = options.kc.makeApiClient(CoreV1Api);
    this.batch = options.kc.makeApiClient(BatchV1Api);
    this.now = options.now ?? (() => new Date());
    this.namespaces = [...new Set((options.namespaces ?? []).map((n) => n.trim()).filter(Boolean))];
    this.instance = options.instance?.trim() || undefined;
    this.selector = instanceSelector(this.instance);
  }

  /** Starts a term: the informers and the workers (call it once this process leads). */
  async start(): Promise<void> {
    if (this.term) return;
    const term = new Term(new ReconcileQueue({ backoffBase: this.options.backoffBase, backoffMax: this.options.backoffMax, qps: this.options.qps, burst: this.options.burst }));
    this.term = term;
    this.tenants.clear();
    for (const kind of this.options.kinds) {
      for (const namespace of this.namespaces.length ? this.namespaces : [undefined]) {
        const informer = makeInformer<Resource>(this.options.kc, this.watchPath(kind, namespace), () => this.list(kind, namespace), this.selector);
        const watched = { kind, namespace, informer, synced: false, what: `${kind.plural}.${kind.group} in ${namespace ? `namespace ${namespace}` : 'all namespaces'}` };
        const enqueue = (o: Resource) => {
          if (this.selects(o)) term.queue.add(this.keyOf(kind, o.metadata.namespace, o.metadata.name));
        };
        informer.on('add', enqueue);
        informer.on('update', enqueue);
        // Deleted: the reconcile cleans up. A resource that left this instance's selection (its label
        // changed; the API server reports it deleted from the selection) is no longer ours: left alone.
        informer.on('delete', enqueue);
        term.resources.push(watched);
      }
    }
    const cronJobs = makeInformer<V1CronJob & { metadata: NonNullable<Resource['metadata']> }>(
      this.options.kc,
      `/apis/batch/v1/namespaces/${this.options.cronJobNamespace}/cronjobs`,
      () => this.batch.listNamespacedCronJob({ namespace: this.options.cronJobNamespace, labelSelector: this.cronJobSelector() }) as never,
      this.cronJobSelector(),
    );
    // An edited or deleted CronJob: its resource is reconciled, which puts the CronJob back. Status
    // updates (the CronJob controller writes lastScheduleTime every slot) change neither the
    // generation nor the labels: they are not worth a reconcile.
    const seen = new Map<string, string>();
    const fingerprint = (job: V1CronJob) => canonical({ generation: job.metadata?.generation, labels: job.metadata?.labels ?? {}, annotations: job.metadata?.annotations ?? {} });
    const fromCronJob = (change: 'add' | 'update' | 'delete') => (job: V1CronJob) => {
      const id = `${job.metadata?.namespace}/${job.metadata?.name}`;
      const before = seen.get(id);
      const now = fingerprint(job);
      if (change === 'delete') seen.delete(id);
      else seen.set(id, now);
      if (change === 'add' || (change === 'update' && before === now)) return;
      const key = this.ownerKey(job);
      if (key) term.queue.add(key);
    };
    cronJobs.on('add', fromCronJob('add'));
    cronJobs.on('update', fromCronJob('update'));
    cronJobs.on('delete', fromCronJob('delete'));
    term.cronJobs = { informer: cronJobs, synced: false, what: `cronjobs.batch in namespace ${this.options.cronJobNamespace}` };
    for (const watched of [...term.resources, term.cronJobs] as Watched<unknown>[]) {
      watched.informer.on('error', (err: unknown) => {
        if (!term.active) return;
        const delay = Math.min(this.options.backoffMax, Math.max(this.options.backoffBase, 1_000));
        logger().warn({ err: (err as Error)?.message }, `watch of ${watched.what} failed; restarting in ${delay} ms`);
        if (watched.restart) clearTimeout(watched.restart);
        watched.restart = setTimeout(() => void this.startInformer(term, watched), delay);
      });
      await this.startInformer(term, watched);
      if (!term.active) return;
    }
    term.resync = setInterval(() => this.resyncAll(), this.options.resyncEvery);
    term.resync.unref();
    if (this.options.runPollEvery) {
      let polling = false;
      term.runPoll = setInterval(() => {
        if (polling) return;
        polling = true;
        void this.pollRuns().finally(() => {
          polling = false;
        });
      }, this.options.runPollEvery);
      term.runPoll.unref();
    }
    for (let i = 0; i < (this.options.workers ?? 2); i++) term.workers.push(this.work(term));
    term.started = true;
    void this.removeOrphanedCronJobs();
    logger().info(
      `operator reconciling ${this.options.kinds.map((k) => `${k.plural}.${k.group}`).join(', ')} in ${this.namespaces.length ? `namespaces ${this.namespaces.join(', ')}` : 'all namespaces'} (${this.instance ? `instance ${this.instance}` : 'no instance label'}); CronJobs in ${this.options.cronJobNamespace}`,
    );
  }

  /** Ends the term: stops watching and working; a reconcile under way finishes first. */
  async stop(): Promise<void> {
    const term = this.term;
    if (!term) return;
    this.term = undefined;
    term.active = false;
    if (term.resync) clearInterval(term.resync);
    if (term.runPoll) clearInterval(term.runPoll);
    const all = [...term.resources, ...(term.cronJobs ? [term.cronJobs] : [])] as Watched<unknown>[];
    for (const w of all) if (w.restart) clearTimeout(w.restart);
    term.queue.close();
    for (const w of all) await w.informer.stop();
    await Promise.all(term.workers);
  }

  /** Whether this operator reconciles: a term whose informers all listed once and whose workers all run. */
  health(): OperatorHealth {
    const term = this.term;
    if (!term) return { reconciling: false, data: { reason: 'not started' } };
    if (!term.started) return { reconciling: false, data: { reason: 'starting' } };
    const watched = [...term.resources, ...(term.cronJobs ? [term.cronJobs] : [])] as Watched<unknown>[];
    const unsynced = watched.filter((w) => !w.synced).map((w) => w.what);
    const workers = this.options.workers ?? 2;
    const data: Record<string, unknown> = { workers: term.alive, queued: term.queue.length };
    if (unsynced.length) data.unsynced = unsynced;
    return { reconciling: unsynced.length === 0 && term.alive === workers && !term.queue.isClosed, data };
  }

  /** Enqueues every resource the informers hold, and removes the CronJobs whose resource is gone. */
  resyncAll(): void {
    const term = this.term;
    if (!term) return;
    for (const { kind, informer } of term.resources) {
      for (const o of informer.list()) if (this.selects(o)) term.queue.add(this.keyOf(kind, o.metadata.namespace, o.metadata.name));
    }
    void this.removeOrphanedCronJobs();
  }

  /**
   * Deletes the operator's CronJobs whose resource no longer exists (deleted without the finalizer
   * running) or is another one of the same name (another uid). Only CronJobs of resources in
   * namespaces this operator watches, once those informers have listed.
   */
  async removeOrphanedCronJobs(): Promise<number> {
    const term = this.term;
    if (!term?.cronJobs?.synced) return 0;
    let removed = 0;
    for (const job of term.cronJobs.informer.list()) {
      if (!matchesSelector(job.metadata?.labels, this.cronJobSelector())) continue;
      const owner = cronJobOwner(job, this.options.kinds);
      if (!owner) continue;
      const watched = this.informerOf(term, owner.kind, owner.namespace);
      if (!watched?.synced) continue;
      const resource = watched.informer.get(owner.name, owner.namespace);
      if (resource && resource.metadata.uid === owner.uid && this.selects(resource)) continue;
      try {
        await deleteCronJob(this.batch, job);
        removed++;
        logger().info(`CronJob ${job.metadata?.namespace}/${job.metadata?.name} deleted: its ${owner.kind.kind} ${owner.namespace}/${owner.name} (uid ${owner.uid}) no longer exists`);
      } catch (err) {
        logger().warn({ err: (err as Error).message }, `cannot delete the orphaned CronJob ${job.metadata?.name}; trying again at the next resync`);
      }
    }
    return removed;
  }

  /** Enqueues the resources whose runs started or ended since the last look. */
  async pollRuns(): Promise<void> {
    const term = this.term;
    if (!term) return;
    try {
      // The first look of a term goes back a few minutes (the term's first reconciles read every
      // lastRun anyway); later ones overlap the previous by a second.
      const seenAt = term.runsSeenAt;
      const seen = await this.options.manifests.runsChanged(this.options.kinds, (now) =>
        seenAt ? new Date(seenAt.getTime() - 1_000) : new Date(now.getTime() - Math.min(this.options.resyncEvery, 5 * 60_000)),
      );
      term.runsSeenAt = seen.now;
      for (const { kind, informer } of term.resources) {
        const wanted = seen.changed.filter((c) => c.kind === kind);
        if (!wanted.length) continue;
        for (const o of informer.list()) {
          if (this.selects(o) && wanted.some((c) => c.name === o.metadata.name && c.tenant === o.status?.tenant)) term.queue.add(this.keyOf(kind, o.metadata.namespace, o.metadata.name));
        }
      }
    } catch (err) {
      logger().warn({ err: (err as Error).message }, 'cannot look for new runs; trying again');
    }
  }

  private async startInformer(term: Term, watched: Watched<unknown>): Promise<void> {
    if (!term.active) return;
    watched.restart = undefined;
    try {
      await watched.informer.start();
    } catch (err) {
      logger().warn({ err: (err as Error).message }, `cannot list ${watched.what}; retrying`);
    }
    // A failed list leaves no resourceVersion (the informer reported it as an error and retries).
    if (!watched.synced && (watched.informer as unknown as { latestResourceVersion(): string }).latestResourceVersion()) {
      watched.synced = true;
      // Listed late (after a failed first list): the sweep the term's start could not do.
      if (term.started) void this.removeOrphanedCronJobs();
    }
    if (!term.active) await watched.informer.stop();
  }

  /** Whether a resource is this operator instance's to reconcile (the informers' label selector, checked again). */
  private selects(resource: Resource): boolean {
    return matchesSelector(resource.metadata.labels, this.selector);
  }

  private cronJobSelector(): string {
    return `app.kubernetes.io/managed-by=${MANAGED_BY},${this.selector}`;
  }

  /** The key of the resource a CronJob of ours belongs to. */
  private ownerKey(job: V1CronJob): string | undefined {
    if (!matchesSelector(job.metadata?.labels, this.cronJobSelector())) return undefined;
    const owner = cronJobOwner(job, this.options.kinds);
    return owner ? this.keyOf(owner.kind, owner.namespace, owner.name) : undefined;
  }

  private informerOf(term: Term, kind: ManifestKind, namespace: string) {
    return term.resources.find((w) => w.kind === kind && (w.namespace === undefined || w.namespace === namespace));
  }

  /** The resource as the informer's cache holds it; undefined when it is gone. Throws (retry) while the cache has not listed. */
  private cached(kind: ManifestKind, namespace: string, name: string): Resource | undefined {
    const watched = this.term && this.informerOf(this.term, kind, namespace);
    if (!watched) throw new Error(`${kind.plural}.${kind.group} in namespace ${namespace} is not watched in this term`);
    if (!watched.synced) throw new Error(`${watched.what} not listed yet`);
    const resource = watched.informer.get(name, namespace);
    return resource ? structuredClone(resource) : undefined;
  }

  /** Where the CronJob of a schedule goes, and how it is labelled. */
  private runTarget(): RunTemplate {
    const term = this.term;
    return {
      template: this.options.runJobTemplate,
      path: this.options.runJobTemplatePath,
      namespace: this.options.cronJobNamespace,
      instance: this.instance,
      legacyChecked: term?.legacyChecked,
      orphaned: (job) => {
        const owner = cronJobOwner(job, this.options.kinds);
        const watched = owner && term && this.informerOf(term, owner.kind, owner.namespace);
        if (!owner || !watched?.synced) return false;
        return watched.informer.get(owner.name, owner.namespace)?.metadata.uid !== owner.uid;
      },
    };
  }

  private keyOf(kind: ManifestKind, namespace: string, name: string): string {
    return `${kind.plural}.${kind.group}/${namespace}/${name}`;
  }

  private watchPath(kind: ManifestKind, namespace: string | undefined): string {
    return `/apis/${kind.group}/${kind.version}/${namespace ? `namespaces/${namespace}/` : ''}${kind.plural}`;
  }

  private list(kind: ManifestKind, namespace: string | undefined) {
    const { group, version, plural } = kind;
    const labelSelector = this.selector;
    return namespace
      ? this.custom.listNamespacedCustomObject({ group, version, plural, namespace, labelSelector })
      : this.custom.listClusterCustomObject({ group, version, plural, labelSelector });
  }

  private async work(term: Term): Promise<void> {
    term.alive++;
    try {
      for (;;) {
        const key = await term.queue.get();
        if (key === undefined) return;
        try {
          await this.reconcileKey(key);
          term.queue.forget(key);
        } catch (err) {
          const delay = term.queue.addRateLimited(key);
          const conflict = err instanceof Conflict || apiStatus(err) === 409;
          logger()[conflict ? 'debug' : 'warn']({ err: (err as Error).message, key }, `reconcile of ${key} ${conflict ? 'met a newer version' : 'failed'}; again in ${delay} ms`);
        } finally {
          term.queue.done(key);
        }
      }
    } finally {
      term.alive--;
    }
  }

  async reconcileKey(key: string): Promise<void> {
    const [kindId, namespace, name] = key.split('/') as [string, string, string];
    const kind = this.options.kinds.find((k) => `${k.plural}.${k.group}` === kindId);
    if (!kind) return;
    const resource = this.cached(kind, namespace, name);
    if (!resource) {
      await this.gone(kind, key, name);
      return;
    }
    // Another operator instance's (its label changed while it waited): not ours to apply or clean up.
    if (!this.selects(resource)) return;
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
            const scheduled = await syncCronJob(this.batch, this.now(), this.runTarget(), kind, current, tenant.code, applied.schedule);
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
    // No ownerReference can reach the release namespace: the CronJob is deleted here, found by the uid label.
    if (resource.metadata.uid) await deleteCronJobsOf(this.batch, this.options.cronJobNamespace, resource.metadata.uid);
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
