import type { CustomObjectsApi, KubernetesObject } from '@kubernetes/client-node';
import { apiStatus } from '../kube/kube-config.js';
import type { ManifestKind } from '../src/manifests/kinds.js';

/** A custom resource of a manifest kind as the operator reads and writes it, and the calls that do. */

export interface Condition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason: string;
  message: string;
  lastTransitionTime: string;
  observedGeneration?: number;
}

export interface ResourceStatus {
  observedGeneration?: number;
  /** The tenant code the hub holds the resource in (where a delete cleans up). */
  tenant?: string;
  conditions?: Condition[];
  lastRun?: { id: string; status: string; endedAt: string | null };
}

export interface Resource extends KubernetesObject {
  metadata: NonNullable<KubernetesObject['metadata']> & { name: string; namespace: string };
  spec?: Record<string, unknown>;
  status?: ResourceStatus;
  [key: string]: unknown;
}

/** The resource changed since it was read (resourceVersion): the reconcile starts again. */
export class Conflict extends Error {}

/** The manifest the HTTP path would have received: the resource without status and server-set metadata. */
export function manifestOf(resource: Resource): Record<string, unknown> {
  const { status: _status, metadata, ...rest } = resource;
  const meta: Record<string, unknown> = { name: metadata.name };
  if (metadata.labels && Object.keys(metadata.labels).length) meta.labels = metadata.labels;
  const annotations = Object.fromEntries(Object.entries(metadata.annotations ?? {}).filter(([k]) => k !== 'kubectl.kubernetes.io/last-applied-configuration'));
  if (Object.keys(annotations).length) meta.annotations = annotations;
  return { ...rest, metadata: meta };
}

/** The resource as it is now; undefined when it is gone. */
export async function readResource(custom: CustomObjectsApi, kind: ManifestKind, namespace: string, name: string): Promise<Resource | undefined> {
  try {
    return (await custom.getNamespacedCustomObject({ group: kind.group, version: kind.version, plural: kind.plural, namespace, name })) as Resource;
  } catch (err) {
    if (apiStatus(err) === 404) return undefined;
    throw err;
  }
}

/** Writes the resource (metadata and spec); a newer version on the server is a Conflict. */
export async function replaceResource(custom: CustomObjectsApi, kind: ManifestKind, resource: Resource): Promise<Resource> {
  try {
    return (await custom.replaceNamespacedCustomObject({ group: kind.group, version: kind.version, plural: kind.plural, namespace: resource.metadata.namespace, name: resource.metadata.name, body: resource })) as Resource;
  } catch (err) {
    if (apiStatus(err) === 409) throw new Conflict(`${kind.kind} ${resource.metadata.name} changed meanwhile`);
    throw err;
  }
}

/** Writes the status subresource; a newer version on the server is a Conflict. */
export async function writeStatus(custom: CustomObjectsApi, kind: ManifestKind, resource: Resource, status: ResourceStatus): Promise<void> {
  const body = { apiVersion: resource.apiVersion, kind: resource.kind, metadata: { name: resource.metadata.name, namespace: resource.metadata.namespace, resourceVersion: resource.metadata.resourceVersion }, status };
  try {
    await custom.replaceNamespacedCustomObjectStatus({ group: kind.group, version: kind.version, plural: kind.plural, namespace: resource.metadata.namespace, name: resource.metadata.name, body });
  } catch (err) {
    if (apiStatus(err) === 409) throw new Conflict(`${kind.kind} ${resource.metadata.name} changed meanwhile`);
    throw err;
  }
}
