import { KubeConfig } from '@kubernetes/client-node';

/**
 * Where the operator and the Lease elector find the Kubernetes API: inside a pod, the mounted
 * service-account token (`loadFromCluster`); elsewhere `KUBECONFIG` or ~/.kube/config
 * (`loadFromDefault`). Tests pass `server` and `token` of the scripted API stand-in.
 */
export interface KubeTarget {
  server: string;
  token: string;
}

export function kubeConfig(target?: KubeTarget): KubeConfig {
  const kc = new KubeConfig();
  if (target) {
    kc.loadFromOptions({
      clusters: [{ name: 'target', server: target.server, skipTLSVerify: true }],
      users: [{ name: 'svc-hub', token: target.token }],
      contexts: [{ name: 'target', cluster: 'target', user: 'svc-hub' }],
      currentContext: 'target',
    });
  } else if (process.env.KUBERNETES_SERVICE_HOST) {
    kc.loadFromCluster();
  } else {
    kc.loadFromDefault();
  }
  return kc;
}

/** The HTTP status of an error thrown by @kubernetes/client-node (ApiException.code), if any. */
export function apiStatus(err: unknown): number | undefined {
  const code = (err as { code?: unknown } | undefined)?.code;
  return typeof code === 'number' ? code : undefined;
}
