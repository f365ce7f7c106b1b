import type { CoreV1Api } from '@kubernetes/client-node';
import { apiStatus } from '../kube/kube-config.js';
import type { ManifestServices } from '../src/manifests/services.js';
import type { Resource } from './resource.js';

/** Which tenant a custom resource belongs to. */

export const TENANT_LABEL = 'svc.io/tenant';

/**
 * The Namespace annotation listing the tenants (codes, comma-separated, or `*`) its resources may
 * name with their own label, besides the one its label names.
 */
export const TENANTS_ANNOTATION = 'svc.io/tenants';

/**
 * The tenant of a resource: the label on it, else on its Namespace; a problem when none resolves to
 * an active tenant. A Namespace that names a tenant (its label) or tenants (its annotation) bounds
 * what its resources may name: whoever may create a resource in it cannot pick another tenant by
 * labelling the resource. A Namespace with neither lets its resources name any tenant.
 * `namespaceVersion`: the resourceVersion of the Namespace read (undefined: none), for the fence.
 */
export async function resolveTenant(
  core: CoreV1Api,
  manifests: ManifestServices,
  resource: Resource,
): Promise<{ code: string; id: number; namespaceVersion: string | undefined } | { problem: string }> {
  const namespace = resource.metadata.namespace;
  let ns: { labels?: Record<string, string>; annotations?: Record<string, string>; resourceVersion?: string } = {};
  try {
    ns = (await core.readNamespace({ name: namespace })).metadata ?? {};
  } catch (err) {
    if (apiStatus(err) !== 404) throw err;
  }
  const own = resource.metadata.labels?.[TENANT_LABEL] || undefined;
  const fromNamespace = ns.labels?.[TENANT_LABEL];
  const listed = (ns.annotations?.[TENANTS_ANNOTATION] ?? '').split(',').map((t) => t.trim()).filter(Boolean);
  const allowed = [...(fromNamespace ? [fromNamespace] : []), ...listed];
  // The label or the annotation present, even empty (`svc.io/tenants: ""`), bounds the Namespace:
  // an empty one allows nothing more, it does not open it to every tenant.
  const bounded = ns.labels?.[TENANT_LABEL] !== undefined || ns.annotations?.[TENANTS_ANNOTATION] !== undefined;
  if (own && bounded && !allowed.includes('*') && !allowed.includes(own)) {
    return {
      problem: `no tenant: tenant ${own} (label ${TENANT_LABEL} on the resource) is not one namespace ${namespace} allows (${allowed.join(', ') || 'none'}: its label ${TENANT_LABEL} and annotation ${TENANTS_ANNOTATION})`,
    };
  }
  const code = own ?? fromNamespace;
  const where = own ? 'the resource' : `namespace ${namespace}`;
  if (!code) return { problem: `no tenant: label ${TENANT_LABEL} is set neither on the resource nor on its namespace ${namespace}` };
  const row = await manifests.tenantByCode(code);
  if (!row) return { problem: `no tenant: tenant ${code} (label ${TENANT_LABEL} on ${where}) does not exist` };
  if (!row.active) return { problem: `no tenant: tenant ${code} (label ${TENANT_LABEL} on ${where}) is inactive` };
  return { code, id: row.id, namespaceVersion: ns.resourceVersion };
}
