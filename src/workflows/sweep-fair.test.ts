import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { ownerClient } from '../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { applySweptWorkflow } from '../../test/harness/workflow-fixture.js';
import { until } from '../../test/harness/until.js';
import type { Database } from '../db/database.js';
import { sweepWorkflows } from './sweep.js';

/**
 * Fairness of the dormancy sweep between tenants, on the real PostgreSQL: a tick gives the tenants
 * turns of at most `turn` records each (a pass longer than that goes on at the tenant's next turn,
 * from where it stopped), so a tenant with a large backlog (here tenant 1, three workflows whose every
 * record is announced at their first pass) delays another's due decision by at most a turn, not by
 * its whole backlog; while a backlog keeps the tick going, a workflow whose `every` has passed since
 * its pass began is swept again; the backlog still completes within the tick, each record announced once.
 */

let hub: TestHub;
let owner: pg.Client;
const BIG = 1_200;
const TURN = 300;
const BATCH = 100;

const dormancy = { after: '1s', states: ['prospect'] };
const prospects = { key: "'p' || lpad(g::text, 5, '0')", status: "'prospect'", states: ['prospect', 'active'], dormancy };

beforeAll(async () => {
  // The clock's tick (services.workflows.sweep) reads its turn and batch from the configuration.
  hub = await startTestHub({ 'svc.workflow.sweep.batch': BATCH, 'svc.workflow.sweep.turn': TURN });
  owner = await ownerClient(hub.ownerUrl);
  await owner.query("insert into core.tenants (id, code, name) values (2, 'two', 'Two') on conflict do nothing");
  for (const name of ['biga', 'bigb', 'bigc']) await applySweptWorkflow(hub, owner, { name, records: BIG, ...prospects });
  await applySweptWorkflow(hub, owner, { name: 'small', records: 3, tenant: 2, ...prospects });
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

const allDue = (names: string[]) =>
  until('the spells to come due at the first pass', async () =>
    (await owner.query<{ due: boolean }>(`select bool_and(now() - tracked_since > interval '1.1 seconds') as due from workflows.workflows where name = any($1)`, [names.map((n) => `${n}-status`)])).rows[0]?.due,
  );

/** The decisions of `type`, by outbox id. */
const decisionIds = async (tenant: number, like: string) =>
  (await owner.query<{ n: string }>(`select id::text as n from events.outbox where tenant_id = $1 and type like $2 order by id`, [tenant, like])).rows.map((r) => BigInt(r.n));

describe('the dormancy sweep between tenants', () => {
  it("another tenant's due decision waits at most one turn of a tenant's backlog, and the backlog completes", async () => {
    await allDue(['biga', 'bigb', 'bigc', 'small']);
    const done = await hub.services.workflows.sweep();
    expect(done).toMatchObject({ workflows: 4, records: 3 * BIG + 3, started: 3 * BIG + 3, emitted: 3 * BIG + 3, ended: 0 });
    const big = await decisionIds(1, 'decision.dormant.big%');
    const small = await decisionIds(2, 'decision.dormant.small-status');
    expect(big).toHaveLength(3 * BIG);
    expect(new Set((await owner.query<{ key: string }>(`select type || (payload->>'key') as key from events.outbox where tenant_id = 1 and type like 'decision.dormant.big%'`)).rows.map((r) => r.key)).size).toBe(3 * BIG);
    expect(small).toHaveLength(3);
    // Before: tenant 2's decisions came after all 3,600 of tenant 1's.
    expect(big.filter((id) => id < small[0]!).length).toBeLessThanOrEqual(TURN);
    // Quiet now, and a quiet tick still passes over every record once.
    expect(await hub.services.workflows.sweep()).toMatchObject({ workflows: 4, records: 3 * BIG + 3, started: 0, ended: 0, emitted: 0 });
  });

  it('while a backlog keeps the tick going, a workflow whose `every` has passed is swept again: a record that appears meanwhile is announced before the backlog ends', async () => {
    // Named to come before tenant 1's quiet workflows of the first case: the tick begins with the backlog.
    const backlog = ['back1', 'back2', 'back3'];
    for (const name of backlog) await applySweptWorkflow(hub, owner, { name, records: BIG, ...prospects });
    await allDue(backlog);
    // Tenant 2 gets a new record once tenant 1's backlog has begun; once the sweep has seen it, its
    // spell is made due (no waiting for its second), and the outbox's last id noted then.
    const db = hub.services.db;
    let stage: 'waiting' | 'inserted' | 'due' = 'waiting';
    let mark = 0n;
    const watched = Object.create(db) as Database;
    watched.withTenant = (tenantId, fn, options) =>
      db.withTenant(
        tenantId,
        async (tx) => {
          const result = await fn(tx);
          if (tenantId === 1 && stage === 'waiting') {
            await owner.query(`insert into ext_t2.small_partners (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, status)
              values (2, 'late', 'x', '{}', '00000000-0000-0000-0000-00000000000c', '00000000-0000-0000-0000-00000000000e', 'prospect')`);
            stage = 'inserted';
          } else if (stage === 'inserted') {
            const made = await owner.query(`update workflows.spells set since = since - interval '1 hour' where tenant_id = 2 and record_key = 'late'`);
            if (made.rowCount) {
              stage = 'due';
              mark = BigInt((await owner.query<{ id: string }>('select coalesce(max(id), 0)::text as id from events.outbox')).rows[0]!.id);
            }
          }
          return result;
        },
        options,
      );
    const done = await sweepWorkflows(watched, hub.services.events, { batch: BATCH, turn: TURN, every: 0 });
    expect(stage).toBe('due');
    const big = await decisionIds(1, 'decision.dormant.back%');
    const late = (await owner.query<{ id: string }>(`select id::text from events.outbox where tenant_id = 2 and payload->>'key' = 'late'`)).rows.map((r) => BigInt(r.id));
    expect(late).toHaveLength(1);
    // The backlog completes in that tick, each record once; the late record's decision came before
    // its end, at most two turns of tenant 1 after it was due (the turn under way, and the next).
    expect(big).toHaveLength(3 * BIG);
    expect(done.emitted).toBe(3 * BIG + 1);
    expect(big.filter((id) => id > late[0]!).length).toBeGreaterThan(BIG);
    expect(big.filter((id) => id > mark && id < late[0]!).length).toBeLessThanOrEqual(2 * TURN);
  });

  it('a workflow deleted during the tick is not swept again in it', async () => {
    // Tenant 1's six quiet workflows keep the tick going; tenant 2's is swept at each of its turns
    // (`every` of zero) until it is deleted, after its first pass.
    const db = hub.services.db;
    let deleted = false;
    let after = 0;
    const watched = Object.create(db) as Database;
    watched.withTenant = async (tenantId, fn, options) => {
      if (tenantId === 2 && deleted) after++;
      const result = await db.withTenant(tenantId, fn, options);
      if (tenantId === 2 && !deleted) {
        const res = await fetch(`${hub.url}/api/workflows/small-status`, { method: 'DELETE', headers: { 'X-Tenant-ID': '2' } });
        expect(res.status).toBe(204);
        deleted = true;
      }
      return result;
    };
    const done = await sweepWorkflows(watched, hub.services.events, { batch: BATCH, turn: TURN, every: 0 });
    expect(deleted).toBe(true);
    expect(done).toMatchObject({ started: 0, emitted: 0 });
    expect(done.records).toBeGreaterThanOrEqual(6 * BIG);
    // Its pass under way finds it gone (its reading transaction, then the one that ends a first pass
    // of a deactivated tenant, which finds nothing to end), and no other pass begins.
    expect(after).toBeLessThanOrEqual(2);
  });
});
