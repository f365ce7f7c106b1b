import { mkdtempSync, chmodSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { startHub } from '../cmd/compose.js';
import { startEmbedded } from '../src/db/embedded.js';
import { benchConfig } from './support/hub-config.js';
import { createLogger, setLogger } from '../src/observability/logger.js';
setLogger(createLogger({ level: 'warn', json: true }));
const dir = mkdtempSync(join(tmpdir(), 'emitexp-')); chmodSync(dir, 0o755);
const database = await startEmbedded({ dataDir: join(dir, 'pg'), database: 'svc' });
const hub = await startHub(benchConfig(database.url, dir), { api: false, background: false });
const db = hub.services.db;
await db.crossTenantQuery('x', `insert into core.tenants (id, name) values (7, 'seven') on conflict do nothing`).catch((e) => console.log('tenant', e.message));
function cpu(pid: number) { const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' '); return (Number(f[11]) + Number(f[12])) / 100; }
const UNNEST = `insert into events.outbox (tenant_id, type, payload) select $1, $2, p from unnest($3::jsonb[]) with ordinality as x(p, n) order by n returning id`;
const VALUES = `insert into events.outbox (tenant_id, type, payload) values ($1, $2, $3::jsonb) returning id`;
const N = 5000;
async function run(name: string, text: string, named: boolean, arrayArg: boolean) {
  let pid = 0; let c0 = 0;
  const t0 = performance.now();
  for (let start = 0; start < N; start += 50) {
    await db.withTenant(7, async (tx) => {
      if (!pid) { pid = (await tx.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid; c0 = cpu(pid); }
      for (let i = start; i < start + 50; i++) {
        const payload = JSON.stringify({ orgId: i, tenantId: 7 });
        const values = text === 'select 1' ? [] : [7, 'org.updated', arrayArg ? [payload] : payload];
        await tx.query(named ? ({ name: `e_${name}`, text, values } as never) : text, named ? (undefined as never) : values);
      }
    });
  }
  const ms = performance.now() - t0;
  console.log(name, 'µs/event backend cpu', Math.round((cpu(pid) - c0) * 1e6 / N), 'wall µs/event', Math.round(ms * 1000 / N));
}
import pg from 'pg';
const owner = new pg.Client({ connectionString: database.url }); await owner.connect();
for (let r = 0; r < 3; r++) {
  await run('unnest', UNNEST, false, true);
  await run('values', VALUES, false, false);
  await owner.query('alter table events.outbox disable trigger outbox_notify');
  await run('values-notrigger', VALUES, false, false);
  await owner.query('alter table events.outbox enable trigger outbox_notify');
  await run('select1', 'select 1', false, false);
}
await owner.end();
await hub.stop(); await database.stop();
process.exit(0);
