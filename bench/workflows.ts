/**
 * The workflow dormancy sweep (docs/workflows.md, "Cost of a sweep"): how long one tick of
 * src/workflows/sweep.ts takes over an entity of WF_ROWS records (default 100,000), keyset-paged
 * in batches of WF_BATCH (default: svc.workflow.sweep.batch, 10,000). Not part of `npm run bench`:
 *
 *   node --import tsx bench/workflows.ts
 *   WF_ROWS=100000 WF_SOURCES=2 node --import tsx bench/workflows.ts   # the entity fused from two sources
 *
 * Ticks measured, in order: the first (every record gets a spell), a quiet one (nothing changed),
 * one after 1 % of the records changed state and 1 % disappeared, and one where every spell in a
 * dormancy state is due (`after: 1h`, the spells moved two hours back; two thirds of the records: one decision each, verified by
 * counting the outbox), then a quiet one again (nothing more is emitted).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { type Hub, startHub } from '../cmd/compose.js';
import { startEmbedded } from '../src/db/embedded.js';
import { createLogger, setLogger } from '../src/observability/logger.js';
import { benchConfig } from './support/hub-config.js';

const ROWS = Number(process.env.WF_ROWS ?? 100_000);
const SOURCES = Number(process.env.WF_SOURCES ?? 1);
const TENANT = 1;
const log = (line: string) => process.stdout.write(`${line}\n`);

const entity = {
  apiVersion: 'apps.svc.io/v1',
  kind: 'Entity',
  metadata: { name: 'partner' },
  spec: {
    scope: 'bench',
    key: 'partner_id',
    columns: [
      { name: 'partner_id', type: 'text' },
      { name: 'status', type: 'text' },
      ...(SOURCES > 1 ? [{ name: 'email', type: 'text' }] : []),
    ],
    sources: [
      { table: 'ext.bench_crm', key: 'external_id', columns: { partner_id: 'external_id', status: 'status' } },
      ...(SOURCES > 1 ? [{ table: 'ext.bench_erp', key: '$.code', columns: { email: 'email' } }] : []),
    ],
  },
};

const workflow = {
  apiVersion: 'apps.svc.io/v1',
  kind: 'Workflow',
  metadata: { name: 'partner-status' },
  spec: { entity: 'partner', stateColumn: 'status', states: ['prospect', 'active', 'closed'], dormancy: { after: '1h', states: ['prospect', 'active'] } },
};

async function main(): Promise<void> {
  setLogger(createLogger({ level: 'warn', json: true }));
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-workflows-'));
  let database: Awaited<ReturnType<typeof startEmbedded>> | undefined;
  let hub: Hub | undefined;
  let owner: pg.Client | undefined;
  try {
    database = await startEmbedded({ dataDir: join(dir, 'pg-data'), database: 'svc' });
    const overrides: Record<string, number> = process.env.WF_BATCH ? { 'svc.workflow.sweep.batch': Number(process.env.WF_BATCH) } : {};
    hub = await startHub(benchConfig(database.url, dir, overrides), { api: false, background: false });
    owner = new pg.Client({ connectionString: database.url });
    await owner.connect();
    await hub.services.connectors.ext.ensureTable(TENANT, 'ext.bench_crm', [{ name: 'status', path: '$.status', type: 'text' }]);
    await owner.query(
      `insert into ext_t1.bench_crm (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, status)
       select 1, 'p' || lpad(i::text, 7, '0'), md5(i::text), '{}', gen_random_uuid(), gen_random_uuid(), (array['prospect','active','closed'])[1 + i % 3]
         from generate_series(1, $1::int) i`,
      [ROWS],
    );
    if (SOURCES > 1) {
      await hub.services.connectors.ext.ensureTable(TENANT, 'ext.bench_erp', [{ name: 'email', path: '$.email', type: 'text' }]);
      await owner.query(
        `insert into ext_t1.bench_erp (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, email)
         select 1, 'erp-' || i, md5('erp-' || i), jsonb_build_object('code', 'p' || lpad(i::text, 7, '0')), gen_random_uuid(), gen_random_uuid(), 'p' || i || '@erp.example'
           from generate_series(1, $1::int) i`,
        [ROWS],
      );
    }
    await owner.query('analyze');
    await hub.services.entities.apply(TENANT, entity, 'bench');
    await hub.services.workflows.apply(TENANT, workflow, 'bench');
    log(`entity of ${ROWS.toLocaleString('en-US')} records from ${SOURCES} source(s), batch ${hub.services.config.int('svc.workflow.sweep.batch')}`);

    const tick = async (what: string) => {
      const started = performance.now();
      const r = await hub!.services.workflows.sweep();
      log(`${what.padEnd(44)} ${String(Math.round(performance.now() - started)).padStart(6)} ms  ${JSON.stringify(r)}`);
      return r;
    };
    await tick('first tick (every record a new spell)');
    await tick('quiet tick');
    await owner.query(`update ext_t1.bench_crm set status = case status when 'prospect' then 'active' else 'prospect' end where id % 100 = 1`);
    await owner.query(`delete from ext_t1.bench_crm where id % 100 = 2`);
    await tick('1 % changed state, 1 % gone');
    // An hour passes (the spells are moved back rather than waited for).
    await owner.query(`update workflows.spells set since = since - interval '2 hours'`);
    const due = await tick('every dormant spell due (one decision each)');
    const { rows } = await owner.query(`select count(*)::int as n, count(distinct payload->>'key')::int as keys from events.outbox where type = 'decision.dormant.partner-status'`);
    log(`outbox: ${rows[0].n} decisions for ${rows[0].keys} records (the tick reported ${due.emitted})`);
    await tick('quiet tick after');
    const again = await owner.query(`select count(*)::int as n from events.outbox where type = 'decision.dormant.partner-status'`);
    log(`outbox after the last tick: ${again.rows[0].n}`);
  } finally {
    await owner?.end();
    await hub?.stop();
    await database?.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
