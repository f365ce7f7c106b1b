import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { type Client, devClient, ownerClient } from '../../test/harness/api-client.js';
import { ITEM_ENTITY, itemS3Export, prepareItemExports } from '../../test/harness/export-manifests.js';
import { holdAfter, outcome, untilEndedOrWaiting } from '../../test/harness/held-transaction.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import type { Database } from '../db/database.js';
import { egressPolicy } from '../egress/config.js';
import { entityShape } from './entity-shape.js';
import { createExportServices, type ExportServices } from './services.js';
import { applyExport } from './store.js';

/**
 * A scheduler that found an export's slot due (reading the export), then a re-apply of the export
 * that no longer schedules that slot, committed (or holding the export's row) before the scheduler
 * records the slot's run, on the real PostgreSQL: the run is recorded only if the export as stored
 * then still names the slot.
 */

let hub: TestHub;
let owner: pg.Client;
let api: Client;
const made: ExportServices[] = [];

beforeAll(async () => {
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
  api = devClient(hub.url, 1);
  await prepareItemExports(hub, api);
});

afterAll(async () => {
  for (const services of made) await services.close();
  await owner?.end();
  await hub?.stop();
});

/** Export `name` to an endpoint nothing listens on, on `schedule` (none: unscheduled). */
function manifest(name: string, schedule?: string) {
  const exp = itemS3Export(name, 'http://127.0.0.1:9');
  return { ...exp, spec: { ...exp.spec, ...(schedule ? { schedule } : {}) } };
}

async function apply(name: string, schedule?: string): Promise<void> {
  expect((await api.post('/api/exports/apply', manifest(name, schedule))).status).toBeLessThan(300);
}

/** Export services whose clock stands at `now`, and whose second tenant transaction (the claim, after the scheduler read the export) waits for `between`. */
function scheduler(now: Date, between: () => Promise<void>) {
  const db = hub.services.db;
  let transactions = 0;
  const staged = Object.assign(Object.create(db) as Database, {
    withTenant: (async (tenantId, fn) => {
      if (++transactions === 2) await between();
      return db.withTenant(tenantId, fn);
    }) as Database['withTenant'],
  });
  const services = createExportServices({ config: hub.config, db: staged, secrets: hub.services.secrets, egress: egressPolicy(hub.config), now: () => now });
  made.push(services);
  return services.scheduler;
}

async function runsOf(name: string): Promise<string[]> {
  const { rows } = await owner.query<{ run: string }>("select trigger || ' ' || status as run from exports.runs where export_name = $1 order by started_at", [name]);
  return rows.map((r) => r.run);
}

const now = () => new Date(Math.floor(Date.now() / 60_000) * 60_000 + 30_000);

describe('a scheduled export slot found due before a re-apply', () => {
  it('that removes the schedule: no run of the slot', async () => {
    await apply('sc-gone', '* * * * *');
    const fired = await scheduler(now(), () => apply('sc-gone')).fire(1, 'sc-gone');
    expect(fired).toMatchObject({ kind: 'withdrawn', reason: expect.stringContaining('has no schedule now') });
    expect(await runsOf('sc-gone')).toEqual([]);
  }, 30_000);

  it('that changes the cron to one without that slot: no run of the slot', async () => {
    const at = now();
    const other = `${(at.getUTCMinutes() + 30) % 60} * * * *`;
    await apply('sc-cron', '* * * * *');
    const fired = await scheduler(at, () => apply('sc-cron', other)).fire(1, 'sc-cron');
    expect(fired).toMatchObject({ kind: 'withdrawn', reason: expect.stringContaining(`its schedule "${other}" has no slot at`) });
    expect(await runsOf('sc-cron')).toEqual([]);
  }, 30_000);

  it('or a delete of the export: no run of the slot', async () => {
    await apply('sc-deleted', '* * * * *');
    const fired = await scheduler(now(), async () => {
      expect((await api.del('/api/exports/sc-deleted')).status).toBe(204);
    }).fire(1, 'sc-deleted');
    expect(fired).toMatchObject({ kind: 'withdrawn', reason: expect.stringMatching(/^export sc-deleted was deleted after its slot \S+ fell due: the slot is not run$/) });
    expect(await runsOf('sc-deleted')).toEqual([]);
  }, 30_000);

  it('that keeps a cron naming the slot: the slot runs', async () => {
    const at = now();
    await apply('sc-kept', '* * * * *');
    const fired = await scheduler(at, () => apply('sc-kept', `${at.getUTCMinutes()} * * * *`)).fire(1, 'sc-kept');
    expect(fired.kind).toBe('started');
    if (fired.kind === 'started') await fired.done;
    expect(await runsOf('sc-kept')).toEqual(['scheduled Failed']);
  }, 30_000);

  it('that is storing the export as the slot is claimed: the claim waits for it, then records no run', async () => {
    await apply('sc-race', '* * * * *');
    const hold = holdAfter(/^\s*insert into exports\.exports/);
    let reapplied: Promise<string> = Promise.resolve('not sent');
    let ended = false;
    const fired = scheduler(now(), async () => {
      reapplied = outcome(hub.services.db.withTenant(1, (tx) => applyExport(hold.wrap(tx), manifest('sc-race'), { entity: entityShape }).then(() => 'applied')), true);
      await hold.held;
      void untilEndedOrWaiting(owner, () => ended, 'the claim').then(() => hold.go());
    })
      .fire(1, 'sc-race')
      .finally(() => {
        ended = true;
      });
    expect(await fired).toMatchObject({ kind: 'withdrawn', reason: expect.stringContaining('has no schedule now') });
    expect(await reapplied).toBe('committed: applied');
    expect(await runsOf('sc-race')).toEqual([]);
  }, 30_000);

  it('that moves it to another scope and entity, keeping the slot: the run records the scope and entity it ran', async () => {
    const ledger = { ...ITEM_ENTITY, metadata: { name: 'ledger' }, spec: { ...ITEM_ENTITY.spec, scope: 'sales' } };
    expect((await api.post('/api/entities/apply', ledger)).status).toBeLessThan(300);
    await apply('sc-scope', '* * * * *');
    const sales = manifest('sc-scope', '* * * * *');
    const fired = await scheduler(now(), async () => {
      expect((await api.post('/api/exports/apply', { ...sales, spec: { ...sales.spec, scope: 'sales', source: { entity: 'ledger' } } })).status).toBe(200);
    }).fire(1, 'sc-scope');
    expect(fired.kind).toBe('started');
    if (fired.kind === 'started') {
      expect(fired.run).toMatchObject({ scope: 'sales', entity: 'ledger' });
      await fired.done;
    }
    const { rows } = await owner.query("select scope, entity, status from exports.runs where export_name = 'sc-scope'");
    expect(rows).toEqual([{ scope: 'sales', entity: 'ledger', status: 'Failed' }]);
  }, 30_000);
});
