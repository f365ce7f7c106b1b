import { afterAll, beforeAll, describe } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { deletedHistoryCases, liveCapCases } from '../../test/harness/tenant-cap-cases.js';
import { MAX_DELETED_KEPT_PER_TENANT } from '../manifests/tenant-cap.js';
import { createIntegration, deleteIntegration, updateIntegration } from './integrations.js';

/**
 * Integrations as stored, on a real database: the number of integrations (not deleted) per tenant
 * is bounded. The limit (100, docs/integrations.md) is written out rather than imported, so the
 * test also reads against a store without it.
 */

const LIMIT = 100;
const rules = { key: Buffer.alloc(32, 7) };

let t: MigratedDatabase;

const idOf = async (tenant: number, name: string) =>
  (await t.db.withTenant(tenant, (tx) => tx.query<{ id: number }>('select id from hub.integrations where name = $1 and deleted_at is null', [name]))).rows[0]!.id;

beforeAll(async () => {
  t = await migratedDatabase({ 601: 'a', 602: 'b' });
});

afterAll(async () => {
  await t.close();
});

const create = (tenant: number, name: string) =>
  t.db.withTenant(tenant, (tx) => createIntegration(tx, { name, targetUrl: 'https://hooks.example.com/x', eventTypes: ['org.created'], authMode: 'NONE' }, rules));
const remove = async (tenant: number, name: string) => {
  const id = await idOf(tenant, name);
  return t.db.withTenant(tenant, (tx) => deleteIntegration(tx, id));
};

// First: the cases below fill tenant 601 to its limit.
describe('deleted integrations per tenant', () => {
  deletedHistoryCases({
    plural: 'integrations',
    kept: MAX_DELETED_KEPT_PER_TENANT,
    db: () => t.db,
    table: 'hub.integrations',
    tenant: 602,
    other: 601,
    create,
    remove,
    // A delivery in its journal.
    hold: async (tx, tenant, id) => {
      await tx.query("insert into hub.deliveries (tenant_id, integration_id, kind, event_type, body) values ($1, $2, 'test', 'org.created', '{}')", [tenant, id]);
    },
  });
});

describe('integrations per tenant', () => {
  liveCapCases({
    plural: 'integrations',
    limit: LIMIT,
    advice: 'delete one first, or subscribe an integration to more event types',
    create,
    update: async (tenant, name) => {
      const id = await idOf(tenant, name);
      return t.db.withTenant(tenant, (tx) => updateIntegration(tx, id, { eventTypes: ['org.created', 'org.updated'] }, rules));
    },
    remove,
    count: async (tenant) => (await t.db.withTenant(tenant, (tx) => tx.query<{ n: number }>('select count(*)::int as n from hub.integrations where deleted_at is null'))).rows[0]!.n,
    fill: (tenant, names) =>
      t.db.withTenant(tenant, async (tx) => {
        await tx.query(
          `insert into hub.integrations (tenant_id, name, target_url, platform, auth_mode, event_types, enabled, standard_webhooks)
           select tenant_id, n, target_url, platform, auth_mode, event_types, enabled, standard_webhooks from hub.integrations, unnest($1::text[]) as n where name = 'n-0000'`,
          [names],
        );
      }),
  });
});
