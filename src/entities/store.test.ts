import { afterAll, beforeAll, describe } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { tenantCapCases } from '../../test/harness/tenant-cap-cases.js';
import { applyEntity, listEntities } from './store.js';

/**
 * Entities as stored, on a real database: the number of entities per tenant is bounded. The limit
 * (500, docs/entities.md) is written out rather than imported, so the test also reads against a
 * store without it.
 */

const LIMIT = 500;

let t: MigratedDatabase;

const manifest = (name: string, scope = 'crm') => ({
  apiVersion: 'apps.svc.io/v1',
  kind: 'Entity',
  metadata: { name },
  spec: { scope, key: 'id', columns: [{ name: 'id', type: 'text' }, { name: 'code', type: 'text' }], sources: [{ table: 'ext.items', key: 'external_id', columns: { id: 'external_id', code: '$.code' } }] },
});
const apply = async (tenant: number, name: string, scope?: string) => {
  const applied = await t.db.withTenant(tenant, (tx) => applyEntity(tx, manifest(name, scope)));
  return { name: applied.entity.name, created: applied.created, unchanged: applied.unchanged };
};
const count = async (tenant: number) => (await t.db.withTenant(tenant, (tx) => listEntities(tx))).length;

beforeAll(async () => {
  t = await migratedDatabase({ 601: 'a', 602: 'b' });
});

afterAll(async () => {
  await t.close();
});

describe('entities per tenant', () => {
  tenantCapCases({
    noun: 'entity',
    plural: 'entities',
    limit: LIMIT,
    db: () => t.db,
    apply: (tenant, name, changed) => apply(tenant, name, changed ? 'sales' : undefined),
    count,
    table: 'entities.entities',
    timeoutMs: 120_000,
  });
});
