import type { ManifestKind } from '../src/manifests/kinds.js';

/**
 * What the hub's Kubernetes clients call, as RBAC rules: the one declaration the Helm chart's Roles
 * are held to (test/chart.test.ts) and the Kubernetes API stand-in enforces in the operator's and
 * the dispatcher's suites (a call outside them is a 403 there, as on a cluster). A verb the code
 * does not call is not granted.
 */

/** An RBAC PolicyRule (rbac.authorization.k8s.io/v1). */
export interface PolicyRule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
  resourceNames?: string[];
}

/** A Lease held by name (kube/lease.ts: created once, then read and replaced; `create` cannot name its object). */
export function leaseRules(name: string): PolicyRule[] {
  return [
    { apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: ['create'] },
    { apiGroups: ['coordination.k8s.io'], resources: ['leases'], resourceNames: [name], verbs: ['get', 'update'] },
  ];
}

/** The operator's CronJobs in the release namespace (operator/cronjob.ts: read, listed and watched, created, replaced, deleted). */
export const CRONJOB_RULE: PolicyRule = { apiGroups: ['batch'], resources: ['cronjobs'], verbs: ['get', 'list', 'watch', 'create', 'update', 'delete'] };

/** The run pod template's ConfigMap, read by name for its uid (operator/cronjob.ts: the CronJobs' owner). */
export function runJobConfigMapRule(name: string): PolicyRule {
  return { apiGroups: [''], resources: ['configmaps'], resourceNames: [name], verbs: ['get'] };
}

/**
 * The custom resources of `kinds`, a pair of rules per API group (groups in alphabetical order,
 * plurals as `kinds` lists them): read, list and watch them, replace them (the finalizer
 * `svc.io/cleanup` is written with an update), and merge-patch their `/status`.
 */
export function customResourceRules(kinds: readonly Pick<ManifestKind, 'group' | 'plural'>[]): PolicyRule[] {
  const groups = new Map<string, string[]>();
  for (const k of kinds) groups.set(k.group, [...(groups.get(k.group) ?? []), k.plural]);
  return [...groups.keys()].sort().flatMap((group) => {
    const plurals = groups.get(group)!;
    return [
      { apiGroups: [group], resources: plurals, verbs: ['get', 'list', 'watch', 'update'] },
      { apiGroups: [group], resources: plurals.map((p) => `${p}/status`), verbs: ['patch'] },
    ];
  });
}

/**
 * What the operator needs where resources live, besides the resources: the Namespace (its tenant
 * label and annotation; in one namespace's Role only that Namespace, by name; cluster-wide also
 * listed and watched, so that a change of them requeues its resources) and Events on the
 * resources (created, never updated).
 */
export function resourceNamespaceRules(namespace?: string): PolicyRule[] {
  return [
    namespace ? { apiGroups: [''], resources: ['namespaces'], resourceNames: [namespace], verbs: ['get'] } : { apiGroups: [''], resources: ['namespaces'], verbs: ['get', 'list', 'watch'] },
    { apiGroups: [''], resources: ['events'], verbs: ['create'] },
  ];
}

/** Rules bound to a service account: cluster-wide (a ClusterRoleBinding) or in one namespace (a RoleBinding). */
export interface Grant {
  namespace?: string;
  rules: PolicyRule[];
}

/**
 * The operator's grants as the Helm chart binds them: in the release namespace its Lease, the
 * CronJobs and the run pod template's ConfigMap (read); the custom resources of `kinds` with their Namespaces and Events cluster-wide, or in each
 * watched namespace (`watchNamespaces`) with only that Namespace.
 */
export function operatorGrants(options: {
  kinds: readonly Pick<ManifestKind, 'group' | 'plural'>[];
  releaseNamespace: string;
  leaseName: string;
  watchNamespaces?: readonly string[];
  /** The run pod template's ConfigMap (the chart's `<release>-svc-hub-run-job`), read for its uid. */
  runJobConfigMap?: string;
}): Grant[] {
  const release: Grant = {
    namespace: options.releaseNamespace,
    rules: [...leaseRules(options.leaseName), CRONJOB_RULE, ...(options.runJobConfigMap ? [runJobConfigMapRule(options.runJobConfigMap)] : [])],
  };
  const resources = customResourceRules(options.kinds);
  const watched = options.watchNamespaces?.length
    ? options.watchNamespaces.map((namespace) => ({ namespace, rules: [...resources, ...resourceNamespaceRules(namespace)] }))
    : [{ rules: [...resources, ...resourceNamespaceRules()] }];
  return [release, ...watched];
}
