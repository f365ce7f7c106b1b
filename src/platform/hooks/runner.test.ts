import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { migratedDatabase, } from '../../../test/harness/database.js';
import type { Database } from '../../db/database.js';
import { Catalog, type HookDecl, loadCatalog, parseModule } from '../../events/catalog.js';
import { packageRoot } from '../../package-root.js';
import { type HookEvent, HookRunner } from './runner.js';

const FIXTURES = join(packageRoot(), 'src/platform/hooks/__fixtures__/modules');
let owner: pg.Client;
let db: Database;

beforeAll(async () => {
  ({ db, owner } = await migratedDatabase({ 201: 'acme', 202: 'globex' }, 2));
});

afterAll(async () => {
  await owner.end();
  await db.close();
});

/** A runner over the fixture module, a fake clock, and a handler that records what ran. */
function setup(ttlMs = 60_000) {
  let now = 1_000_000;
  const runner = new HookRunner(loadCatalog(FIXTURES), db, { ttlMs, now: () => now });
  const ran: string[] = [];
  runner.register('test.record', (_event, hook) => {
    ran.push(hook.id);
  });
  runner.register('test.fail', () => {
    throw new Error('shaky hook broke');
  });
  return { runner, ran, advance: (ms: number) => (now += ms) };
}

const created = (tenantId: number): HookEvent => ({ tenantId, type: 'platform.secret.created', payload: { name: 'n', by: 'b', at: 'a' } });

describe('HookRunner', () => {
  it('runs the matching enabled hooks in priority order, skipping disabled ones, isolating failures', async () => {
    const { runner, ran } = setup();
    const outcomes = await runner.run(created(201));
    expect(outcomes).toEqual([
      { id: 'early-bird', target: 'test.record', status: 'disabled' },
      { id: 'audit-trail', target: 'test.record', status: 'ran' },
      { id: 'shaky', target: 'test.fail', status: 'failed', error: 'shaky hook broke' },
      { id: 'welcome', target: 'test.record', status: 'ran' },
      { id: 'orphan', target: 'test.missing', status: 'no-handler' },
    ]);
    expect(ran).toEqual(['audit-trail', 'welcome']);
  });

  it('matches exact types and prefix.* patterns only', async () => {
    const { runner, ran } = setup();
    expect((await runner.run({ tenantId: 201, type: 'platform.secret.read', payload: {} })).map((o) => o.id)).toEqual(['audit-trail']);
    expect((await runner.run({ tenantId: 201, type: 'org.moved', payload: {} })).map((o) => o.id)).toEqual(['org-watch']);
    expect(await runner.run({ tenantId: 201, type: 'platform.secret', payload: {} })).toEqual([]);
    expect(await runner.run({ tenantId: 201, type: 'platform.secretive.read', payload: {} })).toEqual([]);
    expect(await runner.run({ tenantId: 201, type: 'organisation.created', payload: {} })).toEqual([]);
    expect(ran).toEqual(['audit-trail', 'org-watch']);
  });

  it('hands the handler the event and its own declaration, awaiting one before the next', async () => {
    const catalog = new Catalog([
      parseModule(
        'm.yaml',
        `module: m\nversion: "1"\nevents: []\nhooks:\n  - {id: slow, target: slow, events: [a.b], priority: 1}\n  - {id: fast, target: fast, events: [a.b], priority: 2}\n`,
      ),
    ]);
    const runner = new HookRunner(catalog, db, { ttlMs: 1000 });
    const order: string[] = [];
    const seen: Array<[HookEvent, HookDecl]> = [];
    runner.register('slow', async (event, hook) => {
      // It yields to the event loop (a macrotask): a runner not awaiting it would run the next one meanwhile.
      await new Promise((r) => setImmediate(r));
      seen.push([event, hook]);
      order.push('slow');
    });
    runner.register('fast', () => {
      order.push('fast');
    });
    const event = { tenantId: 201, type: 'a.b', payload: { x: 1 }, id: 42 };
    await runner.run(event);
    expect(order).toEqual(['slow', 'fast']);
    expect(seen[0]![0]).toBe(event);
    expect(seen[0]![1]).toMatchObject({ id: 'slow', module: 'm', priority: 1, enabled: true });
  });

  it('lists hooks in run order with the effective flag; toggle flips or sets a per-tenant override', async () => {
    const { runner } = setup();
    const list = await runner.list(201);
    expect(list.map((h) => [h.id, h.priority, h.enabled])).toEqual([
      ['org-watch', 1, true],
      ['early-bird', 5, false],
      ['audit-trail', 10, true],
      ['shaky', 15, true],
      ['welcome', 20, true],
      ['orphan', 30, true],
    ]);
    expect((await runner.toggle(201, 'early-bird', undefined, 'ann')).enabled).toBe(true);
    expect((await runner.toggle(201, 'early-bird', undefined, 'ann')).enabled).toBe(false);
    expect((await runner.toggle(201, 'welcome', false, 'ann')).enabled).toBe(false);
    expect((await runner.toggle(201, 'welcome', false, 'ann')).enabled).toBe(false);
    expect((await runner.toggle(201, 'early-bird', true, 'ann')).enabled).toBe(true);
    const after = await runner.list(201);
    expect(after.find((h) => h.id === 'early-bird')!.enabled).toBe(true);
    expect(after.find((h) => h.id === 'welcome')!.enabled).toBe(false);
    // The other tenant keeps the declared defaults.
    expect((await runner.list(202)).map((h) => h.enabled)).toEqual(list.map((h) => h.enabled));
    const rows = await owner.query('select tenant_id, hook_id, enabled, updated_by from platform.hook_overrides order by hook_id');
    expect(rows.rows).toEqual([
      { tenant_id: 201, hook_id: 'early-bird', enabled: true, updated_by: 'ann' },
      { tenant_id: 201, hook_id: 'welcome', enabled: false, updated_by: 'ann' },
    ]);
  });

  it('honours an override made elsewhere only once its tenant cache entry has expired', async () => {
    const { runner, ran, advance } = setup(60_000);
    await owner.query('delete from platform.hook_overrides');
    await runner.run(created(202));
    expect(ran).toEqual(['audit-trail', 'welcome']);
    // Another process disables welcome and enables early-bird for tenant 202.
    await owner.query(`insert into platform.hook_overrides (tenant_id, hook_id, enabled) values (202, 'welcome', false), (202, 'early-bird', true)`);
    ran.length = 0;
    advance(59_000);
    await runner.run(created(202));
    expect(ran).toEqual(['audit-trail', 'welcome']);
    ran.length = 0;
    advance(1_001);
    await runner.run(created(202));
    expect(ran).toEqual(['early-bird', 'audit-trail']);
    // Tenant 201's cache is its own.
    ran.length = 0;
    await runner.run(created(201));
    expect(ran).toEqual(['audit-trail', 'welcome']);
  });

  it('a toggle through the runner is seen at once by that runner', async () => {
    const { runner, ran } = setup(60_000);
    await owner.query('delete from platform.hook_overrides');
    await runner.run(created(201));
    await runner.toggle(201, 'welcome', false, 'ann');
    ran.length = 0;
    await runner.run(created(201));
    expect(ran).toEqual(['audit-trail']);
  });

  it('refuses duplicate hook ids and a second handler for one target', () => {
    const twice = new Catalog([
      parseModule('a.yaml', 'module: a\nversion: "1"\nevents: []\nhooks: [{id: h, target: t, events: [a.b]}]\n'),
      parseModule('b.yaml', 'module: b\nversion: "1"\nevents: []\nhooks: [{id: h, target: t, events: [a.b]}]\n'),
    ]);
    expect(() => new HookRunner(twice, db, { ttlMs: 1 })).toThrow('hook h is declared twice (modules a and b)');
    const { runner } = setup();
    expect(() => runner.register('test.record', () => undefined)).toThrow('hook target test.record already has a handler');
    expect(runner.unhandled().map((h) => h.id)).toEqual(['orphan']);
  });

  it('the core module declares no hooks', () => {
    expect(loadCatalog().hooks()).toEqual([]);
  });

  it('hasHooks: whether anything is declared (the hook consumer passes the outbox unread without)', () => {
    expect(new HookRunner(loadCatalog(), db, { ttlMs: 1 }).hasHooks()).toBe(false);
    expect(setup().runner.hasHooks()).toBe(true);
  });
});
