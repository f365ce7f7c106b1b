import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { CLOSE_EXHAUSTED_SQL, SWEEP_CLAIM_SQL } from './consumer.js';
import { RETRIES_EXHAUSTED_REASON } from './model.js';

/**
 * The retry sweep's claim on a journal with a backlog: it reads each integration's first open rows,
 * not every open row of the journal (hub V5, deliveries_open_by_integration). It ranked them all by
 * integration first: 17 ms a claim at 1,000 open rows, 34 ms at 14,000, so a backlog left to the
 * sweep drained at a few hundred deliveries a second.
 */

const T = 1;
const BACKLOG = 20_000;
let t: MigratedDatabase;
let integrations: number[];

beforeAll(async () => {
  t = await migratedDatabase({ [T]: 'sweep-claim' });
  const { rows } = await t.owner.query<{ id: string }>(
    `insert into hub.integrations (tenant_id, name, target_url, event_types)
     select $1, 'hook-' || g, 'http://127.0.0.1:9/hook', '{org.*}' from generate_series(1, 4) g returning id`,
    [T],
  );
  integrations = rows.map((r) => Number(r.id)).sort((a, b) => a - b);
  const [a, b, c, d] = integrations as [number, number, number, number];
  // a: a backlog of open deliveries behind 30,000 delivered; b: 5 open; c: 3 open, one of them leased; d: none open.
  await t.owner.query(
    `insert into hub.deliveries (tenant_id, integration_id, kind, event_id, event_type, body, succeeded, attempts)
     select $1, $2, 'event', g, 'org.updated', '{}', g <= 30000, case when g <= 30000 then 1 else 0 end from generate_series(1, 30000 + $3) g`,
    [T, a, BACKLOG],
  );
  await t.owner.query(
    `insert into hub.deliveries (tenant_id, integration_id, kind, event_id, event_type, body, lease_until)
     select $1, i.id, 'event', g, 'org.updated', '{}', case when i.id = $3 and g = 1 then now() + interval '1 hour' end
       from (values ($2::bigint, 5), ($3::bigint, 3)) as i (id, n), generate_series(1, i.n) g`,
    [T, b, c],
  );
  await t.owner.query(`insert into hub.deliveries (tenant_id, integration_id, kind, event_id, event_type, body, succeeded, attempts) values ($1, $2, 'event', 1, 'org.updated', '{}', true, 1)`, [T, d]);
  await t.owner.query('analyze hub.deliveries');
}, 120_000);

afterAll(async () => {
  await t?.close();
});

/** The claim's parameters: 8 rows per integration, 16 in all, no tenant bound; `busy` integrations' attempts running. */
const params = (busy: Map<number, number> = new Map()) => [5, 8, 16, 60_000, '00000000-0000-4000-8000-000000000001', [...busy.keys()], null, null, [], [], 0, [...busy.values()]];

interface PlanNode {
  'Relation Name'?: string;
  'Actual Rows'?: number;
  'Actual Loops'?: number;
  'Rows Removed by Filter'?: number;
  'Rows Removed by Index Recheck'?: number;
  Plans?: PlanNode[];
}

/** Rows the plan's scans of hub.deliveries read: those they returned and those their filters dropped, every loop. */
function deliveriesRowsRead(node: PlanNode): number {
  const own =
    node['Relation Name'] === 'deliveries'
      ? ((node['Actual Rows'] ?? 0) + (node['Rows Removed by Filter'] ?? 0) + (node['Rows Removed by Index Recheck'] ?? 0)) * (node['Actual Loops'] ?? 1)
      : 0;
  return own + (node.Plans ?? []).reduce((sum, child) => sum + deliveriesRowsRead(child), 0);
}

describe('the retry sweep claim', () => {
  it("takes each integration's first open rows to attempt, up to its claim less its attempts running, leaving out leased rows and delivered ones", async () => {
    const [a, b, c] = integrations as [number, number, number, number];
    await t.owner.query('begin');
    try {
      const { rows } = await t.owner.query<{ id: string; integration_id: string }>(SWEEP_CLAIM_SQL, params());
      const by = (id: number) => rows.filter((r) => Number(r.integration_id) === id).length;
      expect(rows).toHaveLength(15);
      expect({ a: by(a), b: by(b), c: by(c) }).toEqual({ a: 8, b: 5, c: 2 });
      const lowest = await t.owner.query<{ id: string }>(`select id from hub.deliveries where integration_id = $1 and not succeeded order by id limit 8`, [a]);
      expect(rows.filter((r) => Number(r.integration_id) === a).map((r) => r.id).sort()).toEqual(lowest.rows.map((r) => r.id).sort());
    } finally {
      await t.owner.query('rollback');
    }
    await t.owner.query('begin');
    try {
      // a with a whole claim running: left out; b with 6 running: 2 rows, its first.
      const { rows } = await t.owner.query<{ id: string; integration_id: string }>(SWEEP_CLAIM_SQL, params(new Map([[a, 8], [b, 6]])));
      const by = (id: number) => rows.filter((r) => Number(r.integration_id) === id).map((r) => r.id);
      expect({ a: by(a).length, b: by(b).length, c: by(c).length }).toEqual({ a: 0, b: 2, c: 2 });
      const lowest = await t.owner.query<{ id: string }>(`select id from hub.deliveries where integration_id = $1 order by id limit 2`, [b]);
      expect(by(b).sort()).toEqual(lowest.rows.map((r) => r.id).sort());
    } finally {
      await t.owner.query('rollback');
    }
  });

  it(`reads a few rows per integration, not the ${BACKLOG} open rows of the backlog`, async () => {
    const [a, , c] = integrations as [number, number, number, number];
    // No attempts running, then the backlog's integration with half a claim running and another with a whole one.
    for (const busy of [new Map<number, number>(), new Map([[a, 4], [c, 8]])]) {
      await t.owner.query('begin');
      try {
        const { rows } = await t.owner.query<{ 'QUERY PLAN': Array<{ Plan: PlanNode }> }>(`explain (analyze, format json) ${SWEEP_CLAIM_SQL}`, params(busy));
        const read = deliveriesRowsRead(rows[0]!['QUERY PLAN'][0]!.Plan);
        // Each integration's first rows, the skips from one integration to the next, the rows locked and updated.
        expect(read).toBeGreaterThan(0);
        expect(read).toBeLessThan(200);
      } finally {
        await t.owner.query('rollback');
      }
    }
  });

  it('reads past failed rows with no attempt left until the sweep closes them; then a few rows again', async () => {
    const [a] = integrations as [number, number, number, number];
    await t.owner.query('begin');
    try {
      // 30,000 deliveries of a that failed all 5 attempts, older than its backlog (ids before it), one of them leased (an attempt under way).
      await t.owner.query(
        `insert into hub.deliveries (id, tenant_id, integration_id, kind, event_id, event_type, body, attempts, lease_until) overriding system value
         select -g, $1, $2, 'event', 100000 + g, 'org.updated', '{}', 5, case when g = 1 then now() + interval '1 hour' end from generate_series(1, 30000) g`,
        [T, a],
      );
      const readByClaim = async () => {
        await t.owner.query('savepoint claim');
        const { rows } = await t.owner.query<{ 'QUERY PLAN': Array<{ Plan: PlanNode }> }>(`explain (analyze, format json) ${SWEEP_CLAIM_SQL}`, params());
        await t.owner.query('rollback to savepoint claim');
        return deliveriesRowsRead(rows[0]!['QUERY PLAN'][0]!.Plan);
      };
      expect(await readByClaim()).toBeGreaterThan(30_000);
      const closed = await t.owner.query(CLOSE_EXHAUSTED_SQL, [RETRIES_EXHAUSTED_REASON, 5]);
      expect(closed.rowCount).toBe(29_999);
      expect(await readByClaim()).toBeLessThan(200);
      // The backlog (fewer attempts) and the leased row stay open.
      const { rows } = await t.owner.query<{ open: number }>('select count(*)::int as open from hub.deliveries where integration_id = $1 and closed_reason is null and not succeeded', [a]);
      expect(rows[0]!.open).toBe(BACKLOG + 1);
    } finally {
      await t.owner.query('rollback');
    }
  });
});
