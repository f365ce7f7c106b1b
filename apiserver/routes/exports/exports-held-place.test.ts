import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { type Client, devClient, ownerClient } from '../../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { until } from '../../../test/harness/until.js';
import { type SilentEndpoint, startSilentEndpoint } from '../../../test/harness/silent-endpoint.js';
import { ITEM_ENTITY, itemS3Export } from '../../../test/harness/export-manifests.js';

/**
 * An export run that has its streaming slot still waits for a place among the process's units
 * holding a connection for long (Database.holdConnection, shared with connector chunk writes and
 * analytic queries). Stopped while it waits there (a cancel, a delete), it ends at once, and gives
 * the place straight back when it comes; a run claimed while the hub stops ends at once too. The
 * one-shot download takes a place as well. The
 * stand-in S3 endpoint only accepts connections: a run that reached it would show as a connection.
 */

let hub: TestHub;
let owner: pg.Client;
let silent: SilentEndpoint;
let endpoint: string;
let api: Client;
const A = 1;
/** Releases the units holding every place, when a test holds them. */
let releaseHeld: () => void = () => undefined;

type Run = { id: string; status: string; failureCode: string | null; failureReason: string | null };
const runOf = async (name: string, id: string) => (await api.get(`/api/exports/${name}/runs/${id}`)).body as Run;
const ended = (name: string, id: string) => until(`run ${name} to end`, async () => ((await runOf(name, id)).status !== 'Running' ? runOf(name, id) : undefined), 3_000);

async function startRun(name: string): Promise<string> {
  expect((await api.post('/api/exports/apply', itemS3Export(name, endpoint))).status).toBe(201);
  const started = await api.post(`/api/exports/${name}/runs`);
  expect(started.status).toBe(202);
  return (started.body as { runId: string }).runId;
}

/** Two units holding both places (as a connector's chunk writes and analytic queries would) until `releaseHeld()`: their ends. */
async function holdBothPlaces(): Promise<Array<Promise<void>>> {
  const release = new Promise<void>((resolve) => {
    releaseHeld = resolve;
  });
  const entered: number[] = [];
  const held = [1, 2].map((n) =>
    hub.services.db.holdConnection(A, async () => {
      entered.push(n);
      await release;
    }),
  );
  await until('both places to be held', () => entered.length === 2);
  return held;
}

beforeAll(async () => {
  silent = await startSilentEndpoint();
  endpoint = silent.url;
  // A pool of 4: two places for units holding a connection for long, two export slots.
  hub = await startTestHub({
    'svc.datasource.pool-size': '4',
    'svc.export.concurrency': '2',
    'svc.export.concurrency-per-tenant': '2',
    'svc.export.heartbeat-every': '200ms',
    'svc.export.run-stale-after': '1s',
  });
  owner = await ownerClient(hub.ownerUrl);
  api = devClient(hub.url, A);
  await hub.services.connectors.ext.ensureTable(A, 'ext.items', [{ name: 'label', path: '$.label', type: 'text' }]);
  await owner.query(
    `insert into ext_t1.items (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, label)
     values (1, 'a', 'h-a', '{}', '00000000-0000-0000-0000-0000000000c7', '00000000-0000-0000-0000-0000000000e7', 'one')`,
  );
  for (const [name, value] of [['S3_KEY', 'key-id'], ['S3_SECRET', 'secret-key']]) expect((await api.post('/api/platform/secrets', { name, value })).status).toBe(201);
  expect((await api.post('/api/entities/apply', ITEM_ENTITY)).status).toBe(201);
});

afterAll(async () => {
  releaseHeld();
  await owner?.end();
  await hub?.stop();
  await silent?.close();
});

describe('an export run waiting for a place among the units holding a connection', () => {
  it('ends at once when cancelled or its export deleted, and never streams when the place comes', async () => {
    expect(hub.services.db.heldLimit).toBe(2);
    // Two units (a connector's chunk writes, analytic queries) hold both places.
    const held = await holdBothPlaces();

    const cancelled = await startRun('held-cancel');
    const deleted = await startRun('held-delete');
    // Heartbeats go on while they wait: each beat past half of run-stale-after after its claim.
    await until(
      'both waiting runs to beat past half of run-stale-after',
      async () => (await owner.query(`select count(*)::int as n from exports.runs where id in ($1, $2) and heartbeat_at > started_at + interval '500 milliseconds'`, [cancelled, deleted])).rows[0].n === 2,
      5_000,
    );
    expect((await runOf('held-cancel', cancelled)).status).toBe('Running');
    expect((await runOf('held-delete', deleted)).status).toBe('Running');

    expect((await api.post(`/api/exports/held-cancel/runs/${cancelled}/cancel`)).status).toBe(202);
    const one = await ended('held-cancel', cancelled);
    expect({ status: one.status, code: one.failureCode }).toEqual({ status: 'Failed', code: 'interrupted' });
    expect(one.failureReason).toMatch(/^cancelled by .+ during the run; nothing was published/);

    expect((await api.del('/api/exports/held-delete')).status).toBe(204);
    const two = await ended('held-delete', deleted);
    expect({ status: two.status, code: two.failureCode }).toEqual({ status: 'Failed', code: 'definition' });
    expect(two.failureReason).toMatch(/^the export was deleted during the run/);

    // The places free: the stopped runs give theirs straight back, and neither reaches the endpoint.
    releaseHeld();
    await Promise.all(held);
    const after = hub.services.db.holdConnection(A, async () => 'free');
    await expect(after).resolves.toBe('free');
    // A marker run started after them goes the same way (a slot, then a place) and reaches the
    // endpoint; neither stopped run did. Cancelled, it gives both back for the next tests.
    const marker = await startRun('held-marker');
    await until('the marker run to reach the endpoint', () => silent.received().includes('held-marker.csv'), { timeoutMs: 5_000, detail: () => silent.received() });
    expect(silent.received()).not.toMatch(/held-(cancel|delete)\.csv/);
    expect(silent.accepted()).toBe(1);
    expect((await api.post(`/api/exports/held-marker/runs/${marker}/cancel`)).status).toBe(202);
    await ended('held-marker', marker);
  }, 20_000);

  it('the one-shot download takes a place too: it waits while both are held, and the API answers meanwhile', async () => {
    const held = await holdBothPlaces();
    let answered = false;
    const download = api.get('/api/exports/entities/item/download').then((r) => {
      answered = true;
      return r;
    });
    // Both places held: the download waits among the units asking for one (two holding, it waiting).
    const pool = hub.services.db as unknown as { held: { size(): number } };
    await until('the download to wait for a place', () => pool.held.size() === 3);
    expect((await api.get('/api/exports')).status).toBe(200);
    expect(answered).toBe(false);
    releaseHeld();
    await Promise.all(held);
    const got = await download;
    expect(got.status).toBe(200);
    expect(got.headers.get('x-row-count')).toBe('1');
  }, 20_000);

  it('a run claimed while the hub stops its runs ends at once, interrupted', async () => {
    // What a scheduler tick or a request already claiming as the stop begins meets.
    await hub.services.exports.close();
    const id = await startRun('held-closing');
    const run = await ended('held-closing', id);
    expect({ status: run.status, code: run.failureCode, reason: run.failureReason }).toEqual({
      status: 'Failed',
      code: 'interrupted',
      reason: 'the hub was stopping when the run was claimed. Retry it',
    });
    expect(silent.received()).not.toContain('held-closing.csv');
  }, 20_000);
});
