import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { ownerClient } from '../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { ConnectorScheduler, scheduledOfActiveTenants } from './scheduler.js';
import { applyConnector, deleteConnector, loadConnectorById } from './store.js';
import type { ConnectorSpec } from './types.js';

/**
 * A tenant with many scheduled connectors cannot starve the others: a tick fires the due connectors
 * round-robin across tenants (every tenant's first before any tenant's second), so the one connector
 * of a small tenant is claimed and triggered among the first, however many a large tenant has, and
 * every slot is still claimed and run once.
 */

let hub: TestHub;
let owner: pg.Client;

const LARGE = 41;
const SMALL = 42;
const MANY = 30;

function manifest(name: string) {
  return {
    apiVersion: 'connectors.svc.io/v1',
    kind: 'Connector',
    metadata: { name },
    connector_type: 'rest-generic',
    // Nothing listens there: each run is recorded, then fails, which is all this needs.
    spec: { base_url: 'http://127.0.0.1:9', schedule: '* * * * *', endpoints: [{ id: 'items', path: '/items', target: { table: `ext.fair_${name.replace('-', '_')}`, unique_key: '$.id' } }] },
  };
}

const apply = async (tenant: number, name: string): Promise<ConnectorSpec> =>
  (await hub.services.db.withTenant(tenant, (tx) => applyConnector(tx, manifest(name)))).connector;

beforeAll(async () => {
  hub = await startTestHub({ 'svc.connectors.retry.base-delay': '5ms', 'svc.connectors.retry.max-delay': '20ms' });
  owner = await ownerClient(hub.ownerUrl);
  await owner.query(`insert into core.tenants (id, code, name) values ($1, 'large', 'Large'), ($2, 'small', 'Small') on conflict do nothing`, [LARGE, SMALL]);
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

describe('a scheduler tick with one tenant holding most of the schedules', () => {
  it("claims and triggers the small tenant's slot among the first, and every slot once", async () => {
    const large: ConnectorSpec[] = [];
    for (let i = 0; i < MANY; i++) large.push(await apply(LARGE, `bulk-${String(i).padStart(2, '0')}`));
    // The small tenant's connector sorts after at least two of the large tenant's by id, so that id
    // order alone would not reach it among the first two (an id is random: applied anew until so).
    let small = await apply(SMALL, 'lonely');
    while (large.filter((c) => c.id < small.id).length < 2) {
      await hub.services.db.withTenant(SMALL, (tx) => deleteConnector(tx, 'lonely'));
      small = await apply(SMALL, 'lonely');
    }

    const listed = await scheduledOfActiveTenants(hub.services.db, 'test', 'connectors.connectors');
    expect(listed.slice(0, 2).map((r) => r.tenant_id).sort()).toEqual([LARGE, SMALL]);
    expect(listed).toHaveLength(MANY + 1);

    // The clock stands still, so every connector's latest slot is the same minute throughout.
    const at = new Date();
    const scheduler = new ConnectorScheduler(hub.services.db, hub.services.connectors.runner, loadConnectorById, () => at);
    expect(await scheduler.tick()).toBe(MANY + 1);

    const claims = await owner.query<{ connector_id: string; tenant_id: number; n: number }>(
      `select connector_id, tenant_id, count(*) over (partition by connector_id) as n from connectors.schedule_slots
        where tenant_id = any($1::bigint[]) order by claimed_at`,
      [[LARGE, SMALL]],
    );
    expect(claims.rows).toHaveLength(MANY + 1);
    expect(claims.rows.filter((r) => Number(r.n) !== 1)).toEqual([]);
    expect(claims.rows.slice(0, 2).map((r) => Number(r.tenant_id)).sort()).toEqual([LARGE, SMALL]);

    const runs = await owner.query<{ connector_id: string }>(
      `select connector_id from connectors.runs where tenant_id = any($1::bigint[]) and triggered_by = 'schedule' order by started_at, id`,
      [[LARGE, SMALL]],
    );
    expect(runs.rows.map((r) => r.connector_id).sort()).toEqual([...large.map((c) => c.id), small.id].sort());
    expect(runs.rows.slice(0, 2).map((r) => r.connector_id)).toContain(small.id);

    // The same minute again: every slot is claimed already, nothing runs twice.
    expect(await scheduler.tick()).toBe(0);
    const again = await owner.query<{ n: string }>('select count(*) as n from connectors.runs where tenant_id = any($1::bigint[])', [[LARGE, SMALL]]);
    expect(Number(again.rows[0]!.n)).toBe(MANY + 1);
  }, 120_000);
});
