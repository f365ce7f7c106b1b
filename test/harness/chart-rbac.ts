import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseAllDocuments, stringify } from 'yaml';
import type { Grant, PolicyRule } from '../../kube/rbac.js';
import { KUBECTL_YAML } from '../../src/manifests/yaml.js';
import { helm } from './helm.js';

/**
 * The RBAC the Helm chart (charts/svc-hub) binds to one of its components' service account, as
 * `helm template` renders it (the real helm, test/harness/helm.ts): the grants the Kubernetes API
 * stand-in enforces (KubeApiStandIn.enforceRbac) in the suites that run the operator and the Lease
 * elector, so that a call the chart does not allow is a 403 there, as it would be on a cluster.
 * Read as the API server's authorizer reads them: a RoleBinding grants the rules of its Role (or
 * ClusterRole) in the binding's namespace; a ClusterRoleBinding those of its ClusterRole everywhere.
 */

type Rendered = { kind: string; metadata: { name: string; namespace?: string }; [key: string]: unknown };
interface Binding extends Rendered {
  roleRef: { kind: 'Role' | 'ClusterRole'; name: string };
  subjects?: Array<{ kind: string; name: string; namespace?: string }>;
}

/** `helm template <release> charts/svc-hub --namespace <namespace>` with `values` (an OIDC issuer set unless given), parsed as Kubernetes reads YAML. */
export function renderChart(release: string, namespace: string, values: Record<string, unknown> = {}): Rendered[] {
  const dir = mkdtempSync(join(tmpdir(), 'svc-chart-rbac-'));
  try {
    const file = join(dir, 'values.yaml');
    writeFileSync(file, stringify({ oidc: { issuer: 'https://login.example.com/realms/svc' }, ...values }, KUBECTL_YAML));
    const result = helm(['template', release, 'charts/svc-hub', '--namespace', namespace, '-f', file]);
    if (result.status !== 0) throw new Error(`helm template failed: ${result.stderr}`);
    return parseAllDocuments(result.stdout, KUBECTL_YAML)
      .map((d) => d.toJS() as Rendered | null)
      .filter((o): o is Rendered => o !== null);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * The grants of the service account of the chart's `component` Deployment (its
 * `serviceAccountName`) in the release rendered as `release` in `namespace` with `values`.
 */
export function chartGrants(options: { release: string; namespace: string; component: 'operator' | 'dispatcher' | 'apiserver'; values?: Record<string, unknown> }): Grant[] {
  const objects = renderChart(options.release, options.namespace, options.values);
  const deployment = objects.find((o) => o.kind === 'Deployment' && o.metadata.name.endsWith(`-${options.component}`)) as
    | (Rendered & { spec: { template: { spec: { serviceAccountName?: string } } } })
    | undefined;
  const account = deployment?.spec.template.spec.serviceAccountName;
  if (!account) throw new Error(`the chart renders no ${options.component} Deployment with a service account`);
  const rulesOf = (kind: string, name: string, namespace: string | undefined): PolicyRule[] => {
    const role = objects.find((o) => o.kind === kind && o.metadata.name === name && (kind === 'ClusterRole' || o.metadata.namespace === namespace));
    if (!role) throw new Error(`a binding names ${kind} ${name}, which the chart does not render`);
    return (role as Rendered & { rules?: PolicyRule[] }).rules ?? [];
  };
  const grants: Grant[] = [];
  for (const o of objects) {
    if (o.kind !== 'RoleBinding' && o.kind !== 'ClusterRoleBinding') continue;
    const binding = o as Binding;
    if (!binding.subjects?.some((s) => s.kind === 'ServiceAccount' && s.name === account && s.namespace === options.namespace)) continue;
    const namespace = binding.kind === 'RoleBinding' ? binding.metadata.namespace : undefined;
    grants.push({ ...(namespace ? { namespace } : {}), rules: rulesOf(binding.roleRef.kind, binding.roleRef.name, namespace) });
  }
  return grants;
}
