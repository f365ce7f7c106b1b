import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { stringify } from 'yaml';
import { ownerClient } from '../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { until } from '../../test/harness/until.js';
import type { Database } from '../db/database.js';
import { sweepWorkflows } from './sweep.js';

/**
 * The first complete pass after an apply dates the spells it finds from the apply (docs/workflows.md,
 * "Dormancy": records already there when the workflow was applied), on the real PostgreSQL. A record
 * the hub could not have seen there is not dated from the apply: one that appeared after it, its
 * source table not written yet at the first ticks, used to be, so it was announced dormant at its
 * first sighting.
 */

let hub: TestHub;
let owner: pg.Client;
const CONNECTOR = '00000000-0000-0000-0000-00000000000c';
const ENDPOINT = '00000000-0000-0000-0000-00000000000e';

beforeAll(async () => {
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

const post = async (path: string, body: unknown) => {
  const res = await fetch(`${hub.url}${path}`, { method: 'POST', headers: { 'X-Tenant-ID': '1', 'Content-Type': 'application/yaml' }, body: stringify(body) });
  expect(res.status).toBe(201);
};

const sweep = (db: Database = hub.services.db, batch = 10_000) => sweepWorkflows(db, hub.services.events, { batch });

const sinceApply = async (workflow: string, seconds: number) =>
  until(`${seconds} s since ${workflow} was applied`, async () => (await owner.query(`select now() - tracked_since > make_interval(secs => $2) as past from workflows.workflows where name = $1`, [workflow, seconds])).rows[0]?.past);

const decided = async (workflow: string) =>
  (await owner.query<{ key: string }>(`select payload->>'key' as key from events.outbox where tenant_id = 1 and type = $1 order by 1`, [`decision.dormant.${workflow}`])).rows.map((r) => r.key);

describe('the first pass after an apply', () => {
  it('dates from the apply no record that appeared after it: an entity that could not be read had none there', async () => {
    const columns = [
      { name: 'id', type: 'text' },
      { name: 'status', type: 'text' },
    ];
    await post('/api/entities/apply', { apiVersion: 'apps.svc.io/v1', kind: 'Entity', metadata: { name: 'later' }, spec: { scope: 'crm', key: 'id', columns, sources: [{ table: 'ext.later_partners', key: 'external_id', columns: { id: 'external_id', status: 'status' } }] } });
    await post('/api/workflows/apply', { apiVersion: 'apps.svc.io/v1', kind: 'Workflow', metadata: { name: 'later-status' }, spec: { entity: 'later', stateColumn: 'status', states: ['prospect'], dormancy: { after: '2s' } } });
    // Its source table is not written yet: nothing to read.
    expect(await sweep()).toMatchObject({ workflows: 0, started: 0 });
    await sinceApply('later-status', 2.5);
    // The connector writes its first records, well after the apply and more than `after` after it.
    await hub.services.connectors.ext.ensureTable(1, 'ext.later_partners', [{ name: 'status', path: '$.status', type: 'text' }]);
    await owner.query(`insert into ext_t1.later_partners (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, status) values (1, 'n1', 'h1', '{}', $1, $2, 'prospect')`, [CONNECTOR, ENDPOINT]);
    expect(await sweep()).toMatchObject({ workflows: 1, records: 1, started: 1, emitted: 0 });
    const { rows } = await owner.query<{ fresh: boolean }>(`select s.since > w.tracked_since + interval '2 seconds' as fresh from workflows.spells s join workflows.workflows w on w.id = s.workflow_id where w.name = 'later-status'`);
    expect(rows).toEqual([{ fresh: true }]);
    expect(await decided('later-status')).toEqual([]);
  });
});
