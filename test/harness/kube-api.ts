import { randomInt, randomUUID } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';
import type { Grant, PolicyRule } from '../../kube/rbac.js';
import { byKey, decodeContinue, encodeContinue, EXPIRED_CONTINUE, pageOf, parseLimit } from './kube-api-paging.js';
import { BUILT_IN_STRUCTS, decodeGo, defaultCronJob, encodeGo, UndecodableError } from './kube-builtin.js';
import { validateCronJob } from './kube-cron.js';
import { canonicalQuantity, QUANTITY_REFUSED } from './kube-quantity.js';
import { applyDefaults, type FieldError, fieldErrors, type JSONSchemaProps, OBJECT_META_FIELDS, prune, pruneObjectMeta, re2Problems, validateCustomResource } from './kube-schema.js';
import { isLabelValue, isQualifiedName, type LabelPredicate, type ObjectPredicate, parseFieldSelector, parseLabelSelector, SelectorError } from './kube-selectors.js';

/**
 * A SCRIPTED STAND-IN for the Kubernetes API server (no API server can run here). It speaks the
 * HTTP/JSON of the real one for the requests the operator and the Lease elector make, through the
 * real @kubernetes/client-node, and is as strict as kube-apiserver on what they depend on:
 *
 * - custom resources are served from their CRDs (crds/*.yaml of the repository, or CRD objects
 *   given to the constructor): group, version, plural, kind, scope and status subresource. On every
 *   write the body is decoded as the real server does: fields the structural openAPIV3Schema does
 *   not declare are PRUNED silently (unless under x-kubernetes-preserve-unknown-fields; `metadata`
 *   keeps the fields of ObjectMeta), `default`s are applied (also on read), then the object is
 *   VALIDATED (type, properties, required, items, enum, format, minimum/maximum, min/maxLength,
 *   pattern, min/maxItems, min/maxProperties, nullable, additionalProperties, int-or-string,
 *   embedded-resource, list-type set/map uniqueness, allOf/anyOf/oneOf/not): an invalid create or
 *   update answers 422 Invalid with the server's Status (`<Kind>.<group> "<name>" is invalid: …`,
 *   details.causes by field). A write to `/status` validates status only, or with
 *   `pre130` the whole object, spec included, as kube-apiserver did before CRD validation
 *   ratcheting (1.30); no write ratchets (an unchanged invalid field is refused, as before 1.30:
 *   stricter than a 1.30 or later server on the main resource); `updateCrd` installs a changed CRD
 *   over stored objects, which stay as they are;
 * - object names: a DNS-1123 subdomain (a label for Namespaces), else 422; `metadata.generateName`
 *   without a name gets `<generateName><5 random characters>`; neither answers 422; the namespace
 *   (and, on update, the name) of the body must match the URL, else 400; a custom resource body
 *   must carry its apiVersion and kind, else 400; label keys and values, annotation keys and
 *   ownerReferences (apiVersion, kind, name, uid) are checked on every type (422);
 * - one resourceVersion counter; an update (PUT) naming an older resourceVersion, or another uid
 *   (an object deleted and created again under its name), answers 409 Conflict;
 *   a PUT of a custom resource (or its status) without metadata.resourceVersion answers 422 (custom
 *   resources allow no unconditional update; core and batch types do, as in the real server);
 * - `metadata.generation` bumps when anything but metadata and status changes, and when a deletion
 *   sets `deletionTimestamp`;
 * - the `status` subresource: the main resource ignores status changes, `/status` changes nothing else;
 * - finalizers: DELETE of an object with finalizers only sets `deletionTimestamp`; the object goes
 *   when an update empties them (that update is not written: the object is deleted as stored, and
 *   its DELETED event and the answer carry the finalizers it had); deleting an owner deletes the objects whose ownerReferences name it,
 *   and an object written with ownerReferences that all name an absent owner (none of that kind and
 *   name in its namespace, or one of another uid) is deleted at once, as the garbage collector does;
 *   a DELETE's preconditions (`uid`, `resourceVersion`) that the object no longer meets answer 409;
 * - RBAC, once `enforceRbac` is called: a call the grants do not allow answers 403 Forbidden;
 * - list (per namespace or across) and watch from a resourceVersion (ADDED/MODIFIED/DELETED events,
 *   newline-delimited JSON, held open), both with `labelSelector` (`k=v`, `k==v`, `k!=v`,
 *   `k in (…)`, `k notin (…)`, `k`, `!k`, `k>n`, `k<n`, comma = AND) and `fieldSelector`
 *   (`metadata.name`, `metadata.namespace`; Events also `involvedObject.*`, `reason`, `type`); a
 *   watched object that stops (starts) matching is seen DELETED (ADDED), the DELETED carrying the
 *   object as it was before the change (the watch cache's previous object) at the change's resourceVersion;
 *   a watch without a resourceVersion, or from "0", starts with an ADDED event of every matching
 *   object as it is now (no history); A watch from a
 *   resourceVersion older than `compact()` answers 200 and then one ERROR event carrying a 410
 *   Expired Status, and closes, as kube-apiserver does (the informer lists again);
 * - lists in the order of their etcd keys (namespace/name), chunked by `limit` and `continue` as
 *   kube-apiserver serves them from etcd (kube-api-paging.ts): at most `limit` items, a continue token
 *   while keys remain and `remainingItemCount` when no selector filters the list; every page read at
 *   the first page's resourceVersion (the history of every object is kept until `compact()`); a
 *   token that does not decode is 400 BadRequest, one whose revision was compacted 410 Expired (with
 *   a token to continue inconsistently, as the server gives one); `beforeList` scripts a write
 *   between two pages;
 * - batch/v1 CronJobs are validated as the real server does: `spec.schedule` as robfig/cron's
 *   ParseStandard (5 fields or a descriptor; no `TZ=`/`CRON_TZ=`), `spec.timeZone` an IANA name,
 *   the name at most 52 characters, the job's pod template with containers and restartPolicy
 *   OnFailure or Never (a missing one defaults to Always, which is refused);
 * - built-in objects the hub writes (batch/v1 CronJob with its job and pod templates,
 *   coordination.k8s.io/v1 Lease, core v1 Event) are decoded into their Go structs as the server
 *   does (test/harness/kube-builtin.ts): unknown fields dropped, a value of the wrong type a 400,
 *   the server's defaults applied (CronJob concurrencyPolicy Allow, suspend false, history limits 3
 *   and 1; the pod template's dnsPolicy, restartPolicy, schedulerName, securityContext,
 *   terminationGracePeriodSeconds; each container's imagePullPolicy and termination message
 *   fields; …), and what is stored drops the `omitempty` fields holding a zero value (an env var's
 *   `value: ""`, a volumeMount's `readOnly: false`, empty lists and maps) while pointers keep theirs
 *   (`suspend: false`, `automountServiceAccountToken: false`);
 * - `fieldValidation` (any type): a field the type does not have is dropped with a `Warning: 299 -
 *   "unknown field \"spec.foo\""` header (Warn, the default), silently (Ignore), or refused with 400
 *   `… strict decoding error: unknown field "spec.foo"` (Strict); `requests[].warnings` holds them;
 *   a CronJob's resource quantities (`requests`, `limits`, `overhead`, `sizeLimit`, `divisor`) are stored and
 *   answered in canonical form (`1024Mi` as `1Gi`, the number 1 as `"1"`), one the server cannot
 *   read refused with 400 BadRequest (test/harness/kube-quantity.ts);
 * - core v1 Events need an `involvedObject` whose namespace matches the Event's; they are listable;
 * - the NamespaceLifecycle admission plugin: a create in a namespace that does not exist is 404
 *   NotFound (`namespaces "<ns>" not found`), before the object is validated (the scripted `apply`
 *   creates a missing Namespace first, as a user would); the deletion of a Namespace: Terminating
 *   (`deletionTimestamp`, `status.phase`), everything in it deleted (objects with finalizers wait
 *   for them), the Namespace gone once empty; meanwhile a create in it is 403 Forbidden (`unable to
 *   create new content in namespace … because it is being terminated`);
 * - JSON merge patch (`application/merge-patch+json`);
 * - `metadata.managedFields` kept as the server's field manager keeps them for Update operations:
 *   an entry per writer (`?fieldManager=`, else the User-Agent up to its `/`), operation and
 *   subresource (`status` apart), owning the fields it changed (FieldsV1; list items not keyed),
 *   its `time` set when that set grows; what a client sends in managedFields is not taken;
 * - MicroTime fields (a Lease's `spec.acquireTime`/`spec.renewTime`) decoded as strictly as the real
 *   server does (layout `2006-01-02T15:04:05.000000Z07:00`, exactly six fractional digits): anything
 *   else, such as JavaScript's millisecond `toISOString()`, answers 400 BadRequest.
 *
 * Not modelled: admission other than NamespaceLifecycle's, strategic merge or server-side apply patches
 * (and the transfer of field ownership between managers),
 * the decoding of Namespaces, ConfigMaps and events.k8s.io Events (stored as sent; the hub writes none), the
 * parts of a pod spec typed `any` in kube-builtin.ts (kept as sent), duplicate JSON fields,
 * CEL validation rules (x-kubernetes-validations), conversion between versions, lists served from the
 * watch cache (`resourceVersion=0`, `resourceVersionMatch`): every list reads etcd's latest revision.
 *
 * Tests script failures with `failNext` and read every request in `requests`.
 */

export interface ResourceType {
  group: string; // '' for the core group
  version: string;
  plural: string;
  kind: string;
  namespaced: boolean;
  statusSubresource: boolean;
  /** The structural openAPIV3Schema of a custom resource (from its CRD). */
  schema?: JSONSchemaProps;
}

/** The parts of an apiextensions.k8s.io/v1 CustomResourceDefinition the stand-in reads. */
export interface CustomResourceDefinition {
  apiVersion?: string;
  kind: 'CustomResourceDefinition';
  metadata?: { name?: string };
  spec: {
    group: string;
    names: { kind: string; plural: string };
    scope: 'Namespaced' | 'Cluster';
    versions: Array<{ name: string; served?: boolean; subresources?: { status?: object }; schema?: { openAPIV3Schema?: JSONSchemaProps } }>;
  };
}

/** The repository's CRDs (generated by `npm run crds`). */
export const REPO_CRDS = fileURLToPath(new URL('../../crds/', import.meta.url));

/** Every CustomResourceDefinition in the YAML files of `dir`. */
export function loadCrds(dir: string = REPO_CRDS): CustomResourceDefinition[] {
  return readdirSync(dir)
    .filter((f) => f.endsWith('.yaml') || f.endsWith('.yml'))
    .sort()
    .flatMap((f) => parseAllDocuments(readFileSync(join(dir, f), 'utf8')).map((d) => d.toJS() as CustomResourceDefinition))
    .filter((d) => d?.kind === 'CustomResourceDefinition');
}

/** The resource types a CRD serves (one per served version); throws as kube-apiserver refuses a pattern RE2 cannot read. */
export function typesOfCrd(crd: CustomResourceDefinition): ResourceType[] {
  const refused = crd.spec.versions.flatMap((v) => re2Problems(v.schema?.openAPIV3Schema));
  if (refused.length > 0) throw new Error(`CustomResourceDefinition.apiextensions.k8s.io "${crd.metadata?.name}" is invalid: ${refused.join('; ')}`);
  return crd.spec.versions
    .filter((v) => v.served !== false)
    .map((v) => ({
      group: crd.spec.group,
      version: v.name,
      plural: crd.spec.names.plural,
      kind: crd.spec.names.kind,
      namespaced: crd.spec.scope === 'Namespaced',
      statusSubresource: v.subresources?.status !== undefined,
      schema: v.schema?.openAPIV3Schema ?? { type: 'object', 'x-kubernetes-preserve-unknown-fields': true },
    }));
}

export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata: {
    name: string;
    namespace?: string;
    uid?: string;
    resourceVersion?: string;
    generation?: number;
    creationTimestamp?: string;
    deletionTimestamp?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    finalizers?: string[];
    ownerReferences?: Array<{ apiVersion: string; kind: string; name: string; uid: string; controller?: boolean; blockOwnerDeletion?: boolean }>;
    [key: string]: unknown;
  };
  spec?: Record<string, unknown>;
  status?: Record<string, unknown>;
  [key: string]: unknown;
}

export interface RecordedRequest {
  method: string;
  path: string;
  query: Record<string, string>;
  body: unknown;
  status: number;
  /** The bearer token the client sent (tells two clients apart). */
  token: string;
  /** The `Warning` headers of the answer (`unknown field "spec.foo"` for each field dropped when decoding). */
  warnings?: string[];
}

/** How a write treats fields its type does not have (the `fieldValidation` query parameter). */
export type FieldValidation = 'Strict' | 'Warn' | 'Ignore';

/** A write's decoding: its fieldValidation, the warnings its answer carries, and its field manager. */
interface WriteContext {
  fieldValidation: FieldValidation;
  warnings: string[];
  /** `?fieldManager=`, else the User-Agent up to its first `/`, as kube-apiserver names the writer in `managedFields`. */
  manager: string;
}

/** The test's own writes (`apply`, `patch`): a user's kubectl. */
const lenient = (): WriteContext => ({ fieldValidation: 'Warn', warnings: [], manager: 'kubectl' });

type FieldSet = { [field: string]: FieldSet };
const isPlain = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * The fields `after` sets that `before` did not hold with that value, as a FieldsV1 tree (`f:<key>`
 * for each key, a list or scalar a leaf; the list items' `k:`/`v:` keys are not modelled);
 * undefined when none changed.
 */
function changedFields(before: unknown, after: unknown): FieldSet | undefined {
  if (JSON.stringify(before) === JSON.stringify(after)) return undefined;
  if (!isPlain(after)) return {};
  const out: FieldSet = {};
  for (const [k, v] of Object.entries(after)) {
    const sub = changedFields(isPlain(before) ? before[k] : undefined, v);
    if (sub) out[`f:${k}`] = sub;
  }
  return out;
}

const unionFields = (a: FieldSet, b: FieldSet): FieldSet => {
  const out: FieldSet = { ...a };
  for (const [k, v] of Object.entries(b)) out[k] = out[k] ? unionFields(out[k]!, v) : v;
  return out;
};

interface ManagedFieldsEntry {
  manager: string;
  operation: 'Update';
  apiVersion: string;
  time: string;
  fieldsType: 'FieldsV1';
  fieldsV1: FieldSet;
  subresource?: string;
}

/**
 * `metadata.managedFields` after a write, as kube-apiserver's field manager keeps them for an
 * Update (create, PUT, merge patch): the writer's entry (manager, operation and subresource tell
 * entries apart) owns the fields it changed besides those it owned; its `time` is set when that
 * set grows (an entry added, or a field it did not own), and is left alone otherwise. Server-side
 * apply (operation Apply) and the transfer of ownership between managers are not modelled.
 */
function managedFieldsAfter(t: ResourceType, before: KubeObject | undefined, after: KubeObject, manager: string, statusOnly: boolean): ManagedFieldsEntry[] {
  const entries = (before?.metadata.managedFields as ManagedFieldsEntry[] | undefined) ?? [];
  const part = (o: KubeObject | undefined): Record<string, unknown> | undefined => {
    if (!o) return undefined;
    if (statusOnly) return { status: o.status };
    const { metadata, status: _s, apiVersion: _a, kind: _k, ...rest } = o;
    const meta = Object.fromEntries(['labels', 'annotations', 'finalizers', 'ownerReferences', 'generateName'].filter((k) => metadata[k] !== undefined).map((k) => [k, metadata[k]]));
    return { ...(Object.keys(meta).length ? { metadata: meta } : {}), ...rest };
  };
  const changed = changedFields(part(before), part(after)) ?? {};
  const subresource = statusOnly ? 'status' : undefined;
  const at = entries.findIndex((e) => e.manager === manager && e.operation === 'Update' && e.subresource === subresource);
  const owned = at >= 0 ? entries[at]!.fieldsV1 : undefined;
  const fields = owned ? unionFields(owned, changed) : changed;
  if (owned && JSON.stringify(fields) === JSON.stringify(owned)) return entries;
  if (!owned && Object.keys(fields).length === 0) return entries;
  const entry: ManagedFieldsEntry = {
    manager,
    operation: 'Update',
    apiVersion: t.group ? `${t.group}/${t.version}` : t.version,
    time: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
    fieldsType: 'FieldsV1',
    fieldsV1: fields,
    ...(subresource ? { subresource } : {}),
  };
  return at >= 0 ? entries.map((e, i) => (i === at ? entry : e)) : [...entries, entry];
}

interface Failure {
  method: string;
  path: RegExp;
  status: number;
  times: number;
  /** For a GET of a collection: only its list, only its watch, or either. */
  on: 'list' | 'watch' | 'any';
}

/** Something a test does when a list request arrives, before it is answered (`beforeList`). */
interface ListHook {
  path: RegExp;
  /** Only on a request with a continue token (true), only on a first page (false), or on either. */
  continued?: boolean;
  times: number;
  action: (query: Record<string, string>) => void;
}

interface WatchEvent {
  rv: number;
  type: 'ADDED' | 'MODIFIED' | 'DELETED';
  typeKey: string;
  namespace?: string;
  object: KubeObject;
  /** For MODIFIED: the object before (a selector may have matched it and not the new one, or the reverse). */
  old?: KubeObject;
}

interface Watcher {
  typeKey: string;
  /** The path it watches. */
  path: string;
  namespace?: string;
  res: ServerResponse;
  matches: (o: KubeObject) => boolean;
}

export const CORE_TYPES: ResourceType[] = [
  { group: '', version: 'v1', plural: 'namespaces', kind: 'Namespace', namespaced: false, statusSubresource: false },
  { group: '', version: 'v1', plural: 'events', kind: 'Event', namespaced: true, statusSubresource: false },
  { group: '', version: 'v1', plural: 'configmaps', kind: 'ConfigMap', namespaced: true, statusSubresource: false },
  { group: 'events.k8s.io', version: 'v1', plural: 'events', kind: 'Event', namespaced: true, statusSubresource: false },
  { group: 'batch', version: 'v1', plural: 'cronjobs', kind: 'CronJob', namespaced: true, statusSubresource: true },
  { group: 'coordination.k8s.io', version: 'v1', plural: 'leases', kind: 'Lease', namespaced: true, statusSubresource: false },
];

const typeKey = (t: { group: string; version: string; plural: string }) => `${t.group}/${t.version}/${t.plural}`;
const clone = <T>(v: T): T => structuredClone(v);

interface StatusDetails {
  name: string;
  group: string;
  kind: string;
  causes: Array<{ reason: string; message: string; field: string }>;
}

function status(code: number, reason: string, message: string, details?: StatusDetails) {
  return { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, ...(details ? { details } : {}), code };
}

type Status = ReturnType<typeof status>;

/** 422 Invalid as the server words it: `<Kind>.<group> "<name>" is invalid: <field>: <message>` (several in brackets). */
function invalid(t: ResourceType, name: string, errors: FieldError[]): Status {
  const qualified = t.group ? `${t.kind}.${t.group}` : t.kind;
  const printed = errors.map((e) => `${e.field}: ${e.message}`);
  const message = `${qualified} "${name}" is invalid: ${printed.length === 1 ? printed[0] : `[${printed.join(', ')}]`}`;
  return status(422, 'Invalid', message, { name, group: t.group, kind: t.kind, causes: errors.map((e) => ({ reason: e.reason, message: e.message, field: e.field })) });
}

const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

/** The errors of `metadata.name` (a DNS-1123 label for Namespaces, a subdomain for the rest). */
function nameErrors(t: ResourceType, name: string): FieldError[] {
  if (t.group === '' && t.plural === 'namespaces') {
    if (name.length > 63) return [fieldErrors.invalid('metadata.name', name, 'must be no more than 63 characters')];
    if (!DNS_LABEL.test(name)) {
      return [fieldErrors.invalid('metadata.name', name, "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")];
    }
    return [];
  }
  if (name.length > 253) return [fieldErrors.invalid('metadata.name', name, 'must be no more than 253 characters')];
  if (!DNS_SUBDOMAIN.test(name)) {
    return [
      fieldErrors.invalid(
        'metadata.name',
        name,
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
      ),
    ];
  }
  return [];
}

/** What k8s.io/apimachinery's rand.String draws from (no vowels, no look-alikes). */
const GENERATE_ALPHABET = 'bcdfghjklmnpqrstvwxz2456789';
function generatedName(base: string): string {
  const prefix = base.length > 58 ? base.slice(0, 58) : base;
  let suffix = '';
  for (let i = 0; i < 5; i++) suffix += GENERATE_ALPHABET[randomInt(GENERATE_ALPHABET.length)];
  return `${prefix}${suffix}`;
}

/** The errors of ObjectMeta every type gets: label keys and values, ownerReferences. */
function metaErrors(o: KubeObject): FieldError[] {
  const errors: FieldError[] = [];
  for (const [k, v] of Object.entries(o.metadata.labels ?? {})) {
    if (!isQualifiedName(k)) errors.push(fieldErrors.invalid('metadata.labels', k, "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"));
    if (typeof v !== 'string' || !isLabelValue(v)) {
      errors.push(fieldErrors.invalid('metadata.labels', v, "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"));
    }
  }
  for (const k of Object.keys(o.metadata.annotations ?? {})) {
    if (!isQualifiedName(k.toLowerCase())) errors.push(fieldErrors.invalid('metadata.annotations', k, "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"));
  }
  (o.metadata.ownerReferences ?? []).forEach((r, i) => {
    const at = `metadata.ownerReferences[${i}]`;
    if (!r.apiVersion) errors.push(fieldErrors.invalid(`${at}.apiVersion`, r.apiVersion ?? '', 'version must not be empty'));
    if (!r.kind) errors.push(fieldErrors.invalid(`${at}.kind`, r.kind ?? '', 'kind must not be empty'));
    if (!r.name) errors.push(fieldErrors.invalid(`${at}.name`, r.name ?? '', 'name must not be empty'));
    if (!r.uid) errors.push(fieldErrors.invalid(`${at}.uid`, r.uid ?? '', 'uid must not be empty'));
  });
  return errors;
}

/** What the server's decoder says of a custom resource body whose apiVersion or kind is missing or not the URL's (a 400). */
function badTypeMeta(t: ResourceType, body: KubeObject): Status | undefined {
  if (!t.schema) return undefined;
  const apiVersion = `${t.group}/${t.version}`;
  if (!body.kind) return status(400, 'BadRequest', `Object 'Kind' is missing in '${JSON.stringify(body)}'`);
  if (body.apiVersion !== apiVersion) return status(400, 'BadRequest', `the API version in the data (${body.apiVersion ?? ''}) does not match the expected API version (${apiVersion})`);
  if (body.kind !== t.kind) return status(400, 'BadRequest', `the kind in the data (${body.kind}) does not match the expected kind (${t.kind})`);
  return undefined;
}

/** Maps whose values are resource quantities (a container's `resources`, a pod's `overhead`). */
const QUANTITY_MAPS = new Set(['requests', 'limits', 'overhead']);

/**
 * A batch/v1 CronJob's resource quantities as the server stores them: each in canonical form
 * (test/harness/kube-quantity.ts), so a read answers `1Gi` where `1024Mi` (or the number 1 where
 * `"1"`) was written. One the server cannot read refuses the whole object: 400 BadRequest.
 */
function decodeQuantities(t: ResourceType, o: KubeObject): Status | undefined {
  if (!(t.group === 'batch' && t.plural === 'cronjobs')) return undefined;
  let refused: string | undefined;
  const canonical = (value: unknown): unknown => {
    const text = canonicalQuantity(value);
    if (text === undefined) refused ??= String(JSON.stringify(value));
    return text ?? value;
  };
  const walk = (node: unknown): void => {
    if (Array.isArray(node)) {
      for (const item of node) walk(item);
      return;
    }
    if (!node || typeof node !== 'object') return;
    const record = node as Record<string, unknown>;
    for (const [key, value] of Object.entries(record)) {
      if (QUANTITY_MAPS.has(key) && value && typeof value === 'object' && !Array.isArray(value)) {
        for (const [name, quantity] of Object.entries(value)) (value as Record<string, unknown>)[name] = canonical(quantity);
      } else if (key === 'sizeLimit' || key === 'divisor') record[key] = canonical(value);
      else walk(value);
    }
  };
  walk(o.spec);
  if (refused === undefined) return undefined;
  return status(400, 'BadRequest', `${t.kind} in version "${t.version}" cannot be handled as a ${t.kind}: ${QUANTITY_REFUSED} (got ${refused})`);
}

/**
 * The errors of a coordination.k8s.io/v1 Lease, as ValidateLeaseSpec words them: a duration of at
 * least 1 s and no negative transition count (422, on create and update).
 */
function leaseErrors(o: KubeObject): FieldError[] {
  const spec = (o.spec ?? {}) as { leaseDurationSeconds?: number; leaseTransitions?: number };
  const errors: FieldError[] = [];
  if (spec.leaseDurationSeconds !== undefined && spec.leaseDurationSeconds <= 0) errors.push(fieldErrors.invalid('spec.leaseDurationSeconds', spec.leaseDurationSeconds, 'must be greater than 0'));
  if (spec.leaseTransitions !== undefined && spec.leaseTransitions < 0) errors.push(fieldErrors.invalid('spec.leaseTransitions', spec.leaseTransitions, 'must to greater or equal than 0'));
  return errors;
}

/** The errors of a core v1 Event: an involvedObject in the Event's namespace (decoded, an Event always has one: a struct, empty when not sent). */
function eventErrors(o: KubeObject): FieldError[] {
  const involved = (o.involvedObject ?? {}) as Record<string, unknown>;
  const ns = String(involved.namespace ?? '');
  const own = o.metadata.namespace ?? '';
  if (ns === '' ? own !== '' && own !== 'default' : ns !== own) return [fieldErrors.invalid('involvedObject.namespace', ns, 'does not match event.namespace')];
  return [];
}
const isStatus = (o: KubeObject | Status): o is Status => o.kind === 'Status';

function expectObject(o: KubeObject | Status): KubeObject {
  if (isStatus(o)) throw new Error(`the stand-in refused: ${o.message}`);
  return o;
}

const tokenOf = (req: IncomingMessage): string => String(req.headers.authorization ?? '').replace(/^Bearer /, '');

function mergePatch(target: unknown, patch: unknown): unknown {
  if (patch === null || typeof patch !== 'object' || Array.isArray(patch)) return clone(patch);
  const out: Record<string, unknown> = target && typeof target === 'object' && !Array.isArray(target) ? { ...(target as Record<string, unknown>) } : {};
  for (const [k, v] of Object.entries(patch as Record<string, unknown>)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}

/** Fields of type metav1.MicroTime, by resource type key. */
const MICRO_TIME_FIELDS: Record<string, string[]> = {
  'coordination.k8s.io/v1/leases': ['acquireTime', 'renewTime'],
};
const RFC3339_MICRO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})$/;

/** What the real server answers when a MicroTime does not parse with its fixed six-digit layout. */
function badMicroTime(t: ResourceType, o: KubeObject): ReturnType<typeof status> | undefined {
  for (const field of MICRO_TIME_FIELDS[typeKey(t)] ?? []) {
    const value = o.spec?.[field];
    if (value === undefined || value === null) continue;
    if (typeof value !== 'string' || !RFC3339_MICRO.test(value)) {
      return status(
        400,
        'BadRequest',
        `${t.kind} in version "${t.version}" cannot be handled as a ${t.kind}: parsing time ${JSON.stringify(value)} as "2006-01-02T15:04:05.000000Z07:00": cannot parse spec.${field}`,
      );
    }
  }
  return undefined;
}

/** Everything but metadata and status: what `generation` counts changes of. */
function specPart(o: KubeObject): string {
  const { metadata: _m, status: _s, ...rest } = o;
  return JSON.stringify(rest);
}

const isNamespaceType = (t: ResourceType): boolean => t.group === '' && t.plural === 'namespaces';

/** API groups the stand-in serves as built-in types; any other group is a custom resource. */
const BUILT_IN_GROUPS = new Set(['', 'batch', 'coordination.k8s.io', 'events.k8s.io']);

/** The verb RBAC checks for a request (what the API server's request info says). */
function verbOf(method: string, named: boolean, watching: boolean): string {
  if (method === 'GET') return named ? 'get' : watching ? 'watch' : 'list';
  if (method === 'POST') return 'create';
  if (method === 'PUT') return 'update';
  if (method === 'PATCH') return 'patch';
  if (method === 'DELETE') return named ? 'delete' : 'deletecollection';
  return method.toLowerCase();
}

/** Whether RBAC's `rules` allow the request: group, resource (with its subresource), verb and, where a rule names them, the object's name. */
function allows(rules: readonly PolicyRule[], request: { group: string; resource: string; verb: string; name?: string }): boolean {
  return rules.some(
    (r) =>
      (r.apiGroups.includes(request.group) || r.apiGroups.includes('*')) &&
      (r.resources.includes(request.resource) || r.resources.includes('*')) &&
      (r.verbs.includes(request.verb) || r.verbs.includes('*')) &&
      // A rule naming objects never allows create, list or watch (no name in the request).
      (!r.resourceNames?.length || (request.name !== undefined && r.resourceNames.includes(request.name))),
  );
}

export interface StandInOptions {
  /** Where the CRDs of custom types given without a schema are looked up (default: the repository's crds/). */
  crdDir?: string;
  /**
   * A kube-apiserver before 1.30 (no CRD validation ratcheting, KEP-4008): a write to a custom
   * resource's `/status` validates the WHOLE object against its CRD's schema (spec included), as
   * apiextensions-apiserver's ValidateStatusUpdate did then, so a resource stored before a stricter
   * CRD (`updateCrd`) has every status write refused with 422 Invalid naming its spec. Default:
   * a status write validates `status` only.
   */
  pre130?: boolean;
}

export class KubeApiStandIn {
  readonly requests: RecordedRequest[] = [];
  private readonly types = new Map<string, ResourceType>();
  private readonly objects = new Map<string, KubeObject>(); // typeKey|ns|name
  /** Every version of every object since the compaction, as etcd keeps them (a deletion has no object): chunked lists read their revision. */
  private readonly history = new Map<string, Array<{ rv: number; object?: KubeObject }>>();
  private readonly log: WatchEvent[] = [];
  private rv = 1;
  private compactedTo = 0;
  private readonly failures: Failure[] = [];
  private readonly stalls: Array<{ method: string; path: RegExp; times: number; released: Promise<void>; held: number; abandoned: number }> = [];
  private readonly listHooks: ListHook[] = [];
  private rbac: { grants: Grant[]; exempt: Set<string>; byToken: Map<string, Grant[]> } | undefined;
  private readonly watchers = new Set<Watcher>();
  /** While watches are held (holdWatches): which (undefined: all), and the events each watcher has not been sent yet, in order. */
  private held: { path: RegExp | undefined; lines: Array<{ w: Watcher; line: string }> } | undefined;
  private readonly sockets = new Set<Socket>();
  private server: Server | undefined;
  /** StandInOptions.pre130: a status write validates the whole object. */
  private readonly wholeObjectOnStatus: boolean;
  url = '';

  /**
   * Serves the core types plus `extra`: CRD objects, or resource types. A custom type (a group not
   * built in) given without a schema takes it from its CRD in `options.crdDir` (the repository's
   * crds/), which must exist and agree on kind, scope and status subresource.
   */
  constructor(extra: Array<ResourceType | CustomResourceDefinition> = [], options: StandInOptions = {}) {
    let crds: ResourceType[] | undefined;
    const fromCrds = (t: ResourceType): ResourceType => {
      crds ??= loadCrds(options.crdDir).flatMap(typesOfCrd);
      const found = crds.find((c) => typeKey(c) === typeKey(t));
      if (!found) throw new Error(`the stand-in has no CRD for ${t.plural}.${t.group}/${t.version} in ${options.crdDir ?? REPO_CRDS}`);
      for (const k of ['kind', 'namespaced', 'statusSubresource'] as const) {
        if (found[k] !== t[k]) throw new Error(`${t.plural}.${t.group}: ${k} is ${JSON.stringify(t[k])} here but ${JSON.stringify(found[k])} in its CRD`);
      }
      return found;
    };
    this.wholeObjectOnStatus = options.pre130 === true;
    const given = extra.flatMap((e) => ('spec' in e && (e as CustomResourceDefinition).kind === 'CustomResourceDefinition' ? typesOfCrd(e as CustomResourceDefinition) : [e as ResourceType]));
    for (const t of [...CORE_TYPES, ...given]) {
      this.types.set(typeKey(t), !BUILT_IN_GROUPS.has(t.group) && !t.schema ? fromCrds(t) : t);
    }
  }

  /** A stand-in serving every CRD of `dir` (default: the repository's crds/). */
  static withCrds(dir: string = REPO_CRDS): KubeApiStandIn {
    return new KubeApiStandIn(loadCrds(dir), { crdDir: dir });
  }

  async start(): Promise<this> {
    this.server = createServer((req, res) => void this.handle(req, res));
    this.server.on('connection', (s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  async close(): Promise<void> {
    this.closeWatches();
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }

  // ---- scripting -------------------------------------------------------------------------------

  /**
   * What `kubectl apply` of a changed CRD does (say a stricter schema after an upgrade): the types
   * it serves take its schema from now on; the objects stored stay as they are (the API server
   * validates no stored object against a new schema: only their next writes are). The CRD must name
   * types served already, of the same kind, scope and status subresource.
   */
  updateCrd(crd: CustomResourceDefinition): void {
    for (const t of typesOfCrd(crd)) {
      const served = this.types.get(typeKey(t));
      if (!served || BUILT_IN_GROUPS.has(t.group)) throw new Error(`the stand-in serves no custom resource ${t.plural}.${t.group}/${t.version} to update`);
      for (const k of ['kind', 'namespaced', 'statusSubresource'] as const) {
        if (served[k] !== t[k]) throw new Error(`${t.plural}.${t.group}: ${k} is ${JSON.stringify(served[k])} served but ${JSON.stringify(t[k])} in the CRD`);
      }
      this.types.set(typeKey(t), t);
    }
  }

  /** The next `times` requests of `method` whose path matches answer `status` (a Status body). */
  failNext(method: string, path: RegExp, code: number, times = 1, on: Failure['on'] = 'any'): void {
    this.failures.push({ method: method.toUpperCase(), path, status: code, times, on });
  }

  /**
   * The next `times` requests of `method` whose path matches are not answered until the returned
   * function is called (an API server that hangs under load); then they are served as usual.
   */
  stallNext(method: string, path: RegExp, times = 1): (() => void) & { readonly held: number; readonly abandoned: number } {
    let release!: () => void;
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    const stall = { method: method.toUpperCase(), path, times, released, held: 0, abandoned: 0 };
    this.stalls.push(stall);
    // `held`: how many requests it holds (or held) so far; `abandoned`: how many of them their
    // client gave up while held (closed the connection, as an aborted request does).
    Object.defineProperty(release, 'held', { get: () => stall.held });
    return Object.defineProperty(release, 'abandoned', { get: () => stall.abandoned }) as (() => void) & { readonly held: number; readonly abandoned: number };
  }

  /**
   * From now on every request is authorised as a cluster authorises a service account bound to
   * `grants` (kube/rbac.ts): a call no rule allows is a 403 Forbidden, in the namespace of the
   * request (a Namespace object's own name for a Namespace). Requests with a token in `exempt` (the
   * test's own calls, as a cluster administrator would make them) are not checked. A token in
   * `byToken` (another service account) is bound to its own grants instead.
   */
  enforceRbac(grants: Grant[], exempt: string[] = [], byToken: Record<string, Grant[]> = {}): void {
    this.rbac = { grants, exempt: new Set(exempt), byToken: new Map(Object.entries(byToken)) };
  }

  /**
   * The next `times` list requests (not watches) whose path matches run `action` before they are
   * answered: with `continued` true only those carrying a continue token (a later page), false only
   * those without. What the action writes is in the store when the request is served.
   */
  beforeList(path: RegExp, action: (query: Record<string, string>) => void, options: { continued?: boolean; times?: number } = {}): void {
    this.listHooks.push({ path, action, continued: options.continued, times: options.times ?? 1 });
  }

  /**
   * Holds back the events of the open watches (those whose path matches `path`, when given): a
   * watch lagging behind the store, as a real API server's can, while reads and lists answer the
   * current state. The returned function sends them, in order.
   */
  holdWatches(path?: RegExp): () => void {
    this.held ??= { path, lines: [] };
    return () => {
      const held = this.held?.lines ?? [];
      this.held = undefined;
      for (const { w, line } of held) if (this.watchers.has(w)) w.res.write(line);
    };
  }

  /**
   * Sends every open watch a BOOKMARK event at the current resourceVersion (what an API server
   * sends a watch that asked for bookmarks, `allowWatchBookmarks`; sent to every watch here), after
   * the events before it (a held watch gets it with them, on release). An informer that reports this
   * resourceVersion has handled every change before it. Returns that resourceVersion.
   */
  bookmark(): string {
    const line = `${JSON.stringify({ type: 'BOOKMARK', object: { metadata: { resourceVersion: String(this.rv) } } })}\n`;
    for (const w of this.watchers) this.sendOnWatch(w, line);
    return String(this.rv);
  }

  /** Ends every open watch (the clients reconnect from their last resourceVersion). */
  closeWatches(): void {
    for (const w of this.watchers) w.res.end();
    this.watchers.clear();
  }

  /**
   * Compacts the history at the current resourceVersion, as etcd does: a watch from an older
   * resourceVersion gets a 410 Expired ERROR event, and a list continued with a token of an older
   * resourceVersion (issued before a later write) is 410 Expired.
   */
  compact(): void {
    this.compactedTo = this.rv;
    this.log.length = 0;
    for (const [key, versions] of this.history) {
      // Kept: the version current at the compaction (unless a deletion) and every later one.
      let at = -1;
      versions.forEach((v, i) => {
        if (v.rv <= this.compactedTo) at = i;
      });
      const kept = versions.slice(Math.max(at, 0)).filter((v, i) => !(i === 0 && at >= 0 && !v.object));
      if (kept.length) this.history.set(key, kept);
      else this.history.delete(key);
    }
    this.closeWatches();
  }

  /** The current resourceVersion counter. */
  get resourceVersion(): string {
    return String(this.rv);
  }

  /** The resource type served for `apiVersion` and `plural` (with its schema for a custom resource). */
  typeOf(apiVersion: string, plural: string): ResourceType {
    const [group, version] = apiVersion.includes('/') ? apiVersion.split('/') : ['', apiVersion];
    const t = this.types.get(typeKey({ group: group!, version: version!, plural }));
    if (!t) throw new Error(`the stand-in does not serve ${apiVersion} ${plural}`);
    return t;
  }

  /** Reads an object as stored (a copy, defaults applied), or undefined. */
  get(apiVersion: string, plural: string, namespace: string | undefined, name: string): KubeObject | undefined {
    const t = this.typeOf(apiVersion, plural);
    const o = this.objects.get(this.key(t, namespace, name));
    return o ? this.read(t, o) : undefined;
  }

  list(apiVersion: string, plural: string, namespace?: string): KubeObject[] {
    const t = this.typeOf(apiVersion, plural);
    return this.itemsOf(t, namespace).map((o) => this.read(t, o));
  }

  /**
   * What a user's `kubectl apply` does: create, or replace the spec/labels/annotations of the stored
   * object; the body is pruned, defaulted and validated like any write, and a refusal throws.
   */
  apply(plural: string, obj: KubeObject): KubeObject {
    const t = this.typeOf(obj.apiVersion ?? 'v1', plural);
    const current = this.objects.get(this.key(t, obj.metadata.namespace, obj.metadata.name));
    // The user creates the namespace first (`kubectl create namespace`), as a create in one that does not exist is a 404.
    if (!current && t.namespaced && obj.metadata.namespace) this.createNamespace(obj.metadata.namespace);
    if (!current) return expectObject(this.create(t, obj.metadata.namespace, clone(obj)));
    const next: KubeObject = { ...clone(obj), metadata: { ...current.metadata, labels: obj.metadata.labels, annotations: obj.metadata.annotations, resourceVersion: current.metadata.resourceVersion } };
    return expectObject(this.replace(t, obj.metadata.namespace, obj.metadata.name, next, false));
  }

  /**
   * What `kubectl create namespace` does, unless the Namespace exists already (as it is, even while
   * being deleted): a namespace the operator or the Lease elector writes in (the release's) must
   * exist, as on a cluster.
   */
  createNamespace(name: string): void {
    const t = this.typeOf('v1', 'namespaces');
    if (!this.objects.has(this.key(t, undefined, name))) expectObject(this.create(t, undefined, { apiVersion: 'v1', kind: 'Namespace', metadata: { name } }));
  }

  /** What `kubectl patch --type=merge` does (a JSON merge patch of the stored object); a refusal throws. */
  patch(apiVersion: string, plural: string, namespace: string | undefined, name: string, patch: unknown): KubeObject {
    const t = this.typeOf(apiVersion, plural);
    const current = this.objects.get(this.key(t, namespace, name));
    if (!current) throw new Error(`${plural} ${namespace ?? ''}/${name} not found`);
    const merged = mergePatch(this.read(t, current), patch) as KubeObject;
    merged.metadata.resourceVersion = current.metadata.resourceVersion;
    return expectObject(this.replace(t, namespace, name, merged, false));
  }

  /** What `kubectl delete` does. */
  remove(apiVersion: string, plural: string, namespace: string | undefined, name: string): void {
    this.delete(this.typeOf(apiVersion, plural), namespace, name);
  }

  // ---- the store --------------------------------------------------------------------------------

  /** The objects of a type (in a namespace, or all), in the order of their etcd keys, as a list answers them. */
  private itemsOf(t: ResourceType, namespace: string | undefined): KubeObject[] {
    return this.keyed(t, namespace, this.objects.entries()).map((e) => e.object);
  }

  /**
   * The objects of a type (in a namespace, or all) with their keys relative to the list's etcd
   * prefix (`<namespace>/<name>` across namespaces, `<name>` in one), ordered by key: as they were
   * at revision `rv` (from the history), or now.
   */
  private keyed(t: ResourceType, namespace: string | undefined, entries: Iterable<[string, KubeObject]>): Array<{ key: string; object: KubeObject }> {
    const prefix = `${typeKey(t)}|`;
    const across = t.namespaced && namespace === undefined;
    return [...entries]
      .filter(([k, o]) => k.startsWith(prefix) && (namespace === undefined || o.metadata.namespace === namespace))
      .map(([, o]) => ({ key: across ? `${o.metadata.namespace}/${o.metadata.name}` : o.metadata.name, object: o }))
      .sort(byKey);
  }

  /** Every object as it was at revision `rv` (not older than the compaction): each key's last version at or before it, unless a deletion. */
  private objectsAt(rv: number): Array<[string, KubeObject]> {
    const out: Array<[string, KubeObject]> = [];
    for (const [key, versions] of this.history) {
      let at: { rv: number; object?: KubeObject } | undefined;
      for (const v of versions) if (v.rv <= rv) at = v;
      if (at?.object) out.push([key, at.object]);
    }
    return out;
  }

  /** Stores an object (a write at its resourceVersion) and keeps the version in the history. */
  private store(key: string, o: KubeObject): void {
    this.objects.set(key, o);
    this.remember(key, Number(o.metadata.resourceVersion), clone(o));
  }

  /** Removes an object (a deletion at `rv`), keeping the deletion in the history. */
  private unstore(key: string, rv: number): void {
    this.objects.delete(key);
    this.remember(key, rv, undefined);
  }

  private remember(key: string, rv: number, object: KubeObject | undefined): void {
    const versions = this.history.get(key) ?? [];
    versions.push({ rv, object });
    this.history.set(key, versions);
  }

  /**
   * A list (one page of it with `limit`), or the Status refusing it: from the current revision, or
   * from the revision of its continue token, as kube-apiserver serves it from etcd (kube-api-paging.ts).
   */
  private listOf(t: ResourceType, namespace: string | undefined, query: Record<string, string>, matches: (o: KubeObject) => boolean): object {
    const limit = parseLimit(query.limit);
    if (typeof limit !== 'number') return status(400, 'BadRequest', limit.error);
    let rv = this.rv;
    let start: string | undefined;
    if (query.continue) {
      const token = decodeContinue(query.continue);
      if ('error' in token) return status(400, 'BadRequest', `invalid continue token: ${token.error}`);
      if (query.resourceVersion && query.resourceVersion !== '0') return status(400, 'BadRequest', 'specifying resource version is not allowed when using continue');
      if (token.rv > 0 && token.rv < this.compactedTo) {
        // etcd compacted the token's revision: the list must start again (or continue, inconsistently, with the token given).
        return { ...status(410, 'Expired', EXPIRED_CONTINUE), metadata: { continue: encodeContinue(token.start, -1) } };
      }
      if (token.rv > this.rv) return status(500, 'InternalError', 'etcdserver: mvcc: required revision is a future revision');
      // A negative revision (the token of a 410): the latest one.
      if (token.rv > 0) rv = token.rv;
      start = token.start;
    }
    const entries = rv === this.rv ? this.objects.entries() : this.objectsAt(rv);
    const page = pageOf(this.keyed(t, namespace, entries), matches, limit, start);
    const filtered = Boolean(query.labelSelector || query.fieldSelector);
    const metadata: Record<string, unknown> = { resourceVersion: String(rv) };
    if (page.hasMore) {
      metadata.continue = encodeContinue(`${page.lastKey}\u0000`, rv);
      if (!filtered) metadata.remainingItemCount = page.remaining;
    }
    return { apiVersion: t.group ? `${t.group}/${t.version}` : t.version, kind: `${t.kind}List`, metadata, items: page.items.map((o) => this.read(t, o)) };
  }

  private key(t: ResourceType, namespace: string | undefined, name: string): string {
    return `${typeKey(t)}|${t.namespaced ? namespace ?? '' : ''}|${name}`;
  }

  /** A stored object as a read returns it: a copy, with the schema's defaults (as the server applies them on read). */
  private read(t: ResourceType, o: KubeObject): KubeObject {
    const copy = clone(o);
    if (t.schema) applyDefaults(copy, t.schema);
    return copy;
  }

  /** The watch event a watcher sees for `e`, if any (a selector may turn MODIFIED into ADDED or DELETED). */
  private seen(w: Watcher, e: WatchEvent): { type: WatchEvent['type']; object: KubeObject } | undefined {
    if (e.typeKey !== w.typeKey || (w.namespace !== undefined && e.namespace !== w.namespace)) return undefined;
    const now = w.matches(e.object);
    if (e.type !== 'MODIFIED' || !e.old) return now ? { type: e.type, object: e.object } : undefined;
    const before = w.matches(e.old);
    if (now) return { type: before ? 'MODIFIED' : 'ADDED', object: e.object };
    // As the watch cache answers it: the object as it was before (the last state that matched), at the event's resourceVersion.
    return before ? { type: 'DELETED', object: { ...e.old, metadata: { ...e.old.metadata, resourceVersion: e.object.metadata.resourceVersion } } } : undefined;
  }

  private emit(t: ResourceType, type: WatchEvent['type'], object: KubeObject, old?: KubeObject): void {
    const event: WatchEvent = { rv: Number(object.metadata.resourceVersion), type, typeKey: typeKey(t), namespace: object.metadata.namespace, object: this.read(t, object), ...(old ? { old: this.read(t, old) } : {}) };
    this.log.push(event);
    for (const w of this.watchers) {
      const seen = this.seen(w, event);
      if (!seen) continue;
      this.sendOnWatch(w, `${JSON.stringify(seen)}\n`);
    }
  }

  /** Writes a line on a watch, or keeps it for later while that watch is held (holdWatches). */
  private sendOnWatch(w: Watcher, line: string): void {
    if (this.held && (!this.held.path || this.held.path.test(w.path))) this.held.lines.push({ w, line });
    else w.res.write(line);
  }

  private bump(o: KubeObject): void {
    this.rv += 1;
    o.metadata.resourceVersion = String(this.rv);
  }

  /**
   * Decodes a written body, in place, as the server's decoder does: the fields its type does not
   * have (its CRD's schema for a custom resource, its Go struct for a built-in type, ObjectMeta for
   * `metadata`) are dropped, and reported as `context.fieldValidation` says: a warning (Warn, the
   * default), nothing (Ignore), or a 400 BadRequest naming them all (Strict). A value of the wrong
   * type in a built-in object is a 400 too.
   */
  private decode(t: ResourceType, o: KubeObject, context: WriteContext): Status | undefined {
    const unknown: string[] = [];
    const cannot = `${t.kind} in version "${t.version}" cannot be handled as a ${t.kind}`;
    if (t.schema) prune(o, t.schema, true, unknown);
    else {
      for (const k of Object.keys(o.metadata ?? {})) if (!OBJECT_META_FIELDS.has(k)) unknown.push(`metadata.${k}`);
      o.metadata = pruneObjectMeta(o.metadata) as KubeObject['metadata'];
      const struct = BUILT_IN_STRUCTS[typeKey(t)];
      if (struct) {
        try {
          decodeGo(o, struct, '', unknown);
        } catch (err) {
          if (err instanceof UndecodableError) return status(400, 'BadRequest', `${cannot}: ${err.message}`);
          throw err;
        }
      }
    }
    if (unknown.length === 0 || context.fieldValidation === 'Ignore') return undefined;
    if (context.fieldValidation === 'Strict') return status(400, 'BadRequest', `${cannot}: strict decoding error: ${unknown.map((f) => `unknown field "${f}"`).join(', ')}`);
    context.warnings.push(...unknown.map((f) => `unknown field "${f}"`));
    return undefined;
  }

  /**
   * Admits a decoded body as the server does for its type: metadata reduced to ObjectMeta; for a
   * custom resource, the schema's defaults; for a built-in type, the defaults of its Go type and the
   * encoding of what is stored (kube-builtin.ts: omitempty zeros dropped). Returns the field errors.
   */
  private admit(t: ResourceType, o: KubeObject, statusOnly: boolean): FieldError[] {
    o.metadata = pruneObjectMeta(o.metadata) as KubeObject['metadata'];
    const meta = statusOnly ? [] : metaErrors(o);
    if (t.schema) {
      prune(o, t.schema, true);
      applyDefaults(o, t.schema);
      // Before 1.30 (pre130) a status write validated the whole object, as any other write.
      return [...meta, ...validateCustomResource(o, t.schema, statusOnly && !this.wholeObjectOnStatus ? 'status' : undefined)];
    }
    const struct = BUILT_IN_STRUCTS[typeKey(t)];
    if (t.group === 'batch' && t.plural === 'cronjobs') defaultCronJob(o);
    if (struct) encodeGo(o, struct);
    if (t.group === 'batch' && t.plural === 'cronjobs') return [...meta, ...validateCronJob(o)];
    if (t.group === '' && t.plural === 'events') return [...meta, ...eventErrors(o)];
    if (t.group === 'coordination.k8s.io' && t.plural === 'leases') return [...meta, ...leaseErrors(o)];
    return meta;
  }

  private create(t: ResourceType, namespace: string | undefined, body: KubeObject, context: WriteContext = lenient()): KubeObject | Status {
    if (!body || typeof body !== 'object' || typeof body.metadata !== 'object' || body.metadata === null) {
      return invalid(t, '', [fieldErrors.required('metadata.name', 'name or generateName is required')]);
    }
    const typeMeta = badTypeMeta(t, body);
    if (typeMeta) return typeMeta;
    if (t.namespaced && body.metadata.namespace && body.metadata.namespace !== namespace) {
      return status(400, 'BadRequest', 'the namespace of the provided object does not match the namespace sent on the request');
    }
    const invalidTime = badMicroTime(t, body);
    if (invalidTime) return invalidTime;
    const generateName = body.metadata.generateName;
    let name = body.metadata.name;
    if (!name && typeof generateName === 'string' && generateName) name = generatedName(generateName);
    if (!name) return invalid(t, '', [fieldErrors.required('metadata.name', 'name or generateName is required')]);
    const o: KubeObject = {
      ...clone(body),
      apiVersion: t.group ? `${t.group}/${t.version}` : t.version,
      kind: t.kind,
      metadata: {
        ...clone(body.metadata),
        name,
        ...(t.namespaced ? { namespace } : {}),
        uid: randomUUID(),
        creationTimestamp: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
        generation: 1,
      },
    };
    delete o.metadata.deletionTimestamp;
    delete o.metadata.deletionGracePeriodSeconds;
    delete o.metadata.resourceVersion;
    if (!t.namespaced) delete o.metadata.namespace;
    const refused = this.decode(t, o, context);
    if (refused) return refused;
    if (t.statusSubresource) delete o.status;
    const undecodable = decodeQuantities(t, o);
    if (undecodable) return undecodable;
    const refusedByLifecycle = this.namespaceLifecycle(t, namespace, name);
    if (refusedByLifecycle) return refusedByLifecycle;
    const errors = [...nameErrors(t, name), ...this.admit(t, o, false)];
    if (errors.length > 0) return invalid(t, name, errors);
    const key = this.key(t, namespace, name);
    if (this.objects.has(key)) return status(409, 'AlreadyExists', `${t.plural}${t.group ? `.${t.group}` : ''} "${name}" already exists`);
    delete o.metadata.managedFields;
    const managed = managedFieldsAfter(t, undefined, o, context.manager, false);
    if (managed.length) o.metadata.managedFields = managed;
    this.bump(o);
    this.store(key, o);
    this.emit(t, 'ADDED', o);
    const answer = this.read(t, o);
    this.collectOrphan(t, o);
    return answer;
  }

  /**
   * The NamespaceLifecycle admission plugin on a create (a mutating admission step: before the
   * object is validated): no new object in a namespace that does not exist (404 NotFound
   * `namespaces "<ns>" not found`, the Status of the plugin's live lookup of the Namespace), nor in
   * one being deleted (403 Forbidden).
   */
  private namespaceLifecycle(t: ResourceType, namespace: string | undefined, name: string): Status | undefined {
    if (!t.namespaced || !namespace) return undefined;
    const ns = this.objects.get(this.key(this.typeOf('v1', 'namespaces'), undefined, namespace));
    if (!ns) return { ...status(404, 'NotFound', `namespaces "${namespace}" not found`), details: { name: namespace, kind: 'namespaces' } } as Status;
    if (ns.metadata.deletionTimestamp) {
      return status(403, 'Forbidden', `${t.plural}${t.group ? `.${t.group}` : ''} "${name}" is forbidden: unable to create new content in namespace ${namespace} because it is being terminated`);
    }
    return undefined;
  }

  private replace(t: ResourceType, namespace: string | undefined, name: string, body: KubeObject, statusOnly: boolean, context: WriteContext = lenient()): KubeObject | Status {
    if (!body || typeof body !== 'object' || typeof body.metadata !== 'object' || body.metadata === null) {
      return status(400, 'BadRequest', `the name of the object () does not match the name on the URL (${name})`);
    }
    const typeMeta = badTypeMeta(t, body);
    if (typeMeta) return typeMeta;
    if (body.metadata.name !== name) return status(400, 'BadRequest', `the name of the object (${body.metadata.name ?? ''}) does not match the name on the URL (${name})`);
    if (t.namespaced && body.metadata.namespace && body.metadata.namespace !== namespace) {
      return status(400, 'BadRequest', 'the namespace of the provided object does not match the namespace sent on the request');
    }
    const invalidTime = badMicroTime(t, body);
    if (invalidTime) return invalidTime;
    const key = this.key(t, namespace, name);
    const current = this.objects.get(key);
    if (!current) return status(404, 'NotFound', `${t.plural}${t.group ? `.${t.group}` : ''} "${name}" not found`);
    if (t.schema && !body.metadata.resourceVersion) {
      return invalid(t, name, [{ reason: 'FieldValueInvalid', field: 'metadata.resourceVersion', message: 'Invalid value: 0x0: must be specified for an update' }]);
    }
    // The uid of an updated object is a precondition (kube-apiserver's defaultUpdatedObjectInfo): another object of that name is a 409.
    if (body.metadata.uid && body.metadata.uid !== current.metadata.uid) {
      return status(409, 'Conflict', `Operation cannot be fulfilled on ${t.plural}${t.group ? `.${t.group}` : ''} "${name}": Precondition failed: UID in precondition: ${body.metadata.uid}, UID in object meta: ${current.metadata.uid}`);
    }
    if (body.metadata.resourceVersion && body.metadata.resourceVersion !== current.metadata.resourceVersion) {
      return status(409, 'Conflict', `Operation cannot be fulfilled on ${t.plural}${t.group ? `.${t.group}` : ''} "${name}": the object has been modified; please apply your changes to the latest version and try again`);
    }
    let next: KubeObject;
    if (statusOnly) {
      next = { ...clone(current), status: clone(body.status) };
      if (next.status === undefined) delete next.status;
    } else {
      const keep = { uid: current.metadata.uid, creationTimestamp: current.metadata.creationTimestamp, generation: current.metadata.generation, deletionTimestamp: current.metadata.deletionTimestamp, namespace: current.metadata.namespace, name };
      next = { ...clone(body), apiVersion: current.apiVersion, kind: current.kind, metadata: { ...clone(body.metadata), ...keep } };
      if (!keep.deletionTimestamp) delete next.metadata.deletionTimestamp;
      if (current.metadata.deletionGracePeriodSeconds !== undefined) next.metadata.deletionGracePeriodSeconds = current.metadata.deletionGracePeriodSeconds;
      else delete next.metadata.deletionGracePeriodSeconds;
      if (t.namespaced === false) delete next.metadata.namespace;
      if (t.statusSubresource) {
        if (current.status === undefined) delete next.status;
        else next.status = clone(current.status);
      }
    }
    const refused = this.decode(t, next, context);
    if (refused) return refused;
    const undecodable = decodeQuantities(t, next);
    if (undecodable) return undecodable;
    const errors = this.admit(t, next, statusOnly);
    if (errors.length > 0) return invalid(t, name, errors);
    if (!statusOnly) {
      if (current.metadata.deletionTimestamp) {
        const added = (next.metadata.finalizers ?? []).filter((f) => !(current.metadata.finalizers ?? []).includes(f));
        if (added.length > 0) return status(422, 'Invalid', `metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers ${JSON.stringify(added)}`);
      }
      if (specPart(next) !== specPart(current)) next.metadata.generation = (current.metadata.generation ?? 1) + 1;
    }
    next.metadata.resourceVersion = current.metadata.resourceVersion;
    // The managedFields the client sent back are not taken (what it read, or older); the server's own follow the write.
    if (current.metadata.managedFields === undefined) delete next.metadata.managedFields;
    else next.metadata.managedFields = clone(current.metadata.managedFields);
    if (JSON.stringify(next) === JSON.stringify(current)) return this.read(t, current); // a no-op update writes nothing
    const managed = managedFieldsAfter(t, current, next, context.manager, statusOnly);
    if (managed.length) next.metadata.managedFields = managed;
    if (next.metadata.deletionTimestamp && (next.metadata.finalizers ?? []).length === 0 && !isNamespaceType(t)) {
      // The update that empties the finalizers of an object being deleted is not written: the
      // object is deleted as it is stored (its DELETED event, and the answer, still carry the finalizers).
      const last = clone(current);
      this.bump(last);
      this.finish(t, key, last);
      return this.read(t, last);
    }
    this.bump(next);
    this.store(key, next);
    this.emit(t, 'MODIFIED', next, current);
    const answer = this.read(t, next);
    if (this.objects.get(key) === next) this.collectOrphan(t, next);
    return answer;
  }

  /**
   * The garbage collector's view of a dependent just written: when every ownerReference names an
   * absent owner (no object of that kind and name in the dependent's namespace, or one of another
   * uid), the dependent is deleted (after the write was answered, as the collector works afterwards).
   * An owner of a type the stand-in does not serve is taken as present.
   */
  private collectOrphan(t: ResourceType, o: KubeObject): void {
    const refs = o.metadata.ownerReferences ?? [];
    if (refs.length === 0) return;
    const absent = refs.every((r) => {
      const [group, version] = r.apiVersion.includes('/') ? r.apiVersion.split('/') : ['', r.apiVersion];
      const ownerType = [...this.types.values()].find((x) => x.group === group && x.version === version && x.kind === r.kind);
      if (!ownerType) return false;
      const owner = this.objects.get(this.key(ownerType, o.metadata.namespace, r.name));
      return owner?.metadata.uid !== r.uid;
    });
    if (absent) this.delete(t, o.metadata.namespace, o.metadata.name);
  }

  private delete(t: ResourceType, namespace: string | undefined, name: string, options?: { preconditions?: { uid?: string; resourceVersion?: string } }): KubeObject | Status {
    const key = this.key(t, namespace, name);
    const current = this.objects.get(key);
    const what = `${t.plural}${t.group ? `.${t.group}` : ''} "${name}"`;
    if (!current) return status(404, 'NotFound', `${what} not found`);
    // DeleteOptions' preconditions: the object must still be the one the client means.
    const { uid, resourceVersion } = options?.preconditions ?? {};
    if (uid !== undefined && uid !== current.metadata.uid) {
      return status(409, 'Conflict', `Operation cannot be fulfilled on ${what}: Precondition failed: UID in precondition: ${uid}, UID in object meta: ${current.metadata.uid}`);
    }
    if (resourceVersion !== undefined && resourceVersion !== current.metadata.resourceVersion) {
      return status(409, 'Conflict', `Operation cannot be fulfilled on ${what}: Precondition failed: ResourceVersion in precondition: ${resourceVersion}, ResourceVersion in object meta: ${current.metadata.resourceVersion}`);
    }
    if (isNamespaceType(t)) return this.terminate(t, key, current);
    if ((current.metadata.finalizers ?? []).length > 0) {
      if (current.metadata.deletionTimestamp) return this.read(t, current);
      const next = clone(current);
      next.metadata.deletionTimestamp = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
      next.metadata.deletionGracePeriodSeconds = 0;
      // The first deletion of an object with finalizers is a change of its generation too.
      if (next.metadata.generation !== undefined) next.metadata.generation += 1;
      this.bump(next);
      this.store(key, next);
      this.emit(t, 'MODIFIED', next, current);
      return this.read(t, next);
    }
    this.bump(current);
    this.finish(t, key, current);
    return this.read(t, current);
  }

  /** Removes an object for good and collects its dependents (background cascading deletion); the last one of a Namespace being deleted takes it along. */
  private finish(t: ResourceType, key: string, o: KubeObject): void {
    this.unstore(key, Number(o.metadata.resourceVersion));
    this.emit(t, 'DELETED', o);
    for (const [depKey, dep] of [...this.objects.entries()]) {
      if ((dep.metadata.ownerReferences ?? []).some((r) => r.uid === o.metadata.uid)) {
        const depType = this.types.get(depKey.split('|')[0]!)!;
        this.delete(depType, dep.metadata.namespace, dep.metadata.name);
      }
    }
    if (t.namespaced && o.metadata.namespace) this.reapNamespace(o.metadata.namespace);
  }

  /**
   * The deletion of a Namespace, as kube-apiserver and the namespace controller carry it out: the
   * Namespace is Terminating (`deletionTimestamp`, `status.phase`), everything in it is deleted
   * (what has finalizers waits for them: the Namespace with it), and the Namespace goes once it is
   * empty (its `kubernetes` finalizer taken off). Meanwhile nothing new is created in it (403).
   */
  private terminate(t: ResourceType, key: string, current: KubeObject): KubeObject {
    const name = current.metadata.name;
    if (!current.metadata.deletionTimestamp) {
      const next = clone(current);
      next.metadata.deletionTimestamp = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
      next.status = { ...next.status, phase: 'Terminating' };
      this.bump(next);
      this.store(key, next);
      this.emit(t, 'MODIFIED', next, current);
      for (const [k, o] of [...this.objects.entries()]) {
        const type = this.types.get(k.split('|')[0]!)!;
        if (type.namespaced && o.metadata.namespace === name && this.objects.has(k)) this.delete(type, name, o.metadata.name);
      }
    }
    const terminating = this.objects.get(key);
    this.reapNamespace(name);
    return this.read(t, this.objects.get(key) ?? terminating!);
  }

  /** Removes a Namespace being deleted once nothing is left in it (and no finalizer of its own holds it). */
  private reapNamespace(name: string): void {
    const t = this.typeOf('v1', 'namespaces');
    const key = this.key(t, undefined, name);
    const ns = this.objects.get(key);
    if (!ns?.metadata.deletionTimestamp || (ns.metadata.finalizers ?? []).length > 0) return;
    for (const [k, o] of this.objects) if (o.metadata.namespace === name && this.types.get(k.split('|')[0]!)?.namespaced) return;
    const last = clone(ns);
    this.bump(last);
    this.finish(t, key, last);
  }

  /** The selectors of a list or watch; a malformed one is a 400 Status. */
  private selectors(t: ResourceType, query: Record<string, string>): ((o: KubeObject) => boolean) | Status {
    let labels: LabelPredicate;
    let fields: ObjectPredicate;
    const supported = ['metadata.name', 'metadata.namespace'];
    if (t.group === '' && t.plural === 'events') {
      supported.push('involvedObject.kind', 'involvedObject.namespace', 'involvedObject.name', 'involvedObject.uid', 'involvedObject.apiVersion', 'involvedObject.resourceVersion', 'involvedObject.fieldPath', 'reason', 'reportingComponent', 'source', 'type');
    }
    try {
      labels = parseLabelSelector(query.labelSelector);
      fields = parseFieldSelector(query.fieldSelector, supported);
    } catch (err) {
      if (err instanceof SelectorError) return status(400, 'BadRequest', err.message);
      throw err;
    }
    return (o) => labels(o.metadata.labels) && fields(o as unknown as Record<string, unknown>);
  }

  // ---- HTTP -------------------------------------------------------------------------------------

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://stand-in');
    const query = Object.fromEntries(url.searchParams.entries());
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const raw = Buffer.concat(chunks).toString('utf8');
    let body: unknown;
    try {
      body = raw ? JSON.parse(raw) : undefined;
    } catch {
      return this.send(req, res, url, query, raw, 400, status(400, 'BadRequest', 'the body is not JSON'));
    }
    const method = req.method ?? 'GET';
    if (!String(req.headers.authorization ?? '').startsWith('Bearer ')) {
      return this.send(req, res, url, query, body, 401, status(401, 'Unauthorized', 'Unauthorized'));
    }
    const watching = query.watch === 'true' || query.watch === '1';
    const failure = this.failures.find(
      (f) => f.method === method && f.path.test(url.pathname) && f.times > 0 && (f.on === 'any' || (f.on === 'watch') === watching),
    );
    if (failure) {
      failure.times -= 1;
      const reason = failure.status === 409 ? 'Conflict' : failure.status === 404 ? 'NotFound' : 'InternalError';
      return this.send(req, res, url, query, body, failure.status, status(failure.status, reason, `scripted ${failure.status} from the stand-in`));
    }

    const stall = this.stalls.find((st) => st.method === method && st.path.test(url.pathname) && st.times > 0 && !watching);
    if (stall) {
      stall.times -= 1;
      stall.held += 1;
      const onClose = () => (stall.abandoned += 1);
      res.once('close', onClose);
      await stall.released;
      res.off('close', onClose);
    }

    const route = this.route(url.pathname);
    if (!route) return this.send(req, res, url, query, body, 404, status(404, 'NotFound', `the stand-in does not serve ${url.pathname}`));
    const { type: t, namespace, name, subresource } = route;
    const token = String(req.headers.authorization).slice('Bearer '.length);
    if (this.rbac && !this.rbac.exempt.has(token)) {
      const resource = subresource ? `${t.plural}/${subresource}` : t.plural;
      const verb = verbOf(method, name !== undefined, watching);
      // A Namespace's own requests are in that namespace (a Role there may grant get on it).
      const inNamespace = t.group === '' && t.plural === 'namespaces' ? name : namespace;
      const granted = (this.rbac.byToken.get(token) ?? this.rbac.grants).some((g) => (g.namespace === undefined || g.namespace === inNamespace) && allows(g.rules, { group: t.group, resource, verb, name }));
      if (!granted) {
        const where = inNamespace ? ` in the namespace "${inNamespace}"` : ' at the cluster scope';
        const what = `${t.plural}${t.group ? `.${t.group}` : ''}${name ? ` "${name}"` : ''}`;
        return this.send(req, res, url, query, body, 403, status(403, 'Forbidden', `${what} is forbidden: User "${token}" cannot ${verb} resource "${resource}" in API group "${t.group}"${where}`));
      }
    }

    if (method === 'GET' && !name) {
      const matches = this.selectors(t, query);
      if (typeof matches !== 'function') return this.send(req, res, url, query, body, 400, matches);
      if (watching) return this.watch(req, res, url, query, t, namespace, matches);
      const hook = this.listHooks.find((h) => h.times > 0 && h.path.test(url.pathname) && (h.continued === undefined || h.continued === Boolean(query.continue)));
      if (hook) {
        hook.times -= 1;
        hook.action(query);
      }
      const list = this.listOf(t, namespace, query, matches);
      const code = (list as { kind?: string; code?: number }).kind === 'Status' ? (list as Status).code : 200;
      return this.send(req, res, url, query, body, code, list);
    }
    let out: unknown;
    const context: WriteContext = {
      fieldValidation: query.fieldValidation === 'Strict' || query.fieldValidation === 'Ignore' ? query.fieldValidation : 'Warn',
      warnings: [],
      manager: query.fieldManager || String(req.headers['user-agent'] ?? '').split('/')[0] || 'unknown',
    };
    if (method === 'GET') {
      const o = this.objects.get(this.key(t, namespace, name!));
      out = o ? this.read(t, o) : status(404, 'NotFound', `${t.plural}${t.group ? `.${t.group}` : ''} "${name}" not found`);
    } else if (method === 'POST' && !name) {
      out = this.create(t, namespace, body as KubeObject, context);
    } else if (method === 'PUT' && name) {
      if (subresource && (subresource !== 'status' || !t.statusSubresource)) out = status(404, 'NotFound', `no subresource ${subresource}`);
      else out = this.replace(t, namespace, name, body as KubeObject, subresource === 'status', context);
    } else if (method === 'PATCH' && name) {
      const contentType = String(req.headers['content-type'] ?? '');
      if (!contentType.startsWith('application/merge-patch+json')) {
        out = status(415, 'UnsupportedMediaType', `the stand-in takes merge patches only, not ${contentType}`);
      } else if (subresource && (subresource !== 'status' || !t.statusSubresource)) {
        out = status(404, 'NotFound', `no subresource ${subresource}`);
      } else {
        const current = this.objects.get(this.key(t, namespace, name));
        if (!current) out = status(404, 'NotFound', `${t.plural}${t.group ? `.${t.group}` : ''} "${name}" not found`);
        else {
          const merged = mergePatch(this.read(t, current), body) as KubeObject;
          const rvGiven = (body as KubeObject | undefined)?.metadata?.resourceVersion;
          merged.metadata.resourceVersion = rvGiven ?? current.metadata.resourceVersion;
          out = this.replace(t, namespace, name, merged, subresource === 'status', context);
        }
      }
    } else if (method === 'DELETE' && name) {
      out = this.delete(t, namespace, name, body as { preconditions?: { uid?: string; resourceVersion?: string } } | undefined);
    } else {
      out = status(405, 'MethodNotAllowed', `${method} ${url.pathname}`);
    }
    const code = (out as { kind?: string; code?: number }).kind === 'Status' ? (out as { code: number }).code : method === 'POST' ? 201 : 200;
    return this.send(req, res, url, query, body, code, out, context.warnings);
  }

  private route(pathname: string): { type: ResourceType; namespace?: string; name?: string; subresource?: string } | undefined {
    const parts = pathname.split('/').filter(Boolean);
    let group: string;
    let version: string;
    let rest: string[];
    if (parts[0] === 'api') {
      group = '';
      version = parts[1]!;
      rest = parts.slice(2);
    } else if (parts[0] === 'apis') {
      group = parts[1]!;
      version = parts[2]!;
      rest = parts.slice(3);
    } else return undefined;
    let namespace: string | undefined;
    if (rest[0] === 'namespaces' && rest.length >= 3) {
      namespace = rest[1];
      rest = rest.slice(2);
    }
    const type = this.types.get(typeKey({ group, version, plural: rest[0] ?? '' }));
    if (!type) return undefined;
    if (!type.namespaced) namespace = undefined;
    return { type, namespace, name: rest[1], subresource: rest[2] };
  }

  private watch(req: IncomingMessage, res: ServerResponse, url: URL, query: Record<string, string>, t: ResourceType, namespace: string | undefined, matches: (o: KubeObject) => boolean): void {
    const from = Number(query.resourceVersion ?? '0');
    this.requests.push({ method: 'GET', path: url.pathname, query, body: undefined, status: 200, token: tokenOf(req) });
    res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' });
    res.flushHeaders();
    if (query.resourceVersion && query.resourceVersion !== '0' && from < this.compactedTo) {
      // kube-apiserver answers 200 and reports the expiry inside the stream, then ends it.
      const expired = status(410, 'Expired', `too old resource version: ${from} (${this.compactedTo})`);
      res.end(`${JSON.stringify({ type: 'ERROR', object: expired })}\n`);
      return;
    }
    const w: Watcher = { typeKey: typeKey(t), namespace, res, matches, path: url.pathname };
    if (!query.resourceVersion || query.resourceVersion === '0') {
      // No resourceVersion, or "0": the state now, as synthetic ADDED events of every matching object, then what changes.
      for (const o of this.itemsOf(t, namespace)) if (matches(o)) res.write(`${JSON.stringify({ type: 'ADDED', object: this.read(t, o) })}\n`);
    } else {
      for (const e of this.log) {
        if (e.rv <= from) continue;
        const seen = this.seen(w, e);
        if (seen) res.write(`${JSON.stringify(seen)}\n`);
      }
    }
    this.watchers.add(w);
    req.on('close', () => this.watchers.delete(w));
  }

  private send(req: IncomingMessage, res: ServerResponse, url: URL, query: Record<string, string>, body: unknown, code: number, out: unknown, warnings: string[] = []): void {
    this.requests.push({ method: req.method ?? 'GET', path: url.pathname, query, body, status: code, token: tokenOf(req), ...(warnings.length ? { warnings } : {}) });
    // As kube-apiserver words them: `299 - "<text>"`, one header each.
    const headers: Record<string, string | string[]> = { 'content-type': 'application/json' };
    if (warnings.length) headers.warning = warnings.map((w) => `299 - ${JSON.stringify(w)}`);
    res.writeHead(code, headers);
    res.end(JSON.stringify(out));
  }
}
