import { createHash } from 'node:crypto';
import { type CustomObjectsApi, type KubernetesObject, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { apiStatus } from '../kube/kube-config.js';
import { canonical } from '../src/manifests/canonical.js';
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
  /** The latest run; `endedAt` is absent while it runs (a merge patch cannot write null). */
  lastRun?: { id: string; status: string; endedAt?: string };
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

/**
 * The JSON merge patch (RFC 7386) that turns `from` into `to`: changed keys with their new value,
 * removed keys as null, nested objects as patches of their own, arrays whole. Undefined when equal.
 */
export function mergePatchOf(from: unknown, to: unknown): unknown {
  const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
  if (!isObject(from) || !isObject(to)) return canonical(from) === canonical(to) ? undefined : to;
  const patch: Record<string, unknown> = {};
  for (const key of Object.keys(from)) if (from[key] !== undefined && to[key] === undefined) patch[key] = null;
  for (const [key, value] of Object.entries(to)) {
    if (value === undefined) continue;
    const sub = from[key] === undefined ? value : mergePatchOf(from[key], value);
    if (sub !== undefined) patch[key] = sub;
  }
  return Object.keys(patch).length ? patch : undefined;
}

/**
 * Writes what changed from `previous` to `status` as a JSON merge patch of the status subresource
 * (a removed field is sent as null); nothing when they are equal. The patch carries the
 * resourceVersion the status was read at, so a status read from a cache behind the server is not
 * written over a newer one: the server answers 409 (a Conflict, retried once the cache caught up),
 * as controller-runtime's merge patch with an optimistic lock does. Returns the resource as written
 * (its new resourceVersion), or undefined when nothing needed writing.
 */
export async function writeStatus(custom: CustomObjectsApi, kind: ManifestKind, resource: Resource, previous: ResourceStatus, status: ResourceStatus): Promise<Resource | undefined> {
  const patch = mergePatchOf(previous, status);
  if (patch === undefined) return undefined;
  try {
    return (await custom.patchNamespacedCustomObjectStatus(
      {
        group: kind.group,
        version: kind.version,
        plural: kind.plural,
        namespace: resource.metadata.namespace,
        name: resource.metadata.name,
        body: { metadata: { resourceVersion: resource.metadata.resourceVersion }, status: patch },
      },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    )) as Resource;
  } catch (err) {
    if (apiStatus(err) === 409) throw new Conflict(`${kind.kind} ${resource.metadata.name} changed meanwhile`);
    throw err;
  }
}

/**
 * A resource as the API server holds it after a write of `status` to it (the resource as read, the
 * resourceVersion and managedFields aside, which every write changes): what the watch reports back
 * of the operator's own status write, as a hash to compare (kept per resource: not a second copy of the cache).
 */
export function afterStatusWrite(resource: Resource, status: ResourceStatus | undefined): string {
  const { resourceVersion: _rv, managedFields: _mf, ...metadata } = resource.metadata;
  return createHash('sha256').update(canonical({ ...resource, metadata, status })).digest('base64');
}
