import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { ownerClient } from '../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { purgeScheduleSlots } from './scheduler.js';
import { applyConnector, deleteConnector } from './store.js';
import type { ConnectorSpec } from './types.js';

/**
 * connectors.schedule_slots on the real PostgreSQL: the claims of scheduled slots are pruned (a
 * minutely connector claims 1,440 a day), keeping what makes a slot run once.
 */

let hub: TestHub;
let owner: pg.Client;

function manifest(name: string, schedule: string) {
  return {
    apiVersion: 'connectors.svc.io/v1',
    kind: 'Connector',
    metadata: { name },
    connector_type: 'rest-generic',
    spec: { base_url: 'http://127.0.0.1:9', schedule, endpoints: [{ id: 'items', path: '/items', target: { table: 'ext.slot_items', unique_key: '$.id' } }] },
  };
}

async function applied(name: string, schedule: string): Promise<ConnectorSpec> {
  return (await hub.services.db.withTenant(1, (tx) => applyConnector(tx, manifest(name, schedule)))).connector;
}

/** Claims `slot` for the connector as a scheduler's claim does (what outcome it had does not matter here). */
async function claim(connectorId: string, slot: string) {
  await owner.query(`insert into connectors.schedule_slots (tenant_id, connector_id, slot, outcome) values (1, $1, $2::timestamptz, 'claimed')`, [connectorId, slot]);
}

async function slotsOf(connectorId: string): Promise<string[]> {
  const { rows } = await owner.query<{ slot: Date }>('select slot from connectors.schedule_slots where connector_id = $1 order by slot', [connectorId]);
  return rows.map((r) => r.slot.toISOString());
}

beforeAll(async () => {
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

describe('the schedule slot purge', () => {
  it("drops slots older than a day that a later slot of their connector follows, keeps each connector's latest slot whatever its age, and drops those of deleted connectors", async () => {
    const minutely = await applied('slots-minutely', '* * * * *');
    const yearly = await applied('slots-yearly', '0 0 1 1 *');
    const day = 24 * 60 * 60 * 1000;
    const ago = (ms: number) => new Date(Math.floor((Date.now() - ms) / 60_000) * 60_000).toISOString();
    const [old3, old2, recent1, recent0] = [ago(3 * day), ago(2 * day), ago(60 * 60_000), ago(60_000)];
    for (const slot of [old3, old2, recent1, recent0]) await claim(minutely.id, slot);
    // The only slot of a yearly cron, claimed 300 days ago: still its latest, so kept (it stops the slot running again).
    const yearAgo = ago(300 * day);
    await claim(yearly.id, yearAgo);
    // The claim of a connector deleted since (a claim that committed while the delete ran leaves one).
    const gone = '00000000-0000-4000-8000-00000000d1e7';
    await claim(gone, recent0);

    expect(await purgeScheduleSlots(hub.services.db)).toBe(3);
    expect(await slotsOf(minutely.id)).toEqual([recent1, recent0]);
    expect(await slotsOf(yearly.id)).toEqual([yearAgo]);
    expect(await slotsOf(gone)).toEqual([]);
    // A second purge finds nothing more: the latest slot of a connector stays while the connector does.
    await claim(minutely.id, ago(2 * day + 60_000));
    expect(await purgeScheduleSlots(hub.services.db)).toBe(1);
    expect(await slotsOf(minutely.id)).toEqual([recent1, recent0]);
  });

  it("a connector's delete drops its claimed slots", async () => {
    const doomed = await applied('slots-doomed', '*/5 * * * *');
    await claim(doomed.id, new Date(Math.floor(Date.now() / 300_000) * 300_000).toISOString());
    expect(await slotsOf(doomed.id)).toHaveLength(1);
    expect(await hub.services.db.withTenant(1, (tx) => deleteConnector(tx, 'slots-doomed'))).toBe(true);
    expect(await slotsOf(doomed.id)).toEqual([]);
  });
});
