import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { ownerClient } from '../../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';

/**
 * The run and dead-letter lists (GET /api/platform/runs, GET /api/platform/dlq) probed from outside:
 * the order the newest `limit` runs are chosen in is the order they are shown in, and the `run` and
 * `connector` filters take an id as the records show it and treat any other text as naming nothing.
 */

let hub: TestHub;
let owner: pg.Client;
const H = { 'X-Tenant-ID': '1' };

beforeAll(async () => {
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
  await owner.query(`insert into core.tenants (id, code, name) values (2, 'other', 'Other')`);
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

async function list<T>(path: string, headers: Record<string, string> = H): Promise<T[]> {
  const res = await fetch(`${hub.url}${path}`, { headers });
  expect(res.status).toBe(200);
  return (await res.json()) as T[];
}

const ids = async (path: string) => (await list<{ id: string }>(path)).map((r) => r.id);

describe('GET /api/platform/runs', () => {
  it('shows the newest runs first by their start instant, sub-millisecond included: a smaller limit answers a prefix of a larger one', async () => {
    // Started within one millisecond; the newer one has the larger id, so an order by id would show it second.
    const newer = 'ffffffff-0000-4000-8000-000000000000';
    const older = '00000000-0000-4000-8000-000000000001';
    const connector = '10000000-0000-4000-8000-000000000000';
    await owner.query(
      `insert into connectors.runs (id, tenant_id, connector_id, connector_name, status, triggered_by, started_at) values
        ($1, 1, $3, 'timing', 'Completed', 'manual', '2999-01-01 00:00:00.000900+00'),
        ($2, 1, $3, 'timing', 'Completed', 'manual', '2999-01-01 00:00:00.000100+00'),
        ('aaaaaaaa-0000-4000-8000-000000000000', 2, $3, 'timing', 'Completed', 'manual', '3000-01-01 00:00:00+00')`,
      [newer, older, connector],
    );
    expect(await ids('/api/platform/runs?limit=1')).toEqual([newer]);
    expect(await ids('/api/platform/runs?limit=2')).toEqual([newer, older]);
    const all = await ids('/api/platform/runs?limit=200');
    expect(all.slice(0, 2)).toEqual([newer, older]);
    expect(all).not.toContain('aaaaaaaa-0000-4000-8000-000000000000');
  });

  it('a run id of any shape but a UUID is unknown (404), a text of 36 hyphens or hex digits too', async () => {
    for (const id of ['-'.repeat(36), 'a'.repeat(36), '{00000000-0000-4000-8000-000000000001}']) {
      const res = await fetch(`${hub.url}/api/platform/runs/${encodeURIComponent(id)}`, { headers: H });
      expect([id, res.status, await res.json()]).toEqual([id, 404, { error: 'run not found' }]);
    }
  });
});

describe('GET /api/platform/dlq', () => {
  const csv = ['id,name', '1,Ann', ',Nobody'].join('\r\n');
  let runId: string;
  let connectorId: string;

  beforeAll(async () => {
    const res = await fetch(`${hub.url}/api/platform/sources/csv/ingest?connector=crm-lists&table=crm_lists&key=id`, {
      method: 'POST',
      headers: { ...H, 'Content-Type': 'text/csv' },
      body: csv,
    });
    expect(res.status).toBe(200);
    ({ id: runId, connectorId } = (await res.json()) as { id: string; connectorId: string });
  });

  it('`connector` takes the id the entries show, in either case, as it takes the name', async () => {
    const byName = await list<{ id: number; connectorId: string }>('/api/platform/dlq?connector=crm-lists');
    expect(byName).toHaveLength(1);
    expect(byName[0]!.connectorId).toBe(connectorId);
    expect(await list(`/api/platform/dlq?connector=${connectorId}`)).toEqual(byName);
    expect(await list(`/api/platform/dlq?connector=${connectorId.toUpperCase()}`)).toEqual(byName);
    // Another tenant names the same source: nothing of tenant 1's.
    expect(await list(`/api/platform/dlq?connector=${connectorId}`, { 'X-Tenant-ID': '2' })).toEqual([]);
    expect(await list('/api/platform/dlq?connector=crm-lists', { 'X-Tenant-ID': '2' })).toEqual([]);
  });

  it('`run` names a run by its UUID, in either case; any other text names no run (an empty list, never a database error)', async () => {
    expect(await list(`/api/platform/dlq?run=${runId.toUpperCase()}`)).toHaveLength(1);
    expect(await list(`/api/platform/dlq?run=${runId}`, { 'X-Tenant-ID': '2' })).toEqual([]);
    for (const run of ['-'.repeat(36), 'f'.repeat(36), runId.replaceAll('-', ''), `{${runId}}`, 'x']) {
      expect([run, await list(`/api/platform/dlq?run=${encodeURIComponent(run)}`)]).toEqual([run, []]);
    }
  });

  it('`connector` by name lists the entries of every connector the name has had, as the run list shows its runs', async () => {
    const ingest = async (body: string) => {
      const res = await fetch(`${hub.url}/api/platform/sources/csv/ingest?connector=gens&table=gens&key=id`, { method: 'POST', headers: { ...H, 'Content-Type': 'text/csv' }, body });
      expect(res.status).toBe(200);
      return (await res.json()) as { id: string; connectorId: string; deadLetterCount: number };
    };
    // Ingested as a CSV source with no manifest, then under a manifest of that name applied since.
    const before = await ingest(['id,name', ',First'].join('\r\n'));
    const applied = await fetch(`${hub.url}/api/connectors/apply`, {
      method: 'POST',
      headers: { ...H, 'Content-Type': 'application/json' },
      body: JSON.stringify({
        apiVersion: 'connectors.svc.io/v1', kind: 'Connector', metadata: { name: 'gens' }, connector_type: 'rest-generic',
        spec: { base_url: 'http://127.0.0.1:9', endpoints: [{ id: 'e', path: '/x', pagination: { kind: 'none' }, target: { table: 'ext.gens_rest', unique_key: '$.id' } }] },
      }),
    });
    expect(applied.status).toBe(201);
    const after = await ingest(['id,name', ',Second'].join('\r\n'));
    expect([before.deadLetterCount, after.deadLetterCount]).toEqual([1, 1]);
    expect(after.connectorId).not.toBe(before.connectorId);
    expect((await ids('/api/platform/runs?connector=gens')).sort()).toEqual([before.id, after.id].sort());
    const entries = await list<{ runId: string }>('/api/platform/dlq?connector=gens');
    expect(entries.map((e) => e.runId)).toEqual([after.id, before.id]);
    // By id: that connector's only.
    expect((await list<{ runId: string }>(`/api/platform/dlq?connector=${before.connectorId}`)).map((e) => e.runId)).toEqual([before.id]);
  });
});
