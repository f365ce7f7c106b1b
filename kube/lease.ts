import { hostname } from 'node:os';
import { performance } from 'node:perf_hooks';
import type { ConfigurationOptions, CoordinationV1Api, KubeConfig, V1Lease, V1LeaseSpec, V1MicroTime } from '@kubernetes/client-node';
import { startInterrupt } from '../src/db/pool.js';
import type { LeaderElector } from '../src/dispatch/leader.js';
import { logger } from '../src/observability/logger.js';
import type { KubeTarget } from './kube-config.js';

/**
 * Leader election through a `coordination.k8s.io/v1` Lease (CONTRACTS.md section 6), with the
 * semantics of client-go's leaderelection package:
 *
 * - acquire: create the Lease when it is absent (409 AlreadyExists: another process won the race);
 *   take it over only when it has no holder or its holder has not renewed for `leaseDurationSeconds`;
 *   a takeover bumps `leaseTransitions` and sets `acquireTime`.
 * - expiry is measured on this process's monotonic clock from when it last *observed the record
 *   change*, never by comparing the holder's `renewTime` with the local wall clock, so clock skew
 *   between nodes cannot make a live holder look expired (nor a dead one look alive for long).
 * - renew: read, check the holder is still this process, write a new `renewTime`. Another holder or
 *   a 409 Conflict on the write means the leadership is gone (`onLost`). Failures of the API are
 *   survived until `renewDeadlineMs` has passed since the last successful renewal began; then the
 *   leadership is given up, before any follower can consider the Lease expired.
 * - release: the holder is cleared (and the duration set to 1 s) so another process takes over at
 *   its next check, as client-go's ReleaseOnCancel does.
 *
 * Every write carries the `metadata.resourceVersion` read just before it (optimistic concurrency):
 * of two processes racing for the same Lease, exactly one write succeeds.
 *
 * Each request is aborted (its connection closed) once its bound has passed, and, made within a
 * start (src/db/pool.ts `interruptibleStart`: the hub's, the operator's election), once a signal
 * interrupts that start; and a check's (acquire, renew) once the stop begins (`stopping`, which
 * Leadership.stop calls before it waits for the check under way): an API server that does not
 * answer holds neither the start nor its stop. The release is not cut: it is sent after the signal,
 * within its own bound, so another process takes over at once.
 *
 * MicroTime: the API server decodes `acquireTime`/`renewTime` with the layout
 * `2006-01-02T15:04:05.000000Z07:00` (exactly six fractional digits) and answers 400 to anything
 * else, while a plain `Date` serialises with three: client-node 2's ObjectSerializer does not know
 * the `V1MicroTime` type and hands the value to `JSON.stringify` as it is, which calls the object's
 * own `toISOString`. Times are therefore always written as `MicroTime` (below), a Date whose
 * `toISOString` pads to six digits (what client-node's own `V1MicroTime` does). Read back, these
 * fields are strings, not Dates (the serializer does not know the type); they are copied as they are.
 *
 * @kubernetes/client-node is loaded on first use (importing it costs about two seconds), so a hub
 * that elects through PostgreSQL never pays for it.
 */

export interface LeaseElectorOptions {
  /** The Lease name (one per elected role and release: `svc-hub-dispatch`). */
  name: string;
  namespace: string;
  /** This candidate's identity, written as `holderIdentity`. Default POD_NAME, else `<hostname>-<pid>`. */
  identity?: string;
  /** How long a Lease not renewed stays valid; written as `leaseDurationSeconds`. Default 15. */
  leaseDurationSeconds?: number;
  /**
   * How long renewals may fail before this process gives the leadership up. Default the lease
   * duration; give `lease duration - renew period` (what cmd/leader.ts does) so the leader steps down
   * before a follower can take over.
   */
  renewDeadlineMs?: number;
  /** Bound of one API request. Default a third of the lease duration, at least 1 s. */
  requestTimeoutMs?: number;
  /** Where the API server is: a KubeConfig, a target (tests), or the default (in-cluster, else KUBECONFIG). */
  kube?: KubeConfig | KubeTarget;
  /** The clock of the lease duration and the renew deadline (monotonic, ms). Default performance.now; tests move it by hand. */
  monotonic?: () => number;
}

/** Default identity of a candidate: the pod's name (the chart sets POD_NAME), else host and pid. */
export function defaultIdentity(env: NodeJS.ProcessEnv = process.env): string {
  return env.POD_NAME || `${hostname()}-${process.pid}`;
}

/** A Date that serialises as the API server's MicroTime: RFC 3339 with exactly six fractional digits. */
export class MicroTime extends Date {
  override toISOString(): string {
    return `${super.toISOString().slice(0, -1)}000Z`;
  }
}

/** Now (or `ms`) as a MicroTime, typed for the Lease fields. */
export function microTime(ms: number = Date.now()): V1MicroTime {
  return new MicroTime(ms);
}

interface Client {
  api: CoordinationV1Api;
  /** Request options under which the request is aborted with `signal`. */
  abortedBy: (signal: AbortSignal) => ConfigurationOptions;
}

const monotonic = (): number => performance.now();

export class LeaseElector implements LeaderElector {
  readonly description: string;
  readonly identity: string;
  readonly name: string;
  readonly namespace: string;
  private readonly kube: KubeConfig | KubeTarget | undefined;
  private client: Promise<Client> | undefined;
  /** kube-config.ts's apiStatus once the client is loaded (no API error can come before). */
  private apiStatus: (err: unknown) => number | undefined = statusOf;
  private readonly monotonic: () => number;
  private readonly durationSeconds: number;
  private readonly renewDeadlineMs: number;
  private readonly requestTimeoutMs: number;
  private readonly listeners = new Set<() => void>();
  private leader = false;
  /** The record as last read or written, and when (monotonic) it was last seen to change. */
  private observed: { key: string; at: number } | undefined;
  /** When (monotonic) the last successful acquisition or renewal began. */
  private renewedAt = 0;
  private queue: Promise<unknown> = Promise.resolve();
  /** Aborted by `stopping`: the requests of the checks (acquire, renew) begun before it. */
  private checks = new AbortController();

  constructor(options: LeaseElectorOptions) {
    this.name = options.name;
    this.namespace = options.namespace;
    this.identity = options.identity ?? defaultIdentity();
    this.monotonic = options.monotonic ?? monotonic;
    this.durationSeconds = options.leaseDurationSeconds ?? 15;
    if (!Number.isInteger(this.durationSeconds) || this.durationSeconds < 1) {
      throw new Error(`leaseDurationSeconds must be a whole number of seconds, at least 1 (not ${this.durationSeconds})`);
    }
    this.renewDeadlineMs = options.renewDeadlineMs ?? this.durationSeconds * 1000;
    this.requestTimeoutMs = options.requestTimeoutMs ?? Math.max(1000, Math.floor((this.durationSeconds * 1000) / 3));
    this.kube = options.kube;
    this.description = `Kubernetes Lease ${this.namespace}/${this.name} as ${this.identity}`;
  }

  /**
   * Leading, and sure of it: the last successful acquisition or renewal began less than the lease
   * duration ago. A follower takes the Lease over only once it has seen the same record for the
   * duration, and it saw that record no earlier than its write, which came after the renewal began:
   * until then no other process can lead. A process that was paused past it (SIGSTOP, a long GC
   * pause, a frozen node or VM) cannot know whether a follower took the Lease over meanwhile, so its
   * gated work does not run (Leadership, the operator's workers) until a renewal succeeds again; the
   * next check renews, or finds the leadership gone (`onLost`).
   */
  isLeader(): boolean {
    return this.leader && this.monotonic() - this.renewedAt < this.durationSeconds * 1000;
  }

  onLost(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  acquire(): Promise<boolean> {
    return this.serial(async () => (this.leader ? this.renewOnce() : this.tryAcquire()));
  }

  renew(): Promise<boolean> {
    return this.serial(() => this.renewOnce());
  }

  release(): Promise<void> {
    return this.serial(() => this.releaseOnce());
  }

  /**
   * The stop has begun: the check under way (a renewal or an acquisition waiting on the API server)
   * is cut at once, its requests aborted, so the release that follows does not wait for them; a
   * renewal so cut keeps the leadership for the release to give up, and logs no failure.
   */
  stopping(): void {
    this.checks.abort(new Error(`the stop cut a request of the Lease ${this.namespace}/${this.name}`));
    this.checks = new AbortController();
  }

  // ---- the protocol -----------------------------------------------------------------------------

  private async tryAcquire(): Promise<boolean> {
    const check = this.checks.signal;
    const started = this.monotonic();
    const lease = await this.read(check);
    if (!lease) {
      const now = microTime();
      try {
        const created = await this.call(
          'create',
          (api, options) =>
            api.createNamespacedLease(
              {
                namespace: this.namespace,
                body: {
                  apiVersion: 'coordination.k8s.io/v1',
                  kind: 'Lease',
                  metadata: { name: this.name, namespace: this.namespace, labels: { 'app.kubernetes.io/managed-by': 'svc-hub' } },
                  spec: { holderIdentity: this.identity, leaseDurationSeconds: this.durationSeconds, acquireTime: now, renewTime: now, leaseTransitions: 0 },
                },
              },
              options,
            ),
          check,
        );
        this.elected(created, started);
        return true;
      } catch (err) {
        if (this.apiStatus(err) === 409) return false; // another candidate created it first
        throw err;
      }
    }

    const spec = lease.spec ?? {};
    const holder = spec.holderIdentity ?? '';
    if (holder && holder !== this.identity && !this.expired(spec)) return false;

    // Free, expired, or ours already (this pod restarted): take it with the version just read.
    const mine = holder === this.identity;
    const now = microTime();
    const next: V1LeaseSpec = {
      ...spec,
      holderIdentity: this.identity,
      leaseDurationSeconds: this.durationSeconds,
      acquireTime: mine && spec.acquireTime ? spec.acquireTime : now,
      renewTime: now,
      leaseTransitions: (spec.leaseTransitions ?? 0) + (mine ? 0 : 1),
    };
    try {
      const written = await this.replace(lease, next, check);
      if (holder && !mine) logger().info({ previous: holder, lease: `${this.namespace}/${this.name}` }, `took over the expired Lease from ${holder}`);
      this.elected(written, started);
      return true;
    } catch (err) {
      const code = this.apiStatus(err);
      if (code === 409 || code === 404) return false; // someone else wrote (or deleted) it in between
      throw err;
    }
  }

  private async renewOnce(): Promise<boolean> {
    if (!this.leader) return false;
    const check = this.checks.signal;
    const started = this.monotonic();
    try {
      const lease = await this.read(check);
      if (!lease) {
        this.lost('the Lease was deleted');
        return false;
      }
      const holder = lease.spec?.holderIdentity ?? '';
      if (holder !== this.identity) {
        this.lost(holder ? `the Lease is held by ${holder}` : 'the Lease was released by someone else');
        return false;
      }
      const written = await this.replace(lease, { ...lease.spec, leaseDurationSeconds: this.durationSeconds, renewTime: microTime() }, check);
      this.observe(written);
      this.renewedAt = started;
      return true;
    } catch (err) {
      const code = this.apiStatus(err);
      if (code === 409 || code === 404) {
        this.lost(code === 409 ? 'conflict on renewal: the Lease was written by another process' : 'the Lease was deleted');
        return false;
      }
      // Cut by the stop: the release follows at once.
      if (check.aborted) {
        logger().debug({ err: errorText(err) }, `Lease renewal cut by the stop (${this.description})`);
        return true;
      }
      const since = this.monotonic() - this.renewedAt;
      const message = errorText(err);
      if (since >= this.renewDeadlineMs) {
        this.lost(`no successful renewal for ${Math.round(since)} ms (deadline ${this.renewDeadlineMs} ms): ${message}`);
        return false;
      }
      logger().warn(
        { err: message, status: code, lease: `${this.namespace}/${this.name}` },
        `Lease renewal failed; still the leader for up to ${Math.max(0, Math.round(this.renewDeadlineMs - since))} ms more`,
      );
      return true;
    }
  }

  private async releaseOnce(): Promise<void> {
    if (!this.leader) return;
    this.leader = false;
    try {
      // Not cut by a start's interruption nor by the stop (the class comment): the handover is worth its bound.
      const lease = await this.read(undefined);
      if (!lease || lease.spec?.holderIdentity !== this.identity) return;
      const now = microTime();
      // As client-go's ReleaseOnCancel: no holder, a 1 s duration, the transition count kept.
      await this.replace(lease, { ...lease.spec, holderIdentity: '', leaseDurationSeconds: 1, acquireTime: now, renewTime: now }, undefined);
      logger().info(`released the leadership (${this.description})`);
    } catch (err) {
      logger().warn({ err: errorText(err) }, `could not release the Lease ${this.namespace}/${this.name}; another process takes over when it expires`);
    }
  }

  // ---- helpers ----------------------------------------------------------------------------------

  private elected(lease: V1Lease, started: number): void {
    this.observe(lease);
    this.renewedAt = started;
    this.leader = true;
  }

  private lost(reason: string): void {
    if (!this.leader) return;
    this.leader = false;
    logger().warn({ reason }, `leadership lost (${this.description})`);
    for (const listener of this.listeners) listener();
  }

  /** Notes when the record last changed, by this process's clock. */
  private observe(lease: V1Lease): void {
    const s = lease.spec ?? {};
    const key = JSON.stringify([s.holderIdentity ?? '', s.leaseDurationSeconds, String(s.acquireTime ?? ''), String(s.renewTime ?? ''), s.leaseTransitions ?? 0]);
    if (this.observed?.key !== key) this.observed = { key, at: this.monotonic() };
  }

  /** The holder has not renewed for its lease duration since this process saw the record change. */
  private expired(spec: V1LeaseSpec): boolean {
    const seconds = spec.leaseDurationSeconds && spec.leaseDurationSeconds > 0 ? spec.leaseDurationSeconds : this.durationSeconds;
    return this.observed !== undefined && this.monotonic() - this.observed.at >= seconds * 1000;
  }

  /** `check`: a check's, aborted by it and by the interruption of the start making it (`call`); undefined: the release's. */
  private async read(check: AbortSignal | undefined): Promise<V1Lease | undefined> {
    try {
      const lease = await this.call('read', (api, options) => api.readNamespacedLease({ name: this.name, namespace: this.namespace }, options), check);
      this.observe(lease);
      return lease;
    } catch (err) {
      if (this.apiStatus(err) === 404) return undefined;
      throw err;
    }
  }

  /** PUT with the resourceVersion of `current`: a 409 when anyone wrote the Lease since. */
  private replace(current: V1Lease, spec: V1LeaseSpec, check: AbortSignal | undefined): Promise<V1Lease> {
    return this.call(
      'replace',
      (api, options) =>
        api.replaceNamespacedLease(
          {
            name: this.name,
            namespace: this.namespace,
            body: { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: current.metadata, spec },
          },
          options,
        ),
      check,
    );
  }

  /**
   * One API request, bounded (a hung connection must not outlive the renew deadline unnoticed):
   * past its bound it is aborted, its connection closed. A check's (`check`): a signal interrupting
   * the start that makes it (`startInterrupt`) aborts it at once, and the client's loading before
   * it, as does the stop (`check` aborted): it fails with the signal's reason, or the stop's.
   */
  private async call<T>(what: string, request: (api: CoordinationV1Api, options: ConfigurationOptions) => Promise<T>, check: AbortSignal | undefined): Promise<T> {
    const interrupt = check ? startInterrupt() : undefined;
    interrupt?.throwIfAborted();
    check?.throwIfAborted();
    const abort = new AbortController();
    const onInterrupt = () => abort.abort(interrupt?.reason);
    const onStop = () => abort.abort(check?.reason);
    interrupt?.addEventListener('abort', onInterrupt, { once: true });
    check?.addEventListener('abort', onStop, { once: true });
    const aborted = new Promise<never>((_, reject) => abort.signal.addEventListener('abort', () => reject(abort.signal.reason), { once: true }));
    let timer: NodeJS.Timeout | undefined;
    const requesting = (async () => {
      const { api, abortedBy } = await this.connect();
      abort.signal.throwIfAborted();
      // While leading, no request may run past the renew deadline: the leader must know it is no
      // longer sure of its Lease before any follower can see the Lease expire.
      const limit = this.leader ? Math.min(this.requestTimeoutMs, Math.max(1, Math.ceil(this.renewedAt + this.renewDeadlineMs - this.monotonic()))) : this.requestTimeoutMs;
      timer = setTimeout(() => abort.abort(new Error(`Lease ${what} got no answer within ${limit} ms`)), limit);
      timer.unref();
      return request(api, abortedBy(abort.signal));
    })();
    try {
      return await Promise.race([requesting, aborted]);
    } finally {
      clearTimeout(timer);
      interrupt?.removeEventListener('abort', onInterrupt);
      check?.removeEventListener('abort', onStop);
    }
  }

  /** The API client, made on first use (loading @kubernetes/client-node). */
  private connect(): Promise<Client> {
    this.client ??= (async () => {
      const [{ CoordinationV1Api, Observable }, { apiStatus, kubeConfig }] = await Promise.all([import('@kubernetes/client-node'), import('./kube-config.js')]);
      const kc = this.kube === undefined || isTarget(this.kube) ? kubeConfig(this.kube) : this.kube;
      this.apiStatus = apiStatus;
      // The client's fetch takes the request context's signal; appended to the client's own
      // middleware (its User-Agent), which a call's middleware otherwise replaces.
      const abortedBy = (signal: AbortSignal): ConfigurationOptions => ({
        middleware: [
          {
            pre: (context) => {
              context.setSignal(signal);
              return new Observable(Promise.resolve(context));
            },
            post: (response) => new Observable(Promise.resolve(response)),
          },
        ],
        middlewareMergeStrategy: 'append',
      });
      return { api: kc.makeApiClient(CoordinationV1Api), abortedBy };
    })();
    this.client.catch(() => {
      this.client = undefined;
    });
    return this.client;
  }

  /** Acquire, renew and release never overlap within one elector. */
  private serial<T>(step: () => Promise<T>): Promise<T> {
    const run = this.queue.then(step, step);
    this.queue = run.catch(() => undefined);
    return run;
  }
}

const isTarget = (kube: KubeConfig | KubeTarget): kube is KubeTarget => typeof (kube as KubeTarget).server === 'string' && typeof (kube as KubeTarget).token === 'string';

/** The HTTP status of an ApiException, as kube-config.ts's apiStatus (usable before it is loaded). */
function statusOf(err: unknown): number | undefined {
  const code = (err as { code?: unknown } | undefined)?.code;
  return typeof code === 'number' ? code : undefined;
}

function errorText(err: unknown): string {
  const code = statusOf(err);
  let body = (err as { body?: unknown } | undefined)?.body;
  if (typeof body === 'string') {
    try {
      body = JSON.parse(body);
    } catch {
      // not a Status
    }
  }
  const status = body && typeof body === 'object' ? (body as { message?: unknown }).message : undefined;
  const message = typeof status === 'string' ? status : code ? (err as Error).message.split('\n')[1] ?? '' : ((err as Error | undefined)?.message ?? String(err));
  return code ? `HTTP ${code}: ${message}` : message;
}
