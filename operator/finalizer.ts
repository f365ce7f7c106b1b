import type { Resource } from './resource.js';

/**
 * The finalizer `svc.io/cleanup`: while it is on a resource, Kubernetes keeps the resource after a
 * delete until the operator has deleted the hub object it manages and taken the finalizer off.
 */

export const FINALIZER = 'svc.io/cleanup';

export const hasFinalizer = (resource: Resource): boolean => (resource.metadata.finalizers ?? []).includes(FINALIZER);

/** The resource with the finalizer added (to be written back). */
export const withFinalizer = (resource: Resource): Resource => ({ ...resource, metadata: { ...resource.metadata, finalizers: [...(resource.metadata.finalizers ?? []), FINALIZER] } });

/** The resource with the finalizer taken off (to be written back once the hub object is gone). */
export const withoutFinalizer = (resource: Resource): Resource => ({ ...resource, metadata: { ...resource.metadata, finalizers: (resource.metadata.finalizers ?? []).filter((f) => f !== FINALIZER) } });
