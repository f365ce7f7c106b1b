import { afterAll, beforeAll, describe } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../../test/harness/database.js';
import { deletedHistoryCases, liveCapCases } from '../../../test/harness/tenant-cap-cases.js';
import { MAX_DELETED_KEPT_PER_TENANT } from '../../manifests/tenant-cap.js';
import { loadCatalog } from '../../events/catalog.js';
import { EventWriter } from '../../events/outbox.js';
import { SecretStore } from './store.js';

/**
 * Stored secrets, on a real database: the number of secrets (not deleted) per tenant is bounded.
 * The limit (1000, docs/secrets-and-hooks.md) is written out rather than imported, so the test
 * also reads against a store without it; most of the secrets are stored as copies of the first ones.
 */

const LIMIT = 1000;

let t: MigratedDatabase;
let store: SecretStore;

beforeAll(async () => {
  t = await migratedDatabase({ 601: 'a', 602: 'b' });
  store = new SecretStore(t.db, new EventWriter(loadCatalog()), Buffer.alloc(32, 7), { cacheTtlMs: 0 });
});

afterAll(async () => {
  await t.close();
});

// First: the cases below fill tenant 601 to its limit.
describe('deleted secrets per tenant', () => {
  deletedHistoryCases({
    plural: 'stored secrets',
    kept: MAX_DELETED_KEPT_PER_TENANT,
    db: () => t.db,
    table: 'platform.secrets',
    tenant: 602,
    other: 601,
    create: (tenant, name) => store.create(tenant, { name, value: 'a stored value' }, 'ann'),
    remove: (tenant, name) => store.remove(tenant, name, 'ann'),
  });
});

describe('stored secrets per tenant', () => {
  liveCapCases({
    plural: 'stored secrets',
    limit: LIMIT,
    advice: 'delete one first',
    create: (tenant, name) => store.create(tenant, { name, value: 'a stored value' }, 'ann'),
    update: (tenant, name) => store.rotate(tenant, name, { value: 'another stored value' }, 'ann'),
    remove: (tenant, name) => store.remove(tenant, name, 'ann'),
    count: async (tenant) => (await store.list(tenant)).length,
    fill: (tenant, names) =>
      t.db.withTenant(tenant, async (tx) => {
        await tx.query(
          `insert into platform.secrets (tenant_id, name, iv, tag, ciphertext)
           select tenant_id, n, iv, tag, ciphertext from platform.secrets, unnest($1::text[]) as n where name = 'n-0000'`,
          [names],
        );
      }),
  });
});
