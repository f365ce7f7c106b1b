import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { applyConnector } from '../src/connectors/store.js';
import type { ConnectorSpec } from '../src/connectors/types.js';
import { ownerClient } from '../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../test/harness/hub.js';
import { runCommand } from './run.js';

/**
 * A deactivated tenant's schedules do not fire, on both paths that fire them: the hub's own
 * scheduler tick claims no slot of theirs, and `svc-hub run … --scheduled` (a CronJob) skips the
 * slot and exits 0, so Kubernetes counts no failed job; a run asked for by hand is refused (exit 1).
 */

let hub: TestHub;
let owner: pg.Client;
let active: ConnectorSpec;
let deactivated: ConnectorSpec;

function manifest(name: string) {
  return {
    apiVersion: 'connectors.svc.io/v1',
    kind: 'Connector',
    metadata: { name },
    connector_type: 'rest-generic',
    spec: { base_url: 'http://127.0.0.1:9', schedule: '* * * * *', endpoints: [{ id: 'items', path: '/items', target: { table: 'ext.gone_items', unique_key: '$.id' } }] },
  };
}

const slotsOf = async (connector: ConnectorSpec) =>
  Number((await owner.query<{ n: string }>('select count(*) as n from connectors.schedule_slots where connector_id = $1', [connector.id])).rows[0]!.n);
const runsOf = async (connector: ConnectorSpec) =>
  Number((await owner.query<{ n: string }>('select count(*) as n from connectors.runs where connector_id = $1', [connector.id])).rows[0]!.n);

async function cli(args: string[]): Promise<{ code: number; lines: string[] }> {
  const lines: string[] = [];
  const code = await runCommand(hub.config, args, (line) => lines.push(line));
  return { code, lines };
}

beforeAll(async () => {
  hub = await startTestHub({ 'svc.connectors.retry.base-delay': '5ms', 'svc.connectors.retry.max-delay': '20ms' });
  owner = await ownerClient(hub.ownerUrl);
  await owner.query(`insert into core.tenants (id, code, name) values (31, 'gone', 'Gone'), (32, 'still', 'Still') on conflict do nothing`);
  deactivated = (await hub.services.db.withTenant(31, (tx) => applyConnector(tx, manifest('minutely')))).connector;
  active = (await hub.services.db.withTenant(32, (tx) => applyConnector(tx, manifest('minutely')))).connector;
  // A scheduled export of each tenant too (to a destination nothing listens on: a run of it is recorded, then fails).
  for (const tenant of ['31', '32']) {
    const call = (path: string, body: unknown) =>
      fetch(`${hub.url}${path}`, { method: 'POST', headers: { 'X-Tenant-ID': tenant, 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
    for (const name of ['KEY', 'SECRET']) expect((await call('/api/platform/secrets', { name, value: 'not-used' })).status).toBe(201);
    const entity = {
      apiVersion: 'apps.svc.io/v1',
      kind: 'Entity',
      metadata: { name: 'item' },
      spec: { scope: 'crm', key: 'id', columns: [{ name: 'id', type: 'text' }], sources: [{ table: 'ext.gone_items', key: 'external_id', columns: { id: 'external_id' } }] },
    };
    const entityApplied = await call('/api/entities/apply', entity);
    expect([entityApplied.status, await entityApplied.text()]).toEqual([201, expect.any(String)]);
    const exported = await call('/api/exports/apply', {
      apiVersion: 'apps.svc.io/v1',
      kind: 'Export',
      metadata: { name: 'minutely' },
      spec: {
        scope: 'crm',
        source: { entity: 'item' },
        columns: ['id'],
        order: ['id'],
        format: { kind: 'csv' },
        destination: { kind: 's3', bucket: 'drops', filename: 'items.csv', endpoint: 'http://127.0.0.1:9', region: 'us-east-1', access_key_env: 'KEY', secret_key_env: 'SECRET' },
        mode: 'snapshot',
        schedule: '* * * * *',
      },
    });
    expect([exported.status, await exported.text()]).toEqual([201, expect.any(String)]);
  }
  // Deactivated after its connector and export were applied, as DELETE /api/tenants/{id} does.
  await owner.query(`update core.tenants set active = false where id = 31`);
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

describe('a deactivated tenant', () => {
  it("the hub's scheduler tick claims no slot of its connectors; an active tenant's slot is claimed", async () => {
    await hub.services.connectors.scheduler.tick();
    expect(await slotsOf(active)).toBe(1);
    expect(await slotsOf(deactivated)).toBe(0);
    expect(await runsOf(deactivated)).toBe(0);
  });

  it("the hub's export scheduler tick runs none of its exports; an active tenant's export runs", async () => {
    await hub.services.exports.scheduler.tick();
    const runs = await owner.query<{ tenant_id: string; n: string }>(`select tenant_id, count(*) as n from exports.runs where export_name = 'minutely' group by tenant_id order by tenant_id`);
    expect(runs.rows.map((r) => [Number(r.tenant_id), Number(r.n)])).toEqual([[32, 1]]);
  });

  it('svc-hub run --scheduled skips the slot and exits 0 (connector and export); without --scheduled it is refused, exit 1', async () => {
    for (const kind of ['connector', 'export']) {
      expect(await cli([kind, 'minutely', '--tenant', 'gone', '--scheduled'])).toEqual({
        code: 0,
        lines: [`${kind} minutely skipped: tenant gone is deactivated, and its schedules do not fire`],
      });
    }
    expect(await cli(['connector', 'minutely', '--tenant', 'gone'])).toEqual({ code: 1, lines: ['tenant gone is deactivated: no run'] });
    expect(await slotsOf(deactivated)).toBe(0);
    expect(await runsOf(deactivated)).toBe(0);
    expect(await cli(['connector', 'minutely', '--tenant', 'nobody', '--scheduled'])).toEqual({ code: 1, lines: ['tenant nobody not found'] });
  });
});
