import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { type Client, devClient, ownerClient } from '../../test/harness/api-client.js';
import { ITEM_ENTITY, itemS3Export, prepareItemExports } from '../../test/harness/export-manifests.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { until } from '../../test/harness/until.js';
import type { Database } from '../db/database.js';
import { egressPolicy } from '../egress/config.js';
import { NotFoundError, ScopeNotGranted } from '../errors.js';
import { type Caller, createExportServices, type ExportServices } from './services.js';

/**
 * A caller holding scope crm starts (or retries) a run of an export of scope crm while an admin
 * re-applies the export to scope sales (another entity) between the caller's scope check and the
 * run's claim, or between the claim and the run's stream, on the real PostgreSQL: the caller never
 * gets a run of the sales definition. Its scope was checked in one transaction and the run claimed
 * in the next, and a run streams the definition stored when it starts.
 */

let hub: TestHub;
let owner: pg.Client;
let api: Client;
let crmOnly: Caller;
const made: ExportServices[] = [];

/** Entity `ledger`: `item`'s rows under scope sales. */
const LEDGER_ENTITY = { ...ITEM_ENTITY, metadata: { name: 'ledger' }, spec: { ...ITEM_ENTITY.spec, scope: 'sales' } };

beforeAll(async () => {
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
  api = devClient(hub.url, 1);
  await prepareItemExports(hub, api);
  expect((await api.post('/api/entities/apply', LEDGER_ENTITY)).status).toBe(201);
  const created = await api.post('/api/tenants/1/users', { login: 'crm-only', name: 'CRM only' });
  const userId = (created.body as { id: number }).id;
  expect((await api.put(`/api/tenants/1/users/${userId}/scopes`, { scopes: ['crm'] })).status).toBe(200);
  crmOnly = { userId: String(userId) };
});

afterAll(async () => {
  for (const services of made) await services.close();
  await owner?.end();
  await hub?.stop();
});

/** Export `name` of `item` (scope crm) to an endpoint nothing listens on; `sales`: of `ledger`, scope sales. */
function manifest(name: string, sales = false) {
  const exp = itemS3Export(name, 'http://127.0.0.1:9');
  return sales ? { ...exp, spec: { ...exp.spec, scope: 'sales', source: { entity: 'ledger' } } } : exp;
}

/** Export services whose tenant transaction number `nth` waits for `between` first. */
function services(nth: number, between: () => Promise<void>) {
  const db = hub.services.db;
  let transactions = 0;
  const staged = Object.assign(Object.create(db) as Database, {
    withTenant: (async (tenantId, fn) => {
      if (++transactions === nth) await between();
      return db.withTenant(tenantId, fn);
    }) as Database['withTenant'],
  });
  const made1 = createExportServices({ config: hub.config, db: staged, secrets: hub.services.secrets, egress: egressPolicy(hub.config) });
  made.push(made1);
  return made1;
}

const reapplyToSales = (name: string) => async () => {
  expect((await api.post('/api/exports/apply', manifest(name, true))).status).toBe(200);
};

/** The run's end, or the refusal of its start. */
async function outcome(start: () => Promise<{ id: string }>): Promise<string> {
  try {
    const run = await start();
    const ended = async () => {
      const { rows } = await owner.query<{ status: string; failure_code: string | null; failure_reason: string | null }>(
        'select status, failure_code, failure_reason from exports.runs where id = $1',
        [run.id],
      );
      return rows[0]!.status !== 'Running' && `${rows[0]!.status} ${rows[0]!.failure_code}: ${rows[0]!.failure_reason}`;
    };
    return await until('the run to end', ended, { everyMs: 100 }).catch(() => 'still running');
  } catch (err) {
    if (err instanceof ScopeNotGranted) return 'refused: scope not granted';
    throw err;
  }
}

describe('an export re-applied to a scope the caller does not hold while the caller starts a run', () => {
  it('between the scope check and the claim, or the claim and the stream: no run of the new definition', async () => {
    expect((await api.post('/api/exports/apply', manifest('rescoped'))).status).toBe(201);
    const ended = await outcome(() => services(2, reapplyToSales('rescoped')).runs.start(1, crmOnly, 'rescoped', 'crm-only'));
    // It reached the destination with the sales definition before (Failed publication: nothing listens there).
    expect(ended).toMatch(/^(refused: scope not granted|Failed definition: export rescoped was re-applied to scope sales after the run was claimed under scope crm)/);
  }, 30_000);

  it('a retry: the same', async () => {
    expect((await api.post('/api/exports/apply', manifest('rescoped-retry'))).status).toBe(201);
    const first = await outcome(() => services(0, async () => undefined).runs.start(1, crmOnly, 'rescoped-retry', 'crm-only'));
    expect(first).toMatch(/^Failed publication/);
    const { rows } = await owner.query<{ id: string }>("select id from exports.runs where export_name = 'rescoped-retry'");
    const ended = await outcome(() => services(2, reapplyToSales('rescoped-retry')).runs.retry(1, crmOnly, 'rescoped-retry', rows[0]!.id, 'crm-only'));
    expect(ended).toMatch(/^(refused: scope not granted|Failed definition: export rescoped-retry was re-applied to scope sales after the run was claimed under scope crm)/);
  }, 30_000);
});

describe('an export re-applied to another scope between a run\'s claim and its stream, the run having no caller (svc export run)', () => {
  it('streams the definition stored then, and its record says the scope and entity it ran', async () => {
    expect((await api.post('/api/exports/apply', manifest('rescoped-cli'))).status).toBe(201);
    // Transactions: 1 reads the export, 2 claims the run, 3 streams it.
    const done = await services(3, reapplyToSales('rescoped-cli')).runNow(1, 'rescoped-cli');
    // It reached the destination with the sales definition (Failed publication: nothing listens there).
    expect(done).toMatchObject({ status: 'Failed', failureCode: 'publication', scope: 'sales', entity: 'ledger' });
    const { rows } = await owner.query("select scope, entity from exports.runs where export_name = 'rescoped-cli'");
    expect(rows).toEqual([{ scope: 'sales', entity: 'ledger' }]);
  }, 30_000);
});

/** Until `count` backends of the test database wait on a lock at once (statements blocked on a row another transaction holds). */
const lockWaiters = (count: number) =>
  until(`${count} lock waiter(s)`, async () => (await owner.query<{ n: number }>(`select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`)).rows[0]!.n >= count);

/** Export services whose transactions, once their work is done, wait for `gate` before they commit; `inside` resolves when one does. */
function holdingCommit(gate: Promise<void>) {
  const db = hub.services.db;
  let inside!: () => void;
  const reached = new Promise<void>((resolve) => {
    inside = resolve;
  });
  const staged = Object.assign(Object.create(db) as Database, {
    withTenant: ((tenantId: number, fn: (tx: unknown) => Promise<unknown>) =>
      db.withTenant(tenantId, async (tx) => {
        const result = await fn(tx);
        inside();
        await gate;
        return result;
      })) as Database['withTenant'],
  });
  const made1 = createExportServices({ config: hub.config, db: staged, secrets: hub.services.secrets, egress: egressPolicy(hub.config) });
  made.push(made1);
  return { services: made1, reached };
}

const settled = (p: Promise<unknown>) =>
  p.then(
    () => 'deleted',
    (err: unknown) => (err instanceof ScopeNotGranted ? 'refused: scope not granted' : err instanceof NotFoundError ? 'not found' : `failed: ${(err as Error).message}`),
  );

describe('deleting an export while another transaction changes or deletes it', () => {
  it('re-applied to a scope the caller does not hold meanwhile: the caller\'s delete is refused, the export stays', async () => {
    expect((await api.post('/api/exports/apply', manifest('rescoped-delete'))).status).toBe(201);
    let open!: () => void;
    const gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    // An admin's re-apply to scope sales, its transaction held open after the update.
    const admin = holdingCommit(gate);
    const reapplied = admin.services.manifests.apply(1, undefined, manifest('rescoped-delete', true), 'admin');
    await admin.reached;
    // The crm-only caller's delete meanwhile: it must read the export as the re-apply leaves it.
    const deleted = settled(hub.services.exports.manifests.remove(1, crmOnly, 'rescoped-delete'));
    await lockWaiters(1);
    open();
    expect(await reapplied).toMatchObject({ created: false });
    expect(await deleted).toBe('refused: scope not granted');
    const { rows } = await owner.query("select scope from exports.exports where name = 'rescoped-delete'");
    expect(rows).toEqual([{ scope: 'sales' }]);
  }, 30_000);

  it('two deletes at once: one deletes, the other finds no export (404), as a delete after a delete', async () => {
    expect((await api.post('/api/exports/apply', manifest('deleted-twice'))).status).toBe(201);
    const blocker = await ownerClient(hub.ownerUrl);
    try {
      // The row held, so that both deletes are under way before either can delete.
      await blocker.query('begin');
      await blocker.query("select 1 from exports.exports where name = 'deleted-twice' for update");
      const both = [settled(hub.services.exports.manifests.remove(1, undefined, 'deleted-twice')), settled(hub.services.exports.manifests.remove(1, undefined, 'deleted-twice'))];
      await lockWaiters(2);
      await blocker.query('rollback');
      expect((await Promise.all(both)).sort()).toEqual(['deleted', 'not found']);
    } finally {
      await blocker.end();
    }
  }, 30_000);
});
