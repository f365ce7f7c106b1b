/**
 * The workflow dormancy sweep (docs/workflows.md, "Cost of a sweep"; docs/performance.md,
 * "workflows"): how long one tick of src/workflows/sweep.ts takes over an entity of 100,000 and of
 * 1,000,000 records (`WF_ROWS`, a comma-separated list), fused from one source and from two
 * (`WF_SOURCES`, default `1,2`), in batches of `svc.workflow.sweep.batch` (default 10,000;
 * `WF_BATCH`). `npm run bench:workflows`; writes bench/results/workflows.json.
 *
 * Ticks measured, in order, for each entity: the first (every record gets a spell), a quiet one
 * (nothing changed), one after 1 % of the records changed state and 1 % disappeared, one where every
 * spell in a dormancy state is due (`after: 1h`, the spells moved two hours back), then a quiet one
 * again. The ceiling, measured beside them: one plain read of the key and the state column of the
 * same fused relation, in key order, through a cursor (the read every tick makes, without any
 * writing). The quiet tick and the ceiling the target compares are each made REPEATS times, the
 * median reported (a single read of 100,000 records, 110 to 230 ms from run to run, moved the
 * growth the target compares by up to half); a quiet tick writes nothing, so its repeats sweep the
 * same state. Verified before anything is reported: one spell per record with a state, one
 * decision per due spell in the outbox (distinct keys), none more after the last tick.
 */
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { type Hub, startHub } from '../cmd/compose.js';
import { startEmbedded } from '../src/db/embedded.js';
import { entityRelation } from '../src/entities/relation.js';
import { loadEntity } from '../src/entities/store.js';
import { createLogger, setLogger } from '../src/observability/logger.js';
import { benchConfig } from './support/hub-config.js';
import { machineFacts, percentile, probeMachine, RssSampler, round } from './support/measure.js';

const RESULTS = fileURLToPath(new URL('./results/', import.meta.url));
/** Quiet ticks and reads of the relation for its ceiling, the median of each reported. */
const REPEATS = 3;

const median = (values: number[]) => percentile([...values].sort((a, b) => a - b), 50);
const SIZES = (process.env.WF_ROWS ?? '100000,1000000').split(',').map(Number);
const SOURCES = (process.env.WF_SOURCES ?? '1,2').split(',').map(Number);
const TENANT = 1;
const log = (line: string) => process.stdout.write(`${line}\n`);

const TICKS = ['first', 'quiet', 'changed', 'due', 'quietAfter'] as const;
type Tick = (typeof TICKS)[number];

function entityManifest(name: string, crm: string, erp: string | undefined) {
  return {
    apiVersion: 'apps.svc.io/v1',
    kind: 'Entity',
    metadata: { name },
    spec: {
      scope: 'bench',
      key: 'partner_id',
      columns: [{ name: 'partner_id', type: 'text' }, { name: 'status', type: 'text' }, ...(erp ? [{ name: 'email', type: 'text' }] : [])],
      sources: [
        { table: `ext.${crm}`, key: 'external_id', columns: { partner_id: 'external_id', status: 'status' } },
        // The second source is keyed by a JSONPath: no index can serve its key.
        ...(erp ? [{ table: `ext.${erp}`, key: '$.code', columns: { email: 'email' } }] : []),
      ],
    },
  };
}

const workflowManifest = (name: string, entity: string) => ({
  apiVersion: 'apps.svc.io/v1',
  kind: 'Workflow',
  metadata: { name },
  spec: { entity, stateColumn: 'status', states: ['prospect', 'active', 'closed'], dormancy: { after: '1h', states: ['prospect', 'active'] } },
});

interface CaseResult {
  rows: number;
  sources: number;
  ticks: Record<Tick, { ms: number; records: number; started: number; ended: number; emitted: number }>;
  /** The median of `ceilingReadsMs`. */
  ceilingMs: number;
  ceilingReadsMs: number[];
  /** Every quiet tick's ms (`ticks.quiet` is their median). */
  quietTicksMs: number[];
  quietToCeiling: number;
  peakRssMb: number;
  verified: { spells: number; decisions: number; distinctKeys: number; afterLastTick: number };
}

async function runCase(hub: Hub, owner: pg.Client, rows: number, sources: number): Promise<CaseResult> {
  const tag = `${sources}s_${rows}`;
  const crm = `bench_crm_${tag}`;
  const erp = sources > 1 ? `bench_erp_${tag}` : undefined;
  const entityName = `partner-${tag.replace('_', '-')}`;
  const workflow = `status-${tag.replace('_', '-')}`;
  await hub.services.connectors.ext.ensureTable(TENANT, `ext.${crm}`, [{ name: 'status', path: '$.status', type: 'text' }]);
  await owner.query(
    `insert into ext_t1.${crm} (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, status)
     select 1, 'p' || lpad(i::text, 7, '0'), md5(i::text), '{}', gen_random_uuid(), gen_random_uuid(), (array['prospect','active','closed'])[1 + i % 3]
       from generate_series(1, $1::int) i`,
    [rows],
  );
  if (erp) {
    await hub.services.connectors.ext.ensureTable(TENANT, `ext.${erp}`, [{ name: 'email', path: '$.email', type: 'text' }]);
    await owner.query(
      `insert into ext_t1.${erp} (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, email)
       select 1, 'erp-' || i, md5('erp-' || i), jsonb_build_object('code', 'p' || lpad(i::text, 7, '0')), gen_random_uuid(), gen_random_uuid(), 'p' || i || '@erp.example'
         from generate_series(1, $1::int) i`,
      [rows],
    );
  }
  await owner.query('vacuum analyze');
  await hub.services.entities.apply(TENANT, undefined, entityManifest(entityName, crm, erp), 'bench');
  await hub.services.workflows.apply(TENANT, undefined, workflowManifest(workflow, entityName), 'bench');
  log(`\nentity of ${rows.toLocaleString('en-US')} records from ${sources} source(s), batch ${hub.services.config.int('svc.workflow.sweep.batch')}`);

  const rss = new RssSampler();
  rss.start();
  const ticks = {} as CaseResult['ticks'];
  const tick = async (what: Tick) => {
    await owner.query('checkpoint');
    const started = performance.now();
    const r = await hub.services.workflows.sweep();
    const ms = round(performance.now() - started);
    log(`  ${what.padEnd(12)} ${String(ms).padStart(7)} ms  ${JSON.stringify(r)}`);
    if (r.workflows !== 1) throw new Error(`the tick swept ${r.workflows} workflows, not 1`);
    ticks[what] = { ms, records: r.records, started: r.started, ended: r.ended, emitted: r.emitted };
    return r;
  };

  // The ceiling: the relation read once, in key order, through a cursor, nothing written.
  const ceiling = async () => {
    const db = hub.services.db;
    const relation = await db.withTenant(TENANT, async (tx) => entityRelation(tx, (await loadEntity(tx, entityName))!));
    const started = performance.now();
    let read = 0;
    await db.withTenant(TENANT, async (tx) => {
      await tx.query(`declare c no scroll cursor for select _entity_id as k, status as s from (${relation}) r order by _entity_id`);
      for (;;) {
        const { rows: got } = await tx.query(`fetch forward ${hub.services.config.int('svc.workflow.sweep.batch')} from c`);
        read += got.length;
        if (!got.length) break;
      }
    });
    const ms = round(performance.now() - started);
    if (read !== rows) throw new Error(`the ceiling read ${read} records, not ${rows}`);
    return ms;
  };

  await tick('first');
  await owner.query('checkpoint');
  const ceilingReadsMs: number[] = [];
  for (let k = 0; k < REPEATS; k++) ceilingReadsMs.push(await ceiling());
  const ceilingMs = median(ceilingReadsMs);
  log(`  ${'ceiling'.padEnd(12)} ${String(ceilingMs).padStart(7)} ms  (one read of the relation, the median of ${ceilingReadsMs.join(', ')} ms)`);
  const quietTicksMs: number[] = [];
  const quiet: CaseResult['ticks']['quiet'][] = [];
  for (let k = 0; k < REPEATS; k++) {
    await tick('quiet');
    quiet.push(ticks.quiet);
    quietTicksMs.push(ticks.quiet.ms);
  }
  const quietMs = median(quietTicksMs);
  ticks.quiet = quiet.find((t) => t.ms === quietMs)!;
  log(`  ${'quiet'.padEnd(12)} ${String(ticks.quiet.ms).padStart(7)} ms  (the median of ${quietTicksMs.join(', ')} ms)`);
  await owner.query(`update ext_t1.${crm} set status = case status when 'prospect' then 'active' else 'prospect' end where id % 100 = 1`);
  await owner.query(`delete from ext_t1.${crm} where id % 100 = 2`);
  await tick('changed');
  const spellsBefore = await owner.query(
    `select count(*)::int as n, count(*) filter (where s.state in ('prospect', 'active'))::int as due
       from workflows.spells s join workflows.workflows w on w.id = s.workflow_id where w.name = $1`,
    [workflow],
  );
  const withState = await owner.query(`select count(*)::int as n from ext_t1.${crm} where status is not null`);
  if (spellsBefore.rows[0].n !== withState.rows[0].n) throw new Error(`${spellsBefore.rows[0].n} spells for ${withState.rows[0].n} records with a state`);
  // An hour passes (the spells are moved back rather than waited for).
  await owner.query(`update workflows.spells s set since = since - interval '2 hours' from workflows.workflows w where w.id = s.workflow_id and w.name = $1`, [workflow]);
  const due = await tick('due');
  const type = `decision.dormant.${workflow}`;
  const { rows: outbox } = await owner.query(`select count(*)::int as n, count(distinct payload->>'key')::int as keys from events.outbox where type = $1`, [type]);
  const expected = spellsBefore.rows[0].due;
  if (outbox[0].n !== expected || outbox[0].keys !== expected || due.emitted !== expected) {
    throw new Error(`the outbox holds ${outbox[0].n} decisions for ${outbox[0].keys} records (the tick reported ${due.emitted}); ${expected} spells were due`);
  }
  await tick('quietAfter');
  const again = await owner.query(`select count(*)::int as n from events.outbox where type = $1`, [type]);
  if (again.rows[0].n !== expected) throw new Error(`the tick after emitted ${again.rows[0].n - expected} more decisions`);
  const peakRssMb = rss.stop();

  // Leave nothing for the next case's ticks to sweep.
  await hub.services.workflows.remove(TENANT, undefined, workflow);
  await hub.services.entities.remove(TENANT, undefined, entityName);
  await owner.query(`delete from events.outbox where type = $1`, [type]);
  await owner.query(`drop table ext_t1.${crm}${erp ? `, ext_t1.${erp}` : ''}`);

  return {
    rows,
    sources,
    ticks,
    ceilingMs,
    ceilingReadsMs,
    quietTicksMs,
    quietToCeiling: round(ticks.quiet.ms / ceilingMs, 2),
    peakRssMb,
    verified: { spells: spellsBefore.rows[0].n, decisions: outbox[0].n, distinctKeys: outbox[0].keys, afterLastTick: again.rows[0].n - expected },
  };
}

async function main(): Promise<void> {
  setLogger(createLogger({ level: 'warn', json: true }));
  const benchStart = performance.now();
  const loadAtStart = loadavg().map((l) => round(l, 2));
  await probeMachine(log);
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-workflows-'));
  // mkdtemp makes it 0700: run as root, PostgreSQL (the postgres user) could not enter it and its
  // cluster would go to /var/lib/svc-hub/clusters, which removing `dir` does not remove.
  chmodSync(dir, 0o755);
  let database: Awaited<ReturnType<typeof startEmbedded>> | undefined;
  let hub: Hub | undefined;
  let owner: pg.Client | undefined;
  try {
    database = await startEmbedded({ dataDir: join(dir, 'pg-data'), database: 'svc' });
    const overrides: Record<string, number> = process.env.WF_BATCH ? { 'svc.workflow.sweep.batch': Number(process.env.WF_BATCH) } : {};
    hub = await startHub(benchConfig(database.url, dir, overrides), { api: false, background: false });
    owner = new pg.Client({ connectionString: database.url });
    await owner.connect();
    const cases: CaseResult[] = [];
    for (const rows of SIZES) for (const sources of SOURCES) cases.push(await runCase(hub, owner, rows, sources));
    const result = {
      batch: hub.services.config.int('svc.workflow.sweep.batch'),
      cases,
      ...machineFacts(benchStart, loadAtStart),
    };
    mkdirSync(RESULTS, { recursive: true });
    writeFileSync(join(RESULTS, 'workflows.json'), `${JSON.stringify(result, null, 2)}\n`);
    log(`\nwrote bench/results/workflows.json (${result.benchSeconds} s in all)`);
  } finally {
    await owner?.end().catch(() => undefined);
    await hub?.stop();
    await database?.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
