import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { V1PodTemplateSpec } from '@kubernetes/client-node';
import { parse } from 'yaml';
import { createRun, finishRun } from '../src/connectors/runs/ledger.js';
import { EgressPolicy } from '../src/egress/policy.js';
import { crdOf } from '../src/manifests/crd.js';
import { apiVersionOf, crdNameOf, MANIFEST_KINDS, type ManifestKind } from '../src/manifests/kinds.js';
import { createManifestServices, type ManifestServices } from '../src/manifests/services.js';
import { ownerClient } from '../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../test/harness/hub.js';
import { type KubeObject, KubeApiStandIn, type RecordedRequest } from '../test/harness/kube-api.js';
import { kubeConfig } from '../kube/kube-config.js';
import type { Grant } from '../kube/rbac.js';
import { chartGrants } from '../test/harness/chart-rbac.js';
import { captureLogs } from '../test/harness/log-capture.js';
import { ConflictError } from '../src/errors.js';
import { registerSecret } from '../src/observability/logger.js';
import { Operator, type OperatorOptions } from './reconciler.js';
import { FINALIZER } from './finalizer.js';
import { manifestOf, mergePatchOf, type Resource } from './resource.js';
import { until } from '../test/harness/until.js';
import { whileHeld, whileTurnHeld } from '../test/harness/tenant-cap-cases.js';
import { takeTenantTurn } from '../src/manifests/tenant-cap.js';
import { operatorsSettled } from '../test/harness/operator-settled.js';

/**
 * The reconciler against a SCRIPTED KUBERNETES API STAND-IN (test/harness/kube-api.ts: no API
 * server can run here) through the real @kubernetes/client-node informers and clients, and a real
 * hub (HTTP API and PostgreSQL): what a Connector resource does must equal what the same bytes do
 * through `POST /api/connectors/apply`.
 */

const CONNECTOR = MANIFEST_KINDS.find((k) => k.kind === 'Connector')!;
const ENTITY = MANIFEST_KINDS.find((k) => k.kind === 'Entity')!;
const EXPORT = MANIFEST_KINDS.find((k) => k.kind === 'Export')!;
const PROCESS = MANIFEST_KINDS.find((k) => k.kind === 'Process')!;
const WORKFLOW = MANIFEST_KINDS.find((k) => k.kind === 'Workflow')!;
const API_VERSION = apiVersionOf(CONNECTOR);
const NS = 'team-a';
/** The release's namespace, where CronJobs go. */
const RELEASE_NS = 'svc-system';
/** The requests a test had refused on purpose (it took a rule away): left out of the check of the chart's RBAC (the last test). */
const refusedOnPurpose = new Set<RecordedRequest>();
/** What the chart grants the operator's service account, watching every namespace (rendered once). */
let chartOperatorGrants: Grant[] | undefined;
const CHART_GRANTS = (): Grant[] => {
  chartOperatorGrants ??= chartGrants({ release: 'hub', namespace: RELEASE_NS, component: 'operator' });
  return structuredClone(chartOperatorGrants);
};

const template: V1PodTemplateSpec = {
  metadata: { labels: { 'app.kubernetes.io/name': 'svc-hub', 'app.kubernetes.io/component': 'run-job' } },
  spec: {
    restartPolicy: 'Never',
    automountServiceAccountToken: false,
    containers: [
      {
        name: 'run',
        image: 'registry.example.com/svc-hub:0.1.0',
        env: [{ name: 'SVC_PROFILE', value: 'prod' }, { name: 'MEMORY_MIB', valueFrom: { resourceFieldRef: { resource: 'limits.memory', divisor: '1024Ki' } } }],
        // Quantities the API server answers in another form (`1`, `1Gi`, `1536Mi`, `500m`): a
        // CronJob read back must not look changed (the resync test below writes nothing).
        resources: { requests: { cpu: '1000m', memory: '1024Mi' }, limits: { memory: '1.5Gi', cpu: 0.5 as unknown as string } },
        volumeMounts: [{ name: 'tmp', mountPath: '/tmp' }],
      },
    ],
    volumes: [{ name: 'tmp', emptyDir: { sizeLimit: '1024Mi' } }],
  },
};

let hub: TestHub;
let api: KubeApiStandIn;
let operator: Operator;
let otherTenant: number;

const example = (file: string): KubeObject => parse(readFileSync(new URL(`../examples/${file}`, import.meta.url), 'utf8')) as KubeObject;
const connector = (name: string) => api.get(API_VERSION, 'connectors', NS, name) as Resource | undefined;
const cronJob = (name: string) => api.get('batch/v1', 'cronjobs', RELEASE_NS, name);
const ready = (name: string) => connector(name)?.status?.conditions?.find((c) => c.type === 'Ready');
const writes = () => api.requests.filter((r) => r.method !== 'GET').length;

/** Waits until the operators (default: the file's) have handled everything (test/harness/operator-settled.ts). */
async function settled(...operators: Operator[]): Promise<void> {
  await operatorsSettled(api, operators.length ? operators : [operator]);
}

/** Runs a resync and waits until it has read the API server and the operator has settled again. */
async function resynced(): Promise<void> {
  const reads = api.requests.length;
  operator.resyncAll();
  await until('the resync to read', () => api.requests.length > reads);
  await settled();
}

/** A resync of settled resources: nothing written on the API server, nor the hub object at `path` applied again (its `updatedAt` kept). */
async function resyncWritesNothing(path: string): Promise<void> {
  await settled();
  const before = writes();
  const updatedAt = (await hubGet(path)).body!.updatedAt;
  await resynced();
  expect(writes()).toBe(before);
  expect((await hubGet(path)).body!.updatedAt).toBe(updatedAt);
}

async function hubGet(path: string, tenant: number | string = 1) {
  const res = await fetch(`${hub.url}${path}`, { headers: { 'X-Tenant-ID': String(tenant) } });
  return { status: res.status, body: res.status === 200 ? ((await res.json()) as Record<string, unknown>) : undefined };
}

/** The options of every operator of this file (a restart is a new Operator with the same options). */
const operatorOptions = (manifests: ManifestServices = hub.services.manifests): OperatorOptions => ({
  kinds: MANIFEST_KINDS,
  manifests,
  kc: kubeConfig({ server: api.url, token: 'operator' }),
  resyncEvery: 3_600_000,
  runPollEvery: 100,
  backoffBase: 50,
  backoffMax: 400,
  runJobTemplate: template,
  cronJobNamespace: RELEASE_NS,
});

beforeAll(async () => {
  hub = await startTestHub();
  const created = await hub.services.db.crossTenant('test', (tx) => tx.query<{ id: number }>(`insert into core.tenants (code, name) values ('globex', 'Globex') returning id`));
  otherTenant = Number(created.rows[0]!.id);
  api = await new KubeApiStandIn(
    [CONNECTOR, ENTITY, EXPORT, WORKFLOW, PROCESS].map((k) => ({ group: k.group, version: k.version, plural: k.plural, kind: k.kind, namespaced: true, statusSubresource: true })),
  ).start();
  api.apply('namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
  api.createNamespace(RELEASE_NS);
  // The operator may call only what the chart grants it, as helm renders it (test/harness/chart-rbac.ts); the test's own calls ('stand-in') are an administrator's.
  api.enforceRbac(CHART_GRANTS(), ['stand-in']);
  operator = new Operator(operatorOptions());
  await operator.start();
});

afterAll(async () => {
  await operator?.stop();
  await api?.close();
  await hub?.stop();
});

describe('a Connector resource', () => {
  it('is applied through the same service as POST /api/connectors/apply, with the finalizer, status and CronJob', async () => {
    const resource = { ...example('offset.yaml'), metadata: { ...example('offset.yaml').metadata, namespace: NS } };
    api.apply('connectors', resource);
    const condition = await until('Ready', () => ready('demo-offset')?.status === 'True' && ready('demo-offset'));
    expect(condition).toMatchObject({ type: 'Ready', status: 'True', reason: 'Applied', message: 'applied to tenant default', observedGeneration: 1 });
    expect(condition.lastTransitionTime).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    const stored = connector('demo-offset')!;
    expect(stored.metadata.finalizers).toEqual([FINALIZER]);
    expect(stored.status).toMatchObject({ observedGeneration: 1, tenant: 'default' });
    expect(stored.status!.conditions!.map((c) => c.type)).toEqual(['Ready', 'Reconciling', 'Stalled', 'Scheduled']);
    expect(stored.status!.conditions!.find((c) => c.type === 'Reconciling')).toMatchObject({ status: 'False', reason: 'Reconciled', observedGeneration: 1 });
    expect(stored.status!.conditions!.find((c) => c.type === 'Stalled')).toMatchObject({ status: 'False', observedGeneration: 1 });

    // The same bytes through the HTTP path, into another tenant: the same connector.
    const res = await fetch(`${hub.url}/api/connectors/apply`, {
      method: 'POST',
      headers: { 'X-Tenant-ID': String(otherTenant), 'Content-Type': 'application/yaml' },
      body: readFileSync(new URL('../examples/offset.yaml', import.meta.url), 'utf8'),
    });
    expect(res.status).toBe(201);
    const viaOperator = (await hubGet('/api/connectors/demo-offset')).body!;
    const viaHttp = (await hubGet('/api/connectors/demo-offset', otherTenant)).body!;
    const comparable = (c: Record<string, unknown>) => JSON.parse(JSON.stringify(c), (k, v) => (['id', 'uuid', 'tenantId', 'createdAt', 'updatedAt', 'watermarkUpdatedAt'].includes(k) ? undefined : v));
    expect(comparable(viaOperator)).toEqual(comparable(viaHttp));
    expect(viaOperator.manifest).toEqual(manifestOf(stored));
    expect(viaOperator.schedule).toBe('*/15 * * * *');
  });

  it('has a CronJob <kind>-<namespace>-<name> in the release namespace that runs `svc-hub run connector … --scheduled`', async () => {
    const job = await until('the CronJob', () => cronJob('connector-team-a-demo-offset'));
    const owner = connector('demo-offset')!;
    // No ownerReference across namespaces: labels name the resource.
    expect(job.metadata.ownerReferences).toBeUndefined();
    expect(job.metadata.labels).toMatchObject({
      'app.kubernetes.io/managed-by': 'svc-hub-operator',
      'svc.io/tenant': 'default',
      'svc.io/kind': 'connector',
      'svc.io/resource-namespace': NS,
      'svc.io/resource-name': 'demo-offset',
      'svc.io/resource-uid': owner.metadata.uid,
    });
    expect(api.list('batch/v1', 'cronjobs', NS)).toEqual([]);
    // biome-ignore lint/suspicious/noExplicitAny: a deep read of the CronJob as the stand-in stored it
    const spec = job.spec as Record<string, any>;
    expect(spec).toMatchObject({ schedule: '*/15 * * * *', timeZone: 'Etc/UTC', concurrencyPolicy: 'Forbid', successfulJobsHistoryLimit: 3, failedJobsHistoryLimit: 3 });
    const pod = spec.jobTemplate.spec.template;
    expect(spec.jobTemplate.spec.backoffLimit).toBe(0);
    // svc.operator.run-deadline's default (6 h): a hung run cannot hold the Forbid policy's slot for ever.
    expect(spec.jobTemplate.spec.activeDeadlineSeconds).toBe(21_600);
    expect(pod.spec.restartPolicy).toBe('Never');
    expect(pod.spec.automountServiceAccountToken).toBe(false);
    expect(pod.spec.containers[0]).toMatchObject({ name: 'run', image: 'registry.example.com/svc-hub:0.1.0', args: ['run', 'connector', 'demo-offset', '--tenant', 'default', '--scheduled'] });
    expect(pod.spec.containers[0].env).toEqual([{ name: 'SVC_PROFILE', value: 'prod' }, { name: 'MEMORY_MIB', valueFrom: { resourceFieldRef: { resource: 'limits.memory', divisor: '1Mi' } } }]);
    expect(connector('demo-offset')!.status!.conditions!.find((c) => c.type === 'Scheduled')).toMatchObject({ status: 'True', reason: 'CronJobReady', message: 'CronJob connector-team-a-demo-offset runs "*/15 * * * *" (Etc/UTC)' });
  });

  it('is idempotent: a resync of settled resources writes nothing', async () => {
    await resyncWritesNothing('/api/connectors/demo-offset');
  });

  it('rewrites the CronJob when the run deadline changes, at the reconcile of the next term (an operator restarted with another svc.operator.run-deadline)', async () => {
    const deadline = () => (cronJob('connector-team-a-demo-offset')!.spec as { jobTemplate: { spec: { activeDeadlineSeconds?: number } } }).jobTemplate.spec.activeDeadlineSeconds;
    expect(deadline()).toBe(21_600);
    const restartWith = async (runDeadline: number | undefined) => {
      await operator.stop();
      operator = new Operator({ ...operatorOptions(), runDeadline });
      await operator.start();
    };
    // 90 min 0.5 s: whole seconds, rounded up.
    await restartWith(5_400_500);
    await until('the CronJob rewritten with the new deadline', () => deadline() === 5_401);
    expect(connector('demo-offset')!.status!.conditions!.find((c) => c.type === 'Scheduled')).toMatchObject({ status: 'True', reason: 'CronJobReady' });
    await restartWith(undefined);
    await until('the CronJob back at the default deadline', () => deadline() === 21_600);
    await settled();
  });

  it('reports the latest run as status.lastRun', async () => {
    const { rows } = await hub.services.db.withTenant(1, (tx) => tx.query<{ id: string; uuid: string }>(`select c.id, e.uuid from connectors.connectors c join connectors.endpoints e on e.connector_id = c.id where c.name = 'demo-offset' limit 1`));
    const run = await hub.services.db.withTenant(1, async (tx) => {
      const created = await createRun(tx, { connectorId: rows[0]!.id, connectorName: 'demo-offset', endpointUuid: rows[0]!.uuid, endpointId: 'offset-partners', triggeredBy: 'schedule', syncMode: 'full' });
      return finishRun(tx, created.id, 'Completed');
    });
    // No resync (it is an hour here): the run poll finds it.
    const lastRun = await until('lastRun', () => connector('demo-offset')!.status?.lastRun);
    expect(lastRun).toEqual({ id: run.id, status: 'Completed', endedAt: run.endedAt });
    expect(lastRun.endedAt).not.toBeNull();
  });

  it('follows a spec change; removing the schedule removes the CronJob and the Scheduled condition', async () => {
    const current = example('offset.yaml');
    const spec = { ...(current.spec as Record<string, unknown>) };
    delete spec.schedule;
    api.apply('connectors', { ...current, metadata: { ...current.metadata, namespace: NS }, spec });
    await until('the CronJob to go', () => !cronJob('connector-team-a-demo-offset'));
    const status = await until('observedGeneration 2', () => connector('demo-offset')!.status?.observedGeneration === 2 && connector('demo-offset')!.status);
    expect(status.conditions!.map((c) => c.type)).toEqual(['Ready', 'Reconciling', 'Stalled']);
    expect((await hubGet('/api/connectors/demo-offset')).body!.schedule).toBeNull();
  });

  it('puts a validation error on the Ready condition naming the field, keeps the applied version, and does not retry it', async () => {
    const bad = example('open.yaml');
    api.apply('connectors', { ...bad, metadata: { ...bad.metadata, namespace: NS } });
    await until('demo-open Ready', () => ready('demo-open')?.status === 'True');
    const endpoints = (bad.spec as { endpoints: Array<Record<string, unknown>> }).endpoints;
    const broken = { ...bad, metadata: { ...bad.metadata, namespace: NS }, spec: { ...(bad.spec as object), endpoints: [{ ...endpoints[0], pagination: { kind: 'soap' } }] } };
    api.apply('connectors', broken);
    const condition = await until('Ready=False', () => ready('demo-open')?.status === 'False' && ready('demo-open'));
    expect(condition.reason).toBe('Invalid');
    expect(condition.message).toMatch(/spec\.endpoints\[0\]\.pagination/);
    expect(connector('demo-open')!.status!.observedGeneration).toBe(2);
    // The hub still holds the last valid version.
    const held = (await hubGet('/api/connectors/demo-open')).body!;
    expect(((held.manifest as KubeObject).spec as { endpoints: Array<{ pagination: { kind: string } }> }).endpoints[0]!.pagination.kind).toBe('offset');
    // A permanent error is not retried: no request names the resource for a while.
    await settled();
    const count = api.requests.filter((r) => r.path.endsWith('/connectors/demo-open')).length;
    // Marker: another resource whose status write fails three times goes through three backoff
    // retries (50, 100, 200 ms) before it is Ready; a retry loop on demo-open would have shown by then.
    const open = example('open.yaml');
    api.failNext('PATCH', /\/connectors\/backoff-marker\/status$/, 409, 3);
    api.apply('connectors', { ...open, metadata: { ...open.metadata, name: 'backoff-marker', namespace: NS } });
    await until('the marker Ready after its retries', () => ready('backoff-marker')?.status === 'True');
    // Three failed attempts at the first write (Reconciling=True), then it and the final status.
    // (A later reconcile from a cache behind the server may add a 409 that writes nothing.)
    const markerPatches = api.requests.filter((r) => r.method === 'PATCH' && r.path.endsWith('/connectors/backoff-marker/status')).map((r) => r.status);
    expect(markerPatches.slice(0, 5)).toEqual([409, 409, 409, 200, 200]);
    expect(markerPatches.filter((code) => code === 200)).toHaveLength(2);
    expect(api.requests.filter((r) => r.path.endsWith('/connectors/demo-open')).length).toBe(count);
    // Fixing the resource makes it Ready again.
    api.apply('connectors', { ...bad, metadata: { ...bad.metadata, namespace: NS } });
    await until('Ready again', () => ready('demo-open')?.status === 'True');
  });

  it('lets a resource name another tenant than its labelled Namespace only where the Namespace allows it', async () => {
    const open = example('open.yaml');
    api.apply('namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'bounded', labels: { 'svc.io/tenant': 'default' } } });
    api.apply('connectors', { ...open, metadata: { name: 'elsewhere', namespace: 'bounded', labels: { 'svc.io/tenant': 'globex' } } });
    const at = () => api.get(API_VERSION, 'connectors', 'bounded', 'elsewhere') as Resource | undefined;
    const readyOf = () => at()?.status?.conditions?.find((c) => c.type === 'Ready');
    await until('TenantUnresolved', () => readyOf()?.reason === 'TenantUnresolved');
    expect(readyOf()).toMatchObject({
      status: 'False',
      message: 'no tenant: tenant globex (label svc.io/tenant on the resource) is not one namespace bounded allows (default: its label svc.io/tenant and annotation svc.io/tenants)',
    });
    expect((await hubGet('/api/connectors/elsewhere', otherTenant)).status).toBe(404);
    expect((await hubGet('/api/connectors/elsewhere', 1)).status).toBe(404);
    // Its own tenant's label is fine; the annotation opens others.
    api.apply('namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'bounded', labels: { 'svc.io/tenant': 'default' }, annotations: { 'svc.io/tenants': 'initech, globex' } } });
    operator.resyncAll();
    await until('Ready in globex', () => readyOf()?.status === 'True' && at()?.status?.tenant === 'globex');
    expect((await hubGet('/api/connectors/elsewhere', otherTenant)).status).toBe(200);
    api.remove(API_VERSION, 'connectors', 'bounded', 'elsewhere');
    await until('the resource gone', () => !at());
    expect((await hubGet('/api/connectors/elsewhere', otherTenant)).status).toBe(404);
    // An annotation present but naming nothing (and no label) bounds the Namespace all the same.
    api.apply('namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'bounded-empty', annotations: { 'svc.io/tenants': ' , ' } } });
    api.apply('connectors', { ...open, metadata: { name: 'anywhere', namespace: 'bounded-empty', labels: { 'svc.io/tenant': 'globex' } } });
    const refused = await until('refused', () => (api.get(API_VERSION, 'connectors', 'bounded-empty', 'anywhere') as Resource | undefined)?.status?.conditions?.find((c) => c.type === 'Ready' && c.reason === 'TenantUnresolved'));
    expect(refused.message).toBe('no tenant: tenant globex (label svc.io/tenant on the resource) is not one namespace bounded-empty allows (none: its label svc.io/tenant and annotation svc.io/tenants)');
    expect((await hubGet('/api/connectors/anywhere', otherTenant)).status).toBe(404);
  });

  it('moves a resource at once when its Namespace\'s tenant label changes (the Namespace watch; no change of the resource, no resync)', async () => {
    const open = example('open.yaml');
    api.apply('namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'relabelled-ns', labels: { 'svc.io/tenant': 'default' } } });
    api.apply('connectors', { ...open, metadata: { name: 'follows-namespace', namespace: 'relabelled-ns' } });
    const at = () => api.get(API_VERSION, 'connectors', 'relabelled-ns', 'follows-namespace') as Resource | undefined;
    await until('Ready in default', () => at()?.status?.tenant === 'default' && at()?.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True');
    await settled();
    // Another label on the Namespace is not worth a reconcile. Marker: the Namespace informer has handled
    // the change (it records the Namespace's tenancy, then requeues its resources or not, at once).
    const term = (operator as unknown as { term: { tenancy: Map<string, string>; queue: { add(key: string): void } } }).term;
    const handled: string[] = [];
    const queued: string[] = [];
    const set = term.tenancy.set.bind(term.tenancy);
    const add = term.queue.add.bind(term.queue);
    term.tenancy.set = (name, tenancy) => {
      handled.push(name);
      return set(name, tenancy);
    };
    term.queue.add = (key) => {
      queued.push(key);
      add(key);
    };
    try {
      api.apply('namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'relabelled-ns', labels: { 'svc.io/tenant': 'default', team: 'a' } } });
      await until('the Namespace informer to handle the change', () => handled.includes('relabelled-ns'));
      expect(queued.filter((key) => key.includes('/relabelled-ns/'))).toEqual([]);
    } finally {
      term.tenancy.set = set;
      term.queue.add = add;
    }
    // The resync is an hour here: only the Namespace watch can bring this.
    api.apply('namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'relabelled-ns', labels: { 'svc.io/tenant': 'globex', team: 'a' } } });
    await until('moved to globex', () => at()?.status?.tenant === 'globex', 10_000);
    expect((await hubGet('/api/connectors/follows-namespace', otherTenant)).status).toBe(200);
    expect((await hubGet('/api/connectors/follows-namespace', 1)).status).toBe(404);
    api.remove(API_VERSION, 'connectors', 'relabelled-ns', 'follows-namespace');
    await until('the resource gone', () => !at());
  });

  it('watching a list of namespaces (namespaced Roles only, as the chart grants them), moves a resource promptly when its Namespace\'s tenant label changes (no resync)', async () => {
    const open = example('open.yaml');
    const namespace = 'scoped-ns';
    const relabel = (tenant: string) => api.apply('namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: namespace, labels: { 'svc.io/tenant': tenant } } });
    relabel('default');
    // Another service account, bound as the chart binds the operator with operator.watchNamespaces: [scoped-ns].
    api.enforceRbac(CHART_GRANTS(), ['stand-in'], {
      scoped: chartGrants({ release: 'hub', namespace: RELEASE_NS, component: 'operator', values: { operator: { replicas: 1, watchNamespaces: [namespace] } } }),
    });
    // Its own instance, so that the operator of every namespace leaves this resource alone.
    const scoped = new Operator({ ...operatorOptions(), kc: kubeConfig({ server: api.url, token: 'scoped' }), namespaces: [namespace], instance: 'scoped', namespacePollEvery: 100 });
    await scoped.start();
    try {
      api.apply('connectors', { ...open, metadata: { name: 'scoped', namespace, labels: { 'svc.io/operator-instance': 'scoped' } } });
      const at = () => api.get(API_VERSION, 'connectors', namespace, 'scoped') as Resource | undefined;
      await until('Ready in default', () => at()?.status?.tenant === 'default' && at()?.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True');
      await settled(operator, scoped);
      // The resync is an hour here.
      relabel('globex');
      await until('moved to globex', () => at()?.status?.tenant === 'globex' && at()?.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True', 10_000);
      expect((await hubGet('/api/connectors/scoped', otherTenant)).status).toBe(200);
      expect((await hubGet('/api/connectors/scoped', 1)).status).toBe(404);
      // Its reads of the Namespace are all granted (the old layout's CronJob in scoped-ns is not: left alone, as documented).
      expect(api.requests.filter((r) => r.token === 'scoped' && r.status === 403 && r.path.startsWith('/api/v1/namespaces')).map((r) => `${r.method} ${r.path}`)).toEqual([]);
      api.remove(API_VERSION, 'connectors', namespace, 'scoped');
      await until('the resource gone', () => !at());
    } finally {
      await scoped.stop();
    }
  });

  it('takes the tenant from its Namespace when it has no label, and says so when neither has one', async () => {
    const open = example('open.yaml');
    const unlabelled = (name: string, namespace: string) => ({ ...open, metadata: { name, namespace } });
    api.apply('namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'globex-ns', labels: { 'svc.io/tenant': 'globex' } } });
    api.apply('connectors', unlabelled('from-namespace', 'globex-ns'));
    await until('Ready via namespace', () => api.get(API_VERSION, 'connectors', 'globex-ns', 'from-namespace')?.status?.tenant === 'globex');
    expect((await hubGet('/api/connectors/from-namespace', otherTenant)).status).toBe(200);
    expect((await hubGet('/api/connectors/from-namespace', 1)).status).toBe(404);

    api.apply('connectors', unlabelled('nobody', NS));
    const condition = await until('TenantUnresolved', () => ready('nobody')?.status === 'False' && ready('nobody'));
    expect(condition).toMatchObject({ status: 'False', reason: 'TenantUnresolved', message: `no tenant: label svc.io/tenant is set neither on the resource nor on its namespace ${NS}` });
    api.apply('connectors', { ...open, metadata: { name: 'nobody', namespace: NS, labels: { 'svc.io/tenant': 'initech' } } });
    await until('unknown tenant', () => ready('nobody')?.message === 'no tenant: tenant initech (label svc.io/tenant on the resource) does not exist');
    // The system tenant's code (tenant 0) names no tenant: no resource applies as it.
    api.apply('connectors', { ...open, metadata: { name: 'nobody', namespace: NS, labels: { 'svc.io/tenant': 'system' } } });
    await until('system tenant refused', () => ready('nobody')?.message === 'no tenant: tenant system (label svc.io/tenant on the resource) does not exist');
    // Once the namespace is labelled, the next resync applies it.
    api.apply('connectors', unlabelled('nobody', NS));
    await until('TenantUnresolved again', () => ready('nobody')?.reason === 'TenantUnresolved');
    api.apply('namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS, labels: { 'svc.io/tenant': 'default' } } });
    operator.resyncAll();
    await until('Ready after the namespace label', () => ready('nobody')?.status === 'True');
    api.apply('namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
    // The label gone, the resync finds the resource without a tenant again (later tests count writes).
    operator.resyncAll();
    await until('TenantUnresolved again', () => ready('nobody')?.reason === 'TenantUnresolved');
  });

  it('retries with backoff on resourceVersion conflicts and server errors', async () => {
    const open = example('open.yaml');
    api.failNext('PATCH', /\/connectors\/retried\/status$/, 409, 2);
    api.failNext('PUT', /\/connectors\/retried$/, 500, 1);
    api.apply('connectors', { ...open, metadata: { ...open.metadata, name: 'retried', namespace: NS } });
    await until('Ready despite the failures', () => ready('retried')?.status === 'True');
    const statusPatches = api.requests.filter((r) => r.method === 'PATCH' && r.path.endsWith('/connectors/retried/status')).map((r) => r.status);
    expect(statusPatches.slice(0, 2)).toEqual([409, 409]);
    expect(statusPatches.slice(2)).toContain(200);
    expect(api.requests.some((r) => r.method === 'PUT' && r.path.endsWith('/connectors/retried') && r.status === 500)).toBe(true);
  });

  it('resumes after the watch is closed or its resourceVersion expires (410)', async () => {
    const open = example('open.yaml');
    api.closeWatches();
    api.apply('connectors', { ...open, metadata: { ...open.metadata, name: 'after-close', namespace: NS } });
    await until('Ready after a closed watch', () => ready('after-close')?.status === 'True');
    api.compact();
    api.apply('connectors', { ...open, metadata: { ...open.metadata, name: 'after-410', namespace: NS } });
    await until('Ready after a 410', () => ready('after-410')?.status === 'True', 15_000);
  });

  it('keeps the hub object of a resource that left its selection while the watch was down (the relist reports it deleted)', async () => {
    const open = example('open.yaml');
    const resource = { ...open, metadata: { ...open.metadata, name: 'moved-away', namespace: NS, labels: { 'svc.io/tenant': 'default' } } };
    api.apply('connectors', resource);
    await until('Ready', () => ready('moved-away')?.status === 'True');
    expect((await hubGet('/api/connectors/moved-away')).status).toBe(200);
    // The watch down for a while; meanwhile the resource is labelled for another operator instance;
    // the watch's resourceVersion expires, so the informer lists again and reports it deleted.
    api.failNext('GET', /\/connectors$/, 500, 2, 'watch');
    api.closeWatches();
    const before = api.requests.length;
    api.apply('connectors', { ...resource, metadata: { ...resource.metadata, labels: { ...resource.metadata.labels, 'svc.io/operator-instance': 'blue' } } });
    api.compact();
    const looked = () => api.requests.slice(before).some((r) => r.method === 'GET' && r.path.endsWith(`/namespaces/${NS}/connectors/moved-away`));
    await until('the operator checked the resource, or dropped its object', async () => looked() || (await hubGet('/api/connectors/moved-away')).status === 404, 15_000);
    expect((await hubGet('/api/connectors/moved-away')).status).toBe(200);
    expect(await hub.services.manifests.owned(CONNECTOR, { namespace: NS, name: 'moved-away' })).toHaveLength(1);
  });

  it('restarts its watch when the list after a 410 fails', async () => {
    const open = example('open.yaml');
    const lists = () => api.requests.filter((r) => r.path === '/apis/connectors.svc.io/v1/connectors' && r.query.watch === undefined);
    const before = lists().length;
    api.failNext('GET', /^\/apis\/connectors\.svc\.io\/v1\/connectors$/, 500, 1, 'list');
    // Another kind's change moves the store's resourceVersion past the connectors watch's, so after
    // compaction the watch answers 410 and the informer must list again.
    api.apply('namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'elsewhere' } });
    api.compact();
    api.apply('connectors', { ...open, metadata: { ...open.metadata, name: 'after-500', namespace: NS } });
    await until('Ready after a failed list', () => ready('after-500')?.status === 'True', 15_000);
    expect(lists().slice(before).map((r) => r.status)).toEqual([500, 200]);
  });

  it('deletes the connector in the hub and its CronJob through its finalizer', async () => {
    const offset = example('offset.yaml');
    api.apply('connectors', { ...offset, metadata: { ...offset.metadata, namespace: NS } });
    await until('the CronJob back', () => cronJob('connector-team-a-demo-offset'));
    const logs = captureLogs('warn');
    try {
      api.remove(API_VERSION, 'connectors', NS, 'demo-offset');
      await until('the resource gone', () => !connector('demo-offset'));
      expect((await hubGet('/api/connectors/demo-offset')).status).toBe(404);
      expect(cronJob('connector-team-a-demo-offset')).toBeUndefined();
      // The other tenant's copy is untouched.
      expect((await hubGet('/api/connectors/demo-offset', otherTenant)).status).toBe(200);
      // A resource reconciled after it: the deletion's passes are over by then, and none failed (a
      // second pass over a stale copy met the resource gone: that is no failure).
      const open = example('open.yaml');
      api.apply('connectors', { ...open, metadata: { ...open.metadata, name: 'after-delete', namespace: NS, labels: { 'svc.io/tenant': 'default' } } });
      await until('the next resource Ready', () => ready('after-delete')?.status === 'True');
      expect(logs.lines().filter((l) => String(l.msg).includes('demo-offset'))).toEqual([]);
    } finally {
      logs.restore();
    }
  });

  it('forgets a deleted scheduled resource in its memory of CronJobs of the old layout looked for (it held each uid until leadership changed)', async () => {
    const checked = (operator as unknown as { term: { legacyChecked: Set<string> } }).term.legacyChecked;
    await settled();
    const before = checked.size;
    const offset = example('offset.yaml');
    const names = ['forget-0', 'forget-1', 'forget-2', 'forget-3', 'forget-4'];
    for (const name of names) api.apply('connectors', { ...offset, metadata: { ...offset.metadata, name, namespace: NS } });
    await until('their CronJobs', () => names.every((name) => cronJob(`connector-team-a-${name}`)));
    await settled();
    const uids = names.map((name) => connector(name)!.metadata.uid!);
    expect(uids.filter((uid) => checked.has(uid))).toEqual(uids);
    expect(checked.size).toBe(before + names.length);
    for (const name of names) api.remove(API_VERSION, 'connectors', NS, name);
    await until('the resources gone', () => names.every((name) => !connector(name)));
    await settled();
    expect(uids.filter((uid) => checked.has(uid))).toEqual([]);
    expect(checked.size).toBe(before);
  });

  it('serves every registered kind from its CRD name', () => {
    expect(MANIFEST_KINDS.map(crdNameOf)).toContain('connectors.connectors.svc.io');
  });
});

describe('an Entity resource', () => {
  const entity = (name: string) => api.get(apiVersionOf(ENTITY), 'entities', NS, name) as Resource | undefined;
  const resource = () => ({ ...example('entity-partner.yaml'), metadata: { ...example('entity-partner.yaml').metadata, namespace: NS } });

  it('is applied through the same service as POST /api/entities/apply: Ready with its warnings, no CronJob, no lastRun', async () => {
    api.apply('entities', resource());
    const condition = await until('Ready', () => entity('partner')?.status?.conditions?.find((c) => c.type === 'Ready' && c.status !== 'Unknown'));
    // The example's tables do not exist in this tenant yet: applied, with a warning for each.
    expect(condition).toMatchObject({ status: 'True', reason: 'Applied', observedGeneration: 1 });
    expect(condition.message).toBe(
      'applied to tenant default; warnings: spec.sources[0].table: ext.open_partners does not exist yet (no connector has written it): its mapped columns are checked when the entity is read; ' +
        'spec.sources[1].table: ext.soap_siebel_partners does not exist yet (no connector has written it): its mapped columns are checked when the entity is read',
    );
    const stored = entity('partner')!;
    expect(stored.metadata.finalizers).toEqual([FINALIZER]);
    expect(stored.status!.conditions!.map((c) => c.type)).toEqual(['Ready', 'Reconciling', 'Stalled']);
    expect(stored.status!.lastRun).toBeUndefined();
    expect(cronJob('entity-team-a-partner')).toBeUndefined();
    const held = (await hubGet('/api/entities/partner')).body!;
    expect(held.manifest).toEqual(manifestOf(stored));
    expect(held).toMatchObject({ name: 'partner', scopes: ['partners'], key: 'partner_id' });
  });

  it('puts a validation error on Ready naming the field, and deletes the entity in the hub through its finalizer', async () => {
    const broken = resource();
    (broken.spec as { key: string }).key = 'nope';
    api.apply('entities', broken);
    const condition = await until('Ready=False', () => entity('partner')?.status?.conditions?.find((c) => c.type === 'Ready' && c.status === 'False'));
    expect(condition).toMatchObject({ reason: 'Invalid', message: expect.stringContaining('spec.key "nope" must name one of spec.columns') });
    expect((await hubGet('/api/entities/partner')).body!.key).toBe('partner_id');
    api.remove(apiVersionOf(ENTITY), 'entities', NS, 'partner');
    await until('the resource gone', () => !entity('partner'));
    expect((await hubGet('/api/entities/partner')).status).toBe(404);
  });

  it('puts the per-tenant limit of entities (500) on Ready as Invalid, as any refused manifest, and applies once a place is free', async () => {
    const fillers = Array.from({ length: 500 }, (_, i) => `cap-filler-${i}`);
    const db = hub.services.db;
    await db.withTenant(1, (tx) =>
      tx.query(`insert into entities.entities (tenant_id, name, key, manifest, spec) select core.current_tenant(), n, 'id', '{}', '{}' from unnest($1::text[]) as n`, [fillers]),
    );
    try {
      api.apply('entities', resource());
      const condition = await until('Ready=False', () => entity('partner')?.status?.conditions?.find((c) => c.type === 'Ready' && c.status === 'False'));
      expect(condition).toMatchObject({
        reason: 'Invalid',
        message: 'metadata.name: this tenant has 500 entities, the most a tenant may have (500): delete one before applying a new entity partner (an existing name can still be updated)',
      });
      expect((await hubGet('/api/entities/partner')).status).toBe(404);
      await db.withTenant(1, (tx) => tx.query(`delete from entities.entities where name = 'cap-filler-0'`));
      await resynced();
      await until('Ready', () => entity('partner')?.status?.conditions?.find((c) => c.type === 'Ready' && c.status === 'True'));
      expect((await hubGet('/api/entities/partner')).status).toBe(200);
    } finally {
      await db.withTenant(1, (tx) => tx.query('delete from entities.entities where name = any($1::text[])', [fillers]));
    }
    api.remove(apiVersionOf(ENTITY), 'entities', NS, 'partner');
    await until('the resource gone', () => !entity('partner'));
  });
});

describe('a Process resource', () => {
  const proc = (name: string) => api.get(apiVersionOf(PROCESS), 'processes', NS, name) as Resource | undefined;
  const resource = () => ({ ...example('process-big-runs.yaml'), metadata: { ...example('process-big-runs.yaml').metadata, namespace: NS } });

  it('is applied through the same service as POST /api/processes/apply: Ready, no CronJob, no lastRun', async () => {
    api.apply('processes', resource());
    const condition = await until('Ready', () => proc('big-runs')?.status?.conditions?.find((c) => c.type === 'Ready' && c.status !== 'Unknown'));
    expect(condition).toMatchObject({ status: 'True', reason: 'Applied', observedGeneration: 1, message: 'applied to tenant default' });
    const stored = proc('big-runs')!;
    expect(stored.metadata.finalizers).toEqual([FINALIZER]);
    expect(stored.status!.lastRun).toBeUndefined();
    expect(cronJob('process-team-a-big-runs')).toBeUndefined();
    const held = (await hubGet('/api/processes/big-runs')).body!;
    expect(held.manifest).toEqual(manifestOf(stored));
    expect(held).toMatchObject({ name: 'big-runs', event: 'connector.run.*', decision: 'decision.big-run' });
  });

  it('puts a CEL error on Ready naming spec.when, and deletes the process in the hub through its finalizer', async () => {
    const broken = resource();
    (broken.spec as { when: string }).when = 'payload.records_out >';
    api.apply('processes', broken);
    const condition = await until('Ready=False', () => proc('big-runs')?.status?.conditions?.find((c) => c.type === 'Ready' && c.status === 'False'));
    expect(condition).toMatchObject({ reason: 'Invalid', message: expect.stringContaining('spec.when') });
    expect((await hubGet('/api/processes/big-runs')).body!.when).toBe('type == "connector.run.completed" && payload.records_out > 1000');
    api.remove(apiVersionOf(PROCESS), 'processes', NS, 'big-runs');
    await until('the resource gone', () => !proc('big-runs'));
    expect((await hubGet('/api/processes/big-runs')).status).toBe(404);
  });
});

describe('a Workflow resource', () => {
  const workflow = (name: string) => api.get(apiVersionOf(WORKFLOW), 'workflows', NS, name) as Resource | undefined;
  const resource = (spec: Record<string, unknown> = {}) => ({
    apiVersion: 'apps.svc.io/v1',
    kind: 'Workflow',
    metadata: { name: 'partner-country', namespace: NS, labels: { 'svc.io/tenant': 'default' } },
    spec: { entity: 'partner', stateColumn: 'country', states: ['FR', 'DE'], transitions: [{ from: 'FR', to: 'DE' }], dormancy: { after: '30d' }, ...spec },
  });

  it('is applied through the same service as POST /api/workflows/apply: Ready, no CronJob, no lastRun; an error lands on Ready naming the field; the finalizer deletes it', async () => {
    api.apply('entities', { ...example('entity-partner.yaml'), metadata: { ...example('entity-partner.yaml').metadata, namespace: NS } });
    await until('the entity', async () => (await hubGet('/api/entities/partner')).status === 200);
    api.apply('workflows', resource());
    const condition = await until('Ready', () => workflow('partner-country')?.status?.conditions?.find((c) => c.type === 'Ready' && c.status === 'True'));
    expect(condition).toMatchObject({ reason: 'Applied', observedGeneration: 1 });
    const stored = workflow('partner-country')!;
    expect(stored.metadata.finalizers).toEqual([FINALIZER]);
    expect(stored.status!.lastRun).toBeUndefined();
    expect(cronJob('workflow-team-a-partner-country')).toBeUndefined();
    const held = (await hubGet('/api/platform/workflows/partner-country')).body!;
    expect(held.manifest).toEqual(manifestOf(stored));
    expect(held).toMatchObject({ name: 'partner-country', entity: 'partner', scope: 'partners', stateColumn: 'country', dormancy: { after: '30d', states: ['FR', 'DE'] } });

    api.apply('workflows', resource({ transitions: [{ from: 'FR', to: 'IT' }] }));
    const invalid = await until('Ready=False', () => workflow('partner-country')?.status?.conditions?.find((c) => c.type === 'Ready' && c.status === 'False'));
    expect(invalid).toMatchObject({ reason: 'Invalid', message: expect.stringContaining('spec.transitions[0].to "IT" is not one of spec.states') });
    api.remove(apiVersionOf(WORKFLOW), 'workflows', NS, 'partner-country');
    await until('the resource gone', () => !workflow('partner-country'));
    expect((await hubGet('/api/platform/workflows/partner-country')).status).toBe(404);
  });

  it("derives its default scope again when its Entity's first scope changes (no change of the Workflow, no resync); a resync then writes nothing, but a normalised form an older hub stored; one the hub would now refuse stays applied", async () => {
    const entityResource = (scope: string[]) => {
      const e = { ...example('entity-partner.yaml'), metadata: { ...example('entity-partner.yaml').metadata, namespace: NS } };
      return { ...e, spec: { ...(e.spec as Record<string, unknown>), scope } };
    };
    const scopeOf = async () => (await hubGet('/api/platform/workflows/partner-country')).body?.scope;
    api.apply('entities', entityResource(['partners', 'sales']));
    await until('the entity', async () => ((await hubGet('/api/entities/partner')).body?.scopes as string[] | undefined)?.[0] === 'partners');
    api.apply('workflows', resource());
    await until('the workflow on the first scope', async () => (await scopeOf()) === 'partners');
    await until('Ready', () => workflow('partner-country')?.status?.conditions?.find((c) => c.type === 'Ready' && c.status === 'True'));
    const generation = workflow('partner-country')!.metadata.generation;
    // Every reconcile of the Workflow's own changes done: only the Entity's change can bring the next.
    await settled();
    await until('the queue empty', () => operator.health().data.queued === 0);

    api.apply('entities', entityResource(['sales', 'partners']));
    await until('the default scope to follow the entity', async () => (await scopeOf()) === 'sales');
    expect(workflow('partner-country')!.metadata.generation).toBe(generation);

    // Truly unchanged: the resync applies nothing, in the hub or on the resources.
    await resyncWritesNothing('/api/platform/workflows/partner-country');
    const before = writes();

    // The form an older version of the hub stored for the same manifest (a field it no longer writes):
    // the resync writes the current one in the hub, and nothing on the resource (its status stays).
    const owner = await ownerClient(hub.ownerUrl);
    try {
      await owner.query(`update workflows.workflows set spec = spec || '{"retired": true}' where tenant_id = 1 and name = 'partner-country'`);
      operator.resyncAll();
      await until('the normalised form written again', async () => (await owner.query(`select spec ? 'retired' as stale from workflows.workflows where tenant_id = 1 and name = 'partner-country'`)).rows[0]!.stale === false);
    } finally {
      await owner.end();
    }
    await settled();
    expect(writes()).toBe(before);

    // Its Entity gone, the hub would now refuse the manifest it holds: the Workflow stays applied as it was, Ready.
    api.remove(apiVersionOf(ENTITY), 'entities', NS, 'partner');
    await until('the entity gone', async () => (await hubGet('/api/entities/partner')).status === 404);
    await settled();
    const afterEntity = writes();
    const held = (await hubGet('/api/platform/workflows/partner-country')).body!;
    await resynced();
    expect(writes()).toBe(afterEntity);
    expect((await hubGet('/api/platform/workflows/partner-country')).body).toEqual(held);
    expect(workflow('partner-country')!.status!.conditions!.find((c) => c.type === 'Ready')).toMatchObject({ status: 'True', reason: 'Applied' });

    api.remove(apiVersionOf(WORKFLOW), 'workflows', NS, 'partner-country');
    await until('the resource gone', () => !workflow('partner-country'));
  });
});

describe('an Export resource', () => {
  const exp = (name: string) => api.get(apiVersionOf(EXPORT), 'exports', NS, name) as Resource | undefined;
  const inNamespace = (o: KubeObject) => ({ ...o, metadata: { ...o.metadata, namespace: NS } });

  it('is applied through the same service as POST /api/exports/apply, with a CronJob running `svc-hub run export … --scheduled`', async () => {
    api.apply('entities', inNamespace(example('entity-partner.yaml')));
    await until('the entity', async () => (await hubGet('/api/entities/partner')).status === 200);
    api.apply('exports', inNamespace(example('export-partners-sftp.yaml')));
    const condition = await until('Ready', () => exp('partners-nightly')?.status?.conditions?.find((c) => c.type === 'Ready' && c.status === 'True'));
    expect(condition).toMatchObject({ reason: 'Applied', observedGeneration: 1 });
    const held = (await hubGet('/api/exports/partners-nightly')).body!;
    expect(held.manifest).toEqual(manifestOf(exp('partners-nightly')!));
    expect(held).toMatchObject({ entity: 'partner', scope: 'partners', destination: 'sftp', schedule: '0 2 * * *' });
    const job = await until('the CronJob', () => cronJob('export-team-a-partners-nightly'));
    // biome-ignore lint/suspicious/noExplicitAny: a deep read of the CronJob as the stand-in stored it
    const spec = (job as any).spec;
    expect(spec).toMatchObject({ schedule: '0 2 * * *', timeZone: 'Etc/UTC', concurrencyPolicy: 'Forbid' });
    expect(spec.jobTemplate.spec.template.spec.containers[0].args).toEqual(['run', 'export', 'partners-nightly', '--tenant', 'default', '--scheduled']);
  });

  it('puts an apply refusal on Ready naming the field', async () => {
    const broken = inNamespace(example('export-partners-sftp.yaml'));
    (broken.spec as { columns: string[]; order: string[] }).columns = ['partner_id', 'nickname'];
    (broken.spec as { columns: string[]; order: string[] }).order = ['partner_id'];
    api.apply('exports', broken);
    const condition = await until('Ready=False', () => exp('partners-nightly')?.status?.conditions?.find((c) => c.type === 'Ready' && c.status === 'False'));
    expect(condition).toMatchObject({ reason: 'Invalid', message: expect.stringContaining('spec.columns[1] nickname is not a canonical column of entity partner') });
    api.remove(apiVersionOf(EXPORT), 'exports', NS, 'partners-nightly');
    await until('the resource gone', () => !exp('partners-nightly'));
    expect((await hubGet('/api/exports/partners-nightly')).status).toBe(404);
  });

  it('deleted while its run is Running in a process that died: the run ends at once, Failed interrupted, and the resource made again runs', async () => {
    const name = 'partners-dead-run';
    const resource = inNamespace(example('export-partners-sftp.yaml'));
    resource.metadata = { ...resource.metadata, name };
    // Nothing listens there: the run of the resource made again fails at once.
    resource.spec = { ...(resource.spec as object), destination: { ...(resource.spec as { destination: object }).destination, host: '127.0.0.1', port: 9 } };
    const readyApplied = () => until('Ready', () => exp(name)?.status?.conditions?.find((c) => c.type === 'Ready' && c.status === 'True' && c.reason === 'Applied'));
    api.apply('exports', resource);
    await readyApplied();
    // A Running run as a claim left it, its last heartbeat an hour old: its process died (no sweep runs in this hub).
    const owner = await ownerClient(hub.ownerUrl);
    let id: string;
    try {
      const { rows } = await owner.query<{ id: string }>(
        `insert into exports.runs (tenant_id, export_id, export_name, entity, scope, destination, status, trigger, artifact_time, heartbeat_at)
         select 1, id, name, entity, scope, 'sftp', 'Running', 'manual', now(), now() - interval '1 hour' from exports.exports where tenant_id = 1 and name = $1
         returning id`,
        [name],
      );
      id = rows[0]!.id;
    } finally {
      await owner.end();
    }
    const run = async (runId: string) => {
      const res = await hubGet(`/api/exports/${name}/runs/${runId}`);
      if (res.status !== 200) throw new Error(`run ${runId}: ${res.status}`);
      return res.body!;
    };
    const logs = captureLogs('warn');
    try {
      api.remove(apiVersionOf(EXPORT), 'exports', NS, name);
      await until('the resource gone', () => !exp(name));
      // Was: Running, its stop request read by no process, until the sweep failed it; meanwhile the
      // name's next run was refused (409 already has a run in flight).
      expect(await run(id)).toMatchObject({
        status: 'Failed',
        failureCode: 'interrupted',
        failureReason: expect.stringMatching(/^the export was deleted after the run's process had stopped \(no heartbeat for 30 s\): a partial file .* may be left behind$/),
      });
      expect(logs.lines().filter((l) => l.runId === id && /failed as interrupted on delete/.test(String(l.msg)))).toHaveLength(1);
    } finally {
      logs.restore();
    }
    api.apply('exports', resource);
    await readyApplied();
    const started = await fetch(`${hub.url}/api/exports/${name}/runs`, { method: 'POST', headers: { 'X-Tenant-ID': '1' } });
    expect(started.status).toBe(202);
    const next = ((await started.json()) as { runId: string }).runId;
    await until('the next run to end', async () => (await run(next)).status !== 'Running');
    api.remove(apiVersionOf(EXPORT), 'exports', NS, name);
    await until('the resource gone', () => !exp(name));
  });
});

describe('status, ownership and conflicts', () => {
  const NS_B = 'team-b';
  const open = example('open.yaml');
  /** A Connector resource with open.yaml's spec (base_url changed when given). */
  const put = (name: string, namespace = NS, opts: { tenant?: string; baseUrl?: string } = {}) =>
    api.apply('connectors', {
      ...open,
      metadata: { name, namespace, labels: { 'svc.io/tenant': opts.tenant ?? 'default' } },
      spec: { ...(open.spec as object), ...(opts.baseUrl ? { base_url: opts.baseUrl } : {}) },
    });
  const get = (name: string, namespace = NS) => api.get(API_VERSION, 'connectors', namespace, name) as Resource | undefined;
  const cond = (name: string, type: string, namespace = NS) => get(name, namespace)?.status?.conditions?.find((c) => c.type === type);
  const readyTrue = (name: string, namespace = NS) => until(`${namespace}/${name} Ready=True`, () => cond(name, 'Ready', namespace)?.status === 'True' && get(name, namespace)!, 15_000);
  const owned = (uid: string) => hub.services.manifests.owned(CONNECTOR, { uid });
  /** What a real API server does to a status field its CRD does not declare: the field is gone. */
  async function dropStatusTenant(name: string, namespace = NS): Promise<void> {
    const res = await fetch(`${api.url}/apis/connectors.svc.io/v1/namespaces/${namespace}/connectors/${name}/status`, {
      method: 'PATCH',
      headers: { 'Content-Type': 'application/merge-patch+json', Authorization: 'Bearer stand-in' },
      body: JSON.stringify({ status: { tenant: null } }),
    });
    expect(res.status).toBe(200);
    expect(get(name, namespace)!.status!.tenant).toBeUndefined();
  }
  /** A prod hub's manifest services with this svc.egress.allow; the name of every apply that changed something goes to `applies`. */
  const countingApplies = (applies: string[], allow: string[]): ManifestServices => {
    const real = createManifestServices({ db: hub.services.db, admin: hub.services.admin, egress: new EgressPolicy({ denyPrivate: true, allow }) });
    return {
      ...real,
      applyIfChanged: async (...args) => {
        const outcome = await real.applyIfChanged(...args);
        if (!outcome.conflict && !outcome.stale && outcome.changed) applies.push(args[2]);
        return outcome;
      },
    };
  };
  /** Stops the operator, runs `meanwhile`, then starts a new Operator (nothing kept in memory). */
  async function restart(meanwhile: () => Promise<void> | void, manifests?: ManifestServices): Promise<void> {
    await operator.stop();
    await meanwhile();
    operator = new Operator(operatorOptions(manifests));
    await operator.start();
  }

  beforeAll(() => {
    api.apply('namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS_B } });
  });

  it('declares every status field it writes in the CRD (status.tenant is not pruned by an API server)', async () => {
    for (const kind of MANIFEST_KINDS) {
      // biome-ignore lint/suspicious/noExplicitAny: a deep read of the generated CRD
      const schema = (crdOf(kind) as any).spec.versions[0].schema.openAPIV3Schema.properties.status;
      expect(Object.keys(schema.properties)).toEqual(expect.arrayContaining(['observedGeneration', 'tenant', 'conditions', ...(kind.lastRun ? ['lastRun'] : [])]));
      expect(schema.properties.tenant.type).toBe('string');
    }
    put('declared');
    const stored = await readyTrue('declared');
    // Every key of the status written is declared (what a pruning API server would keep).
    // biome-ignore lint/suspicious/noExplicitAny: a walk over a structural schema
    const undeclared = (schema: any, value: unknown, path: string): string[] => {
      if (Array.isArray(value)) return value.flatMap((v, i) => undeclared(schema.items, v, `${path}[${i}]`));
      if (!value || typeof value !== 'object') return [];
      return Object.entries(value).flatMap(([k, v]) => (schema.properties?.[k] ? undeclared(schema.properties[k], v, `${path}.${k}`) : [`${path}.${k}`]));
    };
    // biome-ignore lint/suspicious/noExplicitAny: a deep read of the generated CRD
    const statusSchema = (crdOf(CONNECTOR) as any).spec.versions[0].schema.openAPIV3Schema.properties.status;
    expect(stored.status!.tenant).toBe('default');
    expect(undeclared(statusSchema, stored.status, 'status')).toEqual([]);
  });

  it('writes the status as a JSON merge patch of the status subresource, and only when it changed', async () => {
    put('declared');
    await readyTrue('declared');
    await settled();
    const statusWrites = api.requests.filter((r) => r.path.endsWith('/status') && r.method !== 'GET');
    expect(statusWrites.length).toBeGreaterThan(0);
    // The stand-in answers 415 to a PATCH that is not application/merge-patch+json.
    expect(statusWrites.filter((r) => r.method !== 'PATCH' || (r.status !== 200 && r.status !== 409))).toEqual([]);
    // The status, and the resourceVersion it was read at (the optimistic lock), nothing else.
    for (const r of statusWrites) {
      expect(Object.keys(r.body as object).sort()).toEqual(['metadata', 'status']);
      expect(Object.keys((r.body as { metadata: object }).metadata)).toEqual(['resourceVersion']);
    }
    // A new generation: Reconciling=True is written first, then the outcome with Reconciling=False.
    // (A reconcile that read the resource from a cache behind the server wrote nothing: 409.)
    const declared = statusWrites.filter((r) => r.path.endsWith('/connectors/declared/status') && r.status === 200).map((r) => (r.body as { status: { conditions?: Array<{ type: string; status: string; reason: string; observedGeneration?: number }> } }).status);
    expect(declared.map((st) => st.conditions?.find((c) => c.type === 'Reconciling'))).toEqual([
      expect.objectContaining({ status: 'True', reason: 'Progressing', observedGeneration: 1 }),
      expect.objectContaining({ status: 'False', reason: 'Reconciled', observedGeneration: 1 }),
    ]);
    // A removed field is sent as null; an unchanged status is no patch at all.
    expect(mergePatchOf({ tenant: 'a', observedGeneration: 1, lastRun: { id: 'r', status: 'Running' } }, { observedGeneration: 1, lastRun: { id: 'r', status: 'Completed' } })).toEqual({ tenant: null, lastRun: { status: 'Completed' } });
    expect(mergePatchOf({ conditions: [{ type: 'Ready', status: 'True' }] }, { conditions: [{ status: 'True', type: 'Ready' }] })).toBeUndefined();
    const before = writes();
    operator.resyncAll();
    await settled();
    expect(api.requests.filter((r) => r.method !== 'GET').slice(before).map((r) => `${r.method} ${r.path} ${r.status} ${JSON.stringify(r.body)}`)).toEqual([]);
  });

  it('deletes the hub object through the finalizer after an operator restart, by its owner record (not status.tenant)', async () => {
    put('restarted');
    const resource = await readyTrue('restarted');
    expect(await owned(resource.metadata.uid!)).toEqual([{ tenantId: 1, tenant: 'default', name: 'restarted', owner: { namespace: NS, name: 'restarted', uid: resource.metadata.uid } }]);
    await restart(async () => {
      await dropStatusTenant('restarted');
      api.remove(API_VERSION, 'connectors', NS, 'restarted');
    });
    await until('the resource gone', () => !get('restarted'));
    expect((await hubGet('/api/connectors/restarted')).status).toBe(404);
    expect(await owned(resource.metadata.uid!)).toEqual([]);
  });

  it('moves the object when the tenant label changes, leaving no copy in the old tenant (across a restart, without status.tenant)', async () => {
    put('moving');
    await readyTrue('moving');
    expect((await hubGet('/api/connectors/moving')).status).toBe(200);
    await restart(async () => {
      await dropStatusTenant('moving');
      put('moving', NS, { tenant: 'globex' });
    });
    await until('status.tenant globex', () => get('moving')?.status?.tenant === 'globex' && cond('moving', 'Ready')?.status === 'True');
    expect((await hubGet('/api/connectors/moving', otherTenant)).status).toBe(200);
    expect((await hubGet('/api/connectors/moving')).status).toBe(404);
    expect((await owned(get('moving')!.metadata.uid!)).map((o) => o.tenant)).toEqual(['globex']);
  });

  it('keeps the object and its CronJob in the old tenant when a tenant relabel comes with a manifest the new tenant refuses', async () => {
    const offset = example('offset.yaml');
    const endpoints = (offset.spec as { endpoints: Array<Record<string, unknown>> }).endpoints;
    const at = (tenant: string, spec: object) => api.apply('connectors', { ...offset, metadata: { name: 'relabel-invalid', namespace: NS, labels: { 'svc.io/tenant': tenant } }, spec: spec as Record<string, unknown> });
    at('default', offset.spec as object);
    await readyTrue('relabel-invalid');
    const job = () => cronJob('connector-team-a-relabel-invalid');
    await until('its CronJob', () => job());
    expect(job()!.metadata!.labels!['svc.io/tenant']).toBe('default');
    // Relabelled to globex together with an invalid change: the apply in globex is refused.
    at('globex', { ...(offset.spec as object), endpoints: [{ ...endpoints[0], pagination: { kind: 'soap' } }] });
    const refused = await until('Invalid', () => cond('relabel-invalid', 'Ready')?.reason === 'Invalid' && cond('relabel-invalid', 'Ready'));
    expect(refused.message).toMatch(/spec\.endpoints\[0\]\.pagination/);
    await settled();
    // The hub keeps the last valid version where it was, with its CronJob, as for any refused change.
    expect((await hubGet('/api/connectors/relabel-invalid')).status).toBe(200);
    expect((await hubGet('/api/connectors/relabel-invalid', otherTenant)).status).toBe(404);
    expect(job()!.metadata!.labels!['svc.io/tenant']).toBe('default');
    expect(get('relabel-invalid')!.status!.tenant).toBe('default');
    // Fixed, it moves.
    at('globex', offset.spec as object);
    await until('moved to globex', () => get('relabel-invalid')?.status?.tenant === 'globex' && cond('relabel-invalid', 'Ready')?.status === 'True');
    expect((await hubGet('/api/connectors/relabel-invalid')).status).toBe(404);
    expect((await hubGet('/api/connectors/relabel-invalid', otherTenant)).status).toBe(200);
    await until('the CronJob follows', () => job()?.metadata?.labels?.['svc.io/tenant'] === 'globex');
  });

  it('keeps the object and its CronJob in the old tenant when the new tenant holds the name from HTTP (Conflict); it moves once the name is free', async () => {
    const offset = example('offset.yaml');
    const at = (tenant: string) => api.apply('connectors', { ...offset, metadata: { name: 'relabel-conflict', namespace: NS, labels: { 'svc.io/tenant': tenant } }, spec: offset.spec as Record<string, unknown> });
    at('default');
    await readyTrue('relabel-conflict');
    const job = () => cronJob('connector-team-a-relabel-conflict');
    await until('its CronJob', () => job());
    // globex holds a connector of that name, created over HTTP.
    const created = await fetch(`${hub.url}/api/connectors/apply`, {
      method: 'POST',
      headers: { 'X-Tenant-ID': String(otherTenant), 'Content-Type': 'application/json' },
      body: JSON.stringify({ ...open, metadata: { name: 'relabel-conflict' } }),
    });
    expect(created.status).toBe(201);
    const theirs = (await hubGet('/api/connectors/relabel-conflict', otherTenant)).body!;
    at('globex');
    const refused = await until('Conflict', () => cond('relabel-conflict', 'Ready')?.reason === 'Conflict' && cond('relabel-conflict', 'Ready'));
    expect(refused.message).toContain('created over HTTP');
    expect(refused.message).toContain("the tenant change is not applied: this resource's Connector stays in tenant default");
    await settled();
    // Nothing moved: the object and its CronJob stay in default; globex's own connector is untouched.
    expect((await hubGet('/api/connectors/relabel-conflict')).status).toBe(200);
    expect(job()!.metadata!.labels!['svc.io/tenant']).toBe('default');
    expect(get('relabel-conflict')!.status!.tenant).toBe('default');
    const after = (await hubGet('/api/connectors/relabel-conflict', otherTenant)).body!;
    expect([after.updatedAt, after.manifest]).toEqual([theirs.updatedAt, theirs.manifest]);
    // Once globex's connector is deleted, the resource moves.
    const deleted = await fetch(`${hub.url}/api/connectors/relabel-conflict`, { method: 'DELETE', headers: { 'X-Tenant-ID': String(otherTenant) } });
    expect(deleted.status).toBe(204);
    operator.resyncAll();
    await until('moved to globex', () => get('relabel-conflict')?.status?.tenant === 'globex' && cond('relabel-conflict', 'Ready')?.status === 'True');
    expect((await hubGet('/api/connectors/relabel-conflict')).status).toBe(404);
    expect((await hubGet('/api/connectors/relabel-conflict', otherTenant)).status).toBe(200);
    await until('the CronJob follows', () => job()?.metadata?.labels?.['svc.io/tenant'] === 'globex');
  });

  it('refuses a resource of the same name in another namespace of the tenant: Conflict naming the owner; deleting it deletes nothing', async () => {
    put('shared', NS, { baseUrl: 'http://first.example' });
    const first = await readyTrue('shared');
    put('shared', NS_B, { baseUrl: 'http://second.example' });
    const ready = await until('Conflict', () => cond('shared', 'Ready', NS_B)?.reason === 'Conflict' && cond('shared', 'Ready', NS_B));
    expect(ready).toMatchObject({ status: 'False', observedGeneration: 1 });
    expect(ready.message).toContain(`is managed by Connector ${NS}/shared (uid ${first.metadata.uid})`);
    expect(cond('shared', 'Stalled', NS_B)).toMatchObject({ status: 'True', reason: 'Conflict' });
    expect(cond('shared', 'Reconciling', NS_B)).toMatchObject({ status: 'False' });
    expect(get('shared', NS_B)!.status!.tenant).toBeUndefined();
    const held = (await hubGet('/api/connectors/shared')).body!;
    expect((held.manifest as { spec: { base_url: string } }).spec.base_url).toBe('http://first.example');

    api.remove(API_VERSION, 'connectors', NS_B, 'shared');
    await until('the conflicting resource gone', () => !get('shared', NS_B));
    expect((await hubGet('/api/connectors/shared')).status).toBe(200);
    expect((await owned(first.metadata.uid!)).map((o) => o.owner.namespace)).toEqual([NS]);
    expect(cond('shared', 'Ready')).toMatchObject({ status: 'True', reason: 'Applied' });

    // Once the owner is deleted, the resource that was refused takes the name (at once, not at the resync).
    put('shared', NS_B, { baseUrl: 'http://second.example' });
    await until('Conflict again', () => cond('shared', 'Ready', NS_B)?.reason === 'Conflict');
    await settled();
    api.remove(API_VERSION, 'connectors', NS, 'shared');
    const second = await readyTrue('shared', NS_B);
    expect(second.status!.tenant).toBe('default');
    const now = (await hubGet('/api/connectors/shared')).body!;
    expect((now.manifest as { spec: { base_url: string } }).spec.base_url).toBe('http://second.example');
    expect((await owned(second.metadata.uid!)).map((o) => o.owner.namespace)).toEqual([NS_B]);
  });

  it('refuses a resource named like an object created over HTTP, and its delete deletes nothing', async () => {
    const res = await fetch(`${hub.url}/api/connectors/apply`, {
      method: 'POST',
      headers: { 'X-Tenant-ID': '1', 'Content-Type': 'application/json' },
      body: JSON.stringify({ ...open, metadata: { name: 'via-http' } }),
    });
    expect(res.status).toBe(201);
    const before = (await hubGet('/api/connectors/via-http')).body!;
    put('via-http', NS, { baseUrl: 'http://elsewhere.example' });
    const ready = await until('Conflict', () => cond('via-http', 'Ready')?.reason === 'Conflict' && cond('via-http', 'Ready'));
    expect(ready.status).toBe('False');
    expect(ready.message).toContain('created over HTTP');
    expect(cond('via-http', 'Stalled')).toMatchObject({ status: 'True', reason: 'Conflict' });
    api.remove(API_VERSION, 'connectors', NS, 'via-http');
    await until('the resource gone', () => !get('via-http'));
    const after = (await hubGet('/api/connectors/via-http')).body!;
    expect(after.updatedAt).toBe(before.updatedAt);
    expect(after.manifest).toEqual(before.manifest);
  });

  it('refuses a resource named like an object created over HTTP by a caller whose login is the operator\'s own actor (`operator`), and its delete deletes nothing', async () => {
    const res = await fetch(`${hub.url}/api/connectors/apply`, {
      method: 'POST',
      headers: { 'X-Tenant-ID': '1', 'X-User-ID': 'operator', 'Content-Type': 'application/json' },
      body: JSON.stringify({ ...open, metadata: { name: 'by-a-user-named-operator' } }),
    });
    expect(res.status).toBe(201);
    const before = (await hubGet('/api/connectors/by-a-user-named-operator')).body!;
    put('by-a-user-named-operator', NS, { baseUrl: 'http://elsewhere.example' });
    await until('Applied or Conflict', () => ['Applied', 'Conflict'].includes(cond('by-a-user-named-operator', 'Ready')?.reason as string));
    expect(cond('by-a-user-named-operator', 'Ready')).toMatchObject({ status: 'False', reason: 'Conflict', message: expect.stringContaining('created over HTTP (last applied by operator#operator)') });
    api.remove(API_VERSION, 'connectors', NS, 'by-a-user-named-operator');
    await until('the resource gone', () => !get('by-a-user-named-operator'));
    const after = (await hubGet('/api/connectors/by-a-user-named-operator')).body!;
    expect(after.updatedAt).toBe(before.updatedAt);
    expect(after.manifest).toEqual(before.manifest);
  });

  it("a resource that manages nothing deletes nothing in a tenant its Namespace does not allow, whatever its status.tenant says", async () => {
    // Another tenant's object as an older operator left it: applied by the operator's actor, no owner record.
    await hub.services.db.withTenant(otherTenant, (tx) => CONNECTOR.handler.apply(tx, { ...open, metadata: { name: 'aimed' } }, 'operator'));
    expect((await hubGet('/api/connectors/aimed', otherTenant)).status).toBe(200);
    // A resource of tenant default that manages nothing (a Conflict with an object created over HTTP).
    const res = await fetch(`${hub.url}/api/connectors/apply`, {
      method: 'POST',
      headers: { 'X-Tenant-ID': '1', 'Content-Type': 'application/json' },
      body: JSON.stringify({ ...open, metadata: { name: 'aimed' } }),
    });
    expect(res.status).toBe(201);
    put('aimed');
    await until('Conflict', () => cond('aimed', 'Ready')?.reason === 'Conflict');
    await settled();
    await restart(async () => {
      // Someone who may write the resource's status points it at the other tenant, then deletes it.
      const patched = await fetch(`${api.url}/apis/connectors.svc.io/v1/namespaces/${NS}/connectors/aimed/status`, {
        method: 'PATCH',
        headers: { 'Content-Type': 'application/merge-patch+json', Authorization: 'Bearer stand-in' },
        body: JSON.stringify({ status: { tenant: 'globex' } }),
      });
      expect(patched.status).toBe(200);
      api.remove(API_VERSION, 'connectors', NS, 'aimed');
    });
    await until('the resource gone', () => !get('aimed'));
    expect((await hubGet('/api/connectors/aimed', otherTenant)).status).toBe(200);
    expect((await hubGet('/api/connectors/aimed')).status).toBe(200);
  });

  /** open.yaml named `name`, with that base_url. */
  const manifestNamed = (name: string, baseUrl: string) => ({ ...open, metadata: { name }, spec: { ...(open.spec as object), base_url: baseUrl } });
  /** POST /api/connectors/apply of open.yaml named `name` (base_url http://http.example) in tenant 1: its status. */
  const httpApply = async (name: string) =>
    (
      await fetch(`${hub.url}/api/connectors/apply`, {
        method: 'POST',
        headers: { 'X-Tenant-ID': '1', 'Content-Type': 'application/json' },
        body: JSON.stringify(manifestNamed(name, 'http://http.example')),
      })
    ).status;
  const storedBaseUrl = async (name: string) => ((await hubGet(`/api/connectors/${name}`)).body!.manifest as { spec: { base_url: string } }).spec.base_url;

  it("refuses a resource whose new name an HTTP apply creates at the same moment, the HTTP apply first in the tenant's turn: Conflict, the HTTP object kept, nothing recorded", async () => {
    // Both read before the tenant's turn (held until both wait for it) that the name is free: the
    // operator's apply, second in the turn, must find the HTTP apply's object then and write nothing.
    for (const [name, baseUrl] of [['raced-http', 'http://operator.example'], ['raced-http-same', 'http://http.example']] as const) {
      const owner = { namespace: NS, name, uid: `${name}-uid`, generation: 1 };
      const [status, outcome] = await whileTurnHeld<unknown>(
        hub.services.db,
        1,
        CONNECTOR.plural,
        [
          () => httpApply(name),
          () => hub.services.manifests.applyIfChanged(CONNECTOR, 1, name, manifestNamed(name, baseUrl), 'operator', owner),
        ],
        { inOrder: true },
      );
      expect(status).toBe(201);
      expect(outcome).toMatchObject({ conflict: { by: 'http' } });
      expect(await storedBaseUrl(name)).toBe('http://http.example');
      expect(await owned(owner.uid)).toEqual([]);
      expect((await fetch(`${hub.url}/api/connectors/${name}`, { method: 'DELETE', headers: { 'X-Tenant-ID': '1' } })).status).toBe(204);
    }
  });

  /** The Ready condition once the operator has decided on the resource (True or False). */
  const decided = (name: string, namespace = NS) => until(`${namespace}/${name} decided`, () => ['True', 'False'].includes(cond(name, 'Ready', namespace)?.status ?? '') && cond(name, 'Ready', namespace)!, 15_000);

  it('an Operator reconciling a new resource while an HTTP apply creates its name at the same moment, the HTTP apply first: Conflict on Ready, the HTTP object kept, no record', async () => {
    const name = 'raced-op-http';
    const [status, ready] = await whileTurnHeld<unknown>(
      hub.services.db,
      1,
      CONNECTOR.plural,
      [
        () => httpApply(name),
        () => {
          put(name, NS, { baseUrl: 'http://operator.example' });
          return decided(name);
        },
      ],
      { inOrder: true },
    );
    expect(status).toBe(201);
    expect(ready).toMatchObject({ status: 'False', reason: 'Conflict' });
    expect((ready as { message: string }).message).toContain('created over HTTP');
    expect(await storedBaseUrl(name)).toBe('http://http.example');
    expect(await owned(get(name)!.metadata.uid!)).toEqual([]);
    api.remove(API_VERSION, 'connectors', NS, name);
    await until('the resource gone', () => !get(name));
    expect(await storedBaseUrl(name)).toBe('http://http.example');
    expect((await fetch(`${hub.url}/api/connectors/${name}`, { method: 'DELETE', headers: { 'X-Tenant-ID': '1' } })).status).toBe(204);
  });

  /**
   * Puts a resource named `name` in NS, then one in NS_B (base_url http://<namespace>.example), each
   * reconciled by the Operator, through `race` (whileTurnHeld, whileHeld): the first is Applied, the
   * second a Conflict naming it, and only the first's manifest and record are in the hub. Both deleted.
   */
  async function expectFirstTwinApplied(name: string, race: <T>(applies: (() => Promise<T>)[]) => Promise<T[]>): Promise<void> {
    const [first, second] = await race(
      [NS, NS_B].map((namespace) => () => {
        put(name, namespace, { baseUrl: `http://${namespace}.example` });
        return decided(name, namespace);
      }),
    );
    const uid = get(name)!.metadata.uid!;
    expect(first).toMatchObject({ status: 'True', reason: 'Applied' });
    expect(second).toMatchObject({ status: 'False', reason: 'Conflict' });
    expect(second?.message).toContain(`is managed by Connector ${NS}/${name} (uid ${uid})`);
    expect(await storedBaseUrl(name)).toBe(`http://${NS}.example`);
    expect((await owned(uid)).map((o) => o.owner.namespace)).toEqual([NS]);
    expect(await owned(get(name, NS_B)!.metadata.uid!)).toEqual([]);
    api.remove(API_VERSION, 'connectors', NS_B, name);
    await until('the conflicting resource gone', () => !get(name, NS_B));
    api.remove(API_VERSION, 'connectors', NS, name);
    await until('the resource gone', () => !get(name));
    expect((await hubGet(`/api/connectors/${name}`)).status).toBe(404);
  }

  it('an Operator reconciling two new resources of one name in two namespaces of a tenant at the same moment: the first is Applied, the second a Conflict naming it', () =>
    expectFirstTwinApplied('raced-op-twins', (applies) => whileTurnHeld(hub.services.db, 1, CONNECTOR.plural, applies, { inOrder: true })));

  it("refuses the second of two resources of one tenant (two namespaces) creating one new name at the same moment: Conflict naming the first, whose object and record stay", async () => {
    for (const [name, baseUrl] of [['raced-twins', 'http://b.example'], ['raced-twins-same', 'http://a.example']] as const) {
      const a = { namespace: NS, name, uid: `${name}-a`, generation: 1 };
      const b = { namespace: NS_B, name, uid: `${name}-b`, generation: 1 };
      const [first, second] = await whileTurnHeld(
        hub.services.db,
        1,
        CONNECTOR.plural,
        [
          () => hub.services.manifests.applyIfChanged(CONNECTOR, 1, name, manifestNamed(name, 'http://a.example'), 'operator', a),
          () => hub.services.manifests.applyIfChanged(CONNECTOR, 1, name, manifestNamed(name, baseUrl), 'operator', b),
        ],
        { inOrder: true },
      );
      expect(first).toMatchObject({ changed: true, created: true });
      expect(second).toEqual({ conflict: { by: 'resource', owner: a } });
      expect(await storedBaseUrl(name)).toBe('http://a.example');
      expect((await owned(a.uid)).map((o) => o.owner.namespace)).toEqual([NS]);
      expect(await owned(b.uid)).toEqual([]);
      expect(await hub.services.manifests.removeOwned(CONNECTOR, 1, name, { uid: a.uid })).toBe(true);
    }
  });

  /** As an operator from before owner records left it: open.yaml named `name` (base_url http://legacy.example), applied by the operator's actor, no record. */
  const legacy = (name: string) => hub.services.db.withTenant(1, (tx) => CONNECTOR.handler.apply(tx, manifestNamed(name, 'http://legacy.example'), 'operator'));
  /**
   * Runs `applies` in that order while owner records cannot be written (manifests.owners locked in
   * share mode), each started once those before it wait for a lock: each has read before then that
   * the object has no record, and none has committed.
   */
  const whileRecordsHeld = <T>(applies: (() => Promise<T>)[]) =>
    whileHeld(hub.services.db, 1, { what: 'the owner records', take: (tx) => tx.query('lock table manifests.owners in share mode'), anyLock: true }, applies, { inOrder: true });

  it('refuses the second of two resources of one tenant (two namespaces) adopting one unrecorded object at the same moment: Conflict naming the first, whose apply and record stay', async () => {
    // A different manifest each, and each the manifest the hub holds (nothing to write but the record).
    for (const [name, baseUrls] of [['adopted-twins', ['http://a.example', 'http://b.example']], ['adopted-twins-same', ['http://legacy.example', 'http://legacy.example']]] as const) {
      await legacy(name);
      const a = { namespace: NS, name, uid: `${name}-a`, generation: 1 };
      const b = { namespace: NS_B, name, uid: `${name}-b`, generation: 1 };
      const [first, second] = await whileRecordsHeld([
        () => hub.services.manifests.applyIfChanged(CONNECTOR, 1, name, manifestNamed(name, baseUrls[0]), 'operator', a),
        () => hub.services.manifests.applyIfChanged(CONNECTOR, 1, name, manifestNamed(name, baseUrls[1]), 'operator', b),
      ]);
      expect(first).toMatchObject({ adopted: true });
      expect(second).toEqual({ conflict: { by: 'resource', owner: a } });
      expect(await storedBaseUrl(name)).toBe(baseUrls[0]);
      expect((await owned(a.uid)).map((o) => o.owner.namespace)).toEqual([NS]);
      expect(await owned(b.uid)).toEqual([]);
      expect(await hub.services.manifests.removeOwned(CONNECTOR, 1, name, { uid: a.uid })).toBe(true);
    }
  });

  it('an Operator reconciling two resources of one name in two namespaces of a tenant at the same moment, the object unrecorded: the first adopts it (Applied), the second is a Conflict naming it', async () => {
    await legacy('adopted-op-twins');
    await expectFirstTwinApplied('adopted-op-twins', whileRecordsHeld);
  });

  /** The entity the Export and Workflow manifests below name (applied over HTTP, kept for the tests that race adoptions). */
  const RACE_ENTITY = 'race-partner';
  /**
   * Per kind, a manifest named `name` whose one field follows `variant` (a connector's base_url, an
   * entity's column label, an export's path, a process's message, a workflow's dormancy), so that
   * the legacy one, the HTTP one and the operator's one differ (or, the same variant, are equal).
   */
  const racing: Array<{ kind: ManifestKind; manifest: (name: string, variant: 'legacy' | 'http' | 'operator') => Record<string, unknown> }> = [
    { kind: CONNECTOR, manifest: (name, v) => manifestNamed(name, `http://${v}.example`) },
    {
      kind: ENTITY,
      manifest: (name, v) => {
        const e = example('entity-partner.yaml');
        const spec = e.spec as { columns: Array<Record<string, unknown>> };
        return { ...e, metadata: { name }, spec: { ...spec, columns: spec.columns.map((c, i) => (i === 1 ? { ...c, label: `Partner name (${v})` } : c)) } };
      },
    },
    {
      kind: EXPORT,
      manifest: (name, v) => {
        const x = example('export-partners-sftp.yaml');
        const spec = x.spec as { destination: object };
        return { ...x, metadata: { name }, spec: { ...spec, source: { entity: RACE_ENTITY }, destination: { ...spec.destination, path: `/upload/${v}-\${date}.csv` } } };
      },
    },
    { kind: PROCESS, manifest: (name, v) => ({ ...example('process-big-runs.yaml'), metadata: { name }, spec: { ...(example('process-big-runs.yaml').spec as object), message: `a big run (${v})` } }) },
    {
      kind: WORKFLOW,
      manifest: (name, v) => ({
        apiVersion: 'apps.svc.io/v1',
        kind: 'Workflow',
        metadata: { name },
        spec: { entity: RACE_ENTITY, stateColumn: 'country', states: ['FR', 'DE'], transitions: [{ from: 'FR', to: 'DE' }], dormancy: { after: { legacy: '30d', http: '31d', operator: '32d' }[v] } },
      }),
    },
  ];
  /** The manifest the hub holds of that name (no labels: the variant's field tells who applied it). */
  const heldManifest = (kind: ManifestKind, name: string) => hub.services.db.withTenant(1, async (tx) => (await kind.handler.stored(tx, name))?.manifest);
  /** POST /api/<plural>/apply of `manifest` in tenant 1: its status. */
  const httpApplyOf = async (kind: ManifestKind, manifest: Record<string, unknown>) =>
    (await fetch(`${hub.url}/api/${kind.plural}/apply`, { method: 'POST', headers: { 'X-Tenant-ID': '1', 'Content-Type': 'application/json' }, body: JSON.stringify(manifest) })).status;
  /**
   * Runs the HTTP apply first, then `operator`, each started once those before it wait for a lock,
   * while the tenant's turn for the kind is held: the HTTP apply holds what the kind's apply locks
   * before the turn (a connector's, entity's or export's row) and waits for the turn; the operator
   * has read by then that the object is unrecorded and was last applied by the operator, and waits.
   */
  const httpThenOperator = <T>(kind: ManifestKind, http: () => Promise<number>, operatorApply: () => Promise<T>) => inTenantTurn(kind, [http, operatorApply]) as Promise<[number, T]>;
  /** Runs `writes` in that order while the tenant's turn for the kind is held, each started once those before it wait for a lock (whileHeld). */
  const inTenantTurn = (kind: ManifestKind, writes: (() => Promise<unknown>)[]) =>
    whileHeld<unknown>(hub.services.db, 1, { what: "the tenant's turn", take: (tx) => takeTenantTurn(tx, kind.plural), anyLock: true }, writes, { inOrder: true });
  /** Deletes the object of that name (and its record) in tenant 1. */
  const removeHeld = (kind: ManifestKind, name: string) => hub.services.db.withTenant(1, (tx) => kind.handler.remove(tx, name, { afterCommit: () => {} }));

  /** Applies RACE_ENTITY over HTTP (before the tests of a describe block that race Export and Workflow manifests). */
  const applyRaceEntity = async () => {
    const e = example('entity-partner.yaml');
    expect(await httpApplyOf(ENTITY, { ...e, metadata: { name: RACE_ENTITY } })).toBe(201);
  };
  /** Deletes RACE_ENTITY (after them). */
  const removeRaceEntity = () => removeHeld(ENTITY, RACE_ENTITY);

  describe('an HTTP apply of an unrecorded object committed while the operator adopts it', () => {
    beforeAll(applyRaceEntity);
    afterAll(removeRaceEntity);

    for (const { kind, manifest } of racing) {
      it(`${kind.kind}: the operator's apply, second, is a Conflict (created over HTTP), the HTTP apply kept, nothing recorded`, async () => {
        // The operator applies another manifest than the HTTP apply, then the same one (nothing to
        // write but the record: the object must not be claimed either).
        for (const [name, variant] of [[`adopt-raced-${kind.singular}`, 'operator'], [`adopt-raced-${kind.singular}-same`, 'http']] as const) {
          await hub.services.db.withTenant(1, (tx) => kind.handler.apply(tx, manifest(name, 'legacy'), 'operator'));
          const owner = { namespace: NS, name, uid: `${name}-uid`, generation: 1 };
          const [status, outcome] = await httpThenOperator(
            kind,
            () => httpApplyOf(kind, manifest(name, 'http')),
            () => hub.services.manifests.applyIfChanged(kind, 1, name, manifest(name, variant), 'operator', owner),
          );
          expect(status).toBe(200);
          expect(outcome).toMatchObject({ conflict: { by: 'http' } });
          expect(await heldManifest(kind, name)).toEqual(manifest(name, 'http'));
          expect(await hub.services.manifests.owned(kind, { uid: owner.uid })).toEqual([]);
          expect(await removeHeld(kind, name)).toBe(true);
        }
      });

      it(`${kind.kind}: the operator's adoption first, then the HTTP apply: adopted and recorded, the HTTP apply accepted after it (the locks met in one order)`, async () => {
        const name = `adopt-first-${kind.singular}`;
        await hub.services.db.withTenant(1, (tx) => kind.handler.apply(tx, manifest(name, 'legacy'), 'operator'));
        const owner = { namespace: NS, name, uid: `${name}-uid`, generation: 1 };
        const [outcome, status] = await whileHeld<unknown>(
          hub.services.db,
          1,
          { what: "the tenant's turn", take: (tx) => takeTenantTurn(tx, kind.plural), anyLock: true },
          [() => hub.services.manifests.applyIfChanged(kind, 1, name, manifest(name, 'operator'), 'operator', owner), () => httpApplyOf(kind, manifest(name, 'http'))],
          { inOrder: true },
        );
        expect(outcome).toMatchObject({ changed: true, adopted: true });
        expect(status).toBe(200);
        expect(await heldManifest(kind, name)).toEqual(manifest(name, 'http'));
        expect((await hub.services.manifests.owned(kind, { uid: owner.uid })).map((o) => o.name)).toEqual([name]);
        expect(await removeHeld(kind, name)).toBe(true);
      });

      it(`${kind.kind}: the delete of a resource from before owner records (never adopted), the HTTP apply first: nothing deleted, the HTTP apply kept`, async () => {
        const name = `unowned-raced-${kind.singular}`;
        await hub.services.db.withTenant(1, (tx) => kind.handler.apply(tx, manifest(name, 'legacy'), 'operator'));
        const [status, deleted] = await httpThenOperator(
          kind,
          () => httpApplyOf(kind, manifest(name, 'http')),
          () => hub.services.manifests.removeOwned(kind, 1, name, { unownedAppliedBy: 'operator' }),
        );
        expect(status).toBe(200);
        expect(deleted).toBe(false);
        expect(await heldManifest(kind, name)).toEqual(manifest(name, 'http'));
        expect(await removeHeld(kind, name)).toBe(true);
      });

      it(`${kind.kind}: a running Operator reconciling the resource is a Conflict on Ready, the HTTP apply kept, no record`, async () => {
        const name = `adopt-raced-op-${kind.singular}`;
        const apiVersion = apiVersionOf(kind);
        const resource = () => api.get(apiVersion, kind.plural, NS, name) as Resource | undefined;
        const readyOf = () => resource()?.status?.conditions?.find((c) => c.type === 'Ready');
        await hub.services.db.withTenant(1, (tx) => kind.handler.apply(tx, manifest(name, 'legacy'), 'operator'));
        const [status, ready] = await httpThenOperator(
          kind,
          () => httpApplyOf(kind, manifest(name, 'http')),
          () => {
            const m = manifest(name, 'operator');
            api.apply(kind.plural, { ...m, metadata: { name, namespace: NS, labels: { 'svc.io/tenant': 'default' } } });
            return until(`${name} decided`, () => (['True', 'False'].includes(readyOf()?.status ?? '') ? readyOf() : undefined), 15_000);
          },
        );
        expect(status).toBe(200);
        expect(ready).toMatchObject({ status: 'False', reason: 'Conflict', message: expect.stringContaining('created over HTTP') });
        expect(await heldManifest(kind, name)).toEqual(manifest(name, 'http'));
        expect(await hub.services.manifests.owned(kind, { uid: resource()!.metadata.uid! })).toEqual([]);
        api.remove(apiVersion, kind.plural, NS, name);
        await until('the resource gone', () => !resource());
        expect(await heldManifest(kind, name)).toEqual(manifest(name, 'http'));
        expect(await removeHeld(kind, name)).toBe(true);
      });

      // Three writers of the object at once: two resources of one tenant in two namespaces (the same
      // name), both adopting it, and an HTTP apply of it. The second resource applies the HTTP
      // apply's manifest, so that it would claim the object with nothing to write but its record.
      it(`${kind.kind}: two resources adopting it and an HTTP apply, the HTTP apply first: both resources are a Conflict (created over HTTP), the HTTP apply kept, nothing recorded`, async () => {
        const name = `adopt-three-http-${kind.singular}`;
        await hub.services.db.withTenant(1, (tx) => kind.handler.apply(tx, manifest(name, 'legacy'), 'operator'));
        const a = { namespace: NS, name, uid: `${name}-a`, generation: 1 };
        const b = { namespace: NS_B, name, uid: `${name}-b`, generation: 1 };
        const [status, first, second] = await inTenantTurn(kind, [
          () => httpApplyOf(kind, manifest(name, 'http')),
          () => hub.services.manifests.applyIfChanged(kind, 1, name, manifest(name, 'operator'), 'operator', a),
          () => hub.services.manifests.applyIfChanged(kind, 1, name, manifest(name, 'http'), 'operator', b),
        ]);
        expect(status).toBe(200);
        expect(first).toMatchObject({ conflict: { by: 'http' } });
        expect(second).toMatchObject({ conflict: { by: 'http' } });
        expect(await heldManifest(kind, name)).toEqual(manifest(name, 'http'));
        expect(await hub.services.manifests.owned(kind, { uid: a.uid })).toEqual([]);
        expect(await hub.services.manifests.owned(kind, { uid: b.uid })).toEqual([]);
        expect(await removeHeld(kind, name)).toBe(true);
      });

      it(`${kind.kind}: two resources adopting it and an HTTP apply, one adoption first: adopted and recorded, the HTTP apply accepted after it, the other resource a Conflict naming the adopter (not the HTTP apply)`, async () => {
        const name = `adopt-three-first-${kind.singular}`;
        await hub.services.db.withTenant(1, (tx) => kind.handler.apply(tx, manifest(name, 'legacy'), 'operator'));
        const a = { namespace: NS, name, uid: `${name}-a`, generation: 1 };
        const b = { namespace: NS_B, name, uid: `${name}-b`, generation: 1 };
        const [adopted, status, second] = await inTenantTurn(kind, [
          () => hub.services.manifests.applyIfChanged(kind, 1, name, manifest(name, 'operator'), 'operator', a),
          () => httpApplyOf(kind, manifest(name, 'http')),
          () => hub.services.manifests.applyIfChanged(kind, 1, name, manifest(name, 'http'), 'operator', b),
        ]);
        expect(adopted).toMatchObject({ changed: true, adopted: true });
        expect(status).toBe(200);
        expect(second).toEqual({ conflict: { by: 'resource', owner: a } });
        expect(await heldManifest(kind, name)).toEqual(manifest(name, 'http'));
        expect((await hub.services.manifests.owned(kind, { uid: a.uid })).map((o) => o.owner.namespace)).toEqual([NS]);
        expect(await hub.services.manifests.owned(kind, { uid: b.uid })).toEqual([]);
        expect(await removeHeld(kind, name)).toBe(true);
      });

      it(`${kind.kind}: a running Operator reconciling two resources of its name (two namespaces) while an HTTP apply commits: the HTTP apply first, both are a Conflict on Ready; one adoption first, it is Applied and the other a Conflict naming it`, async () => {
        const apiVersion = apiVersionOf(kind);
        const resource = (name: string, namespace: string) => api.get(apiVersion, kind.plural, namespace, name) as Resource | undefined;
        const readyOf = (name: string, namespace: string) => resource(name, namespace)?.status?.conditions?.find((c) => c.type === 'Ready');
        /** Puts the resource (the operator's manifest) and waits until the Operator has decided it: its Ready condition. */
        const reconciled = (name: string, namespace: string) => () => {
          const m = manifest(name, 'operator');
          api.apply(kind.plural, { ...m, metadata: { name, namespace, labels: { 'svc.io/tenant': 'default' } } });
          return until(`${namespace}/${name} decided`, () => (['True', 'False'].includes(readyOf(name, namespace)?.status ?? '') ? readyOf(name, namespace) : undefined), 15_000);
        };
        const removed = async (name: string, namespace: string) => {
          api.remove(apiVersion, kind.plural, namespace, name);
          await until(`${namespace}/${name} gone`, () => !resource(name, namespace));
        };

        const raced = `adopt-three-op-http-${kind.singular}`;
        await hub.services.db.withTenant(1, (tx) => kind.handler.apply(tx, manifest(raced, 'legacy'), 'operator'));
        const [status, first, second] = await inTenantTurn(kind, [() => httpApplyOf(kind, manifest(raced, 'http')), reconciled(raced, NS), reconciled(raced, NS_B)]);
        expect(status).toBe(200);
        for (const ready of [first, second]) expect(ready).toMatchObject({ status: 'False', reason: 'Conflict', message: expect.stringContaining('created over HTTP') });
        expect(await heldManifest(kind, raced)).toEqual(manifest(raced, 'http'));
        for (const namespace of [NS, NS_B]) expect(await hub.services.manifests.owned(kind, { uid: resource(raced, namespace)!.metadata.uid! })).toEqual([]);
        await removed(raced, NS_B);
        await removed(raced, NS);
        expect(await heldManifest(kind, raced)).toEqual(manifest(raced, 'http'));
        expect(await removeHeld(kind, raced)).toBe(true);

        const adopted = `adopt-three-op-first-${kind.singular}`;
        await hub.services.db.withTenant(1, (tx) => kind.handler.apply(tx, manifest(adopted, 'legacy'), 'operator'));
        const [applied, accepted, refused] = await inTenantTurn(kind, [reconciled(adopted, NS), () => httpApplyOf(kind, manifest(adopted, 'http')), reconciled(adopted, NS_B)]);
        const uid = resource(adopted, NS)!.metadata.uid!;
        expect(applied).toMatchObject({ status: 'True', reason: 'Applied' });
        expect(accepted).toBe(200);
        expect(refused).toMatchObject({ status: 'False', reason: 'Conflict', message: expect.stringContaining(`is managed by ${kind.kind} ${NS}/${adopted} (uid ${uid})`) });
        expect((await hub.services.manifests.owned(kind, { uid })).map((o) => o.owner.namespace)).toEqual([NS]);
        expect(await hub.services.manifests.owned(kind, { uid: resource(adopted, NS_B)!.metadata.uid! })).toEqual([]);
        // The refused one first (deleting it deletes nothing), then the adopter, whose finalizer deletes the object.
        await removed(adopted, NS_B);
        expect(await heldManifest(kind, adopted)).toBeDefined();
        await removed(adopted, NS);
        expect(await heldManifest(kind, adopted)).toBeUndefined();
      });
    }
  });

  describe("a recorded object: the operator's apply or delete at the moment of an HTTP DELETE or apply of it", () => {
    beforeAll(applyRaceEntity);
    afterAll(removeRaceEntity);

    /** DELETE /api/<plural>/<name> in tenant 1: its status. */
    const httpDeleteOf = async (kind: ManifestKind, name: string) => (await fetch(`${hub.url}/api/${kind.plural}/${name}`, { method: 'DELETE', headers: { 'X-Tenant-ID': '1' } })).status;
    /**
     * Runs the HTTP request first, then `operator`, each started once those before it wait for a
     * lock, while the object's row is held from another connection: the HTTP request waits for it
     * first (and is granted it first); the operator has locked the object's owner record by then and
     * waits behind it, for the row or (a process's, a workflow's apply) the tenant's turn the HTTP
     * apply holds. Once the row goes, the HTTP request writes the object, which writes its owner
     * record (trigger forget_owner on a delete, forget_change_warnings on a change of the manifest).
     */
    const httpThenOperatorOnRow = <T>(kind: ManifestKind, name: string, http: () => Promise<number>, operator: () => Promise<T>) =>
      whileHeld<unknown>(
        hub.services.db,
        1,
        { what: `the ${kind.singular}'s row`, take: (tx) => tx.query(`select 1 from ${kind.plural}.${kind.plural} where name = $1 for update`, [name]), anyLock: true },
        [http, operator],
        { inOrder: true },
      ) as Promise<[number, T]>;
    /** Applies the legacy manifest of `name` as the resource of that uid (changed: its warnings recorded). */
    const recorded = async (kind: ManifestKind, manifest: (typeof racing)[number]['manifest'], name: string) => {
      const owner = { namespace: NS, name, uid: `${name}-uid`, generation: 1 };
      expect(await hub.services.manifests.applyIfChanged(kind, 1, name, manifest(name, 'legacy'), 'operator', owner)).toMatchObject({ changed: true, created: true });
      return owner;
    };

    for (const { kind, manifest } of racing) {
      it(`${kind.kind}: an HTTP DELETE, then the operator's apply of the next generation: both answer (no deadlock), the operator applies it anew and records it`, async () => {
        const name = `deleted-raced-${kind.singular}`;
        const owner = await recorded(kind, manifest, name);
        const [status, outcome] = await httpThenOperatorOnRow(
          kind,
          name,
          () => httpDeleteOf(kind, name),
          () => hub.services.manifests.applyIfChanged(kind, 1, name, manifest(name, 'operator'), 'operator', { ...owner, generation: 2 }),
        );
        expect(status).toBe(204);
        expect(outcome).toMatchObject({ changed: true, created: true });
        expect(await heldManifest(kind, name)).toEqual(manifest(name, 'operator'));
        expect((await hub.services.manifests.owned(kind, { uid: owner.uid })).map((o) => o.name)).toEqual([name]);
        expect(await hub.services.manifests.removeOwned(kind, 1, name, { uid: owner.uid })).toBe(true);
      });

      it(`${kind.kind}: an HTTP DELETE, then the resource's delete (removeOwned): both answer (no deadlock), the HTTP DELETE deleted it`, async () => {
        const name = `deleted-raced-remove-${kind.singular}`;
        const owner = await recorded(kind, manifest, name);
        const [status, deleted] = await httpThenOperatorOnRow(
          kind,
          name,
          () => httpDeleteOf(kind, name),
          () => hub.services.manifests.removeOwned(kind, 1, name, { uid: owner.uid }),
        );
        expect(status).toBe(204);
        expect(deleted).toBe(false);
        expect(await heldManifest(kind, name)).toBeUndefined();
        expect(await hub.services.manifests.owned(kind, { uid: owner.uid })).toEqual([]);
      });

      it(`${kind.kind}: an HTTP apply of another manifest, then the operator's apply of the next generation: both answer (no deadlock), the operator's applied over the edit`, async () => {
        const name = `edited-raced-${kind.singular}`;
        const owner = await recorded(kind, manifest, name);
        const [status, outcome] = await httpThenOperatorOnRow(
          kind,
          name,
          () => httpApplyOf(kind, manifest(name, 'http')),
          () => hub.services.manifests.applyIfChanged(kind, 1, name, manifest(name, 'operator'), 'operator', { ...owner, generation: 2 }),
        );
        expect(status).toBe(200);
        expect(outcome).toMatchObject({ changed: true, created: false, adopted: false });
        expect(await heldManifest(kind, name)).toEqual(manifest(name, 'operator'));
        expect(await hub.services.manifests.removeOwned(kind, 1, name, { uid: owner.uid })).toBe(true);
      });
    }
  });

  it('the hub refuses a stale generation of the same resource (uid): generation 4 applied, a later apply of generation 3 changes nothing', async () => {
    const owner = { namespace: NS, name: 'fenced-direct', uid: 'fenced-direct-uid' };
    const manifest = (baseUrl: string) => ({ ...open, metadata: { name: 'fenced-direct' }, spec: { ...(open.spec as object), base_url: baseUrl } });
    const four = await hub.services.manifests.applyIfChanged(CONNECTOR, 1, 'fenced-direct', manifest('http://four.example'), 'operator', { ...owner, generation: 4 });
    expect(four).toMatchObject({ changed: true, created: true });
    const before = (await hubGet('/api/connectors/fenced-direct')).body!;
    const three = await hub.services.manifests.applyIfChanged(CONNECTOR, 1, 'fenced-direct', manifest('http://three.example'), 'operator', { ...owner, generation: 3 });
    expect(three).toEqual({ stale: { recorded: 4 } });
    const after = (await hubGet('/api/connectors/fenced-direct')).body!;
    expect([after.updatedAt, (after.manifest as { spec: { base_url: string } }).spec.base_url]).toEqual([before.updatedAt, 'http://four.example']);
    // The same generation again (a resync) and a later one apply; another uid is a Conflict as before.
    expect(await hub.services.manifests.applyIfChanged(CONNECTOR, 1, 'fenced-direct', manifest('http://four.example'), 'operator', { ...owner, generation: 4 })).toMatchObject({ changed: false });
    expect(await hub.services.manifests.applyIfChanged(CONNECTOR, 1, 'fenced-direct', manifest('http://five.example'), 'operator', { ...owner, generation: 5 })).toMatchObject({ changed: true });
    expect(await hub.services.manifests.applyIfChanged(CONNECTOR, 1, 'fenced-direct', manifest('http://three.example'), 'operator', { ...owner, generation: 3 })).toEqual({ stale: { recorded: 5 } });
    expect(await hub.services.manifests.removeOwned(CONNECTOR, 1, 'fenced-direct', { uid: owner.uid })).toBe(true);
  });

  it('writes nothing (hub, status) from a cache behind the generation another replica applied; applies once its cache has that generation', async () => {
    const name = 'fenced';
    put(name);
    const resource = await readyTrue(name);
    await settled();
    expect(resource.metadata.generation).toBe(1);
    // Another replica, leading meanwhile, applied generation 2 (an edit this operator's cache has not seen).
    const newer = { ...open, metadata: { name }, spec: { ...(open.spec as object), base_url: 'http://newer.example' } };
    const outcome = await hub.services.manifests.applyIfChanged(CONNECTOR, 1, name, newer, 'operator', { namespace: NS, name, uid: resource.metadata.uid!, generation: 2 });
    expect(outcome).toMatchObject({ changed: true });
    const mark = api.requests.length;
    const reconciles = () => api.requests.slice(mark).filter((r) => r.path.includes(`/connectors/${name}`));
    operator.resyncAll();
    await until('a retry or two of the stale reconcile', async () => (await hubGet(`/api/connectors/${name}`)).body && api.requests.length > mark + 2);
    // Marker: two more tries begun (each reads the Namespace first): what the tries before them wrote
    // has landed. (A try that wrote and was done tries no more: the writes, checked below.)
    const tries = () => api.requests.slice(mark).filter((r) => r.path === `/api/v1/namespaces/${NS}`).length;
    const begun = tries();
    const baseUrl = async () => ((await hubGet(`/api/connectors/${name}`)).body!.manifest as { spec: { base_url: string } }).spec.base_url;
    await until('two more tries of the stale reconcile', async () => tries() >= begun + 2 || reconciles().some((r) => r.method !== 'GET') || (await baseUrl()) !== 'http://newer.example');
    expect(reconciles().filter((r) => r.method !== 'GET')).toEqual([]);
    expect(await baseUrl()).toBe('http://newer.example');
    expect(cond(name, 'Ready')).toMatchObject({ status: 'True', observedGeneration: 1 });
    // The resource's edit reaches this operator: generation 2 is applied (the same manifest) and reported.
    put(name, NS, { baseUrl: 'http://newer.example' });
    await until('generation 2 reconciled', () => get(name)?.status?.observedGeneration === 2 && cond(name, 'Ready')?.status === 'True');
    api.remove(API_VERSION, 'connectors', NS, name);
    await until('the resource gone', () => !get(name));
    expect((await hubGet(`/api/connectors/${name}`)).status).toBe(404);
  });

  it('writes nothing in the hub from a cache behind a tenant relabel another replica applied (labels are metadata: no generation to fence); follows the relabel once its cache has it', async () => {
    const name = 'relabel-fenced';
    put(name);
    const resource = await readyTrue(name);
    await settled();
    const uid = resource.metadata.uid!;
    const release = api.holdWatches();
    let moved: Record<string, unknown>;
    try {
      // Relabelled to globex: a change of metadata, the generation stays; this operator's watch lags.
      const relabelled = put(name, NS, { tenant: 'globex' }) as Resource;
      expect(relabelled.metadata.generation).toBe(resource.metadata.generation);
      // Another replica, leading meanwhile with the relabel in its cache, moved the object to globex.
      expect(await hub.services.manifests.removeOwned(CONNECTOR, 1, name, { uid })).toBe(true);
      const outcome = await hub.services.manifests.applyIfChanged(CONNECTOR, otherTenant, name, manifestOf(relabelled), 'operator', { namespace: NS, name, uid, generation: relabelled.metadata.generation });
      expect(outcome).toMatchObject({ changed: true, created: true });
      moved = (await hubGet(`/api/connectors/${name}`, otherTenant)).body!;
      // This operator reconciles its copy (labelled default) meanwhile.
      const mark = api.requests.length;
      operator.resyncAll();
      // Its reconcile reads the Namespace (the tenant) first.
      // Marker: a further try begun (each reads the Namespace first): what the try before it did in the
      // hub is done. (A try that wrote and was done tries no more: the write, checked below.)
      const tries = () => api.requests.slice(mark).filter((r) => r.path === `/api/v1/namespaces/${NS}`).length;
      await until('the stale copy reconciled, and tried again', async () => tries() >= 2 || (await hubGet(`/api/connectors/${name}`)).status !== 404);
      expect((await hubGet(`/api/connectors/${name}`)).status).toBe(404);
      expect((await hubGet(`/api/connectors/${name}`, otherTenant)).body).toEqual(moved);
    } finally {
      release();
    }
    await until('Ready in globex', () => get(name)?.status?.tenant === 'globex' && cond(name, 'Ready')?.status === 'True');
    await settled();
    // The object the relabel put in globex is the one there (not deleted and made again), and none in default.
    expect((await hubGet(`/api/connectors/${name}`, otherTenant)).body).toEqual(moved);
    expect((await hubGet(`/api/connectors/${name}`)).status).toBe(404);
    api.remove(API_VERSION, 'connectors', NS, name);
    await until('the resource gone', () => !get(name));
    expect(await owned(uid)).toEqual([]);
  });

  it('writes nothing in the hub from a Namespace read before a relabel of the Namespace another replica applied (fenced); the object stays where the newer label put it', async () => {
    const namespace = 'fenced-ns';
    const name = 'follows-fenced-ns';
    api.apply('namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: namespace, labels: { 'svc.io/tenant': 'default' } } });
    const at = () => api.get(API_VERSION, 'connectors', namespace, name) as Resource | undefined;
    const real = hub.services.manifests;
    let race: (() => Promise<void>) | undefined;
    let raced: unknown;
    // The race: after this operator read the Namespace (tenant default), it is relabelled to globex and
    // another replica, leading meanwhile, moves the object there; then this operator goes on.
    const racing: ManifestServices = {
      ...real,
      owned: async (kind, by) => {
        const now = race;
        if (now && 'uid' in by && by.uid === at()?.metadata.uid) {
          race = undefined;
          await now().catch((err) => {
            raced = err;
          });
        }
        return real.owned(kind, by);
      },
    };
    await restart(() => undefined, racing);
    api.apply('connectors', { ...open, metadata: { name, namespace } });
    await until('Ready in default', () => at()?.status?.tenant === 'default' && at()?.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True');
    await settled();
    let moved: Record<string, unknown> | undefined;
    race = async () => {
      const relabelled = api.apply('namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: namespace, labels: { 'svc.io/tenant': 'globex' } } });
      expect(relabelled.metadata.labels?.['svc.io/tenant']).toBe('globex');
      const resource = at()!;
      const owner = { namespace, name, uid: resource.metadata.uid!, generation: resource.metadata.generation };
      expect(await real.removeOwned(CONNECTOR, 1, name, { uid: owner.uid })).toBe(true);
      expect(await real.applyIfChanged(CONNECTOR, otherTenant, name, manifestOf(resource), 'operator', owner)).toMatchObject({ changed: true, created: true });
      moved = (await hubGet(`/api/connectors/${name}`, otherTenant)).body!;
    };
    operator.resyncAll();
    await until('moved to globex', () => raced ?? (at()?.status?.tenant === 'globex' && at()?.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True'), 10_000);
    expect(raced).toBeUndefined();
    await settled();
    expect(moved).toBeDefined();
    // The object the other replica put in globex is the one there (not deleted and made again), and none in default.
    expect((await hubGet(`/api/connectors/${name}`, otherTenant)).body).toEqual(moved);
    expect((await hubGet(`/api/connectors/${name}`)).status).toBe(404);
    api.remove(API_VERSION, 'connectors', namespace, name);
    await until('the resource gone', () => !at());
    await restart(() => undefined);
  });

  it('refuses a resource holding more objects and arrays than an HTTP body may (Invalid), as the apply route does', async () => {
    const name = 'crowded';
    api.apply('connectors', { ...open, metadata: { name, namespace: NS, labels: { 'svc.io/tenant': 'default' } }, spec: { ...(open.spec as object), extra: Array.from({ length: 60_000 }, () => ({})) } });
    const invalid = await until('Invalid', () => cond(name, 'Ready')?.reason === 'Invalid' && cond(name, 'Ready'), 30_000);
    expect(invalid.message).toBe('a manifest holds more than 50,000 objects and arrays');
    expect((await hubGet(`/api/connectors/${name}`)).status).toBe(404);
    api.remove(API_VERSION, 'connectors', NS, name);
    await until('the resource gone', () => !get(name));
  });

  it('gives the fence of a hub write up when the API server does not answer it in time: the write is rolled back, KubernetesApiError on the status, retried', async () => {
    const name = 'fence-stalled';
    put(name);
    await readyTrue(name);
    await settled();
    await operator.stop();
    operator = new Operator({ ...operatorOptions(), fenceTimeout: 300 });
    await operator.start();
    // The fence's read of the resource hangs (the informer's watch and the status writes are answered).
    const release = api.stallNext('GET', new RegExp(`/namespaces/${NS}/connectors/${name}$`));
    try {
      put(name, NS, { baseUrl: 'http://stalled.example' });
      const failed = await until('KubernetesApiError', () => cond(name, 'Ready')?.reason === 'KubernetesApiError' && cond(name, 'Ready'), 5_000);
      expect(failed).toMatchObject({ status: 'Unknown' });
      expect(failed.message).toContain('did not answer the reads of Connector team-a/fence-stalled and its Namespace within 0.3 s: nothing is written in the hub');
      expect(((await hubGet(`/api/connectors/${name}`)).body!.manifest as { spec: { base_url: string } }).spec.base_url).not.toBe('http://stalled.example');
    } finally {
      release();
    }
    await until('applied once the API server answers', () => cond(name, 'Ready')?.status === 'True' && cond(name, 'Ready')?.observedGeneration === 2);
    expect(((await hubGet(`/api/connectors/${name}`)).body!.manifest as { spec: { base_url: string } }).spec.base_url).toBe('http://stalled.example');
    api.remove(API_VERSION, 'connectors', NS, name);
    await until('the resource gone', () => !get(name));
    await restart(() => undefined);
  });

  it('adopts an object the operator applied before ownership was recorded; an HTTP delete drops the record and the operator puts the object back', async () => {
    // As an older operator left it: applied by the operator's actor, no owner record.
    await hub.services.db.withTenant(1, (tx) => CONNECTOR.handler.apply(tx, { ...open, metadata: { name: 'legacy', labels: { 'svc.io/tenant': 'default' } } }, 'operator'));
    put('legacy');
    const resource = await readyTrue('legacy');
    expect((await owned(resource.metadata.uid!)).map((o) => o.name)).toEqual(['legacy']);
    // Nothing of the resource's left to reconcile (its own status writes come back through the watch
    // and would apply the object again right after the delete below).
    await settled();

    const deleted = await fetch(`${hub.url}/api/connectors/legacy`, { method: 'DELETE', headers: { 'X-Tenant-ID': '1' } });
    expect(deleted.status).toBe(204);
    expect(await owned(resource.metadata.uid!)).toEqual([]);
    operator.resyncAll();
    await until('the object back', async () => (await hubGet('/api/connectors/legacy')).status === 200);
    await until('the record back', async () => (await owned(resource.metadata.uid!)).length === 1);
  });

  it('collects the hub objects of resources deleted without their finalizer while no operator ran', async () => {
    put('orphan');
    const resource = await readyTrue('orphan');
    await restart(async () => {
      // kubectl patch … finalizers=null, then delete: the resource goes at once.
      const res = await fetch(`${api.url}/apis/connectors.svc.io/v1/namespaces/${NS}/connectors/orphan`, {
        method: 'PATCH',
        headers: { 'Content-Type': 'application/merge-patch+json', Authorization: 'Bearer stand-in' },
        body: JSON.stringify({ metadata: { finalizers: null } }),
      });
      expect(res.status).toBe(200);
      api.remove(API_VERSION, 'connectors', NS, 'orphan');
      expect(get('orphan')).toBeUndefined();
    });
    expect((await hubGet('/api/connectors/orphan')).status).toBe(200);
    expect(await operator.collectOrphans()).toBe(1);
    expect((await hubGet('/api/connectors/orphan')).status).toBe(404);
    expect(await owned(resource.metadata.uid!)).toEqual([]);
    // Live resources keep theirs.
    expect((await hubGet('/api/connectors/shared')).status).toBe(200);
  });

  it('reports Stalled with the reason for an invalid or tenantless resource, Reconciling=False', async () => {
    const endpoints = (open.spec as { endpoints: Array<Record<string, unknown>> }).endpoints;
    api.apply('connectors', { ...open, metadata: { name: 'stalled-invalid', namespace: NS, labels: { 'svc.io/tenant': 'default' } }, spec: { ...(open.spec as object), endpoints: [{ ...endpoints[0], pagination: { kind: 'soap' } }] } });
    await until('Stalled Invalid', () => cond('stalled-invalid', 'Stalled')?.status === 'True');
    expect(cond('stalled-invalid', 'Stalled')).toMatchObject({ reason: 'Invalid', observedGeneration: 1 });
    expect(cond('stalled-invalid', 'Ready')).toMatchObject({ status: 'False', reason: 'Invalid' });
    expect(cond('stalled-invalid', 'Reconciling')).toMatchObject({ status: 'False', reason: 'Stalled' });

    api.apply('connectors', { ...open, metadata: { name: 'stalled-tenantless', namespace: NS_B } });
    await until('Stalled TenantUnresolved', () => cond('stalled-tenantless', 'Stalled', NS_B)?.status === 'True');
    expect(cond('stalled-tenantless', 'Stalled', NS_B)).toMatchObject({ reason: 'TenantUnresolved' });
    expect(cond('stalled-tenantless', 'Ready', NS_B)).toMatchObject({ status: 'False', reason: 'TenantUnresolved' });
    expect(cond('stalled-tenantless', 'Reconciling', NS_B)).toMatchObject({ status: 'False' });
  });

  it('writes a hub database failure on the status (Ready=Unknown HubUnavailable, Reconciling=True) while retrying, then recovers', async () => {
    let down = true;
    let tries = 0;
    const real = hub.services.manifests;
    const flaky: ManifestServices = {
      ...real,
      applyIfChanged: async (...args) => {
        tries++;
        if (down) throw new Error('connect ECONNREFUSED 127.0.0.1:5432\n    at TCPConnectWrap.afterConnect');
        return real.applyIfChanged(...args);
      },
    };
    await restart(() => undefined, flaky);
    put('flaky');
    const ready = await until('Ready=Unknown', () => cond('flaky', 'Ready')?.reason === 'HubUnavailable' && cond('flaky', 'Ready'));
    expect(ready).toMatchObject({ status: 'Unknown', message: 'the hub is unavailable: connect ECONNREFUSED 127.0.0.1:5432', observedGeneration: 1 });
    expect(cond('flaky', 'Reconciling')).toMatchObject({ status: 'True', reason: 'HubUnavailable' });
    expect(cond('flaky', 'Stalled')).toMatchObject({ status: 'False' });
    // Retried (backoff), not stalled: the attempts go on.
    const attempts = tries;
    await until('another attempt', () => tries > attempts);
    down = false;
    await readyTrue('flaky');
    expect(cond('flaky', 'Reconciling')).toMatchObject({ status: 'False', reason: 'Reconciled' });
    expect(cond('flaky', 'Stalled')).toMatchObject({ status: 'False' });
    await restart(() => undefined);
  });

  it('retries a failed reconcile after its backoff, not at once: the watch event of its own status write is no change', async () => {
    const base = 1_000;
    let down = false;
    const tries: number[] = [];
    const real = hub.services.manifests;
    const flaky: ManifestServices = {
      ...real,
      applyIfChanged: async (...args) => {
        if (args[2] === 'backoff') tries.push(Date.now());
        if (down) throw new Error('connect ECONNREFUSED 127.0.0.1:5432');
        return real.applyIfChanged(...args);
      },
    };
    await operator.stop();
    operator = new Operator({ ...operatorOptions(flaky), backoffBase: base, backoffMax: 4 * base });
    await operator.start();
    put('backoff');
    await readyTrue('backoff');
    await settled();
    // A new generation while the hub is down: the reconcile writes Reconciling=True, fails, writes
    // HubUnavailable (a status change), and waits for its backoff before it tries again.
    down = true;
    tries.length = 0;
    put('backoff', NS, { baseUrl: 'http://backoff.example' });
    await until('HubUnavailable', () => cond('backoff', 'Ready')?.reason === 'HubUnavailable');
    await until('a second attempt', () => tries.length >= 2, 10_000);
    expect(tries[1]! - tries[0]!).toBeGreaterThanOrEqual(base - 20);
    down = false;
    await until('Ready for generation 2', () => cond('backoff', 'Ready')?.status === 'True' && cond('backoff', 'Ready')!.observedGeneration === 2, 15_000);
    await settled();
    // A status written by someone else is a change: reconciled at once (the resync is an hour away), its tenant written back.
    await dropStatusTenant('backoff');
    await until('status.tenant written back', () => get('backoff')?.status?.tenant === 'default', 5_000);
    await restart(() => undefined);
  });

  it('masks the credentials an error carries before it writes them on the status', async () => {
    const real = hub.services.manifests;
    const leaky: ManifestServices = {
      ...real,
      applyIfChanged: async () => {
        throw new Error('could not reach postgres://svc_app:hunter2-in-the-url@db.internal:5432/hub with Authorization: Bearer abcdefgh12345678');
      },
    };
    await restart(() => undefined, leaky);
    put('leaky');
    const ready = await until('Ready=Unknown', () => cond('leaky', 'Ready')?.reason === 'HubUnavailable' && cond('leaky', 'Ready'));
    expect(ready.message).toMatch(/^the hub is unavailable: could not reach postgres:\/\/.*db\.internal:5432\/hub with Authorization: Bearer \[REDACTED\]$/);
    expect(JSON.stringify(get('leaky'))).not.toMatch(/hunter2|abcdefgh12345678/);
    await restart(() => undefined);
  });

  it('keeps the names the tenant chose in what the Kubernetes API and the hub answered, also one that equals a secret of the hub; masks that secret in the hub\'s own failures', async () => {
    // A tenant that names a resource after a guess at the hub's database password must not learn
    // from the status whether it guessed right (`[REDACTED]` where the name was).
    const guess = 'guessed-hub-password';
    registerSecret(guess);
    const grants = CHART_GRANTS;
    // The chart without its CronJob rule: the API server refuses the CronJob's read, naming it (after the resource).
    api.enforceRbac(grants().map((g) => ({ ...g, rules: g.rules.filter((r) => !r.resources?.includes('cronjobs')) })), ['stand-in']);
    const from = api.requests.length;
    try {
      put(guess);
      const ready = await until('CronJobFailed', () => cond(guess, 'Ready')?.reason === 'CronJobFailed' && cond(guess, 'Ready'));
      const refusal = `cannot write the CronJob: HTTP 403: cronjobs.batch "connector-${NS}-${guess}" is forbidden: User "operator" cannot get resource "cronjobs" in API group "batch" in the namespace "${RELEASE_NS}"`;
      expect(ready.message).toBe(`applied to tenant default; ${refusal}`);
      expect(cond(guess, 'Scheduled')!.message).toBe(refusal);
    } finally {
      api.enforceRbac(grants(), ['stand-in']);
      for (const r of api.requests.slice(from)) refusedOnPurpose.add(r);
    }
    await readyTrue(guess);

    // The hub's refusal quoting a name the tenant chose keeps it; the hub's own failure masks its secret.
    const real = hub.services.manifests;
    let answer: Error = new ConflictError(`export ${guess} is running run 7; wait for it to end`);
    const failing: ManifestServices = {
      ...real,
      applyIfChanged: async () => {
        throw answer;
      },
    };
    await restart(() => undefined, failing);
    put('refused');
    const refused = await until('ReconcileFailed', () => cond('refused', 'Ready')?.reason === 'ReconcileFailed' && cond('refused', 'Ready'));
    expect(refused.message).toBe(`export ${guess} is running run 7; wait for it to end`);
    answer = new Error(`password authentication failed for user "svc_app" (password ${guess})`);
    const own = await until('HubUnavailable', () => cond('refused', 'Ready')?.reason === 'HubUnavailable' && cond('refused', 'Ready'));
    expect(own.message).toBe('the hub is unavailable: password authentication failed for user "svc_app" (password [REDACTED])');
    await restart(() => undefined);
  });

  it('is Ready with the warning for a base_url the outbound address policy refuses (as the prod profile applies it)', async () => {
    // The hub's manifest services as a prod hub composes them (cmd/compose.ts): its policy lent to each kind's apply.
    const denying = createManifestServices({ db: hub.services.db, admin: hub.services.admin, egress: new EgressPolicy({ denyPrivate: true }) });
    await restart(() => undefined, denying);
    put('warned', NS, { baseUrl: 'http://127.0.0.1:8080' });
    const ready = await readyTrue('warned');
    expect(ready.status!.conditions!.find((c) => c.type === 'Ready')).toMatchObject({
      reason: 'Applied',
      message:
        'applied to tenant default; warnings: spec.base_url: 127.0.0.1 is a loopback address: refused by the outbound address policy (svc.egress.deny-private); runs will fail until svc.egress.allow admits it',
    });
    await restart(() => undefined);
  });

  it('shows the outbound address policy in force on Ready: restarted with svc.egress.allow admitting the host, the warning goes (and comes back when it no longer does) without a change or a second apply', async () => {
    const applies: string[] = [];
    const policy = (allow: string[]) => countingApplies(applies, allow);
    const name = 'egress-refresh';
    const window = 'spec.window: the window fences scheduled runs only, and this connector has no schedule';
    const refused =
      'spec.base_url: 10.0.0.5 is a private address: refused by the outbound address policy (svc.egress.deny-private); runs will fail until svc.egress.allow admits it';
    const message = () => cond(name, 'Ready')?.message;
    const statusWrites = () => api.requests.filter((r) => r.method === 'PATCH' && r.path.endsWith(`/connectors/${name}/status`)).length;

    await restart(() => undefined, policy([]));
    api.apply('connectors', { ...open, metadata: { name, namespace: NS, labels: { 'svc.io/tenant': 'default' } }, spec: { ...(open.spec as object), base_url: 'http://10.0.0.5:8080', window: '01:00-05:00' } });
    await until('Ready with both warnings', () => message() === `applied to tenant default; warnings: ${window}; ${refused}`);
    await settled();
    expect(applies).toEqual([name]);
    const applied = cond(name, 'Ready')!;
    const { generation } = get(name)!.metadata;
    const updatedAt = (await hubGet(`/api/connectors/${name}`)).body!.updatedAt;

    // Restarted with an allow-list that admits the host: its start's reconcile drops the policy's
    // warning (the apply's own stays), with one status write, no change and no apply.
    let writesBefore = statusWrites();
    await restart(() => undefined, policy(['10.0.0.0/24']));
    await until('the policy warning gone', () => message() === `applied to tenant default; warnings: ${window}`);
    await settled();
    expect(cond(name, 'Ready')).toMatchObject({ status: 'True', reason: 'Applied', observedGeneration: generation, lastTransitionTime: applied.lastTransitionTime });
    expect(get(name)!.metadata.generation).toBe(generation);
    expect(statusWrites()).toBe(writesBefore + 1);
    expect(applies).toEqual([name]);
    expect((await hubGet(`/api/connectors/${name}`)).body!.updatedAt).toBe(updatedAt);

    // A resync with the message as it is writes nothing.
    const before = writes();
    await resynced();
    expect(writes()).toBe(before);

    // Restarted with the host no longer admitted: the warning is back, still without an apply.
    writesBefore = statusWrites();
    await restart(() => undefined, policy(['10.0.1.0/24']));
    await until('the policy warning back', () => message() === `applied to tenant default; warnings: ${window}; ${refused}`);
    await settled();
    expect(statusWrites()).toBe(writesBefore + 1);
    expect(applies).toEqual([name]);
    expect((await hubGet(`/api/connectors/${name}`)).body!.updatedAt).toBe(updatedAt);
    await restart(() => undefined);
  });

  it('shows the warnings of the manifest as it is now when a change the hub refused (Invalid) is reverted to the manifest it holds: nothing applied, the warnings back', async () => {
    const applies: string[] = [];
    const counting = countingApplies(applies, []);
    const name = 'reverted-warnings';
    const window = 'spec.window: the window fences scheduled runs only, and this connector has no schedule';
    const refused =
      'spec.base_url: 10.0.0.5 is a private address: refused by the outbound address policy (svc.egress.deny-private); runs will fail until svc.egress.allow admits it';
    const spec = { ...(open.spec as object), base_url: 'http://10.0.0.5:8080', window: '01:00-05:00' } as Record<string, unknown>;
    const endpoints = spec.endpoints as Array<Record<string, unknown>>;
    const at = (s: Record<string, unknown>) => api.apply('connectors', { ...open, metadata: { name, namespace: NS, labels: { 'svc.io/tenant': 'default' } }, spec: s });
    const message = () => cond(name, 'Ready')?.message;
    await restart(() => undefined, counting);
    at(spec);
    await until('Ready with both warnings', () => message() === `applied to tenant default; warnings: ${window}; ${refused}`);
    // A change the hub refuses: Invalid, the hub keeps the manifest it holds.
    at({ ...spec, endpoints: [{ ...endpoints[0], pagination: { kind: 'soap' } }] });
    await until('Invalid', () => cond(name, 'Ready')?.reason === 'Invalid');
    // Reverted to that manifest: the apply changes nothing, and the Ready message has every warning again.
    at(spec);
    await until('Ready again', () => cond(name, 'Ready')?.status === 'True' && cond(name, 'Ready')!.observedGeneration === get(name)!.metadata.generation);
    await settled();
    expect(cond(name, 'Ready')).toMatchObject({ reason: 'Applied', message: `applied to tenant default; warnings: ${window}; ${refused}` });
    expect(applies).toEqual([name]);
    await restart(() => undefined);
  });
});

describe("the chart's RBAC (charts/svc-hub as helm renders it, enforced by the stand-in in this whole file)", () => {
  it('allowed every call the operators of this file made (run last): no 403 but the documented one, the old layout\'s CronJob looked for in a resource\'s namespace', () => {
    const ours = api.requests.filter((r) => r.token === 'operator' || r.token === 'scoped');
    // A call the chart does not allow is a 403 here, as on a cluster; an Event refused so is swallowed (best effort): only this check sees it.
    const legacyRead = new RegExp(`^/apis/batch/v1/namespaces/(?!${RELEASE_NS}/)[^/]+/cronjobs/[^/]+$`);
    const refused = ours.filter((r) => r.status === 403 && !refusedOnPurpose.has(r) && !(r.method === 'GET' && legacyRead.test(r.path)));
    expect(refused.map((r) => `${r.token} ${r.method} ${r.path}`)).toEqual([]);
    // Not a vacuous check: the calls made (verb and resource, with its subresource) cover what the operator does.
    const made = new Set(
      ours
        .filter((r) => r.status < 400)
        .map((r) => {
          const parts = r.path.split('/').filter(Boolean);
          const rest = parts[0] === 'api' ? parts.slice(2) : parts.slice(3);
          const tail = rest[0] === 'namespaces' && rest.length >= 3 ? rest.slice(2) : rest;
          const [resource, name, sub] = tail;
          const verb = r.method === 'GET' ? (name ? 'get' : r.query.watch ? 'watch' : 'list') : ({ POST: 'create', PUT: 'update', PATCH: 'patch', DELETE: 'delete' } as Record<string, string>)[r.method];
          return `${verb} ${resource}${sub ? `/${sub}` : ''}`;
        }),
    );
    for (const call of ['create events', 'get namespaces', 'list namespaces', 'watch namespaces', 'list connectors', 'watch connectors', 'get connectors', 'update connectors', 'patch connectors/status', 'patch exports/status', 'list cronjobs', 'watch cronjobs', 'get cronjobs', 'create cronjobs', 'update cronjobs', 'delete cronjobs']) {
      expect([...made]).toContain(call);
    }
  });
});
