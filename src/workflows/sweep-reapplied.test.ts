import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { stringify } from 'yaml';
import { ownerClient } from '../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { until } from '../../test/harness/until.js';
import { applySweptWorkflow } from '../../test/harness/workflow-fixture.js';
import type { Tx } from '../db/database.js';
import type { EventWriter } from '../events/outbox.js';
import { sweepWorkflows } from './sweep.js';

/**
 * A workflow re-applied with another dormancy (not another entity or state column, which keeps its
 * spells) after a sweep tick read the list of workflows, while the tick sweeps another workflow: its
 * pass announces by the dormancy as stored when it writes, not as the tick read it. Before, it used
 * the tick's copy for the whole pass, and announced spells dormant after 1 s that the re-applied
 * workflow calls dormant only after 30 days.
 */

let hub: TestHub;
let owner: pg.Client;

const workflow = (name: string, dormancy: { after: string; states: string[] }) => ({
  apiVersion: 'apps.svc.io/v1',
  kind: 'Workflow',
  metadata: { name: `${name}-status` },
  spec: { entity: name, stateColumn: 'status', states: ['prospect', 'active'], dormancy },
});

beforeAll(async () => {
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
  for (const name of ['early', 'late']) {
    await applySweptWorkflow(hub, owner, { name, records: 3, key: "'p' || g", status: "'prospect'", states: ['prospect', 'active'], dormancy: { after: '1s', states: ['prospect'] } });
  }
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

describe('a workflow re-applied during a sweep tick', () => {
  it('is announced by its dormancy as re-applied', async () => {
    await until('the spells to come due at the first pass', async () => {
      const { rows } = await owner.query<{ due: boolean }>(`select bool_and(now() - tracked_since > interval '1.1 seconds') as due from workflows.workflows where name in ('early-status', 'late-status')`);
      return rows[0]?.due;
    });
    const events = hub.services.events;
    let reapplied = 0;
    // While the tick announces the first workflow (by name), the second is re-applied: dormant after 30 days.
    const staged = Object.assign(Object.create(events) as EventWriter, {
      emitAll: async (tx: Tx, type: string, payloads: Record<string, unknown>[], tenantId?: number) => {
        if (type === 'decision.dormant.early-status' && reapplied === 0) {
          const res = await fetch(`${hub.url}/api/workflows/apply`, {
            method: 'POST',
            headers: { 'X-Tenant-ID': '1', 'Content-Type': 'application/yaml' },
            body: stringify(workflow('late', { after: '30d', states: ['prospect'] })),
          });
          reapplied = res.status;
        }
        return events.emitAll(tx, type, payloads, tenantId);
      },
    });
    const swept = await sweepWorkflows(hub.services.db, staged, { batch: 10_000 });
    expect(reapplied).toBe(200);
    expect(swept).toMatchObject({ workflows: 2, records: 6, started: 6, emitted: 3 });
    const { rows } = await owner.query<{ type: string; n: number }>(`select type, count(*)::int as n from events.outbox where tenant_id = 1 and type like 'decision.dormant.%' group by type order by type`);
    expect(rows).toEqual([{ type: 'decision.dormant.early-status', n: 3 }]);
    // The second workflow's spells are kept, waiting for their 30 days.
    const { rows: spells } = await owner.query<{ n: number }>(
      `select count(*)::int as n from workflows.spells s join workflows.workflows w on w.id = s.workflow_id where w.name = 'late-status' and s.notified_at is null`,
    );
    expect(spells[0]!.n).toBe(3);
  }, 30_000);
});
