import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

/**
 * A SCRIPTED STAND-IN for the Kubernetes API server (no API server can run here). It speaks the
 * HTTP/JSON of the real one for the requests the operator and the Lease elector make, through the
 * real @kubernetes/client-node, and honours the parts of the semantics they depend on:
 *
 * - one resourceVersion counter; an update (PUT) naming an older resourceVersion answers 409 Conflict;
 * - `metadata.generation` bumps when anything but metadata and status changes;
 * - the `status` subresource: the main resource ignores status changes, `/status` changes nothing else;
 * - finalizers: DELETE of an object with finalizers only sets `deletionTimestamp`; the object goes
 *   when an update empties them; deleting an owner deletes the objects whose ownerReferences name it;
 * - list (per namespace or across) and watch from a resourceVersion (ADDED/MODIFIED/DELETED events,
 *   newline-delimited JSON, held open), 410 Gone for a resourceVersion older than `compact()`;
 * - JSON merge patch (`application/merge-patch+json`);
 * - MicroTime fields (a Lease's `spec.acquireTime`/`spec.renewTime`) decoded as strictly as the real
 *   server does (layout `2006-01-02T15:04:05.000000Z07:00`, exactly six fractional digits): anything
 *   else, such as JavaScript's millisecond `toISOString()`, answers 400 BadRequest.
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
}

interface Failure {
  method: string;
  path: RegExp;
  status: number;
  times: number;
  /** For a GET of a collection: only its list, only its watch, or either. */
  on: 'list' | 'watch' | 'any';
}

interface WatchEvent {
  rv: number;
  type: 'ADDED' | 'MODIFIED' | 'DELETED';
  typeKey: string;
  namespace?: string;
  object: KubeObject;
}

export const CORE_TYPES: ResourceType[] = [
  { group: '', version: 'v1', plural: 'namespaces', kind: 'Namespace', namespaced: false, statusSubresource: false },
  { group: '', version: 'v1', plural: 'events', kind: 'Event', namespaced: true, statusSubresource: false },
  { group: 'events.k8s.io', version: 'v1', plural: 'events', kind: 'Event', namespaced: true, statusSubresource: false },
  { group: 'batch', version: 'v1', plural: 'cronjobs', kind: 'CronJob', namespaced: true, statusSubresource: true },
  { group: 'coordination.k8s.io', version: 'v1', plural: 'leases', kind: 'Lease', namespaced: true, statusSubresource: false },
];

const typeKey = (t: { group: string; version: string; plural: string }) => `${t.group}/${t.version}/${t.plural}`;
const clone = <T>(v: T): T => structuredClone(v);

function status(code: number, reason: string, message: string) {
  return { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code };
}

type Status = ReturnType<typeof status>;
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

export class KubeApiStandIn {
  readonly requests: RecordedRequest[] = [];
  private readonly types = new Map<string, ResourceType>();
  private readonly objects = new Map<string, KubeObject>(); // typeKey|ns|name
  private readonly log: WatchEvent[] = [];
  private rv = 1;
  private compactedTo = 0;
  private readonly failures: Failure[] = [];
  private readonly watchers = new Set<{ typeKey: string; namespace?: string; res: ServerResponse }>();
  private readonly sockets = new Set<Socket>();
  private server: Server | undefined;
  url = '';

  constructor(extraTypes: ResourceType[] = []) {
    for (const t of [...CORE_TYPES, ...extraTypes]) this.types.set(typeKey(t), t);
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

  /** The next `times` requests of `method` whose path matches answer `status` (a Status body). */
  failNext(method: string, path: RegExp, code: number, times = 1, on: Failure['on'] = 'any'): void {
    this.failures.push({ method: method.toUpperCase(), path, status: code, times, on });
  }

  /** Ends every open watch (the clients reconnect from their last resourceVersion). */
  closeWatches(): void {
    for (const w of this.watchers) w.res.end();
    this.watchers.clear();
  }

  /** Forgets the event history: a watch from an older resourceVersion answers 410 Gone. */
  compact(): void {
    this.compactedTo = this.rv;
    this.log.length = 0;
    this.closeWatches();
  }

  /** The current resourceVersion counter. */
  get resourceVersion(): string {
    return String(this.rv);
  }

  /** Reads an object as stored (a copy), or undefined. */
  get(apiVersion: string, plural: string, namespace: string | undefined, name: string): KubeObject | undefined {
    const o = this.objects.get(this.key(this.typeOf(apiVersion, plural), namespace, name));
    return o ? clone(o) : undefined;
  }

  list(apiVersion: string, plural: string, namespace?: string): KubeObject[] {
    return this.itemsOf(this.typeOf(apiVersion, plural), namespace).map(clone);
  }

  /** What a user's `kubectl apply` does: create, or replace the spec/labels/annotations of the stored object. */
  apply(plural: string, obj: KubeObject): KubeObject {
    const t = this.typeOf(obj.apiVersion ?? 'v1', plural);
    const current = this.objects.get(this.key(t, obj.metadata.namespace, obj.metadata.name));
    if (!current) return expectObject(this.create(t, obj.metadata.namespace, clone(obj)));
    const next: KubeObject = { ...clone(obj), metadata: { ...current.metadata, labels: obj.metadata.labels, annotations: obj.metadata.annotations, resourceVersion: current.metadata.resourceVersion } };
    return expectObject(this.replace(t, obj.metadata.namespace, obj.metadata.name, next, false));
  }

  /** What `kubectl delete` does. */
  remove(apiVersion: string, plural: string, namespace: string | undefined, name: string): void {
    this.delete(this.typeOf(apiVersion, plural), namespace, name);
  }

  // ---- the store --------------------------------------------------------------------------------

  private typeOf(apiVersion: string, plural: string): ResourceType {
    const [group, version] = apiVersion.includes('/') ? apiVersion.split('/') : ['', apiVersion];
    const t = this.types.get(typeKey({ group: group!, version: version!, plural }));
    if (!t) throw new Error(`the stand-in does not serve ${apiVersion} ${plural}`);
    return t;
  }

  private itemsOf(t: ResourceType, namespace: string | undefined): KubeObject[] {
    const prefix = `${typeKey(t)}|`;
    return [...this.objects.entries()]
      .filter(([k, o]) => k.startsWith(prefix) && (namespace === undefined || o.metadata.namespace === namespace))
      .map(([, o]) => o);
  }

  private key(t: ResourceType, namespace: string | undefined, name: string): string {
    return `${typeKey(t)}|${t.namespaced ? namespace ?? '' : ''}|${name}`;
  }

  private emit(t: ResourceType, type: WatchEvent['type'], object: KubeObject): void {
    const event: WatchEvent = { rv: Number(object.metadata.resourceVersion), type, typeKey: typeKey(t), namespace: object.metadata.namespace, object: clone(object) };
    this.log.push(event);
    for (const w of this.watchers) {
      if (w.typeKey === event.typeKey && (w.namespace === undefined || w.namespace === event.namespace)) {
        w.res.write(`${JSON.stringify({ type, object: event.object })}\n`);
      }
    }
  }

  private bump(o: KubeObject): void {
    this.rv += 1;
    o.metadata.resourceVersion = String(this.rv);
  }

  private create(t: ResourceType, namespace: string | undefined, body: KubeObject): KubeObject | Status {
    const name = body.metadata?.name;
    if (!name) return status(422, 'Invalid', 'metadata.name: Required value');
    const key = this.key(t, namespace, name);
    const invalid = badMicroTime(t, body);
    if (invalid) return invalid;
    if (this.objects.has(key)) return status(409, 'AlreadyExists', `${t.plural}${t.group ? `.${t.group}` : ''} "${name}" already exists`);
    const o: KubeObject = {
      ...body,
      apiVersion: t.group ? `${t.group}/${t.version}` : t.version,
      kind: t.kind,
      metadata: {
        ...body.metadata,
        ...(t.namespaced ? { namespace } : {}),
        uid: randomUUID(),
        creationTimestamp: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
        generation: 1,
      },
    };
    delete o.metadata.deletionTimestamp;
    if (t.statusSubresource) delete o.status;
    this.bump(o);
    this.objects.set(key, o);
    this.emit(t, 'ADDED', o);
    return clone(o);
  }

  private replace(t: ResourceType, namespace: string | undefined, name: string, body: KubeObject, statusOnly: boolean): KubeObject | Status {
    const invalid = badMicroTime(t, body);
    if (invalid) return invalid;
    const key = this.key(t, namespace, name);
    const current = this.objects.get(key);
    if (!current) return status(404, 'NotFound', `${t.plural} "${name}" not found`);
    if (body.metadata?.resourceVersion && body.metadata.resourceVersion !== current.metadata.resourceVersion) {
      return status(409, 'Conflict', `Operation cannot be fulfilled on ${t.plural} "${name}": the object has been modified; please apply your changes to the latest version and try again`);
    }
    let next: KubeObject;
    if (statusOnly) {
      next = { ...clone(current), status: clone(body.status) };
    } else {
      const keep = { uid: current.metadata.uid, creationTimestamp: current.metadata.creationTimestamp, generation: current.metadata.generation, deletionTimestamp: current.metadata.deletionTimestamp, namespace: current.metadata.namespace, name };
      next = { ...clone(body), apiVersion: current.apiVersion, kind: current.kind, metadata: { ...clone(body.metadata), ...keep } };
      if (!keep.deletionTimestamp) delete next.metadata.deletionTimestamp;
      if (t.namespaced === false) delete next.metadata.namespace;
      if (t.statusSubresource) {
        if (current.status === undefined) delete next.status;
        else next.status = clone(current.status);
      }
      if (current.metadata.deletionTimestamp) {
        const added = (next.metadata.finalizers ?? []).filter((f) => !(current.metadata.finalizers ?? []).includes(f));
        if (added.length > 0) return status(422, 'Invalid', `metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers ${JSON.stringify(added)}`);
      }
      if (specPart(next) !== specPart(current)) next.metadata.generation = (current.metadata.generation ?? 1) + 1;
    }
    if (JSON.stringify(next) === JSON.stringify(current)) return clone(current); // a no-op update writes nothing
    this.bump(next);
    this.objects.set(key, next);
    if (next.metadata.deletionTimestamp && (next.metadata.finalizers ?? []).length === 0) {
      this.finish(t, key, next);
    } else {
      this.emit(t, 'MODIFIED', next);
    }
    return clone(next);
  }

  private delete(t: ResourceType, namespace: string | undefined, name: string): KubeObject | Status {
    const key = this.key(t, namespace, name);
    const current = this.objects.get(key);
    if (!current) return status(404, 'NotFound', `${t.plural} "${name}" not found`);
    if ((current.metadata.finalizers ?? []).length > 0) {
      if (current.metadata.deletionTimestamp) return clone(current);
      const next = clone(current);
      next.metadata.deletionTimestamp = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
      next.metadata.deletionGracePeriodSeconds = 0;
      this.bump(next);
      this.objects.set(key, next);
      this.emit(t, 'MODIFIED', next);
      return clone(next);
    }
    this.bump(current);
    this.finish(t, key, current);
    return clone(current);
  }

  /** Removes an object for good and collects its dependents (background cascading deletion). */
  private finish(t: ResourceType, key: string, o: KubeObject): void {
    this.objects.delete(key);
    this.emit(t, 'DELETED', o);
    for (const [depKey, dep] of [...this.objects.entries()]) {
      if ((dep.metadata.ownerReferences ?? []).some((r) => r.uid === o.metadata.uid)) {
        const depType = this.types.get(depKey.split('|')[0]!)!;
        this.delete(depType, dep.metadata.namespace, dep.metadata.name);
      }
    }
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

    const route = this.route(url.pathname);
    if (!route) return this.send(req, res, url, query, body, 404, status(404, 'NotFound', `the stand-in does not serve ${url.pathname}`));
    const { type: t, namespace, name, subresource } = route;

    if (method === 'GET' && !name) {
      if (query.watch === 'true' || query.watch === '1') return this.watch(req, res, url, query, t, namespace);
      const items = this.itemsOf(t, namespace);
      const list = { apiVersion: t.group ? `${t.group}/${t.version}` : t.version, kind: `${t.kind}List`, metadata: { resourceVersion: String(this.rv) }, items: items.map(clone) };
      return this.send(req, res, url, query, body, 200, list);
    }
    let out: unknown;
    if (method === 'GET') {
      const o = this.objects.get(this.key(t, namespace, name!));
      out = o ? clone(o) : status(404, 'NotFound', `${t.plural}${t.group ? `.${t.group}` : ''} "${name}" not found`);
    } else if (method === 'POST' && !name) {
      out = this.create(t, namespace, body as KubeObject);
    } else if (method === 'PUT' && name) {
      if (subresource && subresource !== 'status') out = status(404, 'NotFound', `no subresource ${subresource}`);
      else out = this.replace(t, namespace, name, body as KubeObject, subresource === 'status');
    } else if (method === 'PATCH' && name) {
      const contentType = String(req.headers['content-type'] ?? '');
      if (!contentType.startsWith('application/merge-patch+json')) {
        out = status(415, 'UnsupportedMediaType', `the stand-in takes merge patches only, not ${contentType}`);
      } else {
        const current = this.objects.get(this.key(t, namespace, name));
        if (!current) out = status(404, 'NotFound', `${t.plural} "${name}" not found`);
        else {
          const merged = mergePatch(current, body) as KubeObject;
          const rvGiven = (body as KubeObject | undefined)?.metadata?.resourceVersion;
          merged.metadata.resourceVersion = rvGiven ?? current.metadata.resourceVersion;
          out = this.replace(t, namespace, name, merged, subresource === 'status');
        }
      }
    } else if (method === 'DELETE' && name) {
      out = this.delete(t, namespace, name);
    } else {
      out = status(405, 'MethodNotAllowed', `${method} ${url.pathname}`);
    }
    const code = (out as { kind?: string; code?: number }).kind === 'Status' ? (out as { code: number }).code : method === 'POST' ? 201 : 200;
    return this.send(req, res, url, query, body, code, out);
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

  private watch(req: IncomingMessage, res: ServerResponse, url: URL, query: Record<string, string>, t: ResourceType, namespace?: string): void {
    const from = Number(query.resourceVersion ?? '0');
    if (query.resourceVersion && from < this.compactedTo) {
      this.send(req, res, url, query, undefined, 410, status(410, 'Expired', `too old resource version: ${from} (${this.compactedTo})`));
      return;
    }
    this.requests.push({ method: 'GET', path: url.pathname, query, body: undefined, status: 200, token: tokenOf(req) });
    res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' });
    res.flushHeaders();
    const w = { typeKey: typeKey(t), namespace, res };
    for (const e of this.log) {
      if (e.rv > from && e.typeKey === w.typeKey && (namespace === undefined || e.namespace === namespace)) {
        res.write(`${JSON.stringify({ type: e.type, object: e.object })}\n`);
      }
    }
    this.watchers.add(w);
    req.on('close', () => this.watchers.delete(w));
  }

  private send(req: IncomingMessage, res: ServerResponse, url: URL, query: Record<string, string>, body: unknown, code: number, out: unknown): void {
    this.requests.push({ method: req.method ?? 'GET', path: url.pathname, query, body, status: code, token: tokenOf(req) });
    res.writeHead(code, { 'content-type': 'application/json' });
    res.end(JSON.stringify(out));
  }
}
