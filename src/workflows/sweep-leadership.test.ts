import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { ownerClient } from '../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { until } from '../../test/harness/until.js';
import { applySweptWorkflow } from '../../test/harness/workflow-fixture.js';
import type { Database } from '../db/database.js';
import { sweepWorkflows } from './sweep.js';

/**
 * A dormancy sweep tick whose process loses the leadership (or stops) during it, on the real
 * PostgreSQL: it ends after the fetch in hand, and leaves the workflows it has not reached to the
 * next tick, of the new leader. It used to sweep every workflow of every tenant to the end beside
 * the new leader's tick, and held the process's stop until then.
 */

let hub: TestHub;
let owner: pg.Client;

beforeAll(async () => {
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
  for (const name of ['first', 'second']) {
    await applySweptWorkflow(hub, owner, { name, records: 3, key: "'p' || g", status: "'prospect'", states: ['prospect', 'active'], dormancy: { after: '1h', states: ['prospect'] } });
  }
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

const spells = async () =>
  (await owner.query<{ name: string; n: number }>(`select w.name, count(s.*)::int as n from workflows.workflows w left join workflows.spells s on s.workflow_id = w.id group by w.name order by w.name`)).rows;

describe('a sweep tick whose process stops leading', () => {
  it('ends after the fetch in hand; the next tick sweeps the rest', async () => {
    // The leadership is lost once the first part of the first workflow is written.
    let leading = true;
    const db = hub.services.db;
    const losing = Object.create(db) as Database;
    losing.withTenant = (tenantId, fn) =>
      db.withTenant(tenantId, (tx) =>
        fn({
          tenantId: tx.tenantId,
          query: async (text, values, options) => {
            const answer = await tx.query(text, values, options);
            if (/ for share$/.test(text)) leading = false;
            return answer as never;
          },
        }),
      );
    const tick = await sweepWorkflows(losing, hub.services.events, { batch: 1, going: () => leading });
    expect(tick).toMatchObject({ workflows: 1, records: 1, started: 1 });
    expect(await spells()).toEqual([
      { name: 'first-status', n: 1 },
      { name: 'second-status', n: 0 },
    ]);
    // The new leader's tick.
    expect(await sweepWorkflows(db, hub.services.events, { batch: 1, going: () => true })).toMatchObject({ workflows: 2, records: 6, started: 5 });
    expect(await spells()).toEqual([
      { name: 'first-status', n: 3 },
      { name: 'second-status', n: 3 },
    ]);
  });
});

describe('a sweep tick during which a tenant is deactivated', () => {
  it('leaves its workflows from the next part: no spell written, nothing announced', async () => {
    await owner.query(`delete from workflows.workflows where name in ('first-status', 'second-status')`);
    await applySweptWorkflow(hub, owner, { name: 'third', records: 3, key: "'p' || g", status: "'prospect'", states: ['prospect'], dormancy: { after: '1s', states: ['prospect'] } });
    await until('the spells to come due at the first pass', async () => (await owner.query(`select now() - tracked_since > interval '1.1 seconds' as due from workflows.workflows where name = 'third-status'`)).rows[0]?.due);
    // The tenant is deactivated once the first part (p1) is written.
    const db = hub.services.db;
    const deactivating = Object.create(db) as Database;
    deactivating.withTenant = (tenantId, fn) =>
      db.withTenant(tenantId, (tx) =>
        fn({
          tenantId: tx.tenantId,
          query: async (text, values, options) => {
            const answer = await tx.query(text, values, options);
            if (/ for share$/.test(text)) await owner.query('update core.tenants set active = false where id = 1');
            return answer as never;
          },
        }),
      );
    try {
      expect(await sweepWorkflows(deactivating, hub.services.events, { batch: 1 })).toMatchObject({ records: 1, started: 1, emitted: 1 });
      const { rows } = await owner.query<{ key: string }>(`select payload->>'key' as key from events.outbox where type = 'decision.dormant.third-status' order by 1`);
      expect(rows.map((r) => r.key)).toEqual(['p1']);
      expect((await spells()).find((r) => r.name === 'third-status')).toEqual({ name: 'third-status', n: 1 });
    } finally {
      await owner.query('update core.tenants set active = true where id = 1');
    }
    // Active again: swept. The first pass ended with the deactivation (the hub saw no record of the
    // tenant since): p2 and p3 start their spells now, not at the apply, so they are not due yet.
    expect(await sweepWorkflows(db, hub.services.events, { batch: 1 })).toMatchObject({ records: 3, started: 2, emitted: 0 });
    const { rows } = await owner.query<{ key: string; at_apply: boolean }>(
      `select s.record_key as key, abs(extract(epoch from s.since - w.tracked_since)) < 0.001 as at_apply from workflows.spells s join workflows.workflows w on w.id = s.workflow_id where w.name = 'third-status' order by 1`,
    );
    expect(rows).toEqual([
      { key: 'p1', at_apply: true },
      { key: 'p2', at_apply: false },
      { key: 'p3', at_apply: false },
    ]);
  });
});
