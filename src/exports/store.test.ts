import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { ITEM_ENTITY, itemS3Export } from '../../test/harness/export-manifests.js';
import { tenantCapCases, whileTurnHeld } from '../../test/harness/tenant-cap-cases.js';
import { applyEntity } from '../entities/store.js';
import { entityShape } from './entity-shape.js';
import { applyExport } from './store.js';

/**
 * Exports as stored, on a real database: the number of exports per tenant is bounded. The limit
 * (500, docs/exports.md) is written out rather than imported, so the test also reads against a
 * store without it; most of the exports are stored as copies of the first ones applied.
 */

const LIMIT = 500;

let t: MigratedDatabase;

const apply = async (tenant: number, name: string, endpoint = 'http://127.0.0.1:9') => {
  const applied = await t.db.withTenant(tenant, (tx) => applyExport(tx, itemS3Export(name, endpoint), { entity: entityShape }));
  return { name: applied.spec.name, created: applied.created, unchanged: applied.unchanged };
};
const count = async (tenant: number) => Number((await t.db.withTenant(tenant, (tx) => tx.query<{ n: number }>('select count(*)::int as n from exports.exports'))).rows[0]!.n);

beforeAll(async () => {
  t = await migratedDatabase({ 601: 'a', 602: 'b' });
  for (const tenant of [601, 602]) await t.db.withTenant(tenant, (tx) => applyEntity(tx, ITEM_ENTITY));
});

afterAll(async () => {
  await t.close();
});

describe('exports per tenant', () => {
  tenantCapCases({
    noun: 'export',
    plural: 'exports',
    limit: LIMIT,
    db: () => t.db,
    apply: (tenant, name, changed) => apply(tenant, name, changed ? 'http://127.0.0.1:10' : undefined),
    count,
    table: 'exports.exports',
    fill: (tenant, names) =>
      t.db.withTenant(tenant, async (tx) => {
        await tx.query(
          `insert into exports.exports (tenant_id, name, entity, scope, schedule, manifest, spec)
           select tenant_id, n, entity, scope, schedule, manifest, spec from exports.exports, unnest($1::text[]) as n where name = 'e-000'`,
          [names],
        );
      }),
  });
});

describe('an export created twice at once', () => {
  it('answers the second apply with the scope of the export it replaces, as an update of a stored one', async () => {
    // Two new exports of one name, of scopes crm and sales, read none stored before either commits.
    // The one applied second replaces the first: its caller must hold the first's scope too
    // (`replacedScope`, checked as a delete checks it), or a scope-bound user takes over an export
    // of a scope they do not hold by applying its name at the same time.
    await t.db.withTenant(602, (tx) => applyEntity(tx, { ...ITEM_ENTITY, metadata: { name: 'ware' }, spec: { ...ITEM_ENTITY.spec, scope: 'sales' } }));
    const of = (scope: string) => {
      const manifest = itemS3Export('contested', 'http://127.0.0.1:9');
      return { ...manifest, spec: { ...manifest.spec, scope, source: { entity: scope === 'crm' ? 'item' : 'ware' } } };
    };
    const results = await whileTurnHeld(t.db, 602, 'exports', ['crm', 'sales'].map((scope) => () => t.db.withTenant(602, (tx) => applyExport(tx, of(scope), { entity: entityShape }))));
    const [first, second] = results[0]!.created ? results : [results[1]!, results[0]!];
    expect(first).toMatchObject({ created: true });
    expect(first!.replacedScope).toBeUndefined();
    expect(second).toMatchObject({ created: false, unchanged: false, replacedScope: first!.spec.scope });
  });
});
