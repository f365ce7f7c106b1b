import { afterAll, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { purgeInbox } from './inbox.js';

/**
 * The inbox's daily purge against a real database: only items acknowledged before the retention go,
 * whatever the tenant; an item no one acknowledged stays whatever its age; 0 days keeps everything.
 */

let t: MigratedDatabase;
let nextEvent = 1;

beforeAll(async () => {
  t = await migratedDatabase({ 701: 'a', 702: 'b' });
});

afterAll(async () => {
  await t?.close();
});

beforeEach(async () => {
  await t.owner.query('truncate events.inbox');
});

/** Items in id order as listed (ids follow the order decisions land). */
async function seed(items: Array<{ tenant: number; label: string; ageDays: number; ackedDays?: number }>): Promise<void> {
  for (const i of items) {
    await t.owner.query(
      `insert into events.inbox (tenant_id, event_id, type, payload, created_at, acked_at, acked_by)
       values ($1, $2, 'decision.big-run', $3, now() - make_interval(days => $4), now() - make_interval(days => $5), case when $5::int is null then null else 'ops' end)`,
      [i.tenant, nextEvent++, JSON.stringify({ message: i.label }), i.ageDays, i.ackedDays ?? null],
    );
  }
}

async function left(): Promise<string[]> {
  const { rows } = await t.owner.query<{ label: string }>(`select payload->>'message' as label from events.inbox order by id`);
  return rows.map((r) => r.label);
}

describe('inbox retention', () => {
  it('deletes the items acknowledged before the retention and nothing else, in every tenant', async () => {
    await seed([
      { tenant: 701, label: 'old-acked-old', ageDays: 200, ackedDays: 150 },
      { tenant: 702, label: 'b-old-acked-old', ageDays: 199, ackedDays: 199 },
      { tenant: 701, label: 'old-unacked', ageDays: 198 },
      { tenant: 701, label: 'old-acked-lately', ageDays: 197, ackedDays: 10 },
      { tenant: 702, label: 'b-old-unacked', ageDays: 196 },
      { tenant: 701, label: 'old-acked-old-2', ageDays: 195, ackedDays: 91 },
      { tenant: 701, label: 'young-acked', ageDays: 5, ackedDays: 1 },
      { tenant: 702, label: 'young-unacked', ageDays: 1 },
    ]);
    // Batches of one: several transactions, walking past the items kept.
    expect(await purgeInbox(t.db, 90, 1)).toBe(3);
    expect(await left()).toEqual(['old-unacked', 'old-acked-lately', 'b-old-unacked', 'young-acked', 'young-unacked']);
    expect(await purgeInbox(t.db, 90, 1)).toBe(0);
  });

  it('keeps every item with 0 days, and purges nothing in an empty inbox', async () => {
    expect(await purgeInbox(t.db, 90)).toBe(0);
    await seed([{ tenant: 701, label: 'ancient', ageDays: 5000, ackedDays: 4999 }]);
    expect(await purgeInbox(t.db, 0)).toBe(0);
    expect(await left()).toEqual(['ancient']);
    expect(await purgeInbox(t.db, 1)).toBe(1);
    expect(await left()).toEqual([]);
  });
});
