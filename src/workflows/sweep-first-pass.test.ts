import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { stringify } from 'yaml';
import { ownerClient } from '../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { until } from '../../test/harness/until.js';
import { applySweptWorkflow } from '../../test/harness/workflow-fixture.js';
import type { Database } from '../db/database.js';
import { sweepWorkflows } from './sweep.js';

/**
 * The first complete pass after an apply dates the spells it finds from the apply (docs/workflows.md,
 * "Dormancy": records already there when the workflow was applied), on the real PostgreSQL. What it
 * does not date from the apply: records the hub could not have seen there, and states the hub saw
 * change. A record that appeared after the apply (its source table not written yet) and a record
 * seen by a first pass that stopped before its end and then changed state used to be dated from the
 * apply, so they were announced dormant at their first sighting.
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

/** The database, but a sweep's second part written fails: a pass that stops there, as a process that stopped would. */
function stoppingAtSecondPart(): Database {
  let parts = 0;
  const failing = Object.create(hub.services.db) as Database;
  failing.withTenant = (tenantId, fn) =>
    hub.services.db.withTenant(tenantId, (tx) =>
      fn({
        tenantId: tx.tenantId,
        query: async (text, values, options) => {
          if (/ for share$/.test(text) && ++parts === 2) throw new Error('the process stopped here');
          return tx.query(text, values, options) as never;
        },
      }),
    );
  return failing;
}

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

  it('dates a state it saw change from when it saw it, after a first pass that stopped before its end', async () => {
    await owner.query(`delete from workflows.workflows where name = 'later-status'`);
    await applySweptWorkflow(hub, owner, { name: 'broken', records: 3, key: "'p' || g", status: "'prospect'", states: ['prospect', 'active'], dormancy: { after: '2s', states: ['prospect', 'active'] } });
    // The first pass writes its first part (p1, batch 1), then stops: its second part's transaction fails.
    expect(await sweep(stoppingAtSecondPart(), 1)).toMatchObject({ workflows: 0 });
    const spells = async () => (await owner.query<{ key: string; state: string; at_apply: boolean }>(`select s.record_key as key, s.state, abs(extract(epoch from s.since - w.tracked_since)) < 0.001 as at_apply from workflows.spells s join workflows.workflows w on w.id = s.workflow_id where w.name = 'broken-status' order by 1`)).rows;
    expect(await spells()).toEqual([{ key: 'p1', state: 'prospect', at_apply: true }]);
    // p1 moves on; once `after` has passed since the apply, the next pass completes the first.
    await owner.query(`update ext_t1.broken_partners set status = 'active' where external_id = 'p1'`);
    await sinceApply('broken-status', 2.5);
    expect(await sweep()).toMatchObject({ workflows: 1, records: 3, started: 3, emitted: 2 });
    // p2 and p3 were there at the apply and in their state since; p1 was seen prospect after it, then active.
    expect(await spells()).toEqual([
      { key: 'p1', state: 'active', at_apply: false },
      { key: 'p2', state: 'prospect', at_apply: true },
      { key: 'p3', state: 'prospect', at_apply: true },
    ]);
    expect(await decided('broken-status')).toEqual(['p2', 'p3']);
  });

  it('dates from the apply no record new where a first pass that stopped before its end had been', async () => {
    await owner.query(`delete from workflows.workflows where name = 'broken-status'`);
    await applySweptWorkflow(hub, owner, { name: 'gap', records: 3, key: "'p' || g", status: "'prospect'", states: ['prospect'], dormancy: { after: '2s', states: ['prospect'] } });
    // The first pass writes its first part (p1, batch 1), then stops.
    expect(await sweep(stoppingAtSecondPart(), 1)).toMatchObject({ workflows: 0 });
    // Then p0 is written: a key the stopped pass had passed (before p1). It was not there at the apply.
    await owner.query(`insert into ext_t1.gap_partners (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, status) values (1, 'p0', 'h0', '{}', $1, $2, 'prospect')`, [CONNECTOR, ENDPOINT]);
    await sinceApply('gap-status', 2.5);
    expect(await sweep()).toMatchObject({ workflows: 1, records: 4, started: 3, emitted: 3 });
    expect(await decided('gap-status')).toEqual(['p1', 'p2', 'p3']);
    // A re-apply on another state column starts a first pass of its own, from nothing.
    const upto = async () => (await owner.query<{ baseline_upto: string | null; baseline_done: boolean }>(`select baseline_upto, baseline_done from workflows.workflows where name = 'gap-status'`)).rows[0];
    expect(await upto()).toEqual({ baseline_upto: 'p1', baseline_done: true });
    await hub.services.workflows.apply(1, undefined, { apiVersion: 'apps.svc.io/v1', kind: 'Workflow', metadata: { name: 'gap-status' }, spec: { entity: 'gap', stateColumn: 'id', states: ['p0'], dormancy: { after: '2s' } } }, 'test');
    expect(await upto()).toEqual({ baseline_upto: null, baseline_done: false });
  });

  it('dates from the apply no record that had no state where a first pass that stopped before its end had been, though it wrote nothing there', async () => {
    await owner.query(`delete from workflows.workflows where name = 'gap-status'`);
    // p2 and p3 have no state: their parts have no spell to write.
    await applySweptWorkflow(hub, owner, { name: 'blank', records: 4, key: "'p' || g", status: "case when g in (2, 3) then null else 'prospect' end", states: ['prospect'], dormancy: { after: '2s', states: ['prospect'] } });
    // The first pass (batch 1) writes p1, then p2's part (written whole, after a fetch that wrote),
    // asks about p3's (nothing to write), and stops before its fourth fetch, as when its process
    // stops leading (asked before the workflow and before each fetch).
    let asked = 0;
    expect(await sweepWorkflows(hub.services.db, hub.services.events, { batch: 1, going: () => ++asked < 5 })).toMatchObject({ workflows: 1, records: 3, started: 1 });
    // p3 gets a state after the stopped pass went by it without one.
    await owner.query(`update ext_t1.blank_partners set status = 'prospect' where external_id = 'p3'`);
    await sinceApply('blank-status', 2.5);
    expect(await sweep()).toMatchObject({ workflows: 1, records: 4, started: 2, emitted: 2 });
    expect(await decided('blank-status')).toEqual(['p1', 'p4']);
    await owner.query(`delete from workflows.workflows where name = 'blank-status'`);
  });

  it('dates from when it sees them, not from the apply, the records it finds after its tenant was deactivated', async () => {
    await owner.query(`delete from workflows.workflows where name = 'gap-status'`);
    await applySweptWorkflow(hub, owner, { name: 'asleep', records: 2, key: "'p' || g", status: "'prospect'", states: ['prospect'], dormancy: { after: '2s', states: ['prospect'] } });
    // The tenant is deactivated before any pass; a tick meanwhile sweeps nothing of it.
    await owner.query('update core.tenants set active = false where id = 1');
    try {
      expect(await sweep()).toMatchObject({ workflows: 0, started: 0 });
      // A record written while it is deactivated (a run already under way), and more than `after` goes by.
      await owner.query(`insert into ext_t1.asleep_partners (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, status) values (1, 'p3', 'h3', '{}', $1, $2, 'prospect')`, [CONNECTOR, ENDPOINT]);
      await sinceApply('asleep-status', 2.5);
    } finally {
      await owner.query('update core.tenants set active = true where id = 1');
    }
    // Active again: the hub sees its records now, and none has been in its state `after` as far as it knows.
    expect(await sweep()).toMatchObject({ workflows: 1, records: 3, started: 3, emitted: 0 });
    const { rows } = await owner.query<{ fresh: boolean }>(`select bool_and(s.since > w.tracked_since + interval '2.5 seconds') as fresh from workflows.spells s join workflows.workflows w on w.id = s.workflow_id where w.name = 'asleep-status'`);
    expect(rows).toEqual([{ fresh: true }]);
    expect(await decided('asleep-status')).toEqual([]);
  });
});
