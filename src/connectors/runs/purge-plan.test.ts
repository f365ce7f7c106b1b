import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../../test/harness/database.js';
import { purgeEndedStatement } from '../../db/retention.js';
import { CONNECTOR_RUNS, purgeConnectorRuns } from './retention.js';

/**
 * The daily purge of connector runs is one statement for every tenant. For each old run it asks
 * whether its connector has a newer Completed run; a connector with very many runs must not make
 * that a read of all its runs per run (before connectors V17: a scan per run, minutes per batch with
 * a million runs, the other tenants' purge waiting behind it).
 */

const BIG = 1;
const SMALL = 2;
const RUNS = 100_000;
const CONNECTOR = '00000000-0000-0000-0000-0000000000b1';
const OTHER = '00000000-0000-0000-0000-0000000000b2';

let t: MigratedDatabase;

beforeAll(async () => {
  t = await migratedDatabase({ [BIG]: 'big', [SMALL]: 'small' });
  // One connector's runs, 200 to 130 days old, a minute apart, Completed and Failed in turn.
  await t.owner.query(
    `insert into connectors.runs (tenant_id, connector_id, connector_name, status, triggered_by, started_at, ended_at)
     select $1, $2::uuid, 'crm', case when g % 2 = 0 then 'Completed' else 'Failed' end, 'manual',
            now() - make_interval(days => 200) + g * interval '1 minute', now() - make_interval(days => 200) + g * interval '1 minute' + interval '30 seconds'
       from generate_series(1, $3::integer) g`,
    [BIG, CONNECTOR, RUNS],
  );
  await t.owner.query(
    `insert into connectors.runs (tenant_id, connector_id, connector_name, status, triggered_by, started_at, ended_at)
     select $1, $2::uuid, 'crm', 'Completed', 'manual', now() - make_interval(days => 150 - g), now() - make_interval(days => 150 - g)
       from generate_series(1, 3) g`,
    [SMALL, OTHER],
  );
  await t.owner.query('analyze connectors.runs');
}, 120_000);

afterAll(async () => {
  await t?.close();
});

describe('the connector run purge beside a connector of many runs', () => {
  it("asks for a newer (Completed) run by an index's end, not by scanning the connector's runs for each run", async () => {
    const { rows } = await t.owner.query<{ 'QUERY PLAN': string }>(`explain ${purgeEndedStatement(CONNECTOR_RUNS)}`, [90, null, 1000]);
    const plan = rows.map((r) => r['QUERY PLAN']).join('\n');
    // Before: `exists (… n.ended_at > r.ended_at)` planned as a scan of the table per run read.
    expect(plan).not.toMatch(/Seq Scan on runs n/);
  });

  it('purges every old run but the latest and the latest Completed, in batches', async () => {
    const started = Date.now();
    expect(await purgeConnectorRuns(t.db, 90, 5_000)).toBe(RUNS - 1 + 2);
    const { rows } = await t.owner.query<{ tenant_id: number; status: string; n: number }>(
      'select tenant_id, status, count(*)::int as n from connectors.runs group by 1, 2 order by 1, 2',
    );
    // The big connector keeps its latest (Completed, the last of the series); the small one its latest.
    expect(rows).toEqual([
      { tenant_id: BIG, status: 'Completed', n: 1 },
      { tenant_id: SMALL, status: 'Completed', n: 1 },
    ]);
    // A few seconds; the statement before took minutes here (a read of the runs per run).
    expect(Date.now() - started).toBeLessThan(30_000);
  }, 120_000);
});
