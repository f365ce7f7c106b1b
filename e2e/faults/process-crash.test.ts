import { afterAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { createTestDatabase } from '../../test/harness/database.js';
import { until } from '../../test/harness/until.js';
import { killAll, startHubProcess } from './processes.js';

/**
 * kill -9 of a real `svc-hub all` process while its process consumer is part-way through the
 * outbox, then a new process on the same database: every matching event gets exactly one decision
 * (and one inbox item), none lost and none doubled, because a batch's decisions and the consumer's
 * cursor commit in one transaction (docs/processes.md).
 */

const EVENTS = 3000;
const owners: pg.Client[] = [];

afterAll(async () => {
  await killAll();
  for (const owner of owners) await owner.end();
});

describe('kill -9 of the hub mid process batch', () => {
  it('loses no decision and doubles none', async () => {
    const url = await createTestDatabase('fault');
    const owner = new pg.Client({ connectionString: url });
    await owner.connect();
    owners.push(owner);
    const clocks = { SVC_PROCESS_SWEEP_EVERY: '200ms', SVC_LEADER_CHECK_EVERY: '300ms' };
    const first = await startHubProcess('all', url, clocks);
    const applied = await fetch(`${first.url}/api/processes/apply`, {
      method: 'POST',
      headers: { 'X-Tenant-ID': '1', 'content-type': 'application/json' },
      body: JSON.stringify({
        apiVersion: 'apps.svc.io/v1',
        kind: 'Process',
        metadata: { name: 'seen' },
        spec: { event: 'org.created', when: 'payload.name.startsWith("Org ")', decision: 'decision.org-seen', message: 'seen {{payload.name}}' },
      }),
    });
    expect(applied.status).toBe(201);
    // The events arrive at once, as a bulk of organisations would: the consumer works through
    // them batch after batch, and is killed once some, not all, have their decision.
    await owner.query(
      `insert into events.outbox (tenant_id, type, payload)
       select 1, 'org.created', jsonb_build_object('orgId', i, 'tenantId', 1, 'name', 'Org ' || i) from generate_series(1, $1) as i`,
      [EVENTS],
    );
    const decisions = async () => Number((await owner.query(`select count(*)::int as n from events.outbox where type = 'decision.org-seen'`)).rows[0].n);
    await until('the first decisions', async () => (await decisions()) > 0, { timeoutMs: 60_000, everyMs: 20 });
    await first.crash();
    const atCrash = await decisions();
    expect(atCrash).toBeLessThan(EVENTS);

    const second = await startHubProcess('all', url, clocks);
    let seen = atCrash;
    const caughtUp = async () => {
      seen = await decisions();
      return seen >= EVENTS;
    };
    await until('a decision for every event', caughtUp, {
      timeoutMs: 90_000,
      everyMs: 200,
      detail: () => `${seen} of ${EVENTS} decisions (${atCrash} at the crash); the hub said:\n${second.output().slice(-1500)}`,
    });
    const { rows } = await owner.query<{ events: number; decisions: number; doubled: number }>(
      `select count(distinct payload->>'sourceEventId')::int as events, count(*)::int as decisions,
              (count(*) - count(distinct payload->>'sourceEventId'))::int as doubled
         from events.outbox where type = 'decision.org-seen'`,
    );
    expect(rows[0]).toEqual({ events: EVENTS, decisions: EVENTS, doubled: 0 });
    const sources = await owner.query(
      `select count(*)::int as n from events.outbox e where e.type = 'org.created'
          and not exists (select 1 from events.outbox d where d.type = 'decision.org-seen' and d.payload->>'sourceEventId' = e.id::text)`,
    );
    expect(sources.rows[0].n).toBe(0);
    const inbox = await owner.query(`select count(*)::int as n from events.inbox where type = 'decision.org-seen'`);
    expect(inbox.rows[0].n).toBe(EVENTS);
    await second.stop();
  }, 240_000);
});
