import { afterAll, beforeAll, describe } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { tenantCapCases } from '../../test/harness/tenant-cap-cases.js';
import { applyEntity } from '../entities/store.js';
import { applyWorkflow, listWorkflows } from './store.js';

/**
 * Workflows as stored, on a real database: the number of workflows per tenant is bounded (each
 * costs a read of its entity at every sweep tick). The limit (100, docs/workflows.md) is written
 * out rather than imported, so the test also reads against a store without it.
 */

const LIMIT = 100;

let t: MigratedDatabase;

const entity = {
  apiVersion: 'apps.svc.io/v1',
  kind: 'Entity',
  metadata: { name: 'partner' },
  spec: {
    scope: 'crm',
    key: 'partner_id',
    columns: [
      { name: 'partner_id', type: 'text' },
      { name: 'status', type: 'text' },
    ],
    sources: [{ table: 'ext.partners', key: 'external_id', columns: { partner_id: 'external_id', status: 'status' } }],
  },
};
const manifest = (name: string, states = ['open', 'closed']) => ({ apiVersion: 'apps.svc.io/v1', kind: 'Workflow', metadata: { name }, spec: { entity: 'partner', stateColumn: 'status', states } });
const apply = (tenant: number, name: string, states?: string[]) => t.db.withTenant(tenant, (tx) => applyWorkflow(tx, manifest(name, states)));
const count = async (tenant: number) => (await t.db.withTenant(tenant, (tx) => listWorkflows(tx))).length;

beforeAll(async () => {
  t = await migratedDatabase({ 601: 'a', 602: 'b' });
  for (const tenant of [601, 602]) await t.db.withTenant(tenant, (tx) => applyEntity(tx, entity));
}, 60_000);

afterAll(async () => {
  await t.close();
});

describe('workflows per tenant', () => {
  tenantCapCases({
    noun: 'workflow',
    plural: 'workflows',
    limit: LIMIT,
    db: () => t.db,
    apply: (tenant, name, changed) => apply(tenant, name, changed ? ['open', 'closed', 'lost'] : undefined),
    count,
    table: 'workflows.workflows',
    timeoutMs: 120_000,
  });
});
