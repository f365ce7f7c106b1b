import { afterAll, beforeAll, describe } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { liveCapCases } from '../../test/harness/tenant-cap-cases.js';
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

describe('integrations per tenant', () => {
  liveCapCases({
    plural: 'integrations',
    limit: LIMIT,
    advice: 'delete one first, or subscribe an integration to more event types',
    create: (tenant, name) => t.db.withTenant(tenant, (tx) => createIntegration(tx, { name, targetUrl: 'https://hooks.example.com/x', eventTypes: ['org.created'], authMode: 'NONE' }, rules)),
    update: async (tenant, name) => {
      const id = await idOf(tenant, name);
      return t.db.withTenant(tenant, (tx) => updateIntegration(tx, id, { eventTypes: ['org.created', 'org.updated'] }, rules));
    },
    remove: async (tenant, name) => {
      const id = await idOf(tenant, name);
      return t.db.withTenant(tenant, (tx) => deleteIntegration(tx, id));
    },
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
