import { afterAll, beforeAll, describe } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { tenantCapCases } from '../../test/harness/tenant-cap-cases.js';
import { applyConnector } from './store.js';

/**
 * Connectors as stored, on a real database: the number of connectors per tenant is bounded. The
 * limit (500, docs/connectors.md) is written out rather than imported, so the test also reads
 * against a store without it; most of the connectors are stored as copies of the first ones
 * applied (an apply of one takes a few dozen statements). Connector names are lower-case only (a DNS label): the update the
 * cases send in upper case is applied in lower case.
 */

const LIMIT = 500;

let t: MigratedDatabase;

const manifest = (name: string, path = '/items') => ({
  apiVersion: 'connectors.svc.io/v1',
  kind: 'Connector',
  metadata: { name },
  connector_type: 'rest-generic',
  spec: { base_url: 'http://127.0.0.1:9', endpoints: [{ id: 'items', path, target: { table: 'ext.items', unique_key: '$.id' } }] },
});
const apply = async (tenant: number, name: string, path?: string) => {
  const applied = await t.db.withTenant(tenant, (tx) => applyConnector(tx, manifest(name.toLowerCase(), path)));
  return { name: applied.connector.name, created: applied.created, unchanged: applied.unchanged };
};
const count = async (tenant: number) => Number((await t.db.withTenant(tenant, (tx) => tx.query<{ n: number }>('select count(*)::int as n from connectors.connectors'))).rows[0]!.n);

beforeAll(async () => {
  t = await migratedDatabase({ 601: 'a', 602: 'b' });
});

afterAll(async () => {
  await t.close();
});

describe('connectors per tenant', () => {
  tenantCapCases({
    noun: 'connector',
    plural: 'connectors',
    limit: LIMIT,
    db: () => t.db,
    apply: (tenant, name, changed) => apply(tenant, name, changed ? '/things' : undefined),
    count,
    table: 'connectors.connectors',
    fill: (tenant, names) =>
      t.db.withTenant(tenant, async (tx) => {
        await tx.query(
          `insert into connectors.connectors (tenant_id, name, connector_type, scopes, schedule, manifest, spec)
           select tenant_id, n, connector_type, scopes, schedule, manifest, spec from connectors.connectors, unnest($1::text[]) as n where name = 'c-000'`,
          [names],
        );
      }),
  });
});
