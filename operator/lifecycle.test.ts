import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { CustomObjectsApi, type V1PodTemplateSpec } from '@kubernetes/client-node';
import { parseAllDocuments, stringify } from 'yaml';
import { loadRunJobTemplate } from '../cmd/operator.js';
import { kubeConfig } from '../kube/kube-config.js';
import { CRONJOB_RULE, operatorGrants } from '../kube/rbac.js';
import type { AdminServices } from '../src/admin/services.js';
import type { Tx } from '../src/db/database.js';
import { ConflictError, ValidationError } from '../src/errors.js';
import { sameManifest } from '../src/manifests/canonical.js';
import { crdOf } from '../src/manifests/crd.js';
import type { ManifestHandler } from '../src/manifests/handler.js';
import type { ManifestKind } from '../src/manifests/kinds.js';
import { createManifestServices, type ManifestServices } from '../src/manifests/services.js';
import { type MigratedDatabase, migratedDatabase } from '../test/harness/database.js';
import { helm } from '../test/harness/helm.js';
import { type KubeObject, KubeApiStandIn } from '../test/harness/kube-api.js';
import { captureLogs } from '../test/harness/log-capture.js';
import { operatorsSettled } from '../test/harness/operator-settled.js';
import { until } from '../test/harness/until.js';
import { cronJobAlternateName, cronJobName, legacyCronJobName } from './cronjob.js';
import { FINALIZER } from './finalizer.js';
import { LIST_PAGE_SIZE, LIST_RESTARTS } from './paging.js';
import { Operator, type OperatorOptions, REJECTION_REPEAT } from './reconciler.js';
import { afterStatusWrite, type Resource, type ResourceStatus, writeStatus } from './resource.js';

/**
 * The operator's lifecycle against the SCRIPTED KUBERNETES API STAND-IN (test/harness/kube-api.ts)
 * through the real @kubernetes/client-node, with a kind that exists only in this test: `Widget`,
 * registered nowhere but here, whose handler keeps its widgets in memory. The hub side is the real
 * manifest services (src/manifests/services.ts) over a real database (they keep the owner records);
 * the widgets themselves live in the handler's memory. Covered: a kind needs no reconciler code; leadership terms (stop, start
 * again, a resource applied afterwards is reconciled) and the readiness they report; CronJobs in the
 * release namespace (names, labels, put back when edited or deleted, conflicts, orphans, the old
 * layout); the instance label and several namespaces.
 */

const RELEASE_NS = 'svc-system';
/** A release namespace that does not exist yet when its operator starts. */
const LATE_RELEASE_NS = 'svc-late';
/** The chart's run-job ConfigMap in the release namespace (only the test that names it to its operator creates it). */
const RUN_JOB_CONFIGMAP = 'hub-svc-hub-run-job';
const API_VERSION = 'test.svc.io/v1';

/** What the fake handler was asked to do, in order. */
const calls: string[] = [];
/** The widgets held per tenant: `tenant/name` → manifest and schedule. */
const held = new Map<string, { manifest: unknown; schedule: string | null; appliedBy: string | null }>();
/** Widgets whose delete the handler refuses with a 409 for now. */
const busy = new Set<string>();
const tenantOf = (tx: Tx) => (tx as unknown as { tenantId: number }).tenantId;

const handler: ManifestHandler = {
  stored: async (tx, name) => held.get(`${tenantOf(tx)}/${name}`),
  // Widgets are held in memory: nothing to lock.
  lockForApply: async () => {},
  apply: async (tx, manifest, actor) => {
    const m = manifest as { metadata: { name: string }; spec?: { schedule?: string; color?: string } };
    if (m.spec?.color === 'invisible') throw new ValidationError('spec.color: invisible is not a colour', 'spec.color');
    const schedule = m.spec?.schedule ?? null;
    const key = `${tenantOf(tx)}/${m.metadata.name}`;
    const created = !held.has(key);
    // The manifest held, as a kind's apply answers it (unchangedApply): nothing written.
    if (!created && sameManifest(held.get(key)!.manifest, manifest)) return { created, unchanged: true, warnings: [], schedule };
    // A warning of the change only (as a connector's changed unique_key has): an apply of the manifest held answers none.
    const before = (held.get(key)?.manifest as typeof m | undefined)?.spec?.color;
    const warnings = !created && m.spec?.color !== before ? [`spec.color: repainted from ${before} to ${m.spec?.color}: what was painted before keeps its colour`] : [];
    held.set(key, { manifest, schedule, appliedBy: actor });
    calls.push(`apply ${key}`);
    return { created, unchanged: false, warnings, schedule };
  },
  remove: async (tx, name) => {
    // A hub that refuses the delete for now (a connector whose run is in flight answers so).
    if (busy.has(name)) throw new ConflictError(`widget ${name} has a run in flight`);
    calls.push(`remove ${tenantOf(tx)}/${name}`);
    // No table, so no trigger takes the owner record with the object: the handler does.
    await tx.query(`delete from manifests.owners where kind = 'Widget' and name = $1`, [name]);
    return held.delete(`${tenantOf(tx)}/${name}`);
  },
  runArgs: (name) => ['widget', name],
};

/** A manifest kind registered only here: the operator must reconcile it without knowing it. */
const WIDGET: ManifestKind = {
  kind: 'Widget',
  group: 'test.svc.io',
  version: 'v1',
  plural: 'widgets',
  singular: 'widget',
  shortNames: [],
  schema: { type: 'object', properties: { spec: { type: 'object', properties: { color: { type: 'string' }, schedule: { type: 'string' } } } } },
  lastRun: false,
  printerColumns: [],
  handler,
};

let database: MigratedDatabase;
let manifests: ManifestServices;

/** A CronJob spec a real API server accepts (the fixtures' hand-made CronJobs). */
const jobSpec = (schedule: string) => ({ schedule, jobTemplate: { spec: { template: { spec: { restartPolicy: 'Never', containers: [{ name: 'run', image: 'other:1' }] } } } } });

const template: V1PodTemplateSpec = { spec: { restartPolicy: 'Never', containers: [{ name: 'run', image: 'svc-hub:test' }] } };

let api: KubeApiStandIn;
const running: Operator[] = [];

function operator(token: string, options: Partial<OperatorOptions> = {}): Operator {
  const o = new Operator({
    kinds: [WIDGET],
    manifests,
    kc: kubeConfig({ server: api.url, token }),
    cronJobNamespace: RELEASE_NS,
    resyncEvery: 3_600_000,
    runPollEvery: 0,
    backoffBase: 20,
    backoffMax: 200,
    runJobTemplate: template,
    ...options,
  });
  running.push(o);
  return o;
}

const widget = (namespace: string, name: string, spec: Record<string, unknown> = { color: 'red' }, labels: Record<string, string> = {}): KubeObject => ({
  apiVersion: API_VERSION,
  kind: 'Widget',
  metadata: { name, namespace, labels: { 'svc.io/tenant': 'default', ...labels } },
  spec,
});
const get = (namespace: string, name: string) => api.get(API_VERSION, 'widgets', namespace, name) as Resource | undefined;
const conditionOf = (namespace: string, name: string, type: string) => get(namespace, name)?.status?.conditions?.find((c) => c.type === type);
const isReady = (namespace: string, name: string) => conditionOf(namespace, name, 'Ready')?.status === 'True';
const cronJob = (name: string) => api.get('batch/v1', 'cronjobs', RELEASE_NS, name);
// biome-ignore lint/suspicious/noExplicitAny: deep reads of CronJobs as the stand-in stored them
const specOf = (job: KubeObject | undefined): any => job?.spec;
const writesBy = (token: string, pathPart: string) => api.requests.filter((r) => r.token === token && r.method !== 'GET' && r.path.includes(pathPart));
let markers = 0;
/**
 * The marker for "nothing more happens" checks: a widget applied in `namespace` (changed each time)
 * and waited for until Ready at its generation. Of an operator with one worker (`workers: 1`, the
 * queue first in, first out), every reconcile queued before it (a resync's, a watch event's that came
 * before it on the namespace's watch) is over by then, and what it wrote is there.
 */
async function settled(namespace: string): Promise<void> {
  // Named after its namespace: one name in one tenant is one hub object.
  const name = `marker-${namespace}`;
  api.apply('widgets', widget(namespace, name, { color: `marker-${++markers}` }));
  await until(`the marker in ${namespace} reconciled`, () => {
    const ready = conditionOf(namespace, name, 'Ready');
    return ready?.status === 'True' && ready.observedGeneration === get(namespace, name)?.metadata.generation;
  });
}
/** Deletes the marker of `namespace` (its finalizer run by the operator). */
async function removeMarker(namespace: string): Promise<void> {
  api.remove(API_VERSION, 'widgets', namespace, `marker-${namespace}`);
  await until(`the marker in ${namespace} gone`, () => !get(namespace, `marker-${namespace}`));
}

beforeAll(async () => {
  database = await migratedDatabase({ 1: 'default' });
  const admin = { tenants: { byCode: async (code: string) => (code === 'default' ? { id: 1, active: true } : undefined) } };
  manifests = createManifestServices({ db: database.db, admin: admin as unknown as AdminServices });
  // The CRD the generator makes of the kind, as `npm run crds` would: the stand-in validates and prunes by it.
  api = await new KubeApiStandIn([crdOf(WIDGET) as never]).start();
  // Every operator here may call only what the chart grants one (kube/rbac.ts), whatever its token.
  api.enforceRbac([
    ...operatorGrants({ kinds: [WIDGET], releaseNamespace: RELEASE_NS, leaseName: 'svc-hub-operator', runJobConfigMap: RUN_JOB_CONFIGMAP }),
    // What a cluster still holding the old layout's grants allows in one namespace: reading and
    // deleting the CronJob of the old layout there (the chart no longer grants it; elsewhere the operator leaves such CronJobs alone).
    { namespace: 'orphans', rules: [{ apiGroups: ['batch'], resources: ['cronjobs'], verbs: ['get', 'delete'] }] },
    // The release namespace of an operator started before its namespace exists.
    { namespace: LATE_RELEASE_NS, rules: [CRONJOB_RULE] },
  ]);
  // The release namespace exists (a create in one that does not is a 404).
  api.createNamespace(RELEASE_NS);
});

afterAll(async () => {
  for (const o of running) await o.stop();
  await api?.close();
  await database?.close();
});

describe('a kind registered only in this test', () => {
  it('is applied and deleted through its handler, with no reconciler code of its own', async () => {
    const op = operator('kinds');
    await op.start();
    try {
      api.apply('widgets', widget('kinds', 'w1'));
      await until('w1 Ready', () => isReady('kinds', 'w1'));
      expect(get('kinds', 'w1')!.metadata.finalizers).toEqual([FINALIZER]);
      expect(conditionOf('kinds', 'w1', 'Ready')).toMatchObject({ reason: 'Applied', message: 'applied to tenant default' });
      expect(held.get('1/w1')?.manifest).toMatchObject({ apiVersion: API_VERSION, kind: 'Widget', metadata: { name: 'w1' }, spec: { color: 'red' } });

      api.apply('widgets', widget('kinds', 'w2', { color: 'invisible' }));
      await until('w2 Invalid', () => conditionOf('kinds', 'w2', 'Ready')?.reason === 'Invalid');
      expect(conditionOf('kinds', 'w2', 'Ready')).toMatchObject({ status: 'False', message: 'spec.color: invisible is not a colour' });

      api.remove(API_VERSION, 'widgets', 'kinds', 'w1');
      await until('w1 gone', () => !get('kinds', 'w1'));
      expect(calls).toContain('remove 1/w1');
      expect(held.has('1/w1')).toBe(false);
    } finally {
      await op.stop();
    }
  });
});

describe('leadership terms', () => {
  it('a delete the hub refuses for now (409) is retried, and logged as the hub answered it, not as the hub being unavailable', async () => {
    const op = operator('refused-delete', { namespaces: ['refusing'] });
    await op.start();
    const logs = captureLogs('warn');
    try {
      api.apply('widgets', widget('refusing', 'busy', { schedule: '0 3 * * *' }));
      await until('Ready and scheduled', () => isReady('refusing', 'busy') && cronJob('widget-refusing-busy'));
      busy.add('busy');
      api.remove(API_VERSION, 'widgets', 'refusing', 'busy');
      const refused = await until('the refusal logged', () => logs.lines().find((l) => String(l.msg).includes('refusing/busy') && String(l.err).includes('has a run in flight')));
      expect(String(refused.err)).toBe('widget busy has a run in flight');
      expect(get('refusing', 'busy')).toBeDefined();
      // Its CronJob went first: no scheduled run keeps the hub refusing while the delete waits.
      expect(cronJob('widget-refusing-busy')).toBeUndefined();
      busy.delete('busy');
      await until('deleted once the hub takes it', () => !get('refusing', 'busy') && calls.includes('remove 1/busy'));
    } finally {
      busy.clear();
      logs.restore();
      await op.stop();
    }
  });

  it('a stopped operator started again (leadership regained) reconciles afresh, and reports whether it reconciles', async () => {
    const op = operator('terms', { namespaces: ['terms'] });
    expect(op.health().reconciling).toBe(false);
    await op.start();
    expect(op.health()).toMatchObject({ reconciling: true, data: { workers: 2 } });
    api.apply('widgets', widget('terms', 'before'));
    await until('before Ready', () => isReady('terms', 'before'));

    await op.stop();
    expect(op.health()).toMatchObject({ reconciling: false });
    const watchesBefore = api.requests.filter((r) => r.token === 'terms' && r.query.watch === 'true').length;
    api.apply('widgets', widget('terms', 'while-stopped'));

    await op.start();
    expect(op.health().reconciling).toBe(true);
    // A new term: new informers (new watches), a new queue; what changed meanwhile is reconciled.
    expect(api.requests.filter((r) => r.token === 'terms' && r.query.watch === 'true').length).toBeGreaterThan(watchesBefore);
    await until('while-stopped Ready', () => isReady('terms', 'while-stopped'));
    api.apply('widgets', widget('terms', 'after'));
    await until('after Ready', () => isReady('terms', 'after'));
    await op.stop();
  });

  it('a leader whose informers have not listed is not ready, until they have', async () => {
    const op = operator('unsynced', { namespaces: ['unsynced'] });
    api.failNext('GET', /^\/apis\/test\.svc\.io\/v1\/namespaces\/unsynced\/widgets$/, 500, 1, 'list');
    await op.start();
    const health = op.health();
    expect(health.reconciling).toBe(false);
    expect(health.data.unsynced).toEqual(['widgets.test.svc.io in namespace unsynced']);
    // The informer lists again after its restart delay; then the operator reconciles.
    await until('ready', () => op.health().reconciling, 15_000);
    api.apply('widgets', widget('unsynced', 'w'));
    await until('w Ready', () => isReady('unsynced', 'w'));
    await op.stop();
  });
});

describe('CronJobs in the release namespace', () => {
  it('are named <kind>-<namespace>-<name>, lower case, at most 52 characters', () => {
    expect(cronJobName(WIDGET, 'team-a', 'nightly')).toBe('widget-team-a-nightly');
    const long = cronJobName(WIDGET, 'a-rather-long-namespace-name', 'and-an-even-longer-resource-name-too');
    expect(long.length).toBeLessThanOrEqual(52);
    expect(long).toMatch(/^widget-a-rather-long-namespace-name-and-an-[0-9a-f]{8}$/);
    expect(cronJobName(WIDGET, 'a-rather-long-namespace-name', 'and-an-even-longer-resource-name-two')).not.toBe(long);
    expect(legacyCronJobName(WIDGET, 'nightly')).toBe('widget-nightly');
  });

  it('carry their resource in labels, are put back when edited or deleted, and go with the finalizer', async () => {
    const op = operator('cron', { namespaces: ['cron'], workers: 1 });
    await op.start();
    try {
      api.apply('widgets', widget('cron', 'nightly', { schedule: '0 2 * * *' }));
      const job = await until('the CronJob', () => cronJob('widget-cron-nightly'));
      const uid = get('cron', 'nightly')!.metadata.uid;
      expect(job.metadata.ownerReferences).toBeUndefined();
      expect(job.metadata.labels).toMatchObject({
        'app.kubernetes.io/managed-by': 'svc-hub-operator',
        'svc.io/kind': 'widget',
        'svc.io/resource-namespace': 'cron',
        'svc.io/resource-name': 'nightly',
        'svc.io/resource-uid': uid,
        'svc.io/tenant': 'default',
      });
      expect(job.metadata.labels?.['svc.io/operator-instance']).toBeUndefined();
      expect(specOf(job)).toMatchObject({ schedule: '0 2 * * *', timeZone: 'Etc/UTC', concurrencyPolicy: 'Forbid', suspend: false });
      expect(specOf(job).jobTemplate.spec.template.spec.containers[0].args).toEqual(['run', 'widget', 'nightly', '--tenant', 'default', '--scheduled']);
      expect(api.list('batch/v1', 'cronjobs', 'cron')).toEqual([]);
      await until('Scheduled', () => conditionOf('cron', 'nightly', 'Scheduled')?.status === 'True');

      // Edited by hand (the spec hash annotation left as it was): put back.
      const edited = cronJob('widget-cron-nightly')!;
      api.apply('cronjobs', { ...edited, spec: { ...specOf(edited), schedule: '* * * * *', suspend: true } });
      await until('the schedule put back', () => specOf(cronJob('widget-cron-nightly'))?.schedule === '0 2 * * *' && specOf(cronJob('widget-cron-nightly')).suspend === false);
      // Deleted by hand: created again.
      api.remove('batch/v1', 'cronjobs', RELEASE_NS, 'widget-cron-nightly');
      await until('the CronJob back', () => cronJob('widget-cron-nightly'));

      // Edited by hand to name another resource (its name label and annotation; `kubectl patch`):
      // its resource takes it back at once, the same CronJob (no second one under the alternate
      // name), and the resync's sweep leaves it alone.
      const uidBefore = cronJob('widget-cron-nightly')!.metadata.uid;
      api.patch('batch/v1', 'cronjobs', RELEASE_NS, 'widget-cron-nightly', { metadata: { labels: { 'svc.io/resource-name': 'weekly' }, annotations: { 'svc.io/resource-name': 'weekly' } } });
      expect(cronJob('widget-cron-nightly')!.metadata.labels?.['svc.io/resource-name']).toBe('weekly');
      const named = () => [cronJob('widget-cron-nightly')?.metadata.labels?.['svc.io/resource-name'], cronJob('widget-cron-nightly')?.metadata.annotations?.['svc.io/resource-name']];
      await until('the CronJob named after its resource again', () => named().every((n) => n === 'nightly'), 5_000);
      op.resyncAll();
      // The resync's reconcile of nightly is over (the marker after it), and a sweep leaves the CronJob alone.
      await settled('cron');
      expect(await op.removeOrphanedCronJobs()).toBe(0);
      expect(api.list('batch/v1', 'cronjobs', RELEASE_NS).filter((j) => j.metadata.labels?.['svc.io/resource-uid'] === uid).map((j) => j.metadata.name)).toEqual(['widget-cron-nightly']);
      expect(cronJob('widget-cron-nightly')!.metadata.uid).toBe(uidBefore);
      expect(cronJob(cronJobAlternateName(WIDGET, 'cron', 'nightly'))).toBeUndefined();
      await removeMarker('cron');

      api.remove(API_VERSION, 'widgets', 'cron', 'nightly');
      await until('the resource gone', () => !get('cron', 'nightly'));
      expect(cronJob('widget-cron-nightly')).toBeUndefined();
    } finally {
      await op.stop();
    }
  });

  it('are owned by the run template\'s ConfigMap when the operator is told its name: deleting it (helm uninstall) deletes them, and none is written while it is gone', async () => {
    const configMap = () => api.get('v1', 'configmaps', RELEASE_NS, RUN_JOB_CONFIGMAP);
    api.apply('configmaps', { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: RUN_JOB_CONFIGMAP, namespace: RELEASE_NS }, data: { 'pod-template.yaml': stringify(template) } });
    const owners = (name: string) => cronJob(name)?.metadata.ownerReferences;
    const ownedBy = (uid: string | undefined) => [{ apiVersion: 'v1', kind: 'ConfigMap', name: RUN_JOB_CONFIGMAP, uid }];
    // A CronJob written by an operator that was not told the ConfigMap (an older release): no owner.
    const before = operator('owned-old', { namespaces: ['owned'] });
    await before.start();
    api.apply('widgets', widget('owned', 'early', { schedule: '0 1 * * *' }));
    await until('the early CronJob', () => cronJob('widget-owned-early'));
    expect(owners('widget-owned-early')).toBeUndefined();
    await before.stop();

    const op = operator('owned', { namespaces: ['owned'], runJobConfigMap: RUN_JOB_CONFIGMAP });
    await op.start();
    try {
      // The operator that knows it gives the CronJob its owner, and writes new ones with it.
      await until('the early CronJob owned', () => owners('widget-owned-early'));
      expect(owners('widget-owned-early')).toEqual(ownedBy(configMap()!.metadata.uid));
      api.apply('widgets', widget('owned', 'late', { schedule: '0 2 * * *' }));
      await until('the late CronJob', () => cronJob('widget-owned-late'));
      expect(owners('widget-owned-late')).toEqual(ownedBy(configMap()!.metadata.uid));
      await until('both Ready', () => isReady('owned', 'early') && isReady('owned', 'late'));

      // Its owner taken off by hand (`kubectl patch`: no change of the generation, labels or
      // annotations): put back at once, not at the resync (an hour here), or `helm uninstall` would leave it.
      api.patch('batch/v1', 'cronjobs', RELEASE_NS, 'widget-owned-early', { metadata: { ownerReferences: null } });
      expect(owners('widget-owned-early')).toBeUndefined();
      await until('the owner put back', () => owners('widget-owned-early'), 5_000);
      expect(owners('widget-owned-early')).toEqual(ownedBy(configMap()!.metadata.uid));

      // helm uninstall deletes the ConfigMap: the garbage collector takes the CronJobs along, and the
      // operator (still running a moment) writes none without its owner, which would outlive the release.
      api.remove('v1', 'configmaps', RELEASE_NS, RUN_JOB_CONFIGMAP);
      expect([cronJob('widget-owned-early'), cronJob('widget-owned-late')]).toEqual([undefined, undefined]);
      await until('the loss reported', () => conditionOf('owned', 'late', 'Scheduled')?.reason === 'CronJobFailed');
      expect(conditionOf('owned', 'late', 'Scheduled')?.message).toContain(`the ConfigMap ${RELEASE_NS}/${RUN_JOB_CONFIGMAP}`);
      // The retries (each reads the ConfigMap first, then would write): several of them are over.
      const configMapReads = () => api.requests.filter((r) => r.token === 'owned' && r.method === 'GET' && r.path.endsWith(`/configmaps/${RUN_JOB_CONFIGMAP}`)).length;
      const readsAtLoss = configMapReads();
      await until('the reconciles to be retried a few times', () => configMapReads() >= readsAtLoss + 6);
      await until('the loss reported on early too', () => conditionOf('owned', 'early', 'Scheduled')?.reason === 'CronJobFailed');
      expect([cronJob('widget-owned-early'), cronJob('widget-owned-late')]).toEqual([undefined, undefined]);

      // The ConfigMap back (another uid): the retries write the CronJobs again, owned by it.
      api.apply('configmaps', { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: RUN_JOB_CONFIGMAP, namespace: RELEASE_NS }, data: {} });
      const uid = configMap()!.metadata.uid;
      await until('both CronJobs back', () => cronJob('widget-owned-early') && cronJob('widget-owned-late'), 10_000);
      expect([owners('widget-owned-early'), owners('widget-owned-late')]).toEqual([ownedBy(uid), ownedBy(uid)]);
    } finally {
      await op.stop();
      api.remove('v1', 'configmaps', RELEASE_NS, RUN_JOB_CONFIGMAP);
    }
  });

  it('are swept in a namespace whose resources the operator listed though it cannot list another it watches', async () => {
    api.failNext('GET', /^\/apis\/test\.svc\.io\/v1\/namespaces\/sweep-denied\/widgets$/, 500, 10_000, 'list');
    api.apply('cronjobs', {
      apiVersion: 'batch/v1',
      kind: 'CronJob',
      metadata: {
        name: 'widget-sweep-ok-gone',
        namespace: RELEASE_NS,
        labels: { 'app.kubernetes.io/managed-by': 'svc-hub-operator', 'svc.io/kind': 'widget', 'svc.io/resource-namespace': 'sweep-ok', 'svc.io/resource-name': 'gone', 'svc.io/resource-uid': 'dead-uid-8' },
        annotations: { 'svc.io/resource-name': 'gone' },
      },
      spec: jobSpec('5 5 * * *'),
    });
    const op = operator('sweep-partial', { namespaces: ['sweep-ok', 'sweep-denied'] });
    await op.start();
    try {
      expect(op.health().data.unsynced).toEqual(['widgets.test.svc.io in namespace sweep-denied']);
      await until('the orphan deleted', () => !cronJob('widget-sweep-ok-gone'));
    } finally {
      await op.stop();
    }
  });

  it('keep the warnings of the apply that changed the resource on Ready when its CronJob write failed and was retried (an apply of the manifest held would answer none)', async () => {
    const op = operator('one-off', { namespaces: ['one-off'] });
    await op.start();
    try {
      api.apply('widgets', widget('one-off', 'paint', { color: 'red', schedule: '0 1 * * *' }));
      await until('Ready and scheduled', () => isReady('one-off', 'paint') && cronJob('widget-one-off-paint'));
      expect(conditionOf('one-off', 'paint', 'Ready')?.message).toBe('applied to tenant default');
      // The CronJob write of the change fails once (Ready=Unknown, CronJobFailed, with the warning); the retry writes it.
      const mark = api.requests.length;
      api.failNext('PUT', /\/cronjobs\/widget-one-off-paint$/, 500);
      api.apply('widgets', widget('one-off', 'paint', { color: 'blue', schedule: '0 2 * * *' }));
      await until('rescheduled and Ready', () => specOf(cronJob('widget-one-off-paint'))?.schedule === '0 2 * * *' && isReady('one-off', 'paint') && conditionOf('one-off', 'paint', 'Ready')?.observedGeneration === 2);
      expect(api.requests.slice(mark).filter((r) => r.method === 'PUT' && r.path.endsWith('/cronjobs/widget-one-off-paint')).map((r) => r.status)).toEqual([500, 200]);
      expect(conditionOf('one-off', 'paint', 'Ready')?.message).toBe('applied to tenant default; warnings: spec.color: repainted from red to blue: what was painted before keeps its colour');
    } finally {
      await op.stop();
    }
  });

  it('keep the warnings of the apply that changed the resource on Ready when the status write after it failed (409: the resource changed meanwhile): the hub recorded them with the change', async () => {
    // Once the hub has committed the change of `recolor`, another controller adds its finalizer to the resource (no new generation, the
    // manifest unchanged): the status write that follows carries the old resourceVersion.
    let meddle = false;
    const meddling: ManifestServices = {
      ...manifests,
      applyIfChanged: async (...args) => {
        const outcome = await manifests.applyIfChanged(...args);
        if (meddle && args[2] === 'recolor' && 'changed' in outcome && outcome.changed) {
          meddle = false;
          api.patch(API_VERSION, 'widgets', 'lost-status', 'recolor', { metadata: { finalizers: [FINALIZER, 'example.com/hold'] } });
        }
        return outcome;
      },
    };
    const op = operator('lost-status', { namespaces: ['lost-status'], manifests: meddling });
    await op.start();
    try {
      api.apply('widgets', widget('lost-status', 'recolor', { color: 'red' }));
      await until('Ready', () => isReady('lost-status', 'recolor'));
      expect(conditionOf('lost-status', 'recolor', 'Ready')?.message).toBe('applied to tenant default');
      const mark = api.requests.length;
      meddle = true;
      api.apply('widgets', widget('lost-status', 'recolor', { color: 'blue' }));
      await until('generation 2 Ready', () => isReady('lost-status', 'recolor') && conditionOf('lost-status', 'recolor', 'Ready')?.observedGeneration === 2);
      // The status write after the change was refused (409), and the reconcile after it applied nothing: the hub held the manifest already.
      const statusWrites = api.requests.slice(mark).filter((r) => r.token === 'lost-status' && r.method === 'PATCH' && r.path.endsWith('/widgets/recolor/status'));
      expect(statusWrites.map((r) => r.status)).toContain(409);
      expect(get('lost-status', 'recolor')?.metadata.finalizers).toEqual([FINALIZER, 'example.com/hold']);
      expect(conditionOf('lost-status', 'recolor', 'Ready')?.message).toBe('applied to tenant default; warnings: spec.color: repainted from red to blue: what was painted before keeps its colour');
      // Read from the hub's record, not recomputed (an apply of the manifest held, rolled back, would answer none).
      expect(calls.filter((c) => c.endsWith('/recolor'))).toEqual(['apply 1/recolor', 'apply 1/recolor']);
      // A resync (nothing changed) keeps them; a change of the manifest replaces them with its own (none here).
      api.apply('widgets', widget('lost-status', 'recolor', { color: 'blue', schedule: '0 4 * * *' }));
      await until('generation 3 Ready', () => isReady('lost-status', 'recolor') && conditionOf('lost-status', 'recolor', 'Ready')?.observedGeneration === 3);
      expect(conditionOf('lost-status', 'recolor', 'Ready')?.message).toBe('applied to tenant default');
    } finally {
      await op.stop();
    }
  });

  it('without a run pod template, report a scheduled resource as Scheduled=False NoRunTemplate and not Ready; one without a schedule is Ready', async () => {
    const op = operator('notemplate', { namespaces: ['notemplate'], runJobTemplate: undefined, runJobTemplatePath: '/etc/svc-hub/run-job/pod-template.yaml' });
    api.apply('widgets', widget('notemplate', 'timed', { schedule: '0 3 * * *' }));
    api.apply('widgets', widget('notemplate', 'plain', { color: 'blue' }));
    await op.start();
    try {
      const scheduled = await until('timed reported', () => conditionOf('notemplate', 'timed', 'Scheduled'));
      expect(scheduled).toMatchObject({ status: 'False', reason: 'NoRunTemplate', message: expect.stringContaining('/etc/svc-hub/run-job/pod-template.yaml') });
      expect(conditionOf('notemplate', 'timed', 'Ready')).toMatchObject({ status: 'False', reason: 'NoRunTemplate' });
      expect(conditionOf('notemplate', 'timed', 'Stalled')).toMatchObject({ status: 'True', reason: 'NoRunTemplate' });
      await until('plain ready', () => isReady('notemplate', 'plain'));
      expect(cronJob('widget-notemplate-timed')).toBeUndefined();
    } finally {
      await op.stop();
    }
  });

  it('report a CronJob the API server refuses (422) as Scheduled=False CronJobInvalid, not Ready (Stalled), and do not write it again until the resource changes', async () => {
    // The backoff's clock, moved by hand; one worker, so that a marker reconciled follows all queued before it (settled).
    let clock = 1_000;
    const op = operator('refused', { namespaces: ['refused'], monotonic: () => clock, workers: 1 });
    // The test kind's hub takes any schedule; kube-apiserver reads days of week 0-6 only.
    api.apply('widgets', widget('refused', 'sunday', { schedule: '0 3 * * 7' }));
    await op.start();
    try {
      const scheduled = await until('sunday refused', () => conditionOf('refused', 'sunday', 'Scheduled'));
      expect(scheduled).toMatchObject({
        status: 'False',
        reason: 'CronJobInvalid',
        message: expect.stringMatching(/^the API server refused CronJob widget-refused-sunday \("0 3 \* \* 7"\): .*end of range \(7\) above maximum \(6\)/),
      });
      expect(conditionOf('refused', 'sunday', 'Ready')).toMatchObject({ status: 'False', reason: 'CronJobInvalid', message: expect.stringMatching(/^applied to tenant default; not scheduled: the API server refused/) });
      expect(conditionOf('refused', 'sunday', 'Stalled')).toMatchObject({ status: 'True', reason: 'CronJobInvalid' });
      expect(cronJob('widget-refused-sunday')).toBeUndefined();
      // Not retried: the reconciles its own status updates cause try once each, then nothing more
      // however long the operator runs. One of the tries allowed may itself be a retry (its status
      // write met a newer version, 409, and comes back after the backoff): let through, at most two.
      const key = 'widgets.test.svc.io/refused/sunday';
      await settled('refused');
      for (let retries = 0; op.retryIn(key) !== undefined; retries++) {
        expect(retries).toBeLessThan(2);
        clock += op.retryIn(key)!;
        expect(op.retryDue()).toContain(key);
        await settled('refused');
      }
      const writes = writesBy('refused', '/cronjobs').length;
      expect(writes).toBeLessThanOrEqual(3);
      // Nothing queued or under way (settled), no retry waiting, even an hour of the clock later: never written again.
      clock += 3_600_000;
      expect(op.retryDue()).toEqual([]);
      expect(op.health().data.queued).toBe(0);
      // Fixed in the resource: scheduled and Ready.
      api.apply('widgets', widget('refused', 'sunday', { schedule: '0 3 * * 0' }));
      await until('sunday scheduled and ready', () => {
        // (Any retry on the way, a 409, let through.)
        clock += 200;
        op.retryDue();
        return conditionOf('refused', 'sunday', 'Scheduled')?.status === 'True' && isReady('refused', 'sunday');
      });
      expect(specOf(cronJob('widget-refused-sunday')).schedule).toBe('0 3 * * 0');
    } finally {
      await op.stop();
    }
  });

  it('are not written again when the API server answers them in its own form (defaults added, empty values dropped): a second reconcile writes nothing', async () => {
    // The run pod template as the chart renders it with values that leave empty ones in it (an
    // extraEnv and a config entry of value "", empty resource requests), as cmd/operator.ts reads it.
    const dir = mkdtempSync(join(tmpdir(), 'svc-run-job-'));
    let chartTemplate: V1PodTemplateSpec | undefined;
    try {
      const values = join(dir, 'values.yaml');
      writeFileSync(values, stringify({ oidc: { issuer: 'https://login.example.com' }, extraEnv: [{ name: 'HTTPS_PROXY', value: '' }], config: { 'svc.log.format': '' }, operator: { runJobResources: { requests: {}, limits: { memory: '512Mi' } } } }));
      const rendered = helm(['template', 'hub', 'charts/svc-hub', '--namespace', RELEASE_NS, '-f', values, '--show-only', 'templates/run-job-template.yaml']);
      expect(rendered.stderr).toBe('');
      const configMap = parseAllDocuments(rendered.stdout)[0]!.toJS() as { data: Record<string, string> };
      writeFileSync(join(dir, 'pod-template.yaml'), configMap.data['pod-template.yaml']!);
      chartTemplate = loadRunJobTemplate(join(dir, 'pod-template.yaml'));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    expect(chartTemplate?.spec?.containers[0]?.env).toContainEqual({ name: 'HTTPS_PROXY', value: '' });
    // A hand-written one with the other empty values a template may hold.
    const handWritten: V1PodTemplateSpec = {
      spec: {
        restartPolicy: 'Never',
        hostNetwork: false,
        nodeSelector: {},
        containers: [{ name: 'run', image: 'svc-hub:test', workingDir: '', command: [], env: [{ name: 'EMPTY', value: '' }], volumeMounts: [{ name: 'tmp', mountPath: '/tmp', readOnly: false, subPath: '' }], ports: [] }],
        volumes: [{ name: 'tmp', emptyDir: { medium: '' } }],
      },
    };
    for (const [namespace, runJobTemplate] of [
      ['drift-chart', chartTemplate],
      ['drift-hand', handWritten],
    ] as const) {
      const op = operator(namespace, { namespaces: [namespace], runJobTemplate, workers: 1 });
      // Named apart: one name in one tenant is one hub object.
      const name = `hourly-${namespace}`;
      api.apply('widgets', widget(namespace, name, { schedule: '0 * * * *' }));
      await op.start();
      try {
        await until(`${namespace}: Scheduled`, () => conditionOf(namespace, name, 'Scheduled')?.status === 'True');
        const path = `/cronjobs/widget-${namespace}-${name}`;
        const stored = specOf(cronJob(`widget-${namespace}-${name}`)).jobTemplate.spec.template.spec;
        // The server's form: what was sent empty is not there, its defaults are.
        expect(stored.containers[0].env.find((e: { name: string }) => e.name === (namespace === 'drift-chart' ? 'HTTPS_PROXY' : 'EMPTY'))).toEqual({ name: namespace === 'drift-chart' ? 'HTTPS_PROXY' : 'EMPTY' });
        expect(stored).toMatchObject({ dnsPolicy: 'ClusterFirst', schedulerName: 'default-scheduler', terminationGracePeriodSeconds: 30 });
        const reads = () => api.requests.filter((r) => r.token === namespace && r.method === 'GET' && r.path.endsWith(path)).length;
        // The CronJob's own ADDED event has been reconciled (it reads the CronJob, then the marker's reconcile comes after it).
        const created = api.requests.findIndex((r) => r.token === namespace && r.method === 'POST' && r.path.endsWith('/cronjobs'));
        await until(`${namespace}: the CronJob's ADDED event to be reconciled`, () => api.requests.slice(created).some((r) => r.token === namespace && r.method === 'GET' && r.path.endsWith(path)));
        await settled(namespace);
        const before = reads();
        op.resyncAll();
        await until(`${namespace}: the resync to read the CronJob`, () => reads() > before);
        await settled(namespace);
        // One write in all: the create.
        expect(writesBy(namespace, path).map((r) => r.method)).toEqual([]);
        expect(writesBy(namespace, '/cronjobs').map((r) => `${r.method} ${r.path.split('/').at(-1)}`)).toEqual([`POST cronjobs`]);
        // What was written empty is still the operator's: a value put there by hand is taken out again.
        const edited = cronJob(`widget-${namespace}-${name}`)!;
        const pod = specOf(edited).jobTemplate.spec.template.spec;
        pod.containers[0].env = pod.containers[0].env.map((e: { name: string }) => (e.name === 'HTTPS_PROXY' || e.name === 'EMPTY' ? { ...e, value: 'http://smuggled:3128' } : e));
        api.apply('cronjobs', edited);
        await until(`${namespace}: the empty value put back`, () =>
          specOf(cronJob(`widget-${namespace}-${name}`)).jobTemplate.spec.template.spec.containers[0].env.every((e: { value?: string }) => e.value !== 'http://smuggled:3128'),
        );
        await removeMarker(namespace);
      } finally {
        await op.stop();
      }
    }
  });

  it('give two resources whose <kind>-<namespace>-<name> coincide (team-a/x-y, team-a-x/y) a CronJob each', async () => {
    const op = operator('dashes', { namespaces: ['dash', 'dash-x'] });
    api.apply('widgets', widget('dash', 'x-y', { schedule: '0 4 * * *' }));
    await op.start();
    try {
      await until('the first scheduled', () => conditionOf('dash', 'x-y', 'Scheduled')?.status === 'True');
      api.apply('widgets', widget('dash-x', 'y', { schedule: '0 5 * * *' }));
      const second = await until('the second scheduled', () => conditionOf('dash-x', 'y', 'Scheduled')?.status === 'True' && conditionOf('dash-x', 'y', 'Scheduled'));
      const alternate = cronJobAlternateName(WIDGET, 'dash-x', 'y');
      expect(alternate).toMatch(/^widget-dash-x-y-[0-9a-f]{8}$/);
      expect(second.message).toBe(`CronJob ${alternate} runs "0 5 * * *" (Etc/UTC)`);
      expect(specOf(cronJob('widget-dash-x-y')).schedule).toBe('0 4 * * *');
      expect(cronJob('widget-dash-x-y')!.metadata.labels?.['svc.io/resource-uid']).toBe(get('dash', 'x-y')!.metadata.uid);
      expect(specOf(cronJob(alternate)).schedule).toBe('0 5 * * *');
      expect(cronJob(alternate)!.metadata.labels?.['svc.io/resource-uid']).toBe(get('dash-x', 'y')!.metadata.uid);
      // The first one deleted, the second keeps its CronJob under the alternate name: no second one
      // under the plain name, which would run every slot twice.
      api.remove(API_VERSION, 'widgets', 'dash', 'x-y');
      await until('the first CronJob gone', () => !cronJob('widget-dash-x-y') && !get('dash', 'x-y'));
      const before = api.requests.length;
      api.apply('widgets', widget('dash-x', 'y', { schedule: '0 6 * * *' }));
      await until('the second rescheduled', () => specOf(cronJob(alternate))?.schedule === '0 6 * * *');
      expect(api.requests.slice(before).some((r) => r.method === 'GET' && r.path.endsWith('/cronjobs/widget-dash-x-y'))).toBe(true);
      expect(cronJob('widget-dash-x-y')).toBeUndefined();
    } finally {
      await op.stop();
    }
  });

  it('give a resource a CronJob when the resources of another namespace hold both its name and its alternate name', async () => {
    // A namespace owner of `squat` knows the name and the alternate name of a resource `n` of
    // `squat-v` (another party's namespace): both are computed from the namespace and name alone.
    // Two resources of their own take both before it is created: it is scheduled all the same.
    const op = operator('squat', { namespaces: ['squat', 'squat-v'] });
    const alternate = cronJobAlternateName(WIDGET, 'squat-v', 'n');
    const squatter = alternate.slice('widget-squat-'.length);
    expect(cronJobName(WIDGET, 'squat', squatter)).toBe(alternate);
    api.apply('widgets', widget('squat', 'v-n', { schedule: '0 4 * * *' }));
    api.apply('widgets', widget('squat', squatter, { schedule: '0 4 * * *' }));
    await op.start();
    try {
      await until('both squatters scheduled', () => conditionOf('squat', 'v-n', 'Scheduled')?.status === 'True' && conditionOf('squat', squatter, 'Scheduled')?.status === 'True');
      expect(cronJob('widget-squat-v-n')!.metadata.labels?.['svc.io/resource-uid']).toBe(get('squat', 'v-n')!.metadata.uid);
      expect(cronJob(alternate)!.metadata.labels?.['svc.io/resource-uid']).toBe(get('squat', squatter)!.metadata.uid);
      api.apply('widgets', widget('squat-v', 'n', { schedule: '0 5 * * *' }));
      const scheduled = await until('the victim scheduled', () => conditionOf('squat-v', 'n', 'Scheduled'));
      expect(scheduled).toMatchObject({ status: 'True', reason: 'CronJobReady' });
      const uid = get('squat-v', 'n')!.metadata.uid!;
      const own = api.list('batch/v1', 'cronjobs', RELEASE_NS).filter((j) => j.metadata.labels?.['svc.io/resource-uid'] === uid);
      expect(own).toHaveLength(1);
      expect(scheduled.message).toBe(`CronJob ${own[0]!.metadata.name} runs "0 5 * * *" (Etc/UTC)`);
      // The squatters' CronJobs are left alone; the one freed name does not give the victim a second CronJob.
      expect(specOf(cronJob('widget-squat-v-n')).schedule).toBe('0 4 * * *');
      api.remove(API_VERSION, 'widgets', 'squat', 'v-n');
      await until('the first squatter gone', () => !cronJob('widget-squat-v-n') && !get('squat', 'v-n'));
      api.apply('widgets', widget('squat-v', 'n', { schedule: '0 6 * * *' }));
      await until('the victim rescheduled', () => specOf(cronJob(own[0]!.metadata.name!))?.schedule === '0 6 * * *');
      expect(api.list('batch/v1', 'cronjobs', RELEASE_NS).filter((j) => j.metadata.labels?.['svc.io/resource-uid'] === uid)).toHaveLength(1);
    } finally {
      await op.stop();
    }
  });

  it('report a CronJob of that name that is not the operator\'s as Scheduled=False CronJobConflict, and the resource as not Ready (Stalled)', async () => {
    const op = operator('conflict', { namespaces: ['conflict'] });
    api.apply('cronjobs', { apiVersion: 'batch/v1', kind: 'CronJob', metadata: { name: 'widget-conflict-taken', namespace: RELEASE_NS }, spec: jobSpec('1 1 * * *') });
    api.apply('widgets', widget('conflict', 'other', { schedule: '0 3 * * *' }));
    await op.start();
    try {
      await until('other scheduled', () => cronJob('widget-conflict-other'));
      const otherUid = get('conflict', 'other')!.metadata.uid!;
      // A CronJob of the operator's, labelled for another resource that exists.
      const mine = cronJob('widget-conflict-other')!;
      api.apply('cronjobs', { ...mine, metadata: { ...mine.metadata, name: 'widget-conflict-shared', uid: undefined, resourceVersion: undefined } });
      api.apply('widgets', widget('conflict', 'taken', { schedule: '0 3 * * *' }));
      api.apply('widgets', widget('conflict', 'shared', { schedule: '0 3 * * *' }));
      const taken = await until('taken in conflict', () => conditionOf('conflict', 'taken', 'Scheduled'));
      expect(taken).toMatchObject({ status: 'False', reason: 'CronJobConflict', message: expect.stringContaining('is not managed by the operator') });
      // One of ours for another resource (its namespace and name on its labels): not this one's, so
      // this one's CronJob takes the alternate name, and the other is left alone.
      const shared = await until('shared scheduled', () => conditionOf('conflict', 'shared', 'Scheduled'));
      expect(shared).toMatchObject({ status: 'True', reason: 'CronJobReady', message: expect.stringContaining(cronJobAlternateName(WIDGET, 'conflict', 'shared')) });
      expect(cronJob('widget-conflict-shared')!.metadata.labels?.['svc.io/resource-uid']).toBe(otherUid);
      // Applied in the hub, but nothing would ever run: not Ready, Stalled, so GitOps tools do not show it healthy.
      expect(conditionOf('conflict', 'taken', 'Ready')).toMatchObject({ status: 'False', reason: 'CronJobConflict', message: expect.stringMatching(/^applied to tenant default; not scheduled: /) });
      expect(conditionOf('conflict', 'taken', 'Stalled')).toMatchObject({ status: 'True', reason: 'CronJobConflict' });
      expect(calls).toContain('apply 1/taken');
      expect(specOf(cronJob('widget-conflict-taken')).schedule).toBe('1 1 * * *');
    } finally {
      await op.stop();
    }
  });

  it('are deleted on resync when their resource is gone, replaced when the name is reused, and the old layout is removed', async () => {
    const op = operator('orphans', { namespaces: ['orphans'] });
    const orphan = (name: string, namespace: string, uid: string): KubeObject => ({
      apiVersion: 'batch/v1',
      kind: 'CronJob',
      metadata: {
        name: `widget-${namespace}-${name}`,
        namespace: RELEASE_NS,
        labels: { 'app.kubernetes.io/managed-by': 'svc-hub-operator', 'svc.io/kind': 'widget', 'svc.io/resource-namespace': namespace, 'svc.io/resource-name': name, 'svc.io/resource-uid': uid },
        annotations: { 'svc.io/resource-name': name },
      },
      spec: jobSpec('5 5 * * *'),
    });
    api.apply('cronjobs', orphan('deleted', 'orphans', 'dead-uid-1'));
    // Of a namespace this operator does not watch: not its to judge.
    api.apply('cronjobs', orphan('elsewhere', 'not-watched', 'dead-uid-2'));
    api.apply('cronjobs', orphan('reused', 'orphans', 'dead-uid-3'));
    // The old layout: `<kind>-<name>` in the resource's namespace, owned by it.
    const legacy = api.apply('widgets', widget('orphans', 'legacy', { schedule: '0 4 * * *' }));
    api.apply('cronjobs', {
      apiVersion: 'batch/v1',
      kind: 'CronJob',
      metadata: { name: 'widget-legacy', namespace: 'orphans', ownerReferences: [{ apiVersion: API_VERSION, kind: 'Widget', name: 'legacy', uid: legacy.metadata.uid! }] },
      spec: jobSpec('0 4 * * *'),
    });
    await op.start();
    try {
      await until('the old layout replaced by the new', () => !api.get('batch/v1', 'cronjobs', 'orphans', 'widget-legacy') && cronJob('widget-orphans-legacy'));
      // The term's first sweep, and any resync, deletes the orphan.
      op.resyncAll();
      await until('the orphan deleted', () => !cronJob('widget-orphans-deleted'));
      expect(await op.removeOrphanedCronJobs()).toBe(0);
      expect(cronJob('widget-not-watched-elsewhere')).toBeDefined();

      api.apply('widgets', widget('orphans', 'reused', { schedule: '0 6 * * *' }));
      await until('reused scheduled', () => conditionOf('orphans', 'reused', 'Scheduled')?.status === 'True');
      const job = cronJob('widget-orphans-reused')!;
      expect(job.metadata.labels?.['svc.io/resource-uid']).toBe(get('orphans', 'reused')!.metadata.uid);
      expect(specOf(job).schedule).toBe('0 6 * * *');
    } finally {
      await op.stop();
    }
  });

  it('are not deleted as orphans by an operator not sure it leads (resumed after a pause): its cache may be older than the new leader\'s CronJobs', async () => {
    let leading = false;
    const op = operator('orphans-paused', { namespaces: ['orphans-paused'], leading: () => leading });
    api.apply('cronjobs', {
      apiVersion: 'batch/v1',
      kind: 'CronJob',
      metadata: {
        name: 'widget-orphans-paused-gone',
        namespace: RELEASE_NS,
        labels: { 'app.kubernetes.io/managed-by': 'svc-hub-operator', 'svc.io/kind': 'widget', 'svc.io/resource-namespace': 'orphans-paused', 'svc.io/resource-name': 'gone', 'svc.io/resource-uid': 'dead-uid-9' },
        annotations: { 'svc.io/resource-name': 'gone' },
      },
      spec: jobSpec('5 5 * * *'),
    });
    // The sweeps the resync starts (without waiting for them), so the test can wait for theirs.
    const sweeps: Promise<number>[] = [];
    const sweep = op.removeOrphanedCronJobs.bind(op);
    op.removeOrphanedCronJobs = () => {
      const swept = sweep();
      sweeps.push(swept);
      return swept;
    };
    await op.start();
    try {
      const started = sweeps.length;
      op.resyncAll();
      await until("the resync's sweep", () => sweeps.length > started);
      expect(await sweeps[started]).toBe(0);
      expect(await op.removeOrphanedCronJobs()).toBe(0);
      expect(cronJob('widget-orphans-paused-gone')).toBeDefined();
      // Sure of it again (a renewal): the sweep deletes the orphan.
      leading = true;
      op.resyncAll();
      await until('the orphan deleted', () => !cronJob('widget-orphans-paused-gone'));
    } finally {
      await op.stop();
    }
  });
  it('are swept by the uid of their resource, whatever their name labels say: one labelled for a live resource is kept though its labels name another (a same-named resource of another namespace, or none), one of a dead uid goes though it names none', async () => {
    const op = operator('by-uid', { namespaces: ['by-uid', 'by-uid-2'], namespacePollEvery: 0 });
    await op.start();
    try {
      api.apply('widgets', widget('by-uid', 'keep', { schedule: '0 2 * * *' }));
      api.apply('widgets', widget('by-uid', 'moved', { schedule: '0 3 * * *' }));
      await until('both scheduled', () => ['keep', 'moved'].every((n) => isReady('by-uid', n) && cronJob(`widget-by-uid-${n}`)));
      // A resource of the same name in another namespace (in Conflict in the hub: the name is by-uid/keep's in the tenant).
      api.apply('widgets', widget('by-uid-2', 'keep', { schedule: '0 4 * * *' }));
      await until('its conflict reported', () => conditionOf('by-uid-2', 'keep', 'Ready')?.reason === 'Conflict');
      const uids = () => ['widget-by-uid-keep', 'widget-by-uid-moved'].map((n) => cronJob(n)?.metadata.uid);
      const before = uids();
      // A CronJob of a resource gone (its uid no resource has) that names none: no name label nor annotation.
      api.apply('cronjobs', {
        apiVersion: 'batch/v1',
        kind: 'CronJob',
        metadata: {
          name: 'widget-by-uid-nameless',
          namespace: RELEASE_NS,
          labels: { 'app.kubernetes.io/managed-by': 'svc-hub-operator', 'svc.io/kind': 'widget', 'svc.io/resource-namespace': 'by-uid', 'svc.io/resource-uid': 'dead-uid-7' },
        },
        spec: jobSpec('5 5 * * *'),
      });
      // The reconciles of by-uid wait (their read of the Namespace hangs), so only the sweep acts on the edits below.
      const release = api.stallNext('GET', /^\/api\/v1\/namespaces\/by-uid$/, 100);
      try {
        // Edited by hand: one names the same-named resource of another namespace (another uid), the other a resource that does not exist.
        api.patch('batch/v1', 'cronjobs', RELEASE_NS, 'widget-by-uid-keep', { metadata: { labels: { 'svc.io/resource-namespace': 'by-uid-2' } } });
        api.patch('batch/v1', 'cronjobs', RELEASE_NS, 'widget-by-uid-moved', { metadata: { labels: { 'svc.io/resource-name': 'nobody' }, annotations: { 'svc.io/resource-name': 'nobody' } } });
        // The edits reached the operator's CronJob cache: it requeued both resources, whose reconciles now wait.
        await until('both reconciles waiting', () => release.held >= 2, 5_000);
        expect(await op.removeOrphanedCronJobs()).toBe(1);
        expect(cronJob('widget-by-uid-nameless')).toBeUndefined();
        expect(uids()).toEqual(before);
      } finally {
        release();
      }
      // Released, the resources take their CronJobs back: the same ones, relabelled.
      await until('labels put back', () => cronJob('widget-by-uid-keep')?.metadata.labels?.['svc.io/resource-namespace'] === 'by-uid' && cronJob('widget-by-uid-moved')?.metadata.annotations?.['svc.io/resource-name'] === 'moved', 5_000);
      expect(uids()).toEqual(before);
    } finally {
      await op.stop();
    }
  });
});

describe('status writes', () => {
  it('the resource as the watch reports the operator\'s own status write back is the one afterStatusWrite expects, though the write changed its managedFields (and resourceVersion)', async () => {
    const custom = kubeConfig({ server: api.url, token: 'status-writes' }).makeApiClient(CustomObjectsApi);
    api.apply('widgets', widget('status-writes', 'w'));
    const read = (await custom.getNamespacedCustomObject({ group: WIDGET.group, version: WIDGET.version, plural: WIDGET.plural, namespace: 'status-writes', name: 'w' })) as Resource;
    const status: ResourceStatus = { observedGeneration: 1, tenant: 'default' };
    await writeStatus(custom, WIDGET, read, {}, status);
    const after = get('status-writes', 'w')!;
    // The API server recorded the writer of the status subresource: an entry the copy read had not.
    expect(after.metadata.managedFields?.length).toBe((read.metadata.managedFields?.length ?? 0) + 1);
    expect(after.metadata.managedFields?.at(-1)).toMatchObject({ operation: 'Update', subresource: 'status', fieldsV1: { 'f:status': { 'f:observedGeneration': {}, 'f:tenant': {} } } });
    expect(afterStatusWrite(after, after.status)).toBe(afterStatusWrite(read, status));
  });
});

describe('writes the API server refuses as invalid (Kubernetes before 1.30, a CRD made stricter since the resources were stored)', () => {
  /** WIDGET as a later release might declare it: fewer colours (its CRD is installed over resources stored before). */
  const STRICTER: ManifestKind = {
    ...WIDGET,
    schema: { type: 'object', properties: { spec: { type: 'object', properties: { color: { type: 'string', enum: ['blue', 'green'] }, schedule: { type: 'string' } } } } },
  };

  it('are reported once each as a Warning Event on the resource (StatusRejected, FinalizerRejected) and one log line, masked and cut, and retried with backoff until the resource is fixed', async () => {
    const NS = 'pre130';
    // A cluster before 1.30: a status write validates the whole resource, spec included (the shared stand-in validates status only).
    const old = await new KubeApiStandIn([crdOf(WIDGET) as never], { pre130: true }).start();
    old.enforceRbac(operatorGrants({ kinds: [WIDGET], releaseNamespace: RELEASE_NS, leaseName: 'svc-hub-operator' }));
    const token = 'pre130';
    const withFinalizer = (w: KubeObject): KubeObject => ({ ...w, metadata: { ...w.metadata, finalizers: [FINALIZER] } });
    // Two bytes a character in UTF-8: the answer is cut by bytes, not characters.
    const secretish = `https://admin:s3cret-pw@colours.example/ ${'ü'.repeat(3000)}`;
    // Stored under the CRD of the time: `red` reconciled by an operator before (its finalizer on, its
    // status still to write), `fresh` never, `leaving` being deleted, `long` with a colour that quotes a credential.
    old.apply('widgets', withFinalizer(widget(NS, 'red')));
    old.apply('widgets', widget(NS, 'fresh'));
    old.apply('widgets', withFinalizer(widget(NS, 'leaving')));
    old.apply('widgets', withFinalizer(widget(NS, 'long', { color: secretish })));
    old.updateCrd(crdOf(STRICTER) as never);
    old.remove(API_VERSION, 'widgets', NS, 'leaving');
    const stored = (name: string) => old.get(API_VERSION, 'widgets', NS, name) as Resource | undefined;
    const events = () => old.list('v1', 'events', NS) as Array<KubeObject & { involvedObject: { name: string; uid: string }; reason: string; type: string; message: string; source: { component: string } }>;
    const eventsOf = (name: string) => events().filter((e) => e.involvedObject.name === name);
    const logs = captureLogs('warn');
    // The backoff's clock, moved by hand: each retry is let through when its delay has passed on it.
    let clock = 1_000;
    const op = operator(token, { kc: kubeConfig({ server: old.url, token }), namespaces: [NS], monotonic: () => clock });
    try {
      await op.start();
      await until('an Event on each resource', () => ['red', 'fresh', 'leaving', 'long'].every((n) => eventsOf(n).length > 0), {
        detail: () => JSON.stringify(events().map((e) => [e.involvedObject.name, e.reason])),
      });
      const invalid = (name: string, value = name) => `HTTP 422: Widget.test.svc.io "${name}" is invalid: spec.color: Unsupported value: "${value}": supported values: "blue", "green"`;
      const [red] = eventsOf('red');
      expect(red).toMatchObject({ type: 'Warning', reason: 'StatusRejected', source: { component: 'svc-hub-operator' }, involvedObject: { uid: stored('red')!.metadata.uid } });
      expect(red!.message).toBe(
        `status not written: the API server refused the write (${invalid('red')}). Before Kubernetes 1.30 every write of a resource, its status included, validates the whole resource against its CRD: one stored before its CRD became stricter must be fixed where the answer says. Retried with backoff`,
      );
      expect(eventsOf('fresh')[0]).toMatchObject({ type: 'Warning', reason: 'FinalizerRejected', message: expect.stringMatching(/^finalizer svc\.io\/cleanup not added: the resource is not reconciled until it is: the API server refused the write \(HTTP 422: .*"fresh" is invalid: spec\.color/) });
      expect(eventsOf('leaving')[0]).toMatchObject({ type: 'Warning', reason: 'FinalizerRejected', message: expect.stringMatching(/^finalizer svc\.io\/cleanup not removed: the resource stays until it is: the API server refused the write \(HTTP 422: .*"leaving" is invalid: spec\.color/) });
      // The API server's answer quotes the value whole: masked as a status condition's error text, and cut.
      const long = eventsOf('long')[0]!;
      expect(long.reason).toBe('StatusRejected');
      expect(long.message).not.toContain('s3cret-pw');
      expect(long.message).toContain('Unsupported value: "https://***@colours.example/ üüü');
      expect(long.message).toMatch(/ü…\)\. Before Kubernetes 1\.30/);
      const answer = long.message.slice(long.message.indexOf('HTTP 422'), long.message.indexOf('). Before'));
      expect(Buffer.byteLength(answer)).toBeLessThanOrEqual(512);
      expect(Buffer.byteLength(answer)).toBeGreaterThan(505);
      expect(Buffer.byteLength(long.message)).toBeLessThan(1024);

      // Retried with backoff (20 ms doubling to 200 ms here, on the operator's clock), reported once: one Event and one log line per resource.
      const statusWrites = () => old.requests.filter((r) => r.token === token && r.method === 'PATCH' && r.path.endsWith('/red/status'));
      const key = `widgets.test.svc.io/${NS}/red`;
      const before = statusWrites().length;
      for (const delay of [20, 40, 80, 160, 200, 200]) {
        await until("red's try refused, its retry waiting", () => op.retryIn(key) !== undefined);
        expect(op.retryIn(key)).toBe(delay);
        const tries = statusWrites().length;
        // A millisecond short of its delay: not retried; at it: retried.
        clock += delay - 1;
        expect(op.retryDue()).not.toContain(key);
        clock += 1;
        expect(op.retryDue()).toContain(key);
        await until('the retry made', () => statusWrites().length > tries);
      }
      await until("red's last try refused", () => op.retryIn(key) !== undefined);
      expect(statusWrites().length - before).toBe(6);
      expect(statusWrites().every((r) => r.status === 422)).toBe(true);
      for (const name of ['red', 'fresh', 'leaving', 'long']) expect(eventsOf(name)).toHaveLength(1);
      const lines = logs.lines().filter((l) => String(l.msg).includes(`${NS}/`));
      expect(lines.map((l) => [l.name, l.reason]).sort()).toEqual([['fresh', 'FinalizerRejected'], ['leaving', 'FinalizerRejected'], ['long', 'StatusRejected'], ['red', 'StatusRejected']]);
      expect(lines.find((l) => l.name === 'red')!.msg).toBe(`Widget ${NS}/red: ${red!.message} (a Warning Event StatusRejected is on the resource; this line comes again only when the answer changes, or after 30 min)`);
      expect(stored('red')!.status).toBeUndefined();
      expect(stored('fresh')!.metadata.finalizers).toBeUndefined();
      // Nothing was applied for them: the reconcile stops at the refused write.
      expect(calls.filter((c) => /^apply 1\/(red|fresh|long)$/.test(c))).toEqual([]);

      // Fixed: each goes on at once (its change is a watch event), and the one being deleted goes.
      for (const name of ['red', 'fresh', 'leaving']) old.patch(API_VERSION, 'widgets', NS, name, { spec: { color: 'blue' } });
      await until('red and fresh Ready, leaving gone', () => {
        // (Any retry on the way, a 409, let through.)
        clock += 200;
        op.retryDue();
        const ready = (name: string) => stored(name)?.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True';
        return ready('red') && ready('fresh') && !stored('leaving');
      });
      expect(stored('fresh')!.metadata.finalizers).toEqual([FINALIZER]);
    } finally {
      logs.restore();
      await op.stop();
      await old.close();
    }
  });

  it('report the same refusal again once REJECTION_REPEAT (30 min) has passed on the monotonic clock, not before, and at once when the answer changes', async () => {
    const NS = 'pre130-repeat';
    const old = await new KubeApiStandIn([crdOf(WIDGET) as never], { pre130: true }).start();
    old.enforceRbac(operatorGrants({ kinds: [WIDGET], releaseNamespace: RELEASE_NS, leaseName: 'svc-hub-operator' }));
    const token = 'pre130-repeat';
    const red = widget(NS, 'red');
    old.apply('widgets', { ...red, metadata: { ...red.metadata, finalizers: [FINALIZER] } });
    old.updateCrd(crdOf(STRICTER) as never);
    const events = () => (old.list('v1', 'events', NS) as Array<KubeObject & { involvedObject: { name: string }; reason: string; message: string }>).filter((e) => e.involvedObject.name === 'red');
    const statusWrites = () => old.requests.filter((r) => r.token === token && r.method === 'PATCH' && r.path.endsWith('/red/status')).length;
    const key = `widgets.test.svc.io/${NS}/red`;
    const lines = (logs: ReturnType<typeof captureLogs>) => logs.lines().filter((l) => l.name === 'red' && l.reason === 'StatusRejected');
    // The damping's clock, which is the backoff's too, moved by hand: no real 30 minutes pass.
    let clock = 5_000;
    /**
     * Lets red's retry through now (the clock is past its backoff) and waits until it was refused:
     * then its refusal was reported or damped already (its log line is written before the retry is
     * scheduled; its Event is sent then, not waited for).
     */
    const retryNow = async () => {
      const from = statusWrites();
      await until('red waiting out its backoff', () => op.retryIn(key) !== undefined);
      expect(op.retryDue()).toContain(key);
      await until('its retry refused', () => statusWrites() > from && op.retryIn(key) !== undefined);
    };
    /** The next `n` retries of red, each once its backoff has passed (the clock moved on by it). */
    const retried = async (n: number) => {
      for (let i = 0; i < n; i++) {
        clock += await until('red waiting out its backoff', () => op.retryIn(key));
        await retryNow();
      }
    };
    const logs = captureLogs('warn');
    const op = operator(token, { kc: kubeConfig({ server: old.url, token }), namespaces: [NS], monotonic: () => clock });
    try {
      await op.start();
      await until('the first Event', () => events().length === 1);
      const reported = clock;
      await retried(3);
      expect(events()).toHaveLength(1);
      expect(lines(logs)).toHaveLength(1);
      // A millisecond short of the repeat: still damped.
      clock = reported + REJECTION_REPEAT - 1;
      await retryNow();
      expect(lines(logs)).toHaveLength(1);
      expect(events()).toHaveLength(1);
      // At the repeat (a reconcile made at once, its retry being a backoff away): the same Event again, and the same log line, once.
      clock = reported + REJECTION_REPEAT;
      await expect(op.reconcileKey(key)).rejects.toThrow(/HTTP 422: .*"red" is invalid/);
      await until('the repeated Event', () => events().length === 2);
      expect(lines(logs)).toHaveLength(2);
      await retried(3);
      expect(events().map((e) => [e.reason, e.message])).toEqual([
        ['StatusRejected', events()[0]!.message],
        ['StatusRejected', events()[0]!.message],
      ]);
      expect(lines(logs).map((l) => l.msg)).toEqual([lines(logs)[0]!.msg, lines(logs)[0]!.msg]);
      // Damped again from the repeat on: 30 minutes less a millisecond later, nothing more.
      clock = reported + 2 * REJECTION_REPEAT - 1;
      await retryNow();
      expect(lines(logs)).toHaveLength(2);
      expect(events()).toHaveLength(2);
      // Another answer (the CRD changed again) is reported at its next try, whatever the clock says.
      old.updateCrd(crdOf({ ...STRICTER, schema: { type: 'object', properties: { spec: { type: 'object', properties: { color: { type: 'string', enum: ['blue', 'green', 'yellow'] }, schedule: { type: 'string' } } } } } }) as never);
      await retried(1);
      expect(lines(logs)).toHaveLength(3);
      await until('the Event of the new answer', () => events().length === 3);
      // (Events list in the order of their generated names, not of their creation.)
      expect(events().filter((e) => e.message.includes('supported values: "blue", "green", "yellow"'))).toHaveLength(1);
      await retried(3);
      expect(events()).toHaveLength(3);
      expect(lines(logs)).toHaveLength(3);
    } finally {
      logs.restore();
      await op.stop();
      await old.close();
    }
  });
});

describe('operator instances and namespaces', () => {
  it('an instance reconciles only resources labelled for it; without one, only unlabelled resources', async () => {
    const blue = operator('blue', { namespaces: ['inst'], instance: 'blue' });
    const plain = operator('plain', { namespaces: ['inst'] });
    await blue.start();
    await plain.start();
    try {
      api.apply('widgets', widget('inst', 'for-blue', { schedule: '0 7 * * *' }, { 'svc.io/operator-instance': 'blue' }));
      api.apply('widgets', widget('inst', 'for-plain', { schedule: '0 8 * * *' }));
      await until('both Ready', () => isReady('inst', 'for-blue') && isReady('inst', 'for-plain'));
      await until('both CronJobs', () => cronJob('widget-inst-for-blue') && cronJob('widget-inst-for-plain'));
      expect(writesBy('plain', '/widgets/for-blue')).toEqual([]);
      expect(writesBy('blue', '/widgets/for-plain')).toEqual([]);
      expect(writesBy('blue', '/widgets/for-blue').length).toBeGreaterThan(0);
      expect(cronJob('widget-inst-for-blue')!.metadata.labels?.['svc.io/operator-instance']).toBe('blue');
      // The selectors go to the API server with every list and watch.
      const selectors = (token: string) => new Set(api.requests.filter((r) => r.token === token && r.path.endsWith('/widgets')).map((r) => r.query.labelSelector));
      expect(selectors('blue')).toEqual(new Set(['svc.io/operator-instance=blue']));
      expect(selectors('plain')).toEqual(new Set(['!svc.io/operator-instance']));
      const cronSelectors = new Set(api.requests.filter((r) => r.token === 'blue' && r.path.endsWith('/cronjobs') && r.method === 'GET').map((r) => r.query.labelSelector));
      expect(cronSelectors).toEqual(new Set(['app.kubernetes.io/managed-by=svc-hub-operator,svc.io/operator-instance=blue']));
    } finally {
      await blue.stop();
      await plain.stop();
    }
  });

  it('a scheduled resource moved from an instance to the operator without one keeps its CronJob: relabelled for the new one, and not swept as the old one\'s orphan from a CronJob cache behind', async () => {
    const green = operator('green', { namespaces: ['moving'], instance: 'green' });
    const plain = operator('plain-moving', { namespaces: ['moving'] });
    await green.start();
    await plain.start();
    try {
      const labelled = (instance?: string) => widget('moving', 'nightly', { schedule: '0 3 * * *' }, instance ? { 'svc.io/operator-instance': instance } : {});
      api.apply('widgets', labelled('green'));
      await until('Ready', () => isReady('moving', 'nightly'));
      const instanceOf = () => cronJob('widget-moving-nightly')?.metadata.labels?.['svc.io/operator-instance'];
      await until('its CronJob, of green', () => instanceOf() === 'green');
      // The CronJob watches lag: green will not see its CronJob relabelled for plain.
      const release = api.holdWatches(/\/cronjobs$/);
      try {
        const mark = api.requests.length;
        // Moved to the operator without an instance (the label taken off): its CronJob is that operator's now.
        api.apply('widgets', labelled());
        await until('the CronJob no longer labelled for green', () => cronJob('widget-moving-nightly') && instanceOf() === undefined, 5_000);
        // green has seen the resource go (it asks the API server whether it is gone).
        await until('green saw the resource leave', () => api.requests.slice(mark).some((r) => r.token === 'green' && r.method === 'GET' && r.path.endsWith('/widgets/nightly')));
        // green's sweep (its resync), from its cache of the CronJob as green's: the CronJob changed since, so it is not deleted.
        expect(await green.removeOrphanedCronJobs()).toBe(0);
        expect(instanceOf()).toBeUndefined();
      } finally {
        release();
      }
      const greenWrote = writesBy('green', '/cronjobs').length;
      // What must not happen is green acting on the CronJob events held back until now, which reach
      // only its own informer: both operators have handled every event so far, and done what they do.
      await operatorsSettled(api, [green, plain]);
      expect(writesBy('green', '/cronjobs').slice(greenWrote)).toEqual([]);
      expect(cronJob('widget-moving-nightly')).toBeDefined();
      expect(conditionOf('moving', 'nightly', 'Scheduled')?.status).toBe('True');
      api.remove(API_VERSION, 'widgets', 'moving', 'nightly');
      await until('the resource gone', () => !get('moving', 'nightly'));
      expect(cronJob('widget-moving-nightly')).toBeUndefined();
    } finally {
      await green.stop();
      await plain.stop();
    }
  });

  it('a Namespace deleted: its resources are finalized (their hub objects and CronJobs deleted) and the Namespace goes; nothing is created in it meanwhile', async () => {
    const op = operator('ns-deleted', { namespaces: ['ns-deleted'] });
    api.apply('namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'ns-deleted', labels: { 'svc.io/tenant': 'default' } } });
    await op.start();
    try {
      api.apply('widgets', widget('ns-deleted', 'nsd-timed', { schedule: '0 1 * * *' }));
      api.apply('widgets', widget('ns-deleted', 'nsd-plain'));
      await until('both Ready, one scheduled', () => isReady('ns-deleted', 'nsd-timed') && isReady('ns-deleted', 'nsd-plain') && cronJob('widget-ns-deleted-nsd-timed'));
      const mark = api.requests.length;
      api.remove('v1', 'namespaces', undefined, 'ns-deleted');
      await until('the Namespace gone', () => !api.get('v1', 'namespaces', undefined, 'ns-deleted'), 10_000);
      expect(cronJob('widget-ns-deleted-nsd-timed')).toBeUndefined();
      expect([held.has('1/nsd-timed'), held.has('1/nsd-plain')]).toEqual([false, false]);
      expect(calls).toEqual(expect.arrayContaining(['remove 1/nsd-timed', 'remove 1/nsd-plain']));
      // The operator created nothing in the release namespace meanwhile, and nothing in the Namespace but what it may not (its Events, refused).
      const creates = api.requests.slice(mark).filter((r) => r.token === 'ns-deleted' && r.method === 'POST');
      expect(creates.filter((r) => !r.path.endsWith('/events'))).toEqual([]);
    } finally {
      await op.stop();
    }
  });

  it('a release namespace that does not exist: the CronJob write fails with the API server\'s 404, reported (Scheduled=Unknown CronJobFailed) and retried; written once the namespace exists', async () => {
    const op = operator('late-release', { namespaces: ['late-release'], cronJobNamespace: LATE_RELEASE_NS });
    await op.start();
    try {
      api.apply('widgets', widget('late-release', 'nightly', { schedule: '0 1 * * *' }));
      const name = cronJobName(WIDGET, 'late-release', 'nightly');
      const scheduled = await until('Scheduled=Unknown', () => conditionOf('late-release', 'nightly', 'Scheduled')?.status === 'Unknown' && conditionOf('late-release', 'nightly', 'Scheduled'));
      expect(scheduled).toMatchObject({ reason: 'CronJobFailed', message: `cannot write the CronJob: HTTP 404: namespaces "${LATE_RELEASE_NS}" not found` });
      expect(conditionOf('late-release', 'nightly', 'Ready')).toMatchObject({ status: 'Unknown', reason: 'CronJobFailed' });
      // Retried with backoff: the create is asked for again and again, and refused.
      const creates = () => api.requests.filter((r) => r.token === 'late-release' && r.method === 'POST' && r.path === `/apis/batch/v1/namespaces/${LATE_RELEASE_NS}/cronjobs`);
      await until('retried', () => creates().length >= 3);
      expect(creates().every((r) => r.status === 404)).toBe(true);
      api.createNamespace(LATE_RELEASE_NS);
      await until('Ready, its CronJob written', () => isReady('late-release', 'nightly') && api.get('batch/v1', 'cronjobs', LATE_RELEASE_NS, name));
      expect(conditionOf('late-release', 'nightly', 'Scheduled')).toMatchObject({ status: 'True', reason: 'CronJobReady' });
      api.remove(API_VERSION, 'widgets', 'late-release', 'nightly');
      await until('the resource gone, its CronJob with it', () => !get('late-release', 'nightly') && !api.get('batch/v1', 'cronjobs', LATE_RELEASE_NS, name));
    } finally {
      await op.stop();
    }
  });

  it('takes the namespaces in turn: a resource of one namespace is reconciled while hundreds queued before it in another wait, not after them', async () => {
    const op = operator('fair', { namespaces: ['fair-flood', 'fair-quiet'] });
    await op.start();
    try {
      const flood = Array.from({ length: 300 }, (_, i) => `f${i}`);
      for (const name of flood) api.apply('widgets', widget('fair-flood', name));
      await until('the flood queued', () => op.health().data.queued === flood.length || flood.some((name) => isReady('fair-flood', name)));
      api.apply('widgets', widget('fair-quiet', 'q1'));
      await until('q1 Ready', () => isReady('fair-quiet', 'q1'), 120_000);
      const floodReady = flood.filter((name) => isReady('fair-flood', name)).length;
      // In one line, q1 waited for all 300 (each a finalizer, two status writes and an apply).
      expect(floodReady).toBeLessThan(flood.length / 2);
      await until('the flood Ready', () => flood.every((name) => isReady('fair-flood', name)), 120_000);
    } finally {
      await op.stop();
    }
  }, 240_000);

  it('watches each of several namespaces, and nothing across them', async () => {
    const op = operator('several', { namespaces: ['one', 'two'] });
    await op.start();
    try {
      api.apply('widgets', widget('one', 'a'));
      api.apply('widgets', widget('two', 'b'));
      await until('both Ready', () => isReady('one', 'a') && isReady('two', 'b'));
      // Its lists and watches (a read of one resource, as the fence of a hub write makes, is no watch).
      const paths = new Set(api.requests.filter((r) => r.token === 'several' && r.path.endsWith('/widgets') && r.method === 'GET').map((r) => r.path));
      expect(paths).toEqual(new Set(['/apis/test.svc.io/v1/namespaces/one/widgets', '/apis/test.svc.io/v1/namespaces/two/widgets']));
    } finally {
      await op.stop();
    }
  });
});

describe('paged lists', () => {
  const PAGED = 'paged';
  const NAMES = ['p-1', 'p-2', 'p-3', 'p-4', 'p-5', 'p-6', 'p-7'];
  const WIDGETS_PATH = /^\/apis\/test\.svc\.io\/v1\/namespaces\/paged\/widgets$/;
  /** The list requests (not watches, not reads of one object) of widgets and CronJobs an operator made. */
  const lists = (token: string, plural: 'widgets' | 'cronjobs' = 'widgets') =>
    api.requests.filter((r) => r.token === token && r.method === 'GET' && r.query.watch === undefined && r.path.endsWith(`/${plural}`));
  const owners = async () => (await manifests.owned(WIDGET, { all: true, namespace: PAGED })).map((o) => o.name).sort();
  const removals = (since: number) => calls.slice(since).filter((c) => c.startsWith('remove '));
  /** What `kubectl patch … finalizers=null` does (an update: all the operator's grants allow). */
  async function dropFinalizer(name: string): Promise<void> {
    const current = get(PAGED, name)!;
    const res = await fetch(`${api.url}/apis/test.svc.io/v1/namespaces/${PAGED}/widgets/${name}`, {
      method: 'PUT',
      headers: { 'Content-Type': 'application/json', Authorization: 'Bearer test' },
      body: JSON.stringify({ ...current, metadata: { ...current.metadata, finalizers: [] } }),
    });
    expect(res.status).toBe(200);
  }

  beforeAll(async () => {
    // Applied once (so that each test below finds owner records to sweep), by an operator of the default page size.
    for (const name of NAMES) api.apply('widgets', widget(PAGED, name, { color: 'red', schedule: '0 3 * * *' }));
    const setup = operator('paged-setup', { namespaces: [PAGED] });
    await setup.start();
    try {
      await until('every widget Ready and scheduled', () => NAMES.every((n) => isReady(PAGED, n) && cronJob(`widget-paged-${n}`)));
    } finally {
      await setup.stop();
    }
  });

  it('the informers and the orphan sweep read every page: more resources than a page are all reconciled, and none on a later page is taken for an orphan', async () => {
    const started = calls.length;
    const first = operator('paged', { namespaces: [PAGED], listPageSize: 3 });
    await first.start();
    try {
      await until('every widget Ready and scheduled', () => NAMES.every((n) => isReady(PAGED, n) && cronJob(`widget-paged-${n}`)));
      // A sweep that read only its first page would take p-4 … p-7 for orphans.
      expect(await first.collectOrphans()).toBe(0);
      expect(removals(started)).toEqual([]);
      expect(await owners()).toEqual(NAMES);
      // The informer read 7 widgets 3 at a time, following the token.
      const informerList = lists('paged').filter((r) => r.query.labelSelector);
      expect(informerList.map((r) => [r.query.limit, Boolean(r.query.continue)])).toEqual([['3', false], ['3', true], ['3', true]]);
    } finally {
      await first.stop();
    }

    // While no operator runs, p-4 (on the second page) is deleted without its finalizer: its object is an orphan; the rest are not.
    await dropFinalizer('p-4');
    api.remove(API_VERSION, 'widgets', PAGED, 'p-4');
    expect(get(PAGED, 'p-4')).toBeUndefined();
    const since = calls.length;
    const deletesBefore = api.requests.length;
    const again = operator('paged-again', { namespaces: [PAGED], listPageSize: 3 });
    await again.start();
    try {
      // The term's first sweep: p-4's object and CronJob go, and nothing else.
      await until('the orphan removed', () => calls.slice(since).includes('remove 1/p-4') && !cronJob('widget-paged-p-4'));
      expect(await again.collectOrphans()).toBe(0);
      expect(await again.removeOrphanedCronJobs()).toBe(0);
      expect(removals(since)).toEqual(['remove 1/p-4']);
      const cronJobDeletes = api.requests.slice(deletesBefore).filter((r) => r.method === 'DELETE' && r.path.includes('/cronjobs/'));
      expect(cronJobDeletes.map((r) => r.path.split('/').pop())).toEqual(['widget-paged-p-4']);
      expect(await owners()).toEqual(NAMES.filter((n) => n !== 'p-4'));
      // The sweep listed every widget, whatever its instance label, 3 at a time.
      const sweep = lists('paged-again').filter((r) => r.query.labelSelector === undefined);
      expect(sweep.length).toBeGreaterThanOrEqual(2);
      expect(sweep.every((r) => r.query.limit === '3')).toBe(true);
      expect(sweep.some((r) => r.query.continue)).toBe(true);

      // The CronJob informer read its CronJobs 3 at a time too: one edited by hand on its last page is put back.
      const cronJobLists = lists('paged-again', 'cronjobs');
      expect(cronJobLists.some((r) => r.query.limit === '3' && r.query.continue)).toBe(true);
      const job = cronJob('widget-paged-p-7')!;
      api.apply('cronjobs', { ...job, spec: { ...job.spec, schedule: '1 1 * * *' } });
      await until('the edited CronJob put back', () => specOf(cronJob('widget-paged-p-7'))?.schedule === '0 3 * * *');

      // The finalizer's lookup of a resource's CronJobs pages too.
      api.remove(API_VERSION, 'widgets', PAGED, 'p-6');
      await until('p-6 gone with its CronJob', () => !get(PAGED, 'p-6') && !cronJob('widget-paged-p-6'));
      expect(lists('paged-again', 'cronjobs').some((r) => r.query.labelSelector?.includes('svc.io/resource-uid=') && r.query.limit === '3')).toBe(true);
      // Every list this operator made asked for pages.
      expect([...lists('paged-again'), ...lists('paged-again', 'cronjobs')].every((r) => r.query.limit === '3')).toBe(true);
    } finally {
      await again.stop();
    }
  });

  it('a resource created while the informer reads its pages arrives by the watch, which starts from the resourceVersion of the pages (the first page\'s snapshot)', async () => {
    let snapshot: string | undefined;
    api.beforeList(WIDGETS_PATH, () => {
      snapshot = api.resourceVersion;
      api.apply('widgets', widget(PAGED, 'p-00', { color: 'green' }));
    }, { continued: true });
    const op = operator('paged-snapshot', { namespaces: [PAGED], listPageSize: 3 });
    await op.start();
    try {
      await until('p-00 Ready', () => isReady(PAGED, 'p-00'));
      const watches = api.requests.filter((r) => r.token === 'paged-snapshot' && r.query.watch === 'true' && r.path.endsWith('/widgets'));
      expect(snapshot).toBeDefined();
      expect(watches[0]?.query.resourceVersion).toBe(snapshot);
    } finally {
      await op.stop();
    }
  });

  it('a continue token that expires mid-list (410 Expired) starts the list again from its first page, for the informer and for the sweep', async () => {
    const since = calls.length;
    // Between the first and the second page of the informer's list: a widget created on the page
    // already read, then the history compacted, so that the token's revision is gone.
    api.beforeList(WIDGETS_PATH, () => {
      api.apply('widgets', widget(PAGED, 'p-0', { color: 'blue' }));
      api.compact();
    }, { continued: true });
    const op = operator('paged-expiry', { namespaces: [PAGED], listPageSize: 3 });
    await op.start();
    try {
      // Listed again from the first page after the 410; the new list holds p-0.
      const informerList = lists('paged-expiry').filter((r) => r.query.labelSelector);
      expect(informerList.slice(0, 3).map((r) => [r.status, Boolean(r.query.continue)])).toEqual([[200, false], [410, true], [200, false]]);
      expect(informerList.at(-1)).toMatchObject({ status: 200 });
      expect(op.health().reconciling).toBe(true);
      await until('p-0 Ready', () => isReady(PAGED, 'p-0'));
      await until('every widget Ready', () => api.list(API_VERSION, 'widgets', PAGED).every((w) => isReady(PAGED, w.metadata.name)));
    } finally {
      await op.stop();
    }
    const owned = await owners();
    expect(owned).toEqual(api.list(API_VERSION, 'widgets', PAGED).map((w) => w.metadata.name));

    // The sweep (of an operator not started: only the sweep lists): its token expires once; it lists again and takes nothing for an orphan.
    api.beforeList(WIDGETS_PATH, () => {
      api.apply('namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'moves-the-counter' } });
      api.compact();
    }, { continued: true });
    const sweeper = operator('paged-sweep', { namespaces: [PAGED], listPageSize: 3 });
    expect(await sweeper.collectOrphans()).toBe(0);
    const sweep = lists('paged-sweep');
    expect(sweep.slice(0, 3).map((r) => [r.status, Boolean(r.query.continue)])).toEqual([[200, false], [410, true], [200, false]]);
    expect(sweep.at(-1)).toMatchObject({ status: 200 });
    expect(removals(since)).toEqual([]);
    expect(await owners()).toEqual(owned);
  });

  it(`gives a list up after ${LIST_RESTARTS} restarts in a row, naming it; nothing is taken for an orphan`, async () => {
    const owned = await owners();
    const since = calls.length;
    // Every continued page finds its token expired (an operator not started: only its sweep lists).
    api.beforeList(WIDGETS_PATH, () => {
      api.apply('namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: `moves-it-${api.resourceVersion}` } });
      api.compact();
    }, { continued: true, times: LIST_RESTARTS + 1 });
    const op = operator('paged-give-up', { namespaces: [PAGED], listPageSize: 3 });
    await expect(op.collectOrphans()).rejects.toThrow(
      `cannot list widgets.test.svc.io in namespace paged: its continue token expired (410 Expired) ${LIST_RESTARTS + 1} times in a row, each time after 1 page(s) of 3; the list is given up for now`,
    );
    expect(lists('paged-give-up').map((r) => r.status)).toEqual(Array.from({ length: LIST_RESTARTS + 1 }, () => [200, 410]).flat());
    expect(removals(since)).toEqual([]);
    expect(await owners()).toEqual(owned);
  });

  it(`asks for ${LIST_PAGE_SIZE} items a page by default`, async () => {
    const op = operator('paged-default', { namespaces: [PAGED] });
    await op.start();
    try {
      await until('the first sweep listed', () => lists('paged-default').some((r) => r.query.labelSelector === undefined));
      expect(await op.collectOrphans()).toBe(0);
    } finally {
      await op.stop();
    }
    const made = [...lists('paged-default'), ...lists('paged-default', 'cronjobs')];
    expect(made.length).toBeGreaterThanOrEqual(3);
    expect(made.every((r) => r.query.limit === String(LIST_PAGE_SIZE) && !r.query.continue)).toBe(true);
  });
});
