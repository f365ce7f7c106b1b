import { afterAll, beforeAll, describe } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { tenantCapCases } from '../../test/harness/tenant-cap-cases.js';
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
  tenantCapCases({
    noun: 'process',
    plural: 'processes',
    limit: LIMIT,
    db: () => t.db,
    apply: (tenant, name, changed) => apply(tenant, name, changed ? 'decision.changed' : undefined),
    count,
    table: 'processes.processes',
  });
});
