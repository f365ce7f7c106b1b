import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { stringify } from 'yaml';
import { Config } from '../src/config/config.js';
import { MANIFEST_KINDS } from '../src/manifests/kinds.js';
import { chartGrants } from '../test/harness/chart-rbac.js';
import { createTestDatabase } from '../test/harness/database.js';
import { KubeApiStandIn } from '../test/harness/kube-api.js';
import { loadRunJobTemplate, OPERATOR_ELECTION_START, type OperatorProcess, operatorInstance, operatorLeaseName, startOperator, watchedNamespaces } from './operator.js';
import { PendingSteps } from './stop.js';
import { until } from '../test/harness/until.js';

/**
 * `svc-hub operator` as a process would run it (startOperator), against a SCRIPTED KUBERNETES API
 * STAND-IN (test/harness/kube-api.ts): two replicas on one database, one reconciles at a time
 * (on the PostgreSQL backend of the leader port), the other takes over when it stops; one replica on
 * the stand-in's Lease loses it in an API outage and reconciles again once it leads again (a fresh
 * term: operator/reconciler.ts), which its readiness reports.
 */

const RELEASE_NS = 'svc-system';
let api: KubeApiStandIn;
let dir: string;
let ownerUrl: string;
const operators: OperatorProcess[] = [];

const config = (overrides: Record<string, string | number | boolean> = {}) =>
  Config.load({
    env: {},
    overrides: {
      'svc.datasource.url': ownerUrl,
      'svc.http.port': 0,
      'svc.log.level': 'silent',
      'svc.leader.backend': 'postgres',
      'svc.leader.check-every': '200ms',
      'svc.operator.backoff-base': '50ms',
      'svc.operator.run-job-template': join(dir, 'pod-template.yaml'),
      'svc.operator.cronjob-namespace': RELEASE_NS,
      ...overrides,
    },
  });

const connector = (name: string, schedule?: string, namespace = 'ns') => ({
  apiVersion: 'connectors.svc.io/v1',
  kind: 'Connector',
  metadata: { name, namespace, labels: { 'svc.io/tenant': 'default' } },
  connector_type: 'rest-generic',
  spec: {
    base_url: 'http://demo-source:8099',
    ...(schedule ? { schedule } : {}),
    endpoints: [{ id: 'e', path: '/open/partners', target: { table: `ext.${name.replace(/-/g, '_')}`, unique_key: '$.id' } }],
  },
});
type Conditions = Array<{ type: string; status: string }>;
const ready = (name: string, namespace = 'ns') => (api.get('connectors.svc.io/v1', 'connectors', namespace, name)?.status?.conditions as Conditions | undefined)?.find((c) => c.type === 'Ready');

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'svc-operator-'));
  writeFileSync(join(dir, 'pod-template.yaml'), stringify({ spec: { restartPolicy: 'Never', containers: [{ name: 'run', image: 'svc-hub:test' }] } }));
  ownerUrl = await createTestDatabase();
  // Every kind's CRD: an operator whose informers cannot list is not ready.
  api = await new KubeApiStandIn(MANIFEST_KINDS.map((k) => ({ group: k.group, version: k.version, plural: k.plural, kind: k.kind, namespaced: true, statusSubresource: true }))).start();
  // Where the Lease and the CronJobs go (a create in a namespace that does not exist is a 404).
  api.createNamespace(RELEASE_NS);
  // The replicas may call only what the chart grants the operator, as helm renders it for a release
  // `svc-hub` (its dispatchers' Lease svc-hub-dispatch, so the operator's svc-hub-operator), its Lease by name included.
  api.enforceRbac(chartGrants({ release: 'svc-hub', namespace: RELEASE_NS, component: 'operator' }));
});

afterAll(async () => {
  for (const o of operators) await o.stop();
  await api?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('svc-hub operator', () => {
  it('names its Lease after the dispatchers’ one', () => {
    expect(operatorLeaseName('svc-hub-dispatch')).toBe('svc-hub-operator');
    expect(operatorLeaseName('prod-svc-hub-dispatch')).toBe('prod-svc-hub-operator');
    expect(operatorLeaseName('custom')).toBe('custom-operator');
  });

  it('reads svc.operator.namespace as a comma-separated list and refuses an instance that is no label value', async () => {
    expect(watchedNamespaces(undefined)).toEqual([]);
    expect(watchedNamespaces(' team-a, team-b,,team-a ')).toEqual(['team-a', 'team-b']);
    const env = { SVC_OPERATOR_INSTANCE: 'blue', SVC_OPERATOR_NAMESPACE: 'team-a,team-b' };
    const fromEnv = Config.load({ env: { ...env, SVC_DATASOURCE_URL: ownerUrl }, overrides: { 'svc.log.level': 'silent' } });
    expect(operatorInstance(fromEnv)).toBe('blue');
    expect(watchedNamespaces(fromEnv.optional('svc.operator.namespace'))).toEqual(['team-a', 'team-b']);
    expect(Config.load({ env: { POD_NAMESPACE: 'svc-system' }, overrides: {} }).optional('svc.operator.cronjob-namespace')).toBe('svc-system');
    expect(operatorInstance(await config())).toBeUndefined();
    expect(() => operatorInstance(Config.load({ env: {}, overrides: { 'svc.operator.instance': 'not/a-label' } }))).toThrow(/svc\.operator\.instance/);
    expect(() => operatorInstance(Config.load({ env: {}, overrides: { 'svc.operator.instance': 'x'.repeat(64) } }))).toThrow(/label value/);
  });

  it('refuses a run pod template without a container image, and reads a missing one as none', () => {
    writeFileSync(join(dir, 'bad.yaml'), 'spec: {containers: [{name: run}]}\n');
    expect(() => loadRunJobTemplate(join(dir, 'bad.yaml'))).toThrow(/spec\.containers\[0\]\.image/);
    expect(loadRunJobTemplate(join(dir, 'absent.yaml'))).toBeUndefined();
  });

  it('two replicas: one reconciles, the other takes over when it stops', async () => {
    const first = await startOperator(await config(), { kube: { server: api.url, token: 'replica-1' }, env: {} });
    operators.push(first);
    const second = await startOperator(await config(), { kube: { server: api.url, token: 'replica-2' }, env: {} });
    operators.push(second);
    expect(first.leadership.isLeader()).toBe(true);
    expect(second.leadership.isLeader()).toBe(false);
    // Health and metrics only.
    expect((await fetch(`${first.hub.url}/q/health/live`)).status).toBe(200);
    expect((await fetch(`${first.hub.url}/api/connectors`)).status).toBe(404);

    api.apply('connectors', connector('first', '0 * * * *'));
    await until('first Ready', () => ready('first')?.status === 'True');
    await until('its CronJob', () => api.get('batch/v1', 'cronjobs', RELEASE_NS, 'connector-ns-first'));
    expect(api.requests.filter((r) => r.token === 'replica-2')).toEqual([]);

    await first.stop();
    await until('the second to lead', () => second.leadership.isLeader());
    api.apply('connectors', connector('second'));
    await until('second Ready', () => ready('second')?.status === 'True');
    const writers = new Set(api.requests.filter((r) => r.method !== 'GET' && r.path.includes('/connectors/second')).map((r) => r.token));
    expect([...writers]).toEqual(['replica-2']);
    const job = api.get('batch/v1', 'cronjobs', RELEASE_NS, 'connector-ns-first') as unknown as { spec: { jobTemplate: { spec: { template: { spec: { containers: Array<{ image: string; args: string[] }> } } } } } };
    expect(job.spec.jobTemplate.spec.template.spec.containers[0]).toMatchObject({ image: 'svc-hub:test', args: ['run', 'connector', 'first', '--tenant', 'default', '--scheduled'] });
  });

  it('loses its Lease in an API outage longer than the renew deadline, and reconciles again once it leads again', async () => {
    // The replicas above elect through PostgreSQL: stop them, this one elects through the stand-in's Lease.
    for (const o of operators.splice(0)) await o.stop();
    const lease = 'svc-hub-operator';
    const op = await startOperator(await config({ 'svc.leader.backend': 'kubernetes', 'svc.leader.lease-duration': '3s', 'svc.operator.namespace': 'lease-ns' }), {
      kube: { server: api.url, token: 'lease-holder' },
      env: { POD_NAMESPACE: RELEASE_NS, POD_NAME: 'operator-0' },
    });
    operators.push(op);
    expect(op.leadership.isLeader()).toBe(true);
    await op.transition();
    const readiness = async () => (await (await fetch(`${op.hub.url}/q/health/ready`)).json()) as { status: string; checks: Array<{ name: string; status: string; data?: Record<string, unknown> }> };
    expect((await readiness()).checks.find((c) => c.name === 'operator')).toMatchObject({ status: 'UP', data: { role: 'leader', workers: 2 } });
    api.apply('connectors', connector('before-outage', undefined, 'lease-ns'));
    await until('before-outage Ready', () => ready('before-outage', 'lease-ns')?.status === 'True');

    // The API server stops answering the Lease: past the renew deadline (3 s - 200 ms) the leadership
    // is given up. (A lease of 1 s was lost on a loaded machine before the test had begun.)
    api.failNext('GET', new RegExp(`/namespaces/${RELEASE_NS}/leases/${lease}$`), 503, 40);
    await until('the leadership lost', () => !op.leadership.isLeader());
    await until('it leads again', () => op.leadership.isLeader(), 20_000);
    await op.transition();
    expect(op.operator.health().reconciling).toBe(true);
    expect((await readiness()).checks.find((c) => c.name === 'operator')).toMatchObject({ status: 'UP', data: { role: 'leader' } });
    api.apply('connectors', connector('after-outage', '0 5 * * *', 'lease-ns'));
    await until('after-outage Ready', () => ready('after-outage', 'lease-ns')?.status === 'True');
    await until('its CronJob in the release namespace', () => api.get('batch/v1', 'cronjobs', RELEASE_NS, 'connector-lease-ns-after-outage'));
  });

  it('resumed after a pause past its lease duration while another replica took its Lease, writes nothing before it has renewed: not even the CronJob the new leader wrote, which no resourceVersion fences', async () => {
    // Its hub writes (the apply) and status writes are fenced by resourceVersions as well: a copy
    // behind the API server is refused whoever leads (operator/reconciler.test.ts, "writes nothing
    // (hub, status) from a cache behind the generation another replica applied" and the two after
    // it). A CronJob is not: syncCronJob reads it and replaces it at once, so only the leadership
    // (LeaseElector.isLeader's time check, asked by Operator.mustLead) keeps a replica that was
    // paused from putting its own pod template back.
    for (const o of operators.splice(0)) await o.stop();
    const namespace = 'pause-ns';
    const lease = 'svc-hub-operator';
    // The Lease's clock, moved by hand: the pause is a jump of it, so that nothing but the time check
    // can stop the work that goes on after it (a real pause also holds the renewal's timer, whose
    // answer, the loss, then comes within a millisecond, racing the reconcile).
    let clock = performance.now();
    const op = await startOperator(
      await config({ 'svc.leader.backend': 'kubernetes', 'svc.leader.lease-duration': '3s', 'svc.leader.check-every': '1s', 'svc.operator.namespace': namespace }),
      { kube: { server: api.url, token: 'paused-holder' }, env: { POD_NAMESPACE: RELEASE_NS, POD_NAME: 'operator-paused' }, leaseClock: () => clock },
    );
    operators.push(op);
    await op.transition();
    api.apply('connectors', connector('paused', '0 3 * * *', namespace));
    await until('paused Ready', () => ready('paused', namespace)?.status === 'True');
    type Job = { metadata: { annotations?: Record<string, string> }; spec: { jobTemplate: { spec: { template: { spec: { containers: Array<{ image: string }> } } } } } };
    const jobName = `connector-${namespace}-paused`;
    const imageOf = () => (api.get('batch/v1', 'cronjobs', RELEASE_NS, jobName) as unknown as Job | undefined)?.spec.jobTemplate.spec.template.spec.containers[0]?.image;
    await until('its CronJob', () => imageOf() === 'svc-hub:test');

    // Reconciles counted as they run: one under way when the pause begins may finish after it (no
    // check can stop a write already decided), which is not what is asked here.
    let underWay = 0;
    const reconcile = op.operator.reconcileKey.bind(op.operator);
    op.operator.reconcileKey = async (key) => {
      underWay++;
      try {
        await reconcile(key);
      } finally {
        underWay--;
      }
    };
    // Just after a renewal (the next check is a second away) and with no reconcile under way, this
    // replica is paused past its lease duration (3 s); meanwhile another replica, of the next release
    // (its own run pod template), took the Lease over and wrote the CronJob with its template. The
    // resource did not change. All of it at once (nothing else runs meanwhile), in the probe.
    const renewals = () => api.requests.filter((r) => r.token === 'paused-holder' && r.method === 'PUT' && r.path.endsWith(`/leases/${lease}`)).length;
    let seen = renewals();
    let mark = 0;
    await until(
      'just after a renewal, no reconcile under way',
      () => {
        const fresh = renewals() > seen;
        seen = renewals();
        if (!fresh || underWay > 0) return false;
        clock += 3_200;
        const held = api.get('coordination.k8s.io/v1', 'leases', RELEASE_NS, lease)!;
        api.apply('leases', { ...held, spec: { ...held.spec, holderIdentity: 'operator-other', leaseTransitions: 1 } });
        const job = structuredClone(api.get('batch/v1', 'cronjobs', RELEASE_NS, jobName)!) as unknown as Job;
        job.spec.jobTemplate.spec.template.spec.containers[0]!.image = 'svc-hub:next';
        job.metadata.annotations = { ...job.metadata.annotations, 'svc.io/spec-hash': 'of-the-next-release' };
        api.apply('cronjobs', job as never);
        mark = api.requests.length;
        // A resync under way when it was paused.
        op.operator.resyncAll();
        return true;
      },
      { everyMs: 5 },
    );

    // Resumed: its workers take the resync's key at once; the next check (renewal) finds the Lease
    // gone and ends the term, after the reconciles under way.
    await until('the term ended', () => op.operator.health().data.reason === 'not started');
    // The stop waited for the reconciles under way; the requests they sent have landed, and a stopped
    // operator sends none: nothing more to wait for.
    await op.transition();
    const written = api.requests.slice(mark).filter((r) => r.token === 'paused-holder' && r.method !== 'GET');
    expect(written.map((r) => `${r.method} ${r.path} ${r.status}`)).toEqual([]);
    expect(imageOf()).toBe('svc-hub:next');

    // The other replica never renews: this one takes the Lease over once it expires (3 s of its
    // clock after it saw the takeover), and reconciles in a fresh term, as the leader: its template
    // is the one that goes on the CronJob.
    await until('it leads again', () => {
      clock += 100;
      return op.leadership.isLeader();
    }, 20_000);
    await op.transition();
    await until('its template back on the CronJob', () => imageOf() === 'svc-hub:test', 20_000);
  });

  it('refuses a schedule Kubernetes cannot express (L, #): Ready=False Invalid, no CronJob', async () => {
    for (const o of operators.splice(0)) await o.stop();
    const namespace = 'schedules';
    const op = await startOperator(await config({ 'svc.operator.namespace': namespace }), { kube: { server: api.url, token: 'schedules' }, env: {} });
    operators.push(op);
    await op.transition();
    for (const [name, schedule] of [['last-day', '0 0 L * *'], ['second-monday', '0 0 * * 1#2']] as const) {
      api.apply('connectors', connector(name, schedule, namespace));
      const condition = await until(`${name} refused`, () => {
        const c = ready(name, namespace);
        return c?.status === 'False' && c;
      });
      expect(condition).toMatchObject({ reason: 'Invalid' });
      expect(api.get('batch/v1', 'cronjobs', RELEASE_NS, `connector-${namespace}-${name}`)).toBeUndefined();
    }
  });
  it("a signal while its start waits on the leadership's connect (its login hangs) interrupts it at once; the step is named meanwhile", async () => {
    for (const o of operators.splice(0)) await o.stop();
    const url = await createTestDatabase();
    const owner = new pg.Client({ connectionString: url });
    await owner.connect();
    const leaderLogin = "application_name like 'svc-hub leader%'";
    try {
      // A login of the leadership's connection (its own application name) sleeps for an hour.
      await owner.query(`create function hang_login() returns event_trigger language plpgsql as $$ begin if current_setting('application_name') like 'svc-hub leader%' then perform pg_sleep(3600); end if; end $$`);
      await owner.query('create event trigger hang_login on login execute function hang_login()');
      const interrupt = new AbortController();
      const steps = new PendingSteps();
      const outcome = startOperator(await config({ 'svc.datasource.url': url }), { kube: { server: api.url, token: 'interrupted' }, env: {}, interrupt: interrupt.signal, startSteps: steps }).then(
        (op) => {
          operators.push(op);
          return 'started';
        },
        (err: Error) => `failed: ${err.message}`,
      );
      await until('the leadership\'s login to hang', async () => (await owner.query(`select 1 from pg_stat_activity where datname = current_database() and wait_event = 'PgSleep' and ${leaderLogin}`)).rowCount! > 0, 60_000);
      // Was: no step named (a stop given up at its limit said "none of its own steps").
      expect(steps.list()).toEqual([OPERATOR_ELECTION_START]);
      const signalled = performance.now();
      interrupt.abort();
      let timer: NodeJS.Timeout | undefined;
      const result = await Promise.race([outcome, new Promise<string>((resolve) => (timer = setTimeout(() => resolve('still starting after 15 s'), 15_000)))]);
      clearTimeout(timer);
      // Was: still starting, for the login's hour (the connect had no bound then; now the elector's
      // 5 s, which the signal does not wait for).
      expect(result).toMatch(/^failed: /);
      expect(performance.now() - signalled).toBeLessThan(5_000);
      expect(steps.list()).toEqual([]);
    } finally {
      await owner.query('drop event trigger hang_login');
      // Only this file's database: the shared server also runs other files' leaders (dispatch-leader.test.ts's lost its lock to this).
      await owner.query(`select pg_terminate_backend(pid) from pg_stat_activity where datname = current_database() and ${leaderLogin}`);
      await owner.end();
    }
  });

  it("a signal while its start waits on the operator's Lease (the API server does not answer) interrupts it at once, the request aborted", async () => {
    for (const o of operators.splice(0)) await o.stop();
    const release = api.stallNext('GET', new RegExp(`/namespaces/${RELEASE_NS}/leases/svc-hub-operator$`));
    try {
      const interrupt = new AbortController();
      const steps = new PendingSteps();
      // The default lease of 15 s: each Lease request's own bound is 5 s.
      const outcome = startOperator(await config({ 'svc.leader.backend': 'kubernetes', 'svc.operator.namespace': 'lease-ns' }), {
        kube: { server: api.url, token: 'lease-interrupted' },
        env: { POD_NAMESPACE: RELEASE_NS, POD_NAME: 'operator-interrupted' },
        interrupt: interrupt.signal,
        startSteps: steps,
      }).then(
        (op) => {
          operators.push(op);
          return 'started';
        },
        (err: Error) => `failed: ${err.message}`,
      );
      await until('the election to wait on the Lease', () => release.held === 1, 60_000);
      expect(steps.list()).toEqual([OPERATOR_ELECTION_START]);
      const signalled = performance.now();
      interrupt.abort(new Error('SIGTERM'));
      // Was: the start waited for the request's bound (5 s), then went on to its stop.
      expect(await outcome).toBe('failed: SIGTERM');
      expect(performance.now() - signalled).toBeLessThan(2_000);
      expect(steps.list()).toEqual([]);
      // The request itself given up (its connection closed), not only no longer waited for.
      await until('the stand-in to see the request given up', () => release.abandoned === 1, 5_000);
    } finally {
      release();
    }
  });
});
