import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { PageKey } from '../../db/keyset.js';
import { type MigratedDatabase, migratedDatabase } from '../../../test/harness/database.js';
import { explainingTx } from '../../../test/harness/explain.js';
import { listRunsJson } from './ledger.js';

/**
 * The run list filtered by a connector's name (GET /api/platform/runs?connector=NAME) on a tenant
 * with many runs of many connectors: a page reads the index on the name in the list's order
 * (connectors V10), where it read every run of the tenant, and still answers the runs of that name
 * (or connector id), newest first, every one once across the pages.
 */

const T = 1;
const CONNECTORS = 200;
const RUNS_EACH = 100;
const id = (n: number) => `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;

let t: MigratedDatabase;

beforeAll(async () => {
  t = await migratedDatabase({ [T]: 'runs-by-name', 2: 'other' });
  // Run g is of connector g % CONNECTORS, started g seconds ago: the newest runs have the smallest g.
  await t.owner.query(
    `insert into connectors.runs (id, tenant_id, connector_id, connector_name, status, triggered_by, started_at)
     select ('00000000-0000-4000-8000-' || lpad(g::text, 12, '0'))::uuid, $1,
            ('00000000-0000-4000-9000-' || lpad((g % $2)::text, 12, '0'))::uuid, 'conn-' || (g % $2), 'Completed', 'manual',
            timestamptz '2026-12-01T00:00:00Z' - make_interval(secs => g)
       from generate_series(1, $3::integer) g`,
    [T, CONNECTORS, CONNECTORS * RUNS_EACH],
  );
  // Another tenant's runs under the same name are not the caller's.
  await t.owner.query(
    `insert into connectors.runs (tenant_id, connector_id, connector_name, status, triggered_by) values (2, gen_random_uuid(), 'conn-7', 'Completed', 'manual')`,
  );
  await t.owner.query('analyze connectors.runs');
}, 60_000);

afterAll(async () => {
  await t?.close();
});

/** Every page of the list filtered by `connector`, `limit` runs a page: the run ids in order. */
async function allPages(connector: string, limit: number): Promise<string[]> {
  const ids: string[] = [];
  let after: PageKey | undefined;
  for (let pages = 0; pages < 100; pages++) {
    const page = await t.db.withTenant(T, (tx) => listRunsJson(tx, { limit, ...(after ? { after } : {}) }, { connector }));
    ids.push(...(JSON.parse(page.items.text) as Array<{ id: string }>).map((r) => r.id));
    if (!page.next) return ids;
    after = page.next;
  }
  throw new Error('more than 100 pages');
}

describe('the run list filtered by a connector', () => {
  it("answers the runs of that name, or of that connector id, newest first, each once across pages; the other tenant's none", async () => {
    const ofSeven = Array.from({ length: RUNS_EACH }, (_, k) => id(7 + k * CONNECTORS));
    expect(await allPages('conn-7', 30)).toEqual(ofSeven);
    expect(await allPages('00000000-0000-4000-9000-000000000007', 40)).toEqual(ofSeven);
    expect(await allPages('conn-nobody', 30)).toEqual([]);
  });

  it('reads a page by name through runs_tenant_connector_name, the first page and one after a key', async () => {
    const plans: string[] = [];
    const first = await t.db.withTenant(T, (tx) => listRunsJson(tx, { limit: 50 }, { connector: 'conn-7' }));
    await t.db.withTenant(T, async (tx) => {
      // The statements as listRunsJson sends them, planned in the tenant's transaction (explain does not run them).
      const explaining = explainingTx(tx, plans, { rows: [{ body: '[]', next: null }] });
      await listRunsJson(explaining, { limit: 50 }, { connector: 'conn-7' });
      await listRunsJson(explaining, { limit: 50, after: first.next! }, { connector: 'conn-7' });
    });
    expect(plans).toHaveLength(2);
    for (const plan of plans) {
      expect(plan).toContain('Index Scan using runs_tenant_connector_name on runs');
      expect(plan).not.toMatch(/runs_tenant_started|runs_started|Seq Scan on runs/);
    }
  });
});
