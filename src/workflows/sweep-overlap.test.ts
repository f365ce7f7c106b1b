import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { ownerClient } from '../../test/harness/api-client.js';
import { holdAfter, untilEndedOrWaiting } from '../../test/harness/held-transaction.js';
import { captureLogs } from '../../test/harness/log-capture.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { applySweptWorkflow } from '../../test/harness/workflow-fixture.js';
import { until } from '../../test/harness/until.js';
import type { Database } from '../db/database.js';
import { sweepWorkflows } from './sweep.js';

/**
 * Two dormancy sweeps at once (two replicas, or a leader change's overlap) over one workflow, on the
 * real PostgreSQL, in a fixed interleaving: the first pass is held in its batch transaction once it
 * has locked the workflow's row, the second runs meanwhile. One pass per workflow at a time: the
 * second leaves the workflow to the first, which announces each due spell once. The two passes used
 * to write the same spells side by side: the second's last batch waited to mark the baseline done
 * on the first's lock of the row, and the first's upserts waited on the second's spells, a deadlock
 * that failed one of them (`workflow sweep failed for one workflow`, `deadlock detected`).
 */

let hub: TestHub;
let owner: pg.Client;

beforeAll(async () => {
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
  await applySweptWorkflow(hub, owner, {
    name: 'overlap',
    records: 9,
    key: "'p' || g",
    status: "(array['prospect', 'active', 'closed'])[1 + g % 3]",
    states: ['prospect', 'active', 'closed'],
    dormancy: { after: '1s', states: ['prospect', 'active'] },
  });
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

describe('two dormancy sweeps at once', () => {
  it('leave each workflow to one pass: no deadlock, each due spell announced once', async () => {
    // The first complete pass starts the spells at the apply: once a second has passed, all are due.
    await until('the spells to come due at the first pass', async () => (await owner.query(`select now() - tracked_since > interval '1.1 seconds' as due from workflows.workflows where name = 'overlap-status'`)).rows[0]?.due);
    const logs = captureLogs('warn');
    try {
      const hold = holdAfter(/from workflows\.workflows where id = \$1/);
      const held = Object.create(hub.services.db) as Database;
      held.withTenant = (tenantId, fn) => hub.services.db.withTenant(tenantId, (tx) => fn(hold.wrap(tx)));
      const first = sweepWorkflows(held, hub.services.events, { batch: 100 });
      await hold.held;
      let ended = false;
      const second = sweepWorkflows(hub.services.db, hub.services.events, { batch: 100 }).finally(() => {
        ended = true;
      });
      await untilEndedOrWaiting(owner, () => ended, 'the second sweep');
      hold.go();
      const [a, b] = await Promise.all([first, second]);
      expect(logs.lines().filter((l) => l.msg === 'workflow sweep failed for one workflow')).toEqual([]);
      expect(a).toMatchObject({ workflows: 1, records: 9, started: 9, emitted: 6 });
      expect(b).toMatchObject({ workflows: 0, emitted: 0 });
    } finally {
      logs.restore();
    }
    const { rows } = await owner.query(`select payload->>'key' as key from events.outbox where tenant_id = 1 and type = 'decision.dormant.overlap-status' order by 1`);
    expect(rows.map((r: { key: string }) => r.key)).toEqual(['p1', 'p3', 'p4', 'p6', 'p7', 'p9']);
  });
});
