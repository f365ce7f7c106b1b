import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { ValidationError } from '../errors.js';
import { applyProcess, listProcesses } from './store.js';

/**
 * Processes as stored, on a real database: the number of processes per tenant is bounded. The
 * limit (100, docs/processes.md) is written out rather than imported, so the test also reads
 * against a store without it.
 */

const LIMIT = 100;

let t: MigratedDatabase;

const manifest = (name: string, decision = 'decision.capped') => ({ apiVersion: 'apps.svc.io/v1', kind: 'Process', metadata: { name }, spec: { event: 'cap.test', decision } });
const apply = (tenant: number, name: string, decision?: string) => t.db.withTenant(tenant, (tx) => applyProcess(tx, manifest(name, decision)));
const count = async (tenant: number) => (await t.db.withTenant(tenant, (tx) => listProcesses(tx))).length;

beforeAll(async () => {
  t = await migratedDatabase({ 601: 'a', 602: 'b' });
});

afterAll(async () => {
  await t.close();
});

describe('processes per tenant', () => {
  it(`refuses a new process past ${LIMIT} per tenant with a 400 naming the limit; updates and other tenants go on`, async () => {
    const names = Array.from({ length: LIMIT }, (_, i) => `p-${String(i).padStart(3, '0')}`);
    // Concurrent applies cannot overshoot (one apply at a time per tenant).
    await Promise.all(names.slice(0, 10).map((name) => apply(601, name)));
    for (const name of names.slice(10)) await apply(601, name);
    expect(await count(601)).toBe(LIMIT);

    const refused = apply(601, 'one-more');
    await expect(refused).rejects.toThrow(ValidationError);
    const err = (await refused.catch((e: unknown) => e)) as ValidationError;
    expect(err.field).toBe('metadata.name');
    expect(err.message).toBe(`this tenant has ${LIMIT} processes, the most a tenant may have (${LIMIT}): delete one before applying a new process one-more (an existing name can still be updated)`);
    expect(err.render().status).toBe(400);
    expect(await count(601)).toBe(LIMIT);

    // Re-applying an existing name (any case) is an update, not one more.
    expect(await apply(601, 'P-000', 'decision.changed')).toMatchObject({ name: 'p-000', created: false });
    // Another tenant has its own count.
    expect(await apply(602, 'one-more')).toMatchObject({ created: true });
    // After a delete there is room again.
    await t.db.withTenant(601, (tx) => tx.query(`delete from processes.processes where name = 'p-099'`));
    expect(await apply(601, 'one-more')).toMatchObject({ created: true });
  });

  it('does not let concurrent applies take the last place twice', async () => {
    await t.db.withTenant(601, (tx) => tx.query(`delete from processes.processes where name = 'one-more'`));
    const outcomes = await Promise.allSettled([apply(601, 'race-a'), apply(601, 'race-b'), apply(601, 'race-c')]);
    expect(outcomes.filter((o) => o.status === 'fulfilled')).toHaveLength(1);
    expect(await count(601)).toBe(LIMIT);
  });
});
