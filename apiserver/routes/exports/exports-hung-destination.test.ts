import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { type Client, client, devClient, ownerClient } from '../../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { until } from '../../../test/harness/until.js';
import { type SilentEndpoint, startSilentEndpoint } from '../../../test/harness/silent-endpoint.js';
import { ITEM_ENTITY, itemS3Export } from '../../../test/harness/export-manifests.js';
import type { Promote } from '../../../src/connectors/types.js';

/**
 * A destination that accepts connections and never answers, to which one tenant sends many export
 * runs: each streaming run holds a database connection, so they stream at most
 * `svc.export.concurrency` at once in a process and `svc.export.concurrency-per-tenant` per tenant.
 * The rest wait (Running, heartbeats going on), the API and readiness stay up for every tenant, and
 * another tenant's run still gets a slot. The stand-in S3 endpoint is a bare TCP listener (it must
 * only accept and stay silent).
 */

let hub: TestHub;
let owner: pg.Client;
let silent: SilentEndpoint;
let endpoint: string;
const A = 1;
const B = 2;
const CONNECTOR = '00000000-0000-0000-0000-0000000000c3';
const ENDPOINT = '00000000-0000-0000-0000-0000000000e3';
const clients: Record<number, Client> = {};

const promote = (name: string, type: Promote['type']): Promote => ({ name, path: `$.${name}`, type });

function manifests(name: string) {
  return { entity: ITEM_ENTITY, exp: itemS3Export(name, endpoint) };
}

beforeAll(async () => {
  silent = await startSilentEndpoint();
  endpoint = silent.url;
  hub = await startTestHub(
    {
      'svc.datasource.pool-size': '6',
      'svc.export.concurrency': '3',
      'svc.export.concurrency-per-tenant': '2',
      'svc.export.heartbeat-every': '200ms',
      'svc.export.run-stale-after': '1s',
      'svc.export.interrupted-sweep-every': '200ms',
      'svc.http.shutdown-grace': '4s',
    },
    undefined,
    { background: true },
  );
  owner = await ownerClient(hub.ownerUrl);
  await owner.query(`insert into core.tenants (id, code, name) values (${B}, 'other', 'Other') on conflict do nothing`);
  for (const tenant of [A, B]) {
    clients[tenant] = devClient(hub.url, tenant);
    await hub.services.connectors.ext.ensureTable(tenant, 'ext.items', [promote('label', 'text')]);
    await owner.query(`insert into ext_t${tenant}.items (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, label) values ($1, 'a', 'h-a', '{}', $2, $3, 'one')`, [
      tenant,
      CONNECTOR,
      ENDPOINT,
    ]);
    for (const [name, value] of [['S3_KEY', 'key-id'], ['S3_SECRET', 'secret-key']]) expect((await clients[tenant]!.post('/api/platform/secrets', { name, value })).status).toBe(201);
    expect((await clients[tenant]!.post('/api/entities/apply', manifests('x').entity)).status).toBe(201);
  }
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop(); // stopped already by the last test
  await silent?.close();
});

async function startRun(tenant: number, name: string): Promise<string> {
  expect((await clients[tenant]!.post('/api/exports/apply', manifests(name).exp)).status).toBe(201);
  const started = await clients[tenant]!.post(`/api/exports/${name}/runs`);
  expect(started.status).toBe(202);
  return (started.body as { runId: string }).runId;
}

describe('export runs to a destination that never answers', () => {
  it('stream two at a time for one tenant and leave the API, readiness and another tenant a slot', async () => {
    const runs: Array<[string, string]> = [];
    for (let i = 1; i <= 5; i++) runs.push([`hang-${i}`, await startRun(A, `hang-${i}`)]);
    // Each streaming run connects to the endpoint (its pre-check waits there for ever): two do.
    await until('two runs of A to reach the endpoint', () => silent.sockets.size >= 2);
    // Heartbeats go on past run-stale-after: a marker run, Running with its last beat now (after every
    // run above was claimed) and never beating, is failed by the interrupted-run sweep once stale; a
    // run of A whose beats had stopped would have been failed by then too (checked below).
    const marker = await owner.query<{ id: string }>(
      `insert into exports.runs (tenant_id, export_id, export_name, entity, scope, destination, status, trigger, artifact_time, heartbeat_at)
       values ($1, gen_random_uuid(), 'stale-marker', 'item', 'crm', 's3', 'Running', 'manual', now(), now()) returning id`,
      [A],
    );
    await until('the sweep to fail the stale marker run', async () => (await owner.query('select status from exports.runs where id = $1', [marker.rows[0]!.id])).rows[0]?.status === 'Failed', 5_000);
    expect(silent.sockets.size).toBe(2);

    // Answered: a request whose connection the streams held would wait svc.datasource.connect-timeout (10 s)
    // and be a 503, readiness past svc.health.database-timeout (2 s) a 503 (no wall-clock bound a loaded machine could pass).
    expect((await clients[B]!.get('/api/entities')).status).toBe(200);
    expect((await clients[A]!.get('/api/exports')).status).toBe(200);
    expect((await fetch(`${hub.url}/q/health/ready`)).status).toBe(200);

    // The streaming runs hold their snapshot transactions open, read-only: no transaction id, so
    // the outbox (read below the oldest transaction id running on the server) is not held back.
    // A write transaction of other work may show between two statements (a loaded machine made it
    // two once): those pass, a streaming run's would stay.
    const holding = () =>
      owner.query<{ n: number }>(
        `select count(*)::int as n from pg_stat_activity where datname = current_database() and backend_xid is not null and state = 'idle in transaction'`,
      );
    const open = await owner.query<{ n: number }>(`select count(*)::int as n from pg_stat_activity where datname = current_database() and state = 'idle in transaction'`);
    expect(open.rows[0]!.n).toBeGreaterThanOrEqual(2);
    await until('no idle transaction to hold a transaction id', async () => (await holding()).rows[0]!.n === 0, 5_000);

    // Waiting runs are Running (not failed as interrupted), as are the streaming ones.
    for (const [name, id] of runs) {
      const run = (await clients[A]!.get(`/api/exports/${name}/runs/${id}`)).body as { status: string; failureCode: string | null };
      expect({ name, status: run.status, failureCode: run.failureCode }).toEqual({ name, status: 'Running', failureCode: null });
    }

    // Another tenant's run takes the third slot of the process.
    await startRun(B, 'other-hang');
    await until('the run of B to reach the endpoint', () => silent.sockets.size >= 3);
    expect(silent.sockets.size).toBe(3); // and no more: checked again once the held places below show three streams

    // The three streams hold three of the pool's 6 − 2 = 4 places for work that holds a connection
    // for long (Database.holdConnection, shared with connector chunk writes and analytic queries):
    // one more such unit starts, the next waits for a place, and the API still answers meanwhile.
    expect(hub.services.db.heldLimit).toBe(4);
    let release: () => void = () => undefined;
    const entered: string[] = [];
    const fourth = hub.services.db.holdConnection(A, async () => {
      entered.push('fourth');
      await new Promise<void>((resolve) => {
        release = resolve;
      });
    });
    const fifth = hub.services.db.holdConnection(B, async () => {
      entered.push('fifth');
    });
    await until('the fourth unit to take the last place', () => entered.includes('fourth'));
    // Answered, not a 503 after svc.datasource.connect-timeout waiting for a connection held for long.
    expect((await clients[B]!.get('/api/entities')).status).toBe(200);
    // After that request (the marker: the pool decides a unit's place when it is offered), the fifth
    // still waits; and a fourth stream would have taken the fourth unit's place, so three stream.
    expect(entered).toEqual(['fourth']);
    expect(silent.sockets.size).toBe(3);
    release();
    await Promise.all([fourth, fifth]);
    expect(entered).toEqual(['fourth', 'fifth']);
  }, 30_000);

  type Run = { id: string; status: string; failureCode: string | null; failureReason: string | null };
  const runOf = async (name: string, id: string) => (await clients[A]!.get(`/api/exports/${name}/runs/${id}`)).body as Run;
  const ended = (name: string, id: string) => until(`run ${name} to end`, async () => ((await runOf(name, id)).status !== 'Running' ? runOf(name, id) : undefined), 5_000);

  it('cancel: a streaming run ends Failed interrupted at once and gives its slot to a waiting run; a waiting one ends at once; 409 once ended, 404 unknown', async () => {
    const list = async (name: string) => ((await clients[A]!.get(`/api/exports/${name}/runs`)).body as Run[])[0]!.id;
    const streaming = await list('hang-1');
    const before = silent.accepted();
    const cancel = await clients[A]!.post(`/api/exports/hang-1/runs/${streaming}/cancel`);
    expect(cancel.status).toBe(202);
    expect((cancel.body as Run).id).toBe(streaming);
    const one = await ended('hang-1', streaming);
    expect(one.status).toBe('Failed');
    expect(one.failureCode).toBe('interrupted');
    expect(one.failureReason).toMatch(/^cancelled by .+ during the run; nothing was published/);
    // Its slot went to a waiting run of A (hang-3), which connects to the endpoint.
    await until('a waiting run to take the freed slot', () => silent.accepted() === before + 1, 5_000);

    // A run still waiting for a slot ends at once, never connecting.
    const waiting = await list('hang-5');
    expect((await clients[A]!.post(`/api/exports/hang-5/runs/${waiting}/cancel`)).status).toBe(202);
    expect((await ended('hang-5', waiting)).failureCode).toBe('interrupted');
    // Its queued turn comes when a slot of A frees after hang-4's (the stop test below): it must give
    // the slot back then, never connecting; checked there.
    expect(silent.accepted()).toBe(before + 1);

    const again = await clients[A]!.post(`/api/exports/hang-1/runs/${streaming}/cancel`);
    expect(again.status).toBe(409);
    expect(again.body).toEqual({ error: `run ${streaming} is Failed: only a Running run can be cancelled` });
    expect((await clients[A]!.post('/api/exports/hang-1/runs/00000000-0000-0000-0000-000000000000/cancel')).status).toBe(404);
    // Another tenant cannot cancel A's run.
    expect((await clients[B]!.post(`/api/exports/hang-3/runs/${await list('hang-3')}/cancel`)).status).toBe(404);
  }, 30_000);

  it('delete: the run in flight ends Failed definition, frees its slot, and stays readable under the name', async () => {
    const runs = (await clients[A]!.get('/api/exports/hang-2/runs')).body as Run[];
    const id = runs[0]!.id;
    expect(runs[0]!.status).toBe('Running');
    const before = silent.accepted();
    expect((await clients[A]!.del('/api/exports/hang-2')).status).toBe(204);
    const run = await ended('hang-2', id);
    expect(run.status).toBe('Failed');
    expect(run.failureCode).toBe('definition');
    expect(run.failureReason).toMatch(/^the export was deleted during the run/);
    // The history of the deleted name stays readable; a name that never existed is a 404.
    const history = await clients[A]!.get('/api/exports/hang-2/runs');
    expect(history.status).toBe(200);
    expect((history.body as Run[]).map((r) => r.id)).toEqual([id]);
    expect((await clients[A]!.get('/api/exports/never-was/runs')).status).toBe(404);
    expect((await clients[B]!.get('/api/exports/hang-2/runs')).status).toBe(404);
    // The freed slot went to the last waiting run of A (hang-4).
    await until('a waiting run to take the freed slot', () => silent.accepted() === before + 1, 5_000);
  }, 30_000);

  it('a stop asked by another process is read with the next heartbeat', async () => {
    const id = ((await clients[A]!.get('/api/exports/hang-3/runs')).body as Run[])[0]!.id;
    expect((await runOf('hang-3', id)).status).toBe('Running');
    // What POST …/cancel served by another replica leaves: the request, in the run's row.
    await owner.query("update exports.runs set stop_code = 'interrupted', stop_reason = 'cancelled elsewhere' where id = $1", [id]);
    const run = await ended('hang-3', id);
    expect({ code: run.failureCode, reason: run.failureReason }).toEqual({ code: 'interrupted', reason: 'cancelled elsewhere' });
    // The slot it freed went first to the queued turn of hang-5, cancelled while it waited, which gives
    // it straight back: a run of B started after takes it (the marker), and hang-5 never connected.
    const before = silent.accepted();
    await startRun(B, 'ghost-check'); // B's second slot
    await until('the run of B to take the slot hang-3 freed', () => silent.received().includes('ghost-check.csv'), { timeoutMs: 5_000, detail: () => silent.received() });
    expect(silent.received()).not.toContain('hang-5.csv');
    expect(silent.accepted()).toBe(before + 1);
  }, 30_000);

  it('a name applied again waits for the run in flight of its deleted export', async () => {
    // B's second slot is taken (ghost-check, started by the test above); A is unaffected.
    // A Running run of an earlier, deleted export of the name (run by another process).
    await owner.query(
      `insert into exports.runs (tenant_id, export_id, export_name, entity, scope, destination, status, trigger, artifact_time)
       values ($1, gen_random_uuid(), 'ghost', 'item', 'crm', 's3', 'Running', 'manual', now())`,
      [A],
    );
    expect((await clients[A]!.post('/api/exports/apply', manifests('ghost').exp)).status).toBe(201);
    const refused = await clients[A]!.post('/api/exports/ghost/runs');
    expect(refused.status).toBe(409);
    expect(refused.body).toMatchObject({ error: 'already has a run in flight' });
    await owner.query("update exports.runs set status = 'Failed', ended_at = now(), failure_code = 'interrupted', failure_reason = 'x' where export_name = 'ghost' and status = 'Running'");
    expect((await clients[A]!.post('/api/exports/ghost/runs')).status).toBe(202);
  }, 30_000);

  it('a run is read with the scope it was made under: after a delete, and after the name is applied again under another scope', async () => {
    const created = await clients[A]!.post(`/api/tenants/${A}/users`, { login: 'sales-only', name: 'Sales only' });
    const userId = (created.body as { id: number }).id;
    expect((await clients[A]!.put(`/api/tenants/${A}/users/${userId}/scopes`, { scopes: ['sales'] })).status).toBe(200);
    const sales = client(hub.url, { 'X-Tenant-ID': String(A), 'X-User-ID': String(userId) });
    // The history of a name: a run under scope crm (an earlier export of the name), one under sales.
    const insert = (scope: string, exportId = 'gen_random_uuid()') =>
      owner.query<{ id: string }>(
        `insert into exports.runs (tenant_id, export_id, export_name, entity, scope, destination, status, trigger, artifact_time, ended_at, failure_code, failure_reason)
         values ($1, ${exportId}, 'mixed', 'item', $2, 's3', 'Failed', 'manual', now(), now(), 'publication', 'x') returning id`,
        [A, scope],
      );
    const crmRun = (await insert('crm')).rows[0]!.id;
    const salesRun = (await insert('sales')).rows[0]!.id;
    // Deleted: the runs of the caller's scopes only; one of another scope is a 403.
    expect(((await sales.get('/api/exports/mixed/runs')).body as Run[]).map((r) => r.id)).toEqual([salesRun]);
    expect((await sales.get(`/api/exports/mixed/runs/${crmRun}`)).status).toBe(403);
    expect((await sales.post(`/api/exports/mixed/runs/${crmRun}/retry`)).status).toBe(403);
    expect((await clients[A]!.get('/api/exports/mixed/runs')).body as Run[]).toHaveLength(2);
    // The bypass (no user) reads every run; the name applied again (scope crm here) does not hand
    // its older runs to whoever holds the new export's scope: a crm-only user sees the crm run only.
    expect((await clients[A]!.post('/api/exports/apply', manifests('mixed').exp)).status).toBe(201);
    const crmCreated = await clients[A]!.post(`/api/tenants/${A}/users`, { login: 'crm-only', name: 'CRM only' });
    const crmId = (crmCreated.body as { id: number }).id;
    expect((await clients[A]!.put(`/api/tenants/${A}/users/${crmId}/scopes`, { scopes: ['crm'] })).status).toBe(200);
    const crm = client(hub.url, { 'X-Tenant-ID': String(A), 'X-User-ID': String(crmId) });
    expect(((await crm.get('/api/exports/mixed/runs')).body as Run[]).map((r) => r.id)).toEqual([crmRun]);
    expect((await crm.get(`/api/exports/mixed/runs/${salesRun}`)).status).toBe(403);
    expect((await crm.post(`/api/exports/mixed/runs/${salesRun}/retry`)).status).toBe(403);
    expect((await crm.post(`/api/exports/mixed/runs/${salesRun}/cancel`)).status).toBe(403);
  }, 30_000);

  it('an Export deleted through its custom resource (the manifest handler) asks its run in flight to stop too', async () => {
    const { exportHandler } = await import('../../../src/exports/manifest-handler.js');
    expect((await clients[A]!.post('/api/exports/apply', manifests('by-operator').exp)).status).toBe(201);
    const { rows } = await owner.query<{ id: string }>(
      `insert into exports.runs (tenant_id, export_id, export_name, entity, scope, destination, status, trigger, artifact_time)
       select tenant_id, id, name, entity, scope, 's3', 'Running', 'manual', now() from exports.exports where tenant_id = $1 and name = 'by-operator' returning id`,
      [A],
    );
    expect(await hub.services.db.withTenant(A, (tx) => exportHandler.remove(tx, 'by-operator'))).toBe(true);
    const stop = await owner.query('select stop_code, stop_reason from exports.runs where id = $1', [rows[0]!.id]);
    expect(stop.rows[0]).toEqual({ stop_code: 'definition', stop_reason: expect.stringMatching(/^the export was deleted during the run/) });
  }, 30_000);

  // Last: it stops the hub.
  it('a hub that stops fails its streaming runs interrupted as the stop begins, not after the grace given to requests', async () => {
    // B's two slots are taken (other-hang, ghost-check), and the process's third by A: B's runs are
    // cancelled first, or the run would only wait for a slot, and the stop would fail a waiting run,
    // not a streaming one (A's two slots stay taken: none of its runs takes a slot freed here).
    const { rows: running } = await owner.query<{ id: string; name: string }>("select id, export_name as name from exports.runs where tenant_id = $1 and status = 'Running'", [B]);
    for (const { id, name } of running) expect((await clients[B]!.post(`/api/exports/${name}/runs/${id}/cancel`)).status).toBe(202);
    await until("B's runs to end", async () => (await owner.query("select 1 from exports.runs where tenant_id = $1 and status = 'Running'", [B])).rows.length === 0, 5_000);
    expect((await clients[B]!.post('/api/exports/apply', manifests('at-stop').exp)).status).toBe(201);
    const started = await clients[B]!.post('/api/exports/at-stop/runs');
    expect(started.status).toBe(202);
    const id = (started.body as { runId: string }).runId;
    // Its own request at the endpoint (the names of the runs before it are there already).
    await until('the run to stream (its request at the endpoint)', () => silent.received().includes('at-stop.csv'), { timeoutMs: 5_000, detail: () => silent.received() });
    // A request that never ends (its body never does): the server waits the whole grace (4 s) for it.
    const { request } = await import('node:http');
    const held = request(`${hub.url}/api/platform/secrets`, { method: 'POST', headers: { 'X-Tenant-ID': String(B), 'content-type': 'application/json', 'transfer-encoding': 'chunked', expect: '100-continue' } });
    held.on('error', () => undefined);
    // Marker of a request in flight: the server parsed its head (its 100 Continue), then the body begins.
    const continued = new Promise((resolve) => held.once('continue', resolve));
    held.flushHeaders();
    await continued;
    held.write('{"name": "HELD", ');
    // The held request ends when the grace does (the server closes it): the marker the run is failed before.
    let graceOver = false;
    held.once('close', () => {
      graceOver = true;
    });
    const stopping = Date.now();
    const stopped = hub.stop();
    await until('the run to be failed', async () => (await owner.query('select status from exports.runs where id = $1', [id])).rows[0]?.status === 'Failed', { timeoutMs: 10_000, everyMs: 50 });
    const failedBeforeGraceOver = !graceOver;
    await stopped;
    held.destroy();
    const stopMs = Date.now() - stopping;
    const run = (await owner.query('select failure_code, failure_reason from exports.runs where id = $1', [id])).rows[0];
    expect(run).toEqual({ failure_code: 'interrupted', failure_reason: expect.stringMatching(/^the hub stopped during the run/) });
    // The stop waited for the held request; the run did not.
    expect(stopMs).toBeGreaterThanOrEqual(3_500);
    expect(failedBeforeGraceOver).toBe(true);
  }, 30_000);
});
