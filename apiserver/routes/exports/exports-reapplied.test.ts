import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type AddressInfo, createServer, type Server, type Socket } from 'node:net';
import type pg from 'pg';
import { type Client, devClient, ownerClient } from '../../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { until } from '../../../test/harness/until.js';
import { ITEM_ENTITY, itemS3Export } from '../../../test/harness/export-manifests.js';
import type { Promote } from '../../../src/connectors/types.js';
import { deleteExport } from '../../../src/exports/store.js';

/**
 * A run waiting for a slot whose export is deleted by another process (another replica served the
 * DELETE: this one learns it from the run's row) and whose name is applied again, with another
 * destination, before this process's heartbeat reads the stop. When a slot frees, the run must end
 * Failed as its export's deletion says, never stream to the new export's destination. The two S3
 * endpoints are bare TCP listeners: the test only counts who connects to them.
 */

let hub: TestHub;
let owner: pg.Client;
let lockHolder: pg.Client;
const listeners: Server[] = [];
const sockets = new Set<Socket>();
const accepted = { old: 0, renewed: 0 };
const endpoints = { old: '', renewed: '' };
const A = 1;
let api: Client;

const promote = (name: string, type: Promote['type']): Promote => ({ name, path: `$.${name}`, type });

async function silentListener(which: keyof typeof accepted): Promise<void> {
  const server = createServer((socket) => {
    sockets.add(socket);
    accepted[which]++;
    socket.on('data', () => undefined);
    socket.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  listeners.push(server);
  endpoints[which] = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

beforeAll(async () => {
  await silentListener('old');
  await silentListener('renewed');
  hub = await startTestHub({
    'svc.export.concurrency': '1',
    'svc.export.concurrency-per-tenant': '1',
    'svc.export.heartbeat-every': '200ms',
  });
  owner = await ownerClient(hub.ownerUrl);
  lockHolder = await ownerClient(hub.ownerUrl);
  api = devClient(hub.url, A);
  await hub.services.connectors.ext.ensureTable(A, 'ext.items', [promote('label', 'text')]);
  await owner.query(`insert into ext_t${A}.items (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, label) values ($1, 'a', 'h-a', '{}', gen_random_uuid(), gen_random_uuid(), 'one')`, [A]);
  for (const [name, value] of [['S3_KEY', 'key-id'], ['S3_SECRET', 'secret-key']]) expect((await api.post('/api/platform/secrets', { name, value })).status).toBe(201);
  expect((await api.post('/api/entities/apply', ITEM_ENTITY)).status).toBe(201);
});

afterAll(async () => {
  await lockHolder?.end();
  await owner?.end();
  await hub?.stop();
  for (const socket of sockets) socket.destroy();
  for (const server of listeners) await new Promise((resolve) => server.close(resolve));
});

type Run = { id: string; status: string; failureCode: string | null; failureReason: string | null };

/** The run once it is no longer Running. */
const ended = (name: string, id: string) =>
  until(
    `run ${id} of ${name} to end`,
    async () => {
      const r = (await api.get(`/api/exports/${name}/runs/${id}`)).body as Run;
      return r.status !== 'Running' && r;
    },
    10_000,
  );

async function startRun(name: string): Promise<string> {
  const started = await api.post(`/api/exports/${name}/runs`);
  expect(started.status).toBe(202);
  return (started.body as { runId: string }).runId;
}

describe('a waiting run whose export was deleted elsewhere and its name applied again', () => {
  it('ends Failed as the deletion says when a slot frees, and never connects to the new destination', async () => {
    expect((await api.post('/api/exports/apply', itemS3Export('first', endpoints.old))).status).toBe(201);
    expect((await api.post('/api/exports/apply', itemS3Export('second', endpoints.old))).status).toBe(201);
    const streaming = await startRun('first');
    await until('the first run to reach its endpoint', () => accepted.old === 1);
    const waiting = await startRun('second'); // the one slot is taken: it waits
    expect(((await api.get(`/api/exports/second/runs/${waiting}`)).body as Run).status).toBe('Running');

    // Another replica serves DELETE /api/exports/second: the export row goes, the stop request is
    // left in the run's row for the process that runs it.
    const deleted = await hub.services.db.withTenant(A, (tx) => deleteExport(tx, 'second'));
    expect(deleted).toEqual({ deleted: true, stopped: [waiting], ended: [] });
    // This process's heartbeat must not read it first: the run's row is held locked until the run
    // has shown what it does with its slot.
    await lockHolder.query('begin');
    await lockHolder.query('select 1 from exports.runs where id = $1 for update', [waiting]);
    try {
      // The name applied again, with another destination.
      expect((await api.post('/api/exports/apply', itemS3Export('second', endpoints.renewed))).status).toBe(201);
      // A slot frees: the first run is cancelled.
      expect((await api.post(`/api/exports/first/runs/${streaming}/cancel`)).status).toBe(202);
      // Either the waiting run streams to the new destination (wrong), or it ends and its
      // "Failed" waits on the lock held here.
      const endingOnLock = async () => {
        const { rows } = await owner.query<{ n: number }>(
          "select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query like 'update exports.runs set status = ''Failed''%'",
        );
        return rows[0]!.n > 0;
      };
      // On a loaded machine the run's heartbeat (every 200 ms) may read the stop request between the
      // deletion's commit and the lock taken here (CI once): the run has then ended as the deletion
      // says before a slot freed, which the assertions below hold it to all the same.
      const endedAlready = async () => {
        const { rows } = await owner.query<{ status: string }>('select status from exports.runs where id = $1', [waiting]);
        return rows[0]?.status !== 'Running';
      };
      await until('the waiting run to take the slot and end or stream', async () => accepted.renewed > 0 || (await endingOnLock()) || (await endedAlready()), 15_000);
      expect(accepted).toEqual({ old: 1, renewed: 0 });
    } finally {
      await lockHolder.query('commit');
    }
    const run = await ended('second', waiting);
    expect({ status: run.status, code: run.failureCode }).toEqual({ status: 'Failed', code: 'definition' });
    expect(run.failureReason).toMatch(/^the export was deleted during the run; nothing was published/);

    // Nor does a retry of it run under the export of the name now: 409.
    const retry = await api.post(`/api/exports/second/runs/${waiting}/retry`);
    expect(retry.status).toBe(409);
    expect(retry.body).toEqual({ error: `run ${waiting} is of an export named second that was deleted since: start a new run instead (POST /api/exports/second/runs)` });
    // The export applied again runs as itself: to its own destination.
    await startRun('second');
    await until('the new export to reach its own endpoint', () => accepted.renewed === 1);
    expect(accepted.old).toBe(1);
  }, 60_000);

  it('a delete and cancels of one run at once: the first stop stands, and only its caller is told it was accepted', async () => {
    // The one slot is held by the run of the export applied again (its endpoint never answers).
    expect((await api.post('/api/exports/apply', itemS3Export('third', endpoints.old))).status).toBe(201);
    const waiting = await startRun('third');
    // All four reach the run's row together: it is held locked until each waits on it.
    await lockHolder.query('begin');
    await lockHolder.query('select 1 from exports.runs where id = $1 for update', [waiting]);
    const calls = Promise.all([api.del('/api/exports/third'), ...[1, 2, 3].map(() => api.post(`/api/exports/third/runs/${waiting}/cancel`))]);
    try {
      await until('the four to wait on the run', async () => {
        // The stop requests only: the run's own heartbeat (every 200 ms) waits on the row too.
        const { rows } = await owner.query<{ n: number }>("select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query like 'update exports.runs set stop_code%'");
        return rows[0]!.n === 4;
      }, 25_000); // four HTTP calls to reach the database: slow on a loaded 2-core machine
    } finally {
      await lockHolder.query('commit');
    }
    const [deleted, ...cancels] = await calls;
    expect(deleted!.status).toBe(204);
    const run = await ended('third', waiting);
    const accepted = cancels.filter((c) => c.status === 202);
    // Every cancel not accepted is a 409 saying why: the stop that stands, or the run's end.
    for (const c of cancels.filter((c) => c.status !== 202)) {
      expect(c.status).toBe(409);
      expect((c.body as { error: string }).error).toMatch(new RegExp(`^run ${waiting} is (being stopped already: |Failed: )`));
    }
    expect(accepted.length).toBeLessThanOrEqual(1);
    expect(run.failureCode).toBe(accepted.length === 1 ? 'interrupted' : 'definition');

    // Its name not applied again, the retry of that run is the same 409 as when it was (not a 404:
    // the run is there), and a run the name never had is a 404.
    const retry = await api.post(`/api/exports/third/runs/${waiting}/retry`);
    expect(retry.status).toBe(409);
    expect(retry.body).toEqual({ error: `run ${waiting} is of an export named third that was deleted since: start a new run instead (POST /api/exports/third/runs)` });
    expect((await api.post('/api/exports/third/runs/00000000-0000-4000-8000-000000000000/retry')).status).toBe(404);
  }, 60_000);
});
