import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { PageKey } from '../../db/keyset.js';
import { type MigratedDatabase, migratedDatabase } from '../../../test/harness/database.js';
import { explainingTx } from '../../../test/harness/explain.js';
import { latestRun, listRuns } from './ledger.js';

/**
 * The runs of one export on a tenant with many runs of many exports: a page reads the index on the
 * export's name in the list's order (exports V3), where it read the tenant's runs newest first and
 * dropped the other exports' (an export run rarely read most of them for its latest run); and it
 * still answers that export's runs, newest first, every one once across the pages.
 */

const T = 1;
const EXPORTS = 200;
const RUNS_EACH = 100;
const id = (n: number) => `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;

let t: MigratedDatabase;

beforeAll(async () => {
  t = await migratedDatabase({ [T]: 'export-runs-by-name', 2: 'other' });
  // Run g is of export g % EXPORTS, started g seconds ago: the newest runs have the smallest g.
  await t.owner.query(
    `insert into exports.runs (id, tenant_id, export_id, export_name, entity, scope, destination, status, trigger, artifact_time, started_at, ended_at)
     select ('00000000-0000-4000-8000-' || lpad(g::text, 12, '0'))::uuid, $1,
            ('00000000-0000-4000-9000-' || lpad((g % $2)::text, 12, '0'))::uuid, 'export-' || (g % $2), 'partners', 'crm', 's3', 'Completed', 'manual',
            timestamptz '2026-12-01T00:00:00Z', timestamptz '2026-12-01T00:00:00Z' - make_interval(secs => g), timestamptz '2026-12-01T00:00:00Z'
       from generate_series(1, $3::integer) g`,
    [T, EXPORTS, EXPORTS * RUNS_EACH],
  );
  // Another tenant's run under the same name is not the caller's.
  await t.owner.query(
    `insert into exports.runs (tenant_id, export_id, export_name, entity, scope, destination, status, trigger, artifact_time, ended_at)
     values (2, gen_random_uuid(), 'export-7', 'partners', 'crm', 's3', 'Completed', 'manual', now(), now())`,
  );
  await t.owner.query('analyze exports.runs');
}, 60_000);

afterAll(async () => {
  await t?.close();
});

/** Every page of one export's runs, `limit` a page: the run ids in order. */
async function allPages(name: string, limit: number): Promise<string[]> {
  const ids: string[] = [];
  let after: PageKey | undefined;
  for (let pages = 0; pages < 100; pages++) {
    const page = await t.db.withTenant(T, (tx) => listRuns(tx, name, { limit, ...(after ? { after } : {}) }));
    ids.push(...page.items.map((r) => r.id));
    if (!page.next) return ids;
    after = page.next;
  }
  throw new Error('more than 100 pages');
}

describe("one export's runs", () => {
  it("answers that export's runs, newest first, each once across pages; the other tenant's none", async () => {
    const ofSeven = Array.from({ length: RUNS_EACH }, (_, k) => id(7 + k * EXPORTS));
    expect(await allPages('export-7', 30)).toEqual(ofSeven);
    expect(await allPages('export-nobody', 30)).toEqual([]);
    expect((await t.db.withTenant(T, (tx) => latestRun(tx, 'export-7')))?.id).toBe(ofSeven[0]);
  });

  it('reads a page through runs_tenant_name_started, the first page and one after a key', async () => {
    const plans: string[] = [];
    const first = await t.db.withTenant(T, (tx) => listRuns(tx, 'export-7', { limit: 50 }));
    await t.db.withTenant(T, async (tx) => {
      // The statements as listRuns sends them, planned in the tenant's transaction (explain does not run them).
      const explaining = explainingTx(tx, plans);
      await listRuns(explaining, 'export-7', { limit: 50 });
      await listRuns(explaining, 'export-7', { limit: 50, after: first.next! });
      await listRuns(explaining, 'export-7', { limit: 50 }, ['crm']);
    });
    expect(plans).toHaveLength(3);
    for (const plan of plans) {
      expect(plan).toContain('Index Scan using runs_tenant_name_started on runs');
      expect(plan).not.toMatch(/runs_tenant_started|runs_export_started|Seq Scan on runs/);
    }
  });
});
