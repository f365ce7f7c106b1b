import { performance } from 'node:perf_hooks';
import {
  BatchV1Api,
  CoreV1Api,
  CustomObjectsApi,
  type KubeConfig,
  makeInformer,
  type V1CronJob,
  type V1Namespace,
  type V1PodTemplateSpec,
} from '@kubernetes/client-node';
import { apiStatus } from '../kube/kube-config.js';
import { OPERATOR_ACTOR } from '../src/auth/principal.js';
import { ConflictError, ValidationError } from '../src/errors.js';
import { canonical } from '../src/manifests/canonical.js';
import type { ManifestKind } from '../src/manifests/kinds.js';
import type { Fence, ManifestOwner, ManifestServices, OwnedObject, OwnershipConflict } from '../src/manifests/services.js';
import { loggableMessage } from '../src/observability/database-errors.js';
import { logger, storableMessage, storableUpstreamMessage } from '../src/observability/logger.js';
import { apiAnswer, cronJobOwner, deleteCronJob, deleteCronJobsOf, instanceSelector, KIND_LABEL, matchesSelector, RESOURCE_NAME, RESOURCE_NAMESPACE, RESOURCE_UID, type RunTemplate, syncCronJob } from './cronjob.js';
import { FINALIZER, hasFinalizer, withFinalizer, withoutFinalizer } from './finalizer.js';
import { LIST_PAGE_SIZE, listAll } from './paging.js';
import { ReconcileQueue } from './queue.js';
import { afterStatusWrite, type Condition, Conflict, manifestOf, mergePatchOf, readResource, replaceResource, type Resource, type ResourceStatus, writeStatus } from './resource.js';
import { announce, appliedMessage, appliedPartOf, CRONJOB_NOT_WRITTEN, condition, type Health, healthConditions, keepTransitions, MANAGED_BY, NOT_SCHEDULED, otherWarnings, recordEvent } from './status.js';
import { resolveTenant, TENANT_LABEL, TENANTS_ANNOTATION } from './tenant.js';

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
 * always clean up), Reconciling=True on a generation not reconciled yet, tenant (label on the
 * resource, else on its Namespace), apply when the hub's copy differs and the object is the
 * resource's (the hub records the owner, namespace, name and uid, in the apply's transaction;
 * another resource's object or one created over HTTP is a Conflict; an apply that changed the object
 * requeues the resources of kinds that name it, ManifestKind.dependsOn), the CronJob, `lastRun`, and the
 * status, written as a merge patch only when it changed; the watch event of the operator's own status
 * write (the resource as read, with that status) requeues nothing, so neither a loop nor a retry
 * before the backoff of a failed reconcile. Writes carry the cached resourceVersion: a
 * cache behind the server meets a 409 and the key is retried. A permanent problem (invalid manifest,
 * no tenant, conflict) is reported as Ready=False, Stalled=True and not retried until the resource,
 * its Namespace or the periodic resync says otherwise; anything else (API or database unavailable,
 * resourceVersion conflict) is retried with exponential backoff, all retries together held to an
 * overall rate (queue.ts), and written on the status (Ready=Unknown, Reconciling=True, the reason
 * naming the cause). Cleanup (finalizer, relabel, a resource gone) goes by the owner record.
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
  /**
   * Watching a list of namespaces: how often each of those Namespaces is read for a change of its
   * tenant label or annotation (a namespaced Role cannot grant a watch of a Namespace:
   * pollNamespaces); default NAMESPACE_POLL_EVERY (5 s); 0: only at the resync.
   */
  namespacePollEvery?: number;
  /** The longest the fence of a hub write waits for the API server's reads (ms; the write's transaction is open meanwhile); default FENCE_TIMEOUT (10 s). */
  fenceTimeout?: number;
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
  /** The longest a scheduled run's Job may be active (ms; the CronJob's `activeDeadlineSeconds`); default 6 h. */
  runDeadline?: number;
  /**
   * The ConfigMap in `cronJobNamespace` holding that template (the chart's `<release>-svc-hub-run-job`):
   * the owner of every CronJob, so that deleting it deletes them. Undefined: CronJobs have no owner.
   */
  runJobConfigMap?: string;
  workers?: number;
  /** Items asked for per list request (the informers' lists, the orphan sweep, the finalizer's CronJob lookup); default LIST_PAGE_SIZE (500). */
  listPageSize?: number;
  /** Recorded as the applying actor in the hub. */
  actor?: string;
  now?: () => Date;
  /**
   * A monotonic clock in milliseconds (default `performance.now`): what the backoff of a failed
   * reconcile and the shared retry rate (queue.ts) and the damping of a refused write's report
   * (REJECTION_REPEAT) measure with. A test moves it on instead of waiting (then calls `retryDue`).
   */
  monotonic?: () => number;
  /**
   * Whether this process may act as the leader at this moment (the elector's `isLeader`, which a
   * Lease elector bounds by the lease duration). Asked before each reconcile, before each write
   * to the hub and before each CronJob the orphan sweep deletes: an operator resumed after a pause past its lease duration (SIGSTOP, a long GC
   * pause, a frozen node) may have been replaced by another replica meanwhile, so it writes nothing
   * until a renewal confirms it still leads (or finds it does not, which ends the term); the keys
   * wait meanwhile. Undefined: always.
   */
  leading?: () => boolean;
}

type Informer<T> = ReturnType<typeof makeInformer<T & { metadata: NonNullable<Resource['metadata']> }>>;

interface Watched<T> {
  /** What it watches, for logs. */
  what: string;
  informer: Informer<T>;
  /** A list succeeded in this term (client-go's HasSynced: it stays true across watch restarts). */
  synced: boolean;
  restart?: NodeJS.Timeout;
}

/** The resourceVersion an informer saw last ('' before its first list, or after a failed one). */
const versionOf = (informer: unknown): string => (informer as { latestResourceVersion(): string }).latestResourceVersion();

/** Everything one leadership term owns; nothing survives into the next. */
class Term {
  readonly resources: Array<Watched<Resource> & { kind: ManifestKind; namespace: string | undefined }> = [];
  cronJobs: Watched<V1CronJob> | undefined;
  /** The Namespaces (watching all namespaces only): a change of their tenant label or annotation requeues their resources. */
  namespaces: Watched<V1Namespace> | undefined;
  /** Watching a list of namespaces: the timer that reads each of them, and their tenancy as last read. */
  namespacePoll: NodeJS.Timeout | undefined;
  readonly tenancy = new Map<string, string>();
  readonly workers: Promise<void>[] = [];
  alive = 0;
  /** Reconciles finished in this term (Operator.progress). */
  reconciles = 0;
  /** Work under way besides the workers' (sweeps, polls, an informer's restart, Events): Operator.progress. */
  private background = 0;

  /** Counts `work` as under way until it settles; returns it. */
  track<T>(work: Promise<T>): Promise<T> {
    this.background++;
    void work.then(
      () => this.background--,
      () => this.background--,
    );
    return work;
  }

  get busy(): boolean {
    return this.background > 0;
  }
  active = true;
  /** Set once start() has finished starting the informers and workers. */
  started = false;
  resync: NodeJS.Timeout | undefined;
  runPoll: NodeJS.Timeout | undefined;
  /** Database time of the last look for runs. */
  runsSeenAt: Date | undefined;
  /** Resources (uids) whose CronJob of the old layout (in their own namespace) was looked for; a deleted one's is forgotten. */
  readonly legacyChecked = new Set<string>();
  /**
   * Per key, the resource as each status write of the operator's not yet reported back by the watch
   * left it (afterStatusWrite), in order: their watch events are not changes.
   */
  readonly ownWrites = new Map<string, string[]>();
  /**
   * Per key, the last write of the operator's the API server refused as invalid (422) and reported
   * (an Event, a log line): the same refusal is reported again only after REJECTION_REPEAT. Taken
   * off once that write succeeds, or the resource is gone.
   */
  readonly rejected = new Map<string, { write: RefusableWrite; message: string; at: number }>();

  /**
   * Whether a watch event of the resource of `key` (as `state`, afterStatusWrite) reports one of
   * the operator's own status writes (then it and the writes before it are forgotten). Any other
   * event forgets them all: what comes after a change of someone else's is a change.
   */
  ownWrite(key: string, state: string): boolean {
    const pending = this.ownWrites.get(key);
    const at = pending?.indexOf(state) ?? -1;
    if (at < 0) {
      this.ownWrites.delete(key);
      return false;
    }
    pending!.splice(0, at + 1);
    if (!pending!.length) this.ownWrites.delete(key);
    return true;
  }

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
  /** The manifest services, failures marked as the hub's (HubUnavailable on the status). */
  private readonly hub: ManifestServices;
  private readonly now: () => Date;
  private readonly monotonic: () => number;
  private readonly namespaces: readonly string[];
  private readonly instance: string | undefined;
  private readonly selector: string;

  constructor(private readonly options: OperatorOptions) {
    this.custom = options.kc.makeApiClient(CustomObjectsApi);
    this.core = options.kc.makeApiClient(CoreV1Api);
    this.batch = options.kc.makeApiClient(BatchV1Api);
    this.now = options.now ?? (() => new Date());
    this.monotonic = options.monotonic ?? (() => performance.now());
    this.namespaces = [...new Set((options.namespaces ?? []).map((n) => n.trim()).filter(Boolean))];
    this.instance = options.instance?.trim() || undefined;
    this.selector = instanceSelector(this.instance);
    this.hub = hubCalls(options.manifests);
  }

  /** Starts a term: the informers and the workers (call it once this process leads). */
  async start(): Promise<void> {
    if (this.term) return;
    const term = new Term(
      // The namespaces take turns (keyOf: kind/namespace/name): a flood of resources in one does not hold up the others'.
      new ReconcileQueue({ backoffBase: this.options.backoffBase, backoffMax: this.options.backoffMax, qps: this.options.qps, burst: this.options.burst, now: this.monotonic, groupOf: namespaceOfKey }),
    );
    this.term = term;
    for (const kind of this.options.kinds) {
      for (const namespace of this.namespaces.length ? this.namespaces : [undefined]) {
        const informer = makeInformer<Resource>(this.options.kc, this.watchPath(kind, namespace), () => this.list(kind, namespace), this.selector);
        const watched = { kind, namespace, informer, synced: false, what: `${kind.plural}.${kind.group} in ${namespace ? `namespace ${namespace}` : 'all namespaces'}` };
        const enqueue = (o: Resource) => {
          if (this.selects(o)) term.queue.add(this.keyOf(kind, o.metadata.namespace, o.metadata.name));
        };
        informer.on('add', enqueue);
        // The operator's own status write, reported back (the resource as the reconcile read it, with
        // the status it wrote): nothing to reconcile, and a requeue would end the backoff of a failed
        // reconcile at once (it retried straight away). Any other change requeues the key.
        informer.on('update', (o: Resource) => {
          if (term.ownWrite(this.keyOf(kind, o.metadata.namespace, o.metadata.name), afterStatusWrite(o, o.status))) return;
          enqueue(o);
        });
        // Deleted: the reconcile cleans up. A resource that left this instance's selection (its label
        // changed; the API server reports it deleted from the selection) is no longer ours: left alone.
        // Its uid is forgotten too (a uid is never reused): kept, each deleted scheduled resource held
        // its entry of legacyChecked until leadership changed.
        informer.on('delete', (o: Resource) => {
          term.ownWrites.delete(this.keyOf(kind, o.metadata.namespace, o.metadata.name));
          term.rejected.delete(this.keyOf(kind, o.metadata.namespace, o.metadata.name));
          if (o.metadata.uid) term.legacyChecked.delete(o.metadata.uid);
          enqueue(o);
        });
        term.resources.push(watched);
      }
    }
    const cronJobs = makeInformer<V1CronJob & { metadata: NonNullable<Resource['metadata']> }>(
      this.options.kc,
      `/apis/batch/v1/namespaces/${this.options.cronJobNamespace}/cronjobs`,
      () =>
        listAll(
          `cronjobs.batch in namespace ${this.options.cronJobNamespace}`,
          (page) => this.batch.listNamespacedCronJob({ namespace: this.options.cronJobNamespace, labelSelector: this.cronJobSelector(), ...page }),
          this.pageSize,
        ) as never,
      this.cronJobSelector(),
    );
    // An edited or deleted CronJob: its resource is reconciled, which puts the CronJob back. Status
    // updates (the CronJob controller writes lastScheduleTime every slot) change neither the
    // generation nor the labels, annotations or owners: they are not worth a reconcile. An edit of
    // the labels or annotations naming the resource names another one: the resource it named
    // before (remembered per CronJob) is reconciled too, and takes its CronJob back.
    const seen = new Map<string, { fingerprint: string; owner: string | undefined }>();
    const fingerprint = (job: V1CronJob) =>
      canonical({ generation: job.metadata?.generation, labels: job.metadata?.labels ?? {}, annotations: job.metadata?.annotations ?? {}, owners: job.metadata?.ownerReferences ?? [] });
    const fromCronJob = (change: 'add' | 'update' | 'delete') => (job: V1CronJob) => {
      const id = `${job.metadata?.namespace}/${job.metadata?.name}`;
      const before = seen.get(id);
      const now = { fingerprint: fingerprint(job), owner: this.ownerKey(job) };
      if (change === 'delete') seen.delete(id);
      else seen.set(id, now);
      if (change === 'add' || (change === 'update' && before?.fingerprint === now.fingerprint)) return;
      for (const key of new Set([before?.owner, now.owner])) if (key) term.queue.add(key);
    };
    cronJobs.on('add', fromCronJob('add'));
    cronJobs.on('update', fromCronJob('update'));
    cronJobs.on('delete', fromCronJob('delete'));
    term.cronJobs = { informer: cronJobs, synced: false, what: `cronjobs.batch in namespace ${this.options.cronJobNamespace}` };
    if (!this.namespaces.length) term.namespaces = this.namespaceInformer(term);
    for (const watched of this.watchedOf(term)) {
      watched.informer.on('error', (err: unknown) => {
        if (!term.active) return;
        const delay = Math.min(this.options.backoffMax, Math.max(this.options.backoffBase, 1_000));
        logger().warn({ err: loggableMessage(err) }, `watch of ${watched.what} failed; restarting in ${delay} ms`);
        if (watched.restart) clearTimeout(watched.restart);
        watched.restart = setTimeout(() => void term.track(this.startInformer(term, watched)), delay);
      });
      await this.startInformer(term, watched);
      if (!term.active) return;
    }
    const namespacePollEvery = this.options.namespacePollEvery ?? NAMESPACE_POLL_EVERY;
    if (this.namespaces.length && namespacePollEvery > 0) {
      // What the Namespace informer does when watching them all (namespaceInformer): first the tenancy as it is now.
      await this.pollNamespaces(term);
      if (!term.active) return;
      let polling = false;
      term.namespacePoll = setInterval(() => {
        if (polling) return;
        polling = true;
        void term.track(this.pollNamespaces(term)).finally(() => {
          polling = false;
        });
      }, namespacePollEvery);
      term.namespacePoll.unref();
    }
    term.resync = setInterval(() => this.resyncAll(), this.options.resyncEvery);
    term.resync.unref();
    if (this.options.runPollEvery) {
      let polling = false;
      term.runPoll = setInterval(() => {
        if (polling) return;
        polling = true;
        void term.track(this.pollRuns()).finally(() => {
          polling = false;
        });
      }, this.options.runPollEvery);
      term.runPoll.unref();
    }
    for (let i = 0; i < (this.options.workers ?? 2); i++) term.workers.push(this.work(term));
    term.started = true;
    void term.track(this.removeOrphans());
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
    if (term.namespacePoll) clearInterval(term.namespacePoll);
    const all = this.watchedOf(term);
    for (const w of all) if (w.restart) clearTimeout(w.restart);
    term.queue.close();
    for (const w of all) await w.informer.stop();
    await Promise.all(term.workers);
  }

  /** How long (ms on the monotonic clock) the retry of a key that failed still waits; undefined when none waits. */
  retryIn(key: string): number | undefined {
    return this.term?.queue.delayOf(key);
  }

  /** Queues the keys whose retry is due on the monotonic clock (their timer does; a test that moves the clock by hand calls it). */
  retryDue(): string[] {
    return this.term?.queue.addDue() ?? [];
  }

  /**
   * What a test waits on instead of a quiet spell (the operator itself never asks): the reconciles
   * this term finished (failed ones not counted); whether it is idle (no key waits, is reconciled or
   * waits out a retry, and no sweep, poll, informer restart or Event is under way); and the
   * resourceVersion each informer saw last (of an event, a bookmark or its list; '' before its first list).
   * Idle, with every informer at the API server's current resourceVersion, nothing more happens
   * until something changes or a timer (resync, run poll, Namespace poll) fires.
   */
  progress(): { reconciles: number; idle: boolean; resourceVersions: string[] } {
    const term = this.term;
    if (!term) return { reconciles: 0, idle: true, resourceVersions: [] };
    return {
      reconciles: term.reconciles,
      idle: term.started && term.queue.idle && !term.busy,
      resourceVersions: this.watchedOf(term).map((w) => versionOf(w.informer)),
    };
  }

  /** An Event under way, counted while it lasts (progress); none: nothing. */
  private trackEvent(event: Promise<void> | undefined): void {
    if (event) void this.term?.track(event);
  }

  /** Whether this operator reconciles: a term whose informers all listed once and whose workers all run. */
  health(): OperatorHealth {
    const term = this.term;
    if (!term) return { reconciling: false, data: { reason: 'not started' } };
    if (!term.started) return { reconciling: false, data: { reason: 'starting' } };
    const watched = this.watchedOf(term);
    const unsynced = watched.filter((w) => !w.synced).map((w) => w.what);
    const workers = this.options.workers ?? 2;
    const data: Record<string, unknown> = { workers: term.alive, queued: term.queue.length };
    if (unsynced.length) data.unsynced = unsynced;
    return { reconciling: unsynced.length === 0 && term.alive === workers && !term.queue.isClosed, data };
  }

  /** Every informer of a term: the resources', the CronJobs', the Namespaces' (when it has one). */
  private watchedOf(term: Term): Watched<unknown>[] {
    return [...term.resources, ...(term.cronJobs ? [term.cronJobs] : []), ...(term.namespaces ? [term.namespaces] : [])] as Watched<unknown>[];
  }

  /**
   * An informer on the Namespaces (when watching all namespaces; a namespaced Role cannot grant
   * their list and watch): a change of a Namespace's tenant label or annotation, which decides its
   * resources' tenant (tenant.ts), requeues the resources of that namespace at once, instead of at
   * their next change or the resync. Other changes of a Namespace are not worth a reconcile.
   */
  private namespaceInformer(term: Term): Watched<V1Namespace> {
    const informer = makeInformer<V1Namespace & { metadata: NonNullable<Resource['metadata']> }>(
      this.options.kc,
      '/api/v1/namespaces',
      () => listAll('namespaces', (page) => this.core.listNamespace({ ...page }), this.pageSize) as never,
    );
    const seen = term.tenancy;
    const changed = (change: 'add' | 'update' | 'delete') => (ns: V1Namespace) => {
      const name = ns.metadata?.name;
      if (!name) return;
      const before = seen.get(name);
      const now = tenancyOf(ns);
      if (change === 'delete') seen.delete(name);
      else seen.set(name, now);
      // The first sight of a Namespace (the term's list, a new Namespace) and a deletion change nothing to reconcile.
      if (change === 'delete' || before === undefined || before === now) return;
      this.requeueNamespace(term, name);
    };
    informer.on('add', changed('add'));
    informer.on('update', changed('update'));
    informer.on('delete', changed('delete'));
    return { informer, synced: false, what: 'namespaces' };
  }

  /** Enqueues the resources of a namespace (its tenancy changed). */
  private requeueNamespace(term: Term, namespace: string): void {
    for (const { kind, informer } of term.resources) {
      for (const o of informer.list()) if (o.metadata.namespace === namespace && this.selects(o)) term.queue.add(this.keyOf(kind, namespace, o.metadata.name));
    }
  }

  /**
   * Watching a list of namespaces, each Namespace is read (GET, which the namespaced Role of the
   * chart grants on that Namespace by name) and a change of its tenancy since the last read
   * requeues its resources, as the Namespace informer does when watching them all. No watch: a
   * Namespace is cluster-scoped, and a watch of it (a list of `namespaces` with a
   * `metadata.name` field selector) is authorised at the cluster scope only, which a Role bound in
   * the namespace does not reach. A Namespace that cannot be read is tried again at the next poll.
   */
  private async pollNamespaces(term: Term): Promise<void> {
    for (const name of this.namespaces) {
      if (!term.active) return;
      let ns: V1Namespace | undefined;
      try {
        ns = await this.core.readNamespace({ name });
      } catch (err) {
        if (apiStatus(err) !== 404) {
          logger().debug({ err: loggableMessage(err) }, `cannot read namespace ${name}; trying again`);
          continue;
        }
      }
      const now = tenancyOf(ns);
      const before = term.tenancy.get(name);
      term.tenancy.set(name, now);
      if (before !== undefined && before !== now) this.requeueNamespace(term, name);
    }
  }

  /** Enqueues every resource the informers hold, and removes the CronJobs whose resource is gone. */
  resyncAll(): void {
    const term = this.term;
    if (!term) return;
    for (const { kind, informer } of term.resources) {
      for (const o of informer.list()) if (this.selects(o)) term.queue.add(this.keyOf(kind, o.metadata.namespace, o.metadata.name));
    }
    void term.track(this.removeOrphans());
  }

  /** The hub objects and the CronJobs whose resource is gone (best effort; the next resync tries again). */
  private async removeOrphans(): Promise<void> {
    try {
      await this.collectOrphans();
    } catch (err) {
      logger().warn({ err: loggableMessage(err) }, 'cannot look for hub objects whose resource is gone; trying again at the next resync');
    }
    await this.removeOrphanedCronJobs();
  }

  /**
   * Deletes the operator's CronJobs whose resource no longer exists (deleted without the finalizer
   * running; one created again under the same name is another resource, of another uid): those
   * whose uid label no resource of this instance has (cronJobResource). Only CronJobs labelled with
   * a namespace this operator watches, once the informer of that namespace has listed.
   */
  async removeOrphanedCronJobs(): Promise<number> {
    const term = this.term;
    if (!term?.cronJobs?.synced) return 0;
    let removed = 0;
    const alive = new Map<ManifestKind, Set<string>>();
    for (const job of term.cronJobs.informer.list()) {
      // Not sure it leads (resumed after a pause): its cache may be older than the new leader's CronJobs.
      if (this.options.leading && !this.options.leading()) return removed;
      if (!matchesSelector(job.metadata?.labels, this.cronJobSelector())) continue;
      const { owner, gone } = this.cronJobResource(term, job, alive);
      if (!owner || !gone) continue;
      try {
        // As cached: a CronJob changed since (relabelled for another instance, put back by a reconcile) is not this sweep's to judge.
        if (!(await deleteCronJob(this.batch, job, true))) continue;
        removed++;
        logger().info(`CronJob ${job.metadata?.namespace}/${job.metadata?.name} deleted: no ${owner.kind.kind} of uid ${owner.uid} exists (it named ${owner.namespace}/${owner.name ?? '?'})`);
      } catch (err) {
        logger().warn({ err: loggableMessage(err) }, `cannot delete the orphaned CronJob ${job.metadata?.name}; trying again at the next resync`);
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
      const seen = await this.hub.runsChanged(this.options.kinds, (now) =>
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
      logger().warn({ err: loggableMessage(err) }, 'cannot look for new runs; trying again');
    }
  }

  private async startInformer(term: Term, watched: Watched<unknown>): Promise<void> {
    if (!term.active) return;
    watched.restart = undefined;
    try {
      await watched.informer.start();
    } catch (err) {
      logger().warn({ err: loggableMessage(err) }, `cannot list ${watched.what}; retrying`);
    }
    // A failed list leaves no resourceVersion (the informer reported it as an error and retries).
    if (!watched.synced && versionOf(watched.informer)) {
      watched.synced = true;
      // Listed late (after a failed first list): the sweep the term's start could not do.
      if (term.started) void term.track(this.removeOrphanedCronJobs());
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

  /**
   * The resource a CronJob of ours belongs to (its kind, namespace and uid labels; its name
   * annotation, if any), and whether it is gone: no resource of this instance in this term's caches
   * of that kind has the CronJob's uid. Decided by the uid alone: the namespace and name labels may
   * have been edited, and name a resource of another uid (created again under the name, or another
   * one) or none, while the resource whose uid it carries lives; a uid is never reused. `gone` is
   * false when the CronJob carries no kind, namespace or uid label, when its namespace is not one
   * this operator watches (another operator's to judge), and while the cache of that namespace has
   * not listed; the uids looked in are those of every cache of the kind that has (one that cannot
   * list, a namespace the operator may not read, holds up no other namespace's sweep). `alive`
   * keeps the uids of each kind for a sweep (one pass over the caches per kind).
   */
  private cronJobResource(term: Term, job: V1CronJob, alive = new Map<ManifestKind, Set<string>>()): { owner?: { kind: ManifestKind; namespace: string; name?: string; uid: string }; gone: boolean } {
    const labels = job.metadata?.labels ?? {};
    const kind = this.options.kinds.find((k) => k.kind.toLowerCase() === labels[KIND_LABEL]);
    const namespace = labels[RESOURCE_NAMESPACE];
    const uid = labels[RESOURCE_UID];
    if (!kind || !namespace || !uid) return { gone: false };
    const owner = { kind, namespace, name: job.metadata?.annotations?.[RESOURCE_NAME] ?? labels[RESOURCE_NAME], uid };
    if (!this.informerOf(term, kind, namespace)?.synced) return { owner, gone: false };
    let uids = alive.get(kind);
    if (!uids) {
      const listed = term.resources.filter((w) => w.kind === kind && w.synced);
      uids = new Set(listed.flatMap((w) => w.informer.list().filter((o) => this.selects(o)).map((o) => o.metadata.uid!)));
      alive.set(kind, uids);
    }
    return { owner, gone: !uids.has(uid) };
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
      runDeadline: this.options.runDeadline,
      legacyChecked: term?.legacyChecked,
      orphaned: (job) => (term ? this.cronJobResource(term, job).gone : false),
      ownerConfigMap: this.options.runJobConfigMap ? { name: this.options.runJobConfigMap, uid: () => this.runJobConfigMapUid() } : undefined,
    };
  }

  /**
   * The uid of the run template's ConfigMap as it is now. Gone (the release being uninstalled) or
   * unreadable: an error, so that no CronJob is written without its owner (it would outlive the
   * release); the reconcile is retried.
   */
  private async runJobConfigMapUid(): Promise<string> {
    const name = this.options.runJobConfigMap!;
    const namespace = this.options.cronJobNamespace;
    let uid: string | undefined;
    try {
      uid = (await this.core.readNamespacedConfigMap({ name, namespace })).metadata?.uid;
    } catch (err) {
      const status = apiStatus(err);
      if (status !== 404 && status !== 403) throw err;
      uid = undefined;
    }
    if (!uid) throw new Error(`the ConfigMap ${namespace}/${name} (the run pod template, owner of every CronJob) cannot be read: no CronJob is written without its owner`);
    return uid;
  }

  private keyOf(kind: ManifestKind, namespace: string, name: string): string {
    return `${kind.plural}.${kind.group}/${namespace}/${name}`;
  }

  private watchPath(kind: ManifestKind, namespace: string | undefined): string {
    return `/apis/${kind.group}/${kind.version}/${namespace ? `namespaces/${namespace}/` : ''}${kind.plural}`;
  }

  /** The informer's list: this instance's resources of a kind (in a namespace, or all), page by page. */
  private list(kind: ManifestKind, namespace: string | undefined) {
    return this.listResources(kind, namespace, this.selector);
  }

  /** Every resource of a kind in a namespace (or all), of the label selector's if one is given, read page by page. */
  private listResources(kind: ManifestKind, namespace: string | undefined, labelSelector?: string) {
    const { group, version, plural } = kind;
    const selected = labelSelector ? { labelSelector } : {};
    return listAll<Resource>(
      `${plural}.${group} in ${namespace ? `namespace ${namespace}` : 'all namespaces'}`,
      (page) =>
        namespace
          ? this.custom.listNamespacedCustomObject({ group, version, plural, namespace, ...selected, ...page })
          : this.custom.listClusterCustomObject({ group, version, plural, ...selected, ...page }),
      this.pageSize,
    );
  }

  private get pageSize(): number {
    return this.options.listPageSize ?? LIST_PAGE_SIZE;
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
          term.reconciles++;
        } catch (err) {
          const delay = term.queue.addRateLimited(key);
          const conflict = err instanceof Conflict || apiStatus(err) === 409;
          const what = conflict ? 'met a newer version' : err instanceof NotLeading ? 'waits: the leadership is not confirmed' : 'failed';
          // A write refused as invalid (WriteRejected) was reported already, once (reportRejected).
          const quiet = conflict || err instanceof NotLeading || err instanceof WriteRejected;
          logger()[quiet ? 'debug' : 'warn']({ err: loggableMessage(err), key }, `reconcile of ${key} ${what}; again in ${delay} ms`);
        } finally {
          term.queue.done(key);
        }
      }
    } finally {
      term.alive--;
    }
  }

  async reconcileKey(key: string): Promise<void> {
    this.mustLead();
    const [kindId, namespace, name] = key.split('/') as [string, string, string];
    const kind = this.options.kinds.find((k) => `${k.plural}.${k.group}` === kindId);
    if (!kind) return;
    const resource = this.cached(kind, namespace, name);
    if (!resource) {
      this.term?.rejected.delete(key);
      await this.gone(kind, namespace, name);
      return;
    }
    // Another operator instance's (its label changed while it waited): not ours to apply or clean up.
    if (!this.selects(resource)) return;
    if (resource.metadata.deletionTimestamp) {
      await this.finalize(kind, resource);
      return;
    }
    let current = resource;
    if (!hasFinalizer(current)) {
      const before = current;
      current = await this.refusable(key, kind, before, 'finalizer', () => replaceResource(this.custom, kind, withFinalizer(before)));
    }

    let previous: ResourceStatus = current.status ?? {};
    const generation = current.metadata.generation;
    // A generation not reconciled yet: Reconciling=True while the operator works on it.
    const reconciling = previous.conditions?.find((c) => c.type === 'Reconciling');
    if (previous.observedGeneration !== generation && !(reconciling?.status === 'True' && reconciling.observedGeneration === generation)) {
      const ready = previous.conditions?.find((c) => c.type === 'Ready');
      const started: ResourceStatus = { ...previous, conditions: keepTransitions(previous, [...healthConditions(this.now(), generation, { state: 'progressing', ready }), ...scheduledOf(previous)]) };
      current = (await this.writeStatus(key, kind, current, previous, started)) ?? current;
      previous = started;
    }

    let status: ResourceStatus;
    let retry: Error | undefined;
    try {
      ({ status, retry } = await this.converge(kind, current, previous));
    } catch (err) {
      if (err instanceof Conflict || err instanceof NotLeading || apiStatus(err) === 409) throw err;
      // A temporary failure: on the status as well as retried, so the resource never looks healthy meanwhile.
      retry = err as Error;
      status = { ...previous, observedGeneration: generation, conditions: [...healthConditions(this.now(), generation, { state: 'retrying', ...failureOf(err) }), ...scheduledOf(previous)] };
    }
    status.conditions = keepTransitions(previous, status.conditions ?? []);
    let wrote: boolean;
    try {
      wrote = (await this.writeStatus(key, kind, current, previous, status)) !== undefined;
    } catch (err) {
      if (!retry) throw err;
      logger().debug({ err: loggableMessage(err), key }, 'cannot write the status of a failed reconcile');
      wrote = false;
    }
    if (wrote) this.trackEvent(announce(this.core, this.now(), kind, current, previous, status));
    if (retry) throw retry;
  }

  /**
   * writeStatus (resource.ts), remembering first what the write leaves on the server, so that the
   * watch event it causes is known for the operator's own (Term.ownWrites). Remembered before the
   * write: the event may come before the write's answer.
   */
  private async writeStatus(key: string, kind: ManifestKind, resource: Resource, previous: ResourceStatus, status: ResourceStatus): Promise<Resource | undefined> {
    if (mergePatchOf(previous, status) === undefined) return undefined;
    const term = this.term;
    const state = afterStatusWrite(resource, status);
    if (term) term.ownWrites.set(key, [...(term.ownWrites.get(key) ?? []), state]);
    try {
      return await this.refusable(key, kind, resource, 'status', () => writeStatus(this.custom, kind, resource, previous, status));
    } catch (err) {
      // Refused: nothing was written, so no watch event will report it back.
      const pending = term?.ownWrites.get(key);
      const at = err instanceof WriteRejected && pending ? pending.lastIndexOf(state) : -1;
      if (at >= 0) {
        pending!.splice(at, 1);
        if (!pending!.length) term!.ownWrites.delete(key);
      }
      throw err;
    }
  }

  /**
   * A write of the resource (its status, or its finalizer added or removed), reported when the API
   * server refuses it as invalid (422): on a cluster before Kubernetes 1.30 every write validates
   * the whole resource against its CRD, so a resource stored before a stricter CRD was installed has
   * each of them refused, for ever, while its status cannot say why. The refusal goes on the
   * resource as a Warning Event (`StatusRejected` or `FinalizerRejected`) and in one log line, both
   * at most once per REJECTION_REPEAT while the answer stays the same (reportRejected); the
   * reconcile then fails with WriteRejected and is retried with the backoff of any failed reconcile.
   */
  private async refusable<T>(key: string, kind: ManifestKind, resource: Resource, write: RefusableWrite, call: () => Promise<T>): Promise<T> {
    let result: T;
    try {
      result = await call();
    } catch (err) {
      if (apiStatus(err) !== 422) throw err;
      this.reportRejected(key, kind, resource, write, err);
      throw new WriteRejected(err);
    }
    if (this.term?.rejected.get(key)?.write === write) this.term.rejected.delete(key);
    return result;
  }

  /** The Event and the log line of a write refused as invalid, unless the same refusal was reported less than REJECTION_REPEAT ago. */
  private reportRejected(key: string, kind: ManifestKind, resource: Resource, write: RefusableWrite, err: unknown): void {
    const term = this.term;
    const message = rejectionMessage(write, err);
    const at = this.monotonic();
    const last = term?.rejected.get(key);
    if (last && last.write === write && last.message === message && at - last.at < REJECTION_REPEAT) return;
    term?.rejected.set(key, { write, message, at });
    const reason = write === 'status' ? 'StatusRejected' : 'FinalizerRejected';
    const { namespace, name } = resource.metadata;
    this.trackEvent(recordEvent(this.core, this.now(), kind, resource, 'Warning', reason, message));
    logger().warn(
      { kind: kind.kind, namespace, name, reason },
      `${kind.kind} ${namespace}/${name}: ${message} (a Warning Event ${reason} is on the resource; this line comes again only when the answer changes, or after ${REJECTION_REPEAT / 60_000} min)`,
    );
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
    // With its generation: the hub refuses a manifest older than the one it holds of this resource (apply, below).
    const owner: ManifestOwner = { namespace: resource.metadata.namespace, name, uid, generation };

    // Relabelled to another tenant: what the resource manages elsewhere goes first, once the new
    // tenant would take the manifest from this resource. A change its apply service refuses
    // (Invalid), or a name there that another resource manages or that was created over HTTP
    // (Conflict), leaves the object, and its CronJob, where they were, as any refused change does.
    const elsewhere = (await this.hub.owned(kind, { uid })).filter((object) => object.tenantId !== tenant.id);
    let heldIn: string | undefined;
    if (elsewhere.length) {
      try {
        const conflict = await this.hub.checkApply(kind, tenant.id, name, manifestOf(resource), this.actor, owner);
        // A conflict with a resource that is gone is not one: the apply below takes the object over.
        if (conflict && !(conflict.by === 'resource' && (await this.ownerGone(kind, conflict.owner)))) heldIn = elsewhere[0]!.tenant;
      } catch (err) {
        if (!(err instanceof ValidationError)) throw err;
        heldIn = elsewhere[0]!.tenant;
      }
    }
    // Every hub write below is fenced: decided from this copy of the resource and this read of its Namespace.
    const fence = this.fenceOf(kind, resource, tenant.namespaceVersion);
    if (!heldIn) for (const object of elsewhere) await this.removeManaged(kind, object, fence);

    let applied = await this.apply(kind, resource, tenant, owner, fence);
    if ('conflict' in applied && applied.conflict.by === 'resource' && (await this.ownerGone(kind, applied.conflict.owner))) {
      // Its owner was deleted without its finalizer (or recreated): the object goes as the owner's finalizer would have taken it.
      await this.removeManaged(kind, { tenantId: tenant.id, tenant: tenant.code, name, owner: applied.conflict.owner });
      applied = await this.apply(kind, resource, tenant, owner, fence);
    }
    if ('conflict' in applied) {
      return { status: status({ state: 'stalled', reason: 'Conflict', message: conflictMessage(kind, name, tenant.code, applied.conflict, heldIn) }, { tenant: heldIn, scheduled: scheduledOf(previous) }) };
    }
    if (!applied.ok) {
      // The hub keeps the last valid version (and its CronJob).
      return { status: status({ state: 'stalled', reason: 'Invalid', message: applied.message }, { tenant: heldIn ?? (previous.tenant === tenant.code ? tenant.code : undefined), lastRun: previous.lastRun, scheduled: scheduledOf(previous) }) };
    }

    // An apply that changed nothing has no warnings to say: those of the last apply that changed
    // the object stand, as the hub recorded them with it in that apply's transaction
    // (changeWarnings), so a resync does not rewrite the status, and the warnings of the change
    // itself (which an apply of the manifest held no longer answers: a connector's changed
    // unique_key) are lost neither to a CronJob write retried nor to a status write that failed
    // after the apply (a 409, the operator gone). For an object whose last change the hub has not
    // recorded so (applied before it did), those of the apply that did (same generation, same
    // tenant) are read back from its message (also where the CronJob left Ready False or Unknown
    // after it: the part before what it says of the CronJob); without such a message, they are
    // recomputed for the manifest as it is now, without applying it. The outbound
    // address policy's are the policy's in force, recomputed every time: an operator started with
    // another svc.egress.allow shows the warning gone, or a new one, at once.
    const before = previous.conditions?.find((c) => c.type === 'Ready');
    const kept = !applied.changed && previous.tenant === tenant.code && before?.observedGeneration === generation ? appliedPartOf(before, tenant.code) : undefined;
    const others =
      applied.changeWarnings !== undefined
        ? applied.changeWarnings.join('; ')
        : kept !== undefined
          ? otherWarnings(kept)
          : (applied.changed ? applied.warnings : await this.currentWarnings(kind, resource, tenant.id)).filter((w) => !applied.policyWarnings.includes(w)).join('; ');
    const message = appliedMessage(tenant.code, others, applied.policyWarnings);
    let health: Health = { state: 'done', message };
    let retry: Error | undefined;
    const scheduled: Condition[] = [];
    if (kind.handler.runArgs) {
      try {
        const cronJob = await syncCronJob(this.batch, this.now(), this.runTarget(), kind, resource, tenant.code, applied.schedule);
        if (cronJob) scheduled.push({ ...cronJob, observedGeneration: generation });
        // Applied, but its schedule cannot run (another CronJob holds the name, no run template, the API server refuses the CronJob):
        // not Ready, so that no GitOps tool shows it healthy while nothing would ever run.
        if (cronJob?.status === 'False' && (cronJob.reason === 'CronJobConflict' || cronJob.reason === 'NoRunTemplate' || cronJob.reason === 'CronJobInvalid')) {
          health = { state: 'stalled', reason: cronJob.reason, message: `${message}${NOT_SCHEDULED}${cronJob.message}` };
        }
      } catch (err) {
        retry = err as Error;
        const cause = firstLine(err);
        scheduled.push(condition(this.now(), 'Scheduled', 'Unknown', 'CronJobFailed', `cannot write the CronJob: ${cause}`, generation));
        health = { state: 'retrying', reason: 'CronJobFailed', message: `${message}${CRONJOB_NOT_WRITTEN}${cause}` };
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
    fence: Fence,
  ): Promise<{ ok: true; changed: boolean; schedule: string | null; warnings: string[]; policyWarnings: string[]; changeWarnings?: string[] } | { ok: false; message: string } | { conflict: OwnershipConflict }> {
    const manifest = manifestOf(resource);
    const where = `${kind.kind} ${resource.metadata.namespace}/${resource.metadata.name}`;
    try {
      this.mustLead();
      const result = await this.hub.applyIfChanged(kind, tenant.id, resource.metadata.name, manifest, this.actor, owner, fence);
      if (result.conflict) return { conflict: result.conflict };
      if (result.stale) {
        // Another replica, leading meanwhile, applied a later generation than this one read (its
        // cache is behind): nothing is written here (status, CronJob); retried once the cache catches up.
        throw new Conflict(`${where}: the hub holds generation ${result.stale.recorded}, later than ${owner.generation}`);
      }
      const log = { kind: kind.kind, name: resource.metadata.name, namespace: resource.metadata.namespace, tenant: tenant.code };
      if (result.adopted) logger().info(log, `${where} adopts ${kind.kind} ${resource.metadata.name} of tenant ${tenant.code} (applied by the operator before ownership was recorded)`);
      if (result.changed) {
        logger().info(log, `${where} ${result.created ? 'created' : 'updated'} in tenant ${tenant.code}`);
        this.requeueDependents(kind, resource.metadata.name);
      }
      return { ok: true as const, changed: result.changed, schedule: result.schedule, warnings: result.warnings, policyWarnings: result.policyWarnings, changeWarnings: result.changeWarnings };
    } catch (err) {
      if (err instanceof ValidationError) {
        const field = err.field && !err.message.includes(err.field) ? `${err.field}: ` : '';
        return { ok: false, message: `${field}${err.message}` };
      }
      throw err;
    }
  }

  /**
   * Reconciles again the resources whose manifests name the object of `kind` that an apply just
   * changed (ManifestKind.dependsOn: a Workflow names its Entity), so that what their apply takes
   * from it (a default scope) follows at once, not at the resync. Those of any tenant: in another
   * one the apply finds nothing to change and writes nothing.
   */
  private requeueDependents(kind: ManifestKind, name: string): void {
    const term = this.term;
    if (!term) return;
    for (const watched of term.resources) {
      const on = watched.kind.dependsOn;
      if (on?.kind !== kind.kind) continue;
      for (const o of watched.informer.list()) {
        const named = on.name(o.spec ?? {});
        if (typeof named === 'string' && named.toLowerCase() === name.toLowerCase() && this.selects(o)) term.queue.add(this.keyOf(watched.kind, o.metadata.namespace, o.metadata.name));
      }
    }
  }

  /**
   * The warnings of a resource's manifest, which the hub holds already, as an apply would answer
   * them now (nothing applied). One the hub would now refuse (what it depends on changed since), or
   * refuse for now (409), has none to show: it stays applied as it was.
   */
  private async currentWarnings(kind: ManifestKind, resource: Resource, tenantId: number): Promise<string[]> {
    try {
      return await this.hub.warningsOf(kind, tenantId, manifestOf(resource), this.actor);
    } catch (err) {
      if (err instanceof ValidationError || err instanceof ConflictError) return [];
      throw err;
    }
  }

  /**
   * The fence of a reconcile's hub writes (services.ts, Fence): run in the write's transaction, it
   * reads the resource and its Namespace from the API server and refuses the write (a Conflict,
   * retried) unless both are still at the resourceVersion the reconcile decided from, and while this
   * process is not sure it leads. A generation orders only spec changes; labels (the resource's
   * tenant, its manifest's labels) and the Namespace's tenant label change no generation, and a
   * resourceVersion says only whether two copies are the same (the API conventions make it opaque:
   * no order may be read from it). So the question asked is the one the API server can answer: is
   * this copy the current one? A copy behind (this operator's watch lagging, a replica resumed after
   * a pause) is refused; the write of the current copy, by this or another replica, waits for the
   * object's row and confirms after this commit.
   */
  private fenceOf(kind: ManifestKind, resource: Resource, namespaceVersion: string | undefined): Fence {
    const { namespace, name, resourceVersion } = resource.metadata;
    const timeout = this.options.fenceTimeout ?? FENCE_TIMEOUT;
    return async () => {
      let live: Resource | undefined;
      let liveNamespace: string | undefined;
      try {
        this.mustLead();
        // Bounded: the hub's transaction (and the object's row) waits on these reads.
        [live, liveNamespace] = await withinTime(
          Promise.all([
            readResource(this.custom, kind, namespace, name),
            this.core.readNamespace({ name: namespace }).then(
              (ns) => ns.metadata?.resourceVersion,
              (err: unknown) => {
                if (apiStatus(err) !== 404) throw err;
                return undefined;
              },
            ),
          ]),
          timeout,
          `the Kubernetes API did not answer the reads of ${kind.kind} ${namespace}/${name} and its Namespace within ${timeout / 1000} s: nothing is written in the hub`,
        );
      } catch (err) {
        throw new Fenced(err);
      }
      if (live?.metadata.resourceVersion !== resourceVersion || liveNamespace !== namespaceVersion) {
        const what = live?.metadata.resourceVersion !== resourceVersion ? `${kind.kind} ${namespace}/${name}` : `its Namespace ${namespace}`;
        throw new Fenced(new Conflict(`${what} changed since this reconcile read it: nothing is written in the hub; retried once the cache has the change`));
      }
    };
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
    // The CronJob first (no ownerReference can reach the release namespace: found by the uid label):
    // while the hub refuses the delete (a run in flight), it must not start more runs.
    if (uid) await deleteCronJobsOf(this.batch, this.options.cronJobNamespace, uid, this.pageSize);
    const managed = uid ? await this.hub.owned(kind, { uid }) : [];
    for (const object of managed) await this.removeManaged(kind, object);
    const tenantCode = resource.status?.tenant;
    if (!managed.length && tenantCode) {
      // Applied before ownership was recorded and never adopted since: deleted when the operator
      // applied it last and no resource has claimed it. Only in the tenant the resource's labels and
      // Namespace resolve to now: the status is no proof (whoever may write it could aim this at an
      // unowned object of any tenant).
      const resolved = await resolveTenant(this.core, this.hub, resource);
      const tenant = 'problem' in resolved || resolved.code !== tenantCode ? undefined : resolved;
      if (tenant && (await this.hub.removeOwned(kind, tenant.id, resource.metadata.name, { unownedAppliedBy: this.actor }))) {
        logger().info({ kind: kind.kind, name: resource.metadata.name, tenant: tenantCode }, `${kind.kind} ${resource.metadata.name} deleted from tenant ${tenantCode}`);
      }
    }
    const key = this.keyOf(kind, resource.metadata.namespace, resource.metadata.name);
    await this.refusable(key, kind, resource, 'finalizer removal', async () => {
      try {
        await replaceResource(this.custom, kind, withoutFinalizer(resource));
      } catch (err) {
        // Gone already: the finalizer was removed by an earlier pass over a stale copy (the informer
        // hands the key over again while the resource leaves), and the API server deleted it.
        if (apiStatus(err) !== 404) throw err;
      }
    });
  }

  /**
   * A resource gone from this operator's view: what it managed goes, once the API server confirms
   * that it is gone (or is another resource of the same name now). The informer's word is not
   * enough: after a relist (a watch that expired, 410) it reports a resource that left the
   * selection (labelled for another operator instance meanwhile) as deleted, with its old copy.
   */
  private async gone(kind: ManifestKind, namespace: string, name: string): Promise<void> {
    const owned = await this.hub.owned(kind, { namespace, name });
    if (!owned.length) return;
    let live: Resource | undefined;
    try {
      live = await readResource(this.custom, kind, namespace, name);
    } catch (err) {
      // A namespace the operator may not read: the resource counts as alive, as in ownerGone.
      if (apiStatus(err) === 403) return;
      throw err;
    }
    for (const object of owned) if (object.owner.uid !== live?.metadata.uid) await this.removeManaged(kind, object);
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
      for (const namespace of this.namespaces.length ? this.namespaces : [undefined]) {
        const records = await this.hub.owned(kind, { all: true, ...(namespace ? { namespace } : {}) });
        if (!records.length) continue;
        // Every resource of the namespace, whichever operator instance it belongs to, from every page
        // of the list: a record is an orphan only when no resource at all has its uid.
        const listed = await this.listResources(kind, namespace);
        const alive = new Set(listed.items.map((o) => o.metadata.uid));
        for (const object of records) {
          if (alive.has(object.owner.uid)) continue;
          await this.removeManaged(kind, object);
          removed++;
        }
      }
    }
    return removed;
  }

  /**
   * Deletes a hub object while its record still names the same resource; then the other resources
   * of that kind and name (in Conflict while it existed) are reconciled again at once.
   */
  private async removeManaged(kind: ManifestKind, object: OwnedObject, fence?: Fence): Promise<void> {
    this.mustLead();
    const removed = await this.hub.removeOwned(kind, object.tenantId, object.name, { uid: object.owner.uid }, fence);
    if (!removed) return;
    logger().info({ kind: kind.kind, name: object.name, tenant: object.tenant }, `${kind.kind} ${object.name} deleted from tenant ${object.tenant} (managed by ${object.owner.namespace}/${object.owner.name})`);
    const term = this.term;
    for (const { kind: watched, informer } of term?.resources ?? []) {
      if (watched !== kind) continue;
      for (const o of informer.list()) {
        if (o.metadata.name === object.name && o.metadata.uid !== object.owner.uid && this.selects(o)) term!.queue.add(this.keyOf(kind, o.metadata.namespace, o.metadata.name));
      }
    }
  }

  private get actor(): string {
    return this.options.actor ?? OPERATOR_ACTOR;
  }

  /** Throws NotLeading when this process may not act as the leader now (`leading`). */
  private mustLead(): void {
    if (this.options.leading && !this.options.leading()) throw new NotLeading();
  }
}

/** The namespace of a queue key (Operator.keyOf: `<plural>.<group>/<namespace>/<name>`). */
const namespaceOfKey = (key: string): string => key.slice(key.indexOf('/') + 1, key.lastIndexOf('/'));

/** The longest the fence of a hub write waits for the API server (the write's transaction is open meanwhile). */
export const FENCE_TIMEOUT = 10_000;

/** The Kubernetes API did not answer in time. */
class ApiTimeout extends Error {}

/** The writes of a resource a refusal as invalid (422) is reported for (Operator.refusable). */
type RefusableWrite = 'status' | 'finalizer' | 'finalizer removal';

/** The API server refused a write of the resource as invalid (422); reported already (Operator.reportRejected). */
class WriteRejected extends Error {
  constructor(override readonly cause: unknown) {
    super(firstLine(cause));
  }
}

/**
 * The same refusal of a write (same write, same answer) is reported again (Event, log line) after
 * this long: kube-apiserver keeps Events for an hour by default (`--event-ttl`), so one stays in
 * sight while the refusal lasts.
 */
export const REJECTION_REPEAT = 30 * 60_000;

/** The most of the API server's answer a refusal's Event quotes, in UTF-8 bytes (the events.k8s.io API holds a note to 1,024). */
export const REJECTED_ANSWER_MAX = 512;

/** `text` cut to at most `max` UTF-8 bytes, ending with `…` when something was cut; never half a character. */
function cutToBytes(text: string, max: number): string {
  if (Buffer.byteLength(text) <= max) return text;
  let out = '';
  let bytes = Buffer.byteLength('…');
  for (const ch of text) {
    bytes += Buffer.byteLength(ch);
    if (bytes > max) break;
    out += ch;
  }
  return `${out}…`;
}

/**
 * The message of a refused write's Event: what was not written, and the API server's answer as a
 * status condition shows an error (firstLine: masked), cut to REJECTED_ANSWER_MAX bytes.
 */
function rejectionMessage(write: RefusableWrite, err: unknown): string {
  const answer = cutToBytes(firstLine(err), REJECTED_ANSWER_MAX);
  const what =
    write === 'status'
      ? 'status not written'
      : write === 'finalizer'
        ? `finalizer ${FINALIZER} not added: the resource is not reconciled until it is`
        : `finalizer ${FINALIZER} not removed: the resource stays until it is`;
  return `${what}: the API server refused the write (${answer}). Before Kubernetes 1.30 every write of a resource, its status included, validates the whole resource against its CRD: one stored before its CRD became stricter must be fixed where the answer says. Retried with backoff`;
}

/** `promise`, or an ApiTimeout of `message` once `ms` have passed. */
async function withinTime<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new ApiTimeout(message)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** How often each watched Namespace is read when watching a list of namespaces (OperatorOptions.namespacePollEvery). */
export const NAMESPACE_POLL_EVERY = 5_000;

/** What of a Namespace decides its resources' tenant (tenant.ts): its tenant label and annotation; a Namespace gone has neither. */
const tenancyOf = (ns: V1Namespace | undefined): string =>
  canonical({ label: ns?.metadata?.labels?.[TENANT_LABEL] ?? null, annotation: ns?.metadata?.annotations?.[TENANTS_ANNOTATION] ?? null });

/** This process is not sure it leads (a renewal is due): nothing is written; the key is tried again. */
class NotLeading extends Error {
  constructor() {
    super('this process is not sure it still leads (its Lease renewal is due): nothing is written until a renewal confirms it');
  }
}

/** What a fence threw (a Conflict, NotLeading, an API error), carried through the hub call as it is. */
class Fenced extends Error {
  constructor(override readonly cause: unknown) {
    super('fenced');
  }
}

/** The Scheduled condition of a status, kept when a reconcile does not get as far as the CronJob. */
const scheduledOf = (status: ResourceStatus): Condition[] => status.conditions?.filter((c) => c.type === 'Scheduled') ?? [];

/**
 * The first line of an error as a status condition may show it (read by anyone who may read the
 * resource), masked by its source. What the Kubernetes API answered (it quotes the names the
 * tenant chose: the resource's, its CronJob's, its namespace's) and the hub's refusals of the
 * tenant's manifest (a ValidationError or ConflictError: they quote its names and values) are
 * masked without the hub's own secrets (`storableUpstreamMessage`): the hub's secrets reach
 * neither, so such text holds one only where the tenant wrote it, and masking it would answer the
 * tenant which of its guesses is one (a resource named after a guess shown `[REDACTED]`). The
 * hub's own failures (its database, a network error on the way to the API server, anything else)
 * are masked with them (`storableMessage`). Credentials in addresses and Bearer and Basic
 * credentials are masked in both. A Kubernetes API error is shown as its status code and the
 * message of the Status the API server answered (`HTTP 403: cronjobs.batch "…" is forbidden: …`).
 */
function firstLine(err: unknown): string {
  const answered = apiAnswer(err);
  if (answered !== undefined) return `HTTP ${apiStatus(err)}: ${storableUpstreamMessage(answered)}`;
  return (quotesTenant(err) ? storableUpstreamMessage(err) : storableMessage(err)).split('\n')[0]!;
}

/** Whether an error's text is an answer about what the tenant chose (see `firstLine`). */
const quotesTenant = (err: unknown): boolean => apiStatus(err) !== undefined || err instanceof ValidationError || err instanceof ConflictError;

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
  if (err instanceof ApiTimeout || apiStatus(err) !== undefined || /fetch failed|ECONNREFUSED|ECONNRESET|ETIMEDOUT|socket hang up/i.test(message)) return { reason: 'KubernetesApiError', message: `the Kubernetes API failed: ${message}` };
  return { reason: 'ReconcileFailed', message };
}

/**
 * The manifest services, their failures marked as the hub's being unavailable, but for its answers:
 * a refused manifest (400) and a refusal for now (409: a connector whose run is in flight is not
 * deleted), which are what the hub said, and retried as such.
 */
function hubCalls(m: ManifestServices): ManifestServices {
  const guard = async <T>(call: () => Promise<T>): Promise<T> => {
    try {
      return await call();
    } catch (err) {
      if (err instanceof Fenced) throw err.cause;
      throw err instanceof ValidationError || err instanceof ConflictError || err instanceof HubUnavailable ? err : new HubUnavailable(err);
    }
  };
  return {
    tenantByCode: (code) => guard(() => m.tenantByCode(code)),
    applyIfChanged: (...args) => guard(() => m.applyIfChanged(...args)),
    checkApply: (...args) => guard(() => m.checkApply(...args)),
    warningsOf: (...args) => guard(() => m.warningsOf(...args)),
    owned: (kind, by) => guard(() => m.owned(kind, by)),
    removeOwned: (kind, tenantId, name, by, fence) => guard(() => m.removeOwned(kind, tenantId, name, by, fence)),
    lastRun: (kind, tenantId, name) => guard(() => m.lastRun(kind, tenantId, name)),
    runsChanged: (kinds, since) => guard(() => m.runsChanged(kinds, since)),
  };
}

/** The Conflict status message; `heldIn`: the tenant a refused relabel leaves the resource's object in. */
function conflictMessage(kind: ManifestKind, name: string, tenant: string, conflict: OwnershipConflict, heldIn?: string): string {
  const owner =
    conflict.by === 'resource'
      ? `is managed by ${kind.kind} ${conflict.owner.namespace}/${conflict.owner.name} (uid ${conflict.owner.uid})`
      : `was created over HTTP (last applied by ${conflict.appliedBy ?? 'unknown'})`;
  const outcome = heldIn
    ? `the tenant change is not applied: this resource's ${kind.kind} stays in tenant ${heldIn}`
    : 'this resource is not applied, and deleting it deletes nothing in the hub';
  return `${kind.kind} ${name} in tenant ${tenant} ${owner}: ${outcome}`;
}
