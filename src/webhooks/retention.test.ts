import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { purgeJournal } from './retention.js';

/**
 * The delivery journal's daily purge against a real database: only deliveries that are over and
 * older than the retention go, each with its attempt log, whatever the tenant; open deliveries
 * stay whatever their age; 0 days keeps everything.
 */

let t: MigratedDatabase;

beforeAll(async () => {
  t = await migratedDatabase({ 401: 'a', 402: 'b' });
});

afterAll(async () => {
  await t?.close();
});

interface Row {
  tenant: number;
  label: string;
  ageDays: number;
  kind?: 'event' | 'replay' | 'test';
  succeeded?: boolean;
  closed?: string;
  attempts: number;
}

/** Deliveries in id order as listed (ids follow the order deliveries are recorded), each with its attempts. */
async function seed(rows: Row[]): Promise<Map<string, number>> {
  const ids = new Map<string, number>();
  for (const r of rows) {
    const { rows: made } = await t.owner.query<{ id: string }>(
      `insert into hub.deliveries (tenant_id, integration_id, kind, event_id, event_type, body, attempts, succeeded, closed_reason, created_at)
       values ($1, 1, $2, null, 'org.updated', $3, $4, $5, $6, now() - make_interval(days => $7)) returning id`,
      [r.tenant, r.kind ?? 'event', JSON.stringify({ label: r.label }), r.attempts, r.succeeded ?? false, r.closed ?? null, r.ageDays],
    );
    const id = Number(made[0]!.id);
    ids.set(r.label, id);
    for (let n = 1; n <= r.attempts; n++) {
      await t.owner.query(
        `insert into hub.delivery_attempts (delivery_id, attempt, tenant_id, http_status, duration_ms, attempted_at)
         values ($1, $2, $3, 500, 3, now() - make_interval(days => $4))`,
        [id, n, r.tenant, r.ageDays],
      );
    }
  }
  return ids;
}

async function left(): Promise<{ deliveries: string[]; attempts: Record<string, number> }> {
  const { rows } = await t.owner.query<{ label: string; attempts: string }>(
    `select d.body::json->>'label' as label, (select count(*) from hub.delivery_attempts a where a.delivery_id = d.id) as attempts
       from hub.deliveries d order by d.id`,
  );
  const orphans = await t.owner.query<{ n: number }>('select count(*)::int as n from hub.delivery_attempts a where not exists (select 1 from hub.deliveries d where d.id = a.delivery_id)');
  expect(orphans.rows[0]!.n).toBe(0);
  return { deliveries: rows.map((r) => r.label), attempts: Object.fromEntries(rows.map((r) => [r.label, Number(r.attempts)])) };
}

describe('webhook journal retention', () => {
  it('deletes the deliveries that are over and older than the retention, with their attempts, and nothing else', async () => {
    await t.owner.query('truncate hub.deliveries, hub.delivery_attempts');
    await seed([
      { tenant: 401, label: 'old-succeeded', ageDays: 100, succeeded: true, attempts: 1 },
      { tenant: 402, label: 'old-exhausted-b', ageDays: 99, closed: 'retries exhausted: HTTP 500', attempts: 3 },
      { tenant: 401, label: 'old-open', ageDays: 98, attempts: 1 },
      { tenant: 401, label: 'old-test-attempted', ageDays: 97, kind: 'test', attempts: 1 },
      { tenant: 401, label: 'old-test-unattempted', ageDays: 97, kind: 'test', attempts: 0 },
      { tenant: 402, label: 'old-replay', ageDays: 96, kind: 'replay', succeeded: true, attempts: 2 },
      { tenant: 401, label: 'young-succeeded', ageDays: 10, succeeded: true, attempts: 1 },
      { tenant: 402, label: 'young-closed', ageDays: 5, closed: 'endpoint gone, unsubscribed, or entity_filter no longer matches — retries stopped', attempts: 1 },
      { tenant: 401, label: 'young-open', ageDays: 1, attempts: 2 },
    ]);

    // Batches of two: several transactions, and the open old one passed over in each.
    const purged = await purgeJournal(t.db, 90, 2);

    expect(purged).toBe(4);
    expect(await left()).toEqual({
      deliveries: ['old-open', 'old-test-unattempted', 'young-succeeded', 'young-closed', 'young-open'],
      attempts: { 'old-open': 1, 'old-test-unattempted': 0, 'young-succeeded': 1, 'young-closed': 1, 'young-open': 2 },
    });
    // A second purge finds nothing more.
    expect(await purgeJournal(t.db, 90, 2)).toBe(0);
  });

  it('keeps a delivery made after the cutoff even when an older one comes after it in id order', async () => {
    await t.owner.query('truncate hub.deliveries, hub.delivery_attempts');
    // Recorded in this order (ids ascending): the bound is the first delivery inside the retention.
    await seed([
      { tenant: 401, label: 'old-1', ageDays: 40, succeeded: true, attempts: 1 },
      { tenant: 401, label: 'young', ageDays: 20, succeeded: true, attempts: 1 },
      { tenant: 401, label: 'old-after-young', ageDays: 40, succeeded: true, attempts: 1 },
    ]);
    expect(await purgeJournal(t.db, 30)).toBe(1);
    expect((await left()).deliveries).toEqual(['young', 'old-after-young']);
  });

  it('keeps every delivery with 0 days, and purges nothing in an empty journal', async () => {
    await t.owner.query('truncate hub.deliveries, hub.delivery_attempts');
    expect(await purgeJournal(t.db, 90)).toBe(0);
    await seed([{ tenant: 401, label: 'ancient', ageDays: 5000, succeeded: true, attempts: 1 }]);
    expect(await purgeJournal(t.db, 0)).toBe(0);
    expect((await left()).deliveries).toEqual(['ancient']);
    // All of them older than the retention: the bound is past the last one.
    expect(await purgeJournal(t.db, 1)).toBe(1);
    expect((await left()).deliveries).toEqual([]);
  });
});
