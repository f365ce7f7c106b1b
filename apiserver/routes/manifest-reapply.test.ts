import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { stringify } from 'yaml';
import { ownerClient } from '../../test/harness/api-client.js';
import { ITEM_ENTITY, itemS3Export } from '../../test/harness/export-manifests.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';

/**
 * An apply of the manifest the hub stores, through the HTTP apply path of every kind (Connector,
 * Entity, Export, Workflow, Process), over a real database: 200 with `unchanged: true`, the row not
 * written (its `updated_at`, `updated_by` and `xmin` kept), no outbox event; the same manifest with
 * its keys in another order (as YAML) is still unchanged; a changed manifest is written
 * (`unchanged: false`, a later `updated_at`). Each case applies objects of its own; the Entity
 * the Workflow and the Export name (`item`) is applied once, before them all.
 */

let hub: TestHub;
let owner: pg.Client;

beforeAll(async () => {
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
  await hub.services.connectors.ext.ensureTable(1, 'ext.reapply_partners', [{ name: 'status', path: '$.status', type: 'text' }]);
  await hub.services.connectors.ext.ensureTable(1, 'ext.items', [{ name: 'label', path: '$.label', type: 'text' }]);
  expect((await apply('Entity', ITEM_ENTITY)).status).toBe(201);
}, 60_000);

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

type Json = Record<string, unknown>;

const PATHS: Record<string, { apply: string; table: string }> = {
  Connector: { apply: '/api/connectors/apply', table: 'connectors.connectors' },
  Entity: { apply: '/api/entities/apply', table: 'entities.entities' },
  Export: { apply: '/api/exports/apply', table: 'exports.exports' },
  Workflow: { apply: '/api/workflows/apply', table: 'workflows.workflows' },
  Process: { apply: '/api/processes/apply', table: 'processes.processes' },
};

function entity(name: string, ...scopes: string[]): Json {
  return {
    apiVersion: 'apps.svc.io/v1',
    kind: 'Entity',
    metadata: { name },
    spec: {
      scope: scopes,
      key: 'partner_id',
      columns: [
        { name: 'partner_id', type: 'text', label: 'Partner id' },
        { name: 'status', type: 'text' },
        { name: 'name', type: 'text' },
      ],
      sources: [{ table: 'ext.reapply_partners', key: 'external_id', columns: { partner_id: 'external_id', status: 'status', name: '$.name' } }],
    },
  };
}

const manifests: Record<string, () => Json> = {
  Connector: () => ({
    apiVersion: 'connectors.svc.io/v1',
    kind: 'Connector',
    metadata: { name: 'reapplied' },
    connector_type: 'rest-generic',
    scopes: ['partners'],
    spec: { base_url: 'http://127.0.0.1:9', schedule: '0 3 * * *', endpoints: [{ id: 'rows', path: '/rows', target: { table: 'ext.reapplied_rows', unique_key: '$.id' } }] },
  }),
  Entity: () => entity('reapplied', 'partners'),
  Export: () => itemS3Export('reapplied', 'http://127.0.0.1:9'),
  Workflow: () => ({
    apiVersion: 'apps.svc.io/v1',
    kind: 'Workflow',
    metadata: { name: 'reapplied' },
    spec: { entity: 'item', stateColumn: 'label', states: ['prospect', 'active'], transitions: [{ from: 'prospect', to: 'active' }], dormancy: { after: '30d' } },
  }),
  Process: () => ({
    apiVersion: 'apps.svc.io/v1',
    kind: 'Process',
    metadata: { name: 'reapplied' },
    spec: { event: 'connector.run.*', when: 'payload.records_out > 1000', decision: 'decision.big-run', message: 'Run {{payload.run_id}}' },
  }),
};

/** What a real change does to each kind's manifest. */
const changes: Record<string, (m: Json) => void> = {
  Connector: (m) => ((m.spec as Json).schedule = '0 4 * * *'),
  Entity: (m) => (((m.spec as { columns: Json[] }).columns[0]!).label = 'Partner'),
  Export: (m) => ((m.spec as Json).columns = ['label', 'id']),
  Workflow: (m) => (((m.spec as Json).dormancy as Json).after = '7d'),
  Process: (m) => ((m.spec as Json).message = 'Big run {{payload.run_id}}'),
};

async function apply(kind: string, manifest: Json, options: { yaml?: boolean; user?: string } = {}) {
  const headers: Record<string, string> = { 'X-Tenant-ID': '1', 'Content-Type': options.yaml ? 'application/yaml' : 'application/json' };
  if (options.user) headers['X-User-ID'] = options.user;
  const res = await fetch(`${hub.url}${PATHS[kind]!.apply}`, { method: 'POST', headers, body: options.yaml ? stringify(manifest) : JSON.stringify(manifest) });
  return { status: res.status, body: (await res.json()) as Json };
}

/** The stored row as written last: when, by whom, and the transaction that wrote it. */
async function row(kind: string, name: string) {
  const { rows } = await owner.query(`select updated_at, updated_by, xmin::text as xmin from ${PATHS[kind]!.table} where tenant_id = 1 and name = $1`, [name]);
  return rows[0] as { updated_at: Date; updated_by: string | null; xmin: string };
}

async function outboxCount(): Promise<number> {
  return (await owner.query<{ n: number }>('select count(*)::int as n from events.outbox where tenant_id = 1')).rows[0]!.n;
}

/** The same object with every object's keys in reverse order (arrays kept in order). */
function reordered(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(reordered);
  if (value && typeof value === 'object') return Object.fromEntries(Object.entries(value).reverse().map(([k, v]) => [k, reordered(v)]));
  return value;
}

describe('an apply of the manifest stored', () => {
  it.each(Object.keys(PATHS))('%s: 200 unchanged, nothing written, no event; a changed one is written', async (kind) => {
    const manifest = manifests[kind]!();
    const created = await apply(kind, manifest);
    expect(created).toMatchObject({ status: 201, body: { name: 'reapplied', unchanged: false } });
    const before = await row(kind, 'reapplied');
    const events = await outboxCount();

    // Another caller, the same manifest as JSON, then as YAML with its keys in another order.
    const again = await apply(kind, manifest, { user: 'someone-else' });
    expect(again).toEqual({ status: 200, body: { ...created.body, unchanged: true } });
    expect(await apply(kind, reordered(manifest) as Json, { yaml: true })).toEqual(again);
    expect(await row(kind, 'reapplied')).toEqual(before);
    expect(await outboxCount()).toBe(events);

    changes[kind]!(manifest);
    const changed = await apply(kind, manifest);
    expect(changed).toMatchObject({ status: 200, body: { name: 'reapplied', unchanged: false } });
    const after = await row(kind, 'reapplied');
    expect(after.xmin).not.toBe(before.xmin);
    expect(after.updated_at.getTime()).toBeGreaterThan(before.updated_at.getTime());
    expect(await apply(kind, manifest)).toMatchObject({ status: 200, body: { unchanged: true } });
  });

  it('a Workflow whose entity now has another first scope is applied again (its default scope follows)', async () => {
    const workflow = manifests.Workflow!();
    workflow.metadata = { name: 'follows' };
    workflow.spec = { ...(workflow.spec as Json), entity: 'moving', stateColumn: 'status' };
    expect((await apply('Entity', entity('moving', 'partners', 'sales'))).status).toBe(201);
    expect((await apply('Workflow', workflow)).status).toBe(201);
    expect((await apply('Workflow', workflow)).body.unchanged).toBe(true);

    expect((await apply('Entity', entity('moving', 'sales', 'partners'))).body.unchanged).toBe(false);
    expect((await apply('Workflow', workflow)).body.unchanged).toBe(false);
    const read = await fetch(`${hub.url}/api/platform/workflows/follows`, { headers: { 'X-Tenant-ID': '1' } });
    expect(((await read.json()) as Json).scope).toBe('sales');
  });

  /**
   * What a hub of an older version may have stored for the same manifest: a normalised form the
   * current code no longer produces (a field it dropped; for a Process, its columns).
   */
  const olderForm: Record<string, string> = {
    Connector: `update connectors.connectors set spec = spec || '{"retired": true}' where tenant_id = 1 and name = $1`,
    Entity: `update entities.entities set spec = spec || '{"retired": true}' where tenant_id = 1 and name = $1`,
    Export: `update exports.exports set spec = spec || '{"retired": true}' where tenant_id = 1 and name = $1`,
    Workflow: `update workflows.workflows set spec = spec || '{"retired": true}' where tenant_id = 1 and name = $1`,
    Process: `update processes.processes set message = 'as normalised before' where tenant_id = 1 and name = $1`,
  };
  /** The stored normalised form of the object. */
  const normalised = async (kind: string, name: string) =>
    (await owner.query(`select ${kind === 'Process' ? 'event, when_expr, decision, message' : 'spec'} from ${PATHS[kind]!.table} where tenant_id = 1 and name = $1`, [name])).rows[0] as unknown;

  it.each(Object.keys(PATHS))('%s: the manifest stored over a normalised form the current code would not produce is applied again (the form refreshed)', async (kind) => {
    const manifest = manifests[kind]!();
    manifest.metadata = { name: 'upgraded' };
    expect((await apply(kind, manifest)).status).toBe(201);
    const current = await normalised(kind, 'upgraded');
    await owner.query(olderForm[kind]!, ['upgraded']);
    expect(await normalised(kind, 'upgraded')).not.toEqual(current);
    const before = await row(kind, 'upgraded');

    expect(await apply(kind, manifest)).toMatchObject({ status: 200, body: { name: 'upgraded', unchanged: false } });
    expect(await normalised(kind, 'upgraded')).toEqual(current);
    expect((await row(kind, 'upgraded')).xmin).not.toBe(before.xmin);
    expect(await apply(kind, manifest)).toMatchObject({ status: 200, body: { unchanged: true } });
  });
});
