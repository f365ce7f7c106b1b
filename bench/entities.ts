/**
 * The Entity benchmark (docs/entities.md, "View or read time"): what reading an entity's fused
 * relation costs on about 200,000 fused rows, and the alternatives it was chosen over, measured in
 * the same run on the same data:
 *
 * - `join` (what src/entities/relation.ts builds): the sources joined on the key by FULL OUTER JOINs;
 * - `union + group by`: the same rows as one UNION ALL grouped by the key, values and conflicts
 *   picked by ordered aggregates (built here from the same per-source subqueries);
 * - a plain view of the `join` SQL (security_invoker, so row-level security still applies): what a
 *   view would cost to read, and the proof that it blocks the connector delete path's DROP TABLE;
 * - a materialized view: its refresh and its read (it has no row-level security, so it could only
 *   ever be a per-tenant object; measured as the ceiling of a stored copy);
 * - the catalog check entityRelation makes before every read.
 *
 * Each variant is timed twice: computed in the server (`count(*)` and the length of every row's
 * text, so every column is computed) and fetched whole by the client (node-postgres), as an export
 * would. Two sources: a CRM table keyed by external_id (N rows) and an ERP table keyed by a
 * JSONPath into data (N rows, 90 % of the keys shared, 1 % of them twice, some values disagreeing).
 * BENCH_ROUNDS rounds (default 7) after one warm-up, each round running every variant once (so a
 * change of load weighs on all alike); medians and minimums. Prints a table, writes bench/results/entities.json.
 *
 *   node --import tsx bench/entities.ts
 *   ENTITY_ROWS=20000 BENCH_ROUNDS=2 node --import tsx bench/entities.ts   # a quick look
 */
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { type Hub, startHub } from '../cmd/compose.js';
import { startEmbedded } from '../src/db/embedded.js';
import { entityRelation, fusedRelationSql, sourceSubquerySql, valueColumn } from '../src/entities/relation.js';
import { type EntityDef, loadEntity } from '../src/entities/store.js';
import { createLogger, setLogger } from '../src/observability/logger.js';
import { machineFacts, probeMachine } from './support/measure.js';
import { benchConfig } from './support/hub-config.js';

const ROWS = Number(process.env.ENTITY_ROWS ?? 200_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);
const RESULTS = fileURLToPath(new URL('./results/', import.meta.url));
const TENANT = 1;
const log = (line: string) => process.stdout.write(`${line}\n`);
const round = (value: number, digits = 1) => Math.round(value * 10 ** digits) / 10 ** digits;
const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};

const MANIFEST = {
  apiVersion: 'apps.svc.io/v1',
  kind: 'Entity',
  metadata: { name: 'partner' },
  spec: {
    scope: 'bench',
    key: 'partner_id',
    columns: [
      { name: 'partner_id', type: 'text' },
      { name: 'name', type: 'text' },
      { name: 'email', type: 'text' },
      { name: 'country', type: 'text' },
      { name: 'credit_limit', type: 'numeric' },
    ],
    sources: [
      { table: 'ext.bench_crm', key: 'external_id', columns: { name: 'name', email: '$.contact.email', country: 'country', credit_limit: 'credit_limit' } },
      { table: 'ext.bench_erp', key: '$.code', columns: { email: 'email', country: 'country' } },
    ],
  },
};

/** The same fusion as one UNION ALL grouped by the key (the alternative relation.ts does not use). */
function unionGroupBySql(entity: EntityDef): string {
  const columns = entity.columns.map((c, j) => ({ c, j })).filter(({ c }) => c.name !== entity.key);
  const branches = entity.sources.map((s, i) => {
    const values = columns.map(({ c, j }) => (s.columns[c.name] !== undefined ? valueColumn(j) : `null::text as ${valueColumn(j)}`));
    return `select ${i} as _s, ${pg.escapeLiteral(s.table)}::text as _t, _k, ${values.join(', ')} from (${sourceSubquerySql(TENANT, entity, s)}) s`;
  });
  const outputs = ['u._k as _entity_id'];
  const conflicts: Array<{ test: string; ledger: string }> = [];
  for (const c of entity.columns) {
    if (c.name === entity.key) {
      outputs.push(`u._k as ${pg.escapeIdentifier(c.name)}`);
      continue;
    }
    const v = `u.${valueColumn(entity.columns.indexOf(c))}`;
    outputs.push(`(array_agg(${v} order by u._s) filter (where ${v} is not null))[1] as ${pg.escapeIdentifier(c.name)}`);
    if (entity.sources.filter((s) => s.columns[c.name] !== undefined).length > 1) {
      const test = `count(distinct ${v}) > 1`;
      conflicts.push({ test, ledger: `case when ${test} then jsonb_build_object(${pg.escapeLiteral(c.name)}::text, jsonb_object_agg(u._t, ${v}) filter (where ${v} is not null)) else '{}'::jsonb end` });
    }
  }
  const any = conflicts.map((x) => x.test).join(' or ') || 'false';
  outputs.push(`${conflicts.map((x) => x.ledger).join(' || ') || `'{}'::jsonb`} as _conflicts`, `case when ${any} then 'precedence' else 'none' end as _resolution`);
  return `select ${outputs.join(', ')} from (${branches.join(' union all ')}) u group by u._k`;
}

async function fill(owner: pg.Client): Promise<void> {
  // CRM: keys 1..N; ERP: keys from 10 % of N + 1 to 110 % of N (90 % shared), 1 % of them twice
  // (a later, different e-mail: the first ingested wins); 10 % of shared e-mails and 5 % of
  // countries disagree.
  await owner.query(
    `insert into ext_t1.bench_crm (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, name, country, credit_limit)
     select 1, i::text, md5(i::text), jsonb_build_object('contact', jsonb_build_object('email', 'p' || i || '@crm.example')),
            gen_random_uuid(), gen_random_uuid(), 'Partner ' || i, (array['FR','DE','ES','IT','NL'])[1 + i % 5], (i % 1000) * 500
       from generate_series(1, $1::int) i`,
    [ROWS],
  );
  await owner.query(
    `insert into ext_t1.bench_erp (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, email, country)
     select 1, 'erp-' || n, md5('erp-' || n), jsonb_build_object('code', k::text),
            gen_random_uuid(), gen_random_uuid(),
            case when k % 10 = 0 then 'p' || k || '@erp.example' else 'p' || k || '@crm.example' end,
            case when k % 20 = 0 then 'PT' else (array['FR','DE','ES','IT','NL'])[1 + k % 5] end
       from (select n, case when n > $1::int then (n - $1::int) * 100 + $2::int / 10 else n + $2::int / 10 end as k
               from generate_series(1, $1::int + $1::int / 100) n) g`,
    [ROWS, ROWS],
  );
  await owner.query('analyze ext_t1.bench_crm; analyze ext_t1.bench_erp');
}

async function main(): Promise<void> {
  setLogger(createLogger({ level: 'warn', json: true }));
  const benchStart = performance.now();
  const loadAtStart = loadavg().map((l) => round(l, 2));
  await probeMachine(log);
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-entities-'));
  // mkdtemp makes it 0700: run as root, PostgreSQL (the postgres user) could not enter it and its
  // cluster would go to /var/lib/svc-hub/clusters, which removing `dir` does not remove.
  chmodSync(dir, 0o755);
  let database: Awaited<ReturnType<typeof startEmbedded>> | undefined;
  let hub: Hub | undefined;
  let owner: pg.Client | undefined;
  try {
    database = await startEmbedded({ dataDir: join(dir, 'pg-data'), database: 'svc' });
    hub = await startHub(benchConfig(database.url, dir), { api: false, background: false });
    owner = new pg.Client({ connectionString: database.url });
    await owner.connect();
    const ext = hub.services.connectors.ext;
    await ext.ensureTable(TENANT, 'ext.bench_crm', [
      { name: 'name', path: '$.name', type: 'text' },
      { name: 'country', path: '$.country', type: 'text' },
      { name: 'credit_limit', path: '$.credit_limit', type: 'numeric' },
    ]);
    await ext.ensureTable(TENANT, 'ext.bench_erp', [
      { name: 'email', path: '$.email', type: 'text' },
      { name: 'country', path: '$.country', type: 'text' },
    ]);
    const filled = performance.now();
    await fill(owner);
    log(`filled ext.bench_crm and ext.bench_erp (${ROWS.toLocaleString('en-US')} + ${(ROWS + ROWS / 100).toLocaleString('en-US')} rows) in ${round((performance.now() - filled) / 1000)} s`);
    const { db } = hub.services;
    await hub.services.entities.apply(TENANT, undefined, MANIFEST, 'bench');
    const entity = (await db.withTenant(TENANT, (tx) => loadEntity(tx, 'partner')))!;
    const joinSql = fusedRelationSql(TENANT, entity);
    const unionSql = unionGroupBySql(entity);

    const app = (await db.withTenant(TENANT, (tx) => tx.query<{ r: string }>('select current_user as r'))).rows[0]!.r;
    await owner.query('create schema if not exists bench_views');
    await owner.query(`grant usage on schema bench_views to ${pg.escapeIdentifier(app)}`);
    await owner.query(`create view bench_views.partner with (security_invoker = true) as ${joinSql}`);
    await owner.query(`grant select on bench_views.partner to ${pg.escapeIdentifier(app)}`);
    await owner.query(`create materialized view bench_views.partner_mat as ${joinSql}`);
    await owner.query(`grant select on bench_views.partner_mat to ${pg.escapeIdentifier(app)}`);

    // The view holds the ext table: the delete path's DROP TABLE fails while it exists.
    let dropRefused = '';
    await owner.query('begin');
    try {
      await owner.query('drop table ext_t1.bench_erp');
    } catch (err) {
      dropRefused = `${(err as { code?: string }).code}: ${(err as Error).message}`;
    }
    await owner.query('rollback');
    log(`DROP TABLE ext_t1.bench_erp with the view in place: ${dropRefused || 'succeeded'}`);

    const server = (from: string) => `select count(*)::int as n, sum(length(e::text))::bigint as bytes from ${from} e`;
    const timed = async (fn: () => Promise<number>): Promise<{ ms: number; rows: number }> => {
      const started = performance.now();
      const rows = await fn();
      return { ms: performance.now() - started, rows };
    };
    const inTenant = (sql: string) => () => db.withTenant(TENANT, async (tx) => (await tx.query<{ n: number }>(sql)).rows[0]!.n);
    const fetched = (sql: string) => () => db.withTenant(TENANT, async (tx) => (await tx.query(`select * from ${sql} e`)).rows.length);
    const variants: Array<[string, () => Promise<number>]> = [
      ['join (relation.ts), server', inTenant(server(`(${joinSql})`))],
      ['union + group by, server', inTenant(server(`(${unionSql})`))],
      ['view of the join, server', inTenant(server('bench_views.partner'))],
      ['materialized view, server', inTenant(server('bench_views.partner_mat'))],
      ['join (relation.ts), fetched', fetched(`(${joinSql})`)],
      ['union + group by, fetched', fetched(`(${unionSql})`)],
      ['view of the join, fetched', fetched('bench_views.partner')],
      ['materialized view, fetched', fetched('bench_views.partner_mat')],
      ['materialized view refresh', async () => (await owner!.query('refresh materialized view bench_views.partner_mat')).rowCount ?? 0],
      ['entityRelation (catalog check + SQL)', () => db.withTenant(TENANT, async (tx) => (await entityRelation(tx, entity)).length)],
    ];
    const conflicts = await db.withTenant(TENANT, async (tx) =>
      (await tx.query<{ fused: number; conflicted: number }>(`select count(*)::int as fused, count(*) filter (where _resolution = 'precedence')::int as conflicted from (${joinSql}) e`)).rows[0]!,
    );
    const same = await db.withTenant(TENANT, async (tx) =>
      (await tx.query<{ n: number }>(`select count(*)::int as n from ((${joinSql}) except all (${unionSql})) d`)).rows[0]!.n,
    );
    log(`${conflicts.fused.toLocaleString('en-US')} fused rows, ${conflicts.conflicted.toLocaleString('en-US')} with a conflict; join and union + group by differ in ${same} rows`);
    if (same !== 0) throw new Error('the two fusions disagree: the comparison would be meaningless');

    // Round-robin: every round runs every variant once, so a change of the machine's load during the
    // run weighs on all of them alike.
    for (const [, fn] of variants) await fn(); // warm-up
    const runs = new Map<string, Array<{ ms: number; rows: number }>>(variants.map(([name]) => [name, []]));
    for (let r = 0; r < ROUNDS; r++) for (const [name, fn] of variants) runs.get(name)!.push(await timed(fn));
    const figures: Record<string, { medianMs: number; minMs: number; maxMs: number; rows: number }> = {};
    for (const [name] of variants) {
      const ms = runs.get(name)!.map((x) => x.ms);
      figures[name] = { medianMs: round(median(ms)), minMs: round(Math.min(...ms)), maxMs: round(Math.max(...ms)), rows: runs.get(name)![0]!.rows };
      log(`${name.padEnd(40)} ${String(figures[name].medianMs).padStart(9)} ms (min ${figures[name].minMs}, max ${figures[name].maxMs})`);
    }
    const plan = await db.withTenant(TENANT, async (tx) => (await tx.query<{ 'QUERY PLAN': string }>(`explain ${server(`(${joinSql})`)}`)).rows.map((r) => r['QUERY PLAN']));
    const unionPlan = await db.withTenant(TENANT, async (tx) => (await tx.query<{ 'QUERY PLAN': string }>(`explain ${server(`(${unionSql})`)}`)).rows.map((r) => r['QUERY PLAN']));
    // A view is inlined: its plan must be the subquery's, node for node and cost for cost.
    const viewPlan = await db.withTenant(TENANT, async (tx) => (await tx.query<{ 'QUERY PLAN': string }>(`explain ${server('bench_views.partner')}`)).rows.map((r) => r['QUERY PLAN']));
    const viewSamePlan = JSON.stringify(viewPlan) === JSON.stringify(plan);
    log(`the view's plan is the subquery's: ${viewSamePlan}`);
    const result = {
      rows: { crm: ROWS, erp: ROWS + ROWS / 100, fused: conflicts.fused, conflicted: conflicts.conflicted },
      rounds: ROUNDS,
      figures,
      dropWithView: dropRefused,
      viewSamePlan,
      plans: { join: plan, unionGroupBy: unionPlan, view: viewPlan },
      ...machineFacts(benchStart, loadAtStart),
    };
    mkdirSync(RESULTS, { recursive: true });
    writeFileSync(join(RESULTS, 'entities.json'), `${JSON.stringify(result, null, 2)}\n`);
    log(`wrote bench/results/entities.json (${result.benchSeconds} s in all)`);
  } finally {
    await owner?.end().catch(() => undefined);
    await hub?.stop();
    await database?.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
