import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { applyEntity } from '../entities/store.js';
import { ValidationError } from '../errors.js';
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
  it(`refuses a new workflow past ${LIMIT} per tenant with a 400 naming the limit; updates and other tenants go on`, async () => {
    const names = Array.from({ length: LIMIT }, (_, i) => `w-${String(i).padStart(3, '0')}`);
    // Concurrent applies cannot overshoot (one apply at a time per tenant).
    await Promise.all(names.slice(0, 10).map((name) => apply(601, name)));
    for (const name of names.slice(10)) await apply(601, name);
    expect(await count(601)).toBe(LIMIT);

    const refused = apply(601, 'one-more');
    await expect(refused).rejects.toThrow(ValidationError);
    const err = (await refused.catch((e: unknown) => e)) as ValidationError;
    expect(err.field).toBe('metadata.name');
    expect(err.message).toBe(`this tenant has ${LIMIT} workflows, the most a tenant may have (${LIMIT}): delete one before applying a new workflow one-more (an existing name can still be updated)`);
    expect(err.render().status).toBe(400);
    expect(await count(601)).toBe(LIMIT);

    // Re-applying an existing name (any case) is an update, not one more.
    expect(await apply(601, 'W-000', ['open', 'closed', 'lost'])).toMatchObject({ name: 'w-000', created: false });
    // Another tenant has its own count.
    expect(await apply(602, 'one-more')).toMatchObject({ created: true });
    // After a delete there is room again.
    await t.db.withTenant(601, (tx) => tx.query(`delete from workflows.workflows where name = 'w-099'`));
    expect(await apply(601, 'one-more')).toMatchObject({ created: true });
  }, 120_000);

  it('does not let concurrent applies take the last place twice', async () => {
    await t.db.withTenant(601, (tx) => tx.query(`delete from workflows.workflows where name = 'one-more'`));
    const outcomes = await Promise.allSettled([apply(601, 'race-a'), apply(601, 'race-b'), apply(601, 'race-c')]);
    expect(outcomes.filter((o) => o.status === 'fulfilled')).toHaveLength(1);
    expect(await count(601)).toBe(LIMIT);
  });
});
