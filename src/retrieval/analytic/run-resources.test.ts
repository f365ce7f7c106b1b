import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { type MigratedDatabase, migratedDatabase, TEST_ROLES } from '../../../test/harness/database.js';
import { Database } from '../../db/database.js';
import { roleUrl, tempFileLimitCheck } from '../../db/roles.js';
import { guardQuery } from './guards.js';
import { memoryParts } from './plan-memory.js';
import { AnalyticRefusal } from './refusal.js';
import { runReadOnly } from './run.js';
import { until } from '../../../test/harness/until.js';

/**
 * The resources of one analytic statement against a real PostgreSQL (docs/analytic-guards.md, "Resources of one
 * statement"): no parallel workers, work_mem and hash_mem_multiplier set whatever the server's, temp_file_limit
 * where the application role may set it (the migrations grant it: the test server's owner is a superuser).
 */
describe('runReadOnly: the resources of one statement', () => {
  let t: MigratedDatabase;
  let database: string;
  const options = { timeoutMs: 20_000, maxRows: 500, maxBytes: 1_000_000 };
  /** 200,000 rows of some 140 bytes: 28 MB, past min_parallel_table_scan_size (8 MB), so its scans get parallel plans. */
  const ROWS = 200_000;
  const aggregate = 'select count(*)::int as n, max(pad) as top from ext_t7.big';

  beforeAll(async () => {
    t = await migratedDatabase({ 7: 'seven' }, 1);
    const { rows } = await t.owner.query<{ name: string }>('select current_database() as name');
    database = pg.escapeIdentifier(rows[0]!.name);
    const { app, analytic } = TEST_ROLES;
    await t.owner.query(`
      create schema ext_t7;
      grant usage on schema ext_t7 to ${app}, ${analytic};
      create table ext_t7.big (id bigint primary key, tenant_id bigint not null, pad text not null);
      alter table ext_t7.big enable row level security;
      create policy tenant_isolation on ext_t7.big using (tenant_id = core.current_tenant());
      grant select on ext_t7.big to ${app}, ${analytic};
      insert into ext_t7.big select i, 7, md5(i::text) || md5((i + 1)::text) || md5((i + 2)::text) from generate_series(1, ${ROWS}) i;
      analyze ext_t7.big;
    `);
  }, 60_000);
  afterAll(async () => t?.close());

  /** A counter of this database's pg_stat_database row, once `flushed` has flushed the statistics of the application role's one connection. */
  async function counter(column: 'parallel_workers_to_launch' | 'temp_files'): Promise<number> {
    const { rows } = await t.owner.query<{ n: string }>(`select ${column}::text as n from pg_stat_database where datname = current_database()`);
    return Number(rows[0]!.n);
  }
  /**
   * The counter once the application role's connection (the pool's one) has flushed its statistics: a backend
   * told to (pg_stat_force_next_flush) flushes them before it says it is ready for the next query, so they are
   * in the server's shared statistics once that call has answered; no wait after it.
   */
  async function settled(column: 'parallel_workers_to_launch' | 'temp_files'): Promise<number> {
    await t.db.answerWithin('select pg_stat_force_next_flush()', 5000);
    return counter(column);
  }
  /** Until the counter moves past `before` (statistics are flushed when a backend goes idle, at most once a second), or 10 s. */
  async function movedPast(column: 'parallel_workers_to_launch' | 'temp_files', before: number, db: Database = t.db): Promise<number> {
    await db.answerWithin('select pg_stat_force_next_flush()', 5000);
    let now = before;
    await until(
      `${column} past ${before}`,
      async () => {
        now = await counter(column);
        return now !== before;
      },
      { everyMs: 100 },
    ).catch(() => undefined);
    return now;
  }

  it('runs a query that gets a parallel plan otherwise without a parallel worker (no Gather)', async () => {
    // As the analytic role would run it, without the hub's settings: a parallel plan (Gather) over the table.
    const planned = await t.db.withTenant(7, async (tx) => {
      const results = (await tx.query(`set local role ${TEST_ROLES.analytic}; explain (analyze, format json) ${aggregate}`)) as unknown as pg.QueryResult[];
      return JSON.stringify(results[results.length - 1]!.rows);
    });
    expect(planned).toContain('"Node Type":"Gather"');
    const workers = Number(/"Workers Planned":(\d+)/.exec(planned)![1]);
    expect(workers).toBeGreaterThan(0);
    const before = await movedPast('parallel_workers_to_launch', await counter('parallel_workers_to_launch'));

    // The analytic statement, then the same query once more without the hub's settings, on the same connection:
    // the workers counted since are that second run's alone.
    expect((await runReadOnly(t.db, 7, aggregate, options)).rows).toEqual([{ n: ROWS, top: expect.any(String) }]);
    await t.db.withTenant(7, (tx) => tx.query(`set local role ${TEST_ROLES.analytic}; ${aggregate}`));
    expect((await movedPast('parallel_workers_to_launch', before)) - before).toBe(workers);
  }, 60_000);

  it('sets work_mem, hash_mem_multiplier 1, no parallel workers and temp_file_limit for the statement, whatever the server says', async () => {
    // A server configured generously: sessions opened from now on take these.
    await t.owner.query(`alter database ${database} set work_mem = '1GB'`);
    await t.owner.query(`alter database ${database} set hash_mem_multiplier = 8`);
    await t.owner.query(`alter database ${database} set max_parallel_workers_per_gather = 4`);
    const generous = new Database({ appUrl: roleUrl(t.ownerUrl, TEST_ROLES.app), workerUrl: roleUrl(t.ownerUrl, TEST_ROLES.worker), analyticRole: TEST_ROLES.analytic, poolSize: 1 });
    try {
      const seen =
        "select current_setting('work_mem') as work_mem, current_setting('hash_mem_multiplier') as hash, current_setting('max_parallel_workers_per_gather') as workers, current_setting('temp_file_limit') as temp";
      expect((await runReadOnly(generous, 7, seen, options)).rows).toEqual([{ work_mem: '4MB', hash: '1', workers: '0', temp: '-1' }]);
      expect((await runReadOnly(generous, 7, seen, { ...options, workMemKb: 8192, tempFileLimitKb: 1024 * 1024 })).rows).toEqual([
        { work_mem: '8MB', hash: '1', workers: '0', temp: '1GB' },
      ]);
      // The transaction's only: the connection's own settings are the server's again.
      expect((await generous.answerWithin(seen, 5000)).rows).toEqual([{ work_mem: '1GB', hash: '8', workers: '4', temp: '-1' }]);
    } finally {
      await generous.close();
      for (const setting of ['work_mem', 'hash_mem_multiplier', 'max_parallel_workers_per_gather']) await t.owner.query(`alter database ${database} reset ${setting}`);
    }
  });

  it('lets a legitimate sort larger than work_mem complete on disk', async () => {
    const before = await settled('temp_files');
    // 200,000 rows of 96 characters sorted (some 28 MB, seven times the 4MB of work_mem): an external sort.
    const { rows } = await runReadOnly(t.db, 7, `select id from ext_t7.big order by pad desc offset ${ROWS - 3}`, { ...options, tempFileLimitKb: 1024 * 1024 });
    expect(rows).toHaveLength(3);
    expect(await movedPast('temp_files', before)).toBeGreaterThan(before);
  }, 60_000);

  it('refuses a statement past svc.analytic.temp-file-limit as an analytic refusal naming the limit', async () => {
    const ten = '(values (0), (1), (2), (3), (4), (5), (6), (7), (8), (9))';
    const crossJoin = `select a.x, b.x, c.x, d.x, e.x, f.x from ${['a', 'b', 'c', 'd', 'e', 'f'].map((n) => `${ten} ${n}(x)`).join(', ')} order by f.x, e.x, d.x, c.x, b.x, a.x desc offset 999990`;
    const err = await runReadOnly(t.db, 7, crossJoin, { ...options, tempFileLimitKb: 1024 }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(AnalyticRefusal);
    expect({ guard: (err as AnalyticRefusal).guard, message: (err as AnalyticRefusal).message }).toEqual({
      guard: 5,
      message:
        'The query needed more than 1MB of temporary files in the database (temp_file_limit, svc.analytic.temp-file-limit) and was stopped: ask for fewer rows, or sort and join fewer of them.',
    });
    // The same sort within the limit completes (on disk: 1,000,000 rows are more than 4MB of work_mem).
    expect((await runReadOnly(t.db, 7, crossJoin, { ...options, tempFileLimitKb: 1024 * 1024 })).rows).toHaveLength(10);
  }, 60_000);

  it('counts the parts of a plan that hold work_mem each, on the plans PostgreSQL makes', async () => {
    // Each with the planner held to one plan shape, so that what is counted is known.
    const cases: [string, string, number][] = [
      ['', 'select id from ext_t7.big where id = 5', 0],
      ['', 'select pad from ext_t7.big order by pad', 1],
      ['set local enable_mergejoin = off; set local enable_nestloop = off;', 'select count(*) from ext_t7.big a join ext_t7.big b on b.id = a.id + 1', 1],
      ['', 'select pad from ext_t7.big where id not in (select id from ext_t7.big where id < 100)', 1],
      // One buffer for the CTE's rows, however many read it.
      ['', 'with c as materialized (select id from ext_t7.big where id < 10) select (select count(*) from c) + (select count(*) from c) as n', 1],
      // Three aggregates sorting their own input (none presorted: no Sort node below them).
      ['set local enable_presorted_aggregate = off;', "select count(distinct pad), string_agg(pad, ',' order by id), percentile_cont(0.5) within group (order by id) from ext_t7.big", 3],
      ['', 'select rank() over (order by pad) from ext_t7.big', 2],
      ['set local enable_hashagg = off;', 'select id % 7, id % 5, count(*) from ext_t7.big group by grouping sets ((id % 7), (id % 5))', 2],
      ['set local enable_sort = off;', 'select pad from ext_t7.big except select pad from ext_t7.big where id < 10', 1],
      ['set local enable_sort = off;', 'select count(*) from (select pad, count(*) from ext_t7.big group by pad) g', 1],
    ];
    const counted: [string, number][] = [];
    for (const [settings, sql] of cases) {
      await t.owner.query('begin');
      try {
        const results = (await t.owner.query(`set local max_parallel_workers_per_gather = 0; ${settings} explain (verbose, format json) ${sql}`)) as unknown as pg.QueryResult[];
        counted.push([sql, memoryParts(results[results.length - 1]!.rows[0]['QUERY PLAN'][0].Plan)]);
      } finally {
        await t.owner.query('rollback');
      }
    }
    expect(counted).toEqual(cases.map(([, sql, parts]) => [sql, parts]));
  });

  it('refuses, before it runs, a plan of more sorts and hashes than svc.analytic.statement-memory holds at svc.analytic.work-mem each; runs it where they fit', async () => {
    await t.owner.query(`create table if not exists ext_t7.small as select g as id, 7::bigint as tenant_id, md5(g::text) as name from generate_series(1, 3000) g;
      alter table ext_t7.small enable row level security;
      drop policy if exists tenant_isolation on ext_t7.small;
      create policy tenant_isolation on ext_t7.small using (tenant_id = core.current_tenant());
      grant select on ext_t7.small to ${TEST_ROLES.app}, ${TEST_ROLES.analytic};
      analyze ext_t7.small`);
    // 100 arms of a UNION (100 relations, guard 2's most), each grouping and sorting: each arm keeps its sort and its
    // group's memory until the statement ends. Over a table of 60,000 rows of 64 characters, such a statement took a
    // backend from 6 MB to 580 MB at 4MB of work_mem.
    const arms = Array.from({ length: 100 }, (_, i) => `(select name || '${i}' as k, count(*) as c from ext.small group by 1 order by 2 desc, 1 limit 1)`);
    const guarded = await guardQuery(arms.join(' union all '), { scope: 's', relations: [{ name: 'ext.small', columns: [{ name: 'name', type: 'text' }] }] }, { resolveRelation: () => '"ext_t7"."small"' });
    expect(guarded).toMatchObject({ ok: true });
    if (!guarded.ok) return;
    const scans = async () => {
      // Flushed before the call answers (see settled).
      await t.db.answerWithin('select pg_stat_force_next_flush()', 5000);
      const { rows } = await t.owner.query<{ n: string }>("select seq_scan::text as n from pg_stat_user_tables where relid = 'ext_t7.small'::regclass");
      return Number(rows[0]!.n);
    };
    const refusedWith = async (extra: { statementMemoryKb?: number }) => {
      const err = await runReadOnly(t.db, 7, guarded.sql, { ...options, ...extra }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(AnalyticRefusal);
      return err as AnalyticRefusal;
    };
    const before = await scans();
    const refused = await refusedWith({});
    expect(refused.guard).toBe(5);
    const parts = Number(/^The query's plan has (\d+) /.exec(refused.message)?.[1]);
    // A sort and a group per arm at least, and the bounded answer's two buffers.
    expect(parts).toBeGreaterThanOrEqual(202);
    expect(refused.message).toBe(
      `The query's plan has ${parts} sorts, hashes and buffers of rows, each holding up to 4MB (svc.analytic.work-mem): more than the 128 that fit in the 512MB one query may hold (svc.analytic.statement-memory). Sort, group and join fewer times.`,
    );
    // Refused on its plan: no arm read the table.
    expect(await scans()).toBe(before);
    // One part short of the budget: refused, naming what fits; at the budget, it runs.
    expect((await refusedWith({ statementMemoryKb: (parts - 1) * 4096 })).message).toContain(`more than the ${parts - 1} that fit in the ${(parts - 1) * 4}MB one query may hold`);
    expect((await runReadOnly(t.db, 7, guarded.sql, { ...options, statementMemoryKb: parts * 4096 })).rowCount).toBe(100);
    expect(await scans()).toBe(before + 100);
  }, 60_000);

  it('says at start whether the application role may set temp_file_limit (the migrations granted it here), and warns when it may not', async () => {
    expect(await tempFileLimitCheck(t.owner, TEST_ROLES)).toEqual({ settable: true });
    // The worker role was granted nothing of the kind: as an application role of an administrator's would be.
    const without = await tempFileLimitCheck(t.owner, { ...TEST_ROLES, app: TEST_ROLES.worker });
    expect(without.settable).toBe(false);
    expect(without.warning).toContain(`the application role ${TEST_ROLES.worker} may not set temp_file_limit, so analytic chat queries run without svc.analytic.temp-file-limit`);
    expect(without.warning).toContain(`grant set on parameter temp_file_limit to ${TEST_ROLES.worker}`);
  });
});
