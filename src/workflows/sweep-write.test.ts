import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { ownerClient } from '../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { applySweptWorkflow } from '../../test/harness/workflow-fixture.js';
import { until } from '../../test/harness/until.js';
import { sweepWorkflows } from './sweep.js';

/**
 * The dormancy sweep's write transactions, on the real PostgreSQL: whatever records it reads at a
 * time (`svc.workflow.sweep.batch`, default 10,000), it writes at most WRITE_ROWS (1,000) of them per
 * transaction. A write transaction holds a transaction id until it commits, and every outbox consumer
 * reads only below the oldest one running: a 10,000-record batch written at once held every consumer
 * of every tenant back for seconds. Each spell is still started once and each due one announced once.
 */

let hub: TestHub;
let owner: pg.Client;
const RECORDS = 2_500;

beforeAll(async () => {
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
  await applySweptWorkflow(hub, owner, {
    name: 'written',
    records: RECORDS,
    key: "'p' || lpad(g::text, 5, '0')",
    status: "'prospect'",
    states: ['prospect', 'active'],
    dormancy: { after: '1s', states: ['prospect'] },
  });
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

describe('the dormancy sweep writes', () => {
  it('at most 1,000 records per transaction (WRITE_ROWS), each spell started and announced once', async () => {
    await until('the spells to come due at the first pass', async () => (await owner.query(`select now() - tracked_since > interval '1.1 seconds' as due from workflows.workflows where name = 'written-status'`)).rows[0]?.due);
    const done = await sweepWorkflows(hub.services.db, hub.services.events, { batch: 10_000 });
    expect(done).toMatchObject({ workflows: 1, records: RECORDS, started: RECORDS, emitted: RECORDS, ended: 0 });
    // The transaction that wrote each spell (its xmin) and each decision (the outbox's txid).
    const spells = await owner.query<{ rows: string }>(
      `select count(*)::text as rows from workflows.spells s join workflows.workflows w on w.id = s.workflow_id where w.name = 'written-status' group by s.xmin::text order by 1`,
    );
    const decisions = await owner.query<{ rows: string; keys: string }>(
      `select count(*)::text as rows, count(distinct payload->>'key')::text as keys from events.outbox where tenant_id = 1 and type = 'decision.dormant.written-status' group by txid`,
    );
    expect(spells.rows.map((r) => Number(r.rows)).sort((a, b) => b - a)).toEqual([1_000, 1_000, 500]);
    expect(decisions.rows.map((r) => Number(r.rows)).sort((a, b) => b - a)).toEqual([1_000, 1_000, 500]);
    expect(decisions.rows.reduce((n, r) => n + Number(r.keys), 0)).toBe(RECORDS);
    // A second pass finds nothing to start, end or announce.
    expect(await sweepWorkflows(hub.services.db, hub.services.events, { batch: 10_000 })).toMatchObject({ records: RECORDS, started: 0, ended: 0, emitted: 0 });
    // Read 1,000 at a time and written 1,000 at a time too (a read that ends on a part's edge).
    expect(await sweepWorkflows(hub.services.db, hub.services.events, { batch: 1_000 })).toMatchObject({ records: RECORDS, started: 0, ended: 0, emitted: 0 });
  });
});
