import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../../test/harness/database.js';
import { explainingTx } from '../../../test/harness/explain.js';
import { listDeadLetters } from './dead-letters.js';

/**
 * The dead-letter queue is one table for every tenant. GET /api/platform/dlq without `run` or
 * `connector` lists the tenant's unresolved entries, newest first: a small tenant's page must read
 * its own entries, not walk (or scan) a big tenant's. A tenant with a few old entries beside another
 * with many newer ones read them all on each page (a parallel scan of the table: 0.3 s a page with
 * a million there), before connectors V16.
 */

const SMALL = 2;
const BIG = 1;
const BIG_ENTRIES = 100_000;

let t: MigratedDatabase;

beforeAll(async () => {
  t = await migratedDatabase({ [BIG]: 'big', [SMALL]: 'small' });
  const insert = `insert into connectors.dead_letters (tenant_id, run_id, connector_id, skip_reason, error_message, resolution)
    select $1, gen_random_uuid(), gen_random_uuid(), 'unmappable', 'e', $3 from generate_series(1, $2::integer)`;
  // The small tenant's entries 1 to 5 (5 resolved), the big tenant's after them, then two more of the small one's.
  await t.owner.query(insert, [SMALL, 4, null]);
  await t.owner.query(insert, [SMALL, 1, 'discarded']);
  await t.owner.query(insert, [BIG, BIG_ENTRIES, null]);
  await t.owner.query(insert, [SMALL, 2, null]);
  await t.owner.query('analyze connectors.dead_letters');
}, 60_000);

afterAll(async () => {
  await t?.close();
});

describe("the dead-letter list of a tenant beside a big one's", () => {
  it("answers the tenant's unresolved entries, newest first, over pages", async () => {
    const first = await t.db.withTenant(SMALL, (tx) => listDeadLetters(tx, { limit: 3 }, {}));
    expect(first.items.map((e) => e.id)).toEqual([BIG_ENTRIES + 7, BIG_ENTRIES + 6, 4]);
    const second = await t.db.withTenant(SMALL, (tx) => listDeadLetters(tx, { limit: 3, after: first.next! }, {}));
    expect(second.items.map((e) => e.id)).toEqual([3, 2, 1]);
    expect(second.next).toBeUndefined();
  });

  it("reads a page, the first and one after a key, through the tenant's index of unresolved entries", async () => {
    const plans: string[] = [];
    await t.db.withTenant(SMALL, async (tx) => {
      const explaining = explainingTx(tx, plans);
      await listDeadLetters(explaining, { limit: 100 }, {});
      // After the newest entry: the big tenant's entries lie between it and the next.
      await listDeadLetters(explaining, { limit: 100, after: [String(BIG_ENTRIES + 7)] }, {});
    });
    expect(plans).toHaveLength(2);
    for (const plan of plans) {
      expect(plan).toContain('dead_letters_tenant_unresolved');
      expect(plan).not.toMatch(/Seq Scan|dead_letters_pkey/);
    }
  });
});
