import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { type Client, devClient, ownerClient } from '../../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { type CommitRelay, startCommitRelay } from '../../../test/harness/s3-relay.js';
import { startS3, type TestS3 } from '../../../test/harness/s3.js';
import { until } from '../../../test/harness/until.js';
import { captureLogs } from '../../../test/harness/log-capture.js';
import { itemS3Export, seedItemExports } from '../../../test/harness/export-manifests.js';
import type { Tx } from '../../../src/db/database.js';
import { failInterrupted } from '../../../src/exports/runs/ledger.js';
import { after, headPosition, positionOf } from '../../../src/events/outbox.js';

/**
 * The publication of an export run, once admitted (every byte at S3, its publication lock held,
 * its record still Running), is never cut and its record says what happened: the time limit passing, the
 * hub stopping, or the sweep failing the run after the publication's lock was lost with its
 * connection, all while S3 has stored the object and its answer is on its way (a relay holds it,
 * test/harness/s3-relay.ts), or its snapshot's connection lost. And a worker pool with no
 * connection free just before the publication is waited out, not reported as a failed publication.
 */

let s3: TestS3;
let relay: CommitRelay;
let hub: TestHub;
let owner: pg.Client;
let api: Client;
let stops: ReturnType<typeof captureLogs>;
const BUCKET = 'drops';
const POOL = 3;

type Run = { status: string; failureCode: string | null; failureReason: string | null; sha256: string | null; byteCount: number | null; startedAt: string; endedAt: string | null };

beforeAll(async () => {
  stops = captureLogs('info');
  s3 = await startS3();
  s3.createBucket(BUCKET);
  relay = await startCommitRelay(s3.endpoint, BUCKET);
  hub = await startTestHub({
    'svc.export.snapshot.timeout-seconds': '2',
    'svc.datasource.pool-size': String(POOL),
    'svc.datasource.connect-timeout': '500ms',
    // No beat during a test: the sweep's statement is run by the test where it matters.
    'svc.export.heartbeat-every': '1h',
    'svc.export.run-stale-after': '2h',
  });
  owner = await ownerClient(hub.ownerUrl);
  api = devClient(hub.url, 1);
  await seedItemExports(hub, owner, api, s3, 20);
});

afterAll(async () => {
  stops.restore();
  await owner?.end();
  await hub?.stop();
  await relay?.close();
  await s3?.stop();
});

async function exportTo(name: string): Promise<void> {
  const manifest = itemS3Export(name, relay.endpoint);
  manifest.spec.destination.region = s3.region;
  expect((await api.post('/api/exports/apply', manifest)).status).toBe(201);
}

async function start(name: string): Promise<string> {
  const started = await api.post(`/api/exports/${name}/runs`);
  expect(started.status).toBe(202);
  return (started.body as { runId: string }).runId;
}

const runOf = async (name: string, id: string) => (await api.get(`/api/exports/${name}/runs/${id}`)).body as Run;

async function ended(name: string, id: string): Promise<Run> {
  await until(`run ${id} to end`, async () => (await runOf(name, id)).status !== 'Running');
  return runOf(name, id);
}

/** Waits until run `id` was asked to stop (`code`) while it publishes: the publication went on past it. */
async function stopSeen(id: string, code: string): Promise<void> {
  await until(`run ${id} asked to stop (${code}) while publishing`, () =>
    stops.lines().some((l) => l.msg === 'export run asked to stop while it publishes: the publication is not cut, the run ends as it does' && l.runId === id && l.stop === code),
  );
}

/** Completed with the receipt of the object S3 holds, its end after the publication's answer. */
async function expectPublished(name: string, run: Run, answeredAt: number) {
  expect({ status: run.status, failureCode: run.failureCode, failureReason: run.failureReason }).toEqual({ status: 'Completed', failureCode: null, failureReason: null });
  expect(s3.getObject(BUCKET, `${name}.csv`)?.body.length).toBe(run.byteCount);
  expect(new Date(run.endedAt!).getTime()).toBeGreaterThanOrEqual(answeredAt - 50);
}

describe('an export run publishing (S3 has stored the object, its answer held)', () => {
  it('is not cut by its time limit: the run ends Completed, its end the moment it knew', async () => {
    await exportTo('slow-answer');
    const { stored, release } = relay.hold('slow-answer.csv');
    const id = await start('slow-answer');
    await stored;
    // The 2 s time limit passes while the answer is held.
    await stopSeen(id, 'generation');
    const answeredAt = Date.now();
    release();
    await expectPublished('slow-answer', await ended('slow-answer', id), answeredAt);
  }, 30_000);

  it('is recorded Completed when the sweep failed it after the publication\'s lock was lost with its connection', async () => {
    await exportTo('lost-lock');
    const { stored, release } = relay.hold('lost-lock.csv');
    const id = await start('lost-lock');
    await stored;
    // The fence's connection (idle in its transaction, holding the lock) cut, then the sweep's statement.
    const cut = await owner.query(
      `select pg_terminate_backend(a.pid) as cut from pg_stat_activity a
        where a.datname = current_database() and a.state = 'idle in transaction' and exists (select 1 from pg_locks l where l.pid = a.pid and l.locktype = 'advisory' and l.granted)`,
    );
    expect(cut.rows).toEqual([{ cut: true }]);
    const tx = { tenantId: undefined, query: (text: string, values?: unknown[]) => owner.query(text, values) } as unknown as Tx;
    await until('the sweep to fail the run', async () => (await failInterrupted(tx, 0)).some((r) => r.id === id));
    expect((await runOf('lost-lock', id)).status).toBe('Failed');
    const answeredAt = Date.now();
    release();
    await until('the record to be corrected', async () => (await runOf('lost-lock', id)).status === 'Completed');
    await expectPublished('lost-lock', await runOf('lost-lock', id), answeredAt);
  }, 30_000);

  it('holds no transaction id while it publishes: events committed meanwhile are read by the outbox consumers at once', async () => {
    await exportTo('no-xid');
    const { stored, release } = relay.hold('no-xid.csv');
    const id = await start('no-xid');
    try {
      await stored;
      // The publication is admitted and under way (its answer held): an event committed now must be
      // readable (its transaction older than every one still running on the server) without waiting
      // for the destination, or every outbox consumer of the server waits for it too.
      const query = (text: string, values?: unknown[]) => owner.query(text, values);
      const eventId = await hub.services.db.withTenant(1, (tx) => hub.services.events.emit(tx, 'org.updated', { orgId: 1, tenantId: 1 }));
      const written = (await positionOf(query, eventId))!;
      await until('the event to be readable while the publication is held', async () => !after(written, await headPosition(query)), {
        timeoutMs: 5_000,
        detail: () => 'a transaction of the publication holds a transaction id',
      });
      // The sweep passes over the publishing run all the same (its lock is held), however stale.
      const tx = { tenantId: undefined, query: (text: string, values?: unknown[]) => owner.query(text, values) } as unknown as Tx;
      expect((await failInterrupted(tx, 0)).map((r) => r.id)).not.toContain(id);
      expect((await runOf('no-xid', id)).status).toBe('Running');
    } finally {
      release();
    }
    const run = await ended('no-xid', id);
    expect({ status: run.status, failureReason: run.failureReason }).toEqual({ status: 'Completed', failureReason: null });
  }, 30_000);

  it('waits out a worker pool with no connection free before it publishes (no spurious publication failure)', async () => {
    await exportTo('busy-pool');
    // Every connection of the worker pool taken (the outbox consumers of a busy hub, say) until the
    // run's first try has found none (a wait for one gives up after 500 ms); it tries again a second
    // later. A run the failed try ended would end Failed, not Completed (the check below).
    const taken = await Promise.all(Array.from({ length: POOL }, () => hub.services.db.worker.connect()));
    let id: string;
    try {
      id = await start('busy-pool');
      await until('a try to find no connection', () => stops.lines().some((l) => l.msg === 'export run: no database connection to check its record before publishing; trying again' && l.runId === id));
      expect((await runOf('busy-pool', id)).status).toBe('Running');
    } finally {
      for (const client of taken) client.release();
    }
    const run = await ended('busy-pool', id);
    expect({ status: run.status, failureReason: run.failureReason }).toEqual({ status: 'Completed', failureReason: null });
    expect(s3.getObject(BUCKET, 'busy-pool.csv')).toBeDefined();
  }, 30_000);

  // Last: it closes the runner of this hub.
  it('ends Completed when its snapshot connection is lost meanwhile (the snapshot read whole, the file published)', async () => {
    await exportTo('lost-snapshot');
    const { stored, release } = relay.hold('lost-snapshot.csv');
    const id = await start('lost-snapshot');
    await stored;
    // The snapshot's transaction stays open, idle, until the publication answers: its connection
    // lost then (the database restarted, an idle_in_transaction_session_timeout) changes nothing.
    const { rows } = await owner.query<{ killed: boolean }>(
      `select pg_terminate_backend(pid) as killed from pg_stat_activity
        where datname = current_database() and usename = 'svc_app' and state = 'idle in transaction' and query ilike 'copy (%'`,
    );
    expect(rows).toEqual([{ killed: true }]);
    const answeredAt = Date.now();
    release();
    await expectPublished('lost-snapshot', await ended('lost-snapshot', id), answeredAt);
  }, 30_000);

  it('is not cut by the hub stopping: the run ends Completed once S3 answers', async () => {
    await exportTo('at-stop');
    const { stored, release } = relay.hold('at-stop.csv');
    const id = await start('at-stop');
    await stored;
    const closed = hub.services.exports.close();
    await stopSeen(id, 'interrupted');
    expect((await runOf('at-stop', id)).status).toBe('Running');
    const answeredAt = Date.now();
    release();
    await closed;
    await expectPublished('at-stop', await runOf('at-stop', id), answeredAt);
  }, 30_000);
});
