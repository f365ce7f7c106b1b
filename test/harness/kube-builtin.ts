/**
 * Part of the SCRIPTED KUBERNETES API STAND-IN (test/harness/kube-api.ts): what kube-apiserver does
 * to the body of a BUILT-IN object it decodes into its Go struct (k8s.io/api), for the kinds the hub
 * writes: batch/v1 CronJob (with its job and pod templates), coordination.k8s.io/v1 Lease, core v1
 * Event. In the server's order:
 *
 * 1. decode: a field the struct does not have is UNKNOWN: dropped, and reported (a `Warning` header
 *    by default, `fieldValidation=Warn`; a 400 `strict decoding error: unknown field "spec.foo"`
 *    with `fieldValidation=Strict`; nothing with `Ignore`). A JSON value of the wrong type is a 400
 *    (`json: cannot unmarshal …`). A null is no value (nil);
 * 2. defaults (k8s.io/kubernetes pkg/apis/{batch,core}/v1/defaults.go, applied to a CronJob as its
 *    generated SetObjectDefaults_CronJob does): CronJob concurrencyPolicy Allow, suspend false,
 *    history limits 3 and 1; pod template dnsPolicy ClusterFirst, restartPolicy Always,
 *    securityContext {}, terminationGracePeriodSeconds 30, schedulerName default-scheduler;
 *    containers imagePullPolicy (Always for a `:latest` or untagged image, else IfNotPresent),
 *    terminationMessagePath /dev/termination-log, terminationMessagePolicy File; ports protocol
 *    TCP; fieldRef apiVersion v1; probes timeout 1, period 10, success 1, failure 3, httpGet path /
 *    and scheme HTTP; secret, configMap, downwardAPI and projected volumes defaultMode 420; a volume
 *    with no source an emptyDir. As in Go, a plain (non-pointer) field holding its zero value (`""`,
 *    0, false) counts as unset and gets the default;
 * 3. encode (what is stored and every read answers): a field tagged `omitempty` holding its zero
 *    value is DROPPED (an env var's `value: ""`, a volumeMount's `readOnly: false`, an empty list or
 *    map); a pointer field keeps its zero (`suspend: false`, `automountServiceAccountToken: false`);
 *    a struct is never omitted (a container's `resources: {}`, a template's `metadata:
 *    {creationTimestamp: null}`, a CronJob's `status: {}`); a field without `omitempty` is written
 *    even unset (`reportingComponent: ""`); a metav1.Time is answered to the second, in UTC.
 *
 * Fields typed `any` below are kept as sent (not decoded): the parts of a pod spec the hub never
 * writes (affinity, lifecycle hooks, most volume sources, …).
 */

export type GoType =
  | { t: 'string' | 'int' | 'bool' | 'quantity' | 'intOrString' | 'time' | 'microTime' | 'any' }
  | { t: 'struct'; name: string; fields: Record<string, GoField> }
  | { t: 'list'; of: GoType }
  | { t: 'map'; of: GoType };

export interface GoField {
  type: GoType;
  /** `json:",omitempty"`: a zero value is not written. */
  omitempty: boolean;
  /** A pointer: nil is not written (with omitempty), a zero value is. */
  pointer: boolean;
}

const str: GoType = { t: 'string' };
const int: GoType = { t: 'int' };
const bool: GoType = { t: 'bool' };
const quantity: GoType = { t: 'quantity' };
const intOrString: GoType = { t: 'intOrString' };
const time: GoType = { t: 'time' };
const microTime: GoType = { t: 'microTime' };
const any: GoType = { t: 'any' };
const list = (of: GoType): GoType => ({ t: 'list', of });
const map = (of: GoType): GoType => ({ t: 'map', of });

/**
 * A struct from its fields, each key marked as its json tag is: `name` (no omitempty), `name?`
 * (omitempty), `name*` (a pointer, omitempty).
 */
function struct(name: string, spec: Record<string, GoType>): GoType {
  const fields: Record<string, GoField> = {};
  for (const [key, type] of Object.entries(spec)) {
    const marker = key.at(-1);
    const field = marker === '?' || marker === '*' ? key.slice(0, -1) : key;
    fields[field] = { type, omitempty: marker === '?' || marker === '*', pointer: marker === '*' };
  }
  return { t: 'struct', name, fields };
}

// ---- k8s.io/api types (the fields of Kubernetes 1.33) ----------------------------------------------

const OBJECT_META = struct('ObjectMeta', {
  'name?': str,
  'generateName?': str,
  'namespace?': str,
  'selfLink?': str,
  'uid?': str,
  'resourceVersion?': str,
  'generation?': int,
  'creationTimestamp?': time,
  'deletionTimestamp*': time,
  'deletionGracePeriodSeconds*': int,
  'labels?': map(str),
  'annotations?': map(str),
  'ownerReferences?': list(any),
  'finalizers?': list(str),
  'managedFields?': list(any),
});

const LOCAL_OBJECT_REFERENCE = struct('LocalObjectReference', { 'name?': str });
const KEY_SELECTOR = (name: string) => struct(name, { 'name?': str, key: str, 'optional*': bool });
const KEY_TO_PATH = struct('KeyToPath', { key: str, path: str, 'mode*': int });
const OBJECT_FIELD_SELECTOR = struct('ObjectFieldSelector', { 'apiVersion?': str, fieldPath: str });
const RESOURCE_FIELD_SELECTOR = struct('ResourceFieldSelector', { 'containerName?': str, resource: str, 'divisor?': quantity });

const ENV_VAR = struct('EnvVar', {
  name: str,
  'value?': str,
  'valueFrom*': struct('EnvVarSource', {
    'fieldRef*': OBJECT_FIELD_SELECTOR,
    'resourceFieldRef*': RESOURCE_FIELD_SELECTOR,
    'configMapKeyRef*': KEY_SELECTOR('ConfigMapKeySelector'),
    'secretKeyRef*': KEY_SELECTOR('SecretKeySelector'),
    'fileKeyRef*': any,
  }),
});

const ENV_FROM_SOURCE = struct('EnvFromSource', {
  'prefix?': str,
  'configMapRef*': struct('ConfigMapEnvSource', { 'name?': str, 'optional*': bool }),
  'secretRef*': struct('SecretEnvSource', { 'name?': str, 'optional*': bool }),
});

const RESOURCE_REQUIREMENTS = struct('ResourceRequirements', { 'limits?': map(quantity), 'requests?': map(quantity), 'claims?': list(any) });

const SECCOMP_PROFILE = struct('SeccompProfile', { type: str, 'localhostProfile*': str });
const APP_ARMOR_PROFILE = struct('AppArmorProfile', { type: str, 'localhostProfile*': str });

const SECURITY_CONTEXT = struct('SecurityContext', {
  'capabilities*': struct('Capabilities', { 'add?': list(str), 'drop?': list(str) }),
  'privileged*': bool,
  'seLinuxOptions*': any,
  'windowsOptions*': any,
  'runAsUser*': int,
  'runAsGroup*': int,
  'runAsNonRoot*': bool,
  'readOnlyRootFilesystem*': bool,
  'allowPrivilegeEscalation*': bool,
  'procMount*': str,
  'seccompProfile*': SECCOMP_PROFILE,
  'appArmorProfile*': APP_ARMOR_PROFILE,
});

const POD_SECURITY_CONTEXT = struct('PodSecurityContext', {
  'seLinuxOptions*': any,
  'windowsOptions*': any,
  'runAsUser*': int,
  'runAsGroup*': int,
  'runAsNonRoot*': bool,
  'supplementalGroups?': list(int),
  'supplementalGroupsPolicy*': str,
  'fsGroup*': int,
  'sysctls?': list(any),
  'fsGroupChangePolicy*': str,
  'seccompProfile*': SECCOMP_PROFILE,
  'appArmorProfile*': APP_ARMOR_PROFILE,
  'seLinuxChangePolicy*': str,
});

const HTTP_GET_ACTION = struct('HTTPGetAction', { 'path?': str, port: intOrString, 'host?': str, 'scheme?': str, 'httpHeaders?': list(any) });

const PROBE = struct('Probe', {
  'exec*': any,
  'httpGet*': HTTP_GET_ACTION,
  'tcpSocket*': any,
  'grpc*': any,
  'initialDelaySeconds?': int,
  'timeoutSeconds?': int,
  'periodSeconds?': int,
  'successThreshold?': int,
  'failureThreshold?': int,
  'terminationGracePeriodSeconds*': int,
});

const CONTAINER = struct('Container', {
  name: str,
  'image?': str,
  'command?': list(str),
  'args?': list(str),
  'workingDir?': str,
  'ports?': list(struct('ContainerPort', { 'name?': str, 'hostPort?': int, containerPort: int, 'protocol?': str, 'hostIP?': str })),
  'envFrom?': list(ENV_FROM_SOURCE),
  'env?': list(ENV_VAR),
  'resources?': RESOURCE_REQUIREMENTS,
  'resizePolicy?': list(any),
  'restartPolicy*': str,
  'volumeMounts?': list(
    struct('VolumeMount', { name: str, 'readOnly?': bool, 'recursiveReadOnly*': str, mountPath: str, 'subPath?': str, 'mountPropagation*': str, 'subPathExpr?': str }),
  ),
  'volumeDevices?': list(any),
  'livenessProbe*': PROBE,
  'readinessProbe*': PROBE,
  'startupProbe*': PROBE,
  'lifecycle*': any,
  'terminationMessagePath?': str,
  'terminationMessagePolicy?': str,
  'imagePullPolicy?': str,
  'securityContext*': SECURITY_CONTEXT,
  'stdin?': bool,
  'stdinOnce?': bool,
  'tty?': bool,
});

const VOLUME = struct('Volume', {
  name: str,
  'emptyDir*': struct('EmptyDirVolumeSource', { 'medium?': str, 'sizeLimit*': quantity }),
  'secret*': struct('SecretVolumeSource', { 'secretName?': str, 'items?': list(KEY_TO_PATH), 'defaultMode*': int, 'optional*': bool }),
  'configMap*': struct('ConfigMapVolumeSource', { 'name?': str, 'items?': list(KEY_TO_PATH), 'defaultMode*': int, 'optional*': bool }),
  'downwardAPI*': struct('DownwardAPIVolumeSource', { 'items?': list(any), 'defaultMode*': int }),
  'projected*': struct('ProjectedVolumeSource', { 'sources?': list(any), 'defaultMode*': int }),
  'persistentVolumeClaim*': any,
  'hostPath*': any,
  'ephemeral*': any,
  'csi*': any,
  'nfs*': any,
  'image*': any,
  'iscsi*': any,
  'gitRepo*': any,
  'awsElasticBlockStore*': any,
  'gcePersistentDisk*': any,
  'azureDisk*': any,
  'azureFile*': any,
  'cephfs*': any,
  'cinder*': any,
  'fc*': any,
  'flexVolume*': any,
  'flocker*': any,
  'glusterfs*': any,
  'photonPersistentDisk*': any,
  'portworxVolume*': any,
  'quobyte*': any,
  'rbd*': any,
  'scaleIO*': any,
  'storageos*': any,
  'vsphereVolume*': any,
});

const POD_SPEC = struct('PodSpec', {
  'volumes?': list(VOLUME),
  'initContainers?': list(CONTAINER),
  containers: list(CONTAINER),
  'ephemeralContainers?': list(any),
  'restartPolicy?': str,
  'terminationGracePeriodSeconds*': int,
  'activeDeadlineSeconds*': int,
  'dnsPolicy?': str,
  'nodeSelector?': map(str),
  'serviceAccountName?': str,
  'serviceAccount?': str,
  'automountServiceAccountToken*': bool,
  'nodeName?': str,
  'hostNetwork?': bool,
  'hostPID?': bool,
  'hostIPC?': bool,
  'shareProcessNamespace*': bool,
  'securityContext*': POD_SECURITY_CONTEXT,
  'imagePullSecrets?': list(LOCAL_OBJECT_REFERENCE),
  'hostname?': str,
  'subdomain?': str,
  'affinity*': any,
  'schedulerName?': str,
  'tolerations?': list(struct('Toleration', { 'key?': str, 'operator?': str, 'value?': str, 'effect?': str, 'tolerationSeconds*': int })),
  'hostAliases?': list(any),
  'priorityClassName?': str,
  'priority*': int,
  'dnsConfig*': any,
  'readinessGates?': list(any),
  'runtimeClassName*': str,
  'enableServiceLinks*': bool,
  'preemptionPolicy*': str,
  'overhead?': map(quantity),
  'topologySpreadConstraints?': list(any),
  'setHostnameAsFQDN*': bool,
  'os*': any,
  'hostUsers*': bool,
  'schedulingGates?': list(any),
  'resourceClaims?': list(any),
  'resources*': RESOURCE_REQUIREMENTS,
});

const POD_TEMPLATE_SPEC = struct('PodTemplateSpec', { 'metadata?': OBJECT_META, 'spec?': POD_SPEC });

const JOB_SPEC = struct('JobSpec', {
  'parallelism*': int,
  'completions*': int,
  'activeDeadlineSeconds*': int,
  'podFailurePolicy*': any,
  'successPolicy*': any,
  'backoffLimit*': int,
  'backoffLimitPerIndex*': int,
  'maxFailedIndexes*': int,
  'selector*': any,
  'manualSelector*': bool,
  template: POD_TEMPLATE_SPEC,
  'ttlSecondsAfterFinished*': int,
  'completionMode*': str,
  'suspend*': bool,
  'podReplacementPolicy*': str,
  'managedBy*': str,
});

/** The top level of an object: `metadata` is decoded by the stand-in itself (kube-schema.ts's OBJECT_META_FIELDS). */
const TOP_META = { apiVersion: str, kind: str, metadata: any } as const;

export const CRONJOB = struct('CronJob', {
  ...TOP_META,
  'spec?': struct('CronJobSpec', {
    schedule: str,
    'timeZone*': str,
    'startingDeadlineSeconds*': int,
    'concurrencyPolicy?': str,
    'suspend*': bool,
    jobTemplate: struct('JobTemplateSpec', { 'metadata?': OBJECT_META, 'spec?': JOB_SPEC }),
    'successfulJobsHistoryLimit*': int,
    'failedJobsHistoryLimit*': int,
  }),
  'status?': struct('CronJobStatus', { 'active?': list(any), 'lastScheduleTime*': time, 'lastSuccessfulTime*': time }),
});

export const LEASE = struct('Lease', {
  ...TOP_META,
  'spec?': struct('LeaseSpec', {
    'holderIdentity*': str,
    'leaseDurationSeconds*': int,
    'acquireTime*': microTime,
    'renewTime*': microTime,
    'leaseTransitions*': int,
    'strategy*': str,
    'preferredHolder*': str,
  }),
});

const OBJECT_REFERENCE = struct('ObjectReference', { 'kind?': str, 'namespace?': str, 'name?': str, 'uid?': str, 'apiVersion?': str, 'resourceVersion?': str, 'fieldPath?': str });

export const EVENT = struct('Event', {
  ...TOP_META,
  involvedObject: OBJECT_REFERENCE,
  'reason?': str,
  'message?': str,
  'source?': struct('EventSource', { 'component?': str, 'host?': str }),
  'firstTimestamp?': time,
  'lastTimestamp?': time,
  'count?': int,
  'type?': str,
  'eventTime?': microTime,
  'series*': any,
  'action?': str,
  'related*': OBJECT_REFERENCE,
  reportingComponent: str,
  reportingInstance: str,
});

/** The Go struct of each built-in type the stand-in decodes, by `<group>/<version>/<plural>`. */
export const BUILT_IN_STRUCTS: Record<string, GoType> = {
  'batch/v1/cronjobs': CRONJOB,
  'coordination.k8s.io/v1/leases': LEASE,
  '/v1/events': EVENT,
};

// ---- decoding -----------------------------------------------------------------------------------

type Obj = Record<string, unknown>;
const isObject = (v: unknown): v is Obj => v !== null && typeof v === 'object' && !Array.isArray(v);

/** A body the server cannot decode (a 400 BadRequest): the message after `<Kind> in version "v1" cannot be handled as a <Kind>: `. */
export class UndecodableError extends Error {}

const GO_TYPE_NAMES: Record<string, string> = { string: 'string', int: 'int32', bool: 'bool', time: 'v1.Time', microTime: 'v1.MicroTime' };
const jsonType = (v: unknown) => (Array.isArray(v) ? 'array' : v === null ? 'null' : typeof v === 'object' ? 'object' : typeof v);
const RFC3339 = /^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;

/**
 * Decodes `value` into `type` as the server's JSON decoder does, in place where it can: unknown
 * fields are removed and their paths pushed to `unknown`; nulls become no value; a value of the wrong
 * JSON type throws UndecodableError. Returns the decoded value (undefined: none).
 */
export function decodeGo(value: unknown, type: GoType, path: string, unknown: string[], goPath = ''): unknown {
  if (value === null || value === undefined) return undefined;
  const mismatch = (goType: string): never => {
    throw new UndecodableError(`json: cannot unmarshal ${jsonType(value)} into Go struct field ${goPath} of type ${goType}`);
  };
  switch (type.t) {
    case 'any':
      return value;
    case 'string':
      return typeof value === 'string' ? value : mismatch('string');
    case 'int':
      return typeof value === 'number' && Number.isInteger(value) ? value : mismatch('int32');
    case 'bool':
      return typeof value === 'boolean' ? value : mismatch('bool');
    case 'quantity':
      // Its text is checked (and canonicalised) by kube-quantity.ts.
      return typeof value === 'string' || typeof value === 'number' ? value : mismatch('resource.Quantity');
    case 'intOrString':
      return typeof value === 'string' || (typeof value === 'number' && Number.isInteger(value)) ? value : mismatch('intstr.IntOrString');
    case 'time':
    case 'microTime': {
      // MicroTime's fixed six-digit layout is checked by the stand-in (badMicroTime); Time takes RFC 3339.
      if (typeof value !== 'string') return mismatch(GO_TYPE_NAMES[type.t]!);
      if (type.t === 'time') {
        if (!RFC3339.test(value) || Number.isNaN(Date.parse(value))) throw new UndecodableError(`parsing time ${JSON.stringify(value)} as "2006-01-02T15:04:05Z07:00": cannot parse ${goPath}`);
        return `${new Date(value).toISOString().slice(0, 19)}Z`;
      }
      return value;
    }
    case 'list': {
      if (!Array.isArray(value)) return mismatch(`[]${goTypeName(type.of)}`);
      return value.map((item, i) => decodeGo(item, type.of, `${path}[${i}]`, unknown, goPath) ?? zeroOf(type.of));
    }
    case 'map': {
      if (!isObject(value)) return mismatch(`map[string]${goTypeName(type.of)}`);
      for (const [k, v] of Object.entries(value)) value[k] = decodeGo(v, type.of, `${path}.${k}`, unknown, goPath) ?? zeroOf(type.of);
      return value;
    }
    case 'struct': {
      if (!isObject(value)) return mismatch(type.name);
      for (const key of Object.keys(value)) {
        const field = type.fields[key];
        const at = path ? `${path}.${key}` : key;
        if (!field) {
          unknown.push(at);
          delete value[key];
          continue;
        }
        const decoded = decodeGo(value[key], field.type, at, unknown, goPath ? `${goPath}.${key}` : `${type.name}.${key}`);
        if (decoded === undefined) delete value[key];
        else value[key] = decoded;
      }
      return value;
    }
  }
}

function goTypeName(type: GoType): string {
  if (type.t === 'struct') return `v1.${type.name}`;
  if (type.t === 'list') return `[]${goTypeName(type.of)}`;
  if (type.t === 'map') return `map[string]${goTypeName(type.of)}`;
  return GO_TYPE_NAMES[type.t] ?? type.t;
}

/** The zero value of a non-pointer field of `type`, as the server encodes it. */
function zeroOf(type: GoType): unknown {
  switch (type.t) {
    case 'string':
      return '';
    case 'int':
      return 0;
    case 'bool':
      return false;
    case 'quantity':
      return '0';
    case 'time':
    case 'microTime':
      return null;
    case 'struct':
      return encodeGo({}, type);
    default:
      return null; // a nil slice, map or interface
  }
}

const isZero = (v: unknown): boolean =>
  v === undefined || v === null || v === '' || v === 0 || v === false || (Array.isArray(v) && v.length === 0) || (isObject(v) && Object.keys(v).length === 0);

/**
 * Encodes a decoded value as the server writes it: omitempty fields holding their zero value are
 * dropped (pointers keep a zero they point to; structs are never dropped), fields without omitempty
 * are written even unset. In place; returns the value.
 */
export function encodeGo(value: unknown, type: GoType): unknown {
  if (type.t === 'list' && Array.isArray(value)) return value.map((item) => encodeGo(item, type.of));
  if (type.t === 'map' && isObject(value)) {
    for (const [k, v] of Object.entries(value)) value[k] = encodeGo(v, type.of);
    return value;
  }
  if (type.t !== 'struct' || !isObject(value)) return value;
  for (const [key, field] of Object.entries(type.fields)) {
    const v = value[key];
    // Go structs (metav1.Time and resource.Quantity are structs too) are never omitted.
    const isStruct = ['struct', 'quantity', 'time', 'microTime'].includes(field.type.t);
    if (v === undefined || v === null) {
      if (field.pointer || field.type.t === 'any') delete value[key];
      else if (isStruct || !field.omitempty) value[key] = zeroOf(field.type);
      else delete value[key];
      continue;
    }
    const encoded = encodeGo(v, field.type);
    if (field.omitempty && !field.pointer && !isStruct && field.type.t !== 'any' && isZero(encoded)) delete value[key];
    else value[key] = encoded;
  }
  return value;
}

// ---- defaulting ---------------------------------------------------------------------------------

const unset = (v: unknown) => v === undefined || v === null || v === '' || v === 0;
const asObject = (v: unknown): Obj | undefined => (isObject(v) ? v : undefined);

/** The image's tag as the server parses it (parsers.ParseImageName): '' for none or a digest. */
function imageTag(image: string): string {
  const withoutDigest = image.split('@')[0]!;
  const lastSlash = withoutDigest.lastIndexOf('/');
  const colon = withoutDigest.lastIndexOf(':');
  return colon > lastSlash ? withoutDigest.slice(colon + 1) : image.includes('@') ? '' : 'latest';
}

function defaultContainer(c: Obj): void {
  if (unset(c.imagePullPolicy)) c.imagePullPolicy = imageTag(String(c.image ?? '')) === 'latest' ? 'Always' : 'IfNotPresent';
  if (unset(c.terminationMessagePath)) c.terminationMessagePath = '/dev/termination-log';
  if (unset(c.terminationMessagePolicy)) c.terminationMessagePolicy = 'File';
  for (const p of Array.isArray(c.ports) ? c.ports : []) {
    const port = asObject(p);
    if (port && unset(port.protocol)) port.protocol = 'TCP';
  }
  for (const e of Array.isArray(c.env) ? c.env : []) {
    const fieldRef = asObject(asObject(asObject(e)?.valueFrom)?.fieldRef);
    if (fieldRef && unset(fieldRef.apiVersion)) fieldRef.apiVersion = 'v1';
  }
  for (const key of ['livenessProbe', 'readinessProbe', 'startupProbe']) {
    const probe = asObject(c[key]);
    if (!probe) continue;
    if (unset(probe.timeoutSeconds)) probe.timeoutSeconds = 1;
    if (unset(probe.periodSeconds)) probe.periodSeconds = 10;
    if (unset(probe.successThreshold)) probe.successThreshold = 1;
    if (unset(probe.failureThreshold)) probe.failureThreshold = 3;
    const get = asObject(probe.httpGet);
    if (get && unset(get.path)) get.path = '/';
    if (get && unset(get.scheme)) get.scheme = 'HTTP';
  }
}

const VOLUME_SOURCES = Object.keys((VOLUME as { fields: Record<string, GoField> }).fields).filter((k) => k !== 'name');

/** SetDefaults_PodSpec and what SetObjectDefaults_CronJob calls below it. */
export function defaultPodSpec(spec: Obj): void {
  if (unset(spec.dnsPolicy)) spec.dnsPolicy = 'ClusterFirst';
  if (unset(spec.restartPolicy)) spec.restartPolicy = 'Always';
  if (spec.securityContext === undefined || spec.securityContext === null) spec.securityContext = {};
  if (spec.terminationGracePeriodSeconds === undefined || spec.terminationGracePeriodSeconds === null) spec.terminationGracePeriodSeconds = 30;
  if (unset(spec.schedulerName)) spec.schedulerName = 'default-scheduler';
  for (const v of Array.isArray(spec.volumes) ? spec.volumes : []) {
    const volume = asObject(v);
    if (!volume) continue;
    if (VOLUME_SOURCES.every((k) => volume[k] === undefined || volume[k] === null)) volume.emptyDir = {};
    for (const k of ['secret', 'configMap', 'downwardAPI', 'projected']) {
      const source = asObject(volume[k]);
      if (source && (source.defaultMode === undefined || source.defaultMode === null)) source.defaultMode = 420;
    }
  }
  for (const list of [spec.initContainers, spec.containers]) {
    for (const c of Array.isArray(list) ? list : []) if (isObject(c)) defaultContainer(c);
  }
}

/** SetObjectDefaults_CronJob: the CronJob's own defaults, then its pod template's. */
export function defaultCronJob(o: Obj): void {
  const spec = asObject(o.spec);
  if (!spec) return;
  if (unset(spec.concurrencyPolicy)) spec.concurrencyPolicy = 'Allow';
  if (spec.suspend === undefined || spec.suspend === null) spec.suspend = false;
  if (spec.successfulJobsHistoryLimit === undefined || spec.successfulJobsHistoryLimit === null) spec.successfulJobsHistoryLimit = 3;
  if (spec.failedJobsHistoryLimit === undefined || spec.failedJobsHistoryLimit === null) spec.failedJobsHistoryLimit = 1;
  const podSpec = asObject(asObject(asObject(asObject(spec.jobTemplate)?.spec)?.template)?.spec);
  if (podSpec) defaultPodSpec(podSpec);
}
