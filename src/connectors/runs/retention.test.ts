import { afterAll, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../../test/harness/database.js';
import { dataAsOf } from '../../retrieval/discovery.js';
import { listRuns } from './ledger.js';
import { purgeConnectorRuns, purgeDeadLetters } from './retention.js';

/**
 * The daily purges of connector runs and dead letters against a real database: only what is over
 * and older than the retention goes, whatever the tenant; each connector's latest run (the
 * operator's `lastRun`), its latest Completed run (`dataAsOf`), a run a dead letter still names, a
 * Running run, and pending dead letters stay whatever their age; 0 days keeps everything.
 */

let t: MigratedDatabase;
const A = 501;
const B = 502;
const C1 = '00000000-0000-4000-9000-000000000001';
const C2 = '00000000-0000-4000-9000-000000000002';
const C3 = '00000000-0000-4000-9000-000000000003';
const C4 = '00000000-0000-4000-9000-000000000004';

beforeAll(async () => {
  t = await migratedDatabase({ [A]: 'a', [B]: 'b' });
});

afterAll(async () => {
  await t?.close();
});

beforeEach(async () => {
  await t.owner.query('truncate connectors.runs, connectors.dead_letters, connectors.connectors cascade');
});

interface Run {
  tenant: number;
  connector: string;
  label: string;
  status: 'Running' | 'Completed' | 'Partial' | 'Failed' | 'Cancelled';
  /** Days ago it started; it ended a day later unless Running. */
  startedDays: number;
}

async function seedRuns(runs: Run[]): Promise<Map<string, string>> {
  const ids = new Map<string, string>();
  for (const r of runs) {
    const { rows } = await t.owner.query<{ id: string }>(
      `insert into connectors.runs (tenant_id, connector_id, connector_name, status, triggered_by, started_at, ended_at, error_message)
       values ($1, $2, 'crm', $3, 'manual', now() - make_interval(days => $4),
               case when $3 = 'Running' then null else now() - make_interval(days => $4 - 1) end, $5) returning id`,
      [r.tenant, r.connector, r.status, r.startedDays, r.label],
    );
    ids.set(r.label, rows[0]!.id);
  }
  return ids;
}

interface Entry {
  tenant: number;
  run: string;
  label: string;
  capturedDays: number;
  resolvedDays?: number;
  resolution?: 'replayed' | 'discarded';
  erasedDays?: number;
}

async function seedDeadLetters(entries: Entry[]): Promise<void> {
  for (const e of entries) {
    await t.owner.query(
      `insert into connectors.dead_letters (tenant_id, run_id, connector_id, skip_reason, error_message, resolution, resolved_at, captured_at, erased_at)
       select tenant_id, id, connector_id, 'mapping', $2, $3, now() - make_interval(days => $4), now() - make_interval(days => $5), now() - make_interval(days => $6)
         from connectors.runs where id = $1`,
      [e.run, e.label, e.resolution ?? null, e.resolvedDays ?? null, e.capturedDays, e.erasedDays ?? null],
    );
  }
}

async function runsLeft(): Promise<string[]> {
  const { rows } = await t.owner.query<{ label: string }>('select error_message as label from connectors.runs order by started_at, error_message');
  return rows.map((r) => r.label);
}

async function entriesLeft(): Promise<string[]> {
  const { rows } = await t.owner.query<{ label: string }>('select error_message as label from connectors.dead_letters order by id');
  return rows.map((r) => r.label);
}

/** What the hub answers of a connector's runs: the operator's `lastRun` and the analytic `dataAsOf`. */
async function answers(tenant: number, connector: string) {
  return t.db.withTenant(tenant, async (tx) => ({ lastRun: (await listRuns(tx, 1, connector))[0]?.id, dataAsOf: await dataAsOf(tx, 'crm') }));
}

describe('connector run retention', () => {
  it('deletes the runs that ended before the retention and nothing any answer still reads, in every tenant', async () => {
    for (const [tenant, id] of [[A, C1], [B, C2]] as const) {
      await t.owner.query(
        `insert into connectors.connectors (id, tenant_id, name, connector_type, scopes, manifest, spec) values ($1, $2, 'crm', 'rest-generic', '{crm}', '{}', '{}')`,
        [id, tenant],
      );
    }
    const ids = await seedRuns([
      { tenant: A, connector: C1, label: 'a-completed-early', status: 'Completed', startedDays: 200 },
      { tenant: A, connector: C1, label: 'a-failed-old', status: 'Failed', startedDays: 195 },
      { tenant: A, connector: C1, label: 'a-completed-last', status: 'Completed', startedDays: 190 },
      { tenant: A, connector: C1, label: 'a-failed-with-entry', status: 'Failed', startedDays: 185 },
      { tenant: A, connector: C1, label: 'a-running-old', status: 'Running', startedDays: 180 },
      { tenant: A, connector: C1, label: 'a-partial-old', status: 'Partial', startedDays: 170 },
      { tenant: A, connector: C1, label: 'a-cancelled-young', status: 'Cancelled', startedDays: 30 },
      { tenant: A, connector: C1, label: 'a-failed-latest', status: 'Failed', startedDays: 2 },
      // Another tenant's connector of the same name: its own latest runs stay, whatever tenant A ran since.
      { tenant: B, connector: C2, label: 'b-completed-old', status: 'Completed', startedDays: 300 },
      { tenant: B, connector: C2, label: 'b-failed-old', status: 'Failed', startedDays: 299 },
      { tenant: B, connector: C2, label: 'b-completed-latest', status: 'Completed', startedDays: 298 },
      // Its latest run Cancelled long ago: kept, as is the Completed one before it.
      { tenant: B, connector: C4, label: 'b4-completed-old', status: 'Completed', startedDays: 250 },
      { tenant: B, connector: C4, label: 'b4-failed-old', status: 'Failed', startedDays: 245 },
      { tenant: B, connector: C4, label: 'b4-cancelled-latest', status: 'Cancelled', startedDays: 240 },
      // A run whose entries were all resolved long ago goes with them; its connector's latest stays.
      { tenant: A, connector: C3, label: 'a3-failed-resolved', status: 'Failed', startedDays: 160 },
      { tenant: A, connector: C3, label: 'a3-failed-latest', status: 'Failed', startedDays: 150 },
    ]);
    await seedDeadLetters([
      { tenant: A, run: ids.get('a-failed-with-entry')!, label: 'pending-old', capturedDays: 184 },
      { tenant: A, run: ids.get('a3-failed-resolved')!, label: 'replayed-old', capturedDays: 159, resolution: 'replayed', resolvedDays: 120 },
      { tenant: A, run: ids.get('a3-failed-resolved')!, label: 'erased-old', capturedDays: 159, erasedDays: 100 },
      { tenant: A, run: ids.get('a3-failed-latest')!, label: 'discarded-lately', capturedDays: 149, resolution: 'discarded', resolvedDays: 10 },
      { tenant: B, run: ids.get('b-failed-old')!, label: 'b-discarded-old', capturedDays: 299, resolution: 'discarded', resolvedDays: 200 },
      { tenant: A, run: ids.get('a-failed-latest')!, label: 'young-replayed', capturedDays: 2, resolution: 'replayed', resolvedDays: 1 },
    ]);
    const before = { a: await answers(A, C1), b: await answers(B, C2) };
    expect(before.a.lastRun).toBe(ids.get('a-failed-latest'));

    // Batches of one: several transactions, walking past the runs and entries kept.
    expect(await purgeDeadLetters(t.db, 90, 1)).toBe(3);
    expect(await entriesLeft()).toEqual(['pending-old', 'discarded-lately', 'young-replayed']);
    expect(await purgeConnectorRuns(t.db, 90, 1)).toBe(7);
    expect(await runsLeft()).toEqual([
      'b-completed-latest',
      'b4-completed-old',
      'b4-cancelled-latest',
      'a-completed-last',
      'a-failed-with-entry',
      'a-running-old',
      'a3-failed-latest',
      'a-cancelled-young',
      'a-failed-latest',
    ]);
    expect({ a: await answers(A, C1), b: await answers(B, C2) }).toEqual(before);
    // A second purge finds nothing more.
    expect(await purgeDeadLetters(t.db, 90, 1)).toBe(0);
    expect(await purgeConnectorRuns(t.db, 90, 1)).toBe(0);

    // The pending entry resolved long ago: the purges take it, then its run.
    await t.owner.query(`update connectors.dead_letters set resolution = 'discarded', resolved_at = now() - interval '100 days' where error_message = 'pending-old'`);
    expect(await purgeDeadLetters(t.db, 90)).toBe(1);
    expect(await purgeConnectorRuns(t.db, 90)).toBe(1);
    expect(await runsLeft()).not.toContain('a-failed-with-entry');
  });

  it('keeps every run and entry with 0 days', async () => {
    const ids = await seedRuns([
      { tenant: A, connector: C1, label: 'ancient', status: 'Failed', startedDays: 5000 },
      { tenant: A, connector: C1, label: 'later', status: 'Failed', startedDays: 4000 },
    ]);
    await seedDeadLetters([{ tenant: A, run: ids.get('ancient')!, label: 'discarded', capturedDays: 5000, resolution: 'discarded', resolvedDays: 4999 }]);
    expect(await purgeDeadLetters(t.db, 0)).toBe(0);
    expect(await purgeConnectorRuns(t.db, 0)).toBe(0);
    expect(await runsLeft()).toEqual(['ancient', 'later']);
    expect(await entriesLeft()).toEqual(['discarded']);
    // With a retention, both go but the latest run.
    expect(await purgeDeadLetters(t.db, 1)).toBe(1);
    expect(await purgeConnectorRuns(t.db, 1)).toBe(1);
    expect(await runsLeft()).toEqual(['later']);
  });
});
