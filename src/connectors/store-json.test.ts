import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { readdirSync, readFileSync } from 'node:fs';
import { parseAllDocuments } from 'yaml';
import pg from 'pg';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import type { Tx } from '../db/database.js';
import { migrate } from '../db/migrations.js';
import { applyConnector, getConnector, listConnectorsJson, loadConnector } from './store.js';

/**
 * The connectors list the API answers is made by the database (`listConnectorsJson`), and so is
 * the record `getConnector` answers (one statement serves both): each must be, byte for byte, the
 * text `JSON.stringify` gives for the records derived here from the stored spec (`loadConnector`)
 * and the endpoint rows' watermarks, for every kind of connector the examples declare (REST,
 * GraphQL, SOAP, each pagination), with watermarks set and not, an endpoint disabled, a re-apply
 * that changes an endpoint, and after the migration that stores each endpoint's summary filled
 * the columns from the specs already stored.
 */

interface PlanNode {
  'Actual Rows': number;
  'Actual Loops': number;
  Plans?: PlanNode[];
}

let hub: TestHub;
let owner: pg.Client;
const EXAMPLES = new URL('../../examples/', import.meta.url);

beforeAll(async () => {
  hub = await startTestHub();
  owner = new pg.Client({ connectionString: hub.ownerUrl });
  await owner.connect();
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

/** The record of a connector as the API shows it, derived from its spec and its endpoint rows. */
async function derived(tx: Tx, name: string): Promise<unknown> {
  const spec = (await loadConnector(tx, name))!;
  const { rows } = await owner.query('select connector_type, scopes, schedule, created_at, updated_at from connectors.connectors where id = $1', [spec.id]);
  const marks = await owner.query<{ uuid: string; watermark: string | null; watermark_updated_at: Date | null; resume_shown: string | null; resume_run: string | null }>(
    'select uuid, watermark, watermark_updated_at, resume_shown, resume_run from connectors.endpoints where connector_id = $1',
    [spec.id],
  );
  const mark = new Map(marks.rows.map((m) => [m.uuid, m]));
  const row = rows[0]!;
  return {
    id: spec.id,
    name,
    connectorType: row.connector_type,
    scopes: row.scopes,
    schedule: row.schedule,
    endpoints: spec.endpoints.map((e) => ({
      id: e.id,
      uuid: e.uuid,
      enabled: e.enabled,
      kind: e.graphql ? 'graphql' : 'rest',
      method: e.method,
      path: e.path,
      pagination: e.pagination.kind,
      table: e.target.table,
      syncMode: e.incremental.mode,
      watermark: mark.get(e.uuid)?.watermark ?? null,
      watermarkUpdatedAt: mark.get(e.uuid)?.watermark_updated_at ?? null,
      resumeFrom: mark.get(e.uuid)?.resume_shown ?? null,
      resumeRunId: mark.get(e.uuid)?.resume_run ?? null,
    })),
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

/** The list's text, getConnector's records and the derived ones, each as one JSON text. */
async function both(): Promise<{ database: string; got: string; stringified: string }> {
  return hub.services.db.withTenant(1, async (tx) => {
    const json = await listConnectorsJson(tx);
    const records = [];
    const got = [];
    for (const { name } of JSON.parse(json.text) as Array<{ name: string }>) {
      records.push(await derived(tx, name));
      const { manifest: _m, spec: _s, ...record } = (await getConnector(tx, name))!;
      got.push(record);
    }
    return { database: json.text, got: JSON.stringify(got), stringified: JSON.stringify(records) };
  });
}

/**
 * Applies every example connector (tenant 1) and answers their manifests. A case that needs them
 * applies them itself: the manifests it finds stored are no change (an apply of them writes nothing).
 */
async function applyExamples(): Promise<Array<{ kind?: string }>> {
  const manifests = readdirSync(EXAMPLES)
    .filter((file) => file.endsWith('.yaml'))
    .flatMap((file) => parseAllDocuments(readFileSync(new URL(file, EXAMPLES), 'utf8')).map((doc) => doc.toJS() as { kind?: string }))
    .filter((doc) => doc?.kind === 'Connector');
  expect(manifests.length).toBeGreaterThan(10);
  for (const manifest of manifests) await hub.services.db.withTenant(1, (tx) => applyConnector(tx, manifest));
  return manifests;
}

describe('listConnectorsJson', () => {
  it('answers [] when the tenant has no connector', async () => {
    expect(await both()).toEqual({ database: '[]', got: '[]', stringified: '[]' });
  });

  it("is getConnector's records as JSON.stringify writes them, for every example connector", async () => {
    const manifests = await applyExamples();
    const before = await both();
    expect(before.database).toBe(before.stringified);
    expect(before.got).toBe(before.stringified);
    expect(JSON.parse(before.database)).toHaveLength(manifests.length);

    // Watermarks with text that needs escaping, a time with microseconds, and one endpoint disabled.
    await owner.query(
      `update connectors.endpoints set watermark = E'2026-12-04T03:25:04Z "quoted" \\\\ back\\nline é 😀', watermark_updated_at = '2026-12-04 03:25:04.123456+00'
        where uuid = (select uuid from connectors.endpoints order by uuid limit 1)`,
    );
    await owner.query(`update connectors.endpoints set watermark = '42', watermark_updated_at = now() where uuid = (select uuid from connectors.endpoints order by uuid desc limit 1)`);
    const manifest = manifests[0] as { spec: { endpoints: Array<Record<string, unknown>> } };
    await hub.services.db.withTenant(1, (tx) =>
      applyConnector(tx, { ...manifest, spec: { ...manifest.spec, endpoints: manifest.spec.endpoints.map((e, i) => (i === 0 ? { ...e, enabled: false } : e)) } }),
    );
    const after = await both();
    expect(after.database).toBe(after.stringified);
    expect(after.got).toBe(after.stringified);
    const parsed = JSON.parse(after.database) as Array<{ endpoints: Array<{ watermark: string | null; enabled: boolean }> }>;
    const endpoints = parsed.flatMap((c) => c.endpoints);
    expect(endpoints.filter((e) => e.watermark !== null)).toHaveLength(2);
    expect(endpoints.some((e) => e.enabled === false)).toBe(true);

    // A re-apply that reorders a connector's endpoints and changes one's path and method: the stored summary follows.
    const several = manifests.find((m) => (m as { spec: { endpoints: unknown[] } }).spec.endpoints.length > 1) as { metadata: { name: string }; spec: { endpoints: Array<Record<string, unknown>> } };
    expect(several).toBeDefined();
    const reordered = [...several.spec.endpoints].reverse().map((e, i) => (i === 0 ? { ...e, path: '/moved/here', method: 'POST' } : e));
    await hub.services.db.withTenant(1, (tx) => applyConnector(tx, { ...several, spec: { ...several.spec, endpoints: reordered } }));
    const changed = await both();
    expect(changed.database).toBe(changed.stringified);
    expect(changed.got).toBe(changed.stringified);
    const record = (JSON.parse(changed.database) as Array<{ name: string; endpoints: Array<{ id: string; path: string; method: string }> }>).find((c) => c.name === several.metadata.name)!;
    expect(record.endpoints.map((e) => e.id)).toEqual(reordered.map((e) => e.id));
    expect(record.endpoints[0]).toMatchObject({ path: '/moved/here', method: 'POST' });
  });

  it("makes each endpoint's JSON once: no step of the list's plan yields more rows than the tenant has connectors or endpoints", async () => {
    await applyExamples();
    // The example connectors, several of them with several endpoints. The tables
    // are small and not analyzed, as on most hubs: an aggregate over all the tenant's endpoints
    // joined to the connectors was run again for each connector (every endpoint's JSON made once per
    // connector: a plan step yielding connectors × endpoints / 2 rows).
    const { rows: counts } = await owner.query<{ connectors: number; endpoints: number }>(
      'select (select count(*) from connectors.connectors where tenant_id = 1)::int as connectors, (select count(*) from connectors.endpoints where tenant_id = 1)::int as endpoints',
    );
    const { connectors, endpoints } = counts[0]!;
    expect(connectors).toBeGreaterThan(10);
    expect(endpoints).toBeGreaterThan(connectors);
    const plan = await hub.services.db.readWithTenant(1, async (tx) => {
      let explained: unknown;
      const explaining: Tx = {
        ...tx,
        query: async (text, values) => {
          const { rows } = await tx.query(`explain (analyze, format json) ${text}`, values);
          explained = rows[0]!['QUERY PLAN'];
          return { rows: [{ body: '[]' }] } as unknown as pg.QueryResult;
        },
      };
      await listConnectorsJson(explaining);
      return explained as Array<{ Plan: PlanNode }>;
    });
    const yielded: number[] = [];
    const walk = (node: PlanNode) => {
      yielded.push(Math.round(node['Actual Rows'] * node['Actual Loops']));
      for (const child of node.Plans ?? []) walk(child);
    };
    walk(plan[0]!.Plan);
    expect(Math.max(...yielded)).toBeLessThanOrEqual(endpoints);
  });

  it('the migration that stores the summary fills it from the specs already stored', async () => {
    await applyExamples();
    const expected = await both();
    expect(JSON.parse(expected.database).length).toBeGreaterThan(10);
    // The columns as before that migration, then the migration again (recorded as not applied).
    await owner.query('alter table connectors.endpoints drop column kind, drop column method, drop column path, drop column pagination, drop column target_table, drop column sync_mode');
    await owner.query(`delete from public.svc_schema_history where schema = 'connectors' and version = 6`);
    // Refused as out of order at a start (a later connectors version is applied): applied here on purpose.
    await expect(migrate(hub.ownerUrl, null)).rejects.toThrow('migration connectors V6 (V6__endpoint_summary.sql) is not applied');
    expect(await migrate(hub.ownerUrl, null, undefined, { outOfOrder: true })).toBe(1);
    const again = await both();
    expect(again.database).toBe(expected.database);
    expect(again.got).toBe(expected.stringified);
  });
});
