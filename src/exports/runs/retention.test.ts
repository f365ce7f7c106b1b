import { afterAll, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../../test/harness/database.js';
import { claimRun, latestRun } from './ledger.js';
import { purgeExportRuns } from './retention.js';

/**
 * The daily purge of export runs against a real database: only runs that ended before the retention
 * go, whatever the tenant; each export's latest run (`lastRun`), every run of its latest scheduled
 * slot (what keeps the slot from running twice) and a Running run stay whatever their age; 0 days
 * keeps everything.
 */

let t: MigratedDatabase;
const A = 601;
const B = 602;
const E1 = '00000000-0000-4000-9000-000000000011';
const E2 = '00000000-0000-4000-9000-000000000012';
const E3 = '00000000-0000-4000-9000-000000000013';

beforeAll(async () => {
  t = await migratedDatabase({ [A]: 'a', [B]: 'b' });
});

afterAll(async () => {
  await t?.close();
});

beforeEach(async () => {
  await t.owner.query('truncate exports.runs, exports.exports');
});

interface Run {
  tenant: number;
  exportId: string;
  label: string;
  status: 'Running' | 'Completed' | 'Failed';
  /** Days ago it started (it ended an hour later unless Running). */
  startedDays: number;
  /** A scheduled run's slot: midnight UTC this many days ago. */
  slotDays?: number;
  /** The label of the run it retries. */
  retryOf?: string;
}

async function seed(runs: Run[]): Promise<Map<string, string>> {
  const ids = new Map<string, string>();
  for (const r of runs) {
    const { rows } = await t.owner.query<{ id: string }>(
      `insert into exports.runs (tenant_id, export_id, export_name, entity, scope, destination, status, trigger, attempt, retry_of, slot,
                                 artifact_time, started_at, ended_at, failure_code, failure_reason)
       select $1, $2, $8, 'partner', 'crm', 'sftp', $3, case when slot is null then 'manual' else 'scheduled' end,
              case when $6::uuid is null then 1 else 2 end, $6, slot, coalesce(slot, now()),
              now() - make_interval(days => $4), case when $3 = 'Running' then null else now() - make_interval(days => $4) + interval '1 hour' end,
              case when $3 = 'Failed' then 'publication' end, $5
         from (select date_trunc('day', now() at time zone 'UTC' - make_interval(days => $7)) at time zone 'UTC' as slot) s
       returning id`,
      [r.tenant, r.exportId, r.status, r.startedDays, r.label, r.retryOf ? ids.get(r.retryOf) : null, r.slotDays ?? null, r.exportId === E3 ? 'other' : 'daily'],
    );
    ids.set(r.label, rows[0]!.id);
  }
  return ids;
}

async function left(): Promise<string[]> {
  const { rows } = await t.owner.query<{ label: string }>('select failure_reason as label from exports.runs order by started_at, failure_reason');
  return rows.map((r) => r.label);
}

const slotOf = async (label: string) =>
  (await t.owner.query<{ slot: Date }>('select slot from exports.runs where failure_reason = $1', [label])).rows[0]!.slot;

describe('export run retention', () => {
  it('deletes the runs that ended before the retention and keeps each export latest run and latest slot, in every tenant', async () => {
    for (const [tenant, id] of [[A, E1], [B, E2], [A, E3]] as const) {
      await t.owner.query(
        `insert into exports.exports (id, tenant_id, name, entity, scope, schedule, manifest, spec)
         values ($1, $2, $3, 'partner', 'crm', '0 0 * * *', '{}', '{"destination": {"kind": "sftp"}}')`,
        [id, tenant, id === E3 ? 'other' : 'daily'],
      );
    }
    const ids = await seed([
      { tenant: A, exportId: E1, label: 'a-slot-completed-old', status: 'Completed', startedDays: 200, slotDays: 200 },
      { tenant: A, exportId: E1, label: 'a-slot-failed-old', status: 'Failed', startedDays: 190, slotDays: 190 },
      { tenant: A, exportId: E1, label: 'a-slot-retried-old', status: 'Completed', startedDays: 189, slotDays: 190, retryOf: 'a-slot-failed-old' },
      { tenant: A, exportId: E1, label: 'a-last-slot-failed', status: 'Failed', startedDays: 150, slotDays: 150 },
      // The latest slot's retry (also failed, long ago): kept with the slot's first claim.
      { tenant: A, exportId: E1, label: 'a-last-slot-retry', status: 'Failed', startedDays: 149, slotDays: 150, retryOf: 'a-last-slot-failed' },
      { tenant: A, exportId: E1, label: 'a-manual-old', status: 'Completed', startedDays: 140 },
      { tenant: A, exportId: E1, label: 'a-manual-young', status: 'Completed', startedDays: 10 },
      { tenant: A, exportId: E3, label: 'a3-failed-old', status: 'Failed', startedDays: 135 },
      { tenant: A, exportId: E3, label: 'a3-running-old', status: 'Running', startedDays: 130 },
      // Another tenant's export of the same name: its own latest run stays, whatever tenant A ran since.
      { tenant: B, exportId: E2, label: 'b-completed-old', status: 'Completed', startedDays: 300 },
      { tenant: B, exportId: E2, label: 'b-failed-latest', status: 'Failed', startedDays: 250 },
    ]);
    const latest = async (tenant: number) => t.db.withTenant(tenant, async (tx) => (await latestRun(tx, 'daily'))?.id);
    const before = [await latest(A), await latest(B)];
    expect(before).toEqual([ids.get('a-manual-young'), ids.get('b-failed-latest')]);

    // Batches of one: several transactions, walking past the runs kept.
    expect(await purgeExportRuns(t.db, 90, 1)).toBe(6);
    expect(await left()).toEqual(['b-failed-latest', 'a-last-slot-failed', 'a-last-slot-retry', 'a3-running-old', 'a-manual-young']);
    expect([await latest(A), await latest(B)]).toEqual(before);
    expect(await purgeExportRuns(t.db, 90, 1)).toBe(0);

    // The latest slot is still claimed: a scheduler seeing it due again does not run it twice.
    const slot = await slotOf('a-last-slot-failed');
    const claimed = await t.db.withTenant(A, (tx) =>
      claimRun(tx, { exportId: E1, exportName: 'daily', entity: 'partner', scope: 'crm', destination: 'sftp' }, { trigger: 'scheduled', slot, artifactTime: slot }),
    );
    expect(claimed).toBeUndefined();
  });

  it('keeps every run with 0 days', async () => {
    await seed([
      { tenant: A, exportId: E1, label: 'ancient', status: 'Completed', startedDays: 5000 },
      { tenant: A, exportId: E1, label: 'later', status: 'Failed', startedDays: 4000 },
    ]);
    expect(await purgeExportRuns(t.db, 0)).toBe(0);
    expect(await left()).toEqual(['ancient', 'later']);
    // With a retention, all but the latest go.
    expect(await purgeExportRuns(t.db, 1)).toBe(1);
    expect(await left()).toEqual(['later']);
  });
});
