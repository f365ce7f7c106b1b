import type { CoreV1Api } from '@kubernetes/client-node';
import { apiStatus } from '../kube/kube-config.js';
import type { ManifestServices } from '../src/manifests/services.js';
import type { Resource } from './resource.js';

/** Which tenant a custom resource belongs to. */

export const TENANT_LABEL = 'svc.io/tenant';

/** The tenant of a resource: the label on it, else on its Namespace; a problem when none resolves to an active tenant. */
export async function resolveTenant(core: CoreV1Api, manifests: ManifestServices, resource: Resource): Promise<{ code: string; id: number } | { problem: string }> {
  let code = resource.metadata.labels?.[TENANT_LABEL];
  let where = 'the resource';
  if (!code) {
    try {
      const ns = await core.readNamespace({ name: resource.metadata.namespace });
      code = ns.metadata?.labels?.[TENANT_LABEL];
      where = `namespace ${resource.metadata.namespace}`;
    } catch (err) {
      if (apiStatus(err) !== 404) throw err;
    }
  }
  if (!code) return { problem: `no tenant: label ${TENANT_LABEL} is set neither on the resource nor on its namespace ${resource.metadata.namespace}` };
  const row = await manifests.tenantByCode(code);
  if (!row) return { problem: `no tenant: tenant ${code} (label ${TENANT_LABEL} on ${where}) does not exist` };
  if (!row.active) return { problem: `no tenant: tenant ${code} (label ${TENANT_LABEL} on ${where}) is inactive` };
  return { code, id: row.id };
}
