import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { type Client, devClient, ownerClient } from '../../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { captureLogs, type LogCapture } from '../../../test/harness/log-capture.js';
import { startS3, type TestS3 } from '../../../test/harness/s3.js';
import { until } from '../../../test/harness/until.js';
import { itemS3Export, seedItemExports } from '../../../test/harness/export-manifests.js';
import type { Tx } from '../../../src/db/database.js';
import { failInterrupted, INTERRUPTED_REASON } from '../../../src/exports/runs/ledger.js';

/**
 * A live export run that the interrupted-run sweep fails (its heartbeats held up past
 * `svc.export.run-stale-after`: a stalled database, an application pool taken by requests) must
 * not publish its file afterwards: its record says Failed `interrupted`, and a file landing then
 * would be a delivery nobody has a receipt for (a retry would meet a collision).
 *
 * The run is held inside its snapshot by a lock on its source table; meanwhile the sweep's own
 * statement (`failInterrupted`, with a staleness of 0) fails it, as it would a run whose beats
 * stopped. Two hubs: one that beats rarely (only the check just before the file appears can
 * notice), one that beats every 200 ms (the next beat notices, and the run stops streaming at once).
 */

let s3: TestS3;
const BUCKET = 'drops';

beforeAll(async () => {
  s3 = await startS3();
  s3.createBucket(BUCKET);
});

afterAll(async () => {
  await s3?.stop();
});

interface Setup {
  hub: TestHub;
  owner: pg.Client;
  api: Client;
}

async function setUp(overrides: Record<string, string>): Promise<Setup> {
  const hub = await startTestHub(overrides);
  const owner = await ownerClient(hub.ownerUrl);
  const api = devClient(hub.url, 1);
  await seedItemExports(hub, owner, api, s3, 50);
  return { hub, owner, api };
}

/** The sweep's statement, run by the test: every Running run counts as stale. */
async function sweepEveryRun(owner: pg.Client): Promise<string[]> {
  const tx = { tenantId: undefined, query: (text: string, values?: unknown[]) => owner.query(text, values) } as unknown as Tx;
  return (await failInterrupted(tx, 0)).map((r) => r.id);
}

/**
 * Starts a run of export `name` held in its snapshot by a lock on the source table, and fails it
 * as the sweep would while it is held. Returns the run id and the lock's release.
 */
async function heldAndSwept(s: Setup, name: string): Promise<{ id: string; release: () => Promise<void> }> {
  const manifest = itemS3Export(name, s3.endpoint);
  manifest.spec.destination.region = s3.region;
  expect((await s.api.post('/api/exports/apply', manifest)).status).toBe(201);
  const locker = await ownerClient(s.hub.ownerUrl);
  const release = async () => {
    await locker.query('commit');
    await locker.end();
  };
  await locker.query('begin');
  // This lock gives the transaction an xid: left open by a failed assertion it would hold back what
  // every outbox reader of the shared test server may read, for the rest of the worker's life.
  await locker.query('lock table ext_t1.items in access exclusive mode');
  try {
    return await sweptWhileHeld(s, name, release);
  } catch (err) {
    await release();
    throw err;
  }
}

async function sweptWhileHeld(s: Setup, name: string, release: () => Promise<void>): Promise<{ id: string; release: () => Promise<void> }> {
  const started = await s.api.post(`/api/exports/${name}/runs`);
  expect(started.status).toBe(202);
  const id = (started.body as { runId: string }).runId;
  await until('the run to wait on the lock', async () => {
    const { rows } = await s.owner.query("select 1 from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query ilike '%copy%'");
    return rows.length > 0;
  });
  // The sweep skips a run whose row a heartbeat holds at that moment (`for update skip locked`), or
  // that a beat committed just after the sweep's statement began; its next tick takes it, as here.
  const swept = await until('the sweep to fail the run', async () => {
    const ids = await sweepEveryRun(s.owner);
    return ids.length > 0 ? ids : undefined;
  });
  expect(swept).toEqual([id]);
  return { id, release };
}

const ended = (logs: LogCapture, id: string) => logs.lines().find((l) => l.runId === id && typeof l.msg === 'string' && l.msg.startsWith('export run '));

async function expectSweptAndUnpublished(s: Setup, name: string, id: string) {
  const run = (await s.api.get(`/api/exports/${name}/runs/${id}`)).body as Record<string, unknown>;
  expect(run).toMatchObject({ status: 'Failed', failureCode: 'interrupted', failureReason: INTERRUPTED_REASON, sha256: null });
  expect(s3.getObject(BUCKET, `${name}.csv`)).toBeUndefined();
  expect(s3.requests.filter((r) => r.method === 'PUT' && r.url.startsWith(`/${BUCKET}/${name}.csv`))).toEqual([]);
  expect(s3.listMultipartUploads(BUCKET)).toEqual([]);
  // Nothing landed: a retry publishes the file (no collision).
  const retried = await s.api.post(`/api/exports/${name}/runs/${id}/retry`);
  expect(retried.status).toBe(202);
  const retryId = (retried.body as { runId: string }).runId;
  await until('the retry to end', async () => ((await s.api.get(`/api/exports/${name}/runs/${retryId}`)).body as { status: string }).status !== 'Running');
  const retry = (await s.api.get(`/api/exports/${name}/runs/${retryId}`)).body;
  expect({ retry }).toMatchObject({ retry: { status: 'Completed', rowCount: 50, failureReason: null } });
  expect(s3.getObject(BUCKET, `${name}.csv`)).toBeDefined();
}

describe('an export run failed by the sweep while it still runs', () => {
  it('publishes nothing: the check just before its file appears finds its record ended', async () => {
    // Beats so rare that none comes during the test: only the check before the commit can notice.
    const s = await setUp({ 'svc.export.heartbeat-every': '1h', 'svc.export.run-stale-after': '2h' });
    const logs = captureLogs('info');
    try {
      const { id, release } = await heldAndSwept(s, 'fenced');
      await release();
      await until('the run to end in its process', () => ended(logs, id) !== undefined);
      expect(ended(logs, id)).toMatchObject({ status: 'Failed', failureCode: 'interrupted' });
      await expectSweptAndUnpublished(s, 'fenced', id);
    } finally {
      logs.restore();
      await s.owner.end();
      await s.hub.stop();
    }
  }, 60_000);

  it('stops at its next heartbeat, still inside its snapshot, and publishes nothing', async () => {
    const s = await setUp({ 'svc.export.heartbeat-every': '200ms', 'svc.export.run-stale-after': '1h' });
    const logs = captureLogs('info');
    try {
      const { id, release } = await heldAndSwept(s, 'beaten');
      try {
        // The lock is still held: the run ended because a beat found its record Failed.
        await until('the run to end in its process', () => ended(logs, id) !== undefined, { timeoutMs: 5_000, detail: () => JSON.stringify(logs.lines().slice(-8)) });
      } finally {
        await release();
      }
      expect(ended(logs, id)).toMatchObject({ status: 'Failed', failureCode: 'interrupted' });
      await expectSweptAndUnpublished(s, 'beaten', id);
    } finally {
      logs.restore();
      await s.owner.end();
      await s.hub.stop();
    }
  }, 60_000);
});
