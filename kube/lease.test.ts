import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { CoordinationV1Api, type V1MicroTime } from '@kubernetes/client-node';
import { leaderElector } from '../cmd/leader.js';
import { ClockRunner } from '../src/clock/clock.js';
import { Config, ConfigError } from '../src/config/config.js';
import { interruptibleStart } from '../src/db/pool.js';
import { AdvisoryLockElector, Leadership } from '../src/dispatch/leader.js';
import { chartGrants } from '../test/harness/chart-rbac.js';
import { type KubeObject, KubeApiStandIn } from '../test/harness/kube-api.js';
import { startGatedProcess, stopProcesses } from '../test/harness/leadership.js';
import { captureLogs } from '../test/harness/log-capture.js';
import { kubeConfig } from './kube-config.js';
import { LeaseElector, type LeaseElectorOptions } from './lease.js';
import { until } from '../test/harness/until.js';

/**
 * The Lease elector against the SCRIPTED Kubernetes API STAND-IN (test/harness/kube-api.ts; no API
 * server can run here), through the real @kubernetes/client-node. The stand-in honours
 * resourceVersion conflicts and decodes a Lease's MicroTime fields as strictly as the real server.
 * Lease durations are shortened to 1 s.
 */

const NS = 'svc';
const LEASE_SECONDS = 1;
const MICRO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/;
let api: KubeApiStandIn;
let target: { server: string; token: string };
let seq = 0;

beforeAll(async () => {
  api = await new KubeApiStandIn().start();
  // The Leases' namespace (a create in one that does not exist is a 404).
  api.createNamespace(NS);
  target = { server: api.url, token: 'stand-in-token' };
});

afterAll(async () => {
  await api.close();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const leaseName = () => `lease-${++seq}`;
const lease = (name: string) => api.get('coordination.k8s.io/v1', 'leases', NS, name) as (KubeObject & { spec: Record<string, unknown> }) | undefined;
const leaseWrites = (name: string) => api.requests.filter((r) => (r.method === 'POST' || r.method === 'PUT') && r.status < 300 && ((r.body as KubeObject).metadata?.name === name));

/** A monotonic clock the test moves by hand (the electors' `monotonic`): no real time passes for a lease duration. */
function handClock() {
  let now = 1_000_000;
  return {
    now: () => now,
    advance: (ms: number) => {
      now += ms;
    },
  };
}

function elector(name: string, identity: string, options: Partial<LeaseElectorOptions> = {}) {
  const e = new LeaseElector({ name, namespace: NS, identity, leaseDurationSeconds: LEASE_SECONDS, kube: target, ...options });
  const losses: number[] = [];
  e.onLost(() => losses.push(Date.now()));
  return Object.assign(e, { losses });
}

describe('Lease elector (against the Kubernetes API stand-in)', () => {
  it('of two electors one leads; the Lease names it, with MicroTime stamps the API server parses', async () => {
    const name = leaseName();
    // No time passes for the 1 s lease (a loaded machine's pause between the acquisition and the look would).
    const clock = handClock();
    const a = elector(name, 'pod-a', { monotonic: clock.now });
    const b = elector(name, 'pod-b', { monotonic: clock.now });
    expect(await a.acquire()).toBe(true);
    expect(await b.acquire()).toBe(false);
    expect([a.isLeader(), b.isLeader()]).toEqual([true, false]);
    expect(a.description).toBe(`Kubernetes Lease ${NS}/${name} as pod-a`);

    const stored = lease(name)!;
    expect(stored.spec).toEqual(expect.objectContaining({ holderIdentity: 'pod-a', leaseDurationSeconds: 1, leaseTransitions: 0 }));
    expect(stored.spec.renewTime).toMatch(MICRO);
    expect(stored.spec.acquireTime).toMatch(MICRO);
    // What went over the wire, not only what was stored.
    const [created] = leaseWrites(name);
    expect(created!.method).toBe('POST');
    expect((created!.body as KubeObject).spec).toEqual(expect.objectContaining({ renewTime: expect.stringMatching(MICRO), acquireTime: expect.stringMatching(MICRO) }));

    // Acquiring again while leading is a renewal.
    expect(await a.acquire()).toBe(true);
    expect(lease(name)!.spec.holderIdentity).toBe('pod-a');
  });

  it('the stand-in refuses millisecond timestamps as the real API server does (so the MicroTime check above means something)', async () => {
    const client = kubeConfig(target).makeApiClient(CoordinationV1Api);
    const err = await client
      .createNamespacedLease({ namespace: NS, body: { metadata: { name: leaseName() }, spec: { holderIdentity: 'x', renewTime: new Date() as V1MicroTime } } })
      .catch((e: unknown) => e);
    expect((err as { code?: number }).code).toBe(400);
    expect(JSON.stringify((err as { body?: unknown }).body)).toContain('2006-01-02T15:04:05.000000Z07:00');
  });

  it('the leader renews: a new renewTime written with the resourceVersion just read', async () => {
    const name = leaseName();
    const a = elector(name, 'pod-a');
    expect(await a.acquire()).toBe(true);
    const before = lease(name)!;
    // renewTime is wall-clock time (what the API server stores): it must have moved for a later one.
    await until('the wall clock to move', () => Date.now() > Date.parse(before.spec.renewTime as string), { everyMs: 1 });
    expect(await a.renew()).toBe(true);
    const after = lease(name)!;
    const put = leaseWrites(name).at(-1)!;
    expect(put.method).toBe('PUT');
    expect((put.body as KubeObject).metadata.resourceVersion).toBe(before.metadata.resourceVersion);
    expect((put.body as KubeObject).spec!.renewTime).toMatch(MICRO);
    expect(Date.parse(after.spec.renewTime as string)).toBeGreaterThan(Date.parse(before.spec.renewTime as string));
    expect(after.spec.acquireTime).toBe(before.spec.acquireTime);
    expect(after.spec.leaseTransitions).toBe(0);
    expect(Number(after.metadata.resourceVersion)).toBeGreaterThan(Number(before.metadata.resourceVersion));
    expect(a.losses).toEqual([]);
  });

  it('the follower takes over only once the leader has not renewed for leaseDurationSeconds', async () => {
    const name = leaseName();
    const clock = handClock();
    const a = elector(name, 'pod-a', { monotonic: clock.now });
    const b = elector(name, 'pod-b', { monotonic: clock.now });
    expect(await a.acquire()).toBe(true);
    // While the leader renews, the follower never gets it, however long that lasts (1.5 s of the
    // electors' clock, past the 1 s duration).
    for (let i = 0; i < 15; i++) {
      expect(await a.renew()).toBe(true);
      expect(await b.acquire()).toBe(false);
      clock.advance(100); // the leader's pace of renewals
    }
    const lastRenewal = clock.now();
    expect(await a.renew()).toBe(true);
    const before = lease(name)!;
    // Renewals stop (the leader hangs or died): the follower keeps trying, every 100 ms of the clock.
    await until('the follower to take over', () => {
      clock.advance(100);
      return b.acquire();
    });
    const waited = clock.now() - lastRenewal;
    expect(waited).toBeGreaterThanOrEqual(1_000);
    // Soon after the duration, not at a second one: at the first try a duration after it first saw
    // the last renewal (one try after that renewal).
    expect(waited).toBeLessThanOrEqual(1_100);

    const after = lease(name)!;
    expect(after.spec).toEqual(expect.objectContaining({ holderIdentity: 'pod-b', leaseTransitions: 1 }));
    expect(after.spec.acquireTime).not.toBe(before.spec.acquireTime);
    expect(after.spec.acquireTime).toMatch(MICRO);
    // The old leader stopped counting itself the leader once a lease duration had passed since its
    // last renewal began, before the follower could take over (never two leaders); its next renewal
    // reports the loss.
    expect(a.isLeader()).toBe(false);
    expect(await a.renew()).toBe(false);
    expect(a.isLeader()).toBe(false);
    expect(a.losses).toHaveLength(1);
    expect(await a.acquire()).toBe(false);
  });

  it('release clears the holder, and the other takes over at once', async () => {
    const name = leaseName();
    const a = elector(name, 'pod-a', { leaseDurationSeconds: 15 });
    const b = elector(name, 'pod-b', { leaseDurationSeconds: 15 });
    expect(await a.acquire()).toBe(true);
    expect(await b.acquire()).toBe(false);
    await a.release();
    expect(a.isLeader()).toBe(false);
    expect(a.losses).toEqual([]); // a release is not a loss
    expect(lease(name)!.spec).toEqual(expect.objectContaining({ holderIdentity: '', leaseDurationSeconds: 1, leaseTransitions: 0 }));
    expect(await b.acquire()).toBe(true);
    expect(lease(name)!.spec).toEqual(expect.objectContaining({ holderIdentity: 'pod-b', leaseDurationSeconds: 15, leaseTransitions: 1 }));
    // Releasing what one does not hold writes nothing.
    const writes = leaseWrites(name).length;
    await a.release();
    expect(leaseWrites(name)).toHaveLength(writes);
  });

  it('two candidates racing for a new Lease: one create wins, the other gets 409 AlreadyExists and follows', async () => {
    const name = leaseName();
    // What is raced is the create, not the clock: a follower's request limit (a third of the 1 s
    // lease, at least 1 s) is widened, as a loaded machine answered one create later than that.
    const a = elector(name, 'pod-a', { requestTimeoutMs: 10_000 });
    const b = elector(name, 'pod-b', { requestTimeoutMs: 10_000 });
    const results = await Promise.all([a.acquire(), b.acquire()]);
    expect(results.filter(Boolean)).toHaveLength(1);
    expect(lease(name)!.spec.holderIdentity).toBe(results[0] ? 'pod-a' : 'pod-b');
  });

  it('a 409 Conflict on renewal: the leadership is lost and onLost listeners are called', async () => {
    const name = leaseName();
    const a = elector(name, 'pod-a');
    expect(await a.acquire()).toBe(true);
    api.failNext('PUT', new RegExp(`/leases/${name}$`), 409);
    expect(await a.renew()).toBe(false);
    expect(a.isLeader()).toBe(false);
    expect(a.losses).toHaveLength(1);
  });

  it('a lost race for an expired Lease (409 on the takeover write) leaves the candidate a follower', async () => {
    const name = leaseName();
    const clock = handClock();
    const a = elector(name, 'pod-a', { monotonic: clock.now });
    const b = elector(name, 'pod-b', { monotonic: clock.now });
    expect(await a.acquire()).toBe(true);
    expect(await b.acquire()).toBe(false);
    clock.advance(1_050); // the Lease expires: past its 1 s duration
    api.failNext('PUT', new RegExp(`/leases/${name}$`), 409);
    expect(await b.acquire()).toBe(false);
    expect(b.isLeader()).toBe(false);
    expect(lease(name)!.spec.holderIdentity).toBe('pod-a');
  });

  it('API failures on renewal keep the leadership within the lease duration, and lose it beyond', async () => {
    const name = leaseName();
    const clock = handClock();
    const a = elector(name, 'pod-a', { monotonic: clock.now });
    expect(await a.acquire()).toBe(true);
    api.failNext('PUT', new RegExp(`/leases/${name}$`), 500, 1_000);
    expect(await a.renew()).toBe(true);
    expect(a.isLeader()).toBe(true);
    clock.advance(400); // still within the 1 s duration: the failures keep the leadership
    expect(await a.renew()).toBe(true);
    expect(a.losses).toEqual([]);
    clock.advance(601); // past the renew deadline (the duration), counted from the acquisition
    expect(await a.renew()).toBe(false);
    expect(a.isLeader()).toBe(false);
    expect(a.losses).toHaveLength(1);
  });

  it('a renewal deadline shorter than the duration (what cmd/leader.ts sets) steps down earlier', async () => {
    const name = leaseName();
    const clock = handClock();
    const a = elector(name, 'pod-a', { leaseDurationSeconds: 2, renewDeadlineMs: 300, monotonic: clock.now });
    expect(await a.acquire()).toBe(true);
    api.failNext('GET', new RegExp(`/leases/${name}$`), 503, 1_000);
    expect(await a.renew()).toBe(true);
    clock.advance(320); // past the 300 ms renew deadline
    expect(await a.renew()).toBe(false);
    expect(a.losses).toHaveLength(1);
  });

  it('a leader paused past its lease duration does not count itself the leader when it resumes: its gated job does not run, and the next check finds the Lease taken over', async () => {
    const name = leaseName();
    const a = elector(name, 'pod-a', { renewDeadlineMs: 600 });
    const leadership = new Leadership(a, { checkEvery: 300 });
    const clock = new ClockRunner();
    let runs = 0;
    leadership.gate(clock).schedule('job', { every: 20 }, async () => {
      runs++;
    });
    // The marker: an ungated job of the same clock and period, which goes on ticking.
    let ticks = 0;
    clock.schedule('marker', { every: 20 }, async () => {
      ticks++;
    });
    clock.start();
    await leadership.start();
    try {
      await until('a few runs', () => runs >= 3);
      // The process is paused past its lease duration (no timer, no I/O runs: SIGSTOP, a long GC
      // pause), and meanwhile a follower takes the Lease over, which the paused process cannot see.
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, LEASE_SECONDS * 1000 + 100);
      const stored = lease(name)!;
      api.apply('leases', { ...stored, spec: { ...stored.spec, holderIdentity: 'pod-b', leaseTransitions: 1 } });
      const before = runs;
      expect(a.isLeader()).toBe(false);
      // Resumed: the job's overdue ticks come before any answer of the API server, and do nothing.
      await until('the loss noticed', () => a.losses.length === 1);
      const at = ticks;
      await until('the clock to tick twice more', () => ticks >= at + 2);
      expect(runs).toBe(before);
      expect(a.isLeader()).toBe(false);
    } finally {
      await clock.stop();
      await leadership.stop();
    }
  });

  it('Leadership driving two Lease electors gates a job: only the leader runs it, the follower takes over on release', async () => {
    const name = leaseName();
    const runs = { a: 0, b: 0 };
    // The lease's clock is moved by hand, for both: a pause of the loaded machine is no time for the
    // lease (it hands the lead over in real time, not here), and the lease runs out only when the test says.
    const clock = handClock();
    const start = (who: 'a' | 'b') => startGatedProcess(elector(name, `pod-${who}`, { monotonic: clock.now }), () => runs[who]++);
    const a = await start('a');
    const b = await start('b');
    try {
      expect([a.leadership.isLeader(), b.leadership.isLeader()]).toEqual([true, false]);
      await until('a few runs', () => runs.a >= 5);
      expect(runs.b).toBe(0);
      expect(await b.gated.trigger('job')).toBe(false);
      // Longer than the lease duration (1.5 s of it, a renewal by the leader's own checks in each 100 ms): they keep it.
      for (let moved = 0; moved < LEASE_SECONDS * 1500; moved += 100) {
        const writes = leaseWrites(name).length;
        clock.advance(100);
        await until('the leader to renew', () => leaseWrites(name).length > writes);
      }
      expect([a.leadership.isLeader(), b.leadership.isLeader()]).toEqual([true, false]);
      expect(runs.b).toBe(0);

      // An orderly stop releases the Lease: the follower leads within a check or two. The lease's
      // clock stands still from here: the lead can only have come by the release.
      await a.clock.stop();
      await a.leadership.stop();
      const aRuns = runs.a;
      await until('b to lead', () => b.leadership.isLeader(), 10_000);
      await until('b to run', () => runs.b >= 2);
      expect(runs.a).toBe(aRuns);
      expect(lease(name)!.spec).toEqual(expect.objectContaining({ holderIdentity: 'pod-b', leaseTransitions: 1 }));
    } finally {
      await stopProcesses([a, b]);
    }
  });
});

describe('Lease requests the API server does not answer', () => {
  it('one past its bound is aborted, its connection closed: a check against a hung API server leaves no request behind', async () => {
    const name = leaseName();
    const a = elector(name, 'pod-a', { requestTimeoutMs: 300 });
    const release = api.stallNext('GET', new RegExp(`/leases/${name}$`));
    try {
      await expect(a.acquire()).rejects.toThrow('Lease read got no answer within 300 ms');
      // Was: the request left open (the bound only raced it), one more at each check of a hung API server.
      await until('the stand-in to see the request given up', () => release.abandoned === 1, 3_000);
    } finally {
      release();
    }
  });

  it('a signal during the start that makes one (interruptibleStart) aborts it at once, with the signal\'s reason; the Leadership logs no failure', async () => {
    const name = leaseName();
    // A 15 s lease: each request's own bound is 5 s.
    const a = elector(name, 'pod-a', { leaseDurationSeconds: 15 });
    const leadership = new Leadership(a, { checkEvery: 60_000 });
    const release = api.stallNext('GET', new RegExp(`/leases/${name}$`));
    const logs = captureLogs('info');
    try {
      const stop = new AbortController();
      const starting = interruptibleStart(stop.signal, async () => {
        await leadership.start();
        stop.signal.throwIfAborted();
      }).then(
        () => 'started',
        (err: Error) => `failed: ${err.message}`,
      );
      await until('the start to wait on the Lease', () => release.held === 1, 10_000);
      const signalled = performance.now();
      stop.abort(new Error('SIGTERM'));
      // Was: the start waited for the request's own bound (5 s), the request then left open.
      expect(await starting).toBe('failed: SIGTERM');
      expect(performance.now() - signalled).toBeLessThan(2_000);
      await until('the stand-in to see the request given up', () => release.abandoned === 1, 3_000);
      expect(a.isLeader()).toBe(false);
      expect(logs.raw()).not.toContain('leader election failed');
    } finally {
      logs.restore();
      release();
      await leadership.stop();
    }
  });

  it('the release after a start\'s interruption is still sent (the Lease freed at once), its requests not cut', async () => {
    const name = leaseName();
    const a = elector(name, 'pod-a', { leaseDurationSeconds: 15 });
    const stop = new AbortController();
    // As a start that led, then was interrupted, releases what it acquired within its own work.
    await interruptibleStart(stop.signal, async () => {
      expect(await a.acquire()).toBe(true);
      stop.abort(new Error('SIGTERM'));
      await a.release();
    });
    expect(lease(name)!.spec).toEqual(expect.objectContaining({ holderIdentity: '', leaseDurationSeconds: 1 }));
  });

  it('a check of the leadership a start began, waiting on the API server when a signal comes after the start (the graceful stop), is not cut: no renewal failure logged, the release sent', async () => {
    const name = leaseName();
    const a = elector(name, 'pod-a', { leaseDurationSeconds: 15 });
    const leadership = new Leadership(a, { checkEvery: 100 });
    const stop = new AbortController();
    await interruptibleStart(stop.signal, () => leadership.start());
    expect(a.isLeader()).toBe(true);
    const release = api.stallNext('GET', new RegExp(`/leases/${name}$`));
    const logs = captureLogs('info');
    try {
      // The next check (its timer set within the start) waits on the API server when the signal comes.
      await until('a renewal to wait on the Lease', () => release.held === 1, 5_000);
      stop.abort(new Error('SIGTERM'));
      // The marker: a read of the Lease by the same client after the signal is answered (the held one
      // would have been given up before it).
      expect(await elector(name, 'pod-b', { leaseDurationSeconds: 15 }).acquire()).toBe(false);
      expect(release.abandoned).toBe(0);
      release();
      await leadership.stop();
      expect(logs.raw()).not.toMatch(/Lease renewal failed|leader election failed/);
      expect(lease(name)!.spec).toEqual(expect.objectContaining({ holderIdentity: '' }));
    } finally {
      logs.restore();
      release();
      await leadership.stop();
    }
  });

  /**
   * Leadership (checking every 100 ms, each request bounded at 5 s) stopped while its next check
   * waits on the Lease's read, which the stand-in holds: how long the stop took, and what it logged.
   */
  async function stoppedWhileChecking(leadership: Leadership, name: string) {
    const release = api.stallNext('GET', new RegExp(`/leases/${name}$`));
    const logs = captureLogs('info');
    try {
      await until('a check to wait on the Lease', () => release.held === 1, 5_000);
      const stopping = performance.now();
      await leadership.stop();
      const ms = performance.now() - stopping;
      await until('the stand-in to see the request given up', () => release.abandoned === 1, 3_000);
      return { ms, logs: logs.raw() };
    } finally {
      logs.restore();
      release();
      await leadership.stop();
    }
  }
  const REQUEST_BOUND_MS = 5_000;

  it('the stop cuts a renewal waiting on an API server that does not answer, and releases at once: no renewal failure logged, the Lease freed', async () => {
    const name = leaseName();
    const a = elector(name, 'pod-a', { leaseDurationSeconds: 15, requestTimeoutMs: REQUEST_BOUND_MS });
    const leadership = new Leadership(a, { checkEvery: 100 });
    await leadership.start();
    expect(a.isLeader()).toBe(true);
    const { ms, logs } = await stoppedWhileChecking(leadership, name);
    // Was: the stop waited for the renewal's request to reach its bound (5 s), then released.
    expect(ms).toBeLessThan(REQUEST_BOUND_MS / 5);
    expect(lease(name)!.spec).toEqual(expect.objectContaining({ holderIdentity: '', leaseDurationSeconds: 1 }));
    expect(logs).not.toMatch(/Lease renewal failed|leader election failed|could not release/);
    // Started again, it leads again: the stop cut only the check under way.
    await leadership.start();
    expect(a.isLeader()).toBe(true);
    await leadership.stop();
  });

  it('the stop cuts an acquisition waiting on an API server that does not answer: the stop ends at once, no failure logged', async () => {
    const name = leaseName();
    const holder = elector(name, 'pod-a', { leaseDurationSeconds: 15 });
    expect(await holder.acquire()).toBe(true);
    const leadership = new Leadership(elector(name, 'pod-b', { leaseDurationSeconds: 15, requestTimeoutMs: REQUEST_BOUND_MS }), { checkEvery: 100 });
    await leadership.start();
    const { ms, logs } = await stoppedWhileChecking(leadership, name);
    // Was: the stop waited for the acquisition's request to reach its bound (5 s).
    expect(ms).toBeLessThan(REQUEST_BOUND_MS / 5);
    expect(logs).not.toMatch(/leader election failed/);
    expect(lease(name)!.spec).toEqual(expect.objectContaining({ holderIdentity: 'pod-a' }));
    await holder.release();
  });
});

describe('the leader elector factory (cmd/leader.ts)', () => {
  const load = (overrides: Record<string, string> = {}) => Config.load({ env: {}, overrides });
  const inPod = { KUBERNETES_SERVICE_HOST: '10.0.0.1', POD_NAMESPACE: NS, POD_NAME: 'hub-dispatcher-0' };

  it('auto: a PostgreSQL advisory lock outside Kubernetes, a Lease inside', () => {
    expect(leaderElector(load(), 'postgres://w@localhost/db', { env: {} })).toBeInstanceOf(AdvisoryLockElector);
    expect(leaderElector(load(), 'postgres://w@localhost/db', { env: { KUBERNETES_SERVICE_HOST: '10.0.0.1' } })).toBeInstanceOf(AdvisoryLockElector);
    const lease = leaderElector(load(), 'postgres://w@localhost/db', { env: inPod, kube: target });
    expect(lease).toBeInstanceOf(LeaseElector);
    expect(lease.description).toBe(`Kubernetes Lease ${NS}/svc-hub-dispatch as hub-dispatcher-0`);
    expect(leaderElector(load({ 'svc.leader.backend': 'postgres' }), 'postgres://w@localhost/db', { env: inPod })).toBeInstanceOf(AdvisoryLockElector);
  });

  it('names the Lease from svc.leader.lease-name, or as the caller says (the operator)', () => {
    const config = load({ 'svc.leader.lease-name': 'hub-svc-hub-dispatch' });
    expect(leaderElector(config, 'u', { env: inPod, kube: target }).description).toContain(`${NS}/hub-svc-hub-dispatch as`);
    expect(leaderElector(config, 'u', { env: inPod, kube: target, leaseName: 'hub-svc-hub-operator' }).description).toContain(`${NS}/hub-svc-hub-operator as`);
    expect(leaderElector(config, 'u', { env: {}, leaseName: 'hub-svc-hub-operator' }).description).toBe('postgres advisory lock svc-hub:hub-svc-hub-operator');
    expect(leaderElector(config, 'u', { env: {} }).description).toBe('postgres advisory lock svc-hub:dispatch');
  });

  it('refuses a renew period not well under the lease duration, a bad Lease name, and a Lease without a namespace', () => {
    const err = (f: () => unknown) => {
      try {
        f();
      } catch (e) {
        return e as ConfigError;
      }
      throw new Error('expected a configuration error');
    };
    const timing = err(() => leaderElector(load({ 'svc.leader.check-every': '15s' }), 'u', { env: {} }));
    expect(timing).toBeInstanceOf(ConfigError);
    expect(timing.property).toBe('svc.leader.check-every');
    expect(timing.message).toMatch(/svc\.leader\.check-every .* must be well under svc\.leader\.lease-duration/);
    // Under the duration but not under half of it: the renew deadline (duration - period) would be
    // shorter than the period, so every renewal would come after it and be given up (a leadership
    // lost and taken again at every check, the operator's term ended and started again each time).
    for (const [every, duration] of [['10s', '15s'], ['7s', '15s'], ['1500ms', '3s']]) {
      const tooSlow = err(() => leaderElector(load({ 'svc.leader.check-every': every!, 'svc.leader.lease-duration': duration! }), 'u', { env: inPod, kube: target }));
      expect(tooSlow.property).toBe('svc.leader.check-every');
      expect(tooSlow.message).toContain('renew deadline');
    }
    expect(leaderElector(load({ 'svc.leader.check-every': '6s', 'svc.leader.lease-duration': '15s' }), 'u', { env: inPod, kube: target })).toBeInstanceOf(LeaseElector);
    // The advisory lock has no renew deadline: only a period not under the duration is refused there.
    expect(leaderElector(load({ 'svc.leader.check-every': '10s', 'svc.leader.lease-duration': '15s' }), 'u', { env: {} })).toBeInstanceOf(AdvisoryLockElector);
    expect(err(() => leaderElector(load({ 'svc.leader.lease-name': 'Not_A_Name' }), 'u', { env: inPod })).property).toBe('svc.leader.lease-name');
    expect(err(() => leaderElector(load({ 'svc.leader.backend': 'kubernetes' }), 'u', { env: {} })).message).toContain('POD_NAMESPACE');
  });

  it('a factory-made Lease elector leads through the stand-in, with the configured duration, and keeps leading over renewals a period apart', async () => {
    const e = leaderElector(load({ 'svc.leader.lease-name': 'factory-made', 'svc.leader.lease-duration': '2500ms', 'svc.leader.check-every': '500ms' }), 'u', { env: inPod, kube: target });
    let losses = 0;
    e.onLost(() => losses++);
    expect(await e.acquire()).toBe(true);
    expect(lease('factory-made')!.spec).toEqual(expect.objectContaining({ holderIdentity: 'hub-dispatcher-0', leaseDurationSeconds: 3 }));
    for (let i = 0; i < 3; i++) {
      await sleep(500); // renewals a configured period apart: real time passes
      expect(await e.renew()).toBe(true);
    }
    expect(losses).toBe(0);
    await e.release();
  });

  it("leads, renews, releases and takes over on what the chart grants the dispatchers' service account alone (helm template of a release `hub`: create, then get and update of its one Lease)", async () => {
    // The Lease the chart names in the dispatchers' environment (SVC_LEADER_LEASE_NAME) and grants by name.
    const name = 'hub-svc-hub-dispatch';
    api.enforceRbac([], ['stand-in-token'], { dispatcher: chartGrants({ release: 'hub', namespace: NS, component: 'dispatcher' }) });
    const from = api.requests.length;
    try {
      const kube = { server: api.url, token: 'dispatcher' };
      const config = load({ 'svc.leader.lease-name': name, 'svc.leader.lease-duration': '2s', 'svc.leader.check-every': '500ms' });
      const a = leaderElector(config, 'u', { env: { ...inPod, POD_NAME: 'hub-dispatcher-a' }, kube });
      const b = leaderElector(config, 'u', { env: { ...inPod, POD_NAME: 'hub-dispatcher-b' }, kube });
      expect(await a.acquire()).toBe(true);
      expect(await b.acquire()).toBe(false);
      expect(await a.renew()).toBe(true);
      await a.release();
      expect(await b.acquire()).toBe(true);
      expect(lease(name)!.spec).toEqual(expect.objectContaining({ holderIdentity: 'hub-dispatcher-b' }));
      await b.release();
      const calls = api.requests.slice(from).filter((r) => r.token === 'dispatcher');
      expect(calls.filter((r) => r.status === 403).map((r) => `${r.method} ${r.path}`)).toEqual([]);
      expect(new Set(calls.map((r) => r.method))).toEqual(new Set(['GET', 'POST', 'PUT']));
    } finally {
      // Every other test's calls are an administrator's again.
      api.enforceRbac([{ rules: [{ apiGroups: ['*'], resources: ['*'], verbs: ['*'] }] }]);
    }
  });
});
