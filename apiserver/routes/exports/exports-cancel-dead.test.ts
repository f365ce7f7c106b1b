import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { type Client, devClient, ownerClient } from '../../../test/harness/api-client.js';
import { itemS3Export, prepareItemExports } from '../../../test/harness/export-manifests.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { captureLogs, type LogCapture } from '../../../test/harness/log-capture.js';
import { until } from '../../../test/harness/until.js';

/**
 * Cancelling an export run (or deleting its export) that no live process holds (its process died: the run is Running, its
 * last heartbeat older than svc.export.run-stale-after, its publication lock free) ends it at once,
 * with the cancel's outcome, instead of leaving it Running until the interrupted-run sweep fails it
 * with the sweep's reason. A run whose process may still hold it (a fresh heartbeat, or its
 * publication lock held: its file is being published) is only asked to stop, as before.
 *
 * No process of the test runs these runs: each is written Running into the ledger as a claim left
 * it, its heartbeat set as the case needs. The hub runs no sweep (no background roles).
 */

let hub: TestHub;
let owner: pg.Client;
let api: Client;
let logs: LogCapture;

beforeAll(async () => {
  logs = captureLogs('info');
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
  api = devClient(hub.url, 1);
  await prepareItemExports(hub, api);
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
  logs?.restore();
});

/** Export `name` applied, and a Running run of it whose last heartbeat was `beatAgo` ago. */
async function runningRun(name: string, beatAgo: string): Promise<string> {
  expect((await api.post('/api/exports/apply', itemS3Export(name, 'http://127.0.0.1:9'))).status).toBe(201);
  const { rows } = await owner.query<{ id: string }>(
    `insert into exports.runs (tenant_id, export_id, export_name, entity, scope, destination, status, trigger, artifact_time, heartbeat_at)
     select 1, id, name, entity, scope, 's3', 'Running', 'manual', now(), now() - $2::interval from exports.exports where tenant_id = 1 and name = $1
     returning id`,
    [name, beatAgo],
  );
  return rows[0]!.id;
}

const record = async (name: string, id: string) => (await api.get(`/api/exports/${name}/runs/${id}`)).body as Record<string, unknown>;

describe('cancelling an export run', () => {
  it('whose process died: the run ends at once, Failed interrupted, with a reason naming who cancelled it', async () => {
    const id = await runningRun('dead-run', '1 hour');
    const cancelled = await api.post(`/api/exports/dead-run/runs/${id}/cancel`);
    expect(cancelled.status).toBe(202);
    // Was: the answer and the record said Running until the sweep failed it with its own reason.
    const expected = {
      status: 'Failed',
      failureCode: 'interrupted',
      failureReason: expect.stringMatching(/^cancelled by .+ after the run's process had stopped \(no heartbeat for 30 s\): a partial file .* may be left behind/),
      endedAt: expect.any(String),
    };
    expect(cancelled.body).toMatchObject(expected);
    expect(await record('dead-run', id)).toMatchObject(expected);
    expect(logs.lines().filter((l) => l.runId === id && /failed as interrupted on cancel/.test(String(l.msg)))).toHaveLength(1);
    // Its export's place is free: a second cancel is told it has ended.
    expect((await api.post(`/api/exports/dead-run/runs/${id}/cancel`)).status).toBe(409);
  });

  it('whose process lives (a fresh heartbeat): it is asked to stop and stays Running until that process ends it', async () => {
    const id = await runningRun('live-run', '0 seconds');
    const cancelled = await api.post(`/api/exports/live-run/runs/${id}/cancel`);
    expect(cancelled.status).toBe(202);
    expect(cancelled.body).toMatchObject({ status: 'Running' });
    expect(await record('live-run', id)).toMatchObject({ status: 'Running', failureCode: null });
    const { rows } = await owner.query('select stop_code from exports.runs where id = $1', [id]);
    expect(rows).toEqual([{ stop_code: 'interrupted' }]);
  });

  it('whose file is being published (its publication lock held), its heartbeat stale all the same: never marked cancelled', async () => {
    const id = await runningRun('publishing-run', '1 hour');
    // A process holding the run's publication lock, as the runner's fence does while the file appears.
    const publisher = await ownerClient(hub.ownerUrl);
    try {
      await publisher.query('begin');
      await publisher.query(`select pg_advisory_xact_lock(hashtextextended('svc-hub:export-publication:' || $1::text, 0))`, [id]);
      const cancelled = await api.post(`/api/exports/publishing-run/runs/${id}/cancel`);
      expect(cancelled.status).toBe(202);
      expect(cancelled.body).toMatchObject({ status: 'Running' });
      expect(await record('publishing-run', id)).toMatchObject({ status: 'Running', failureCode: null });
      // The publication then records its end, as the fence does under its lock.
      await publisher.query(
        `update exports.runs set status = 'Completed', ended_at = clock_timestamp(), row_count = 0, byte_count = 0, sha256 = 'x', location = 's3://drops/publishing-run.csv' where id = $1 and status = 'Running'`,
        [id],
      );
      await publisher.query('commit');
    } finally {
      await publisher.end();
    }
    expect(await record('publishing-run', id)).toMatchObject({ status: 'Completed', failureCode: null });
  });
});

describe('deleting an export whose run is Running', () => {
  it('and whose process died: the run ends at once, and the name applied again can run', async () => {
    const id = await runningRun('dead-deleted', '1 hour');
    expect((await api.del('/api/exports/dead-deleted')).status).toBe(204);
    // Was: Running (its stop request never read) until the sweep failed it, and the name's next run
    // refused meanwhile (409 already has a run in flight).
    expect(await record('dead-deleted', id)).toMatchObject({
      status: 'Failed',
      failureCode: 'interrupted',
      failureReason: expect.stringMatching(/^the export was deleted after the run's process had stopped \(no heartbeat for 30 s\): a partial file .* may be left behind$/),
      endedAt: expect.any(String),
    });
    expect(logs.lines().filter((l) => l.runId === id && /failed as interrupted on delete/.test(String(l.msg)))).toHaveLength(1);
    expect((await api.post('/api/exports/apply', itemS3Export('dead-deleted', 'http://127.0.0.1:9'))).status).toBe(201);
    const next = await api.post('/api/exports/dead-deleted/runs');
    expect(next.status).toBe(202);
    // Its run fails (nothing listens at the endpoint); waited for so the hub stops with nothing in flight.
    const nextId = (next.body as { runId: string }).runId;
    await until('the next run to end', async () => ['Completed', 'Failed'].includes(String((await record('dead-deleted', nextId)).status)));
  });

  it('and whose process lives (a fresh heartbeat): the run is asked to stop and stays Running', async () => {
    const id = await runningRun('live-deleted', '0 seconds');
    expect((await api.del('/api/exports/live-deleted')).status).toBe(204);
    expect(await record('live-deleted', id)).toMatchObject({ status: 'Running', failureCode: null });
    const { rows } = await owner.query('select stop_code from exports.runs where id = $1', [id]);
    expect(rows).toEqual([{ stop_code: 'definition' }]);
  });
});
